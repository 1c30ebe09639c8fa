//! `/v1/txn`: several KV, node, service and check operations applied atomically in one Raft
//! entry, with Consul's verbs, results and error texts.
//!
//! Atomicity: the operations run in order against a scratch copy of the tables (cheap: every
//! table is a persistent map, so the copy shares all rows). Every operation runs even after
//! one failed, so the client learns every failure, as Consul reports them. Only when none
//! failed does the scratch copy replace the tables and its changes get published; otherwise
//! the tables are untouched and nobody is woken.
//!
//! Reads (`get`, `get-tree`, `check-*`) see the writes made earlier in the same transaction.
//! A transaction made only of reads needs no Raft entry: [`read_only`] answers it from one
//! store version.

use super::catalog::read as catalog_read;
use super::catalog::rows::fold;
use super::catalog::{
    CatalogOp, CheckRegistration, HealthCheck, Node, Registration, RowArc, ServiceInstance,
    ServiceRegistration,
};
use super::kv::{self, KvEntry, KvFields, KvOp, KvRow};
use super::locks::{self, LockOutcome};
use super::{CatalogResult, Change, KvResult, Tables, TxnAnswer};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Most operations one transaction may carry (the limit the project's brief sets, Consul's
/// before 1.14; Consul 1.14+ accepts 128).
pub const TXN_OPS_MAX: usize = 64;

/// Consul's KV verbs (`api.KVOp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvVerb {
    Set,
    Cas,
    Lock,
    Unlock,
    Get,
    GetOrEmpty,
    GetTree,
    CheckIndex,
    CheckSession,
    CheckNotExists,
    Delete,
    DeleteTree,
    DeleteCas,
}

impl KvVerb {
    /// Consul's name of the verb ([`KvVerb::parse`]'s inverse).
    pub fn as_str(self) -> &'static str {
        match self {
            KvVerb::Set => "set",
            KvVerb::Cas => "cas",
            KvVerb::Lock => "lock",
            KvVerb::Unlock => "unlock",
            KvVerb::Get => "get",
            KvVerb::GetOrEmpty => "get-or-empty",
            KvVerb::GetTree => "get-tree",
            KvVerb::CheckIndex => "check-index",
            KvVerb::CheckSession => "check-session",
            KvVerb::CheckNotExists => "check-not-exists",
            KvVerb::Delete => "delete",
            KvVerb::DeleteTree => "delete-tree",
            KvVerb::DeleteCas => "delete-cas",
        }
    }

    pub fn parse(text: &str) -> Option<KvVerb> {
        Some(match text {
            "set" => KvVerb::Set,
            "cas" => KvVerb::Cas,
            "lock" => KvVerb::Lock,
            "unlock" => KvVerb::Unlock,
            "get" => KvVerb::Get,
            "get-or-empty" => KvVerb::GetOrEmpty,
            "get-tree" => KvVerb::GetTree,
            "check-index" => KvVerb::CheckIndex,
            "check-session" => KvVerb::CheckSession,
            "check-not-exists" => KvVerb::CheckNotExists,
            "delete" => KvVerb::Delete,
            "delete-tree" => KvVerb::DeleteTree,
            "delete-cas" => KvVerb::DeleteCas,
            _ => return None,
        })
    }
    pub fn is_write(self) -> bool {
        matches!(
            self,
            KvVerb::Set
                | KvVerb::Cas
                | KvVerb::Lock
                | KvVerb::Unlock
                | KvVerb::Delete
                | KvVerb::DeleteTree
                | KvVerb::DeleteCas
        )
    }
}

/// Consul's node, service and check verbs (`api.NodeOp`, `ServiceOp`, `CheckOp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CatalogVerb {
    Set,
    Cas,
    Get,
    Delete,
    DeleteCas,
}

impl CatalogVerb {
    pub fn parse(text: &str) -> Option<CatalogVerb> {
        Some(match text {
            "set" => CatalogVerb::Set,
            "cas" => CatalogVerb::Cas,
            "get" => CatalogVerb::Get,
            "delete" => CatalogVerb::Delete,
            "delete-cas" => CatalogVerb::DeleteCas,
            _ => return None,
        })
    }
    pub fn is_write(self) -> bool {
        self != CatalogVerb::Get
    }

    /// Consul's name of the verb ([`CatalogVerb::parse`]'s inverse).
    pub fn as_str(self) -> &'static str {
        match self {
            CatalogVerb::Set => "set",
            CatalogVerb::Cas => "cas",
            CatalogVerb::Get => "get",
            CatalogVerb::Delete => "delete",
            CatalogVerb::DeleteCas => "delete-cas",
        }
    }
}

/// Consul's `Txn.preCheck` of a service operation (its `servicePreApply`): a write's ID
/// defaults to the name, and needs a name and a node. The verb when it is known, and the
/// pre-check failure when there is one; shared by the HTTP and RPC decoders.
pub fn service_precheck(
    verb_text: &str,
    node: &str,
    service: &mut ServiceRegistration,
) -> (Option<CatalogVerb>, Option<String>) {
    let verb = CatalogVerb::parse(verb_text);
    let failure = match verb {
        None => Some(format!("unknown service operation: {verb_text}")),
        Some(CatalogVerb::Get) => None,
        Some(_) => {
            if service.id.is_empty() {
                service.id = service.name.clone();
            }
            if !service.id.is_empty() && service.name.is_empty() {
                Some("Must provide service name with ID".to_string())
            } else if node.is_empty() {
                Some("Must provide node".to_string())
            } else {
                None
            }
        }
    };
    (verb, failure)
}

/// One operation of a transaction, decoded and pre-checked by the HTTP layer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TxnOp {
    Kv {
        verb: KvVerb,
        key: String,
        value: Bytes,
        flags: u64,
        /// `Index`: the CAS or check index.
        index: u64,
        session: String,
    },
    /// `registration` carries the node row only (no service, no checks).
    Node {
        verb: CatalogVerb,
        registration: Registration,
        modify_index: u64,
    },
    Service {
        verb: CatalogVerb,
        node: String,
        service: ServiceRegistration,
        modify_index: u64,
    },
    Check {
        verb: CatalogVerb,
        check: CheckRegistration,
        modify_index: u64,
    },
}

impl TxnOp {
    pub fn is_write(&self) -> bool {
        match self {
            TxnOp::Kv { verb, .. } => verb.is_write(),
            TxnOp::Node { verb, .. } | TxnOp::Service { verb, .. } | TxnOp::Check { verb, .. } => {
                verb.is_write()
            }
        }
    }
}

/// One entry of `Results`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnResult {
    /// A KV entry; its value is empty unless the verb was a get.
    Kv(KvEntry),
    Node(Arc<Node>),
    Service(RowArc<ServiceInstance>),
    Check(RowArc<HealthCheck>),
}

/// One entry of `Errors`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnError {
    pub op_index: usize,
    pub what: String,
}

/// What a transaction produced: results when it committed, errors when it rolled back.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnOutcome {
    pub results: Vec<TxnResult>,
    pub errors: Vec<TxnError>,
}

pub(super) fn apply(
    tables: &mut Tables,
    index: u64,
    ops: &[TxnOp],
    changes: &mut Vec<Change>,
) -> TxnAnswer {
    if ops.len() > TXN_OPS_MAX {
        return TxnAnswer::Refused(format!(
            "Transaction contains too many operations ({} > {TXN_OPS_MAX})",
            ops.len()
        ));
    }
    // A restore being staged is large and untouched by transactions: keep it out of the copy.
    let staging = tables.restore.take();
    let mut scratch = tables.clone();
    tables.restore = staging;
    let mut scratch_changes = Vec::new();
    let mut outcome = TxnOutcome::default();
    for (op_index, op) in ops.iter().enumerate() {
        let result = if op.is_write() {
            write(&mut scratch, index, op, &mut scratch_changes)
        } else {
            read(&scratch, op)
        };
        match result {
            Ok(results) => outcome.results.extend(results),
            Err(what) => outcome.errors.push(TxnError { op_index, what }),
        }
    }
    if outcome.errors.is_empty() {
        scratch.restore = tables.restore.take();
        *tables = scratch;
        changes.extend(scratch_changes);
    } else {
        outcome.results.clear();
    }
    TxnAnswer::Ran(Box::new(outcome))
}

/// Runs a transaction of reads only against one version, without Raft.
pub fn read_only(tables: &Tables, ops: &[TxnOp]) -> TxnOutcome {
    debug_assert!(ops.iter().all(|op| !op.is_write()));
    let mut outcome = TxnOutcome::default();
    for (op_index, op) in ops.iter().enumerate() {
        match read(tables, op) {
            Ok(results) => outcome.results.extend(results),
            Err(what) => outcome.errors.push(TxnError { op_index, what }),
        }
    }
    if !outcome.errors.is_empty() {
        outcome.results.clear();
    }
    outcome
}

/// The entry as a write result: Consul blanks the value of everything but gets.
fn without_value(entry: KvRow<'_>) -> TxnResult {
    TxnResult::Kv(entry.without_value())
}

fn kv_result(tables: &Tables, key: &str) -> Vec<TxnResult> {
    kv::get(tables, key)
        .1
        .map(without_value)
        .into_iter()
        .collect()
}

fn read(tables: &Tables, op: &TxnOp) -> Result<Vec<TxnResult>, String> {
    match op {
        TxnOp::Kv {
            verb,
            key,
            flags,
            index,
            session,
            ..
        } => {
            let entry = kv::get(tables, key).1;
            match verb {
                KvVerb::Get => match entry {
                    Some(e) => Ok(vec![TxnResult::Kv(e.to_entry())]),
                    None => Err(format!("key {key:?} doesn't exist")),
                },
                KvVerb::GetOrEmpty => Ok(vec![TxnResult::Kv(match entry {
                    Some(e) => e.to_entry(),
                    // Consul answers with the request's own entry, value blanked.
                    None => KvEntry::new(KvFields {
                        key,
                        value: &[],
                        flags: *flags,
                        session: (!session.is_empty()).then_some(session.as_str()),
                        lock_index: 0,
                        create_index: 0,
                        modify_index: *index,
                    }),
                })]),
                KvVerb::GetTree => Ok(kv::list(tables, key)
                    .1
                    .into_iter()
                    .map(|e| TxnResult::Kv(e.to_entry()))
                    .collect()),
                KvVerb::CheckIndex => match entry {
                    None => Err(format!("failed to check index, key {key:?} doesn't exist")),
                    Some(e) if e.modify_index() != *index => Err(format!(
                        "failed index check for key {key:?}, current modify index {} != {index}",
                        e.modify_index()
                    )),
                    Some(e) => Ok(vec![without_value(e)]),
                },
                KvVerb::CheckSession => match entry {
                    None => Err(format!(
                        "failed to check session, key {key:?} doesn't exist"
                    )),
                    Some(e) if e.session().unwrap_or("") != session.as_str() => Err(format!(
                        "failed session check for key {key:?}, current session {:?} != {session:?}",
                        e.session().unwrap_or("")
                    )),
                    Some(e) => Ok(vec![without_value(e)]),
                },
                KvVerb::CheckNotExists => match entry {
                    Some(_) => Err(format!("key {key:?} exists")),
                    None => Ok(Vec::new()),
                },
                _ => Err(format!("unknown KV verb {verb:?}")),
            }
        }
        TxnOp::Node { registration, .. } => match find_node(tables, registration) {
            Some(node) => Ok(vec![TxnResult::Node(node)]),
            None => Err(format!("node {:?} doesn't exist", registration.node)),
        },
        TxnOp::Service { node, service, .. } => {
            match catalog_read::service_instance(tables, node, &service.id) {
                Some(instance) => Ok(vec![TxnResult::Service(instance.clone())]),
                None => Err(format!(
                    "service {:?} on node {node:?} doesn't exist",
                    service.id
                )),
            }
        }
        TxnOp::Check { check, .. } => {
            match catalog_read::check(tables, &check.node, &check.check_id) {
                Some(row) => Ok(vec![TxnResult::Check(row.clone())]),
                None => Err(format!(
                    "check {:?} on node {:?} doesn't exist",
                    check.check_id, check.node
                )),
            }
        }
    }
}

/// A node by ID when the operation names one, else by name (Consul's precedence).
fn find_node(tables: &Tables, registration: &Registration) -> Option<Arc<Node>> {
    if !registration.id.is_empty() {
        let key = tables.catalog.node_ids.get(registration.id.as_str())?;
        return tables.catalog.nodes.get(key).map(|e| e.node().clone());
    }
    tables
        .catalog
        .node(&registration.node)
        .map(|e| e.node().clone())
}

/// Applies one catalog command inside the transaction, with its consequences for sessions,
/// turning a refusal into its text.
fn catalog_write(
    tables: &mut Tables,
    index: u64,
    op: CatalogOp,
    changes: &mut Vec<Change>,
) -> Result<(), String> {
    match tables.write_catalog(index, &op, changes) {
        CatalogResult::Written => Ok(()),
        CatalogResult::Refused(reason) => Err(reason),
    }
}

fn write(
    tables: &mut Tables,
    index: u64,
    op: &TxnOp,
    changes: &mut Vec<Change>,
) -> Result<Vec<TxnResult>, String> {
    match op {
        TxnOp::Kv {
            verb,
            key,
            value,
            flags,
            index: op_index,
            session,
        } => kv_write(
            tables, index, *verb, key, value, *flags, *op_index, session, changes,
        ),
        TxnOp::Node {
            verb,
            registration,
            modify_index,
        } => node_write(tables, index, *verb, registration, *modify_index, changes),
        TxnOp::Service {
            verb,
            node,
            service,
            modify_index,
        } => service_write(tables, index, *verb, node, service, *modify_index, changes),
        TxnOp::Check {
            verb,
            check,
            modify_index,
        } => check_write(tables, index, *verb, check, *modify_index, changes),
    }
}

#[allow(clippy::too_many_arguments)]
fn kv_write(
    tables: &mut Tables,
    index: u64,
    verb: KvVerb,
    key: &str,
    value: &Bytes,
    flags: u64,
    op_index: u64,
    session: &str,
    changes: &mut Vec<Change>,
) -> Result<Vec<TxnResult>, String> {
    let run = |tables: &mut Tables, op: KvOp, changes: &mut Vec<Change>| {
        tables.write_kv(index, &op, changes)
    };
    match verb {
        KvVerb::Set => {
            run(
                tables,
                KvOp::Set {
                    key: key.to_string(),
                    value: value.clone(),
                    flags,
                },
                changes,
            );
            Ok(kv_result(tables, key))
        }
        KvVerb::Cas => match run(
            tables,
            KvOp::Cas {
                key: key.to_string(),
                value: value.clone(),
                flags,
                modify_index: op_index,
            },
            changes,
        ) {
            KvResult::Written => Ok(kv_result(tables, key)),
            _ => Err(format!("failed to set key {key:?}, index is stale")),
        },
        KvVerb::Lock => match locks::lock(tables, index, key, value, flags, session, changes)? {
            LockOutcome::Acquired => Ok(kv_result(tables, key)),
            LockOutcome::HeldByOther => {
                Err(format!("failed to lock key {key:?}, lock is already held"))
            }
            LockOutcome::LockDelay => Err(format!("failed to lock key {key:?} due to lock delay")),
        },
        KvVerb::Unlock => {
            if locks::unlock(tables, index, key, value, flags, session, changes)? {
                Ok(kv_result(tables, key))
            } else {
                Err(format!(
                    "failed to unlock key {key:?}, lock isn't held, or is held by another session"
                ))
            }
        }
        KvVerb::Delete => {
            run(
                tables,
                KvOp::Delete {
                    key: key.to_string(),
                },
                changes,
            );
            Ok(Vec::new())
        }
        KvVerb::DeleteTree => {
            run(
                tables,
                KvOp::DeleteTree {
                    prefix: key.to_string(),
                },
                changes,
            );
            Ok(Vec::new())
        }
        KvVerb::DeleteCas => match run(
            tables,
            KvOp::DeleteCas {
                key: key.to_string(),
                modify_index: op_index,
            },
            changes,
        ) {
            KvResult::Written => Ok(Vec::new()),
            _ => Err(format!("failed to delete key {key:?}, index is stale")),
        },
        _ => Err(format!("unknown KV verb {verb:?}")),
    }
}

fn node_write(
    tables: &mut Tables,
    index: u64,
    verb: CatalogVerb,
    registration: &Registration,
    modify_index: u64,
    changes: &mut Vec<Change>,
) -> Result<Vec<TxnResult>, String> {
    let name = &registration.node;
    let existing = tables.catalog.node(name).map(|e| e.node().clone());
    match verb {
        CatalogVerb::Set | CatalogVerb::Cas => {
            if verb == CatalogVerb::Cas {
                let allowed = match (&existing, modify_index) {
                    (None, 0) => true,
                    (Some(node), wanted) => wanted != 0 && node.modify_index == wanted,
                    (None, _) => false,
                };
                if !allowed {
                    return Err(format!("failed to set node {name:?}, index is stale"));
                }
            }
            catalog_write(
                tables,
                index,
                CatalogOp::Register(Box::new(registration.clone())),
                changes,
            )?;
            Ok(find_node(tables, registration)
                .map(TxnResult::Node)
                .into_iter()
                .collect())
        }
        CatalogVerb::Delete | CatalogVerb::DeleteCas => {
            if verb == CatalogVerb::DeleteCas
                && existing.is_none_or(|node| node.modify_index != modify_index)
            {
                return Err(format!("failed to delete node {name:?}, index is stale"));
            }
            catalog_write(tables, index, deregister(name, "", ""), changes)?;
            Ok(Vec::new())
        }
        CatalogVerb::Get => unreachable!("gets are reads"),
    }
}

fn deregister(node: &str, service_id: &str, check_id: &str) -> CatalogOp {
    CatalogOp::Deregister {
        node: node.to_string(),
        service_id: service_id.to_string(),
        check_id: check_id.to_string(),
    }
}

fn service_write(
    tables: &mut Tables,
    index: u64,
    verb: CatalogVerb,
    node: &str,
    service: &ServiceRegistration,
    modify_index: u64,
    changes: &mut Vec<Change>,
) -> Result<Vec<TxnResult>, String> {
    let existing = catalog_read::service_instance(tables, node, &service.id).cloned();
    match verb {
        CatalogVerb::Set | CatalogVerb::Cas => {
            if verb == CatalogVerb::Cas {
                let allowed = match (&existing, modify_index) {
                    (None, 0) => true,
                    (Some(instance), wanted) => wanted != 0 && instance.modify_index == wanted,
                    (None, _) => false,
                };
                if !allowed {
                    return Err(format!(
                        "failed to set service {:?} on node {node:?}, index is stale",
                        service.id
                    ));
                }
            }
            if tables.catalog.node(node).is_none() {
                return Err("Missing node registration".to_string());
            }
            let registration = Registration {
                node: node.to_string(),
                skip_node_update: true,
                service: Some(service.clone()),
                ..Default::default()
            };
            catalog_write(
                tables,
                index,
                CatalogOp::Register(Box::new(registration)),
                changes,
            )?;
            Ok(catalog_read::service_instance(tables, node, &service.id)
                .map(|s| TxnResult::Service(s.clone()))
                .into_iter()
                .collect())
        }
        CatalogVerb::Delete | CatalogVerb::DeleteCas => {
            if verb == CatalogVerb::DeleteCas
                && existing.is_none_or(|instance| instance.modify_index != modify_index)
            {
                return Err(format!(
                    "failed to delete service {:?} on node {node:?}, index is stale",
                    service.id
                ));
            }
            catalog_write(tables, index, deregister(node, &service.id, ""), changes)?;
            Ok(Vec::new())
        }
        CatalogVerb::Get => unreachable!("gets are reads"),
    }
}

fn check_write(
    tables: &mut Tables,
    index: u64,
    verb: CatalogVerb,
    check: &CheckRegistration,
    modify_index: u64,
    changes: &mut Vec<Change>,
) -> Result<Vec<TxnResult>, String> {
    let node = &check.node;
    let existing = catalog_read::check(tables, node, &check.check_id).cloned();
    match verb {
        CatalogVerb::Set | CatalogVerb::Cas => {
            if verb == CatalogVerb::Cas {
                let allowed = match (&existing, modify_index) {
                    (None, 0) => true,
                    (Some(row), wanted) => wanted != 0 && row.modify_index == wanted,
                    (None, _) => false,
                };
                if !allowed {
                    return Err(format!(
                        "failed to set check {:?} on node {node:?}, index is stale",
                        check.check_id
                    ));
                }
            }
            let Some(entry) = tables.catalog.node(node) else {
                return Err("Missing node registration".to_string());
            };
            if !check.service_id.is_empty()
                && !entry.services.contains_key(&*fold(&check.service_id))
            {
                return Err("Missing service registration".to_string());
            }
            let registration = Registration {
                node: node.clone(),
                skip_node_update: true,
                checks: vec![check.clone()],
                ..Default::default()
            };
            catalog_write(
                tables,
                index,
                CatalogOp::Register(Box::new(registration)),
                changes,
            )?;
            Ok(catalog_read::check(tables, node, &check.check_id)
                .map(|c| TxnResult::Check(c.clone()))
                .into_iter()
                .collect())
        }
        CatalogVerb::Delete | CatalogVerb::DeleteCas => {
            if verb == CatalogVerb::DeleteCas
                && existing.is_none_or(|row| row.modify_index != modify_index)
            {
                return Err(format!(
                    "failed to delete check {:?} on node {node:?}, index is stale",
                    check.check_id
                ));
            }
            catalog_write(
                tables,
                index,
                deregister(node, "", &check.check_id),
                changes,
            )?;
            Ok(Vec::new())
        }
        CatalogVerb::Get => unreachable!("gets are reads"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Command, CommandResult, Table};
    use super::*;

    fn kv(verb: KvVerb, key: &str, value: &str, index: u64) -> TxnOp {
        TxnOp::Kv {
            verb,
            key: key.into(),
            value: Bytes::copy_from_slice(value.as_bytes()),
            flags: 0,
            index,
            session: String::new(),
        }
    }

    fn run(tables: &mut Tables, at: u64, ops: Vec<TxnOp>, changes: &mut Vec<Change>) -> TxnOutcome {
        changes.clear();
        match tables.apply(at, &Command::Txn(ops), changes) {
            CommandResult::Txn(TxnAnswer::Ran(outcome)) => *outcome,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_failing_check_index_rolls_everything_back() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let ok = run(
            &mut tables,
            5,
            vec![kv(KvVerb::Set, "a", "1", 0), kv(KvVerb::Set, "b", "2", 0)],
            &mut changes,
        );
        assert!(ok.errors.is_empty());
        assert_eq!(ok.results.len(), 2);
        let TxnResult::Kv(first) = &ok.results[0] else {
            panic!()
        };
        assert!(first.value().is_empty(), "set results carry no value");
        assert_eq!(changes.len(), 2);
        let failed = run(
            &mut tables,
            6,
            vec![
                kv(KvVerb::Set, "a", "changed", 0),
                kv(KvVerb::CheckIndex, "b", "", 4),
                kv(KvVerb::Delete, "b", "", 0),
                kv(KvVerb::Get, "missing", "", 0),
            ],
            &mut changes,
        );
        assert!(failed.results.is_empty());
        assert_eq!(
            failed.errors,
            vec![
                TxnError {
                    op_index: 1,
                    what: "failed index check for key \"b\", current modify index 5 != 4".into()
                },
                TxnError {
                    op_index: 3,
                    what: "key \"missing\" doesn't exist".into()
                },
            ]
        );
        assert!(changes.is_empty(), "a rolled-back transaction wakes nobody");
        assert_eq!(kv::get(&tables, "a").1.unwrap().value(), b"1");
        assert!(kv::get(&tables, "b").1.is_some());
        assert_eq!(tables.index, 6);
        assert_eq!(tables.table_index(Table::Kvs), 5);
    }

    #[test]
    fn reads_see_earlier_writes_of_the_same_transaction() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let out = run(
            &mut tables,
            3,
            vec![
                kv(KvVerb::CheckNotExists, "p/x", "", 0),
                kv(KvVerb::Set, "p/x", "v", 0),
                kv(KvVerb::Cas, "p/y", "w", 0),
                kv(KvVerb::Get, "p/x", "", 0),
                kv(KvVerb::GetTree, "p/", "", 0),
                kv(KvVerb::CheckIndex, "p/y", "", 3),
            ],
            &mut changes,
        );
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let values: Vec<&[u8]> = out
            .results
            .iter()
            .map(|r| match r {
                TxnResult::Kv(e) => e.value(),
                _ => panic!(),
            })
            .collect();
        assert_eq!(values, vec![&b""[..], b"", b"v", b"v", b"w", b""]);
        let ro = read_only(&tables, &[kv(KvVerb::Get, "p/y", "", 0)]);
        assert_eq!(ro.results.len(), 1);
        let missing = read_only(&tables, &[kv(KvVerb::Get, "nope", "", 0)]);
        assert_eq!(missing.errors.len(), 1);
    }

    #[test]
    fn too_many_operations_are_refused_by_the_store_too() {
        let mut tables = Tables::default();
        let ops = vec![kv(KvVerb::Set, "a", "1", 0); TXN_OPS_MAX + 1];
        assert!(matches!(
            tables.apply(1, &Command::Txn(ops), &mut Vec::new()),
            CommandResult::Txn(TxnAnswer::Refused(_))
        ));
    }

    #[test]
    fn catalog_verbs_follow_consul() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let node = |verb, index| TxnOp::Node {
            verb,
            registration: Registration {
                node: "n1".into(),
                address: "10.1.1.1".into(),
                ..Default::default()
            },
            modify_index: index,
        };
        let service = |verb, index| TxnOp::Service {
            verb,
            node: "n1".into(),
            service: ServiceRegistration {
                id: "web1".into(),
                name: "web".into(),
                port: 80,
                ..Default::default()
            },
            modify_index: index,
        };
        let out = run(
            &mut tables,
            2,
            vec![service(CatalogVerb::Set, 0)],
            &mut changes,
        );
        assert_eq!(out.errors[0].what, "Missing node registration");
        let out = run(
            &mut tables,
            3,
            vec![node(CatalogVerb::Cas, 0), service(CatalogVerb::Set, 0)],
            &mut changes,
        );
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert!(matches!(
            &out.results[..],
            [TxnResult::Node(_), TxnResult::Service(_)]
        ));
        let out = run(
            &mut tables,
            4,
            vec![node(CatalogVerb::Cas, 0)],
            &mut changes,
        );
        assert_eq!(
            out.errors[0].what,
            "failed to set node \"n1\", index is stale"
        );
        let out = run(
            &mut tables,
            5,
            vec![service(CatalogVerb::DeleteCas, 2)],
            &mut changes,
        );
        assert_eq!(
            out.errors[0].what,
            "failed to delete service \"web1\" on node \"n1\", index is stale"
        );
        let out = run(
            &mut tables,
            6,
            vec![
                service(CatalogVerb::DeleteCas, 3),
                node(CatalogVerb::Get, 0),
            ],
            &mut changes,
        );
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert!(catalog_read::service_instance(&tables, "n1", "web1").is_none());
    }
}
