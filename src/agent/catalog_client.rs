//! The agent's path to the catalog: apply a catalog command, read one node's catalog state.
//!
//! Everything the agent does to the catalog (anti-entropy, the leader's member reconcile,
//! alias checks) goes through [`CatalogClient`], so the place where a client agent forwards
//! to a server is this one type. On a server, writes go through its shard into Raft on the
//! leader; a follower sends them to the leader as the typed calls below, on its own
//! connection to the leader's server port, as Consul's followers forward RPCs; reads come
//! from its own store version. A client agent has no store: it makes Consul's typed calls
//! on the server its server manager picks (which hands writes on to the leader), as
//! Consul's agent does —
//! each registration a `Catalog.Register`, each deregistration a `Catalog.Deregister` (the
//! operations of a batch at once, each on its own yamux stream), and a node's state read
//! with `Catalog.NodeServices` and `Health.NodeChecks`. Calls go through
//! [`servers::call_typed`], so a dead server is rotated away and the call made again on the
//! next one at once: they are registrations and deregistrations, which a server may
//! receive twice without harm.
//!
//! With ACLs on, what goes to another server carries the agent's token (`acl.tokens.agent`,
//! else `acl.tokens.default`), as Consul's agent sends its anti-entropy with it; the server
//! checks each operation as it checks the public catalog endpoints. A server's own writes
//! proposed through its shard on the leader are not checked.

use crate::cluster::servers::{self, Retry, ServerManager};
use crate::consul::node_state::{node_state_in, NodeState};
use crate::consul::rpc::catalog::{encode_register, DeregisterRequest, NodeSpecificRequest};
use crate::consul::rpc::rows::{read_indexed_health_checks, read_indexed_node_services};
use crate::consul::rpc::QueryOptions;
use crate::replica::ProposalResult;
use crate::shard::rpc_client::CallError;
use crate::shard::Shard;
use crate::store::catalog::rows::RowArc;
use crate::store::catalog::CatalogOp;
use crate::store::{CatalogResult, Command, FamilyResult, StoreVersion};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// How long a forwarded catalog command may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a client agent waits for a server's answer to a node-state read.
const NODE_STATE_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Where catalog requests go.
#[derive(Clone)]
pub enum Backend {
    /// This agent is a server: propose through the shard, read its version.
    Local(Rc<Shard>),
    /// This agent is a client: everything goes to a server the manager picks, over the
    /// shard's RPC connections.
    Remote {
        shard: Rc<Shard>,
        servers: Arc<ServerManager>,
    },
}

#[derive(Clone)]
pub struct CatalogClient {
    backend: Backend,
}

impl CatalogClient {
    /// The client for this agent: local on a server, through `servers` on a client agent.
    pub fn new(shard: Rc<Shard>, servers: Arc<ServerManager>) -> CatalogClient {
        let backend = if shard.is_client() {
            Backend::Remote { shard, servers }
        } else {
            Backend::Local(shard)
        };
        CatalogClient { backend }
    }

    /// Replicates one catalog command and returns the store's answer.
    pub async fn apply(&self, op: CatalogOp) -> CatalogResult {
        self.apply_as(op, None).await
    }

    /// [`CatalogClient::apply`] sent with `token` (a service's or check's own) instead of
    /// the agent's token when it goes to another server.
    pub async fn apply_as(&self, op: CatalogOp, token: Option<&str>) -> CatalogResult {
        self.apply_command_as(&Command::Catalog(op), token).await
    }

    /// [`CatalogClient::apply_as`] of a command the caller keeps (anti-entropy retries a
    /// refused batch operation by operation).
    pub async fn apply_command_as(&self, command: &Command, token: Option<&str>) -> CatalogResult {
        match &self.backend {
            Backend::Local(shard) => {
                if shard.is_leader() {
                    let result = shard.propose(command.encode()).await.into_command_result();
                    return CatalogResult::of(result).unwrap_or_else(CatalogResult::Refused);
                }
                let Command::Catalog(op) = command else {
                    return CatalogResult::Refused("only catalog commands go to the leader".into());
                };
                match leader_address(shard) {
                    Some(leader) => {
                        let token = request_token(shard, token).unwrap_or_default();
                        apply_typed(shard, &Destination::Leader(leader), op, &token).await
                    }
                    None => CatalogResult::Refused(ProposalResult::NotLeader.to_string()),
                }
            }
            Backend::Remote { shard, servers } => {
                let Command::Catalog(op) = command else {
                    return CatalogResult::Refused("only catalog commands go to a server".into());
                };
                let token = request_token(shard, token).unwrap_or_default();
                let servers = Destination::Servers(servers.clone());
                apply_typed(shard, &servers, op, &token).await
            }
        }
    }

    /// Whether writes can currently succeed: a leader is known, or on a client agent, a
    /// server to send them to.
    pub fn can_write(&self) -> bool {
        match &self.backend {
            Backend::Local(shard) => shard.is_leader() || leader_address(shard).is_some(),
            Backend::Remote { servers, .. } => servers.pick().is_some(),
        }
    }

    /// The newest version this agent can read, for the agent's own reads (alias checks,
    /// sync comparisons). Stale reads are fine: anti-entropy converges on the next round.
    /// Only meaningful on a server (the leader's member reconcile uses it); a client agent's
    /// local store stays empty, so its reads go through [`CatalogClient::node_state`].
    pub fn version(&self) -> Option<StoreVersion> {
        match &self.backend {
            Backend::Local(shard) => {
                shard.catch_up();
                Some(shard.current_version())
            }
            Backend::Remote { .. } => None,
        }
    }

    /// The catalog's view of one node: this server's store version, or on a client agent
    /// the answer of the server it forwards to.
    pub async fn node_state(&self, node: &str) -> Result<NodeState, String> {
        let version = match &self.backend {
            Backend::Remote { shard, servers } => {
                return read_typed_node_state(shard, servers, node).await;
            }
            Backend::Local(shard) => {
                // Anti-entropy compares against what the leader has applied; on a server
                // that is this process once it leads.
                shard.catch_up();
                shard.current_version()
            }
        };
        Ok(node_state_in(&version, node))
    }
}

impl CatalogClient {
    /// Makes one of Consul's typed calls on a server the manager picks (a client agent's way
    /// to the servers' state), with `retry` as failover allows. `None` on a server, which
    /// reads and signs from its own store instead.
    pub async fn server_call(
        &self,
        method: &str,
        body: &[u8],
        timeout: Duration,
        retry: Retry,
    ) -> Option<Result<bytes::Bytes, CallError>> {
        let Backend::Remote { shard, servers } = &self.backend else {
            return None;
        };
        Some(servers::call_typed(servers, &shard.rpc, method, body, timeout, retry).await)
    }
}

/// The typed calls of one catalog operation: a registration is a `Catalog.Register`, a
/// deregistration a `Catalog.Deregister`; a batch is its operations.
fn typed_calls(op: &CatalogOp, token: &str, calls: &mut Vec<(&'static str, Vec<u8>)>) {
    match op {
        CatalogOp::Register(registration) => {
            calls.push(("Catalog.Register", encode_register(registration, token)))
        }
        CatalogOp::Deregister {
            node,
            service_id,
            check_id,
        } => calls.push((
            "Catalog.Deregister",
            DeregisterRequest {
                node,
                service_id,
                check_id,
                token,
                ..DeregisterRequest::default()
            }
            .encode(),
        )),
        CatalogOp::Batch(ops) => {
            for op in ops {
                typed_calls(op, token, calls);
            }
        }
        // A client agent's coordinates go with `/v1/coordinate/update`, not this client.
        CatalogOp::Coordinates(_) => {}
    }
}

/// A typed catalog write's answer as the store's: `true`, or the refusal's text (a
/// transport failure's with Consul's "rpc error" prefix).
fn written(answer: Result<bytes::Bytes, CallError>) -> CatalogResult {
    match answer {
        Ok(_) => CatalogResult::Written,
        Err(CallError::Remote(reason)) => CatalogResult::Refused(reason),
        Err(CallError::Transport { reason, .. })
            if reason.starts_with("rpc error") || reason == servers::NO_SERVERS =>
        {
            CatalogResult::Refused(reason)
        }
        Err(CallError::Transport { reason, .. }) => {
            CatalogResult::Refused(format!("rpc error: {reason}"))
        }
    }
}

/// Where typed catalog writes go.
#[derive(Clone)]
enum Destination {
    /// A client agent's: the server its manager picks (which hands them to the leader).
    Servers(Arc<ServerManager>),
    /// A follower server's: the leader itself.
    Leader(SocketAddr),
}

/// Sends a catalog operation as its typed calls, the calls of a batch at once (each on its
/// own stream, as independent as the batch's operations are); the first refusal, or `true`.
/// Coordinates have no such call (nothing sends them through this client).
async fn apply_typed(
    shard: &Rc<Shard>,
    to: &Destination,
    op: &CatalogOp,
    token: &str,
) -> CatalogResult {
    let mut calls = Vec::new();
    typed_calls(op, token, &mut calls);
    if let [(method, body)] = calls.as_slice() {
        return written(typed_write(shard, to, method, body).await);
    }
    let pending: Vec<_> = calls
        .into_iter()
        .map(|(method, body)| {
            let (shard, to) = (shard.clone(), to.clone());
            monoio::spawn(async move { typed_write(&shard, &to, method, &body).await })
        })
        .collect();
    let mut result = CatalogResult::Written;
    for call in pending {
        let answer = written(call.await);
        if result == CatalogResult::Written {
            result = answer;
        }
    }
    result
}

/// One typed write: on a server the manager picks, made again on the next server after a
/// transport failure (registrations and deregistrations may arrive twice); or on the leader,
/// once (the next anti-entropy round tries again).
async fn typed_write(
    shard: &Shard,
    to: &Destination,
    method: &str,
    body: &[u8],
) -> Result<bytes::Bytes, CallError> {
    match to {
        Destination::Servers(servers) => {
            servers::call_typed(
                servers,
                &shard.rpc,
                method,
                body,
                FORWARD_TIMEOUT,
                Retry::Always,
            )
            .await
        }
        Destination::Leader(leader) => {
            shard
                .rpc
                .call(*leader, None, method, body, FORWARD_TIMEOUT)
                .await
        }
    }
}

/// Reads one node's catalog state from a server as Consul's anti-entropy does: the node
/// and its services (`Catalog.NodeServices`), then its checks (`Health.NodeChecks`). Stale
/// reads: a difference missed now is found on the next full sync.
async fn read_typed_node_state(
    shard: &Shard,
    servers: &ServerManager,
    node: &str,
) -> Result<NodeState, String> {
    let token = agent_token(shard).unwrap_or_default();
    let request = NodeSpecificRequest {
        node,
        options: QueryOptions {
            token: &token,
            allow_stale: true,
            ..QueryOptions::default()
        },
        ..NodeSpecificRequest::default()
    }
    .encode();
    let read = async |method| {
        servers::call_typed(
            servers,
            &shard.rpc,
            method,
            &request,
            NODE_STATE_READ_TIMEOUT,
            Retry::Always,
        )
        .await
        .map_err(|e| e.to_string())
    };
    let malformed = |e: crate::proto::msgpack::WireError| format!("malformed reply: {e}");
    let services = read("Catalog.NodeServices").await?;
    let (_, found) = read_indexed_node_services(&services).map_err(malformed)?;
    let Some((node_row, services)) = found else {
        return Ok(NodeState::default());
    };
    let checks = read("Health.NodeChecks").await?;
    let (_, checks) = read_indexed_health_checks(&checks).map_err(malformed)?;
    Ok(NodeState {
        node: Some(Arc::new(node_row)),
        services: services.into_iter().map(RowArc::new).collect(),
        checks: checks.into_iter().map(RowArc::new).collect(),
    })
}

/// The leader's RPC address when another server leads.
fn leader_address(shard: &Shard) -> Option<SocketAddr> {
    let status = shard.cluster_status();
    if status.is_leader {
        return None;
    }
    status
        .leader_rpc_address
        .parse::<SocketAddr>()
        .ok()
        .filter(|addr| *addr != shard.shared().rpc_address)
}

/// The token the agent's own requests carry: `acl.tokens.agent`, else `acl.tokens.default`
/// (as set in the config or with `/v1/agent/token/<type>`); none with ACLs off.
fn agent_token(shard: &Shard) -> Option<String> {
    if !shard.config().acl.enabled {
        return None;
    }
    let tokens = shard.shared().acl_tokens.read().ok()?;
    tokens.agent.clone().or_else(|| tokens.default.clone())
}

/// The token a write is sent with: `given` (a registration's own), else the agent's; none
/// with ACLs off.
fn request_token(shard: &Shard, given: Option<&str>) -> Option<String> {
    match given.filter(|t| !t.is_empty()) {
        Some(token) if shard.config().acl.enabled => Some(token.to_string()),
        _ => agent_token(shard),
    }
}
