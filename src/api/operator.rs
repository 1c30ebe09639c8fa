//! `/v1/operator/raft/*`, `/v1/operator/autopilot/*` and `/v1/operator/usage`: the Raft
//! configuration, removing a peer, leadership transfer, the autopilot configuration (read,
//! set, check-and-set), the servers' health and autopilot state as the leader's autopilot
//! judges them (`replica::autopilot`), and the catalog's usage counts.
//!
//! A client agent asks a server with Consul's typed calls (`api::rpc::client_operator`):
//! the answers are rendered here from the values those calls carry
//! (`consul::rpc::operator`), which a server builds from its own state, so both answer the
//! same. Leadership transfer goes as praetor's own `Operator.TransferLeader`, the usage
//! counts as `Operator.Usage`. A request naming another datacenter (`?dc=`) is the same
//! call naming it ([`across`]).

use super::rpc::client_operator;
use super::{
    query_options, run_query, ApiError, Context, LeaderOp, Outcome, Query, QueryMeta, Reply,
    Request, WriteOp,
};
use crate::consul::bodies;
use crate::consul::body::{parse_strict, Obj};
use crate::consul::rpc::operator::{
    OperatorHealth, RaftConfiguration, RaftServer, ServerHealth as WireServerHealth,
};
use crate::proto::duration::format_go_duration;
use crate::replica::AutopilotHealth;
use crate::shard::runtime::OperatorOp;
use crate::shard::watch::WatchSet;
use crate::store::autopilot::{AutopilotConfig, AutopilotOp};
use crate::store::catalog::read::service_usage;
use crate::store::{AutopilotResult, CommandResult, StoreVersion, Table, Tables};
use serde_json::json;
use std::sync::Arc;

/// The Raft configuration as `RaftConfigurationResponse` carries it (what
/// `Operator.RaftGetConfiguration` answers).
pub fn raft_configuration_of(ctx: &Context) -> RaftConfiguration {
    let status = ctx.cluster_status();
    RaftConfiguration {
        servers: status
            .servers
            .iter()
            .map(|s| RaftServer {
                id: s.node_id.clone(),
                node: s.name.clone(),
                address: s.address.clone(),
                leader: Some(s.raft_id) == status.leader_raft_id,
                protocol_version: "3".to_string(),
                voter: s.voter,
                last_index: status.last_index,
            })
            .collect(),
        index: status.membership_index,
    }
}

/// `GET /v1/operator/raft/configuration`'s answer: on a server from its own Raft state, on
/// a client agent from the `Operator.RaftGetConfiguration` reply.
pub fn raft_configuration_answer(configuration: &RaftConfiguration, reply: &mut Reply) {
    let servers: Vec<_> = configuration
        .servers
        .iter()
        .map(|s| {
            json!({
                "ID": s.id,
                "Node": s.node,
                "Address": s.address,
                "Leader": s.leader,
                "ProtocolVersion": s.protocol_version,
                "Voter": s.voter,
                "LastIndex": s.last_index,
            })
        })
        .collect();
    reply.json(
        200,
        b"",
        &json!({ "Servers": servers, "Index": configuration.index }),
    );
}

pub fn configuration(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if super::read_by_call(ctx, request)? {
        let options = query_options(ctx, &request.query)?;
        return Ok(client_operator::raft_configuration(
            ctx, request, options, "",
        ));
    }
    // A read the leader must answer went as its typed call above; bad parameters are
    // refused here as on any read.
    query_options(ctx, &request.query)?;
    raft_configuration_answer(&raft_configuration_of(ctx), reply);
    Ok(Outcome::Done)
}

pub fn remove_peer(
    ctx: &Context,
    request: &Request,
    _reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    super::check_datacenter(ctx, &request.query)?;
    let (id, address) = peer_to_remove(request)?;
    if ctx.writes_by_call() {
        return Ok(client_operator::remove_peer(ctx, request, id, address, ""));
    }
    Ok(Outcome::Leader(LeaderOp::Operator {
        op: OperatorOp::RemovePeer { id, address },
        respond: Box::new(|result, reply: &mut Reply| match result {
            CommandResult::Error(reason) => reply.error(&ApiError::Internal(reason)),
            _ => reply.send(200, None, b"", b""),
        }),
    }))
}

/// The `?id` or `?address` of a peer removal (exactly one, as Consul insists).
type PeerToRemove = (Option<String>, Option<String>);

fn peer_to_remove(request: &Request) -> Result<PeerToRemove, ApiError> {
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
    Ok((id, address))
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
    if ctx.writes_by_call() {
        // The leader hands its leadership over: a client agent or a follower asks it with
        // praetor's own call (Consul's agents use gRPC there).
        return Ok(client_operator::transfer_leader(
            ctx,
            request,
            id.as_deref(),
            "",
        ));
    }
    Ok(Outcome::Leader(LeaderOp::Operator {
        op: OperatorOp::TransferLeader { id },
        respond: Box::new(|result, reply: &mut Reply| match result {
            CommandResult::Error(reason) => reply.error(&ApiError::Internal(reason)),
            _ => reply.json(200, b"", &json!({ "Success": true })),
        }),
    }))
}

/// Go's `time.Time` in JSON, rounded to the second: `2023-05-10T21:34:05Z`.
fn rfc3339_seconds(unix_ns: i64) -> String {
    let secs = (unix_ns.saturating_add(500_000_000)).div_euclid(1_000_000_000);
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| "0001-01-01T00:00:00Z".to_string())
}

/// A `ReadableDuration` as Consul prints it (`"200ms"`, `"10s"`).
fn readable_ns(ns: i64) -> String {
    if ns < 0 {
        // Consul's never-contacted server shows Go's -1ns.
        return "-1ns".to_string();
    }
    format_go_duration(ns)
}

/// Autopilot's health, which only the leader computes: `None` on a follower, which
/// forwards.
pub fn leader_health(ctx: &Context) -> Result<Option<Arc<AutopilotHealth>>, ApiError> {
    if !ctx.is_leader() {
        return Ok(None);
    }
    ctx.cluster_status()
        .autopilot
        .clone()
        .map(Some)
        .ok_or_else(|| ApiError::Internal("autopilot has not judged the servers yet".into()))
}

/// The leader's autopilot health as `Operator.ServerHealth` and `Operator.AutopilotState`
/// carry it.
pub fn health_of(health: &AutopilotHealth) -> OperatorHealth {
    let ns = |ms: u64| {
        i64::try_from(ms)
            .unwrap_or(i64::MAX)
            .saturating_mul(1_000_000)
    };
    OperatorHealth {
        healthy: health.healthy,
        failure_tolerance: health.failure_tolerance as u64,
        servers: health
            .servers
            .iter()
            .map(|s| WireServerHealth {
                id: s.node_id.clone(),
                name: s.name.clone(),
                address: s.address.clone(),
                serf_status: s.serf_status,
                version: crate::CONSUL_API_VERSION.to_string(),
                leader: s.leader,
                last_contact_ns: s.last_contact_ms.map_or(-1, ns),
                last_term: s.last_term,
                last_index: s.last_index,
                healthy: s.healthy,
                voter: s.voter,
                stable_since_unix_ns: ns(s.stable_since_unix_ms),
            })
            .collect(),
    }
}

/// `GET /v1/operator/autopilot/health`'s answer: 200 when every server is healthy, else 429
/// with the same body, as Consul.
pub fn health_answer(health: &OperatorHealth, reply: &mut Reply) {
    let servers: Vec<_> = health
        .servers
        .iter()
        .map(|s| {
            json!({
                "ID": s.id,
                "Name": s.name,
                "Address": s.address,
                "SerfStatus": s.serf_status,
                "Version": s.version,
                "Leader": s.leader,
                "LastContact": readable_ns(s.last_contact_ns),
                "LastTerm": s.last_term,
                "LastIndex": s.last_index,
                "Healthy": s.healthy,
                "Voter": s.voter,
                "StableSince": rfc3339_seconds(s.stable_since_unix_ns),
            })
        })
        .collect();
    let status = if health.healthy { 200 } else { 429 };
    reply.json(
        status,
        b"",
        &json!({
            "Healthy": health.healthy,
            "FailureTolerance": health.failure_tolerance,
            "Servers": servers,
        }),
    );
}

/// `GET /v1/operator/autopilot/health` (`state` false) and `/state` (`state` true): the
/// leader answers from its autopilot, a client agent asks a server (`Operator.ServerHealth`,
/// `Operator.AutopilotState`), a follower forwards.
fn autopilot_view(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    state: bool,
) -> Result<Outcome, ApiError> {
    super::check_datacenter(ctx, &request.query)?;
    if ctx.writes_by_call() {
        return Ok(client_operator::autopilot_health(ctx, request, state, ""));
    }
    let Some(health) = leader_health(ctx)? else {
        // Leadership moved since this server thought it led: the leader answers.
        return Ok(client_operator::autopilot_health(ctx, request, state, ""));
    };
    let health = health_of(&health);
    if state {
        state_answer(&health, reply);
    } else {
        health_answer(&health, reply);
    }
    Ok(Outcome::Done)
}

/// `GET /v1/operator/autopilot/health`.
pub fn autopilot_health(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    autopilot_view(ctx, request, reply, false)
}

/// A server's autopilot status: `leader`, `voter`, or `non-voter` (still stabilizing or
/// waiting for promotion).
fn server_status(server: &WireServerHealth) -> &'static str {
    if server.leader {
        "leader"
    } else if server.voter {
        "voter"
    } else {
        "non-voter"
    }
}

/// `GET /v1/operator/autopilot/state`: autopilot's full view, keyed by server ID.
pub fn autopilot_state(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    autopilot_view(ctx, request, reply, true)
}

/// `GET /v1/operator/autopilot/state`'s answer.
pub fn state_answer(health: &OperatorHealth, reply: &mut Reply) {
    let mut servers = serde_json::Map::new();
    for s in &health.servers {
        servers.insert(
            s.id.clone(),
            json!({
                "ID": s.id,
                "Name": s.name,
                "Address": s.address,
                "NodeStatus": s.serf_status,
                "Version": s.version,
                "LastContact": readable_ns(s.last_contact_ns),
                "LastTerm": s.last_term,
                "LastIndex": s.last_index,
                "Healthy": s.healthy,
                "StableSince": rfc3339_seconds(s.stable_since_unix_ns),
                "ReadReplica": false,
                "Status": server_status(s),
                "Meta": {"consul-network-segment": ""},
                "NodeType": "voter",
            }),
        );
    }
    let leader = health
        .servers
        .iter()
        .find(|s| s.leader)
        .map(|s| s.id.clone())
        .unwrap_or_default();
    let voters: Vec<&str> = health
        .servers
        .iter()
        .filter(|s| s.voter)
        .map(|s| s.id.as_str())
        .collect();
    reply.json(
        200,
        b"",
        &json!({
            "Healthy": health.healthy,
            "FailureTolerance": health.failure_tolerance,
            // Without Enterprise redundancy zones it equals the failure tolerance, as in
            // Consul CE.
            "OptimisticFailureTolerance": health.failure_tolerance,
            "Servers": servers,
            "Leader": leader,
            "Voters": voters,
        }),
    );
}

/// An autopilot configuration as Consul's API shows it.
pub fn configuration_json(config: &AutopilotConfig) -> serde_json::Value {
    json!({
        "CleanupDeadServers": config.cleanup_dead_servers,
        "LastContactThreshold": format_go_duration(config.last_contact_threshold_ns),
        "MaxTrailingLogs": config.max_trailing_logs,
        "MinQuorum": config.min_quorum,
        "ServerStabilizationTime": format_go_duration(config.server_stabilization_time_ns),
        "RedundancyZoneTag": config.redundancy_zone_tag,
        "DisableUpgradeMigration": config.disable_upgrade_migration,
        "UpgradeVersionTag": config.upgrade_version_tag,
        "CreateIndex": config.create_index,
        "ModifyIndex": config.modify_index,
    })
}

/// What a `PUT` body starts from: Consul decodes it onto `api.NewAutopilotConfiguration()`,
/// so a field left out takes these values (the rest are false, zero or empty), whatever
/// the stored configuration holds.
const PUT_CLEANUP_DEAD_SERVERS: bool = true;
const PUT_LAST_CONTACT_THRESHOLD_NS: i64 = 200_000_000;
const PUT_MAX_TRAILING_LOGS: u64 = 250;
const PUT_SERVER_STABILIZATION_TIME_NS: i64 = 10_000_000_000;

/// The body of a `PUT`, onto Consul's defaults for the fields it leaves out.
fn parse_configuration(body: &[u8]) -> Result<AutopilotConfig, String> {
    let value = parse_strict(body, &bodies::AUTOPILOT_CONFIGURATION)?;
    let obj = Obj::new(&value)?;
    let min_quorum = obj.bounded(&["minquorum"], 0, u32::MAX as i64)? as u32;
    let max_trailing_logs = match obj.has(&["maxtrailinglogs"]) {
        true => obj.bounded(&["maxtrailinglogs"], 0, i64::MAX)? as u64,
        false => PUT_MAX_TRAILING_LOGS,
    };
    let duration_or = |names: &[&str], default_ns: i64| match obj.has(names) {
        true => obj.duration_ns(names),
        false => Ok(default_ns),
    };
    Ok(AutopilotConfig {
        cleanup_dead_servers: match obj.has(&["cleanupdeadservers"]) {
            true => obj.bool(&["cleanupdeadservers"])?,
            false => PUT_CLEANUP_DEAD_SERVERS,
        },
        last_contact_threshold_ns: duration_or(
            &["lastcontactthreshold"],
            PUT_LAST_CONTACT_THRESHOLD_NS,
        )?,
        max_trailing_logs,
        min_quorum,
        server_stabilization_time_ns: duration_or(
            &["serverstabilizationtime"],
            PUT_SERVER_STABILIZATION_TIME_NS,
        )?,
        redundancy_zone_tag: obj.string(&["redundancyzonetag"])?,
        disable_upgrade_migration: obj.bool(&["disableupgrademigration"])?,
        upgrade_version_tag: obj.string(&["upgradeversiontag"])?,
        create_index: 0,
        modify_index: 0,
    })
}

/// Consul's refusal to read the autopilot configuration before the leader wrote it.
pub const AUTOPILOT_NOT_INITIALIZED: &str = "autopilot config not initialized yet";

/// `GET|PUT /v1/operator/autopilot/configuration`. On a client agent the read is
/// `Operator.AutopilotGetConfiguration`; the write, the handler's store command, becomes
/// `Operator.AutopilotSetConfiguration` (`api::rpc::client::typed_write`).
pub fn autopilot_configuration(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if request.method == crate::proto::http::Method::Get {
        if super::read_by_call(ctx, request)? {
            let options = query_options(ctx, &request.query)?;
            return Ok(client_operator::autopilot_configuration(
                ctx, request, options, "",
            ));
        }
        // A read the leader must answer went as its typed call above; bad parameters are
        // refused here as on any read.
        query_options(ctx, &request.query)?;
        let version = ctx.current_version();
        let Some(config) = version.autopilot.as_ref() else {
            return Err(ApiError::Internal(AUTOPILOT_NOT_INITIALIZED.into()));
        };
        reply.json(200, b"", &configuration_json(config));
        return Ok(Outcome::Done);
    }
    super::check_datacenter(ctx, &request.query)?;
    let (config, cas) = autopilot_set_of(request)?;
    let set = AutopilotOp::Set { config, cas };
    Ok(Outcome::Write(WriteOp::autopilot(
        set,
        autopilot_set_answer(cas),
    )))
}

/// A `PUT /v1/operator/autopilot/configuration`'s configuration and `?cas`.
fn autopilot_set_of(request: &Request) -> Result<(AutopilotConfig, Option<u64>), ApiError> {
    let cas = match request.query.get("cas") {
        None => None,
        Some(text) => Some(
            text.parse::<u64>()
                .map_err(|e| ApiError::bad_request(format!("Error parsing cas value: {e}")))?,
        ),
    };
    let config = parse_configuration(request.body)
        .map_err(|e| ApiError::bad_request(format!("Error parsing autopilot config: {e}")))?;
    Ok((config, cas))
}

/// How an autopilot write is answered: `true` to a plain set and the outcome to a
/// check-and-set, as Consul answers.
fn autopilot_set_answer(cas: Option<u64>) -> impl FnOnce(AutopilotResult, &mut Reply) {
    move |result, reply| reply.json_bool(result == AutopilotResult::Written || cas.is_none())
}

/// An operator request naming another datacenter (`?dc=`): parsed and checked as for this
/// one, then its typed call naming `datacenter`, whose servers answer it. `None` for the
/// paths that are not the operator's Raft, autopilot and usage endpoints.
pub fn across(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    use crate::proto::http::Method;
    let options = || super::query_options_in(ctx, &request.query);
    let outcome = match request.path {
        "/v1/operator/raft/configuration" => options()
            .map(|options| client_operator::raft_configuration(ctx, request, options, datacenter)),
        "/v1/operator/raft/peer" => peer_to_remove(request).map(|(id, address)| {
            client_operator::remove_peer(ctx, request, id, address, datacenter)
        }),
        "/v1/operator/raft/transfer-leader" => {
            let id = request.query.get("id").filter(|v| !v.is_empty());
            Ok(client_operator::transfer_leader(
                ctx, request, id, datacenter,
            ))
        }
        "/v1/operator/autopilot/health" => Ok(client_operator::autopilot_health(
            ctx, request, false, datacenter,
        )),
        "/v1/operator/autopilot/state" => Ok(client_operator::autopilot_health(
            ctx, request, true, datacenter,
        )),
        "/v1/operator/autopilot/configuration" if request.method == Method::Get => {
            options().map(|options| {
                client_operator::autopilot_configuration(ctx, request, options, datacenter)
            })
        }
        "/v1/operator/autopilot/configuration" => {
            autopilot_set_of(request).map(|(config, cas)| {
                // The handler's own responder, through the command family's seam.
                let set = WriteOp::autopilot(
                    AutopilotOp::Set {
                        config: config.clone(),
                        cas,
                    },
                    autopilot_set_answer(cas),
                );
                client_operator::autopilot_set(ctx, request, &config, cas, set.respond, datacenter)
            })
        }
        "/v1/operator/usage" => {
            options().map(|options| client_operator::usage(ctx, request, options, datacenter))
        }
        _ => return None,
    };
    Some(outcome)
}

/// `GET /v1/operator/usage`: the catalog's counts for this datacenter, blocking-capable
/// like Consul's (it moves with the nodes and services tables). A client agent, or a
/// follower for a leader read, asks with `Operator.Usage`.
pub fn usage(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let options = query_options(ctx, &request.query)?;
    if ctx.reads_by_call(&options) {
        return Ok(client_operator::usage(ctx, request, options, ""));
    }
    let query = UsageQuery {
        datacenter: ctx.config().datacenter.clone(),
    };
    run_query(ctx, query, options, reply)
}

struct UsageQuery {
    datacenter: String,
}

/// What the usage read depends on: the nodes and services tables.
pub fn usage_watch(tables: &Tables) -> (u64, WatchSet) {
    (
        tables.max_table_index(&[Table::Nodes, Table::Services]),
        WatchSet::new().table(Table::Nodes).table(Table::Services),
    )
}

impl Query for UsageQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        usage_watch(tables)
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        usage_answer(&self.datacenter, &service_usage(tables), meta, reply);
    }
}

/// `GET /v1/operator/usage`'s answer: on a server from its store, on a client agent from
/// the `Operator.Usage` reply (`datacenter` the one the answering server counted).
pub fn usage_answer(
    datacenter: &str,
    usage: &crate::store::catalog::read::ServiceUsage,
    meta: QueryMeta,
    reply: &mut Reply,
) {
    let connect: serde_json::Map<String, serde_json::Value> = usage
        .connect_instances
        .iter()
        .map(|(kind, n)| (kind.to_string(), json!(n)))
        .collect();
    let mut headers = Vec::with_capacity(160);
    meta.write_headers(&mut headers);
    // Consul answers its `structs.Usage`, which embeds the query's `QueryMeta`: the
    // body repeats what the headers say.
    reply.json(
        200,
        &headers,
        &json!({
            "Usage": {
                datacenter: {
                    "Services": usage.services,
                    "ServiceInstances": usage.service_instances,
                    "ConnectServiceInstances": connect,
                    "BillableServiceInstances": usage.billable_service_instances,
                    "Nodes": usage.nodes,
                }
            },
            "Index": meta.index,
            "LastContact": meta.last_contact_ms.saturating_mul(1_000_000),
            "KnownLeader": meta.known_leader,
            "ConsistencyLevel": meta.consistency.as_str(),
            "NotModified": false,
            "Backend": 0,
            "ResultsFilteredByACLs": false,
        }),
    );
}
