//! `Txn.Apply` and `Txn.Read`, as Consul's `txn_endpoint.go` serves them: every operation
//! needs what the same single request would; pre-check failures answer `Errors` without
//! touching Raft; a read-only transaction runs against one store version, without Raft.

use super::{authorize, elsewhere, propose_typed, read, require, Answer, Placement, Read};
use crate::api::authz::Authz;
use crate::api::server::Server;
use crate::consul::rpc::txn::{decode, write_read_response, write_response};
use crate::consul::rpc::QueryMeta;
use crate::proto::msgpack::Writer;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::txn::{self, CatalogVerb, KvVerb, TxnOp, TxnOutcome};
use crate::store::{Command, StoreVersion, Tables, TxnAnswer};

/// Each operation's ACL check.
fn check_ops(authz: &Option<Authz>, ops: &[TxnOp]) -> Result<(), String> {
    for op in ops {
        match op {
            TxnOp::Kv { verb, key, .. } => match verb {
                KvVerb::Get
                | KvVerb::GetOrEmpty
                | KvVerb::CheckIndex
                | KvVerb::CheckSession
                | KvVerb::CheckNotExists => require(authz, |a| a.key_read(key))?,
                KvVerb::GetTree => require(authz, |a| a.key_list(key))?,
                KvVerb::DeleteTree => require(authz, |a| a.key_write_prefix(key))?,
                _ => require(authz, |a| a.key_write(key))?,
            },
            TxnOp::Node {
                verb, registration, ..
            } => {
                let node = registration.node.as_str();
                if *verb == CatalogVerb::Get {
                    require(authz, |a| a.node_read(node))?
                } else {
                    require(authz, |a| a.node_write(node))?
                }
            }
            TxnOp::Service { verb, service, .. } => {
                let name = service.name.as_str();
                if *verb == CatalogVerb::Get {
                    require(authz, |a| a.service_read(name))?
                } else {
                    require(authz, |a| a.service_write(name))?
                }
            }
            TxnOp::Check { verb, check, .. } => {
                let node = check.node.as_str();
                if *verb == CatalogVerb::Get {
                    require(authz, |a| a.node_read(node))?
                } else {
                    require(authz, |a| a.node_write(node))?
                }
            }
        }
    }
    Ok(())
}

/// `Txn.Apply`: the operations applied atomically in one Raft entry.
pub async fn apply(server: &Server, call: &TypedCall) -> Answer {
    let request = decode(&call.body)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.options.token)?;
    check_ops(&authz, &request.ops)?;
    let mut w = Writer::new();
    if !request.errors.is_empty() {
        let outcome = TxnOutcome {
            results: Vec::new(),
            errors: request.errors,
        };
        write_response(&mut w, &outcome);
        return Ok(w.into_inner());
    }
    match propose_typed(server, Command::Txn(request.ops)).await? {
        TxnAnswer::Ran(outcome) => write_response(&mut w, &outcome),
        TxnAnswer::Refused(reason) => return Err(reason),
    }
    Ok(w.into_inner())
}

struct ReadOnly {
    ops: Vec<TxnOp>,
}

impl Read for ReadOnly {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (tables.index, WatchSet::new())
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let outcome = txn::read_only(version, &self.ops);
        let mut w = Writer::new();
        write_read_response(&mut w, meta, &outcome);
        Ok(w.into_inner())
    }
}

/// `Txn.Read`: read operations only, answered from one store version.
pub async fn read_txn(server: &Server, call: &TypedCall) -> Answer {
    let mut request = decode(&call.body)?;
    if let Some(answer) =
        elsewhere(server, call, request.datacenter, Placement::Anywhere, None).await
    {
        return answer;
    }
    if request.ops.iter().any(TxnOp::is_write) {
        return Err("Txn.Read only accepts read operations".to_string());
    }
    let authz = authorize(server, request.options.token)?;
    check_ops(&authz, &request.ops)?;
    if !request.errors.is_empty() {
        let outcome = TxnOutcome {
            results: Vec::new(),
            errors: std::mem::take(&mut request.errors),
        };
        let mut w = Writer::new();
        write_read_response(&mut w, &QueryMeta::default(), &outcome);
        return Ok(w.into_inner());
    }
    // A transaction read never blocks.
    request.options.min_query_index = 0;
    let options = request.options.clone();
    read(server, call, &options, ReadOnly { ops: request.ops }).await
}
