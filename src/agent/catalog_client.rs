//! The agent's path to the catalog: apply a catalog command, read one node's catalog state.
//!
//! Everything the agent does to the catalog (anti-entropy, the leader's member reconcile,
//! alias checks) goes through [`CatalogClient`], so the place where a client agent forwards
//! to a server is this one type. On a server, writes go through its shard into Raft on the
//! leader and are forwarded to the leader from a follower (as
//! `PUT /v1/internal/praetor/catalog-apply` over server RPC); reads come from its own store
//! version. A client agent has no store: it sends the same write to the server its router
//! chose (which forwards it on to the leader), and reads a node's state from that server
//! with `GET /v1/internal/praetor/node-state/<node>`, whose answer is the rows encoded as
//! MessagePack (see [`encode_node_state`]).

use crate::proto::rpc::kind;
use crate::replica::ProposalResult;
use crate::shard::Shard;
use crate::store::catalog::{CatalogOp, HealthCheck, Node, ServiceInstance};
use crate::store::{Command, CommandResult, StoreVersion};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// The internal endpoint a follower forwards the agent's catalog commands to.
pub const APPLY_PATH: &str = "/v1/internal/praetor/catalog-apply";
/// The internal endpoint a client agent reads one node's catalog state from (the node name
/// follows, percent-encoded).
pub const NODE_STATE_PATH: &str = "/v1/internal/praetor/node-state/";
/// How long a forwarded catalog command may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a client agent waits for a server's answer to a node-state read.
const NODE_STATE_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// First byte of an encoded node state, so that a format change is detected, not misread.
const NODE_STATE_FORMAT_VERSION: u8 = 1;

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
                    return shard.propose(payload).await.into_command_result();
                }
                match leader_address(shard) {
                    Some(leader) => forward_apply(shard, leader, &payload).await,
                    None => ProposalResult::NotLeader.into_command_result(),
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
    /// Only meaningful on a server (the leader's member reconcile uses it); a client agent's
    /// local store stays empty, so its reads go through [`CatalogClient::node_state`].
    pub fn version(&self) -> Option<StoreVersion> {
        match &self.backend {
            Backend::Local(shard) => {
                shard.catch_up();
                Some(shard.current_version())
            }
        }
    }

    /// The catalog's view of one node: this server's store version, or on a client agent
    /// the answer of the server it forwards to.
    pub async fn node_state(&self, node: &str) -> Result<NodeState, String> {
        let version = match &self.backend {
            Backend::Local(shard) if shard.is_client() => {
                let server = leader_address(shard).ok_or("No known Consul servers")?;
                return read_remote_node_state(shard, server, node).await;
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

/// Asks a server for one node's catalog state over the forwarding RPC.
async fn read_remote_node_state(
    shard: &Shard,
    server: SocketAddr,
    node: &str,
) -> Result<NodeState, String> {
    let request = format!(
        "GET {NODE_STATE_PATH}{} HTTP/1.1\r\nHost: praetor\r\n\r\n",
        percent_encode_segment(node)
    );
    let frame = shard
        .forward
        .call(
            server,
            kind::FORWARD_HTTP,
            request.as_bytes(),
            NODE_STATE_READ_TIMEOUT,
        )
        .await
        .map_err(|e| format!("rpc error: {e}"))?;
    if frame.kind != kind::FORWARD_HTTP_RESPONSE {
        return Err(String::from_utf8_lossy(&frame.payload).into_owned());
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(&frame.payload) {
        Ok(httparse::Status::Complete(head_len)) => head_len,
        _ => return Err("malformed answer from the server".to_string()),
    };
    let body = &frame.payload[head_len..];
    if response.code != Some(200) {
        return Err(String::from_utf8_lossy(body).into_owned());
    }
    decode_node_state(body)
}

/// Percent-encodes a node name for use as one path segment.
fn percent_encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// One node's rows as a server sends them to a client agent: a format byte, then
/// MessagePack of `(node, services, checks)`.
pub fn encode_node_state(version: &StoreVersion, node: &str) -> Vec<u8> {
    let mut out = vec![NODE_STATE_FORMAT_VERSION];
    let rows: (Option<&Node>, Vec<&ServiceInstance>, Vec<&HealthCheck>) =
        match version.catalog.node(node) {
            None => (None, Vec::new(), Vec::new()),
            Some(entry) => (
                Some(&**entry.node()),
                entry.services.values().map(|s| &**s).collect(),
                entry.checks.values().map(|c| &**c).collect(),
            ),
        };
    rmp_serde::encode::write(&mut out, &rows).expect("encoding into a Vec cannot fail");
    out
}

/// The inverse of [`encode_node_state`]; a malformed answer is an error, never a panic.
pub fn decode_node_state(bytes: &[u8]) -> Result<NodeState, String> {
    let rest = match bytes.split_first() {
        Some((&NODE_STATE_FORMAT_VERSION, rest)) => rest,
        Some((other, _)) => return Err(format!("unsupported node state format {other}")),
        None => return Err("empty node state".to_string()),
    };
    let (node, services, checks): (Option<Node>, Vec<ServiceInstance>, Vec<HealthCheck>) =
        rmp_serde::from_slice(rest).map_err(|e| format!("corrupt node state: {e}"))?;
    Ok(NodeState {
        node: node.map(Arc::new),
        services: services.into_iter().map(Arc::new).collect(),
        checks: checks.into_iter().map(Arc::new).collect(),
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
            node: Some(entry.node().clone()),
            services: entry.services.values().cloned().collect(),
            checks: entry.checks.values().cloned().collect(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::catalog::{CheckRegistration, Registration, ServiceRegistration};
    use crate::store::Tables;

    #[test]
    fn node_state_round_trips_and_bad_bytes_are_errors() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let registration = Registration {
            node: "Client-1".into(),
            address: "10.0.0.9".into(),
            datacenter: "dc1".into(),
            service: Some(ServiceRegistration {
                id: "web-1".into(),
                name: "web".into(),
                tags: vec!["v1".into()],
                port: 8080,
                ..Default::default()
            }),
            checks: vec![CheckRegistration {
                check_id: "web-ttl".into(),
                name: "web ttl".into(),
                status: "passing".into(),
                service_id: "web-1".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        tables.apply(
            1,
            &Command::Catalog(CatalogOp::Register(Box::new(registration))),
            &mut changes,
        );
        let version: StoreVersion = Arc::new(tables);
        let expected = node_state_in(&version, "client-1");
        let decoded = decode_node_state(&encode_node_state(&version, "client-1")).unwrap();
        assert_eq!(decoded.node, expected.node);
        assert_eq!(decoded.services, expected.services);
        assert_eq!(decoded.checks, expected.checks);
        assert_eq!(decoded.services.len(), 1);
        assert_eq!(decoded.checks.len(), 1);

        let missing = decode_node_state(&encode_node_state(&version, "nobody")).unwrap();
        assert!(missing.node.is_none() && missing.services.is_empty());

        assert!(decode_node_state(b"").is_err());
        assert!(decode_node_state(&[NODE_STATE_FORMAT_VERSION + 1, 0x90]).is_err());
        assert!(decode_node_state(&[NODE_STATE_FORMAT_VERSION, 0xc1, 0xff]).is_err());
        assert_eq!(percent_encode_segment("a b/ç"), "a%20b%2F%C3%A7");
    }
}
