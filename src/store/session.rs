//! The `sessions` table: creation, the checks of a session's binding, and the removal of a
//! session's row. Consul's semantics throughout.
//!
//! A session binds a node and a set of that node's health checks. It stays valid while the
//! node is registered and none of its checks is critical. After every catalog write the apply
//! sequence (`store::apply`) asks [`broken_bindings`] which sessions on the touched nodes
//! lost their binding and ends them inside the same Raft entry — deterministically on every
//! server, as Consul does inside its state-store transaction. Ending a session removes its
//! row here ([`remove`]); what happens to the keys it held is `locks`' business. This module
//! reads the catalog and knows nothing of KV.
//!
//! TTL expiry itself is not decided here: the leader keeps the timers
//! (`replica::session_timers`) and proposes an ordinary destroy when one fires.
//!
//! Watch keys: `Key(Sessions, id)` for one session and `Key(Sessions, node_watch_key(node))`
//! for the sessions of a node; the table index moves on every create and invalidation.
//!
//! Invariants:
//! - `by_node[fold(s.node)]` contains exactly the IDs of the sessions on that node, and no
//!   entry of `by_node` is empty.

use super::catalog::read as catalog_read;
use super::catalog::rows::{fold, Status};
use super::{Change, ChangeKey, Table, Tables};
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

    /// The limits a session must keep to be created: at most [`SESSION_CHECKS_MAX`]
    /// checks, a name and node of at most [`SESSION_NAME_BYTES_MAX`] bytes.
    pub fn check_limits(&self) -> Result<(), String> {
        let check_count = self.check_ids().count();
        if check_count > SESSION_CHECKS_MAX {
            return Err(format!(
                "a session may be bound to at most {SESSION_CHECKS_MAX} checks, got {check_count}"
            ));
        }
        if self.name.len() > SESSION_NAME_BYTES_MAX || self.node.len() > SESSION_NAME_BYTES_MAX {
            return Err(format!(
                "session Name and Node are limited to {SESSION_NAME_BYTES_MAX} bytes"
            ));
        }
        Ok(())
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

/// The `sessions` table and its node index; then the state of the session↔key relation,
/// which `locks` alone reads and writes (it sits here because the snapshot layout is
/// positional, and moving it would change the format).
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

/// Inserts a new session after checking its binding; refusals carry Consul's words.
pub(super) fn create(
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

/// Removes a session's row and its node-index entry, announcing both. Returns the removed
/// row (the keys it held are released by the caller, through `locks`), `None` when there
/// was no such session.
pub(super) fn remove(
    tables: &mut Tables,
    index: u64,
    id: &str,
    changes: &mut Vec<Change>,
) -> Option<Arc<Session>> {
    let (id, session) = tables.sessions.sessions.remove_with_key(id)?;
    let node_key = fold(&session.node).into_owned();
    let node_emptied = match tables.sessions.by_node.get_mut(node_key.as_str()) {
        Some(ids) => {
            let was_listed = ids.remove(&id).is_some();
            debug_assert!(was_listed, "by_node lists every session of its node");
            ids.is_empty()
        }
        None => {
            debug_assert!(false, "by_node has an entry for every session's node");
            false
        }
    };
    if node_emptied {
        tables.sessions.by_node.remove(node_key.as_str());
    }
    tables.bump_table(Table::Sessions, index);
    changes.push(Change::key(Table::Sessions, &id));
    changes.push(Change::key(Table::Sessions, &node_watch_key(&session.node)));
    Some(session)
}

/// The sessions, on the nodes `catalog_changes` touched, whose node is gone or whose bound
/// checks are missing or critical now: the ones a catalog write must end.
pub(super) fn broken_bindings(tables: &Tables, catalog_changes: &[Change]) -> Vec<Arc<str>> {
    if tables.sessions.sessions.is_empty() {
        return Vec::new();
    }
    // Catalog change keys for nodes and checks are folded node names, as `by_node`'s are.
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
                debug_assert!(false, "by_node lists only existing sessions");
                continue;
            };
            let check_ids: Vec<&str> = session.check_ids().collect();
            if binding_error(tables, &session.node, &check_ids).is_some() {
                broken.push(id.clone());
            }
        }
    }
    broken
}

#[cfg(test)]
mod tests {
    use super::super::fixture::Fixture;
    use super::*;
    use crate::store::{CommandResult, SessionResult};

    #[test]
    fn create_validates_node_and_checks_with_consuls_words() {
        let mut f = Fixture::new();
        assert_eq!(
            f.create("s0", "nope", &[], Behavior::Release),
            CommandResult::Session(SessionResult::Refused("Missing node registration".into()))
        );
        assert_eq!(
            f.create("s0", "n1", &["absent"], Behavior::Release),
            CommandResult::Session(SessionResult::Refused(
                "Missing check 'absent' registration".into()
            ))
        );
        f.register_node("n1", &[("serfHealth", "passing"), ("web", "critical")]);
        assert_eq!(
            f.create("s0", "n1", &["web"], Behavior::Release),
            CommandResult::Session(SessionResult::Refused(
                "Check 'web' is in critical state".into()
            ))
        );
        assert_eq!(
            f.create("s1", "N1", &["serfHealth"], Behavior::Release),
            CommandResult::Session(SessionResult::Created)
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
            CommandResult::Session(SessionResult::Refused(_))
        ));
    }
}
