//! Endpoints (Consul's `endpoints.go`): one `ClusterLoadAssignment` per EDS cluster, named
//! like it. The resolver's own target fills priority 0; each failover target the next
//! priority, so Envoy moves traffic to a failover only while the targets before it lack
//! healthy endpoints. Every endpoint carries its health and weight; a cluster without
//! instances still gets its (empty) assignment, or Envoy would wait for one forever.

use super::socket_address;
use crate::xds::snapshot::{ChainNode, Snapshot, Target};
use envoy_types::pb::envoy::config::core::v3::HealthStatus;
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint::HostIdentifier, ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::google::protobuf::UInt32Value;
use std::collections::BTreeMap;

fn locality(target: &Target, priority: u32) -> LocalityLbEndpoints {
    LocalityLbEndpoints {
        lb_endpoints: lb_endpoints(&target.endpoints),
        priority,
        ..Default::default()
    }
}

/// Envoy's endpoints of `endpoints`, each with its health and weight.
pub fn lb_endpoints(endpoints: &[crate::xds::snapshot::Endpoint]) -> Vec<LbEndpoint> {
    endpoints
        .iter()
        .map(|e| LbEndpoint {
            host_identifier: Some(HostIdentifier::Endpoint(Endpoint {
                address: Some(socket_address(&e.address, e.port)),
                ..Default::default()
            })),
            health_status: if e.healthy {
                HealthStatus::Healthy as i32
            } else {
                HealthStatus::Unhealthy as i32
            },
            load_balancing_weight: Some(UInt32Value {
                value: e.weight.max(1),
            }),
            ..Default::default()
        })
        .collect()
}

/// The load assignment of cluster `name` with `endpoints` at one priority (none when
/// empty: Envoy still needs the assignment, or it waits for one).
pub fn assignment(
    name: &str,
    endpoints: &[crate::xds::snapshot::Endpoint],
) -> ClusterLoadAssignment {
    let lb_endpoints = lb_endpoints(endpoints);
    ClusterLoadAssignment {
        cluster_name: name.to_string(),
        endpoints: if lb_endpoints.is_empty() {
            Vec::new()
        } else {
            vec![LocalityLbEndpoints {
                lb_endpoints,
                ..Default::default()
            }]
        },
        ..Default::default()
    }
}

/// Every load assignment of `snapshot`, by cluster name.
pub fn build(snapshot: &Snapshot) -> BTreeMap<String, ClusterLoadAssignment> {
    let mut out = BTreeMap::new();
    for upstream in &snapshot.upstreams {
        // An `envoy_cluster_json` cluster replaces the upstream's one cluster, and its
        // endpoints take its name, as Consul names them (JSON that does not decode fails
        // the clusters, so the name here does not matter then).
        let custom_name = upstream
            .escape_hatches
            .cluster_json
            .as_deref()
            .and_then(|json| super::escape_hatch::cluster(json).ok())
            .map(|cluster| cluster.name);
        for node in upstream.nodes.values() {
            let ChainNode::Resolver { target, failover } = node else {
                continue;
            };
            let Some(primary) = upstream.targets.get(target) else {
                continue;
            };
            let mut endpoints = vec![locality(primary, 0)];
            let mut priority = 1;
            for id in failover {
                if let Some(t) = upstream.targets.get(id) {
                    endpoints.push(locality(t, priority));
                    priority += 1;
                }
            }
            // An empty priority level is dropped and the rest renumbered, so priorities stay
            // contiguous from 0 as Envoy requires; a target without instances simply hands
            // its level to the next failover.
            endpoints.retain(|l| !l.lb_endpoints.is_empty());
            for (level, locality) in endpoints.iter_mut().enumerate() {
                locality.priority = level as u32;
            }
            let name = custom_name.clone().unwrap_or_else(|| primary.sni.clone());
            out.entry(name.clone()).or_insert(ClusterLoadAssignment {
                cluster_name: name,
                endpoints,
                ..Default::default()
            });
        }
    }
    out
}
