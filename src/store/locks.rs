//! The relation between sessions and the KV keys they hold: acquiring and releasing a lock,
//! lock-delays, and what happens to held keys when their session ends.
//!
//! This module sits above both tables it joins: it writes KV rows through `kv` and reads
//! session rows, while `kv` knows nothing of sessions (a row's `session` is an opaque holder
//! ID to it) and `session` knows nothing of KV. Its state (`held`, `lock_delays`,
//! `lock_delay_expiry`) is declared in [`SessionTables`](super::session::SessionTables) only
//! because the snapshot layout is positional; nothing but this module reads or writes it.
//!
//! Locks follow Consul's `kvsLockTxn`/`kvsUnlockTxn`: a lock needs a live session; the holder
//! re-acquiring updates value and flags and keeps `LockIndex`; a new acquisition increments
//! `LockIndex`; an unlock by the holder clears `Session` and keeps `LockIndex`. A key inside
//! its lock-delay cannot be locked, whatever the session.
//!
//! When a session ends, every key it holds is released (`Behavior` release: `Session`
//! cleared, `LockIndex` kept) or deleted (`Behavior` delete), and each gets a lock-delay: an
//! acquisition before `leader time + min(LockDelay, 60 s)` fails. The clock is the proposing
//! leader's wall clock carried in every Raft entry ([`Tables::leader_time_ms`]), so
//! lock-delays are replicated state, identical on every server and kept across failover.
//!
//! Invariants:
//! - every key in `held[id]` whose entry exists names session `id` as its holder, and every
//!   entry with a holder is listed under it (a deleted or unlocked key is dropped at once);
//! - `lock_delay_expiry` holds `(until, key)` for every entry of `lock_delays`.

use super::kv::{self, KvEntry, KvRow};
use super::session::{Behavior, Session};
use super::{Change, Tables};
use bytes::Bytes;
use std::sync::Arc;

/// Consul's `MaxLockDelay`: longer lock-delays are cut to this.
pub const LOCK_DELAY_MAX_NS: i64 = 60_000_000_000;

/// How a lock attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockOutcome {
    Acquired,
    /// Another session holds the key.
    HeldByOther,
    /// The key is inside the lock-delay of a session invalidated while holding it.
    LockDelay,
}

/// Consul's lock: refused inside a lock-delay, an error without a live session, refused
/// while another session holds the key.
pub(super) fn lock(
    tables: &mut Tables,
    index: u64,
    key: &str,
    value: &Bytes,
    flags: u64,
    session_id: &str,
    changes: &mut Vec<Change>,
) -> Result<LockOutcome, String> {
    prune_lock_delays(tables);
    if lock_delay_active(tables, key) {
        return Ok(LockOutcome::LockDelay);
    }
    if session_id.is_empty() {
        return Err("missing session".to_string());
    }
    let Some(holder) = tables
        .sessions
        .sessions
        .get(session_id)
        .map(|s| s.id.clone())
    else {
        return Err(format!("invalid session {session_id:?}"));
    };
    let lock_index = match tables.kv.entries.get(key).map(KvRow::fields) {
        Some(e) => match e.session {
            Some(current) if current == &*holder => e.lock_index,
            Some(_) => return Ok(LockOutcome::HeldByOther),
            None => e.lock_index + 1,
        },
        None => 1,
    };
    kv::write_locked(
        tables,
        index,
        key,
        value,
        flags,
        Some(&holder),
        lock_index,
        changes,
    );
    hold(tables, &holder, key);
    debug_assert!(
        tables.kv.entries.get(key).and_then(KvRow::session) == Some(&*holder),
        "an acquired key names its holder"
    );
    Ok(LockOutcome::Acquired)
}

/// Consul's unlock: only the holder may, and the key keeps its `LockIndex`. Returns whether
/// the lock was released.
pub(super) fn unlock(
    tables: &mut Tables,
    index: u64,
    key: &str,
    value: &Bytes,
    flags: u64,
    session_id: &str,
    changes: &mut Vec<Change>,
) -> Result<bool, String> {
    if session_id.is_empty() {
        return Err("missing session".to_string());
    }
    let Some(existing) = tables.kv.entries.get(key) else {
        return Ok(false);
    };
    if existing.session() != Some(session_id) {
        return Ok(false);
    }
    let lock_index = existing.lock_index();
    kv::write_locked(tables, index, key, value, flags, None, lock_index, changes);
    unhold(tables, session_id, key);
    Ok(true)
}

/// Releases or deletes, per its `Behavior`, every key the ended `session` still holds, each
/// with a lock-delay. The session row itself is already gone.
pub(super) fn release_held(
    tables: &mut Tables,
    index: u64,
    session: &Session,
    changes: &mut Vec<Change>,
) {
    debug_assert!(
        !tables.sessions.sessions.contains_key(&*session.id),
        "keys are released after their session row is removed"
    );
    let Some(held) = tables.sessions.held.remove(&*session.id) else {
        return;
    };
    let delay_ms = delay_ms(session.lock_delay_ns);
    let until = tables.leader_time_ms.saturating_add(delay_ms);
    let mut removed = Vec::new();
    for key in held.iter() {
        let holds = tables
            .kv
            .entries
            .get(key)
            .is_some_and(|entry| entry.session() == Some(&*session.id));
        debug_assert!(holds, "a held key names its holder");
        if !holds {
            continue;
        }
        match session.behavior {
            Behavior::Release => kv::clear_holder(tables, index, key, changes),
            // The session's list is gone already: nothing to forget for the removed row.
            Behavior::Delete => kv::delete(tables, index, key, &mut removed, changes),
        }
        if delay_ms > 0 {
            set_lock_delay(tables, key, until);
        }
    }
}

/// Drops deleted keys from their holders' lists. `deleted` are the rows a KV write removed.
pub(super) fn forget_deleted(tables: &mut Tables, deleted: &[KvEntry]) {
    for row in deleted {
        let Some(holder) = row.session() else {
            continue;
        };
        // The same write may have created and locked the key again (a transaction), and
        // then the holder still holds it.
        let still_held = tables
            .kv
            .entries
            .get(row.key())
            .is_some_and(|entry| entry.session() == Some(holder));
        if !still_held {
            unhold(tables, holder, row.key());
        }
    }
}

/// Whether `key` is inside a lock-delay at the current leader time.
pub fn lock_delay_active(tables: &Tables, key: &str) -> bool {
    tables
        .sessions
        .lock_delays
        .get(key)
        .is_some_and(|until| *until > tables.leader_time_ms)
}

/// The end of `key`'s lock-delay in leader time (Unix ms), if one was ever set and not pruned.
pub fn lock_delay_until(tables: &Tables, key: &str) -> Option<u64> {
    tables.sessions.lock_delays.get(key).copied()
}

/// Lock-delay in whole milliseconds (rounded up, so it never ends early), capped at 60 s.
fn delay_ms(lock_delay_ns: i64) -> u64 {
    let ns = lock_delay_ns.clamp(0, LOCK_DELAY_MAX_NS) as u64;
    ns.div_ceil(1_000_000)
}

fn set_lock_delay(tables: &mut Tables, key: &str, until: u64) {
    prune_lock_delays(tables);
    let key: Arc<str> = Arc::from(key);
    let delays = &mut tables.sessions;
    if let Some(previous) = delays.lock_delays.insert(key.clone(), until) {
        delays.lock_delay_expiry.remove(&(previous, key.clone()));
    }
    delays.lock_delay_expiry.insert((until, key.clone()));
    debug_assert_eq!(
        delays.lock_delays.len(),
        delays.lock_delay_expiry.len(),
        "one expiry entry per lock-delay"
    );
}

/// Drops lock-delays that ended at or before the current leader time.
fn prune_lock_delays(tables: &mut Tables) {
    let now = tables.leader_time_ms;
    let delays = &mut tables.sessions;
    while let Some((until, key)) = delays.lock_delay_expiry.get_min().cloned() {
        if until > now {
            break;
        }
        delays.lock_delay_expiry.remove_min();
        if delays.lock_delays.get(&key) == Some(&until) {
            delays.lock_delays.remove(&key);
        }
    }
}

/// Records that `session` now holds `key`.
fn hold(tables: &mut Tables, session: &Arc<str>, key: &str) {
    let held = tables.sessions.held.entry(session.clone()).or_default();
    if !held.contains(key) {
        held.insert(Arc::from(key));
    }
}

/// Records that `session` no longer holds `key`.
fn unhold(tables: &mut Tables, session: &str, key: &str) {
    let emptied = match tables.sessions.held.get_mut(session) {
        Some(keys) => {
            keys.remove(key);
            keys.is_empty()
        }
        None => false,
    };
    if emptied {
        tables.sessions.held.remove(session);
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::Fixture;
    use super::super::kv::KvOp;
    use super::super::session::SessionOp;
    use super::super::{Command, CommandResult, KvResult, Table};
    use super::*;

    #[test]
    fn lock_index_and_holder_semantics_follow_consul() {
        let mut f = Fixture::new();
        f.create("a", "n1", &[], Behavior::Release);
        f.create("b", "n1", &[], Behavior::Release);
        assert_eq!(
            f.lock("k", "a", "v1"),
            CommandResult::Kv(KvResult::LockAcquired)
        );
        let first = f.entry("k").unwrap();
        assert_eq!((first.lock_index(), first.session()), (1, Some("a")));
        // The holder re-acquires: value and flags update, LockIndex stays.
        assert_eq!(
            f.lock("k", "a", "v2"),
            CommandResult::Kv(KvResult::LockAcquired)
        );
        let again = f.entry("k").unwrap();
        assert_eq!((again.lock_index(), again.value()), (1, &b"v2"[..]));
        // Re-acquiring with identical contents writes nothing.
        let before = again.modify_index();
        f.lock("k", "a", "v2");
        assert_eq!(f.entry("k").unwrap().modify_index(), before);
        assert!(f.changes.is_empty());
        // Another session is refused while the lock is held.
        assert_eq!(
            f.lock("k", "b", "x"),
            CommandResult::Kv(KvResult::LockNotAcquired)
        );
        // Unlock by a non-holder fails; by the holder clears Session and keeps LockIndex.
        let unlock = |session: &str| {
            Command::Kv(KvOp::Unlock {
                key: "k".into(),
                value: Bytes::from_static(b"done"),
                flags: 3,
                session: session.into(),
            })
        };
        assert_eq!(f.run(unlock("b")), CommandResult::Kv(KvResult::NotReleased));
        assert_eq!(f.run(unlock("a")), CommandResult::Kv(KvResult::Released));
        let released = f.entry("k").unwrap();
        assert_eq!(
            (released.session(), released.lock_index(), released.flags()),
            (None, 1, 3)
        );
        assert!(f.tables.sessions.held.is_empty());
        // A new acquisition increments LockIndex.
        assert_eq!(
            f.lock("k", "b", "y"),
            CommandResult::Kv(KvResult::LockAcquired)
        );
        assert_eq!(f.entry("k").unwrap().lock_index(), 2);
        // Errors Consul reports from the store.
        assert_eq!(
            f.lock("k2", "", "v"),
            CommandResult::Kv(KvResult::Refused("missing session".into()))
        );
        assert_eq!(
            f.lock("k2", "ghost", "v"),
            CommandResult::Kv(KvResult::Refused("invalid session \"ghost\"".into()))
        );
    }

    #[test]
    fn destroy_releases_held_keys_with_a_lock_delay_in_leader_time() {
        let mut f = Fixture::new();
        f.tables.leader_time_ms = 1_000_000;
        f.create("a", "n1", &[], Behavior::Release);
        f.create("b", "n1", &[], Behavior::Release);
        f.lock("k", "a", "v");
        f.lock("other", "b", "v");
        f.run(Command::Session(SessionOp::Destroy { id: "a".into() }));
        let released = f.entry("k").unwrap();
        assert_eq!((released.session(), released.lock_index()), (None, 1));
        assert!(f
            .changes
            .contains(&Change::key(Table::Kvs, &Arc::from("k"))));
        assert_eq!(f.entry("other").unwrap().session(), Some("b"));
        assert_eq!(lock_delay_until(&f.tables, "k"), Some(1_015_000));
        // Inside the delay even a live session cannot acquire; at its end it can.
        f.tables.leader_time_ms = 1_014_999;
        assert_eq!(
            f.lock("k", "b", "v"),
            CommandResult::Kv(KvResult::LockNotAcquired)
        );
        f.tables.leader_time_ms = 1_015_000;
        assert_eq!(
            f.lock("k", "b", "v"),
            CommandResult::Kv(KvResult::LockAcquired)
        );
        assert!(
            f.tables.sessions.lock_delays.is_empty(),
            "expired delays are pruned"
        );
    }

    #[test]
    fn delete_behavior_deletes_held_keys() {
        let mut f = Fixture::new();
        f.create("e", "n1", &[], Behavior::Delete);
        f.lock("eph/1", "e", "v");
        f.lock("eph/2", "e", "v");
        f.run(Command::Session(SessionOp::Destroy { id: "e".into() }));
        assert!(f.entry("eph/1").is_none() && f.entry("eph/2").is_none());
        assert!(f.tables.kv.tombstones.contains_key("eph/1"));
    }

    #[test]
    fn deleting_a_held_key_forgets_it() {
        let mut f = Fixture::new();
        f.create("a", "n1", &[], Behavior::Release);
        f.lock("k", "a", "v");
        f.run(Command::Kv(KvOp::Delete { key: "k".into() }));
        assert!(f.tables.sessions.held.is_empty());
        f.lock("t/1", "a", "v");
        f.run(Command::Kv(KvOp::DeleteTree {
            prefix: "t/".into(),
        }));
        assert!(f.tables.sessions.held.is_empty());
    }

    #[test]
    fn snapshot_round_trip_keeps_sessions_and_delays() {
        let mut f = Fixture::new();
        f.tables.leader_time_ms = 5;
        f.create("a", "n1", &["serfHealth"], Behavior::Delete);
        f.create("b", "n1", &[], Behavior::Release);
        f.lock("k", "a", "v");
        f.lock("h", "b", "v");
        f.run(Command::Session(SessionOp::Destroy { id: "a".into() }));
        let restored = Tables::from_snapshot_bytes(&f.tables.to_snapshot_bytes()).unwrap();
        assert_eq!(restored.sessions.sessions.len(), 1);
        assert_eq!(lock_delay_until(&restored, "k"), Some(15_005));
        assert_eq!(restored.sessions.held.len(), 1);
        assert_eq!(restored.leader_time_ms, 5);
    }
}
