//! One node's catalog rows — what the agent compares its local state against (a client
//! agent reads them from its server with `Catalog.NodeServices` and `Health.NodeChecks`).

use crate::store::catalog::{HealthCheck, Node, RowArc, ServiceInstance};
use crate::store::StoreVersion;
use std::sync::Arc;

/// What the catalog holds for one node: the row, its services and its checks.
#[derive(Clone, Debug, Default)]
pub struct NodeState {
    pub node: Option<Arc<Node>>,
    pub services: Vec<RowArc<ServiceInstance>>,
    pub checks: Vec<RowArc<HealthCheck>>,
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
