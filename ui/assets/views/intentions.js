// Intentions, under /ui/<dc>/intentions as in Consul's UI: the list (live, from
// /v1/connect/intentions), a new one (source, destination, allow or deny, description,
// saved with PUT /v1/connect/intentions/exact; a link may fill in the services), switching
// one between allow and deny, and deleting one. A service's page lists the intentions that
// apply to it with the same rows (`intentionRow`). An agent without the service mesh answers 404 for these paths; the view
// then says the feature is not available instead of failing (and does not ask again).

import { h, append, reconcile, filterRows } from '../dom.js';
import { accessNote, showAccess } from '../access.js';

export const nav = { id: 'intentions', label: 'Intentions', path: 'intentions' };
export const routes = [
  { pattern: 'intentions', nav: 'intentions', title: 'Intentions', mount: mountList },
  { pattern: 'intentions/create', nav: 'intentions', title: 'New intention', mount: mountCreate },
];

const exact = (source, destination) => ({ source, destination });

function unavailable(main) {
  if (main.querySelector('#intentions-unavailable')) return;
  append(main,
    h(
      'p',
      { class: 'note', id: 'intentions-unavailable' },
      'Intentions are not available on this agent: it answers 404 Not Found for /v1/connect/intentions. ',
      'They arrive with the service mesh.',
    ),
  );
}

async function save(context, source, destination, action, description) {
  const body = JSON.stringify({ SourceName: source, DestinationName: destination, SourceType: 'consul', Action: action, Description: description });
  await context.put('connect/intentions/exact', body, { query: exact(source, destination) });
}

/** The header cells of an intentions table. */
export function intentionColumns() {
  return [
    ['Source', 'Destination', 'Action', 'Precedence', 'Description'].map((c) => h('th', { scope: 'col', class: c === 'Precedence' ? 'number' : null }, c)),
    h('th', { scope: 'col' }, h('span', { class: 'visually-hidden' }, 'Actions')),
  ];
}

/** One intention's row, with its allow/deny switch and delete button. */
export function intentionRow(context, ixn) {
  const other = ixn.Action === 'allow' ? 'deny' : 'allow';
  const label = `${ixn.SourceName} → ${ixn.DestinationName}`;
  const act = async (run, failure) => {
    try {
      await run();
    } catch (error) {
      context.alerts.error(error, { title: failure });
    }
  };
  const permissions = ixn.Permissions && ixn.Permissions.length;
  return h(
    'tr',
    {
      class: ixn.Action === 'deny' ? 'health-critical' : '',
      dataset: {
        intention: `${ixn.SourceName}>${ixn.DestinationName}`,
        action: ixn.Action || 'l7',
        search: [ixn.SourceName, ixn.DestinationName, ixn.Action, ixn.Description].join(' ').toLowerCase(),
      },
    },
    h('th', { scope: 'row' }, ixn.SourceName),
    h('td', null, ixn.DestinationName),
    h('td', null, h('strong', { class: `action-${ixn.Action || 'l7'}` }, ixn.Action || `${permissions} L7 permissions`)),
    h('td', { class: 'number' }, String(ixn.Precedence ?? '')),
    h('td', null, ixn.Description || h('span', { class: 'muted' }, '—')),
    h(
      'td',
      { class: 'actions' },
      ixn.Action
        ? h(
            'button',
            {
              type: 'button',
              'aria-label': `Change ${label} to ${other}`,
              onclick: () =>
                act(async () => {
                  await save(context, ixn.SourceName, ixn.DestinationName, other, ixn.Description || '');
                  // Replaces the banner of an earlier save, which would now say the opposite.
                  context.alerts.success(`Saved: ${label} is ${other === 'allow' ? 'allowed' : 'denied'}.`, 'intention-save');
                }, `Changing ${label} failed`),
            },
            `Set ${other}`,
          )
        : null,
      ' ',
      h(
        'button',
        {
          type: 'button',
          class: 'danger',
          'aria-label': `Delete ${label}`,
          onclick: () => act(() => context.del('connect/intentions/exact', { query: exact(ixn.SourceName, ixn.DestinationName) }), `Deleting ${label} failed`),
        },
        'Delete',
      ),
    ),
  );
}

function mountList(main, context) {
  const search = h('input', { id: 'intentions-filter', type: 'search', autocomplete: 'off', 'aria-controls': 'intentions-table' });
  const total = h('span', { class: 'count', 'aria-live': 'polite' });
  const body = h('tbody');
  const table = h(
    'table',
    { class: 'list', id: 'intentions-table', hidden: true },
    h('caption', { class: 'visually-hidden' }, 'Intentions: which service may connect to which'),
    h(
      'thead',
      null,
      h('tr', null, intentionColumns()),
    ),
    body,
  );
  const empty = h('p', { class: 'muted', hidden: true }, 'No intention matches the filter.');
  const note = accessNote('intentions-access');
  const toolbar = h(
    'div',
    { class: 'toolbar', role: 'search' },
    h('label', { for: 'intentions-filter' }, 'Filter'),
    search,
    h('a', { class: 'button', href: context.href('intentions/create') }, 'Create an intention'),
  );
  append(main, h('h1', null, 'Intentions ', total), toolbar, note, table, empty);
  let all = 0;
  const refilter = () => {
    const shown = filterRows(body, search.value);
    total.textContent = shown === all ? `(${all})` : `(${shown} of ${all})`;
    empty.hidden = shown > 0 || all === 0;
  };
  search.addEventListener('input', refilter);
  context.watch('connect/intentions', {
    allowNotFound: true,
    onData(list, result) {
      context.alerts.clear('intentions');
      if (result.status === 404) {
        toolbar.hidden = true;
        unavailable(main);
        return;
      }
      const items = list || [];
      all = items.length;
      reconcile(body, items, (x) => `${x.SourceName}>${x.DestinationName}`, (x) => intentionRow(context, x));
      table.hidden = items.length === 0;
      showAccess(note, context, { count: all, filtered: result.filtered, noun: 'intentions', none: 'There are no intentions yet.' });
      refilter();
    },
    onError(error) {
      if (error.status === 403) {
        table.hidden = true;
        showAccess(note, context, { error, noun: 'intentions' });
        return;
      }
      context.alerts.error(error, { key: 'intentions', title: 'Loading the intentions failed' });
    },
  });
}

function mountCreate(main, context) {
  // A link may name the services (?source=&destination=): a service's topology offers one
  // for each connection the intentions refuse.
  const given = new URLSearchParams(location.search);
  const field = (id, label, note, value) =>
    h('div', { class: 'field' }, h('label', { for: id }, label), h('input', { id, type: 'text', required: true, autocomplete: 'off', value }), note ? h('p', { class: 'note' }, note) : null);
  const form = h(
    'form',
    { class: 'editor', id: 'intention-form', novalidate: true },
    field('intention-source', 'Source service', '* means every service.', given.get('source') || ''),
    field('intention-destination', 'Destination service', '* means every service.', given.get('destination') || ''),
    h(
      'fieldset',
      { class: 'views' },
      h('legend', null, 'Action'),
      h('label', { class: 'choice' }, h('input', { type: 'radio', name: 'intention-action', value: 'allow', checked: true }), ' Allow'),
      h('label', { class: 'choice' }, h('input', { type: 'radio', name: 'intention-action', value: 'deny' }), ' Deny'),
    ),
    h('div', { class: 'field' }, h('label', { for: 'intention-description' }, 'Description'), h('input', { id: 'intention-description', type: 'text', autocomplete: 'off' })),
    h('div', { class: 'row' }, h('button', { type: 'submit', class: 'primary' }, 'Save'), ' ', h('a', { href: context.href('intentions') }, 'Cancel')),
  );
  append(main, h('p', { class: 'crumbs' }, h('a', { href: context.href('intentions') }, 'Intentions'), ' / '), h('h1', null, 'New intention'), form);
  ([...form.querySelectorAll('input[type=text]')].find((input) => !input.value) || form.querySelector('input')).focus();
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const value = (id) => form.querySelector(`#${id}`).value.trim();
    const source = value('intention-source');
    const destination = value('intention-destination');
    const action = form.querySelector('input[name="intention-action"]:checked').value;
    if (!source || !destination) {
      context.alerts.show({ kind: 'error', key: 'intention-save', title: 'Not saved', text: 'Name a source and a destination service.' });
      return;
    }
    const button = form.querySelector('button[type=submit]');
    button.disabled = true;
    try {
      await save(context, source, destination, action, value('intention-description'));
      context.navigate('intentions');
      context.alerts.success(`Saved: ${source} → ${destination} is ${action === 'allow' ? 'allowed' : 'denied'}.`, 'intention-save');
    } catch (error) {
      context.alerts.error(error, { key: 'intention-save', title: 'Saving the intention failed' });
    } finally {
      button.disabled = false;
    }
  });
}
