// Config entries, read-only, under /ui/<dc>/config/<kind>[/<name>]: one kind at a time (a
// menu of the kinds), its entries live from /v1/config/<kind>, and one entry as the agent
// returns it. Writing them stays with `praetor config write` and the HTTP API. An agent
// without the service mesh answers 404 for /v1/config/…: the view says config entries are
// not available, and does not ask again.

import { h, append, reconcile, replace } from '../dom.js';
import { segment } from '../api.js';
import { accessNote, showAccess } from '../access.js';

export const KINDS = [
  'service-defaults',
  'proxy-defaults',
  'service-router',
  'service-splitter',
  'service-resolver',
  'service-intentions',
  'ingress-gateway',
  'terminating-gateway',
  'mesh',
];

export const nav = { id: 'config', label: 'Config entries', path: `config/${KINDS[0]}` };
export const routes = [
  { pattern: 'config', redirect: () => `config/${KINDS[0]}` },
  { pattern: 'config/:kind', nav: 'config', title: (p) => `${p.kind} · Config entries`, mount: mountKind },
  { pattern: 'config/:kind/:name', nav: 'config', title: (p) => `${p.name} · ${p.kind}`, mount: mountEntry },
];

function unavailable(main) {
  if (main.querySelector('#config-unavailable')) return;
  append(main,
    h(
      'p',
      { class: 'note', id: 'config-unavailable' },
      'Config entries are not available on this agent: it answers 404 Not Found for /v1/config/. ',
      'They arrive with the service mesh.',
    ),
  );
}

function kindMenu(context, current) {
  const select = h(
    'select',
    { id: 'config-kind', onchange: (event) => context.navigate(`config/${event.target.value}`) },
    KINDS.map((kind) => h('option', { value: kind, selected: kind === current }, kind)),
  );
  return h('div', { class: 'toolbar' }, h('label', { for: 'config-kind' }, 'Kind'), select);
}

function mountKind(main, context) {
  const { kind } = context.params;
  const body = h('tbody');
  const table = h(
    'table',
    { class: 'list', id: 'config-table', hidden: true },
    h('caption', { class: 'visually-hidden' }, `Config entries of kind ${kind}`),
    h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Name'), h('th', { scope: 'col' }, 'Protocol'), h('th', { scope: 'col', class: 'number' }, 'Modify index'))),
    body,
  );
  const note = accessNote('config-access');
  append(main, h('h1', null, 'Config entries'), kindMenu(context, kind), note, table);
  context.watch(`config/${segment(kind)}`, {
    allowNotFound: true,
    onData(list, result) {
      context.alerts.clear('config');
      if (result.status === 404) {
        unavailable(main);
        return;
      }
      const entries = list || [];
      reconcile(body, entries, (e) => e.Name, (e) =>
        h(
          'tr',
          { dataset: { entry: e.Name } },
          h('th', { scope: 'row' }, h('a', { href: context.href(`config/${segment(kind)}/${segment(e.Name)}`) }, e.Name)),
          h('td', null, e.Protocol || (e.Config && e.Config.protocol) || '—'),
          h('td', { class: 'number' }, String(e.ModifyIndex ?? '')),
        ),
      );
      table.hidden = entries.length === 0;
      showAccess(note, context, { count: entries.length, filtered: result.filtered, noun: `${kind} entries`, none: `There are no ${kind} entries.` });
    },
    onError(error) {
      if (error.status === 403) {
        table.hidden = true;
        showAccess(note, context, { error, noun: `${kind} entries` });
        return;
      }
      context.alerts.error(error, { key: 'config', title: `Loading the ${kind} entries failed` });
    },
  });
}

function mountEntry(main, context) {
  const { kind, name } = context.params;
  const shown = h('pre', { id: 'config-entry', class: 'entry' });
  append(main,
    h('p', { class: 'crumbs' }, h('a', { href: context.href(`config/${segment(kind)}`) }, kind), ' / '),
    h('h1', null, name),
    shown,
  );
  context.watch(`config/${segment(kind)}/${segment(name)}`, {
    allowNotFound: true,
    onData(entry, result) {
      context.alerts.clear('config-entry');
      if (result.status === 404 && !result.index) {
        unavailable(main);
        shown.hidden = true;
        return;
      }
      replace(shown, entry ? JSON.stringify(entry, null, 2) : `There is no ${kind} entry named ${name}.`);
    },
    onError(error) {
      context.alerts.error(error, { key: 'config-entry', title: `Loading ${name} failed` });
    },
  });
}
