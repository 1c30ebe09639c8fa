// Live data: each list a view shows is one blocking query (Consul's ?index=&wait=) kept
// open while the view is visible.
//
// - One request at a time per list; the next one starts when the last answered, and never
//   sooner than REQUEST_GAP_MIN_MS after the previous start, so even an agent that answered
//   every blocking query at once could not be hammered.
// - While the tab is hidden the request is cancelled and none is made. On return the query
//   resumes from the last index it saw: if anything changed meanwhile, the agent answers at
//   once, so no update is lost.
// - Errors back off exponentially (with jitter) from BACKOFF_MIN_MS up to BACKOFF_MAX_MS.
// - An answer without an X-Consul-Index (an endpoint that does not block, or a 404 from an
//   agent without the feature) is delivered once and not asked again: re-asking would be
//   a polling loop. The view is re-read when the user comes back to it.
// - An index that goes backwards (a restored snapshot, a new leader) resets to 0, as
//   Consul's clients do, so the next request reads the current state without waiting.

import { get } from './api.js';

export const WAIT = '5m';
export const REQUEST_GAP_MIN_MS = 250;
export const BACKOFF_MIN_MS = 1000;
export const BACKOFF_MAX_MS = 30000;

/**
 * Watches `path`. `onData(data, result)` runs with the first answer and then whenever the
 * index moves; `onError(error)` after each failed request. Returns {stop}.
 */
export function watch(path, { query = {}, allowNotFound = false, onData, onError }) {
  let index = 0;
  let delivered = false;
  let stopped = false;
  let failures = 0;
  let controller = null;
  let timer = null;
  let lastStart = -Infinity;

  const hidden = () => document.visibilityState === 'hidden';

  function schedule(delay) {
    clearTimeout(timer);
    timer = setTimeout(run, delay);
  }

  async function run() {
    timer = null;
    if (stopped || controller || hidden()) return;
    const sinceLast = performance.now() - lastStart;
    if (sinceLast < REQUEST_GAP_MIN_MS) {
      schedule(REQUEST_GAP_MIN_MS - sinceLast);
      return;
    }
    lastStart = performance.now();
    const params = new URLSearchParams(query);
    if (index > 0) {
      params.set('index', String(index));
      params.set('wait', WAIT);
    }
    const mine = new AbortController();
    controller = mine;
    let result;
    try {
      result = await get(path, { query: params, signal: mine.signal, allowNotFound });
    } catch (error) {
      if (controller === mine) controller = null;
      if (stopped || error.name === 'AbortError') return;
      failures += 1;
      if (onError) onError(error);
      const backoff = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** (failures - 1));
      schedule(backoff / 2 + (Math.random() * backoff) / 2);
      return;
    }
    if (controller === mine) controller = null;
    if (stopped) return;
    failures = 0;
    const previous = index;
    index = result.index > 0 && result.index >= previous ? result.index : 0;
    if (!delivered || result.index !== previous) {
      delivered = true;
      onData(result.data, result);
    }
    if (result.index === 0) {
      // Nothing to block on: stop here rather than ask again at once, forever.
      stopped = true;
      document.removeEventListener('visibilitychange', onVisibility);
      return;
    }
    schedule(0);
  }

  function onVisibility() {
    if (hidden()) {
      clearTimeout(timer);
      timer = null;
      if (controller) controller.abort();
      controller = null;
    } else if (!controller && !timer) {
      run();
    }
  }

  document.addEventListener('visibilitychange', onVisibility);
  run();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      if (controller) controller.abort();
      controller = null;
      document.removeEventListener('visibilitychange', onVisibility);
    },
  };
}
