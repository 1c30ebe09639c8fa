//! One node's catalog rows — what the agent compares its local state against — and their
//! encoding for praetor's internal node-state endpoint, which a client agent reads from its
//! server. Also the paths of the two internal endpoints the agent's catalog client uses.

use crate::store::catalog::{HealthCheck, Node, RowArc, ServiceInstance};
use crate::store::StoreVersion;
use std::sync::Arc;

/// The internal endpoint a follower forwards the agent's catalog commands to.
pub const APPLY_PATH: &str = "/v1/internal/praetor/catalog-apply";
/// The internal endpoint a client agent reads one node's catalog state from (the node name
/// follows, percent-encoded).
pub const NODE_STATE_PATH: &str = "/v1/internal/praetor/node-state/";
/// First byte of an encoded node state, so that a format change is detected, not misread.
const NODE_STATE_FORMAT_VERSION: u8 = 1;

/// What the catalog holds for one node: the row, its services and its checks.
#[derive(Clone, Debug, Default)]
pub struct NodeState {
    pub node: Option<Arc<Node>>,
    pub services: Vec<RowArc<ServiceInstance>>,
    pub checks: Vec<RowArc<HealthCheck>>,
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
        services: services.into_iter().map(RowArc::new).collect(),
        checks: checks.into_iter().map(RowArc::new).collect(),
    })
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
    use crate::store::catalog::{CatalogOp, CheckRegistration, Registration, ServiceRegistration};
    use crate::store::{Command, Tables};

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
    }
}
