// One service: its instances, each with its node, address, tags and every check that
// applies to it (node checks and its own) with their output, from
// /v1/health/service/<name>, kept live. A dashboard link appears when the agent has a
// `service` entry in ui_config.dashboard_url_templates.

import { h, append, reconcile, filterRows, tagList } from '../dom.js';
import { badge, checkCounts, worst, normalize } from '../health.js';
import { segment } from '../api.js';

export const routes = [
  { pattern: 'services/:name', redirect: (p) => `services/${segment(p.name)}/instances` },
  { pattern: 'services/:name/instances', nav: 'services', title: (p) => p.name, mount },
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

function instance(context, entry) {
  const { Node: node, Service: service, Checks: checks } = entry;
  const state = worst(checks);
  const address = service.Address || node.Address;
  const search = [service.ID, node.Node, address, ...(service.Tags || [])].join(' ').toLowerCase();
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
        ` · ${address}${service.Port ? `:${service.Port}` : ''}`,
      ),
      h('span', { class: 'instance-counts' }, checkCounts(checks)),
    ),
    service.Tags && service.Tags.length ? tagList(service.Tags) : null,
    checkTable(checks),
  );
}

function mount(main, context) {
  const name = context.params.name;
  const total = h('span', { class: 'count', 'aria-live': 'polite' });
  const search = h('input', {
    id: 'instances-filter',
    type: 'search',
    placeholder: 'ID, node, address or tag',
    autocomplete: 'off',
    'aria-controls': 'instances',
  });
  const list = h('ul', { id: 'instances', class: 'instances', 'aria-label': `Instances of ${name}` });
  const empty = h('p', { class: 'muted', hidden: true }, `No instances of ${name} are registered.`);
  const template = context.settings.dashboardTemplates.service;
  append(main,
    h('p', { class: 'crumbs' }, h('a', { href: context.href('services') }, 'Services'), ' / '),
    h('h1', null, name, ' ', total),
    template
      ? h('p', null, h('a', { href: dashboardUrl(template, context, name), rel: 'noopener', target: '_blank' }, 'Open dashboard'))
      : null,
    h('div', { class: 'toolbar', role: 'search' }, h('label', { for: 'instances-filter' }, 'Filter'), search),
    list,
    empty,
  );
  let all = 0;
  const refilter = () => {
    const shown = filterRows(list, search.value);
    const noun = all === 1 ? 'instance' : 'instances';
    total.textContent = shown === all ? `(${all} ${noun})` : `(${shown} of ${all} ${noun})`;
    empty.hidden = all > 0;
  };
  search.addEventListener('input', refilter);
  context.watch(`health/service/${segment(name)}`, {
    onData(entries) {
      context.alerts.clear('instances');
      all = entries.length;
      reconcile(list, entries, (e) => `${e.Node.Node}/${e.Service.ID}`, (e) => instance(context, e));
      refilter();
    },
    onError(error) {
      context.alerts.error(error, { key: 'instances', title: `Loading ${name} failed` });
    },
  });
}
