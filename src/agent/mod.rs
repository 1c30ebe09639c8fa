//! The agent side of the catalog: this node's own registration, and (on the leader) the
//! reconciliation of members into the catalog.
//!
//! The agent runs as monoio tasks on shard 0, next to that shard's HTTP connections. It
//! owns no locks: its state lives in that thread, and everything it writes goes through
//! [`catalog_client::CatalogClient`], the single path a client agent will later redirect to
//! a server.

pub mod catalog_client;
pub mod reconcile;

use crate::config::AgentConfig;
use crate::shard::runtime::Identity;
use crate::shard::Shard;
use crate::store::catalog::{CatalogOp, Registration};
use crate::store::CommandResult;
use catalog_client::{CatalogClient, NodeState};
use std::net::IpAddr;
use std::rc::Rc;
use std::time::Duration;

/// How often the agent checks its node registration and, on the leader, reconciles members.
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(1);

/// The node metadata every agent publishes (Consul's `consul-network-segment` and
/// `consul-version`), plus `node_meta` from the config.
pub fn node_meta(config: &AgentConfig) -> Vec<(String, String)> {
    let mut meta = vec![
        ("consul-network-segment".to_string(), String::new()),
        (
            "consul-version".to_string(),
            crate::CONSUL_API_VERSION.to_string(),
        ),
    ];
    if let Some(serde_json::Value::Object(extra)) = config.raw.get("node_meta") {
        for (k, v) in extra {
            if let Some(v) = v.as_str() {
                meta.retain(|(existing, _)| existing != k);
                meta.push((k.clone(), v.to_string()));
            }
        }
    }
    meta
}

/// Consul's default tagged addresses for an agent's node.
pub fn node_tagged_addresses(address: IpAddr) -> Vec<(String, String)> {
    let text = address.to_string();
    let family = if address.is_ipv4() { "ipv4" } else { "ipv6" };
    vec![
        ("lan".to_string(), text.clone()),
        (format!("lan_{family}"), text.clone()),
        ("wan".to_string(), text.clone()),
        (format!("wan_{family}"), text),
    ]
}

/// This agent's node registration (no services or checks), as anti-entropy syncs it.
pub fn self_node_registration(config: &AgentConfig, identity: &Identity) -> Registration {
    let address = config.advertise();
    Registration {
        id: identity.node_id.clone(),
        node: config.node_name.clone(),
        address: address.to_string(),
        datacenter: config.datacenter.clone(),
        tagged_addresses: node_tagged_addresses(address),
        node_meta: node_meta(config),
        ..Default::default()
    }
}

/// Whether the catalog's node row already matches `wanted` (node fields only).
pub fn node_in_sync(current: &NodeState, wanted: &Registration) -> bool {
    let Some(node) = &current.node else {
        return false;
    };
    let pairs = |list: &[(String, String)]| {
        let mut v: Vec<(String, String)> = list.to_vec();
        v.sort();
        v.dedup_by(|a, b| a.0 == b.0);
        v
    };
    let have_tagged: Vec<(String, String)> = node
        .tagged_addresses
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let have_meta: Vec<(String, String)> = node
        .meta
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    *node.id == *wanted.id
        && *node.name == *wanted.node
        && *node.address == *wanted.address
        && *node.datacenter == *wanted.datacenter
        && have_tagged == pairs(&wanted.tagged_addresses)
        && have_meta == pairs(&wanted.node_meta)
}

/// The agent's long-running task on shard 0.
pub async fn run(shard: Rc<Shard>) {
    let client = CatalogClient::local(shard.clone());
    let config = shard.shared().config.clone();
    let identity = shard.identity().clone();
    loop {
        if shard.shutting_down() {
            return;
        }
        if client.can_write() {
            sync_node(&client, &config, &identity).await;
            if config.server {
                reconcile_self(&client, &config, &identity).await;
            }
        }
        monoio::time::sleep(RECONCILE_INTERVAL).await;
    }
}

async fn apply_logged(client: &CatalogClient, op: CatalogOp, what: &str) {
    match client.apply(op).await {
        CommandResult::Bool(_) | CommandResult::Txn(_) => log::debug!("agent: {what}"),
        CommandResult::Error(reason) => log::warn!("agent: {what} failed: {reason}"),
    }
}

/// Anti-entropy for the node row itself.
async fn sync_node(client: &CatalogClient, config: &AgentConfig, identity: &Identity) {
    let wanted = self_node_registration(config, identity);
    let Ok(current) = client.node_state(&wanted.node).await else {
        return;
    };
    if !node_in_sync(&current, &wanted) {
        apply_logged(
            client,
            CatalogOp::Register(Box::new(wanted)),
            "synced node info",
        )
        .await;
    }
}

/// The leader's reconcile of itself as a member (gossip will supply the other members).
async fn reconcile_self(client: &CatalogClient, config: &AgentConfig, identity: &Identity) {
    let member = reconcile::Member {
        name: config.node_name.clone(),
        id: identity.node_id.clone(),
        address: config.advertise().to_string(),
        datacenter: config.datacenter.clone(),
        server_port: Some(config.ports.server.max(0) as u16),
    };
    let Ok(current) = client.node_state(&member.name).await else {
        return;
    };
    if let Some(registration) = reconcile::member_registration(&member, &current) {
        apply_logged(
            client,
            CatalogOp::Register(Box::new(registration)),
            "member reconciled into the catalog",
        )
        .await;
    }
}
