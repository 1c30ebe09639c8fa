// Health states as the views show them: a worst-of rule, and a badge that says its state
// in words (to screen readers and in its tooltip), never by colour alone.

import { h } from './dom.js';

const SEVERITY = { passing: 0, warning: 1, critical: 2 };

/** Consul's statuses as one of passing | warning | critical (maintenance is critical). */
export function normalize(status) {
  return status === 'passing' || status === 'warning' ? status : 'critical';
}

/** The worst status of some checks; 'none' when there are none. */
export function worst(checks) {
  let state = 'none';
  for (const check of checks || []) {
    const status = normalize(check.Status);
    if (state === 'none' || SEVERITY[status] > SEVERITY[state]) state = status;
  }
  return state;
}

/** The state of a service summary from its check counts. */
export function summaryState(summary) {
  if (summary.ChecksCritical > 0) return 'critical';
  if (summary.ChecksWarning > 0) return 'warning';
  if (summary.ChecksPassing > 0) return 'passing';
  return 'none';
}

const WORDS = { passing: 'passing', warning: 'warning', critical: 'critical', none: 'no checks' };
const GLYPHS = { passing: '✓', warning: '!', critical: '✕', none: '–' };

const BADGES = {};

/** A badge for `state`: cloned from one made per state (a long list makes a thousand). */
export function badge(state) {
  if (!BADGES[state]) {
    BADGES[state] = h('span', { class: `badge ${state}`, role: 'img', 'aria-label': WORDS[state], title: WORDS[state] }, GLYPHS[state]);
  }
  return BADGES[state].cloneNode(true);
}

/** "3 passing, 1 critical" with each count coloured, or "no checks". */
export function counts(passing, warning, critical) {
  const parts = [
    [passing, 'passing'],
    [warning, 'warning'],
    [critical, 'critical'],
  ].filter(([n]) => n > 0);
  if (parts.length === 0) return h('span', { class: 'muted' }, 'no checks');
  return h(
    'span',
    { class: 'counts' },
    parts.map(([n, state], i) => [i ? ', ' : '', h('span', { class: `count-${state}` }, `${n} ${state}`)]),
  );
}

export function checkCounts(checks) {
  const tally = { passing: 0, warning: 0, critical: 0 };
  for (const check of checks || []) tally[normalize(check.Status)] += 1;
  return counts(tally.passing, tally.warning, tally.critical);
}
