// The page's entry point: the views, the router, and the header's datacenter switcher and
// login state.
//
// Every feature is a module under views/ exporting `routes` (and `nav`, for a top-level
// section), listed in FEATURES. The ACL views (and the login) are there only when the
// agent's settings say ACLs are enabled. Intentions and config entries are always listed:
// an agent without the service mesh answers 404, and those views say so.

import { Router } from './router.js';
import { h, append, replace } from './dom.js';
import { get } from './api.js';
import { settings } from './settings.js';
import { token, setToken, onTokenChange } from './auth.js';
import * as alerts from './alerts.js';
import * as services from './views/services.js';
import * as service from './views/service.js';
import * as nodes from './views/nodes.js';
import * as node from './views/node.js';
import * as kv from './views/kv.js';
import * as intentions from './views/intentions.js';
import * as config from './views/config.js';
import * as acl from './views/acl.js';
import * as login from './views/login.js';

const FEATURES = [services, service, nodes, node, kv, intentions, config, ...(settings.aclsEnabled ? [acl, login] : [])];

const notFound = {
  title: 'Not found',
  mount(main, context) {
    append(main,
      h('h1', null, 'Page not found'),
      h('p', null, 'Nothing lives at this address. ', h('a', { href: context.href('services') }, 'Go to the services.')),
    );
  },
};

// ---- the datacenter switcher -------------------------------------------------------------
// The datacenters come from /v1/catalog/datacenters, which does not block: they are read
// when the page loads and again each time the menu gets focus (a new datacenter shows the
// next time one opens it), never on a timer. With one datacenter its name is shown as text.

let datacenters = [settings.datacenter];

function drawDatacenters(current) {
  const slot = document.getElementById('datacenter');
  if (datacenters.length < 2) {
    slot.classList.add('dc');
    replace(slot, h('span', { class: 'visually-hidden' }, 'Datacenter '), current);
    return;
  }
  slot.classList.remove('dc');
  const select = h(
    'select',
    { id: 'dc-select', onchange: (event) => router.switchDatacenter(event.target.value), onfocus: refreshDatacenters },
    datacenters.map((dc) => h('option', { value: dc, selected: dc === current }, dc)),
  );
  replace(slot, h('label', { for: 'dc-select', class: 'visually-hidden' }, 'Datacenter'), select);
}

async function refreshDatacenters() {
  try {
    const { data } = await get('catalog/datacenters');
    if (!Array.isArray(data) || data.length === 0) return;
    const changed = data.join('\n') !== datacenters.join('\n');
    datacenters = data;
    // Redraw only when the list changed: replacing an open menu would close it.
    if (changed) drawDatacenters(router.dc);
  } catch {
    // The switcher keeps the list it had; the views report the agent's errors.
  }
}

// ---- login state ---------------------------------------------------------------------------

function drawAccount() {
  const slot = document.getElementById('account');
  if (!settings.aclsEnabled) return;
  const here = router.currentPath();
  replace(
    slot,
    token()
      ? h('button', { type: 'button', class: 'link', id: 'logout', onclick: () => setToken('') }, 'Log out')
      : h('a', { id: 'login-link', href: router.href(`login?next=${encodeURIComponent(here.startsWith('login') ? 'services' : here)}`) }, 'Log in'),
  );
}

const router = new Router({
  routes: FEATURES.flatMap((feature) => feature.routes),
  navItems: FEATURES.filter((feature) => feature.nav).map((feature) => feature.nav),
  main: document.getElementById('main'),
  nav: document.getElementById('nav'),
  notFound,
  onRender(dc) {
    drawDatacenters(dc);
    drawAccount();
  },
});

if (settings.aclsEnabled) {
  // A refusal offers to log in with another token.
  alerts.setForbiddenAction({
    label: 'Log in with another token',
    run: () => router.navigate(`login?next=${encodeURIComponent(router.currentPath())}`),
  });
  // A login or logout redraws the view, so everything is read again with the new token.
  onTokenChange(() => router.render());
}

router.start();
refreshDatacenters();
