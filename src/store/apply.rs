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
//!   released or deleted the same way.
//!
//! Transactions run the same steps per operation (`txn` calls [`Tables::write_kv`] and
//! [`Tables::write_catalog`]), so a later operation sees the consequences of an earlier one,
//! as in Consul's state store.

use super::catalog::{self, CatalogOp};
use super::kv::{self, KvOp};
use super::locks::{self, LockOutcome};
use super::session::{self, SessionOp};
use super::{restore, txn, Change, Command, CommandResult, Tables};

impl Tables {
    /// Applies one committed command at `index`, appending what it touched to `changes`.
    pub fn apply(
        &mut self,
        index: u64,
        command: &Command,
        changes: &mut Vec<Change>,
    ) -> CommandResult {
        self.advance_to(index);
        match command {
            Command::Kv(op) => self.write_kv(index, op, changes),
            Command::Catalog(op) => self.write_catalog(index, op, changes),
            Command::Session(SessionOp::Create(new)) => {
                match session::create(self, index, new, changes) {
                    Ok(()) => CommandResult::Bool(true),
                    Err(reason) => CommandResult::Error(reason),
                }
            }
            Command::Session(SessionOp::Destroy { id }) => {
                self.end_session(index, id, changes);
                CommandResult::Bool(true)
            }
            Command::Restore(op) => restore::apply(self, index, op, changes),
            Command::Txn(ops) => txn::apply(self, index, ops, changes),
        }
    }

    /// A KV write, then: deleted keys leave their holders' lists.
    pub(super) fn write_kv(
        &mut self,
        index: u64,
        op: &KvOp,
        changes: &mut Vec<Change>,
    ) -> CommandResult {
        let mut removed = Vec::new();
        let result = match op {
            KvOp::Set { key, value, flags } => {
                kv::set(self, index, key, value, *flags, changes);
                CommandResult::Bool(true)
            }
            KvOp::Cas {
                key,
                value,
                flags,
                modify_index,
            } => CommandResult::Bool(kv::cas(
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
                CommandResult::Bool(true)
            }
            KvOp::DeleteCas { key, modify_index } => CommandResult::Bool(kv::delete_cas(
                self,
                index,
                key,
                *modify_index,
                &mut removed,
                changes,
            )),
            KvOp::DeleteTree { prefix } => {
                kv::delete_tree(self, index, prefix, &mut removed, changes);
                CommandResult::Bool(true)
            }
            KvOp::ReapTombstones { up_to_index } => {
                kv::reap_tombstones(self, index, *up_to_index);
                CommandResult::Bool(true)
            }
            KvOp::Lock {
                key,
                value,
                flags,
                session,
            } => match locks::lock(self, index, key, value, *flags, session, changes) {
                Ok(outcome) => CommandResult::Bool(outcome == LockOutcome::Acquired),
                Err(reason) => CommandResult::Error(reason),
            },
            KvOp::Unlock {
                key,
                value,
                flags,
                session,
            } => match locks::unlock(self, index, key, value, *flags, session, changes) {
                Ok(released) => CommandResult::Bool(released),
                Err(reason) => CommandResult::Error(reason),
            },
        };
        locks::forget_deleted(self, &removed);
        result
    }

    /// A catalog write, then: the sessions whose binding it broke end, releasing their keys.
    pub(super) fn write_catalog(
        &mut self,
        index: u64,
        op: &CatalogOp,
        changes: &mut Vec<Change>,
    ) -> CommandResult {
        let first_change = changes.len();
        let result = catalog::apply::apply(self, index, op, changes);
        let broken = session::broken_bindings(self, &changes[first_change..]);
        for id in broken {
            let ended = self.end_session(index, &id, changes);
            debug_assert!(ended, "a broken session existed");
        }
        result
    }

    /// Ends a session: its row goes, then the keys it held are released or deleted. Returns
    /// whether the session existed.
    fn end_session(&mut self, index: u64, id: &str, changes: &mut Vec<Change>) -> bool {
        let Some(ended) = session::remove(self, index, id, changes) else {
            return false;
        };
        locks::release_held(self, index, &ended, changes);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::catalog::CatalogOp;
    use super::super::fixture::Fixture;
    use super::super::session::{get, Behavior};
    use super::*;

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
}
