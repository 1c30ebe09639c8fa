// ACL tokens, policies and roles, under /ui/<dc>/acls/ as in Consul's UI:
//   acls/<kind>           the list, live (a blocking query on /v1/acl/<kind>), with a filter
//   acls/<kind>/create    a new one
//   acls/<kind>/<id>      one: its fields, an editor, delete
// The three kinds are one table of differences (KINDS) over one set of views, as the
// agent has one handler over them. Everything is sent with the tab's token; a refusal is
// the agent's 403 text, shown verbatim. Shown only when the agent has ACLs enabled.

import { h, append, replace, reconcile, filterRows, tagList } from '../dom.js';
import { segment } from '../api.js';
import { accessNote, showAccess } from '../access.js';

export const nav = { id: 'acls', label: 'Access controls', path: 'acls/tokens' };

const names = (links) => (links || []).map((link) => link.Name || link.ID);

const KINDS = {
  tokens: {
    label: 'Tokens',
    one: 'token',
    list: 'acl/tokens',
    item: (id) => `acl/token/${segment(id)}`,
    create: 'acl/token',
    id: (x) => x.AccessorID,
    name: (x) => x.Description || x.AccessorID,
    columns: ['Accessor ID', 'Description', 'Policies and roles', 'Scope'],
    cells: (x) => [
      h('code', null, x.AccessorID),
      x.Description || h('span', { class: 'muted' }, '—'),
      tagList([...names(x.Policies), ...names(x.Roles).map((n) => `role: ${n}`)]),
      x.Local ? 'local' : 'global',
    ],
    search: (x) => [x.AccessorID, x.Description, ...names(x.Policies), ...names(x.Roles)],
    fields: ['Description', 'Policies', 'Roles', 'Local'],
    // What an update sends back: the fields the form edits and those it must keep.
    keep: ['AccessorID', 'Local', 'ServiceIdentities', 'NodeIdentities', 'TemplatedPolicies', 'ExpirationTime'],
  },
  policies: {
    label: 'Policies',
    one: 'policy',
    list: 'acl/policies',
    item: (id) => `acl/policy/${segment(id)}`,
    create: 'acl/policy',
    id: (x) => x.ID,
    name: (x) => x.Name,
    columns: ['Name', 'Description', 'Datacenters'],
    cells: (x) => [x.Name, x.Description || h('span', { class: 'muted' }, '—'), (x.Datacenters || []).join(', ') || 'all'],
    search: (x) => [x.Name, x.Description, x.ID],
    fields: ['Name', 'Description', 'Rules'],
    keep: ['ID', 'Datacenters'],
  },
  roles: {
    label: 'Roles',
    one: 'role',
    list: 'acl/roles',
    item: (id) => `acl/role/${segment(id)}`,
    create: 'acl/role',
    id: (x) => x.ID,
    name: (x) => x.Name,
    columns: ['Name', 'Description', 'Policies'],
    cells: (x) => [x.Name, x.Description || h('span', { class: 'muted' }, '—'), tagList(names(x.Policies))],
    search: (x) => [x.Name, x.Description, x.ID, ...names(x.Policies)],
    fields: ['Name', 'Description', 'Policies'],
    keep: ['ID', 'ServiceIdentities', 'NodeIdentities', 'TemplatedPolicies'],
  },
};

export const routes = [
  { pattern: 'acls', redirect: () => 'acls/tokens' },
  { pattern: 'acls/:kind', nav: 'acls', title: (p) => (KINDS[p.kind] || { label: 'Access controls' }).label, mount: mountList },
  { pattern: 'acls/:kind/create', nav: 'acls', title: (p) => `New ${(KINDS[p.kind] || { one: 'item' }).one}`, mount: mountCreate },
  { pattern: 'acls/:kind/:id', nav: 'acls', title: (p) => p.id, mount: mountItem },
];

function tabs(context, current) {
  return h(
    'nav',
    { class: 'tabs', 'aria-label': 'Access controls' },
    h(
      'ul',
      null,
      Object.entries(KINDS).map(([id, kind]) =>
        h('li', null, h('a', { href: context.href(`acls/${id}`), 'aria-current': id === current ? 'page' : null }, kind.label)),
      ),
    ),
  );
}

/** The kind named in the URL, or null after saying there is none. */
function kindOf(main, context) {
  const kind = KINDS[context.params.kind];
  if (!kind) {
    append(main, h('h1', null, 'Page not found'), h('p', null, h('a', { href: context.href('acls/tokens') }, 'Go to the tokens.')));
  }
  return kind;
}

// ---- lists -------------------------------------------------------------------------------

function mountList(main, context) {
  const kind = kindOf(main, context);
  if (!kind) return;
  const id = context.params.kind;
  const search = h('input', { id: 'acl-filter', type: 'search', autocomplete: 'off', 'aria-controls': 'acl-table' });
  const total = h('span', { class: 'count', 'aria-live': 'polite' });
  const body = h('tbody');
  const table = h(
    'table',
    { class: 'list', id: 'acl-table', hidden: true, dataset: { kind: id } },
    h('caption', { class: 'visually-hidden' }, `ACL ${kind.label.toLowerCase()}`),
    h('thead', null, h('tr', null, kind.columns.map((c) => h('th', { scope: 'col' }, c)))),
    body,
  );
  const empty = h('p', { class: 'muted', hidden: true }, `No ${kind.one} matches the filter.`);
  const note = accessNote('acl-access');
  append(main,
    h('h1', null, `${kind.label} `, total),
    tabs(context, id),
    h(
      'div',
      { class: 'toolbar', role: 'search' },
      h('label', { for: 'acl-filter' }, 'Filter'),
      search,
      h('a', { class: 'button', href: context.href(`acls/${id}/create`) }, `Create a ${kind.one}`),
    ),
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
  const noun = `ACL ${kind.label.toLowerCase()}`;
  context.watch(kind.list, {
    onData(list, result) {
      context.alerts.clear('acl-list');
      const items = list || [];
      all = items.length;
      reconcile(body, items, kind.id, (item) => {
        const [first, ...rest] = kind.cells(item);
        return h(
          'tr',
          { dataset: { id: kind.id(item), search: kind.search(item).filter(Boolean).join(' ').toLowerCase() } },
          h('th', { scope: 'row' }, h('a', { href: context.href(`acls/${id}/${segment(kind.id(item))}`) }, first)),
          rest.map((cell) => h('td', null, cell)),
        );
      });
      table.hidden = items.length === 0;
      showAccess(note, context, { count: all, filtered: result.filtered, noun, none: `There are no ${kind.label.toLowerCase()}.` });
      refilter();
    },
    onError(error) {
      if (error.status === 403) {
        table.hidden = true;
        showAccess(note, context, { error, noun });
        return;
      }
      context.alerts.error(error, { key: 'acl-list', title: `Loading the ${kind.label.toLowerCase()} failed` });
    },
  });
}

// ---- the editor --------------------------------------------------------------------------

/** Checkboxes for links to policies or roles, from the agent's list (read once). */
function linkChoices(context, label, listPath, chosen) {
  const fieldset = h('fieldset', { class: 'choices', id: `acl-${label.toLowerCase()}` }, h('legend', null, label), h('p', { class: 'muted' }, 'Loading…'));
  const wanted = new Set(names(chosen));
  context.get(listPath).then(
    ({ data }) => {
      const items = data || [];
      replace(
        fieldset,
        h('legend', null, label),
        items.length
          ? items.map((item) =>
              h('label', { class: 'choice' }, h('input', { type: 'checkbox', value: item.Name, checked: wanted.has(item.Name) }), ` ${item.Name}`),
            )
          : h('p', { class: 'muted' }, 'None exist yet.'),
      );
    },
    (error) => {
      // Without the right to list them, the names typed in stay possible.
      const input = h('input', { type: 'text', class: 'names', value: [...wanted].join(', '), 'aria-label': `${label}, separated by commas` });
      replace(fieldset, h('legend', null, label), input, h('p', { class: 'note' }, `The ${label.toLowerCase()} could not be listed (${error.message}); type their names, separated by commas.`));
    },
  );
  return {
    element: fieldset,
    value() {
      const typed = fieldset.querySelector('input.names');
      const picked = typed
        ? typed.value.split(',').map((s) => s.trim()).filter(Boolean)
        : [...fieldset.querySelectorAll('input:checked')].map((box) => box.value);
      return picked.map((Name) => ({ Name }));
    },
  };
}

function textField(id, label, value, { multiline = false, note } = {}) {
  const input = multiline
    ? h('textarea', { id, rows: 10, spellcheck: 'false', autocomplete: 'off', value })
    : h('input', { id, type: 'text', autocomplete: 'off', value });
  return {
    element: h('div', { class: 'field' }, h('label', { for: id }, label), input, note ? h('p', { class: 'note' }, note) : null),
    value: () => input.value,
    input,
  };
}

/** The form of one kind, filled from `item` (null for a new one). */
function editor(context, kind, item, onSubmit) {
  const fields = {};
  for (const name of kind.fields) {
    if (name === 'Policies') fields.Policies = linkChoices(context, 'Policies', 'acl/policies', item && item.Policies);
    else if (name === 'Roles') fields.Roles = linkChoices(context, 'Roles', 'acl/roles', item && item.Roles);
    else if (name === 'Rules') {
      fields.Rules = textField('acl-rules', 'Rules (HCL or JSON)', item ? item.Rules || '' : '', {
        multiline: true,
        note: 'For example: key_prefix "" { policy = "read" }',
      });
    } else if (name === 'Local') {
      if (item) continue; // a token's scope is fixed when it is made
      const box = h('input', { id: 'acl-local', type: 'checkbox' });
      fields.Local = {
        element: h('div', { class: 'field' }, h('label', { class: 'choice' }, box, ' Local to this datacenter (not replicated)')),
        value: () => box.checked,
      };
    } else {
      fields[name] = textField(`acl-${name.toLowerCase()}`, name, item ? item[name] || '' : '');
    }
  }
  const save = h('button', { type: 'submit', class: 'primary' }, item ? 'Save' : 'Create');
  const form = h(
    'form',
    { class: 'editor', id: 'acl-form', novalidate: true },
    Object.values(fields).map((f) => f.element),
    h('div', { class: 'row' }, save, ' ', h('a', { href: context.href(`acls/${context.params.kind}`) }, 'Cancel')),
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const body = {};
    if (item) for (const key of kind.keep) if (item[key] !== undefined && item[key] !== null) body[key] = item[key];
    for (const [name, field] of Object.entries(fields)) body[name] = field.value();
    save.disabled = true;
    try {
      await onSubmit(body);
    } catch (error) {
      context.alerts.error(error, { key: 'acl-save', title: `Saving the ${kind.one} failed` });
    } finally {
      save.disabled = false;
    }
  });
  return form;
}

function mountCreate(main, context) {
  const kind = kindOf(main, context);
  if (!kind) return;
  const id = context.params.kind;
  append(main,
    h('p', { class: 'crumbs' }, h('a', { href: context.href(`acls/${id}`) }, kind.label), ' / '),
    h('h1', null, `New ${kind.one}`),
    editor(context, kind, null, async (body) => {
      const { data } = await context.put(kind.create, JSON.stringify(body));
      context.navigate(`acls/${id}/${segment(kind.id(data))}`);
      context.alerts.success(`Created the ${kind.one} ${kind.name(data)}.`, 'acl-save');
    }),
  );
  const first = main.querySelector('input, textarea');
  if (first) first.focus();
}

// ---- one item ----------------------------------------------------------------------------

function details(item) {
  // Identity first, then what it is called, then the rest as the agent sent it.
  const first = ['AccessorID', 'ID', 'Name', 'Description'];
  const ordered = [...first.filter((key) => key in item), ...Object.keys(item).filter((key) => !first.includes(key))];
  const rows = ordered
    .map((key) => [key, item[key]])
    .filter(([key, value]) => !['Hash', 'CreateIndex', 'ModifyIndex', 'Rules'].includes(key) && value !== null && value !== '')
    .map(([key, value]) => {
      let shown = value;
      if (Array.isArray(value)) shown = value.map((v) => (typeof v === 'object' ? v.Name || v.ID || JSON.stringify(v) : v)).join(', ') || '—';
      else if (typeof value === 'object') shown = JSON.stringify(value);
      else shown = String(value);
      // A SecretID is shown only on request, so it does not sit on the screen.
      if (key === 'SecretID') shown = h('details', null, h('summary', null, 'Show'), h('code', { id: 'acl-secret' }, shown));
      return [h('dt', null, key), h('dd', null, shown)];
    });
  return h('dl', { class: 'pairs', id: 'acl-details' }, rows);
}

function mountItem(main, context) {
  const kind = kindOf(main, context);
  if (!kind) return;
  const { kind: kindId, id } = context.params;
  const heading = h('h1', null, id);
  const info = h('div');
  const formSlot = h('section', { 'aria-labelledby': 'acl-edit-heading' });
  const missing = h('p', { class: 'muted', hidden: true }, `This ${kind.one} does not exist (any more).`);
  const start = h('button', { type: 'button', class: 'danger' }, 'Delete');
  const confirm = h('span', { class: 'confirm', hidden: true });
  const reset = () => {
    confirm.hidden = true;
    start.hidden = false;
    start.focus();
  };
  start.addEventListener('click', () => {
    start.hidden = true;
    confirm.hidden = false;
    confirm.querySelector('button').focus();
  });
  append(
    confirm,
    h(
      'button',
      {
        type: 'button',
        class: 'danger',
        onclick: async () => {
          try {
            await context.del(kind.item(id));
            context.navigate(`acls/${kindId}`);
            context.alerts.success(`Deleted the ${kind.one} ${id}.`);
          } catch (error) {
            reset();
            context.alerts.error(error, { title: `Deleting the ${kind.one} failed` });
          }
        },
      },
      `Delete this ${kind.one}`,
    ),
    ' ',
    h('button', { type: 'button', onclick: reset }, 'Cancel'),
  );
  append(main,
    h('p', { class: 'crumbs' }, h('a', { href: context.href(`acls/${kindId}`) }, kind.label), ' / '),
    heading,
    missing,
    info,
    formSlot,
  );
  let shownIndex = -1;
  context.watch(kind.item(id), {
    allowNotFound: true,
    onData(item) {
      context.alerts.clear('acl-item');
      if (!item) {
        missing.hidden = false;
        replace(info);
        replace(formSlot);
        return;
      }
      missing.hidden = true;
      replace(heading, kind.name(item));
      replace(info, details(item), h('div', { class: 'row' }, start, confirm));
      // The editor is built once per version of the item: a change by someone else while
      // the form is open is announced rather than wiping what is being typed.
      if (!saving && shownIndex >= 0 && item.ModifyIndex !== shownIndex) {
        context.alerts.show({
          kind: 'warning',
          key: 'acl-changed',
          title: 'Changed',
          text: `This ${kind.one} was changed by someone else; the details above are current.`,
          actions: [{ label: 'Reload the form', run: () => fill(item) }],
        });
        return;
      }
      fill(item);
    },
    onError(error) {
      context.alerts.error(error, { key: 'acl-item', title: `Loading the ${kind.one} failed` });
    },
  });
  let saving = false;
  function fill(item) {
    shownIndex = item.ModifyIndex;
    replace(
      formSlot,
      h('h2', { id: 'acl-edit-heading' }, 'Edit'),
      editor(context, kind, item, async (body) => {
        saving = true;
        try {
          const { data } = await context.put(kind.item(id), JSON.stringify(body));
          // Our own change is not "someone else's": the watch will bring this version.
          if (data && data.ModifyIndex !== undefined) shownIndex = data.ModifyIndex;
          context.alerts.success(`Saved the ${kind.one} ${kind.name(data || item)}.`, 'acl-save');
        } finally {
          saving = false;
        }
      }),
    );
  }
}
