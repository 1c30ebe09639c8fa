// Messages for the user, in the region at the top of the page. Errors from the agent are
// shown verbatim with their HTTP status, in role="alert" elements that screen readers
// announce at once; confirmations use role="status". A message with a key replaces the
// previous message with that key, so a failing live query shows one error, not a pile.

import { h } from './dom.js';

const keyed = new Map();
let forbiddenAction = null;

/** An action offered with every 403 (the app sets "log in" when ACLs are enabled). */
export function setForbiddenAction(action) {
  forbiddenAction = action;
}

function region() {
  return document.getElementById('alerts');
}

export function remove(element) {
  for (const [key, value] of keyed) if (value === element) keyed.delete(key);
  element.remove();
}

/** Shows a message. kind: error | warning | success. actions: [{label, run}]. */
export function show({ kind = 'error', title, text, key, actions = [] }) {
  const element = h(
    'div',
    { class: `alert ${kind}`, role: kind === 'success' ? 'status' : 'alert', dataset: { kind } },
    h(
      'div',
      { class: 'alert-body' },
      title ? h('strong', { class: 'alert-title' }, title) : null,
      text ? h('p', { class: 'alert-text' }, text) : null,
      actions.length
        ? h(
            'div',
            { class: 'alert-actions' },
            actions.map((action) =>
              h(
                'button',
                {
                  type: 'button',
                  onclick: () => {
                    remove(element);
                    action.run();
                  },
                },
                action.label,
              ),
            ),
          )
        : null,
    ),
    h('button', { type: 'button', class: 'dismiss', 'aria-label': 'Dismiss', onclick: () => remove(element) }, '×'),
  );
  const old = key && keyed.get(key);
  if (old && old.isConnected) old.replaceWith(element);
  else region().append(element);
  if (key) keyed.set(key, element);
  return element;
}

/** Shows an ApiError (or any error): its status in the title, the agent's text as is. */
export function error(failure, { key, title } = {}) {
  const status = failure && failure.status ? `Error ${failure.status}` : 'Error';
  return show({
    kind: 'error',
    key,
    title: title ? `${title} — ${status}` : status,
    text: failure && failure.message ? failure.message : String(failure),
    actions: failure && failure.status === 403 && forbiddenAction ? [forbiddenAction] : [],
  });
}

export function success(text, key) {
  return show({ kind: 'success', text, key });
}

export function clear(key) {
  const element = keyed.get(key);
  if (element) remove(element);
}

export function clearAll() {
  keyed.clear();
  region().replaceChildren();
}
