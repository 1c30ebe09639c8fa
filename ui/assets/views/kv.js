// The key/value browser and editor, under /ui/<dc>/kv/:
//   kv/ and kv/<folder>/   a folder: its keys and sub-folders (?keys&separator=/), live
//   kv/<folder>/create     a new key in that folder
//   kv/<key>/edit          one key: its value as text, JSON or base64, its flags
//
// Saves are compare-and-set: an edit saves with ?cas=<the ModifyIndex it was loaded at>, a
// new key with ?cas=0, a delete with ?cas=<ModifyIndex>. If someone else changed the key
// meanwhile the agent refuses, and the editor says so instead of overwriting their change.
// The editor also watches its key, and warns as soon as it changes under an edit in
// progress.

import { h, append, replace, reconcile } from '../dom.js';
import { keyPath } from '../api.js';
import { accessNote, showAccess } from '../access.js';

export const nav = { id: 'kv', label: 'Key/Value', path: 'kv/' };
export const routes = [{ pattern: 'kv/*path', nav: 'kv', title: titleOf, mount }];

function titleOf(params) {
  const path = params.path.replace(/\/(edit|create)$|^create$/, '');
  return path ? `${path} · Key/Value` : 'Key/Value';
}

const VIEWS = [
  ['text', 'Text'],
  ['json', 'JSON'],
  ['base64', 'Base64'],
];

// ---- bytes and their views -------------------------------------------------------------

function bytesFromBase64(text) {
  const binary = atob(text.replace(/\s+/g, ''));
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function base64FromBytes(bytes) {
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/** The bytes as UTF-8 text, or null when they are not valid UTF-8. */
function textFromBytes(bytes) {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return null;
  }
}

function sameBytes(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i += 1) if (a[i] !== b[i]) return false;
  return true;
}

/** The parent folder of a key or folder ('' for the root). */
function parentOf(path) {
  const trimmed = path.endsWith('/') ? path.slice(0, -1) : path;
  const at = trimmed.lastIndexOf('/');
  return at < 0 ? '' : trimmed.slice(0, at + 1);
}

/** Links to the root and to every folder of `folder` ('' or a path ending in /). */
function crumbs(context, folder) {
  const parts = [h('a', { href: context.href('kv/') }, 'Key/Value')];
  let prefix = '';
  for (const segment of folder.split('/').slice(0, -1)) {
    prefix += `${segment}/`;
    parts.push(' / ', h('a', { href: context.href(`kv/${keyPath(prefix)}`) }, segment));
  }
  parts.push(' /');
  return h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, parts);
}

// ---- folders ---------------------------------------------------------------------------

function deleteControl(context, label, run) {
  const wrap = h('span', { class: 'actions' });
  const start = h('button', { type: 'button', class: 'danger' }, 'Delete');
  const confirm = h(
    'span',
    { class: 'confirm', hidden: true },
    h('button', { type: 'button', class: 'danger', onclick: () => run(reset) }, `Delete ${label}`),
    ' ',
    h('button', { type: 'button', onclick: () => reset() }, 'Cancel'),
  );
  function reset() {
    confirm.hidden = true;
    start.hidden = false;
    start.focus();
  }
  start.addEventListener('click', () => {
    start.hidden = true;
    confirm.hidden = false;
    confirm.querySelector('button').focus();
  });
  wrap.append(start, confirm);
  return wrap;
}

function folderRow(context, prefix, key) {
  const folder = key.endsWith('/');
  const name = key.slice(prefix.length);
  const href = context.href(folder ? `kv/${keyPath(key)}` : `kv/${keyPath(key)}/edit`);
  return h(
    'tr',
    { dataset: { key, kind: folder ? 'folder' : 'key' } },
    h('th', { scope: 'row' }, h('a', { href }, folder ? h('span', { class: 'folder' }, name) : name)),
    h('td', null, folder ? 'Folder' : 'Key'),
    h(
      'td',
      { class: 'actions' },
      deleteControl(context, folder ? 'folder and everything in it' : 'key', async (reset) => {
        try {
          await context.del(`kv/${keyPath(key)}`, { query: folder ? { recurse: '' } : {} });
          context.alerts.success(`Deleted ${key}.`);
        } catch (error) {
          reset();
          context.alerts.error(error, { title: `Deleting ${key} failed` });
        }
      }),
    ),
  );
}

function mountFolder(main, context, prefix) {
  const body = h('tbody');
  const table = h(
    'table',
    { class: 'list', id: 'kv-table', hidden: true },
    h('caption', { class: 'visually-hidden' }, `Keys in ${prefix || 'the root folder'}`),
    h(
      'thead',
      null,
      h(
        'tr',
        null,
        h('th', { scope: 'col' }, 'Name'),
        h('th', { scope: 'col' }, 'Kind'),
        h('th', { scope: 'col' }, h('span', { class: 'visually-hidden' }, 'Actions')),
      ),
    ),
    body,
  );
  const note = accessNote('kv-access');
  append(main,
    crumbs(context, parentOf(prefix)),
    h('h1', null, prefix ? prefix.slice(parentOf(prefix).length) : 'Key/Value'),
    h('div', { class: 'toolbar' }, h('a', { class: 'button', href: context.href(`kv/${keyPath(prefix)}create`) }, 'Create')),
    note,
    table,
  );
  context.watch(`kv/${keyPath(prefix)}`, {
    query: { keys: '', separator: '/' },
    allowNotFound: true,
    onData(keys, result) {
      context.alerts.clear('kv-folder');
      const entries = (keys || []).filter((key) => key !== prefix);
      reconcile(body, entries, (key) => key, (key) => folderRow(context, prefix, key));
      table.hidden = entries.length === 0;
      showAccess(note, context, {
        count: entries.length,
        filtered: result.filtered,
        noun: 'keys',
        none: prefix ? 'This folder is empty.' : 'There are no keys yet.',
      });
    },
    onError(error) {
      if (error.status === 403) {
        table.hidden = true;
        showAccess(note, context, { error, noun: 'keys' });
        return;
      }
      context.alerts.error(error, { key: 'kv-folder', title: 'Loading the keys failed' });
    },
  });
}

// ---- the value editor --------------------------------------------------------------------

/**
 * A value field with its three views. `value()` returns the bytes the field holds, or
 * throws an Error saying why they cannot be read (bad JSON, bad base64).
 */
function valueEditor() {
  let view = 'text';
  const area = h('textarea', { id: 'kv-value', rows: 12, spellcheck: 'false', autocomplete: 'off', 'aria-describedby': 'kv-value-note' });
  const note = h('p', { id: 'kv-value-note', class: 'note', 'aria-live': 'polite' });
  const format = h('button', { type: 'button', hidden: true }, 'Format JSON');
  const radios = VIEWS.map(([id, label]) =>
    h('label', { class: 'choice' }, h('input', { type: 'radio', name: 'kv-view', value: id, checked: id === 'text' }), ` ${label}`),
  );
  const fieldset = h('fieldset', { class: 'views' }, h('legend', null, 'Show the value as'), radios);

  /** The bytes the field holds in its current view (base64 must decode). */
  function read() {
    if (view === 'base64') {
      try {
        return bytesFromBase64(area.value);
      } catch {
        throw new Error('The value is not valid base64.');
      }
    }
    return new TextEncoder().encode(area.value);
  }

  /** The bytes to save: as read(), and in the JSON view only a valid JSON document. */
  function value() {
    if (view === 'json' && area.value.trim() !== '') {
      try {
        JSON.parse(area.value);
      } catch (error) {
        throw new Error(`The value is not valid JSON: ${error.message}`);
      }
    }
    return read();
  }

  function checkJson() {
    if (view !== 'json') return;
    try {
      if (area.value.trim() !== '') JSON.parse(area.value);
      area.removeAttribute('aria-invalid');
      note.textContent = 'Valid JSON.';
    } catch (error) {
      area.setAttribute('aria-invalid', 'true');
      note.textContent = `Not valid JSON: ${error.message}`;
    }
  }

  function show(bytes, next) {
    const text = textFromBytes(bytes);
    const wanted = text === null && next !== 'base64' ? 'base64' : next;
    view = wanted;
    area.value = wanted === 'base64' ? base64FromBytes(bytes) : text;
    for (const radio of fieldset.querySelectorAll('input')) {
      radio.checked = radio.value === view;
      radio.disabled = text === null && radio.value !== 'base64';
    }
    format.hidden = view !== 'json';
    area.removeAttribute('aria-invalid');
    note.textContent = text === null ? 'The value is not UTF-8 text, so it is shown as base64.' : '';
    checkJson();
  }

  fieldset.addEventListener('change', (event) => {
    const next = event.target.value;
    let bytes;
    try {
      bytes = read();
    } catch (error) {
      for (const radio of fieldset.querySelectorAll('input')) radio.checked = radio.value === view;
      note.textContent = error.message;
      return;
    }
    show(bytes, next);
  });
  area.addEventListener('input', checkJson);
  format.addEventListener('click', () => {
    try {
      area.value = JSON.stringify(JSON.parse(area.value), null, 2);
      checkJson();
    } catch (error) {
      note.textContent = `Not valid JSON: ${error.message}`;
    }
  });

  return {
    element: h('div', { class: 'field' }, fieldset, h('label', { for: 'kv-value' }, 'Value'), area, h('div', { class: 'row' }, format), note),
    value,
    set: (bytes) => show(bytes, view),
    area,
  };
}

function flagsField(initial) {
  const input = h('input', { id: 'kv-flags', type: 'text', inputmode: 'numeric', pattern: '[0-9]*', value: String(initial || 0), size: 20 });
  return {
    element: h('div', { class: 'field' }, h('label', { for: 'kv-flags' }, 'Flags'), input),
    value() {
      const text = input.value.trim() || '0';
      if (!/^[0-9]{1,20}$/.test(text) || BigInt(text) > 18446744073709551615n) {
        throw new Error('Flags must be a whole number from 0 to 18446744073709551615.');
      }
      return text;
    },
    set: (flags) => {
      input.value = String(flags || 0);
    },
  };
}

function mountCreate(main, context, prefix) {
  const keyInput = h('input', { id: 'kv-key', type: 'text', value: prefix, required: true, autocomplete: 'off', 'aria-describedby': 'kv-key-note' });
  const editor = valueEditor();
  const flags = flagsField(0);
  const save = h('button', { type: 'submit', class: 'primary' }, 'Save');
  const form = h(
    'form',
    { class: 'editor', novalidate: true },
    h(
      'div',
      { class: 'field' },
      h('label', { for: 'kv-key' }, 'Key or folder'),
      keyInput,
      h('p', { id: 'kv-key-note', class: 'note' }, 'A name ending in / creates a folder.'),
    ),
    editor.element,
    flags.element,
    h('div', { class: 'row' }, save, ' ', h('a', { href: context.href(`kv/${keyPath(prefix)}`) }, 'Cancel')),
  );
  append(main, crumbs(context, prefix), h('h1', null, 'New key'), form);
  keyInput.focus();
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const key = keyInput.value;
    let bytes;
    let flagText;
    try {
      if (!key || key.startsWith('/')) throw new Error('The key must not be empty or start with /.');
      bytes = key.endsWith('/') ? new Uint8Array() : editor.value();
      flagText = flags.value();
    } catch (error) {
      context.alerts.show({ kind: 'error', key: 'kv-save', title: 'Not saved', text: error.message });
      return;
    }
    save.disabled = true;
    try {
      const result = await context.put(`kv/${keyPath(key)}`, bytes, { query: { cas: '0', flags: flagText } });
      if (result.data === true) {
        context.navigate(key.endsWith('/') ? `kv/${keyPath(key)}` : `kv/${keyPath(key)}/edit`);
        context.alerts.success(`Created ${key}.`, 'kv-save');
      } else {
        context.alerts.show({
          kind: 'warning',
          key: 'kv-save',
          title: 'Not saved',
          text: `${key} already exists. Open it to edit it, or choose another name.`,
          actions: [{ label: `Open ${key}`, run: () => context.navigate(`kv/${keyPath(key)}/edit`) }],
        });
      }
    } catch (error) {
      context.alerts.error(error, { key: 'kv-save', title: `Saving ${key} failed` });
    } finally {
      save.disabled = false;
    }
  });
}

function mountEdit(main, context, key) {
  const editor = valueEditor();
  const flags = flagsField(0);
  const info = h('p', { class: 'muted', id: 'kv-info' });
  const save = h('button', { type: 'submit', class: 'primary' }, 'Save');
  const remove = deleteControl(context, 'key', async (reset) => {
    try {
      const result = await context.del(`kv/${keyPath(key)}`, { query: { cas: String(loaded.modifyIndex) } });
      if (result.data === true) {
        context.navigate(`kv/${keyPath(parentOf(key))}`);
        context.alerts.success(`Deleted ${key}.`);
      } else {
        reset();
        changedWarning('Not deleted');
      }
    } catch (error) {
      reset();
      context.alerts.error(error, { title: `Deleting ${key} failed` });
    }
  });
  const form = h('form', { class: 'editor', novalidate: true, hidden: true }, editor.element, flags.element, h('div', { class: 'row' }, save, ' ', remove));
  const missing = h('p', { class: 'muted', hidden: true }, 'This key does not exist (any more). ', h('a', { href: context.href(`kv/${keyPath(parentOf(key))}create`) }, 'Create a key'));
  append(main, crumbs(context, parentOf(key)), h('h1', null, key.slice(parentOf(key).length) || key), info, missing, form);

  // What the form was loaded from, what the agent holds now, and a save in flight.
  let loaded = null;
  let latest = null;
  let saving = null;
  let dirty = false;
  editor.area.addEventListener('input', () => {
    dirty = true;
  });
  form.addEventListener('input', () => {
    dirty = true;
  });

  function load(entry) {
    loaded = entry;
    dirty = false;
    editor.set(entry.bytes);
    flags.set(entry.flags);
    replace(info, `ModifyIndex ${entry.modifyIndex} · ${entry.bytes.length} bytes`, entry.session ? ` · locked by session ${entry.session}` : '');
    form.hidden = false;
    missing.hidden = true;
    context.alerts.clear('kv-changed');
  }

  function changedWarning(title) {
    context.alerts.show({
      kind: 'warning',
      key: 'kv-changed',
      title,
      text: `${key} was changed by someone else since you loaded it${latest ? ` (ModifyIndex ${loaded.modifyIndex} → ${latest.modifyIndex})` : ''}. Load the current value, then make your change again.`,
      actions: latest ? [{ label: 'Load the current value', run: () => load(latest) }] : [],
    });
  }

  context.watch(`kv/${keyPath(key)}`, {
    allowNotFound: true,
    onData(entries) {
      context.alerts.clear('kv-load');
      if (!entries || entries.length === 0) {
        latest = null;
        if (!loaded) {
          missing.hidden = false;
        } else {
          context.alerts.show({ kind: 'warning', key: 'kv-changed', title: 'Deleted', text: `${key} was deleted by someone else.` });
        }
        return;
      }
      const raw = entries[0];
      const entry = {
        modifyIndex: raw.ModifyIndex,
        flags: raw.Flags,
        session: raw.Session || '',
        bytes: raw.Value ? bytesFromBase64(raw.Value) : new Uint8Array(),
      };
      latest = entry;
      if (!loaded) {
        load(entry);
        return;
      }
      if (entry.modifyIndex === loaded.modifyIndex) return;
      // Our own save coming back, or a change nobody is editing against: take it in.
      const ours = saving && sameBytes(saving.bytes, entry.bytes) && saving.flags === String(entry.flags);
      if (ours || !dirty) {
        saving = null;
        load(entry);
        return;
      }
      changedWarning('Changed while you were editing');
    },
    onError(error) {
      context.alerts.error(error, { key: 'kv-load', title: `Loading ${key} failed` });
    },
  });

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    let bytes;
    let flagText;
    try {
      bytes = editor.value();
      flagText = flags.value();
    } catch (error) {
      context.alerts.show({ kind: 'error', key: 'kv-save', title: 'Not saved', text: error.message });
      return;
    }
    save.disabled = true;
    saving = { bytes, flags: flagText };
    try {
      const result = await context.put(`kv/${keyPath(key)}`, bytes, {
        query: { cas: String(loaded.modifyIndex), flags: flagText },
      });
      if (result.data === true) {
        dirty = false;
        context.alerts.success(`Saved ${key}.`, 'kv-save');
      } else {
        changedWarning('Not saved');
      }
    } catch (error) {
      context.alerts.error(error, { key: 'kv-save', title: `Saving ${key} failed` });
    } finally {
      save.disabled = false;
    }
  });
}

function mount(main, context) {
  const path = context.params.path;
  if (path === '' || path.endsWith('/')) {
    mountFolder(main, context, path);
  } else if (path === 'create' || path.endsWith('/create')) {
    mountCreate(main, context, path.slice(0, -'create'.length));
  } else if (path.endsWith('/edit')) {
    mountEdit(main, context, path.slice(0, -'/edit'.length));
  } else {
    context.navigate(`kv/${keyPath(path)}/edit`, { replace: true });
  }
}
