//! The apply sequence: one committed command at one Raft index, and the consequences it has
//! in other tables, in the order they happen.
//!
//! Each table module changes only its own rows. What one table's change means for another
//! runs here, as a short list of steps, so the whole write path reads in one place:
//!
//! - a KV write that deleted held keys → their sessions forget them (`locks`);
//! - a catalog write that removed a node or made a bound check critical → the sessions bound
//!   to it end (`session::broken_bindings`) → each ended session's keys are released or
//!   deleted, with a lock-delay (`locks::release_held`);
//! - a session destroyed (`/v1/session/destroy`, the leader's TTL expiry) → its keys are
//!   released or deleted the same way;
//! - a session ended for any of these reasons → the prepared queries bound to it go
//!   (`query::remove_bound_to_session`);
//! - a gateway config entry written or deleted → that gateway's gateway-services rows are
//!   derived again; a `service-defaults` entry → the rows of its service; a catalog write
//!   that moved a service's index → the rows of that service (and, with a wildcard
//!   gateway, of the services the proxies it added or removed front) (`gateways`).
//!
//! Transactions run the same steps per operation (`txn` calls [`Tables::write_kv`] and
//! [`Tables::write_catalog`]), so a later operation sees the consequences of an earlier one,
//! as in Consul's state store.

use super::catalog::{self, CatalogOpOf, Text};
use super::dependency::{self, invalidates, Dependency};
use super::kv::{self, KvOp};
use super::locks::{self, LockOutcome};
use super::session::{self, SessionOp};
use super::{
    acl, autopilot, federation, gateways, mesh, peering, query, restore, txn, CatalogResult,
    Change, ChangeKey, CommandOf, CommandResult, KvResult, QueryResult, SessionResult, Table,
    Tables, TABLE_COUNT,
};
use imbl::OrdMap;
use std::sync::Arc;

/// Above this many rows in a table, the debug check that every touched row was announced
/// skips the table: it compares the table before and after row by row.
const ANNOUNCED_ROWS_CHECKED_MAX: usize = 64;

impl Tables {
    /// Applies one committed command at `index`, appending what it touched to `changes`.
    pub fn apply<S: Text>(
        &mut self,
        index: u64,
        command: &CommandOf<S>,
        changes: &mut Vec<Change>,
    ) -> CommandResult {
        let indexes_before = self.table_indexes;
        let first_change = changes.len();
        let rows_before = cfg!(debug_assertions).then(|| RowsBefore::of(self));
        self.advance_to(index);
        let result = match command {
            CommandOf::Kv(op) => self.write_kv(index, op, changes).into(),
            CommandOf::Catalog(op) => self.write_catalog(index, op, changes).into(),
            CommandOf::Session(SessionOp::Create(new)) => {
                match session::create(self, index, new, changes) {
                    Ok(()) => SessionResult::Created,
                    Err(reason) => SessionResult::Refused(reason),
                }
                .into()
            }
            CommandOf::Session(SessionOp::Destroy { id }) => {
                self.end_session(index, id, changes);
                SessionResult::Destroyed.into()
            }
            CommandOf::Restore(op) => restore::apply(self, index, op, changes),
            CommandOf::Txn(ops) => txn::apply(self, index, ops, changes).into(),
            CommandOf::Acl(op) => acl::apply::apply(self, index, op, changes),
            CommandOf::Autopilot(op) => autopilot::apply(self, index, op).into(),
            CommandOf::Query(op) => match query::apply(self, index, op, changes) {
                Ok(()) => QueryResult::Written,
                Err(reason) => QueryResult::Refused(reason),
            }
            .into(),
            CommandOf::AgentCa(op) => super::agent_ca::apply(self, index, op).into(),
            CommandOf::ConfigEntry(op) => self.write_config_entry(index, op, changes),
            CommandOf::Ca(op) => mesh::ca::apply(self, index, op, changes),
            CommandOf::FederationState(op) => federation::apply(self, index, op, changes),
            CommandOf::Peering(op) => peering::apply(self, index, op, changes),
        };
        self.check_applied(index, &indexes_before, &changes[first_change..]);
        if let Some(rows_before) = rows_before {
            rows_before.check_announced(self, &changes[first_change..]);
        }
        result
    }

    /// The seams of one apply: the applied index is the entry's (paired with `advance_to`,
    /// which refused anything not after the previous one), no table index went backwards or
    /// past it; in debug builds also: every change is canonical and names a table this entry
    /// wrote, and every table this entry wrote announced a change.
    fn check_applied(&self, index: u64, before: &[u64; TABLE_COUNT], new_changes: &[Change]) {
        assert_eq!(self.index, index, "an apply ends at its entry's index");
        for (slot, (now, then)) in self.table_indexes.iter().zip(before).enumerate() {
            assert!(
                now >= then,
                "table {slot} index went backwards: {then} → {now}"
            );
            assert!(
                *now <= index,
                "table {slot} index {now} is past the entry {index}"
            );
        }
        if !cfg!(debug_assertions) {
            return;
        }
        for change in new_changes {
            let canonical = match &change.key {
                ChangeKey::Key(key) | ChangeKey::Prefix(key) => {
                    dependency::is_canonical(change.table, key)
                }
                ChangeKey::All => true,
            };
            debug_assert!(canonical, "change keys are canonical: {change:?}");
            debug_assert!(
                is_watch_namespace(change.table) || self.table_index(change.table) == index,
                "a change names a table its entry wrote: {change:?}"
            );
        }
        for table in Table::ALL {
            let moved = self.table_index(table) != before[table as usize];
            // Tombstones move with a KV delete (announced in `Kvs`) and with a reap, which
            // changes no visible row.
            debug_assert!(
                !moved
                    || table == Table::Tombstones
                    || new_changes.iter().any(|c| c.table == table),
                "{table:?} moved to {index} without a change"
            );
        }
    }

    /// A KV write, then: deleted keys leave their holders' lists.
    pub(super) fn write_kv(
        &mut self,
        index: u64,
        op: &KvOp,
        changes: &mut Vec<Change>,
    ) -> KvResult {
        let mut removed = Vec::new();
        let checked = |matched: bool| {
            if matched {
                KvResult::Written
            } else {
                KvResult::CheckAndSetFailed
            }
        };
        let result = match op {
            KvOp::Set { key, value, flags } => {
                kv::set(self, index, key, value, *flags, changes);
                KvResult::Written
            }
            KvOp::Cas {
                key,
                value,
                flags,
                modify_index,
            } => checked(kv::cas(
                self,
                index,
                key,
                value,
                *flags,
                *modify_index,
                changes,
            )),
            KvOp::Delete { key } => {
                kv::delete(self, index, key, &mut removed, changes);
                KvResult::Written
            }
            KvOp::DeleteCas { key, modify_index } => checked(kv::delete_cas(
                self,
                index,
                key,
                *modify_index,
                &mut removed,
                changes,
            )),
            KvOp::DeleteTree { prefix } => {
                kv::delete_tree(self, index, prefix, &mut removed, changes);
                KvResult::Written
            }
            KvOp::ReapTombstones { up_to_index } => {
                kv::reap_tombstones(self, index, *up_to_index);
                KvResult::Written
            }
            KvOp::Lock {
                key,
                value,
                flags,
                session,
            } => match locks::lock(self, index, key, value, *flags, session, changes) {
                Ok(LockOutcome::Acquired) => KvResult::LockAcquired,
                Ok(LockOutcome::HeldByOther | LockOutcome::LockDelay) => KvResult::LockNotAcquired,
                Err(reason) => KvResult::Refused(reason),
            },
            KvOp::Unlock {
                key,
                value,
                flags,
                session,
            } => match locks::unlock(self, index, key, value, *flags, session, changes) {
                Ok(true) => KvResult::Released,
                Ok(false) => KvResult::NotReleased,
                Err(reason) => KvResult::Refused(reason),
            },
        };
        locks::forget_deleted(self, &removed);
        result
    }

    /// A catalog write, then: the sessions whose binding it broke end, releasing their keys.
    pub(super) fn write_catalog<S: Text>(
        &mut self,
        index: u64,
        op: &CatalogOpOf<S>,
        changes: &mut Vec<Change>,
    ) -> CatalogResult {
        let first_change = changes.len();
        // The groups before the write (a persistent map: one reference), for the proxies a
        // write removed, when a gateway's wildcard may have linked what they fronted.
        let services_before = gateways::has_wildcard(self).then(|| self.catalog.services.clone());
        let result = catalog::apply::apply(self, index, op, changes);
        let broken = session::broken_bindings(self, &changes[first_change..]);
        for id in broken {
            let ended = self.end_session(index, &id, changes);
            debug_assert!(ended, "a broken session existed");
        }
        gateways::after_catalog(self, index, services_before.as_ref(), first_change, changes);
        result
    }

    /// A config entry write, then: the gateways and services it concerns get their
    /// gateway-services rows again.
    fn write_config_entry(
        &mut self,
        index: u64,
        op: &mesh::config_entry::ConfigEntryOp,
        changes: &mut Vec<Change>,
    ) -> CommandResult {
        let first_change = changes.len();
        let result = mesh::config_entry::apply(self, index, op, changes);
        if changes.len() > first_change {
            let mut written = changes.split_off(first_change);
            gateways::after_config_entries(self, index, &mut written);
            changes.append(&mut written);
        }
        result
    }

    /// Ends a session: its row goes, then the keys it held are released or deleted and the
    /// prepared queries bound to it are deleted. Returns whether the session existed.
    fn end_session(&mut self, index: u64, id: &str, changes: &mut Vec<Change>) -> bool {
        let Some(ended) = session::remove(self, index, id, changes) else {
            return false;
        };
        locks::release_held(self, index, &ended, changes);
        query::remove_bound_to_session(self, index, id, changes);
        true
    }
}

/// Tables whose keys name watch namespaces rather than rows: they have no table index.
fn is_watch_namespace(table: Table) -> bool {
    matches!(table, Table::ServiceIndex | Table::NodeServices)
}

/// The rows of a small store before an apply (the maps are persistent: keeping them costs a
/// reference each), to check afterwards that every row the apply touched is named by one of
/// its changes. A touched row nobody announced is a blocking query that never wakes.
struct RowsBefore {
    kv: Option<kv::KvRows>,
    sessions: Option<OrdMap<Arc<str>, Arc<session::Session>>>,
    nodes: Option<OrdMap<arcstr::ArcStr, catalog::NodeEntry>>,
}

impl RowsBefore {
    fn of(tables: &Tables) -> RowsBefore {
        let small = |len: usize| len <= ANNOUNCED_ROWS_CHECKED_MAX;
        RowsBefore {
            kv: small(tables.kv.entries.len()).then(|| tables.kv.entries.clone()),
            sessions: small(tables.sessions.sessions.len())
                .then(|| tables.sessions.sessions.clone()),
            nodes: small(tables.catalog.nodes.len()).then(|| tables.catalog.nodes.clone()),
        }
    }

    fn check_announced(&self, tables: &Tables, new_changes: &[Change]) {
        let announced = |table: Table, key: &str| {
            let read = Dependency::Key(table, Arc::from(key));
            new_changes.iter().any(|c| invalidates(c, &read))
        };
        if let Some(before) = &self.kv {
            for key in touched_kv(before, &tables.kv.entries) {
                debug_assert!(
                    announced(Table::Kvs, &key),
                    "KV row {key:?} touched silently"
                );
            }
        }
        if let Some(before) = &self.sessions {
            for id in touched(before, &tables.sessions.sessions, same_row) {
                debug_assert!(
                    announced(Table::Sessions, &id),
                    "session {id:?} touched silently"
                );
            }
        }
        if let Some(before) = &self.nodes {
            let after = &tables.catalog.nodes;
            let node_row =
                |a: &catalog::NodeEntry, b: &catalog::NodeEntry| Arc::ptr_eq(a.node(), b.node());
            for node in touched(before, after, node_row) {
                debug_assert!(
                    announced(Table::Nodes, &node),
                    "node {node:?} touched silently"
                );
            }
            let keys = before
                .keys()
                .chain(after.keys().filter(|k| !before.contains_key(*k)));
            for node in keys {
                let (was, is) = (before.get(node), after.get(node));
                let checks_differ = match (was, is) {
                    (Some(a), Some(b)) => {
                        !touched(&a.checks, &b.checks, same_catalog_row).is_empty()
                    }
                    (a, b) => a.or(b).is_some_and(|e| !e.checks.is_empty()),
                };
                debug_assert!(
                    !checks_differ || announced(Table::Checks, node),
                    "checks of {node:?} touched silently"
                );
                let services_differ = match (was, is) {
                    (Some(a), Some(b)) => {
                        !touched(&a.services, &b.services, same_catalog_row).is_empty()
                    }
                    (a, b) => a.or(b).is_some_and(|e| !e.services.is_empty()),
                };
                debug_assert!(
                    !services_differ || announced(Table::NodeServices, node),
                    "services of {node:?} touched silently"
                );
            }
        }
    }
}

/// Rows are replaced, never edited in place: a touched row is a new allocation.
fn same_row<T>(a: &Arc<T>, b: &Arc<T>) -> bool {
    Arc::ptr_eq(a, b)
}

/// [`same_row`] for the catalog's instance and check rows (`RowArc`).
fn same_catalog_row<T>(
    a: &crate::store::catalog::RowArc<T>,
    b: &crate::store::catalog::RowArc<T>,
) -> bool {
    crate::store::catalog::RowArc::ptr_eq(a, b)
}

/// The keys whose KV rows differ between `before` and `after` (added, removed or
/// replaced), found by walking both in key order.
fn touched_kv(before: &kv::KvRows, after: &kv::KvRows) -> Vec<String> {
    if before.ptr_eq(after) {
        return Vec::new();
    }
    let mut keys = Vec::new();
    let (mut old, mut new) = (before.iter().peekable(), after.iter().peekable());
    loop {
        match (old.peek(), new.peek()) {
            (None, None) => return keys,
            (Some(a), Some(b)) if a.key() == b.key() => {
                // A rewritten row always differs: every write moves its ModifyIndex.
                if a != b {
                    keys.push(a.key().to_string());
                }
                old.next();
                new.next();
            }
            (Some(a), b) if b.is_none_or(|b| a.key() < b.key()) => {
                keys.push(a.key().to_string());
                old.next();
            }
            (_, Some(b)) => {
                keys.push(b.key().to_string());
                new.next();
            }
            (Some(_), None) => unreachable!("handled above"),
        }
    }
}

/// The persistent maps [`touched`] compares: `imbl`'s and the catalog's [`catalog::PackedMap`].
trait RowMap<K, V> {
    fn shares_root(&self, other: &Self) -> bool;
    fn entries(&self) -> Box<dyn Iterator<Item = (&K, &V)> + '_>;
    fn row(&self, key: &K) -> Option<&V>;
}

impl<K: Ord + Clone, V: Clone> RowMap<K, V> for OrdMap<K, V> {
    fn shares_root(&self, other: &Self) -> bool {
        self.ptr_eq(other)
    }
    fn entries(&self) -> Box<dyn Iterator<Item = (&K, &V)> + '_> {
        Box::new(self.iter())
    }
    fn row(&self, key: &K) -> Option<&V> {
        self.get(key)
    }
}

impl<K: Ord + Clone, V: Clone> RowMap<K, V> for catalog::PackedMap<K, V> {
    fn shares_root(&self, other: &Self) -> bool {
        self.ptr_eq(other)
    }
    fn entries(&self) -> Box<dyn Iterator<Item = (&K, &V)> + '_> {
        Box::new(self.iter())
    }
    fn row(&self, key: &K) -> Option<&V> {
        self.get(key)
    }
}

/// The keys whose rows differ between `before` and `after` (added, removed or replaced).
fn touched<K: Clone, V, M: RowMap<K, V>>(
    before: &M,
    after: &M,
    same: impl Fn(&V, &V) -> bool,
) -> Vec<K> {
    if before.shares_root(after) {
        // Untouched maps still share their root: nothing to compare.
        return Vec::new();
    }
    let mut keys: Vec<K> = before
        .entries()
        .filter(|(k, v)| after.row(k).is_none_or(|w| !same(v, w)))
        .map(|(k, _)| k.clone())
        .collect();
    keys.extend(
        after
            .entries()
            .filter(|(k, _)| before.row(k).is_none())
            .map(|(k, _)| k.clone()),
    );
    keys
}

#[cfg(test)]
mod tests {
    use super::super::catalog::{CatalogOp, CheckRegistration, Registration, ServiceRegistration};
    use super::super::fixture::Fixture;
    use super::super::session::{get, Behavior};
    use super::super::Command;
    use super::*;
    use bytes::Bytes;

    fn register_web(node: &str, name: &str, tags: &[&str]) -> Command {
        Command::Catalog(CatalogOp::Register(Box::new(Registration {
            node: node.into(),
            address: "10.0.0.1".into(),
            service: Some(ServiceRegistration {
                id: "web1".into(),
                name: name.into(),
                tags: tags.iter().map(|t| t.to_string()).collect(),
                ..Default::default()
            }),
            checks: vec![CheckRegistration {
                check_id: "web-alive".into(),
                name: "alive".into(),
                status: "passing".into(),
                service_id: "web1".into(),
                ..Default::default()
            }],
            ..Default::default()
        })))
    }

    #[test]
    fn rewritten_check_rows_are_announced_under_their_node() {
        // Check rows carry their service's name and tags and their node's name; a node
        // check query (`/v1/health/node/n1`) watches `Key(Checks, node)` and must wake when
        // any of them changes. The apply's row check finds a silent rewrite.
        let mut f = Fixture::new();
        let checks_of_n1 = Change::key(Table::Checks, &Arc::from("n1"));
        f.run(register_web("n1", "web", &["v1"]));
        f.run(register_web("n1", "web", &["v2"]));
        assert!(f.changes.contains(&checks_of_n1), "tags: {:?}", f.changes);
        f.run(register_web("n1", "www", &["v2"]));
        assert!(f.changes.contains(&checks_of_n1), "name: {:?}", f.changes);
        f.run(register_web("N1", "www", &["v2"]));
        assert!(
            f.changes.contains(&checks_of_n1),
            "node case: {:?}",
            f.changes
        );
        // Registering the same thing again touches nothing and announces nothing.
        f.run(register_web("N1", "www", &["v2"]));
        assert!(f.changes.is_empty(), "{:?}", f.changes);
    }

    #[test]
    fn every_apply_ends_at_its_index_and_moves_only_the_tables_it_announces() {
        let mut f = Fixture::new();
        let before = f.tables.table_indexes;
        f.create("s", "n1", &[], Behavior::Delete);
        f.lock("k", "s", "v");
        f.run(Command::Session(SessionOp::Destroy { id: "s".into() }));
        let at = f.next_index;
        assert_eq!(f.tables.index, at);
        // The destroy wrote the session and deleted the held key, leaving a tombstone.
        for table in [Table::Sessions, Table::Kvs, Table::Tombstones] {
            assert_eq!(f.tables.table_index(table), at, "{table:?}");
        }
        assert_eq!(
            f.tables.table_index(Table::Nodes),
            before[Table::Nodes as usize]
        );
        // A refused lock (the key is inside its lock-delay) moves nothing, announces nothing.
        let refused = f.run(Command::Kv(KvOp::Lock {
            key: "k".into(),
            value: Bytes::new(),
            flags: 0,
            session: "ghost".into(),
        }));
        assert!(
            matches!(refused, CommandResult::Kv(KvResult::LockNotAcquired)),
            "{refused:?}"
        );
        assert!(f.changes.is_empty());
        assert_eq!(f.tables.table_index(Table::Kvs), at);
        assert_eq!(f.tables.index, at + 1);
    }

    #[test]
    #[should_panic(expected = "went backwards")]
    fn a_table_index_going_backwards_is_caught() {
        let mut tables = Tables::default();
        let mut before = tables.table_indexes;
        before[Table::Kvs as usize] = 5;
        tables.advance_to(7);
        tables.check_applied(7, &before, &[]);
    }

    #[test]
    #[should_panic(expected = "past the entry")]
    fn a_table_index_past_the_entry_is_caught() {
        let mut tables = Tables::default();
        let before = tables.table_indexes;
        tables.advance_to(7);
        tables.table_indexes[Table::Kvs as usize] = 8;
        tables.check_applied(7, &before, &[]);
    }

    #[test]
    #[should_panic(expected = "ends at its entry's index")]
    fn an_apply_that_loses_its_index_is_caught() {
        let mut tables = Tables::default();
        let before = tables.table_indexes;
        tables.advance_to(7);
        tables.index = 6;
        tables.check_applied(7, &before, &[]);
    }

    #[test]
    #[should_panic(expected = "without a change")]
    fn a_table_moved_without_a_change_is_caught() {
        let mut tables = Tables::default();
        let before = tables.table_indexes;
        tables.advance_to(7);
        tables.bump_table(Table::Sessions, 7);
        tables.check_applied(7, &before, &[]);
    }

    #[test]
    #[should_panic(expected = "change keys are canonical")]
    fn a_change_key_in_the_wrong_case_is_caught() {
        let mut tables = Tables::default();
        let before = tables.table_indexes;
        tables.advance_to(7);
        tables.bump_table(Table::Nodes, 7);
        tables.check_applied(7, &before, &[Change::key(Table::Nodes, &Arc::from("Node"))]);
    }

    #[test]
    #[should_panic(expected = "touched silently")]
    fn a_row_touched_without_a_change_is_caught() {
        let mut f = Fixture::new();
        f.set_key("k", "v1");
        let rows_before = RowsBefore::of(&f.tables);
        f.set_key("k", "v2");
        rows_before.check_announced(&f.tables, &[]);
    }

    impl Fixture {
        fn set_key(&mut self, key: &str, value: &str) {
            self.run(Command::Kv(KvOp::Set {
                key: key.into(),
                value: Bytes::copy_from_slice(value.as_bytes()),
                flags: 0,
            }));
        }
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
        assert_eq!(f.entry("k").unwrap().session(), None);
        // Deregistering the node ends every session on it.
        f.run(Command::Catalog(CatalogOp::Deregister {
            node: "n1".into(),
            service_id: String::new(),
            check_id: String::new(),
        }));
        assert!(f.tables.sessions.sessions.is_empty());
        assert!(f.tables.sessions.by_node.is_empty());
    }
}
