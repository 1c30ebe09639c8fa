// One node, in tabs that are links (each has its URL): its health checks with output, the
// service instances on it, its lock sessions (which can be invalidated here), and its
// metadata. The node comes from /v1/internal/ui/node/<name>, the sessions from
// /v1/session/node/<name>; both stay live while their tab is shown.

import { h, append, replace, reconcile, duration, tagList, tableHead } from '../dom.js';
import { badge, worst, checkCounts } from '../health.js';
import { segment } from '../api.js';
import { checkTable } from './service.js';

const TABS = [
  ['health-checks', 'Health checks'],
  ['service-instances', 'Service instances'],
  ['lock-sessions', 'Lock sessions'],
  ['metadata', 'Metadata'],
];

export const routes = [
  { pattern: 'nodes/:node', redirect: (p) => `nodes/${segment(p.node)}/health-checks` },
  { pattern: 'nodes/:node/:tab', nav: 'nodes', title: (p) => p.node, mount },
];

function servicesTable(context, services, checks) {
  if (!services.length) return h('p', { class: 'muted' }, 'No services are registered on this node.');
  return h(
    'table',
    { class: 'list' },
    tableHead(['Service', 'ID', 'Port', 'Checks', 'Tags'], { health: true }),
    h(
      'tbody',
      null,
      services.map((service) => {
        const own = checks.filter((c) => c.ServiceID === service.ID || !c.ServiceID);
        const state = worst(own);
        return h(
          'tr',
          { class: `health-${state}`, dataset: { service: service.Service, health: state } },
          h('td', { class: 'health' }, badge(state)),
          h('th', { scope: 'row' }, h('a', { href: context.href(`services/${segment(service.Service)}/instances`) }, service.Service)),
          h('td', null, service.ID),
          h('td', { class: 'number' }, service.Port ? String(service.Port) : '—'),
          h('td', null, checkCounts(own)),
          h('td', null, tagList(service.Tags)),
        );
      }),
    ),
  );
}

function metadataList(info) {
  const rows = [
    ['ID', info.ID || '—'],
    ['Address', info.Address],
    ...Object.entries(info.TaggedAddresses || {}).map(([k, v]) => [`Tagged address ${k}`, v]),
    ...Object.entries(info.Meta || {}).map(([k, v]) => [k, v]),
  ];
  return h('dl', { class: 'pairs' }, rows.map(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}

function sessionRow(context, session) {
  const confirm = h('span', { class: 'confirm', hidden: true });
  const invalidate = h('button', { type: 'button', class: 'danger' }, 'Invalidate');
  invalidate.addEventListener('click', () => {
    invalidate.hidden = true;
    confirm.hidden = false;
    confirm.querySelector('button').focus();
  });
  const cancel = () => {
    confirm.hidden = true;
    invalidate.hidden = false;
    invalidate.focus();
  };
  replace(
    confirm,
    h(
      'button',
      {
        type: 'button',
        class: 'danger',
        onclick: async () => {
          try {
            await context.put(`session/destroy/${segment(session.ID)}`, null);
            context.alerts.success(`Session ${session.Name || session.ID} was invalidated.`);
          } catch (error) {
            cancel();
            context.alerts.error(error, { title: 'Invalidating the session failed' });
          }
        },
      },
      'Confirm invalidate',
    ),
    ' ',
    h('button', { type: 'button', onclick: cancel }, 'Cancel'),
  );
  const checks = [...(session.NodeChecks || []), ...(session.ServiceChecks || []).map((c) => c.ID || c)];
  return h(
    'tr',
    { dataset: { session: session.ID } },
    h('th', { scope: 'row' }, session.Name || h('span', { class: 'muted' }, 'unnamed'), h('code', { class: 'id' }, session.ID)),
    h('td', null, session.Behavior),
    h('td', null, session.TTL || '—'),
    h('td', null, duration(session.LockDelay)),
    h('td', null, checks.length ? checks.join(', ') : '—'),
    h('td', { class: 'actions' }, invalidate, confirm),
  );
}

function mountSessions(panel, context, node) {
  const body = h('tbody');
  const table = h(
    'table',
    { class: 'list', id: 'sessions-table', hidden: true },
    h('caption', { class: 'visually-hidden' }, `Lock sessions of ${node}`),
    h(
      'thead',
      null,
      h(
        'tr',
        null,
        h('th', { scope: 'col' }, 'Session'),
        h('th', { scope: 'col' }, 'Behavior'),
        h('th', { scope: 'col' }, 'TTL'),
        h('th', { scope: 'col' }, 'Lock delay'),
        h('th', { scope: 'col' }, 'Checks'),
        h('th', { scope: 'col' }, h('span', { class: 'visually-hidden' }, 'Actions')),
      ),
    ),
    body,
  );
  const empty = h('p', { class: 'muted', hidden: true }, 'This node has no lock sessions.');
  panel.append(table, empty);
  context.watch(`session/node/${segment(node)}`, {
    onData(sessions) {
      context.alerts.clear('sessions');
      reconcile(body, sessions || [], (s) => s.ID, (s) => sessionRow(context, s));
      table.hidden = !sessions || sessions.length === 0;
      empty.hidden = !table.hidden;
    },
    onError(error) {
      context.alerts.error(error, { key: 'sessions', title: 'Loading the sessions failed' });
    },
  });
}

function mount(main, context) {
  const { node, tab } = context.params;
  if (!TABS.some(([id]) => id === tab)) {
    context.navigate(`nodes/${segment(node)}/health-checks`, { replace: true });
    return;
  }
  const heading = h('h1', null, node);
  const summary = h('p', { class: 'muted' });
  const panel = h('section', { id: 'node-panel', 'aria-labelledby': `tab-${tab}` });
  append(main,
    h('p', { class: 'crumbs' }, h('a', { href: context.href('nodes') }, 'Nodes'), ' / '),
    heading,
    summary,
    h(
      'nav',
      { class: 'tabs', 'aria-label': `${node} sections` },
      h(
        'ul',
        null,
        TABS.map(([id, label]) =>
          h(
            'li',
            null,
            h('a', { id: `tab-${id}`, href: context.href(`nodes/${segment(node)}/${id}`), 'aria-current': id === tab ? 'page' : null }, label),
          ),
        ),
      ),
    ),
    panel,
  );
  if (tab === 'lock-sessions') {
    mountSessions(panel, context, node);
  }
  context.watch(`internal/ui/node/${segment(node)}`, {
    allowNotFound: true,
    onData(info) {
      context.alerts.clear('node');
      if (!info) {
        replace(summary, 'This node is not in the catalog.');
        if (tab !== 'lock-sessions') replace(panel);
        return;
      }
      const nodeChecks = info.Checks.filter((c) => !c.ServiceID);
      replace(summary, badge(worst(nodeChecks)), ` ${info.Address} · ${info.Services.length} services · `, checkCounts(info.Checks));
      if (tab === 'health-checks') replace(panel, checkTable(info.Checks));
      else if (tab === 'service-instances') replace(panel, servicesTable(context, info.Services, info.Checks));
      else if (tab === 'metadata') replace(panel, metadataList(info));
    },
    onError(error) {
      context.alerts.error(error, { key: 'node', title: `Loading ${node} failed` });
    },
  });
}
