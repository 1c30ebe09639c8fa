//! A store to run commands against in unit tests: a node `n1` with passing checks
//! `serfHealth` and `web`, and helpers for sessions and locks.

use super::catalog::{CatalogOp, CheckRegistration, Registration};
use super::kv::{self, KvOp};
use super::session::{Behavior, Session, SessionOp, LOCK_DELAY_DEFAULT_NS};
use super::{Change, Command, CommandResult, Tables};
use bytes::Bytes;
use std::sync::Arc;

pub(super) struct Fixture {
    pub(super) tables: Tables,
    pub(super) next_index: u64,
    pub(super) changes: Vec<Change>,
}

impl Fixture {
    pub(super) fn new() -> Self {
        let mut f = Fixture {
            tables: Tables::default(),
            next_index: 10,
            changes: Vec::new(),
        };
        f.register_node("n1", &[("serfHealth", "passing"), ("web", "passing")]);
        f
    }
    pub(super) fn run(&mut self, command: Command) -> CommandResult {
        self.next_index += 1;
        self.changes.clear();
        self.tables
            .apply(self.next_index, &command, &mut self.changes)
    }
    pub(super) fn register_node(&mut self, node: &str, checks: &[(&str, &str)]) -> CommandResult {
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
    pub(super) fn create(
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
    pub(super) fn lock(&mut self, key: &str, session: &str, value: &str) -> CommandResult {
        self.run(Command::Kv(KvOp::Lock {
            key: key.into(),
            value: Bytes::copy_from_slice(value.as_bytes()),
            flags: 0,
            session: session.into(),
        }))
    }
    pub(super) fn entry(&self, key: &str) -> Option<kv::KvEntry> {
        kv::get(&self.tables, key).1.map(kv::KvRow::to_entry)
    }
}
