// One service, in tabs that are links, as in Consul's UI:
//
//   services/<name>/instances   every instance with its node, address, tags and checks (node
//                               checks and its own, with output); under each, the sidecar
//                               proxy fronting it — its address, health and checks, and the
//                               upstreams it listens for — as Consul's UI shows a proxy with
//                               its instance rather than as a service of its own
//   services/<name>/topology    what the service talks to and what talks to it
//                               (/v1/internal/ui/service-topology), each with the intention
//                               decision for that connection
//   services/<name>/intentions  the intentions that apply to it, as source or destination
//
// Everything stays live (blocking queries). A dashboard link appears when the agent has a
// `service` entry in ui_config.dashboard_url_templates.

import { h, append, reconcile, filterRows, tagList, tableHead } from '../dom.js';
import { badge, checkCounts, counts, worst, normalize, summaryState } from '../health.js';
import { segment } from '../api.js';
import { accessNote, showAccess } from '../access.js';
import { intentionRow, intentionColumns } from './intentions.js';

const TABS = [
  ['instances', 'Instances'],
  ['topology', 'Topology'],
  ['intentions', 'Intentions'],
];

export const routes = [
  { pattern: 'services/:name', redirect: (p) => `services/${segment(p.name)}/instances` },
  { pattern: 'services/:name/:tab', nav: 'services', title: (p) => p.name, mount },
];

/** Fills a dashboard URL template (Consul's placeholders) for one service. */
function dashboardUrl(template, context, name) {
  const values = {
    'Service.Name': name,
    'Service.Namespace': '',
    'Service.Partition': '',
    Datacenter: context.dc,
  };
  return template.replace(/\{\{\s*([A-Za-z.]+)\s*\}\}/g, (whole, key) =>
    key in values ? encodeURIComponent(values[key]) : whole,
  );
}

export function checkTable(checks, { showService = true } = {}) {
  if (!checks || checks.length === 0) return h('p', { class: 'muted' }, 'No checks.');
  return h(
    'table',
    { class: 'checks' },
    h(
      'thead',
      null,
      h(
        'tr',
        null,
        h('th', { scope: 'col', class: 'health' }, h('span', { class: 'visually-hidden' }, 'Status')),
        h('th', { scope: 'col' }, 'Check'),
        h('th', { scope: 'col' }, 'Type'),
        showService ? h('th', { scope: 'col' }, 'Applies to') : null,
        h('th', { scope: 'col' }, 'Output'),
      ),
    ),
    h(
      'tbody',
      null,
      checks.map((check) => {
        const state = normalize(check.Status);
        return h(
          'tr',
          { class: `health-${state}`, dataset: { check: check.CheckID, health: state } },
          h('td', { class: 'health' }, badge(state)),
          h('th', { scope: 'row' }, check.Name || check.CheckID, check.Notes ? h('p', { class: 'notes' }, check.Notes) : null),
          h('td', null, check.Type || '—'),
          showService ? h('td', null, check.ServiceID ? `service ${check.ServiceID}` : 'node') : null,
          h(
            'td',
            { class: 'output' },
            check.Output
              ? h('details', { open: state !== 'passing' }, h('summary', null, 'Output'), h('pre', null, check.Output))
              : h('span', { class: 'muted' }, '—'),
          ),
        );
      }),
    ),
  );
}

// ---- instances ---------------------------------------------------------------------------

const addressOf = (entry) => {
  const address = entry.Service.Address || entry.Node.Address;
  return `${address}${entry.Service.Port ? `:${entry.Service.Port}` : ''}`;
};

/** The upstreams a proxy registration listens for, each with its local address. */
function upstreamTable(context, upstreams) {
  if (!upstreams.length) return h('p', { class: 'muted' }, 'No upstreams.');
  return h(
    'table',
    { class: 'upstreams' },
    h('caption', { class: 'visually-hidden' }, 'Upstreams of this proxy'),
    tableHead(['Upstream', 'Listens on', 'Datacenter']),
    h(
      'tbody',
      null,
      upstreams.map((upstream) => {
        const name = upstream.DestinationName;
        const query = upstream.DestinationType === 'prepared_query';
        const bind = upstream.LocalBindSocketPath || `${upstream.LocalBindAddress || '127.0.0.1'}:${upstream.LocalBindPort}`;
        return h(
          'tr',
          { dataset: { upstream: name } },
          h('th', { scope: 'row' }, query ? `${name} (prepared query)` : h('a', { href: context.href(`services/${segment(name)}/instances`) }, name)),
          h('td', null, h('code', null, bind)),
          h('td', null, upstream.Datacenter || 'this one'),
        );
      }),
    ),
  );
}

/** The sidecar proxy of one instance: where it listens, its health, checks and upstreams. */
function sidecarSection(context, proxy) {
  const state = worst(proxy.Checks);
  const service = proxy.Service;
  const upstreams = (service.Proxy && service.Proxy.Upstreams) || [];
  return h(
    'section',
    { class: `sidecar health-${state}`, dataset: { proxy: service.ID, health: state }, 'aria-label': `Sidecar proxy ${service.ID}` },
    h(
      'div',
      { class: 'instance-head' },
      badge(state),
      h('h3', null, 'Sidecar proxy ', h('a', { href: context.href(`services/${segment(service.Service)}/instances`) }, service.ID)),
      h('span', { class: 'muted' }, `listens on ${addressOf(proxy)}`),
      service.Proxy && service.Proxy.Mode === 'transparent' ? h('span', { class: 'kind' }, 'transparent') : null,
      h('span', { class: 'instance-counts' }, checkCounts(proxy.Checks)),
    ),
    upstreamTable(context, upstreams),
    h('details', { class: 'proxy-checks', open: state !== 'passing' }, h('summary', null, 'Proxy checks'), checkTable(proxy.Checks)),
  );
}

/** What the instance is in the mesh besides having a sidecar: a proxy itself, or native. */
function meshRole(context, service) {
  if (service.Kind === 'connect-proxy' && service.Proxy && service.Proxy.DestinationServiceName) {
    const destination = service.Proxy.DestinationServiceName;
    return h(
      'p',
      { class: 'role' },
      'Proxy for ',
      h('a', { href: context.href(`services/${segment(destination)}/instances`) }, destination),
      service.Proxy.DestinationServiceID ? ` (instance ${service.Proxy.DestinationServiceID})` : '',
    );
  }
  if (service.Connect && service.Connect.Native) return h('p', { class: 'role' }, 'Connect-native: speaks mTLS itself, without a proxy.');
  return null;
}

function instance(context, entry) {
  const { Node: node, Service: service, Checks: checks, Sidecar: sidecar } = entry;
  const state = worst(checks);
  const search = [service.ID, node.Node, addressOf(entry), ...(service.Tags || []), sidecar ? sidecar.Service.ID : ''].join(' ').toLowerCase();
  return h(
    'li',
    { class: `instance health-${state}`, dataset: { instance: service.ID, node: node.Node, health: state, search } },
    h(
      'div',
      { class: 'instance-head' },
      badge(state),
      h('h2', null, service.ID),
      h(
        'span',
        { class: 'muted' },
        'on ',
        h('a', { href: context.href(`nodes/${segment(node.Node)}/health-checks`) }, node.Node),
        ` · ${addressOf(entry)}`,
      ),
      h('span', { class: 'instance-counts' }, checkCounts(checks)),
    ),
    meshRole(context, service),
    service.Tags && service.Tags.length ? tagList(service.Tags) : null,
    checkTable(checks),
    sidecar ? sidecarSection(context, sidecar) : null,
  );
}

function mountInstances(main, context, header) {
  const name = context.params.name;
  const search = h('input', {
    id: 'instances-filter',
    type: 'search',
    placeholder: 'ID, node, address or tag',
    autocomplete: 'off',
    'aria-controls': 'instances',
  });
  const list = h('ul', { id: 'instances', class: 'instances', 'aria-label': `Instances of ${name}` });
  const note = accessNote('instances-access');
  append(main, h('div', { class: 'toolbar', role: 'search' }, h('label', { for: 'instances-filter' }, 'Filter'), search), note, list);
  let entries = [];
  let proxies = [];
  const refilter = () => {
    const shown = filterRows(list, search.value);
    const all = entries.length;
    const noun = all === 1 ? 'instance' : 'instances';
    header.count.textContent = shown === all ? `(${all} ${noun})` : `(${shown} of ${all} ${noun})`;
  };
  // Each instance with the sidecar that names it: same node, DestinationServiceID its ID.
  const draw = () => {
    const items = entries.map((entry) => ({
      ...entry,
      Sidecar:
        proxies.find(
          (p) =>
            p.Node.Node === entry.Node.Node &&
            p.Service.Kind === 'connect-proxy' &&
            p.Service.Proxy &&
            p.Service.Proxy.DestinationServiceID === entry.Service.ID,
        ) || null,
    }));
    reconcile(list, items, (e) => `${e.Node.Node}/${e.Service.ID}`, (e) => instance(context, e));
    refilter();
  };
  search.addEventListener('input', refilter);
  context.watch(`health/service/${segment(name)}`, {
    onData(data, result) {
      context.alerts.clear('instances');
      entries = data || [];
      showAccess(note, context, { count: entries.length, filtered: result.filtered, noun: `instances of ${name}`, none: `No instances of ${name} are registered.` });
      draw();
    },
    onError(error) {
      if (error.status === 403) {
        showAccess(note, context, { error, noun: `instances of ${name}` });
        return;
      }
      context.alerts.error(error, { key: 'instances', title: `Loading ${name} failed` });
    },
  });
  // The proxies fronting the service (and its Connect-native instances), live as well.
  context.watch(`health/connect/${segment(name)}`, {
    allowNotFound: true,
    onData(data) {
      context.alerts.clear('proxies');
      proxies = data || [];
      draw();
    },
    onError(error) {
      if (error.status === 403) return;
      context.alerts.error(error, { key: 'proxies', title: `Loading the proxies of ${name} failed` });
    },
  });
}

// ---- topology ----------------------------------------------------------------------------

/** Where a neighbour comes from, in words, per side. */
const SOURCES = {
  upstream: {
    'proxy-registration': 'this service’s proxy registration',
    'specific-intention': 'an intention (transparent proxy)',
    'wildcard-intention': 'a wildcard intention (transparent proxy)',
    'default-allow': 'the default allow (transparent proxy)',
    'routing-config': 'routing configuration only',
  },
  downstream: {
    'proxy-registration': 'its proxy registration',
    'specific-intention': 'an intention (transparent proxy)',
    'wildcard-intention': 'a wildcard intention (transparent proxy)',
    'default-allow': 'the default allow (transparent proxy)',
  },
};

/** The intention decision for one connection, in words. */
function decision(intention) {
  const verdict = intention.Allowed ? 'allowed' : 'denied';
  let why;
  if (intention.HasPermissions) why = 'L7 permissions decide each request; a plain TCP connection is refused';
  else if (intention.HasExact) why = 'by an intention naming both services';
  else why = `by a wildcard intention or the default (${intention.DefaultAllow ? 'allow' : 'deny'})`;
  return [h('strong', { class: `action-${intention.Allowed ? 'allow' : 'deny'}` }, verdict), ' ', h('span', { class: 'muted' }, why)];
}

/** One neighbour's row: its health, where it is known from, the connection's decision. */
function neighbourRow(context, side, item, self) {
  const state = summaryState(item);
  const intention = item.Intention || {};
  const [source, destination] = side === 'upstream' ? [self, item.Name] : [item.Name, self];
  // A refused connection offers the intention that would allow it (the form upserts).
  const allow = intention.Allowed
    ? null
    : h(
        'a',
        { class: 'fix', href: context.href(`intentions/create?source=${encodeURIComponent(source)}&destination=${encodeURIComponent(destination)}`) },
        'Allow with an intention',
      );
  return h(
    'tr',
    { class: `health-${state}`, dataset: { service: item.Name, allowed: String(Boolean(intention.Allowed)), source: item.Source || '' } },
    h('td', { class: 'health' }, badge(state)),
    h('th', { scope: 'row' }, h('a', { href: context.href(`services/${segment(item.Name)}/instances`) }, item.Name)),
    h('td', null, SOURCES[side][item.Source] || item.Source || '—'),
    h('td', null, decision(intention), allow ? [' ', allow] : null),
    h('td', null, item.InstanceCount ? counts(item.ChecksPassing, item.ChecksWarning, item.ChecksCritical) : h('span', { class: 'muted' }, 'no instances')),
  );
}

/** A live table of one side's neighbours, kept in place (unchanged rows stay as they are). */
function neighbourList(context, side, self) {
  const body = h('tbody');
  const table = h(
    'table',
    { class: 'list', id: `topology-${side}s`, hidden: true },
    h('caption', { class: 'visually-hidden' }, side === 'upstream' ? `Services ${self} connects to` : `Services that connect to ${self}`),
    tableHead(['Service', 'Known from', 'Connection', 'Checks'], { health: true }),
    body,
  );
  const empty = h('p', { class: 'muted', id: `topology-no-${side}s`, hidden: true }, side === 'upstream' ? 'No upstreams.' : 'No downstreams.');
  return {
    elements: [table, empty],
    update(items) {
      reconcile(body, items, (item) => item.Name, (item) => neighbourRow(context, side, item, self));
      table.hidden = items.length === 0;
      empty.hidden = items.length > 0;
    },
  };
}

function mountTopology(main, context) {
  const name = context.params.name;
  const facts = h('p', { class: 'muted', id: 'topology-facts' }, 'Loading…');
  const note = accessNote('topology-access');
  const upstreams = neighbourList(context, 'upstream', name);
  const downstreams = neighbourList(context, 'downstream', name);
  const up = h('section', { 'aria-labelledby': 'upstreams-title' }, h('h2', { id: 'upstreams-title' }, 'Upstreams'), h('p', { class: 'note' }, `What ${name} connects to.`), upstreams.elements);
  const down = h('section', { 'aria-labelledby': 'downstreams-title' }, h('h2', { id: 'downstreams-title' }, 'Downstreams'), h('p', { class: 'note' }, `What connects to ${name}.`), downstreams.elements);
  append(main, facts, note, h('div', { class: 'topology' }, up, down));
  context.watch(`internal/ui/service-topology/${segment(name)}`, {
    query: { kind: '' },
    onData(topology) {
      context.alerts.clear('topology');
      facts.textContent = `Protocol: ${topology.Protocol || 'tcp'}${topology.TransparentProxy ? ` · every proxy of ${name} is transparent` : ''}`;
      // The two lists say when they are empty; the note speaks only of what ACLs hid.
      showAccess(note, context, { count: 1, filtered: topology.FilteredByACLs, noun: 'services connected to it' });
      upstreams.update(topology.Upstreams || []);
      downstreams.update(topology.Downstreams || []);
    },
    onError(error) {
      if (error.status === 403) {
        facts.textContent = '';
        showAccess(note, context, { error, noun: `the topology of ${name}` });
        return;
      }
      context.alerts.error(error, { key: 'topology', title: `Loading the topology of ${name} failed` });
    },
  });
}

// ---- intentions --------------------------------------------------------------------------

/** The intentions that can apply to `name`: those naming it, and the wildcard ones. */
function intentionFilter(name) {
  const quoted = JSON.stringify(name);
  return `SourceName == ${quoted} or DestinationName == ${quoted} or SourceName == "*" or DestinationName == "*"`;
}

function mountIntentions(main, context) {
  const name = context.params.name;
  const body = h('tbody');
  const table = h(
    'table',
    { class: 'list', id: 'service-intentions', hidden: true },
    h('caption', { class: 'visually-hidden' }, `Intentions that apply to ${name}`),
    h('thead', null, h('tr', null, intentionColumns())),
    body,
  );
  const note = accessNote('service-intentions-access');
  const create = h('a', { class: 'button', href: context.href(`intentions/create?destination=${encodeURIComponent(name)}`) }, 'Create an intention');
  append(main, h('div', { class: 'toolbar' }, create), note, table);
  context.watch('connect/intentions', {
    query: { filter: intentionFilter(name) },
    allowNotFound: true,
    onData(list, result) {
      context.alerts.clear('service-intentions');
      if (result.status === 404) {
        create.hidden = true;
        showAccess(note, context, { count: 0, noun: 'intentions', none: 'Intentions are not available on this agent.' });
        return;
      }
      const items = list || [];
      reconcile(body, items, (x) => `${x.SourceName}>${x.DestinationName}`, (x) => intentionRow(context, x));
      table.hidden = items.length === 0;
      showAccess(note, context, { count: items.length, filtered: result.filtered, noun: 'intentions', none: `No intention names ${name}, and there is no wildcard intention: the default decides.` });
    },
    onError(error) {
      if (error.status === 403) {
        table.hidden = true;
        showAccess(note, context, { error, noun: 'intentions' });
        return;
      }
      context.alerts.error(error, { key: 'service-intentions', title: `Loading the intentions of ${name} failed` });
    },
  });
}

// ---- the page ----------------------------------------------------------------------------

const MOUNTS = { instances: mountInstances, topology: mountTopology, intentions: mountIntentions };

function mount(main, context) {
  const { name, tab } = context.params;
  const count = h('span', { class: 'count', 'aria-live': 'polite' });
  const template = context.settings.dashboardTemplates.service;
  append(main,
    h('p', { class: 'crumbs' }, h('a', { href: context.href('services') }, 'Services'), ' / '),
    h('h1', null, name, ' ', count),
    template
      ? h('p', null, h('a', { href: dashboardUrl(template, context, name), rel: 'noopener', target: '_blank' }, 'Open dashboard'))
      : null,
    h(
      'nav',
      { class: 'tabs', 'aria-label': `About ${name}` },
      h(
        'ul',
        null,
        TABS.map(([id, label]) =>
          h('li', null, h('a', { href: context.href(`services/${segment(name)}/${id}`), 'aria-current': id === tab ? 'page' : null }, label)),
        ),
      ),
    ),
  );
  const view = MOUNTS[tab];
  if (!view) {
    append(main, h('p', null, 'There is no such tab. ', h('a', { href: context.href(`services/${segment(name)}/instances`) }, 'See the instances.')));
    return;
  }
  view(main, context, { count });
}
