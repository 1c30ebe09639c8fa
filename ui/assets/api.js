// The agent's HTTP API, as the views use it: every request goes to /v1/ on this origin,
// carries the tab's ACL token when there is one, and fails with an ApiError that holds the
// agent's status and its text verbatim, so the user sees exactly what the agent said.

import { token } from './auth.js';

export class ApiError extends Error {
  constructor(status, text, method, path) {
    super(text || (status ? `HTTP ${status}` : 'Request failed'));
    this.name = 'ApiError';
    this.status = status;
    this.method = method;
    this.path = path;
  }
}

/** A name as one URL path segment (services, nodes, sessions). */
export const segment = (name) => encodeURIComponent(name);

/** A KV key as URL path segments: each segment encoded, the slashes kept. */
export const keyPath = (key) => key.split('/').map(encodeURIComponent).join('/');

/**
 * One request. Resolves to {status, index, filtered, data}: `index` is X-Consul-Index (0
 * when absent), `filtered` whether the agent left rows out for the token
 * (X-Consul-Results-Filtered-By-ACLs), `data` the parsed JSON (or text). A 404 resolves
 * with data null when
 * `allowNotFound` is set; every other failure rejects with an ApiError. `secret` is the
 * token to send (the tab's by default; the login view tries one before keeping it).
 */
export async function request(method, path, { query, body, signal, allowNotFound = false, secret = token() } = {}) {
  const params = query instanceof URLSearchParams ? query : new URLSearchParams(query || {});
  const search = params.toString();
  const url = `/v1/${path}${search ? `?${search}` : ''}`;
  const headers = {};
  if (secret) headers['X-Consul-Token'] = secret;
  let response;
  try {
    response = await fetch(url, { method, headers, body, signal, cache: 'no-store' });
  } catch (error) {
    if (error.name === 'AbortError') throw error;
    throw new ApiError(0, `The agent could not be reached: ${error.message}`, method, path);
  }
  const text = await response.text();
  const index = Number(response.headers.get('X-Consul-Index')) || 0;
  const filtered = response.headers.get('X-Consul-Results-Filtered-By-ACLs') === 'true';
  if (!response.ok) {
    if (allowNotFound && response.status === 404) {
      return { status: 404, index, filtered, data: null };
    }
    throw new ApiError(response.status, text.trim(), method, path);
  }
  const json = (response.headers.get('Content-Type') || '').includes('json');
  return { status: response.status, index, filtered, data: json && text ? JSON.parse(text) : text };
}

export const get = (path, options) => request('GET', path, options);
export const put = (path, body, options = {}) => request('PUT', path, { ...options, body });
export const del = (path, options) => request('DELETE', path, options);
