//! `/v1/operator/raft/*` and `/v1/operator/autopilot/health`: the Raft configuration,
//! removing a peer, leadership transfer, and server health as autopilot reports it.

use super::{query_options, ApiError, Context, LeaderOp, Outcome, Reply, Request};
use crate::proto::duration::format_go_duration;
use crate::shard::runtime::{OperatorOp, ReadPlan};
use crate::store::CommandResult;
use serde_json::json;

/// Autopilot's `LastContactThreshold` default: a server silent for longer is unhealthy.
const LAST_CONTACT_THRESHOLD_MS: u64 = 200;
/// Autopilot's `MaxTrailingLogs` default: a server further behind is unhealthy.
const MAX_TRAILING_LOGS: u64 = 250;

/// Reads of Raft state are answered by the leader unless `?stale`, as Consul forwards them.
fn must_forward(ctx: &Context, request: &Request) -> Result<bool, ApiError> {
    let options = query_options(ctx, &request.query)?;
    Ok(ctx.read_plan(&options) == ReadPlan::Forward)
}

pub fn configuration(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if must_forward(ctx, request)? {
        return Ok(Outcome::Forward);
    }
    let status = ctx.cluster_status();
    let servers: Vec<_> = status
        .servers
        .iter()
        .map(|s| {
            json!({
                "ID": s.node_id,
                "Node": s.name,
                "Address": s.address,
                "Leader": Some(s.raft_id) == status.leader_raft_id,
                "ProtocolVersion": "3",
                "Voter": s.voter,
                "LastIndex": status.last_index,
            })
        })
        .collect();
    reply.json(
        200,
        b"",
        &json!({ "Servers": servers, "Index": status.membership_index }),
    );
    Ok(Outcome::Done)
}

pub fn remove_peer(
    ctx: &Context,
    request: &Request,
    _reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    super::check_datacenter(ctx, &request.query)?;
    let id = request
        .query
        .get("id")
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let address = request
        .query
        .get("address")
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    if id.is_none() && address.is_none() {
        return Err(ApiError::bad_request("Must specify either ?id with the server's ID or ?address with IP:port of peer to remove"));
    }
    if id.is_some() && address.is_some() {
        return Err(ApiError::bad_request(
            "Must specify only one of ?id or ?address",
        ));
    }
    Ok(Outcome::Leader(LeaderOp::Operator {
        op: OperatorOp::RemovePeer { id, address },
        respond: Box::new(|result, reply: &mut Reply| match result {
            CommandResult::Bool(_) | CommandResult::Txn(_) => reply.send(200, None, b"", b""),
            CommandResult::Error(reason) => reply.error(&ApiError::Internal(reason)),
        }),
    }))
}

pub fn transfer_leader(
    ctx: &Context,
    request: &Request,
    _reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    super::check_datacenter(ctx, &request.query)?;
    let id = request
        .query
        .get("id")
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    Ok(Outcome::Leader(LeaderOp::Operator {
        op: OperatorOp::TransferLeader { id },
        respond: Box::new(|result, reply: &mut Reply| match result {
            CommandResult::Bool(_) | CommandResult::Txn(_) => {
                reply.json(200, b"", &json!({ "Success": true }))
            }
            CommandResult::Error(reason) => reply.error(&ApiError::Internal(reason)),
        }),
    }))
}

pub fn autopilot_health(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if must_forward(ctx, request)? {
        return Ok(Outcome::Forward);
    }
    let status = ctx.cluster_status();
    let gossip = ctx.lan().map(|g| g.members());
    let serf_status = |name: &str| -> &'static str {
        match &gossip {
            Some(members) => members
                .iter()
                .find(|m| m.name == name)
                .map(|m| m.status.as_str())
                .unwrap_or("none"),
            None => "alive",
        }
    };
    let mut healthy_voters = 0usize;
    let mut voters = 0usize;
    let servers: Vec<_> = status
        .servers
        .iter()
        .map(|s| {
            let is_leader = Some(s.raft_id) == status.leader_raft_id;
            let peer = status.peer_health.iter().find(|p| p.raft_id == s.raft_id);
            let (last_contact_ms, last_index) = if is_leader {
                (0, status.last_index)
            } else {
                (peer.and_then(|p| p.last_contact_ms).unwrap_or(u64::MAX), peer.map(|p| p.match_index).unwrap_or(0))
            };
            let serf = serf_status(&s.name);
            let healthy = serf == "alive" && last_contact_ms <= LAST_CONTACT_THRESHOLD_MS && status.last_index.saturating_sub(last_index) <= MAX_TRAILING_LOGS;
            if s.voter {
                voters += 1;
                healthy_voters += usize::from(healthy);
            }
            json!({
                "ID": s.node_id,
                "Name": s.name,
                "Address": s.address,
                "SerfStatus": serf,
                "Version": crate::CONSUL_API_VERSION,
                "Leader": is_leader,
                "LastContact": if last_contact_ms == u64::MAX { "-1ns".to_string() } else { format_go_duration(last_contact_ms as i64 * 1_000_000) },
                "LastTerm": status.term,
                "LastIndex": last_index,
                "Healthy": healthy,
                "Voter": s.voter,
                "StableSince": crate::shard::logger::utc_timestamp(std::time::SystemTime::now() - ctx.started_at().elapsed()),
            })
        })
        .collect();
    let quorum = voters / 2 + 1;
    let failure_tolerance = healthy_voters.saturating_sub(quorum);
    let healthy = voters > 0 && healthy_voters == voters;
    reply.json(
        200,
        b"",
        &json!({ "Healthy": healthy, "FailureTolerance": failure_tolerance, "Servers": servers }),
    );
    Ok(Outcome::Done)
}
