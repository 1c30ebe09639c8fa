//! Consul's `Operator` calls, as `operator_raft_endpoint.go` and
//! `operator_autopilot_endpoint.go` serve them, from the same reads and checks as the HTTP
//! handlers of `/v1/operator/raft/*` and `/v1/operator/autopilot/*` (`api::operator`):
//!
//! - `RaftGetConfiguration` and `AutopilotGetConfiguration` are answered by the leader
//!   unless the call allows stale reads, as the HTTP handlers place them;
//! - `ServerHealth` and `AutopilotState` always by the leader, whose autopilot alone judges
//!   the servers (Consul forces `RequireConsistent` on them);
//! - `RaftRemovePeerByAddress`, `RaftRemovePeerByID` and `AutopilotSetConfiguration` run on
//!   the leader: a Raft membership change, and the store's autopilot command.
//!
//! Two more serve what Consul's agents reach otherwise: `Operator.Usage` (Consul's own,
//! the catalog's counts as `/v1/operator/usage` reports them, a blocking read anywhere its
//! consistency allows) and `Operator.TransferLeader`, praetor's own (Consul's agents use
//! the gRPC `OperatorService` for it): on the leader, which hands its leadership over.
//!
//! Reads need `operator:read`, writes `operator:write`, the HTTP routes' rules, checked
//! with the call's token once the call is where it runs.

use super::{
    authorize, decode_error, elsewhere, error_text, one_shot_here, propose_typed, read_here,
    require, Answer, Placement,
};
use crate::api::operator::{
    health_of, leader_health, raft_configuration_of, AUTOPILOT_NOT_INITIALIZED,
};
use crate::api::server::Server;
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::operator::{
    encode_health, encode_state, encode_usage, write_autopilot_config, AutopilotSetConfigRequest,
    RaftRemovePeerRequest,
};
use crate::proto::msgpack::Writer;
use crate::replica::ProposalResult;
use crate::shard::rpc_server::TypedCall;
use crate::shard::runtime::OperatorOp;
use crate::store::autopilot::AutopilotOp;
use crate::store::{AutopilotResult, Command, CommandResult};

/// The Raft protocol version praetor's servers speak, as Consul's `raft_vsn` tag says it.
const RAFT_PROTOCOL_VERSION: i64 = 3;

/// The start of the reads that stale calls may serve anywhere: the token resolved, the rule
/// checked, and the call placed as its consistency asks. `Err` carries the answer when
/// the call was answered elsewhere or refused.
async fn operator_read(server: &Server, call: &TypedCall) -> Result<(), Answer> {
    let request = DcSpecificRequest::decode(&call.body).map_err(|e| Err(decode_error(e)))?;
    let authz = read_here(server, call, request.datacenter, &request.options).await?;
    require(&authz, |a| a.operator_read()).map_err(Err)?;
    match one_shot_here(server, call, &request.options).await {
        Some(answer) => Err(answer),
        None => Ok(()),
    }
}

/// `Operator.RaftGetConfiguration`.
pub async fn raft_get_configuration(server: &Server, call: &TypedCall) -> Answer {
    if let Err(answer) = operator_read(server, call).await {
        return answer;
    }
    Ok(raft_configuration_of(server.context()).encode())
}

/// `Operator.AutopilotGetConfiguration`.
pub async fn autopilot_get_configuration(server: &Server, call: &TypedCall) -> Answer {
    if let Err(answer) = operator_read(server, call).await {
        return answer;
    }
    let version = server.context().current_version();
    let config = version
        .autopilot
        .as_ref()
        .ok_or_else(|| AUTOPILOT_NOT_INITIALIZED.to_string())?;
    let mut w = Writer::new();
    write_autopilot_config(&mut w, config);
    Ok(w.into_inner())
}

/// `Operator.ServerHealth` (`state` false) and `Operator.AutopilotState` (`state` true):
/// on the leader.
pub async fn autopilot_health(server: &Server, call: &TypedCall, state: bool) -> Answer {
    let request = DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.options.token)?;
    require(&authz, |a| a.operator_read())?;
    let health = leader_health(server.context())
        .map_err(|e| error_text(&e))?
        // Leadership moved between the placement and the read.
        .ok_or_else(|| ProposalResult::NotLeader.to_string())?;
    let health = health_of(&health);
    Ok(if state {
        encode_state(&health, RAFT_PROTOCOL_VERSION)
    } else {
        encode_health(&health)
    })
}

/// `Operator.RaftRemovePeerByAddress` (`by_id` false) and `RaftRemovePeerByID` (`by_id`
/// true): on the leader, answering net/rpc's empty `struct{}`. A peer not in the Raft
/// configuration is refused, as Consul refuses it.
pub async fn raft_remove_peer(server: &Server, call: &TypedCall, by_id: bool) -> Answer {
    let request = RaftRemovePeerRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.token)?;
    require(&authz, |a| a.operator_write())?;
    let op = if by_id {
        OperatorOp::RemovePeer {
            id: Some(request.id.to_string()),
            address: None,
        }
    } else {
        OperatorOp::RemovePeer {
            id: None,
            address: Some(request.address.to_string()),
        }
    };
    match server.shard().operator(op).await {
        ProposalResult::Applied(CommandResult::Error(reason)) => Err(reason),
        ProposalResult::Applied(_) => {
            let mut w = Writer::new();
            w.map_len(0);
            Ok(w.into_inner())
        }
        refused => Err(refused.to_string()),
    }
}

/// `Operator.AutopilotSetConfiguration`: on the leader, the store's autopilot command. With
/// `CAS` the configuration's `ModifyIndex` is the index the stored one must have. Answers
/// the outcome of a check-and-set and `false` for a plain set, as Consul's FSM reports
/// nothing for it (its HTTP handler answers `true` itself).
pub async fn autopilot_set_configuration(server: &Server, call: &TypedCall) -> Answer {
    let request = AutopilotSetConfigRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.token)?;
    require(&authz, |a| a.operator_write())?;
    let cas = request.cas.then_some(request.config.modify_index);
    let config = crate::store::autopilot::AutopilotConfig {
        create_index: 0,
        modify_index: 0,
        ..request.config
    };
    let command = Command::Autopilot(AutopilotOp::Set { config, cas });
    let result: AutopilotResult = propose_typed(server, command).await?;
    let mut w = Writer::new();
    w.bool(request.cas && result == AutopilotResult::Written);
    Ok(w.into_inner())
}

/// `Operator.Usage`: the catalog's counts (`structs.Usage` keyed by this datacenter), read
/// as the HTTP `/v1/operator/usage` is, blocking on the nodes and services tables.
pub async fn usage(server: &Server, call: &TypedCall) -> Answer {
    let request = DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    require(&authz, |a| a.operator_read())?;
    let query = UsageRead {
        datacenter: server.context().config().datacenter.clone(),
    };
    super::read(server, call, &request.options, query).await
}

/// The read behind `Operator.Usage`.
struct UsageRead {
    datacenter: String,
}

impl super::Read for UsageRead {
    fn evaluate(&self, tables: &crate::store::Tables) -> (u64, crate::shard::watch::WatchSet) {
        crate::api::operator::usage_watch(tables)
    }
    fn reply(
        &self,
        version: &crate::store::StoreVersion,
        meta: &crate::consul::rpc::QueryMeta,
    ) -> Answer {
        let usage = crate::store::catalog::read::service_usage(version);
        Ok(encode_usage(meta, &self.datacenter, &usage))
    }
}

/// `Operator.TransferLeader` (praetor's own; a `RaftRemovePeerRequest`'s fields, `ID` the
/// server to hand leadership to, empty for any): on the leader, answering `true` once
/// leadership moved, as `/v1/operator/raft/transfer-leader` answers `Success`.
pub async fn transfer_leader(server: &Server, call: &TypedCall) -> Answer {
    let request = RaftRemovePeerRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.token)?;
    require(&authz, |a| a.operator_write())?;
    let op = OperatorOp::TransferLeader {
        id: (!request.id.is_empty()).then(|| request.id.to_string()),
    };
    match server.shard().operator(op).await {
        ProposalResult::Applied(CommandResult::Error(reason)) => Err(reason),
        ProposalResult::Applied(_) => {
            let mut w = Writer::new();
            w.bool(true);
            Ok(w.into_inner())
        }
        refused => Err(refused.to_string()),
    }
}
