//! Where the xDS server's data comes from: the seam between the server's own runtime and
//! the rest of the agent.
//!
//! - [`StoreFeed`]: the newest store version, published by the shard that installs it (a
//!   server agent's shard 0 registers a version observer through `node`). Publishing is a
//!   non-blocking swap of an `Arc` and a wake-up, callable from any thread; readers always
//!   see the newest version, intermediate ones coalesce.
//! - [`AgentSource`]: the agent's answers about its own services and leaf certificates,
//!   asked over the agent channel exactly as the agent's HTTP endpoints ask, so the server
//!   sees what `/v1/agent/service/<id>` and `/v1/agent/connect/ca/leaf/<s>` show.
//!
//! A client agent feeds [`StoreFeed`] from its servers instead ([`super::mirror`]: the
//! catalog, config entries and roots a proxy reads); nothing above this module knows which.

use super::registration::{decode_leaf, decode_registration, LeafCert, ProxyRegistration};
use crate::api::agent_channel::{AgentCall, AgentChannel, AgentReply, AgentRequest};
use crate::store::{Change, StoreVersion, Table};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How much longer than its wait a blocking agent call may take before it is abandoned.
const AGENT_REPLY_SLACK: Duration = Duration::from_secs(30);
/// How much longer than its wait a read of another datacenter may take: the WAN hop and
/// failover among that datacenter's servers.
const DATACENTER_READ_SLACK: Duration = Duration::from_secs(15);

/// The store versions the server reads.
#[derive(Clone)]
pub struct StoreFeed {
    tx: Arc<watch::Sender<StoreVersion>>,
}

impl StoreFeed {
    pub fn new(initial: StoreVersion) -> StoreFeed {
        let (tx, _) = watch::channel(initial);
        StoreFeed { tx: Arc::new(tx) }
    }

    /// Makes `version` the newest (from any thread).
    pub fn publish(&self, version: StoreVersion) {
        debug_assert!(
            version.index >= self.tx.borrow().index,
            "store versions are published in index order"
        );
        self.tx.send_replace(version);
    }

    pub fn subscribe(&self) -> watch::Receiver<StoreVersion> {
        self.tx.subscribe()
    }

    pub fn current(&self) -> StoreVersion {
        self.tx.borrow().clone()
    }
}

/// Whether a change set touches anything a proxy snapshot or an xDS ACL check reads:
/// the catalog (instances, their checks and nodes), config entries (intentions, chains,
/// protocols), the services gateways link, the CA's roots, or ACLs; or what the peer
/// stream reads (peerings and their secrets).
pub fn concerns_proxies(changes: &[Change]) -> bool {
    changes.iter().any(|c| {
        matches!(
            c.table,
            Table::Nodes
                | Table::Services
                | Table::Checks
                | Table::ServiceIndex
                | Table::ConfigEntries
                | Table::GatewayServices
                | Table::Intentions
                | Table::ConnectCa
                | Table::Acl
                | Table::Peerings
                | Table::PeeringTrustBundles
        )
    })
}

/// The agent's answers about its own proxies.
#[derive(Clone)]
pub struct AgentSource {
    channel: AgentChannel,
}

impl AgentSource {
    pub fn new(channel: AgentChannel) -> AgentSource {
        AgentSource { channel }
    }

    async fn call(&self, request: AgentRequest, wait: Duration) -> Result<AgentReply, String> {
        let (tx, rx) = flume::bounded(1);
        self.channel
            .tx
            .send_async(AgentCall {
                request,
                pretty: false,
                reply: tx,
            })
            .await
            .map_err(|_| "the agent has stopped".to_string())?;
        match tokio::time::timeout(wait + AGENT_REPLY_SLACK, rx.recv_async()).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err("the agent dropped the call".to_string()),
            Err(_) => Err("the agent did not answer in time".to_string()),
        }
    }

    /// Whether this agent leads its cluster now (a server's leadership, `false` on a
    /// client agent).
    pub async fn leads(&self) -> Result<bool, String> {
        let reply = self.call(AgentRequest::Leadership, Duration::ZERO).await?;
        Ok(reply.status == 200 && reply.body == b"true")
    }

    /// Proposes `command` through this server's Raft log; `Err` carries the store's or
    /// Raft's reason (not the leader, a refused write).
    pub async fn propose(&self, command: &crate::store::Command) -> Result<(), String> {
        let reply = self
            .call(
                AgentRequest::Propose {
                    command: command.encode(),
                },
                Duration::ZERO,
            )
            .await?;
        match reply.status {
            200 => Ok(()),
            _ => Err(String::from_utf8_lossy(&reply.body).into_owned()),
        }
    }

    /// The registration of service `id`, once its content hash differs from `hash` or
    /// `wait` runs out.
    pub async fn service(
        &self,
        id: &str,
        hash: Option<String>,
        wait: Duration,
    ) -> Result<ProxyRegistration, String> {
        let reply = self
            .call(
                AgentRequest::Service {
                    id: id.to_string(),
                    hash,
                    wait,
                },
                wait,
            )
            .await?;
        match reply.status {
            200 => decode_registration(&reply.body),
            404 => Err(format!(
                "no proxy with ID {id:?} is registered with this agent"
            )),
            status => Err(format!(
                "the agent answered {status}: {}",
                String::from_utf8_lossy(&reply.body)
            )),
        }
    }

    /// The leaf certificate of `service` carrying `dns_sans` too, once its index passes
    /// `min_index`.
    pub async fn leaf(
        &self,
        service: &str,
        dns_sans: &[String],
        min_index: u64,
        wait: Duration,
        token: &str,
    ) -> Result<LeafCert, String> {
        let reply = self
            .call(
                AgentRequest::ConnectLeaf {
                    service: service.to_string(),
                    dns_sans: dns_sans.to_vec(),
                    min_index,
                    wait,
                    token: (!token.is_empty()).then(|| token.to_string()),
                },
                wait,
            )
            .await?;
        match reply.status {
            200 => decode_leaf(&reply.body),
            status => Err(format!(
                "the agent answered {status}: {}",
                String::from_utf8_lossy(&reply.body)
            )),
        }
    }

    /// One of Consul's typed calls (`method`, `body` naming another datacenter) answered
    /// by a server of `datacenter`: the reply's msgpack body. A blocking call
    /// (`MinQueryIndex`) waits there up to `wait`.
    pub async fn datacenter_call(
        &self,
        datacenter: &str,
        method: &'static str,
        body: Vec<u8>,
        wait: Duration,
    ) -> Result<Vec<u8>, String> {
        let reply = self
            .call(
                AgentRequest::DatacenterCall {
                    datacenter: datacenter.to_string(),
                    method,
                    body,
                    timeout: wait + DATACENTER_READ_SLACK,
                },
                wait + DATACENTER_READ_SLACK,
            )
            .await?;
        if reply.status != 200 {
            return Err(format!(
                "{datacenter} answered {}: {}",
                reply.status,
                String::from_utf8_lossy(&reply.body).trim()
            ));
        }
        Ok(reply.body)
    }

    /// The datacenters the servers know, this one included.
    pub async fn datacenters(&self) -> Result<Vec<String>, String> {
        let reply = self.call(AgentRequest::Datacenters, Duration::ZERO).await?;
        if reply.status != 200 {
            return Err(format!(
                "the datacenter list: {}",
                String::from_utf8_lossy(&reply.body).trim()
            ));
        }
        serde_json::from_slice(&reply.body).map_err(|e| format!("the datacenter list: {e}"))
    }
}
