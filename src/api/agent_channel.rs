//! The channel between the shards' agent endpoints and the agent on shard 0: the requests
//! a shard parses ([`AgentRequest`]), the call in flight with its reply sender
//! ([`AgentCall`]) and the finished answer ([`AgentReply`]). The types live here, in the
//! HTTP layer's vocabulary and below the agent that serves them (`agent::api`), so neither
//! the handlers nor the context import the agent, and the agent imports only this file of
//! the HTTP layer's.
//!
//! Invariant: the channel is bounded ([`AGENT_CHANNEL_CAPACITY`]); a full channel makes a
//! request wait, never grow a queue.

use crate::store::catalog::Status;
use std::time::Duration;

/// A request for the agent, parsed by the receiving shard.
#[derive(Debug)]
pub enum AgentRequest {
    Services {
        filter: String,
        /// Services the token may not read are left out.
        rows: super::authz::RowFilter,
    },
    Service {
        id: String,
        hash: Option<String>,
        wait: Duration,
    },
    Checks {
        filter: String,
        /// Checks the token may not read (their service, or this node) are left out.
        rows: super::authz::RowFilter,
    },
    RegisterService {
        body: Vec<u8>,
        replace_existing_checks: bool,
        /// The request's ACL token: the service is synced with it unless the body names
        /// its own `Token`.
        token: String,
    },
    DeregisterService {
        id: String,
    },
    RegisterCheck {
        body: Vec<u8>,
        /// The request's ACL token, as for services.
        token: String,
    },
    DeregisterCheck {
        id: String,
    },
    UpdateTtl {
        id: String,
        status: Status,
        output: String,
    },
    ServiceMaintenance {
        id: String,
        enable: bool,
        reason: String,
    },
    NodeMaintenance {
        enable: bool,
        reason: String,
    },
    HealthByName {
        name: String,
        text: bool,
    },
    HealthById {
        id: String,
        text: bool,
    },
    Reload,
    Metrics {
        prometheus: bool,
    },
    /// `/v1/agent/metrics/stream`: send each interval's summary on `chunks`.
    MetricsStream {
        chunks: flume::Sender<Vec<u8>>,
    },
    /// `/v1/agent/connect/ca/leaf/<service>`: the service's leaf certificate, once its
    /// index passes `min_index` or `wait` runs out.
    ConnectLeaf {
        service: String,
        /// DNS names the leaf carries beyond Consul's own (an ingress gateway's hosts);
        /// none from the HTTP endpoint.
        dns_sans: Vec<String>,
        min_index: u64,
        wait: Duration,
        /// The caller's token, sent along when a client agent asks a server to sign.
        token: Option<String>,
    },
    /// A read of another datacenter's catalog for the xDS server (mesh gateways and
    /// sidecars reaching it): one of Consul's typed calls (`method`, with `body` naming
    /// `datacenter` and carrying the token) answered by a server of `datacenter`; the
    /// answer's body is the reply's msgpack.
    DatacenterCall {
        datacenter: String,
        method: &'static str,
        body: Vec<u8>,
        timeout: Duration,
    },
    /// The datacenters this agent's servers know (`Catalog.ListDatacenters`), for the
    /// xDS server, as a JSON list.
    Datacenters,
    /// Whether this agent is a server that leads its cluster now, for the peer stream
    /// (only the leader dials peers and serves their streams): `true` or `false`.
    Leadership,
    /// An encoded store command proposed through this server's Raft log, for the peer
    /// stream's writes (peering state, stream secrets): 200 once applied, 500 with the
    /// store's or Raft's reason otherwise.
    Propose {
        command: Vec<u8>,
    },
}

/// A request in flight to the agent.
pub struct AgentCall {
    pub request: AgentRequest,
    pub pretty: bool,
    pub reply: flume::Sender<AgentReply>,
}

/// A finished answer.
#[derive(Debug)]
pub struct AgentReply {
    pub status: u16,
    pub content_type: Option<&'static str>,
    pub headers: Vec<u8>,
    pub body: Vec<u8>,
}

impl AgentReply {
    pub fn empty() -> AgentReply {
        AgentReply {
            status: 200,
            content_type: None,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }
    pub fn text(status: u16, message: impl Into<String>) -> AgentReply {
        AgentReply {
            status,
            content_type: Some("text/plain; charset=utf-8"),
            headers: Vec::new(),
            body: message.into().into_bytes(),
        }
    }
    pub fn json(status: u16, body: Vec<u8>) -> AgentReply {
        AgentReply {
            status,
            content_type: Some("application/json"),
            headers: Vec::new(),
            body,
        }
    }
}

/// Capacity of the channel from the shards to the agent.
pub const AGENT_CHANNEL_CAPACITY: usize = 4096;

/// How agent endpoints on any shard reach the agent on shard 0, which serves the calls
/// (`crate::agent::api::serve_calls`).
#[derive(Clone)]
pub struct AgentChannel {
    pub tx: flume::Sender<AgentCall>,
}

/// A fresh agent channel and the receiving end the agent serves.
pub fn agent_channel() -> (AgentChannel, flume::Receiver<AgentCall>) {
    let (tx, rx) = flume::bounded(AGENT_CHANNEL_CAPACITY);
    (AgentChannel { tx }, rx)
}
