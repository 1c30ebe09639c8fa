//! Consul's typed calls, served on a server: the endpoints of Consul's
//! `agent/consul/*_endpoint.go` that client agents, DNS, anti-entropy, sessions and ACL
//! resolution use (`KVS.Get`, `Catalog.Register`, `Health.ServiceNodes`, `Session.Apply`, …),
//! reached through the server port ([`crate::shard::rpc_typed`]) and answered in Consul's
//! msgpack shapes ([`crate::consul::rpc`]).
//!
//! They are served as the HTTP handlers are, from the same pieces: reads evaluate against
//! the shard's store version with the same read plan (stale, leader, consistent), block on
//! `MinQueryIndex` with the same watch registry and Consul's wait bounds; writes are store
//! commands proposed through the same path; tokens resolve through the same authorizer
//! cache and the same checks, and list answers leave out what the token may not read.
//! Where a call must run is decided here, as Consul's `ForwardRPC` does: another
//! datacenter's call goes to a server there (through the WAN router, on a yamux stream of
//! this shard's connection to it, as Consul's `forwardDC` sends it), a write or a
//! non-stale read on a follower goes to the leader (praetor's frames carry it there,
//! [`kind::TYPED_CALL`], with a hop count, at most [`FORWARD_HOPS_MAX`] hops); each hop hands
//! the same typed call on. A call handed to another datacenter needs no hop count: it names
//! the datacenter that receives it, which serves it there.
//!
//! Errors are Consul's texts, which net/rpc sends as the answer's `Error`: "No cluster
//! leader", "No path to datacenter", "ACL not found", "Permission denied: …", "rpc: can't
//! find method …".

pub mod acl;
pub mod auto_encrypt;
pub mod catalog;
pub mod client;
pub mod client_acl;
pub mod client_catalog;
pub mod client_config;
pub mod client_connect;
pub mod client_intention;
pub mod client_internal;
pub mod client_operator;
pub mod client_peering;
pub mod client_query;
pub mod client_session;
pub mod client_status;
pub mod client_txn;
pub mod client_ui;
pub mod config_entry;
pub mod connect_ca;
pub mod coordinate;
pub mod discovery_chain;
pub mod dns;
pub mod event;
pub mod federation_state;
pub mod health;
pub mod intention;
pub mod internal;
pub mod keyring;
pub mod kvs;
pub mod operator;
pub mod peering;
pub mod prepared_query;
pub mod session;
pub mod snapshot;
pub mod status;
pub mod txn;

use crate::api::authz::{self, Authz, RowFilter};
use crate::api::server::{Server, FORWARD_HOPS_MAX, RPC_HOLD_TIMEOUT};
use crate::api::{ApiError, BLOCKING_JITTER_FRACTION};
use crate::cluster::servers::Retry;
use crate::consul::rpc::acl::Object;
use crate::consul::rpc::{QueryMeta, QueryOptions};
use crate::proto::msgpack_rpc::{decode_response_header, unknown_method_error, MessageReader};
use crate::proto::rpc::kind;
use crate::replica::ProposalResult;
use crate::shard::rpc_server::{TypedAnswer, TypedCall, TypedCalls};
use crate::shard::runtime::{Consistency, ReadPlan};
use crate::shard::watch::WatchSet;
use crate::store::acl::authorizer::{Authorizer, Check};
use crate::store::{Command, CommandResult, FamilyResult, StoreVersion, Tables};
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

/// What an endpoint answers: the reply's msgpack body, or Consul's error text.
pub type Answer = Result<Vec<u8>, String>;

/// Consul's RPC services of which praetor serves methods, and praetor's own (`Praetor`,
/// what its client agents' DNS asks, [`dns`]): a call to another method of one of them is
/// an unknown method, a call to any other service an unknown service.
pub const SERVICES: &[&str] = &[
    "ACL",
    "AutoEncrypt",
    "Catalog",
    "ConfigEntry",
    "ConnectCA",
    "Coordinate",
    "DiscoveryChain",
    "FederationState",
    "Health",
    "Intention",
    "Internal",
    "KVS",
    "Operator",
    "Peering",
    "Praetor",
    "PreparedQuery",
    "Session",
    "Status",
    "Txn",
];

/// A call handed to another server waits this long for its answer, beyond a blocking
/// query's own wait.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(15);
/// How often a follower looks for a leader while it holds a call for one.
const LEADER_POLL: Duration = Duration::from_millis(50);

impl TypedCalls for Server {
    fn serve(&self, call: TypedCall) -> impl Future<Output = TypedAnswer> {
        serve(self, call)
    }

    // Snapshots on their own connection, byte 5 (issue #36, r11snap).
    fn serve_snapshot(
        &self,
        stream: crate::shard::snapshot_stream::SnapshotStream,
        peer: std::net::SocketAddr,
    ) -> impl Future<Output = ()> {
        snapshot::serve_stream(self, stream, peer)
    }
}

/// Serves one call: its method's endpoint, or net/rpc's words for an unknown one.
pub async fn serve(server: &Server, call: TypedCall) -> TypedAnswer {
    // Which calls arrive (a client agent's reads and writes among them) shows in the debug
    // log, as Consul's RPC metrics name each method.
    log::debug!("rpc: call {}", call.method());
    let answer = match call.method() {
        "Status.Ping" => Ok(crate::consul::rpc::status::ping_reply()),
        "Status.Leader" => status::leader(server, &call).await,
        "Status.Peers" => status::peers(server, &call).await,
        "KVS.Get" => kvs::get(server, &call).await,
        "KVS.List" => kvs::list(server, &call).await,
        "KVS.ListKeys" => kvs::list_keys(server, &call).await,
        "KVS.Apply" => kvs::apply(server, &call).await,
        "Catalog.Register" => catalog::register(server, &call).await,
        "Catalog.Deregister" => catalog::deregister(server, &call).await,
        "Catalog.ListDatacenters" => catalog::list_datacenters(server),
        "Catalog.ListNodes" => catalog::list_nodes(server, &call).await,
        "Catalog.ListServices" => catalog::list_services(server, &call).await,
        "Catalog.ServiceNodes" => catalog::service_nodes(server, &call).await,
        "Catalog.NodeServices" => catalog::node_services(server, &call).await,
        "Health.ServiceNodes" => health::service_nodes(server, &call).await,
        "Health.NodeChecks" => health::node_checks(server, &call).await,
        "Health.ServiceChecks" => health::service_checks(server, &call).await,
        "Health.ChecksInState" => health::checks_in_state(server, &call).await,
        "Session.Apply" => session::apply(server, &call).await,
        "Session.Get" => session::get(server, &call).await,
        "Session.List" => session::list(server, &call).await,
        "Session.NodeSessions" => session::node_sessions(server, &call).await,
        "Session.Renew" => session::renew(server, &call).await,
        "Txn.Apply" => txn::apply(server, &call).await,
        "Txn.Read" => txn::read_txn(server, &call).await,
        "Coordinate.Update" => coordinate::update(server, &call).await,
        "Coordinate.ListNodes" => coordinate::list_nodes(server, &call).await,
        "Coordinate.Node" => coordinate::node(server, &call).await,
        "ACL.TokenRead" => acl::token_read(server, &call).await,
        // The ACL objects a client agent reads and writes (`client_acl`).
        "ACL.TokenList" => acl::list(server, &call, Object::Token).await,
        "ACL.TokenSet" => acl::token_set(server, &call).await,
        "ACL.TokenClone" => acl::token_clone(server, &call).await,
        "ACL.TokenDelete" => acl::delete(server, &call, Object::Token).await,
        "ACL.PolicyRead" => acl::read_one(server, &call, Object::Policy).await,
        "ACL.PolicyList" => acl::list(server, &call, Object::Policy).await,
        "ACL.PolicySet" => acl::policy_set(server, &call).await,
        "ACL.PolicyDelete" => acl::delete(server, &call, Object::Policy).await,
        "ACL.RoleRead" => acl::read_one(server, &call, Object::Role).await,
        "ACL.RoleList" => acl::list(server, &call, Object::Role).await,
        "ACL.RoleSet" => acl::role_set(server, &call).await,
        "ACL.RoleDelete" => acl::delete(server, &call, Object::Role).await,
        // Auth methods, binding rules, login, logout and bootstrap (issue #36, ACL auth).
        "ACL.AuthMethodRead" => acl::read_one(server, &call, Object::AuthMethod).await,
        "ACL.AuthMethodList" => acl::list(server, &call, Object::AuthMethod).await,
        "ACL.AuthMethodSet" => acl::auth_method_set(server, &call).await,
        "ACL.AuthMethodDelete" => acl::delete(server, &call, Object::AuthMethod).await,
        "ACL.BindingRuleRead" => acl::read_one(server, &call, Object::BindingRule).await,
        "ACL.BindingRuleList" => acl::list(server, &call, Object::BindingRule).await,
        "ACL.BindingRuleSet" => acl::binding_rule_set(server, &call).await,
        "ACL.BindingRuleDelete" => acl::delete(server, &call, Object::BindingRule).await,
        "ACL.Login" => acl::login(server, &call).await,
        "ACL.Logout" => acl::logout(server, &call).await,
        "ACL.BootstrapTokens" => acl::bootstrap(server, &call).await,
        // ACL replication's status (issue #36, r10acl).
        "ACL.ReplicationStatus" => acl::replication_status(server, &call).await,
        "ConnectCA.Roots" => connect_ca::roots(server, &call).await,
        "ConnectCA.Sign" => connect_ca::sign(server, &call).await,
        "AutoEncrypt.Sign" => auto_encrypt::sign(server, &call),
        "Internal.NodeInfo" => internal::node_info(server, &call).await,
        "Internal.NodeDump" => internal::node_dump(server, &call).await,
        "Internal.ServiceDump" => internal::service_dump(server, &call).await,
        "Internal.EventFire" => internal::event_fire(server, &call).await,
        "PreparedQuery.Apply" => prepared_query::apply(server, &call).await,
        "PreparedQuery.Get" => prepared_query::get(server, &call).await,
        "PreparedQuery.List" => prepared_query::list(server, &call).await,
        "PreparedQuery.Explain" => prepared_query::explain(server, &call).await,
        "PreparedQuery.Execute" => prepared_query::execute(server, &call).await,
        "PreparedQuery.ExecuteRemote" => prepared_query::execute_remote(server, &call).await,
        "Praetor.DNSLookup" => dns::lookup(server, &call).await,
        "Praetor.DNSChanges" => dns::changes(server, &call).await,
        // The service mesh's configuration (issue #36, mesh).
        "ConfigEntry.Apply" => config_entry::apply(server, &call).await,
        "ConfigEntry.Delete" => config_entry::delete(server, &call).await,
        "ConfigEntry.Get" => config_entry::get(server, &call).await,
        "ConfigEntry.List" => config_entry::list(server, &call).await,
        "ConfigEntry.ListAll" => config_entry::list_all(server, &call).await,
        // A secondary datacenter's leader and its primary (`agent::connect::primary`).
        "FederationState.Apply" => federation_state::apply(server, &call).await,
        "FederationState.List" => federation_state::list(server, &call).await,
        "ConnectCA.SignIntermediate" => connect_ca::sign_intermediate(server, &call).await,
        // The CA's configuration and the operator's calls (issue #36, operator).
        "ConnectCA.ConfigurationGet" => connect_ca::configuration_get(server, &call).await,
        "ConnectCA.ConfigurationSet" => connect_ca::configuration_set(server, &call).await,
        "Operator.RaftGetConfiguration" => operator::raft_get_configuration(server, &call).await,
        "Operator.RaftRemovePeerByAddress" => {
            operator::raft_remove_peer(server, &call, false).await
        }
        "Operator.RaftRemovePeerByID" => operator::raft_remove_peer(server, &call, true).await,
        "Operator.AutopilotGetConfiguration" => {
            operator::autopilot_get_configuration(server, &call).await
        }
        "Operator.AutopilotSetConfiguration" => {
            operator::autopilot_set_configuration(server, &call).await
        }
        "Operator.ServerHealth" => operator::autopilot_health(server, &call, false).await,
        "Operator.AutopilotState" => operator::autopilot_health(server, &call, true).await,
        // Sessions, transactions, queries, status, events, operator (issue #36, dcstate).
        "Operator.Usage" => operator::usage(server, &call).await,
        "Operator.TransferLeader" => operator::transfer_leader(server, &call).await,
        // Intentions and the discovery chain (issue #36, intentions).
        "Intention.Apply" => intention::apply(server, &call).await,
        "Intention.Get" => intention::get(server, &call).await,
        "Intention.List" => intention::list(server, &call).await,
        "Intention.Match" => intention::match_intentions(server, &call).await,
        "Intention.Check" => intention::check(server, &call).await,
        "DiscoveryChain.Get" => discovery_chain::get(server, &call).await,
        // The catalog's, health's, UI's and federation states' other reads (issue #36, dccatalog).
        "Catalog.NodeServiceList" => catalog::node_service_list(server, &call).await,
        "Catalog.GatewayServices" => catalog::gateway_services(server, &call).await,
        "Coordinate.ListDatacenters" => coordinate::list_datacenters(server),
        "FederationState.Get" => federation_state::get(server, &call).await,
        "FederationState.ListMeshGateways" => {
            federation_state::list_mesh_gateways(server, &call).await
        }
        // The UI's summaries (issue #36, r10ui).
        "Internal.GatewayServiceDump" => internal::gateway_service_dump(server, &call).await,
        "Internal.ServiceTopology" => internal::service_topology(server, &call).await,
        "Internal.CatalogOverview" => internal::catalog_overview(server, &call).await,
        "Internal.ExportedServicesForPeer" => {
            internal::exported_services_for_peer(server, &call).await
        }
        // Cluster peering (praetor's own methods) and exported services (issue #36, peering).
        "Peering.GenerateToken" => peering::generate_token(server, &call).await,
        "Peering.Establish" => peering::establish(server, &call).await,
        "Peering.Read" => peering::read_peering(server, &call).await,
        "Peering.List" => peering::list(server, &call).await,
        "Peering.Delete" => peering::delete(server, &call).await,
        "ConfigEntry.GetResolvedExportedServices" => {
            peering::exported_services(server, &call).await
        }
        // The gossip keyrings (issue #36, r11key).
        "Internal.KeyringOperation" => keyring::keyring_operation(server, &call).await,
        method => Err(unknown_method_error(method, |s| SERVICES.contains(&s))),
    };
    match answer {
        Ok(body) => TypedAnswer::ok(body),
        Err(error) => TypedAnswer::error(error),
    }
}

/// An HTTP error's text, as the RPC error Consul sends for it.
pub fn error_text(error: &ApiError) -> String {
    error.text()
}

/// A request body that is not the struct its method takes.
pub fn decode_error(error: crate::proto::msgpack::WireError) -> String {
    crate::consul::rpc::decode_error(error)
}

/// The token of a call, resolved when ACLs are on (`None` with ACLs off); an empty token is
/// anonymous.
pub fn authorize(server: &Server, token: &str) -> Result<Option<Authz>, String> {
    let ctx = server.context();
    if !ctx.acl_enabled() {
        return Ok(None);
    }
    authz::resolve(ctx, token)
        .map(Some)
        .map_err(|e| error_text(&e))
}

/// Checks a rule with the call's token; passes with ACLs off.
pub fn require<'a>(
    authz: &'a Option<Authz>,
    check: impl FnOnce(&'a Authorizer) -> Check<'a>,
) -> Result<(), String> {
    match authz {
        None => Ok(()),
        Some(authz) => authz
            .require(check(&authz.authorizer))
            .map_err(|e| error_text(&e)),
    }
}

/// The row filter of a call's token.
pub fn rows(authz: &Option<Authz>) -> RowFilter {
    RowFilter::of_authz(authz.as_ref())
}

/// Where a call's datacenter says it runs: `None` here, else the other datacenter's name
/// (lowercased).
fn other_datacenter(server: &Server, datacenter: &str) -> Option<String> {
    let ours = &server.context().config().datacenter;
    (!datacenter.is_empty() && !datacenter.eq_ignore_ascii_case(ours))
        .then(|| datacenter.to_ascii_lowercase())
}

/// Where a call must run beyond its datacenter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Any server of the datacenter (reads decide by their consistency later).
    Anywhere,
    /// The leader (writes).
    Leader,
}

/// Hands the call on when it does not run here: to another datacenter's server, or to the
/// leader. `None` when this server serves it.
pub async fn elsewhere(
    server: &Server,
    call: &TypedCall,
    datacenter: &str,
    placement: Placement,
    blocking_wait: Option<Duration>,
) -> Option<Answer> {
    if let Some(datacenter) = other_datacenter(server, datacenter) {
        return Some(Box::pin(to_datacenter(server, call, &datacenter, blocking_wait)).await);
    }
    if placement == Placement::Leader && !server.context().is_leader() {
        return Some(Box::pin(to_leader(server, call, blocking_wait)).await);
    }
    None
}

/// The start every read shares: the call is handed on when it names another datacenter,
/// then its token is resolved. `Err` carries the answer when the call was answered
/// elsewhere or its token refused.
pub async fn read_here(
    server: &Server,
    call: &TypedCall,
    datacenter: &str,
    options: &QueryOptions<'_>,
) -> Result<Option<Authz>, Answer> {
    let wait = blocking_wait(server, options);
    if let Some(answer) = elsewhere(server, call, datacenter, Placement::Anywhere, wait).await {
        return Err(answer);
    }
    authorize(server, options.token).map_err(Err)
}

/// How long to wait for a forwarded call's answer.
fn forward_timeout(blocking_wait: Option<Duration>) -> Duration {
    match blocking_wait {
        Some(wait) => wait + wait / BLOCKING_JITTER_FRACTION + FORWARD_TIMEOUT,
        None => FORWARD_TIMEOUT,
    }
}

/// The frame that hands `call` on: one more hop, then the call.
fn forwarded_payload(call: &TypedCall) -> Result<Vec<u8>, String> {
    if u32::from(call.hops) >= FORWARD_HOPS_MAX {
        return Err("No cluster leader (request forwarded too many times)".to_string());
    }
    let mut payload = Vec::with_capacity(call.body.len() + 64);
    payload.push(call.hops + 1);
    payload.extend_from_slice(&call.encode());
    Ok(payload)
}

/// Reads another server's answer frame back into the reply body or its error.
fn forwarded_answer(frame: Result<crate::proto::rpc::Frame, String>) -> Answer {
    let frame = frame.map_err(|e| format!("rpc error: {e}"))?;
    if frame.kind != kind::TYPED_ANSWER {
        return Err(String::from_utf8_lossy(&frame.payload).into_owned());
    }
    let bytes = &frame.payload[..];
    let extent = MessageReader::new()
        .advance(bytes)
        .map_err(|e| format!("rpc error: {e}"))?
        .ok_or_else(|| "rpc error: incomplete answer".to_string())?;
    let header = decode_response_header(&bytes[..extent.header_length])
        .map_err(|e| format!("rpc error: {e}"))?;
    if !header.error.is_empty() {
        return Err(header.error.to_string());
    }
    Ok(bytes[extent.header_length..extent.total()].to_vec())
}

/// Hands the call to a server of `datacenter` through the WAN router, as Consul's
/// `forwardDC` does: the same method and body (its `Datacenter` names that datacenter, so
/// the server there serves it), on a yamux stream of this shard's connection to that
/// server, and the answer relayed as it came — its `QueryMeta` the remote server's. Reads
/// may be retried on another of its servers.
async fn to_datacenter(
    server: &Server,
    call: &TypedCall,
    datacenter: &str,
    blocking_wait: Option<Duration>,
) -> Answer {
    let retry = if is_read(call.method()) {
        Retry::Always
    } else {
        Retry::NotSent
    };
    server
        .context()
        .router()
        .call_typed(
            &server.shard().rpc,
            datacenter,
            call.method(),
            &call.body,
            forward_timeout(blocking_wait),
            retry,
        )
        .await
        .map(|body| body.to_vec())
        .map_err(|error| error.to_string())
}

/// Whether a method only reads (so it may be sent again after a failure).
fn is_read(method: &str) -> bool {
    !matches!(
        method,
        "KVS.Apply"
            | "Catalog.Register"
            | "Catalog.Deregister"
            | "Session.Apply"
            | "Txn.Apply"
            | "ConnectCA.Sign"
            | "ConnectCA.SignIntermediate"
            | "FederationState.Apply"
            | "Coordinate.Update"
            | "Internal.EventFire"
            | "ConfigEntry.Apply"
            | "ConfigEntry.Delete"
            | "Intention.Apply"
            | "PreparedQuery.Apply"
            | "ACL.TokenSet"
            | "ACL.TokenClone"
            | "ACL.TokenDelete"
            | "ACL.PolicySet"
            | "ACL.PolicyDelete"
            | "ACL.RoleSet"
            | "ACL.RoleDelete"
            | "ConnectCA.ConfigurationSet"
            | "Operator.RaftRemovePeerByAddress"
            | "Operator.RaftRemovePeerByID"
            | "Operator.AutopilotSetConfiguration"
            | "Operator.TransferLeader"
            | "ACL.AuthMethodSet"
            | "ACL.AuthMethodDelete"
            | "ACL.BindingRuleSet"
            | "ACL.BindingRuleDelete"
            | "ACL.Login"
            | "ACL.Logout"
            | "ACL.BootstrapTokens"
            | "Peering.GenerateToken"
            | "Peering.Establish"
            | "Peering.Delete"
    )
}

/// Hands the call to the leader, waiting up to `RPC_HOLD_TIMEOUT` for one to be known; if
/// leadership arrives here meanwhile, serves it here.
async fn to_leader(server: &Server, call: &TypedCall, blocking_wait: Option<Duration>) -> Answer {
    let payload = forwarded_payload(call)?;
    let shard = server.shard();
    let started = std::time::Instant::now();
    let leader: SocketAddr = loop {
        let status = shard.cluster_status();
        if status.is_leader {
            let answer = Box::pin(serve(server, call.clone())).await;
            return if answer.error.is_empty() {
                Ok(answer.body)
            } else {
                Err(answer.error)
            };
        }
        if let Ok(address) = status.leader_rpc_address.parse::<SocketAddr>() {
            if address != shard.shared().rpc_address {
                break address;
            }
        }
        if started.elapsed() >= RPC_HOLD_TIMEOUT {
            return Err(ProposalResult::NotLeader.to_string());
        }
        monoio::time::sleep(LEADER_POLL).await;
    };
    let frame = shard
        .forward
        .call(
            leader,
            kind::TYPED_CALL,
            &payload,
            forward_timeout(blocking_wait),
        )
        .await;
    forwarded_answer(frame)
}

/// Proposes a store command on the leader and waits until it is applied.
pub async fn propose(server: &Server, command: Command) -> Result<CommandResult, String> {
    debug_assert!(
        server.context().is_leader(),
        "writes are proposed on the leader"
    );
    match server.shard().propose(command.encode()).await {
        ProposalResult::Applied(result) => Ok(result),
        refused => Err(ApiError::from_proposal(&refused)
            .map(|e| error_text(&e))
            .unwrap_or_else(|| refused.to_string())),
    }
}

/// [`propose`] of a command of family `R`: the family's result, or the refusal's text.
pub async fn propose_typed<R: FamilyResult>(
    server: &Server,
    command: Command,
) -> Result<R, String> {
    R::of(propose(server, command).await?)
}

/// A blocking-capable read: what it depends on, and its reply.
pub trait Read {
    /// The read's index and what it read.
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet);
    /// The reply for `version`, whose index `evaluate` gave.
    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer;
}

/// The consistency a call's options ask for.
pub(super) fn consistency(options: &QueryOptions) -> Consistency {
    if options.require_consistent {
        Consistency::Consistent
    } else if options.allow_stale {
        Consistency::Stale
    } else {
        Consistency::Leader
    }
}

/// A blocking query's wait as Consul's server bounds it: `MaxQueryTime` capped at
/// `max_query_time`, `default_query_time` when absent; `None` for a call that does not
/// block.
pub fn blocking_wait(server: &Server, options: &QueryOptions) -> Option<Duration> {
    if options.min_query_index == 0 {
        return None;
    }
    let process = &server.context().config().process;
    let asked = u64::try_from(options.max_query_time_ns).unwrap_or(0);
    Some(if asked == 0 {
        process.default_query_time.min(process.max_query_time)
    } else {
        Duration::from_nanos(asked).min(process.max_query_time)
    })
}

/// The HTTP layer's options for a call's read plan.
fn plan_options(options: &QueryOptions, wait: Option<Duration>) -> crate::api::QueryOptions {
    crate::api::QueryOptions {
        min_index: options.min_query_index,
        wait: wait.unwrap_or_default(),
        consistency: consistency(options),
        max_stale: (options.max_stale_duration_ns > 0)
            .then(|| Duration::from_nanos(options.max_stale_duration_ns as u64)),
        filter: None,
    }
}

/// Places a read that does not block (`PreparedQuery.Execute`, `Explain`) as its
/// consistency asks: handed to the leader, or run after a quorum round confirms this
/// server leads. `None` when it is to be served here now.
pub async fn one_shot_here(
    server: &Server,
    call: &TypedCall,
    options: &QueryOptions<'_>,
) -> Option<Answer> {
    match server.context().read_plan(&plan_options(options, None)) {
        ReadPlan::Forward => Some(Box::pin(to_leader(server, call, None)).await),
        ReadPlan::Barrier => {
            let result = Box::pin(server.shard().read_barrier()).await;
            ApiError::from_proposal(&result).map(|error| Err(error_text(&error)))
        }
        ReadPlan::Local => {
            crate::telemetry::incr(crate::consul::metrics::Counter::RpcQuery);
            None
        }
    }
}

/// The HTTP layer's metadata as Consul's `QueryMeta`, saying whether the token hid rows.
pub fn rpc_meta_of(meta: &crate::api::QueryMeta, hidden: bool) -> QueryMeta {
    QueryMeta {
        index: meta.index.max(1),
        last_contact_ns: (meta.last_contact_ms as i64).saturating_mul(1_000_000),
        known_leader: meta.known_leader,
        consistency_level: meta.consistency.as_str(),
        not_modified: false,
        results_filtered_by_acls: hidden,
    }
}

/// Serves a read as the HTTP reads are served: where its consistency says (the leader's
/// lease, a quorum round, or any server), then, for a blocking query, waiting until its
/// index passes `MinQueryIndex` or its wait (plus up to 1/16 jitter) runs out.
pub async fn read(
    server: &Server,
    call: &TypedCall,
    options: &QueryOptions<'_>,
    query: impl Read,
) -> Answer {
    let ctx = server.context();
    let shard = server.shard();
    let wait = blocking_wait(server, options);
    let plan_options = plan_options(options, wait);
    match ctx.read_plan(&plan_options) {
        ReadPlan::Forward => return Box::pin(to_leader(server, call, wait)).await,
        ReadPlan::Barrier => {
            let result = Box::pin(shard.read_barrier()).await;
            if let Some(error) = ApiError::from_proposal(&result) {
                return Err(error_text(&error));
            }
        }
        ReadPlan::Local => {}
    }
    crate::telemetry::incr(crate::consul::metrics::Counter::RpcQuery);
    let deadline_ms = wait.map(|wait| {
        let wait_ms = wait.as_millis() as u64;
        let jitter_ms = wait_ms / BLOCKING_JITTER_FRACTION as u64;
        let jitter_ms = if jitter_ms > 0 {
            rand::random_range(0..jitter_ms)
        } else {
            0
        };
        shard.shared().now_ms() + wait_ms + jitter_ms
    });
    loop {
        let version = ctx.current_version();
        let (index, watch_set) = query.evaluate(&version);
        // Consul never answers index 0: a client blocking on it would spin.
        let index = index.max(1);
        let timed_out = deadline_ms.is_none_or(|d| shard.shared().now_ms() >= d);
        if index > options.min_query_index || timed_out {
            let meta = rpc_meta_of(&ctx.query_meta(index, plan_options.consistency), false);
            return query.reply(&version, &meta);
        }
        drop(version);
        let deadline_ms = deadline_ms.expect("a blocking query has a deadline");
        shard.watch(&watch_set, deadline_ms).await;
        if ctx.read_plan(&plan_options) == ReadPlan::Forward {
            // Leadership moved while the call waited here.
            return Err(ProposalResult::NotLeader.to_string());
        }
    }
}
