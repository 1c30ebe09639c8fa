//! The agent's path to the catalog: apply a catalog command, read one node's catalog state.
//!
//! Everything the agent does to the catalog (anti-entropy, the leader's member reconcile,
//! alias checks) goes through [`CatalogClient`], so the place where a client agent forwards
//! to a server is this one type. Today the only backend is [`Backend::Local`]: this process
//! is a server, writes go through its shard into Raft and reads come from its store version.
//! Client mode adds a backend that sends the same two requests over server RPC.

use crate::api::Consistency;
use crate::shard::Shard;
use crate::store::catalog::{CatalogOp, HealthCheck, Node, ServiceInstance};
use crate::store::{Command, CommandResult, StoreVersion};
use std::rc::Rc;
use std::sync::Arc;

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
            Backend::Local(shard) => shard.propose(Command::Catalog(op).encode()).await,
        }
    }

    /// Whether writes can currently succeed (a leader is known and reachable).
    pub fn can_write(&self) -> bool {
        match &self.backend {
            Backend::Local(shard) => shard.is_leader(),
        }
    }

    /// The newest version this agent can read, for the agent's own reads (alias checks,
    /// sync comparisons). Stale reads are fine: anti-entropy converges on the next round.
    pub fn version(&self) -> Option<StoreVersion> {
        match &self.backend {
            Backend::Local(shard) => shard.read_version(Consistency::Stale).ok(),
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
