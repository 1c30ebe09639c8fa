//! The agent's path to the catalog: apply a catalog command, read one node's catalog state.
//!
//! Everything the agent does to the catalog (anti-entropy, the leader's member reconcile,
//! alias checks) goes through [`CatalogClient`], so the place where a client agent forwards
//! to a server is this one type. Today the only backend is [`Backend::Local`]: this process
//! is a server; on the leader writes go through its shard into Raft, on a follower they are
//! forwarded to the leader (as `PUT /v1/internal/praetor/catalog-apply` over server RPC), and
//! reads come from its store version. Client mode adds a backend that sends the same two
//! requests to a server from its pool.

use crate::proto::rpc::kind;
use crate::shard::Shard;
use crate::store::catalog::{CatalogOp, HealthCheck, Node, ServiceInstance};
use crate::store::{Command, CommandResult, StoreVersion};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// The internal endpoint a follower forwards the agent's catalog commands to.
pub const APPLY_PATH: &str = "/v1/internal/praetor/catalog-apply";
/// How long a forwarded catalog command may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(15);

/// What the catalog holds for one node: the row, its services and its checks.
#[derive(Clone, Debug, Default)]
pub struct NodeState {
    pub node: Option<Arc<Node>>,
    pub services: Vec<Arc<ServiceInstance>>,
    pub checks: Vec<Arc<HealthCheck>>,
}

/// Where catalog requests go.
#[derive(Clone)]
pub enum Backend {
    /// This agent is a server: propose through the shard, read its version.
    Local(Rc<Shard>),
}

#[derive(Clone)]
pub struct CatalogClient {
    backend: Backend,
}

impl CatalogClient {
    pub fn local(shard: Rc<Shard>) -> CatalogClient {
        CatalogClient {
            backend: Backend::Local(shard),
        }
    }

    /// Replicates one catalog command and returns the store's answer.
    pub async fn apply(&self, op: CatalogOp) -> CommandResult {
        match &self.backend {
            Backend::Local(shard) => {
                let payload = Command::Catalog(op).encode();
                if shard.is_leader() {
                    return shard.propose(payload).await;
                }
                match leader_address(shard) {
                    Some(leader) => forward_apply(shard, leader, &payload).await,
                    None => CommandResult::Error("No cluster leader".to_string()),
                }
            }
        }
    }

    /// Whether writes can currently succeed (a leader is known).
    pub fn can_write(&self) -> bool {
        match &self.backend {
            Backend::Local(shard) => shard.is_leader() || leader_address(shard).is_some(),
        }
    }

    /// The newest version this agent can read, for the agent's own reads (alias checks,
    /// sync comparisons). Stale reads are fine: anti-entropy converges on the next round.
    pub fn version(&self) -> Option<StoreVersion> {
        match &self.backend {
            Backend::Local(shard) => {
                shard.catch_up();
                Some(shard.current_version())
            }
        }
    }

    /// The catalog's view of one node.
    pub async fn node_state(&self, node: &str) -> Result<NodeState, String> {
        let version = match &self.backend {
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

/// Sends an encoded command to the leader's internal apply endpoint.
async fn forward_apply(shard: &Shard, leader: SocketAddr, payload: &[u8]) -> CommandResult {
    let mut request = format!(
        "PUT {APPLY_PATH} HTTP/1.1\r\nHost: praetor\r\nContent-Length: {}\r\n\r\n",
        payload.len()
    )
    .into_bytes();
    request.extend_from_slice(payload);
    match shard
        .forward
        .call(leader, kind::FORWARD_HTTP, &request, FORWARD_TIMEOUT)
        .await
    {
        Ok(frame) if frame.kind == kind::FORWARD_HTTP_RESPONSE => {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(&frame.payload) {
                Ok(httparse::Status::Complete(head_len)) => {
                    let body = String::from_utf8_lossy(&frame.payload[head_len..]).into_owned();
                    if response.code == Some(200) {
                        CommandResult::Bool(true)
                    } else {
                        CommandResult::Error(body)
                    }
                }
                _ => CommandResult::Error("malformed answer from the leader".to_string()),
            }
        }
        Ok(frame) => CommandResult::Error(String::from_utf8_lossy(&frame.payload).into_owned()),
        Err(e) => CommandResult::Error(format!("rpc error: {e}")),
    }
}

/// [`NodeState`] read from one store version.
pub fn node_state_in(version: &StoreVersion, node: &str) -> NodeState {
    match version.catalog.node(node) {
        None => NodeState::default(),
        Some(entry) => NodeState {
            node: Some(entry.node.clone()),
            services: entry.services.values().cloned().collect(),
            checks: entry.checks.values().cloned().collect(),
        },
    }
}
