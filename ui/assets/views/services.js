// The services list: every service with its health, instance count, check counts and
// tags, from /v1/internal/ui/services, kept live by a blocking query. The filter box
// matches names and tags as you type; the health menu narrows to one state.
//
// Sidecar proxies are not listed: as in Consul's UI, a proxy is shown under the service it
// fronts (its checks already count there, and the row says the service is in the mesh);
// the agent's summary still carries them, with Kind "connect-proxy". A list that ACLs
// empty or cut says so (access.js).
//
// The first render is measured with the Performance API: `services:render` runs from just
// before the request to the table laid out (the browser test reads it).

import { h, append, reconcile, filterRows, tagList } from '../dom.js';
import { badge, counts, summaryState } from '../health.js';
import { segment } from '../api.js';
import { accessNote, showAccess } from '../access.js';

/** Consul's service kind of sidecar proxies, which the list leaves to their services. */
const KIND_CONNECT_PROXY = 'connect-proxy';

export const nav = { id: 'services', label: 'Services', path: 'services' };
export const routes = [{ pattern: 'services', nav: 'services', title: 'Services', mount }];

const HEALTH_CHOICES = [
  ['', 'Any health'],
  ['critical', 'Critical'],
  ['warning', 'Warning'],
  ['passing', 'Passing'],
  ['none', 'No checks'],
];

// Rows are cloned from one parsed skeleton and filled in: for a list of 1,000 services
// that is a third of the work of creating every element on its own. The skeleton is a
// constant; everything from the agent goes in as text or attribute values.
const ROW = document.createElement('template');
ROW.innerHTML =
  '<tr role="row"><td role="cell" class="health"></td><th scope="row" role="rowheader"><a></a></th>' +
  '<td role="cell" class="number"></td><td role="cell"></td><td role="cell"></td></tr>';

function row(context, summary) {
  const state = summaryState(summary);
  const tr = ROW.content.firstElementChild.cloneNode(true);
  const [healthCell, nameCell, countCell, checksCell, tagsCell] = tr.children;
  tr.className = `health-${state}`;
  tr.dataset.service = summary.Name;
  tr.dataset.health = state;
  tr.dataset.search = [summary.Name, ...(summary.Tags || []), summary.Kind || ''].join(' ').toLowerCase();
  healthCell.append(badge(state));
  const link = nameCell.firstChild;
  link.href = context.href(`services/${segment(summary.Name)}/instances`);
  link.textContent = summary.Name;
  if (summary.Kind) nameCell.append(h('span', { class: 'kind' }, summary.Kind));
  if (summary.ConnectedWithProxy) {
    nameCell.append(h('span', { class: 'kind mesh', title: 'A sidecar proxy fronts this service; its checks count here.' }, 'in service mesh'));
  }
  for (const source of summary.ExternalSources || []) nameCell.append(h('span', { class: 'kind' }, source));
  countCell.textContent = String(summary.InstanceCount);
  checksCell.append(counts(summary.ChecksPassing, summary.ChecksWarning, summary.ChecksCritical));
  tagsCell.append(tagList(summary.Tags));
  return tr;
}

function mount(main, context) {
  const total = h('span', { class: 'count', 'aria-live': 'polite' });
  const search = h('input', {
    id: 'services-filter',
    type: 'search',
    placeholder: 'Name or tag',
    autocomplete: 'off',
    'aria-controls': 'services-table',
  });
  const health = h(
    'select',
    { id: 'services-health', 'aria-controls': 'services-table' },
    HEALTH_CHOICES.map(([value, label]) => h('option', { value }, label)),
  );
  const body = h('tbody', { role: 'rowgroup' });
  const table = h(
    'table',
    { id: 'services-table', class: 'list grid', role: 'table', hidden: true },
    h('caption', { class: 'visually-hidden' }, 'Services, their health, instances, checks and tags'),
    h(
      'thead',
      { role: 'rowgroup' },
      h(
        'tr',
        { role: 'row' },
        h('th', { scope: 'col', role: 'columnheader', class: 'health' }, h('span', { class: 'visually-hidden' }, 'Health')),
        h('th', { scope: 'col', role: 'columnheader' }, 'Service'),
        h('th', { scope: 'col', role: 'columnheader', class: 'number' }, 'Instances'),
        h('th', { scope: 'col', role: 'columnheader' }, 'Checks'),
        h('th', { scope: 'col', role: 'columnheader' }, 'Tags'),
      ),
    ),
    body,
  );
  const empty = h('p', { class: 'muted', hidden: true }, 'No service matches the filter.');
  const note = accessNote('services-access');
  append(main,
    h('h1', null, 'Services ', total),
    h(
      'div',
      { class: 'toolbar', role: 'search' },
      h('label', { for: 'services-filter' }, 'Filter'),
      search,
      h('label', { for: 'services-health' }, 'Health'),
      health,
    ),
    note,
    table,
    empty,
  );

  let all = 0;
  const refilter = () => {
    const shown = filterRows(body, search.value, (tr) => !health.value || tr.dataset.health === health.value);
    total.textContent = shown === all ? `(${all})` : `(${shown} of ${all})`;
    empty.hidden = shown > 0 || all === 0;
  };
  search.addEventListener('input', refilter);
  health.addEventListener('change', refilter);

  for (const name of ['services:fetch-start', 'services:data', 'services:built']) performance.clearMarks(name);
  for (const name of ['services:render', 'services:render:fetch', 'services:render:build', 'services:render:layout']) {
    performance.clearMeasures(name);
  }
  performance.mark('services:fetch-start');
  let measured = false;
  context.watch('internal/ui/services', {
    onData(list, result) {
      if (!measured) performance.mark('services:data');
      context.alerts.clear('services');
      const services = list.filter((summary) => summary.Kind !== KIND_CONNECT_PROXY);
      all = services.length;
      reconcile(body, services, (summary) => summary.Name, (summary) => row(context, summary));
      table.hidden = all === 0;
      showAccess(note, context, { count: all, filtered: result.filtered, noun: 'services', none: 'No services are registered.' });
      refilter();
      if (!measured) {
        measured = true;
        // Reading a layout property makes the browser lay the table out now, so the
        // measure covers style and layout, not just building the rows.
        performance.mark('services:built');
        void table.offsetHeight;
        performance.measure('services:render', 'services:fetch-start');
        performance.measure('services:render:fetch', 'services:fetch-start', 'services:data');
        performance.measure('services:render:build', 'services:data', 'services:built');
        performance.measure('services:render:layout', 'services:built');
      }
    },
    onError(error) {
      if (error.status === 403) {
        table.hidden = true;
        showAccess(note, context, { error, noun: 'services' });
        return;
      }
      context.alerts.error(error, { key: 'services', title: 'Loading the services failed' });
    },
  });
}
