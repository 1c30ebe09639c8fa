//! The leader's session TTL timers.
//!
//! A session with a TTL is invalidated when it goes `SESSION_TTL_MULTIPLIER` × TTL without a
//! renewal (Consul's rule: the TTL is a lower bound). Only the leader keeps timers, on the
//! replica's monotonic clock; when one fires, the leader proposes an ordinary destroy, so the
//! invalidation itself is a replicated command stamped with the leader's wall clock.
//!
//! A new leader starts a full timer for every TTL session it knows (Consul's
//! `initializeSessionTimers`), so a renewal acknowledged by the previous leader just before it
//! failed keeps the session alive: the new timer runs at least 2 × TTL from the election.
//! Timers follow the store: [`SessionTimers::observe`] starts one for every session created
//! and drops the ones whose session is gone. Renewals reset a timer in place; they go
//! through no log entry, as in Consul.
//!
//! Invariant: `queue` holds exactly one `(deadline, id)` per entry of `deadlines`.

use crate::store::session::{self, Session, SESSION_TTL_MULTIPLIER};
use crate::store::{Change, ChangeKey, Table, Tables};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

#[derive(Default)]
pub struct SessionTimers {
    /// Session ID → deadline on the raft clock (ms).
    deadlines: HashMap<Arc<str>, u64>,
    /// `(deadline, id)`, soonest first.
    queue: BTreeSet<(u64, Arc<str>)>,
}

/// The timer length for `session`, `None` when it has no TTL.
fn timer_ms(session: &Session) -> Option<u64> {
    let ttl_ns = session.ttl_ns()? as u64;
    Some(
        ttl_ns
            .div_ceil(1_000_000)
            .saturating_mul(SESSION_TTL_MULTIPLIER),
    )
}

impl SessionTimers {
    pub fn len(&self) -> usize {
        self.deadlines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.deadlines.is_empty()
    }

    /// Forgets every timer (leadership lost).
    pub fn clear(&mut self) {
        self.deadlines.clear();
        self.queue.clear();
    }

    /// (Re)starts the timer of `session` to run a full 2 × TTL from `now_ms`. Returns false
    /// when the session has no TTL.
    pub fn reset(&mut self, session: &Session, now_ms: u64) -> bool {
        let Some(length) = timer_ms(session) else {
            return false;
        };
        self.cancel(&session.id);
        let deadline = now_ms.saturating_add(length);
        self.deadlines.insert(session.id.clone(), deadline);
        self.queue.insert((deadline, session.id.clone()));
        true
    }

    fn cancel(&mut self, id: &str) {
        if let Some((id, deadline)) = self.deadlines.remove_entry(id) {
            self.queue.remove(&(deadline, id));
        }
    }

    /// Starts a full timer for every TTL session (leadership gained).
    pub fn start_all(&mut self, tables: &Tables, now_ms: u64) {
        self.clear();
        for session in session::list(tables) {
            self.reset(session, now_ms);
        }
    }

    /// Follows an applied batch: starts timers for new TTL sessions, drops timers of sessions
    /// that no longer exist.
    pub fn observe(&mut self, tables: &Tables, changes: &[Change], now_ms: u64) {
        for change in changes.iter().filter(|c| c.table == Table::Sessions) {
            match &change.key {
                ChangeKey::Key(id) => match session::get(tables, id) {
                    Some(session) if !self.deadlines.contains_key(&**id) => {
                        self.reset(session, now_ms);
                    }
                    Some(_) => {}
                    None => self.cancel(id),
                },
                ChangeKey::Prefix(_) | ChangeKey::All => self.resync(tables, now_ms),
            }
        }
    }

    /// After a snapshot install or restore: keep timers of sessions that still exist, start
    /// timers for the others.
    fn resync(&mut self, tables: &Tables, now_ms: u64) {
        let gone: Vec<Arc<str>> = self
            .deadlines
            .keys()
            .filter(|id| session::get(tables, id).is_none())
            .cloned()
            .collect();
        for id in gone {
            self.cancel(&id);
        }
        for session in session::list(tables) {
            if !self.deadlines.contains_key(&*session.id) {
                self.reset(session, now_ms);
            }
        }
    }

    /// Removes and returns the sessions whose timer ran out at `now_ms`.
    pub fn take_expired(&mut self, now_ms: u64) -> Vec<Arc<str>> {
        let mut expired = Vec::new();
        while let Some((deadline, _)) = self.queue.first() {
            if *deadline > now_ms {
                break;
            }
            let (_, id) = self.queue.pop_first().expect("first exists");
            self.deadlines.remove(&id);
            expired.push(id);
        }
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::session::Behavior;

    fn session(id: &str, ttl: &str) -> Session {
        Session {
            id: Arc::from(id),
            name: String::new(),
            node: "n".into(),
            lock_delay_ns: 0,
            behavior: Behavior::Release,
            ttl: ttl.into(),
            node_checks: None,
            service_checks: None,
            checks: Vec::new(),
            create_index: 1,
            modify_index: 1,
        }
    }

    #[test]
    fn timers_run_twice_the_ttl_and_renewals_push_them_back() {
        let mut timers = SessionTimers::default();
        assert!(!timers.reset(&session("none", ""), 0));
        assert!(!timers.reset(&session("zero", "0s"), 0));
        assert!(timers.reset(&session("a", "10s"), 1_000));
        assert!(timers.reset(&session("b", "15.5s"), 1_000));
        assert!(timers.take_expired(20_999).is_empty());
        assert_eq!(timers.take_expired(21_000), vec![Arc::from("a")]);
        timers.reset(&session("b", "15.5s"), 30_000);
        assert!(timers.take_expired(60_999).is_empty());
        assert_eq!(timers.take_expired(61_000), vec![Arc::from("b")]);
        assert!(timers.is_empty());
    }
}
