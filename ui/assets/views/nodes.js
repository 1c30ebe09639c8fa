// The nodes list: every node with its address, the health of its node-level checks, its
// service count and all its checks counted, from /v1/internal/ui/nodes, kept live.

import { h, append, reconcile, filterRows } from '../dom.js';
import { badge, checkCounts, worst } from '../health.js';
import { segment } from '../api.js';
import { accessNote, showAccess } from '../access.js';

export const nav = { id: 'nodes', label: 'Nodes', path: 'nodes' };
export const routes = [{ pattern: 'nodes', nav: 'nodes', title: 'Nodes', mount }];

function row(context, info) {
  const state = worst((info.Checks || []).filter((c) => !c.ServiceID));
  const search = [info.Node, info.Address, ...Object.values(info.Meta || {})].join(' ').toLowerCase();
  return h(
    'tr',
    { role: 'row', class: `health-${state}`, dataset: { node: info.Node, health: state, search } },
    h('td', { role: 'cell', class: 'health' }, badge(state)),
    h(
      'th',
      { scope: 'row', role: 'rowheader' },
      h('a', { href: context.href(`nodes/${segment(info.Node)}/health-checks`) }, info.Node),
      info.Node === context.settings.nodeName ? h('span', { class: 'kind' }, 'this agent') : null,
    ),
    h('td', { role: 'cell' }, info.Address),
    h('td', { role: 'cell', class: 'number' }, String((info.Services || []).length)),
    h('td', { role: 'cell' }, checkCounts(info.Checks)),
  );
}

function mount(main, context) {
  const total = h('span', { class: 'count', 'aria-live': 'polite' });
  const search = h('input', {
    id: 'nodes-filter',
    type: 'search',
    placeholder: 'Name, address or metadata',
    autocomplete: 'off',
    'aria-controls': 'nodes-table',
  });
  const body = h('tbody', { role: 'rowgroup' });
  const table = h(
    'table',
    { id: 'nodes-table', class: 'list grid', role: 'table', hidden: true },
    h('caption', { class: 'visually-hidden' }, 'Nodes, their health, addresses, services and checks'),
    h(
      'thead',
      { role: 'rowgroup' },
      h(
        'tr',
        { role: 'row' },
        h('th', { scope: 'col', role: 'columnheader', class: 'health' }, h('span', { class: 'visually-hidden' }, 'Health')),
        h('th', { scope: 'col', role: 'columnheader' }, 'Node'),
        h('th', { scope: 'col', role: 'columnheader' }, 'Address'),
        h('th', { scope: 'col', role: 'columnheader', class: 'number' }, 'Services'),
        h('th', { scope: 'col', role: 'columnheader' }, 'Checks'),
      ),
    ),
    body,
  );
  const empty = h('p', { class: 'muted', hidden: true }, 'No node matches the filter.');
  const note = accessNote('nodes-access');
  append(main,
    h('h1', null, 'Nodes ', total),
    h('div', { class: 'toolbar', role: 'search' }, h('label', { for: 'nodes-filter' }, 'Filter'), search),
    note,
    table,
    empty,
  );
  let all = 0;
  const refilter = () => {
    const shown = filterRows(body, search.value);
    total.textContent = shown === all ? `(${all})` : `(${shown} of ${all})`;
    empty.hidden = shown > 0 || all === 0;
  };
  search.addEventListener('input', refilter);
  context.watch('internal/ui/nodes', {
    onData(list, result) {
      context.alerts.clear('nodes');
      all = list.length;
      reconcile(body, list, (info) => info.Node, (info) => row(context, info));
      table.hidden = all === 0;
      showAccess(note, context, { count: all, filtered: result.filtered, noun: 'nodes', none: 'No nodes are registered.' });
      refilter();
    },
    onError(error) {
      if (error.status === 403) {
        table.hidden = true;
        showAccess(note, context, { error, noun: 'nodes' });
        return;
      }
      context.alerts.error(error, { key: 'nodes', title: 'Loading the nodes failed' });
    },
  });
}
