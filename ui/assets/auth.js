// The ACL token this tab sends as X-Consul-Token. It is kept in sessionStorage only: it
// lives as long as the tab, and no other tab, window or later visit can read it. The login
// view that sets it arrives together with ACLs; until then requests carry no token.

const KEY = 'praetor-ui/token';

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
}
