//! The `sessions` table and everything that ends a session: destroy, TTL expiry, a bound
//! check going critical, the node leaving the catalog. Consul's semantics throughout.
//!
//! A session binds a node and a set of that node's health checks. It stays valid while the
//! node is registered and none of its checks is critical; the catalog apply calls
//! [`after_catalog_write`] for every node it touched, and sessions whose binding broke are
//! invalidated inside the same Raft entry — deterministically on every server, as Consul does
//! inside its state-store transaction.
//!
//! Invalidation releases (`Behavior` release: `Session` cleared, `LockIndex` kept) or deletes
//! (`Behavior` delete) every key the session holds, and gives each such key a lock-delay: an
//! acquisition of the key before `leader time + min(LockDelay, 60 s)` fails. The clock is the
//! proposing leader's wall clock carried in every Raft entry ([`Tables::leader_time_ms`]),
//! so lock-delays are replicated state, identical on every server and kept across failover.
//!
//! TTL expiry itself is not decided here: the leader keeps the timers (`shard::session_timers`)
//! and proposes an ordinary destroy when one fires.
//!
//! Watch keys: `Key(Sessions, id)` for one session and `Key(Sessions, node_watch_key(node))`
//! for the sessions of a node; the table index moves on every create and invalidation.
//!
//! Invariants:
//! - `by_node[fold(s.node)]` contains exactly the IDs of the sessions on that node;
//! - every key in `held[id]` whose entry still exists names session `id` (keys are dropped
//!   from `held` when they are unlocked, deleted or re-locked by their holder's invalidation);
//! - `lock_delay_expiry` holds `(until, key)` for every entry of `lock_delays`.

use super::catalog::read as catalog_read;
use super::catalog::rows::{fold, Status};
use super::{kv, Change, ChangeKey, CommandResult, Table, Tables};
use imbl::{OrdMap, OrdSet};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Consul's `SessionTTLMin` default: shorter TTLs are refused.
pub const SESSION_TTL_MIN_NS: i64 = 10_000_000_000;
/// Consul's `SessionTTLMax`: 24 hours.
pub const SESSION_TTL_MAX_NS: i64 = 86_400_000_000_000;
/// The leader invalidates a TTL session after this many TTLs without renewal (Consul's
/// `SessionTTLMultiplier`): the TTL is a lower bound, with slack for network and failover.
pub const SESSION_TTL_MULTIPLIER: u64 = 2;
/// Consul's `MaxLockDelay`: longer lock-delays are cut to this.
pub const LOCK_DELAY_MAX_NS: i64 = 60_000_000_000;
/// The lock-delay a session gets when the request names none (Consul: 15 s).
pub const LOCK_DELAY_DEFAULT_NS: i64 = 15_000_000_000;
/// Longest session name, node name or check list entry accepted at creation.
pub const SESSION_NAME_BYTES_MAX: usize = 1024;
/// Most checks one session may be bound to.
pub const SESSION_CHECKS_MAX: usize = 64;

/// What happens to a session's locks when it is invalidated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Behavior {
    /// Clear `Session` on every held key (Consul's default).
    Release,
    /// Delete every held key (ephemeral entries).
    Delete,
}

impl Behavior {
    pub fn as_str(self) -> &'static str {
        match self {
            Behavior::Release => "release",
            Behavior::Delete => "delete",
        }
    }
    pub fn parse(text: &str) -> Option<Behavior> {
        match text {
            "" | "release" => Some(Behavior::Release),
            "delete" => Some(Behavior::Delete),
            _ => None,
        }
    }
}

/// A service check a session is bound to (Consul's `ServiceCheck`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceCheck {
    pub id: String,
    pub namespace: String,
}

/// One row of the `sessions` table: Consul's `Session`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub id: Arc<str>,
    pub name: String,
    /// The node as the request named it; looked up case-insensitively.
    pub node: String,
    /// Nanoseconds, as Consul stores a `time.Duration`.
    pub lock_delay_ns: i64,
    pub behavior: Behavior,
    /// The TTL text as given (`"15s"`, `"15.0s"`), empty for none.
    pub ttl: String,
    /// `None` renders as `null`, as Go renders a nil slice.
    pub node_checks: Option<Vec<String>>,
    pub service_checks: Option<Vec<ServiceCheck>>,
    /// Consul's deprecated `Checks` field; rendered only when non-empty.
    pub checks: Vec<String>,
    pub create_index: u64,
    pub modify_index: u64,
}

impl Session {
    /// Every check the session is bound to (Consul's `CheckIDs`).
    pub fn check_ids(&self) -> impl Iterator<Item = &str> {
        self.checks
            .iter()
            .map(String::as_str)
            .chain(self.node_checks.iter().flatten().map(String::as_str))
            .chain(
                self.service_checks
                    .iter()
                    .flatten()
                    .map(|check| check.id.as_str()),
            )
    }

    /// The TTL in nanoseconds, `None` when the session has none.
    pub fn ttl_ns(&self) -> Option<i64> {
        if self.ttl.is_empty() {
            return None;
        }
        crate::proto::duration::parse_go_duration_nanos(&self.ttl)
            .ok()
            .filter(|ns| *ns > 0)
    }
}

/// The `sessions` table, its node index, the keys each session holds, and lock-delays.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SessionTables {
    pub sessions: OrdMap<Arc<str>, Arc<Session>>,
    /// Folded node name → IDs of its sessions.
    pub by_node: OrdMap<Arc<str>, OrdSet<Arc<str>>>,
    /// Session ID → keys it holds (Consul's `kvs.session` index).
    pub held: OrdMap<Arc<str>, OrdSet<Arc<str>>>,
    /// Key → leader time (Unix ms) before which it cannot be acquired.
    pub lock_delays: OrdMap<Arc<str>, u64>,
    /// `(until, key)` for every lock-delay, soonest first, so expired ones are pruned cheaply.
    pub lock_delay_expiry: OrdSet<(u64, Arc<str>)>,
}

/// A session write, as carried in a Raft entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionOp {
    /// Insert a session whose ID the proposing server generated (so every server inserts the
    /// same row) and whose fields the HTTP layer defaulted and validated.
    Create(Box<Session>),
    /// Invalidate the session: `/v1/session/destroy`, and the leader's TTL expiry.
    Destroy { id: String },
}

/// The watch key under which the sessions of `node` are announced.
pub fn node_watch_key(node: &str) -> Arc<str> {
    Arc::from(format!("node:{}", fold(node)))
}

/// The index Consul reports for every session read: the table's.
pub fn sessions_index(tables: &Tables) -> u64 {
    tables.table_index(Table::Sessions)
}

pub fn get<'a>(tables: &'a Tables, id: &str) -> Option<&'a Arc<Session>> {
    tables.sessions.sessions.get(id)
}

/// Every session, ordered by ID.
pub fn list(tables: &Tables) -> impl Iterator<Item = &Arc<Session>> {
    tables.sessions.sessions.values()
}

/// The sessions of one node, ordered by ID.
pub fn node_sessions<'a>(tables: &'a Tables, node: &str) -> Vec<&'a Arc<Session>> {
    match tables.sessions.by_node.get(&*fold(node)) {
        Some(ids) => ids
            .iter()
            .filter_map(|id| tables.sessions.sessions.get(id))
            .collect(),
        None => Vec::new(),
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

pub(super) fn apply(
    tables: &mut Tables,
    index: u64,
    op: &SessionOp,
    changes: &mut Vec<Change>,
) -> CommandResult {
    match op {
        SessionOp::Create(session) => match create(tables, index, session, changes) {
            Ok(()) => CommandResult::Bool(true),
            Err(reason) => CommandResult::Error(reason),
        },
        SessionOp::Destroy { id } => {
            invalidate(tables, index, id, changes);
            CommandResult::Bool(true)
        }
    }
}

/// Why a session cannot bind to `node` and its checks now, in Consul's words.
pub fn binding_error(tables: &Tables, node: &str, check_ids: &[&str]) -> Option<String> {
    if tables.catalog.node(node).is_none() {
        return Some("Missing node registration".to_string());
    }
    for check_id in check_ids {
        match catalog_read::check(tables, node, check_id) {
            None => return Some(format!("Missing check '{check_id}' registration")),
            Some(check) if is_critical(check.status) => {
                return Some(format!("Check '{check_id}' is in critical state"))
            }
            Some(_) => {}
        }
    }
    None
}

fn is_critical(status: Status) -> bool {
    matches!(status, Status::Critical | Status::Maintenance)
}

fn create(
    tables: &mut Tables,
    index: u64,
    session: &Session,
    changes: &mut Vec<Change>,
) -> Result<(), String> {
    if session.id.is_empty() {
        return Err("Missing session ID".to_string());
    }
    if tables.sessions.sessions.contains_key(&*session.id) {
        // IDs are random UUIDs checked for uniqueness by the proposer; a repeat can only be
        // a replayed or forged command, and overwriting would orphan the held keys.
        return Err(format!("Session ID {:?} already exists", session.id));
    }
    let check_ids: Vec<&str> = session.check_ids().collect();
    if let Some(reason) = binding_error(tables, &session.node, &check_ids) {
        return Err(reason);
    }
    let mut row = session.clone();
    row.create_index = index;
    row.modify_index = index;
    let id = row.id.clone();
    let node_key: Arc<str> = Arc::from(&*fold(&row.node));
    tables.sessions.sessions.insert(id.clone(), Arc::new(row));
    tables
        .sessions
        .by_node
        .entry(node_key)
        .or_default()
        .insert(id.clone());
    tables.bump_table(Table::Sessions, index);
    changes.push(Change::key(Table::Sessions, &id));
    changes.push(Change::key(Table::Sessions, &node_watch_key(&session.node)));
    Ok(())
}

/// Ends a session: removes it, then releases or deletes every key it holds, each with a
/// lock-delay. Returns whether the session existed.
pub fn invalidate(tables: &mut Tables, index: u64, id: &str, changes: &mut Vec<Change>) -> bool {
    let Some((id, session)) = tables.sessions.sessions.remove_with_key(id) else {
        return false;
    };
    let node_key = fold(&session.node).into_owned();
    let node_emptied = match tables.sessions.by_node.get_mut(node_key.as_str()) {
        Some(ids) => {
            ids.remove(&id);
            ids.is_empty()
        }
        None => false,
    };
    if node_emptied {
        tables.sessions.by_node.remove(node_key.as_str());
    }
    tables.bump_table(Table::Sessions, index);
    changes.push(Change::key(Table::Sessions, &id));
    changes.push(Change::key(Table::Sessions, &node_watch_key(&session.node)));

    let delay_ms = delay_ms(session.lock_delay_ns);
    let until = tables.leader_time_ms.saturating_add(delay_ms);
    let held = tables.sessions.held.remove(&id).unwrap_or_default();
    for key in held.iter() {
        let holds = tables
            .kv
            .entries
            .get(key)
            .is_some_and(|entry| entry.session.as_deref() == Some(&*id));
        if !holds {
            continue;
        }
        match session.behavior {
            Behavior::Release => kv::clear_session(tables, index, key, changes),
            Behavior::Delete => kv::delete_key(tables, index, key, changes),
        }
        if delay_ms > 0 {
            set_lock_delay(tables, key, until);
        }
    }
    true
}

/// Lock-delay in whole milliseconds (rounded up, so it never ends early), capped at 60 s.
fn delay_ms(lock_delay_ns: i64) -> u64 {
    let ns = lock_delay_ns.clamp(0, LOCK_DELAY_MAX_NS) as u64;
    ns.div_ceil(1_000_000)
}

fn set_lock_delay(tables: &mut Tables, key: &Arc<str>, until: u64) {
    prune_lock_delays(tables);
    let delays = &mut tables.sessions;
    if let Some(previous) = delays.lock_delays.insert(key.clone(), until) {
        delays.lock_delay_expiry.remove(&(previous, key.clone()));
    }
    delays.lock_delay_expiry.insert((until, key.clone()));
}

/// Drops lock-delays that ended at or before the current leader time.
pub(super) fn prune_lock_delays(tables: &mut Tables) {
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
pub(super) fn hold(tables: &mut Tables, session: &Arc<str>, key: &Arc<str>) {
    tables
        .sessions
        .held
        .entry(session.clone())
        .or_default()
        .insert(key.clone());
}

/// Records that `session` no longer holds `key`.
pub(super) fn unhold(tables: &mut Tables, session: &str, key: &str) {
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

/// Called by the catalog apply with the changes it made: every session on a touched node
/// whose node is gone or whose bound checks are missing or critical is invalidated, in the
/// same entry (Consul invalidates inside the catalog's state-store transaction).
pub(crate) fn after_catalog_write(
    tables: &mut Tables,
    index: u64,
    catalog_changes: &[Change],
    changes: &mut Vec<Change>,
) {
    if tables.sessions.sessions.is_empty() {
        return;
    }
    let mut nodes: Vec<&Arc<str>> = catalog_changes
        .iter()
        .filter(|c| matches!(c.table, Table::Nodes | Table::Checks))
        .filter_map(|c| match &c.key {
            ChangeKey::Key(node) => Some(node),
            _ => None,
        })
        .collect();
    nodes.sort();
    nodes.dedup();
    let mut broken: Vec<Arc<str>> = Vec::new();
    for node_key in nodes {
        let Some(ids) = tables.sessions.by_node.get(&**node_key) else {
            continue;
        };
        for id in ids.iter() {
            let Some(session) = tables.sessions.sessions.get(id) else {
                continue;
            };
            let check_ids: Vec<&str> = session.check_ids().collect();
            if binding_error(tables, &session.node, &check_ids).is_some() {
                broken.push(id.clone());
            }
        }
    }
    for id in broken {
        invalidate(tables, index, &id, changes);
    }
}

#[cfg(test)]
mod tests {
    use super::super::catalog::{CatalogOp, CheckRegistration, Registration};
    use super::super::kv::KvOp;
    use super::super::Command;
    use super::*;
    use bytes::Bytes;

    struct Fixture {
        tables: Tables,
        next_index: u64,
        changes: Vec<Change>,
    }

    impl Fixture {
        fn new() -> Self {
            let mut f = Fixture {
                tables: Tables::default(),
                next_index: 10,
                changes: Vec::new(),
            };
            f.register_node("n1", &[("serfHealth", "passing"), ("web", "passing")]);
            f
        }
        fn run(&mut self, command: Command) -> CommandResult {
            self.next_index += 1;
            self.changes.clear();
            self.tables
                .apply(self.next_index, &command, &mut self.changes)
        }
        fn register_node(&mut self, node: &str, checks: &[(&str, &str)]) -> CommandResult {
            self.run(Command::Catalog(CatalogOp::Register(Box::new(
                Registration {
                    node: node.into(),
                    address: "10.0.0.1".into(),
                    checks: checks
                        .iter()
                        .map(|(id, status)| CheckRegistration {
                            check_id: (*id).into(),
                            name: (*id).into(),
                            status: (*status).into(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                },
            ))))
        }
        fn create(
            &mut self,
            id: &str,
            node: &str,
            checks: &[&str],
            behavior: Behavior,
        ) -> CommandResult {
            self.run(Command::Session(SessionOp::Create(Box::new(Session {
                id: Arc::from(id),
                name: String::new(),
                node: node.into(),
                lock_delay_ns: LOCK_DELAY_DEFAULT_NS,
                behavior,
                ttl: String::new(),
                node_checks: Some(checks.iter().map(|c| c.to_string()).collect()),
                service_checks: None,
                checks: Vec::new(),
                create_index: 0,
                modify_index: 0,
            }))))
        }
        fn lock(&mut self, key: &str, session: &str, value: &str) -> CommandResult {
            self.run(Command::Kv(KvOp::Lock {
                key: key.into(),
                value: Bytes::copy_from_slice(value.as_bytes()),
                flags: 0,
                session: session.into(),
            }))
        }
        fn entry(&self, key: &str) -> Option<Arc<kv::KvEntry>> {
            kv::get(&self.tables, key).1.cloned()
        }
    }

    #[test]
    fn create_validates_node_and_checks_with_consuls_words() {
        let mut f = Fixture::new();
        assert_eq!(
            f.create("s0", "nope", &[], Behavior::Release),
            CommandResult::Error("Missing node registration".into())
        );
        assert_eq!(
            f.create("s0", "n1", &["absent"], Behavior::Release),
            CommandResult::Error("Missing check 'absent' registration".into())
        );
        f.register_node("n1", &[("serfHealth", "passing"), ("web", "critical")]);
        assert_eq!(
            f.create("s0", "n1", &["web"], Behavior::Release),
            CommandResult::Error("Check 'web' is in critical state".into())
        );
        assert_eq!(
            f.create("s1", "N1", &["serfHealth"], Behavior::Release),
            CommandResult::Bool(true)
        );
        assert_eq!(
            f.changes,
            vec![
                Change::key(Table::Sessions, &Arc::from("s1")),
                Change::key(Table::Sessions, &node_watch_key("n1")),
            ]
        );
        assert_eq!(
            node_sessions(&f.tables, "n1").len(),
            1,
            "node lookup folds case"
        );
        assert_eq!(sessions_index(&f.tables), f.next_index);
        assert!(matches!(
            f.create("s1", "n1", &[], Behavior::Release),
            CommandResult::Error(_)
        ));
    }

    #[test]
    fn lock_index_and_holder_semantics_follow_consul() {
        let mut f = Fixture::new();
        f.create("a", "n1", &[], Behavior::Release);
        f.create("b", "n1", &[], Behavior::Release);
        assert_eq!(f.lock("k", "a", "v1"), CommandResult::Bool(true));
        let first = f.entry("k").unwrap();
        assert_eq!((first.lock_index, first.session.as_deref()), (1, Some("a")));
        // The holder re-acquires: value and flags update, LockIndex stays.
        assert_eq!(f.lock("k", "a", "v2"), CommandResult::Bool(true));
        let again = f.entry("k").unwrap();
        assert_eq!((again.lock_index, &again.value[..]), (1, &b"v2"[..]));
        // Re-acquiring with identical contents writes nothing.
        let before = again.modify_index;
        f.lock("k", "a", "v2");
        assert_eq!(f.entry("k").unwrap().modify_index, before);
        assert!(f.changes.is_empty());
        // Another session is refused while the lock is held.
        assert_eq!(f.lock("k", "b", "x"), CommandResult::Bool(false));
        // Unlock by a non-holder fails; by the holder clears Session and keeps LockIndex.
        let unlock = |session: &str| {
            Command::Kv(KvOp::Unlock {
                key: "k".into(),
                value: Bytes::from_static(b"done"),
                flags: 3,
                session: session.into(),
            })
        };
        assert_eq!(f.run(unlock("b")), CommandResult::Bool(false));
        assert_eq!(f.run(unlock("a")), CommandResult::Bool(true));
        let released = f.entry("k").unwrap();
        assert_eq!(
            (
                released.session.clone(),
                released.lock_index,
                released.flags
            ),
            (None, 1, 3)
        );
        assert!(f.tables.sessions.held.is_empty());
        // A new acquisition increments LockIndex.
        assert_eq!(f.lock("k", "b", "y"), CommandResult::Bool(true));
        assert_eq!(f.entry("k").unwrap().lock_index, 2);
        // Errors Consul reports from the store.
        assert_eq!(
            f.lock("k2", "", "v"),
            CommandResult::Error("missing session".into())
        );
        assert_eq!(
            f.lock("k2", "ghost", "v"),
            CommandResult::Error("invalid session \"ghost\"".into())
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
        assert_eq!((released.session.clone(), released.lock_index), (None, 1));
        assert!(f
            .changes
            .contains(&Change::key(Table::Kvs, &Arc::from("k"))));
        assert_eq!(f.entry("other").unwrap().session.as_deref(), Some("b"));
        assert_eq!(lock_delay_until(&f.tables, "k"), Some(1_015_000));
        // Inside the delay even a live session cannot acquire; at its end it can.
        f.tables.leader_time_ms = 1_014_999;
        assert_eq!(f.lock("k", "b", "v"), CommandResult::Bool(false));
        f.tables.leader_time_ms = 1_015_000;
        assert_eq!(f.lock("k", "b", "v"), CommandResult::Bool(true));
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
    fn critical_check_or_node_removal_invalidates_bound_sessions() {
        let mut f = Fixture::new();
        f.create("bound", "n1", &["web"], Behavior::Release);
        f.create("serf", "n1", &["serfHealth"], Behavior::Release);
        f.lock("k", "bound", "v");
        // A warning keeps the session.
        f.register_node("n1", &[("serfHealth", "passing"), ("web", "warning")]);
        assert!(get(&f.tables, "bound").is_some());
        f.register_node("n1", &[("serfHealth", "passing"), ("web", "critical")]);
        assert!(get(&f.tables, "bound").is_none());
        assert!(get(&f.tables, "serf").is_some());
        assert_eq!(f.entry("k").unwrap().session, None);
        // Deregistering the node ends every session on it.
        f.run(Command::Catalog(CatalogOp::Deregister {
            node: "n1".into(),
            service_id: String::new(),
            check_id: String::new(),
        }));
        assert!(f.tables.sessions.sessions.is_empty());
        assert!(f.tables.sessions.by_node.is_empty());
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
