// Element helpers. Text from the agent always goes in as text nodes (never as markup), so
// nothing a service, node or key is called can become HTML.

/**
 * Creates an element. `attributes`: `class`, `dataset` (an object), `on<event>` handlers,
 * `value`/`checked` (set as properties), anything else as an attribute (`true` is present,
 * `false`/null/undefined absent). Children: nodes, strings, numbers, arrays, or nothing.
 */
export function h(tag, attributes, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') element.className = value;
    else if (name === 'dataset') Object.assign(element.dataset, value);
    else if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else if (name === 'value' || name === 'checked') element[name] = value;
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  append(element, ...children);
  return element;
}

/** Appends children as h() takes them: nulls and falses are skipped, arrays flattened. */
export function append(element, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
}

/** Replaces an element's children. */
export function replace(element, ...children) {
  element.replaceChildren();
  append(element, ...children);
}

const lists = new WeakMap();

/**
 * Brings the children of `parent` in line with `items`, keyed by `keyOf`. A row whose item
 * is unchanged is kept as it is (focus, open <details> and all), a changed one is rendered
 * anew, and rows move only when out of order, so a live update does not disturb what the
 * user is looking at.
 */
export function reconcile(parent, items, keyOf, render) {
  const previous = lists.get(parent) || new Map();
  const next = new Map();
  const nodes = [];
  for (const item of items) {
    const key = keyOf(item);
    const signature = JSON.stringify(item);
    const old = previous.get(key);
    const node = old && old.signature === signature ? old.node : render(item);
    next.set(key, { signature, node });
    nodes.push(node);
  }
  if (previous.size === 0) {
    // A first fill: one insertion of every row, not one per row (each insertion into the
    // live list would invalidate its cached children and cost a walk).
    parent.replaceChildren(...nodes);
  } else {
    let current = parent.firstElementChild;
    for (const node of nodes) {
      if (current === node) {
        current = current.nextElementSibling;
      } else {
        parent.insertBefore(node, current);
      }
    }
    while (current) {
      const after = current.nextElementSibling;
      current.remove();
      current = after;
    }
  }
  lists.set(parent, next);
}

/** Shows the rows of `parent` whose `data-search` contains every word of `text`. */
export function filterRows(parent, text, extra = () => true) {
  const words = text.toLowerCase().split(/\s+/).filter(Boolean);
  let shown = 0;
  for (const row of parent.children) {
    const haystack = row.dataset.search || '';
    const visible = words.every((w) => haystack.includes(w)) && extra(row);
    // Touch the attribute only when it changes: every write invalidates the row's style.
    if (row.hidden === visible) row.hidden = !visible;
    if (visible) shown += 1;
  }
  return shown;
}

/** A duration in nanoseconds as Go prints short ones: 15s, 1m30s, 250ms. */
export function duration(nanoseconds) {
  const ns = Number(nanoseconds) || 0;
  if (ns === 0) return '0s';
  if (ns < 1e6) return `${ns / 1e3}µs`;
  if (ns < 1e9) return `${ns / 1e6}ms`;
  let seconds = ns / 1e9;
  const hours = Math.floor(seconds / 3600);
  seconds -= hours * 3600;
  const minutes = Math.floor(seconds / 60);
  seconds -= minutes * 60;
  const s = Number.isInteger(seconds) ? seconds : seconds.toFixed(3).replace(/0+$/, '');
  return `${hours ? `${hours}h` : ''}${hours || minutes ? `${minutes}m` : ''}${s}s`;
}

/** A list of tags as a compact, labelled list. */
export function tagList(tags) {
  if (!tags || tags.length === 0) return h('span', { class: 'muted' }, '—');
  return h('ul', { class: 'tags', 'aria-label': 'Tags' }, tags.map((t) => h('li', null, t)));
}

/**
 * A table's head: a row of column headers named `names`, after a visually hidden "Health"
 * column when `health` is set (its cells are badges).
 */
export function tableHead(names, { health = false } = {}) {
  return h(
    'thead',
    null,
    h(
      'tr',
      null,
      health ? h('th', { scope: 'col', class: 'health' }, h('span', { class: 'visually-hidden' }, 'Health')) : null,
      names.map((name) => h('th', { scope: 'col' }, name)),
    ),
  );
}
