// The ACL token this tab sends as X-Consul-Token. It is kept in sessionStorage only: it
// lives as long as the tab, and no other tab, window or later visit can read it (nothing
// goes to localStorage or a cookie). The login view (views/login.js) sets it after the
// agent accepted it; logging out removes it. Listeners hear of every change, so the header
// and the open view follow at once.

const KEY = 'praetor-ui/token';
const listeners = new Set();

export function token() {
  try {
    return sessionStorage.getItem(KEY) || '';
  } catch {
    return '';
  }
}

export function setToken(secret) {
  if (secret) sessionStorage.setItem(KEY, secret);
  else sessionStorage.removeItem(KEY);
  for (const listener of listeners) listener(secret || '');
}

/** Calls `listener(secret)` after every login and logout. */
export function onTokenChange(listener) {
  listeners.add(listener);
}
