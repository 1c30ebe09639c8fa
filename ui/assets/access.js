// What a list says when it shows nothing, or not everything, because of ACLs.
//
// The agent leaves out the rows a token may not read and, to a caller with a token, says
// so with `X-Consul-Results-Filtered-By-ACLs: true` (Consul keeps that from anonymous
// callers, who must not learn that rows exist); a list the token may not read at all is a
// 403. So a list is in one of these states, each said in words and in `data-access`:
//
//   denied   a 403: "This token may not read <noun>.", with the agent's own text
//   hidden   empty and filtered: "This token may not read any of the <noun> here."
//   partial  some rows, filtered: "Some <noun> are hidden: this token may not read them."
//   unknown  empty, ACLs on, no token in this tab: the agent will not say whether ACLs
//            hid anything, so neither can the page (Consul's UI words it the same way)
//   none     empty, nothing hidden: the view's own sentence ("There are no keys yet.")
//   shown    rows, nothing hidden: the note is not shown
//
// With ACLs on, every state where the token is the reason offers a login with another one.

import { h, replace } from './dom.js';
import { token } from './auth.js';

/** The element a list keeps its note in, hidden until there is something to say. */
export function accessNote(id) {
  return h('div', { class: 'access-note', id, role: 'status', hidden: true });
}

/** The state of a list from its answer: `count` rows, the agent's filtered flag, a failure. */
export function accessState({ count = 0, filtered = false, error = null, aclsEnabled }) {
  if (error && error.status === 403) return 'denied';
  if (filtered) return count > 0 ? 'partial' : 'hidden';
  if (count > 0) return 'shown';
  return aclsEnabled && !token() ? 'unknown' : 'none';
}

function loginLink(context) {
  if (!context.settings.aclsEnabled) return null;
  const next = encodeURIComponent(context.currentPath());
  return h('a', { class: 'button', href: context.href(`login?next=${next}`) }, token() ? 'Log in with another token' : 'Log in');
}

/**
 * Shows what `note` should say about a list of `noun` (plural) and returns the state.
 * `none` is the sentence for a list that is simply empty.
 */
export function showAccess(note, context, { count, filtered, error, noun, none }) {
  const state = accessState({ count, filtered, error, aclsEnabled: context.settings.aclsEnabled });
  note.dataset.access = state;
  note.classList.toggle('warning', state === 'denied' || state === 'hidden' || state === 'partial');
  switch (state) {
    case 'denied':
      replace(note, h('p', null, h('strong', null, `This token may not read ${noun}.`)), h('p', { class: 'note' }, error.message), loginLink(context));
      break;
    case 'hidden':
      replace(note, h('p', null, h('strong', null, `This token may not read any of the ${noun} here.`)), loginLink(context));
      break;
    case 'partial':
      replace(note, h('p', null, `Some ${noun} are hidden: this token may not read them.`), loginLink(context));
      break;
    case 'unknown':
      replace(note, h('p', null, `No ${noun} to show: there are none, or the anonymous token may not read them. Log in to see those your token may read.`), loginLink(context));
      break;
    case 'none':
      replace(note, h('p', { class: 'muted' }, none));
      break;
    default:
      note.replaceChildren();
  }
  note.hidden = state === 'shown';
  return state;
}
