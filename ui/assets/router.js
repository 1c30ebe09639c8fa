// Path routing under the content path: /ui/<datacenter>/<route>, the URLs Consul's UI uses
// (/ui/dc1/services, /ui/dc1/services/web/instances, /ui/dc1/nodes, /ui/dc1/kv/a/b/edit).
// Links are plain <a href>s: the router takes over same-origin clicks below the content
// path (a modified click still opens a new tab), and the agent answers index.html for any
// such path, so every view has a URL that survives a reload.
//
// A route is {pattern, title, nav, mount} or {pattern, redirect}. Patterns are segments:
// `name` matches itself, `:param` one segment, `*param` the rest of the path. `mount(main,
// context)` draws the view; the live queries it opens through `context.watch` stop when the
// user leaves it.

import { settings } from './settings.js';
import * as live from './live.js';
import * as api from './api.js';
import * as alerts from './alerts.js';

const base = settings.contentPath;

function decodeSegment(segment) {
  try {
    return decodeURIComponent(segment);
  } catch {
    return null;
  }
}

function match(pattern, segments) {
  const parts = pattern.split('/');
  const params = {};
  for (let i = 0; i < parts.length; i += 1) {
    const part = parts[i];
    if (part.startsWith('*')) {
      params[part.slice(1)] = segments.slice(i).join('/');
      return params;
    }
    if (i >= segments.length) return null;
    if (part.startsWith(':')) {
      if (!segments[i]) return null;
      params[part.slice(1)] = segments[i];
    } else if (part !== segments[i]) {
      return null;
    }
  }
  return parts.length === segments.length ? params : null;
}

export class Router {
  constructor({ routes, navItems, main, nav, notFound, onRender = () => {} }) {
    this.routes = routes;
    this.onRender = onRender;
    this.navItems = navItems;
    this.main = main;
    this.nav = nav;
    this.notFound = notFound;
    this.watches = [];
    this.dc = settings.datacenter;
    this.rendered = false;
  }

  /** The URL of `path` (relative to the datacenter) in datacenter `dc`. */
  href(path, dc = this.dc) {
    return `${base}${encodeURIComponent(dc)}/${path}`;
  }

  /** The current location relative to its datacenter (`services`, `kv/a/b/edit`), with its query. */
  currentPath() {
    const rest = location.pathname.startsWith(base) ? location.pathname.slice(base.length) : '';
    const at = rest.indexOf('/');
    return (at < 0 ? '' : rest.slice(at + 1)) + location.search;
  }

  navigate(path, { replace = false } = {}) {
    const url = this.href(path);
    if (replace) history.replaceState(null, '', url);
    else history.pushState(null, '', url);
    this.render();
  }

  /** The same view in datacenter `dc`. */
  switchDatacenter(dc) {
    if (dc === this.dc) return;
    history.pushState(null, '', this.href(this.currentPath(), dc));
    this.render();
  }

  start() {
    document.addEventListener('click', (event) => this.onClick(event));
    window.addEventListener('popstate', () => this.render());
    this.render();
  }

  onClick(event) {
    if (event.defaultPrevented || event.button !== 0) return;
    if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    const link = event.target.closest('a[href]');
    if (!link || link.target || link.hasAttribute('download')) return;
    const url = new URL(link.href, location.href);
    if (url.origin !== location.origin || !url.pathname.startsWith(base)) return;
    event.preventDefault();
    if (url.pathname === location.pathname && url.search === location.search) return;
    history.pushState(null, '', url.pathname + url.search);
    this.render();
  }

  /** Resolves the current location to a route and its params, or redirects. */
  resolve() {
    const rest = location.pathname.startsWith(base) ? location.pathname.slice(base.length) : '';
    const raw = rest.split('/');
    const dc = decodeSegment(raw[0]);
    if (!dc) return { redirect: `${encodeURIComponent(settings.datacenter)}/services` };
    const segments = raw.slice(1).map(decodeSegment);
    if (segments.some((s) => s === null)) return { dc, route: null, params: {} };
    if (segments.length === 0 || (segments.length === 1 && segments[0] === '')) {
      return { redirect: `${encodeURIComponent(dc)}/services` };
    }
    const trimmed = segments[segments.length - 1] === '' ? segments.slice(0, -1) : segments;
    for (const route of this.routes) {
      const params = match(route.pattern, segments) || (route.pattern.includes('*') ? null : match(route.pattern, trimmed));
      if (params) return { dc, route, params };
    }
    return { dc, route: null, params: {} };
  }

  render() {
    const resolved = this.resolve();
    if (resolved.redirect) {
      history.replaceState(null, '', `${base}${resolved.redirect}`);
      this.render();
      return;
    }
    const { dc, route, params } = resolved;
    if (route && route.redirect) {
      this.dc = dc;
      this.navigate(route.redirect(params), { replace: true });
      return;
    }
    for (const watch of this.watches) watch.stop();
    this.watches = [];
    alerts.clearAll();
    this.dc = dc;
    this.main.replaceChildren();
    const view = route || this.notFound;
    const context = this.context(dc, params);
    view.mount(this.main, context);
    const title = typeof view.title === 'function' ? view.title(params) : view.title;
    document.title = `${title} · ${dc} · praetor`;
    this.drawNav(view.nav);
    this.onRender(dc);
    // After a navigation (not the first load), put keyboard and screen-reader focus on
    // the new view's heading, as a page load would.
    if (this.rendered) {
      const heading = this.main.querySelector('h1');
      if (heading) {
        heading.setAttribute('tabindex', '-1');
        heading.focus();
      }
    }
    this.rendered = true;
  }

  drawNav(current) {
    this.nav.replaceChildren(
      ...this.navItems.map((item) => {
        const li = document.createElement('li');
        const a = document.createElement('a');
        a.href = this.href(item.path);
        a.textContent = item.label;
        if (item.id === current) a.setAttribute('aria-current', 'page');
        li.append(a);
        return li;
      }),
    );
  }

  /** What a view gets: its params, URL helpers, and API calls scoped to its datacenter. */
  context(dc, params) {
    const local = dc === settings.datacenter;
    const withDc = (query) => {
      const params = new URLSearchParams(query || {});
      if (!local) params.set('dc', dc);
      return params;
    };
    return {
      dc,
      params,
      settings,
      alerts,
      href: (path) => this.href(path, dc),
      currentPath: () => this.currentPath(),
      navigate: (path, options) => this.navigate(path, options),
      watch: (path, options) => {
        const handle = live.watch(path, { ...options, query: withDc(options.query) });
        this.watches.push(handle);
        return handle;
      },
      get: (path, options = {}) => api.get(path, { ...options, query: withDc(options.query) }),
      put: (path, body, options = {}) => api.put(path, body, { ...options, query: withDc(options.query) }),
      del: (path, options = {}) => api.del(path, { ...options, query: withDc(options.query) }),
    };
  }
}
