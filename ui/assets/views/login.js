// Logging in with an ACL token, at /ui/<dc>/login?next=<path>. The token is tried first
// (GET /v1/acl/token/self with it): only a token the agent accepts is kept, in the tab's
// sessionStorage (auth.js), and the user goes back to where they were. A refused token
// shows the agent's answer verbatim ("ACL not found"). The header's "Log out" forgets it.

import { h, append } from '../dom.js';
import { get } from '../api.js';
import { setToken, token } from '../auth.js';

export const routes = [{ pattern: 'login', title: 'Log in', mount }];

/** Where to go after logging in: a path inside the UI (never another site). */
function nextPath() {
  const next = new URLSearchParams(location.search).get('next') || '';
  return /^[a-z]/.test(next) && !next.includes('//') ? next : 'services';
}

function mount(main, context) {
  const input = h('input', {
    id: 'login-token',
    type: 'password',
    required: true,
    autocomplete: 'off',
    spellcheck: 'false',
    'aria-describedby': 'login-note',
    size: 40,
  });
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Log in');
  const form = h(
    'form',
    { class: 'editor', id: 'login-form', novalidate: true },
    h(
      'div',
      { class: 'field' },
      h('label', { for: 'login-token' }, 'Token (SecretID)'),
      input,
      h(
        'p',
        { id: 'login-note', class: 'note' },
        'The token is kept in this tab only (session storage) and sent with every request as X-Consul-Token. ',
        'Closing the tab forgets it.',
      ),
    ),
    h('div', { class: 'row' }, submit),
  );
  append(main,
    h('h1', null, 'Log in'),
    token() ? h('p', { class: 'muted' }, 'This tab is logged in; logging in again replaces its token.') : null,
    form,
  );
  input.focus();
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const secret = input.value.trim();
    if (!secret) {
      context.alerts.show({ kind: 'error', key: 'login', title: 'Not logged in', text: 'Enter a token.' });
      input.focus();
      return;
    }
    submit.disabled = true;
    try {
      const { data } = await get('acl/token/self', { secret, query: context.dc === context.settings.datacenter ? {} : { dc: context.dc } });
      setToken(secret);
      context.navigate(nextPath(), { replace: true });
      const who = (data && (data.Description || data.AccessorID)) || 'the token';
      context.alerts.success(`Logged in as ${who}.`, 'login');
    } catch (error) {
      context.alerts.error(error, { key: 'login', title: 'Logging in failed' });
      input.select();
    } finally {
      submit.disabled = false;
    }
  });
}
