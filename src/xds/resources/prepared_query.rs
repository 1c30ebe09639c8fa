//! A sidecar's prepared-query upstreams (Consul's `makeUpstreamClusterForPreparedQuery`
//! and the prepared-query branch of its connect-proxy listeners): per upstream, an EDS
//! cluster named by the query's SNI with mTLS (the proxy's leaf, the roots, that SNI, the
//! query's SPIFFE IDs as the only acceptable SANs), its load assignment from the query's
//! execution, and an outbound listener `prepared_query:<query>:<addr>:<port>` proxying
//! TCP to the cluster (Consul serves these upstreams at L4 only).

use super::clusters::{circuit_breakers, outlier_detection, upstream_tls};
use super::endpoints::assignment;
use super::terminating::tcp_proxy_filter;
use super::{ads_config_source, duration_ms, socket_address};
use crate::xds::snapshot::Snapshot;
use envoy_types::pb::envoy::config::cluster::v3::{
    cluster::{self, ClusterDiscoveryType, DiscoveryType},
    Cluster,
};
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::{FilterChain, Listener};

/// Every prepared-query upstream's cluster, by name.
pub fn clusters(snapshot: &Snapshot) -> Vec<(String, Cluster)> {
    snapshot
        .prepared_queries
        .iter()
        .map(|query| {
            let cluster = Cluster {
                name: query.sni.clone(),
                cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
                eds_cluster_config: Some(cluster::EdsClusterConfig {
                    eds_config: Some(ads_config_source()),
                    service_name: String::new(),
                }),
                connect_timeout: Some(duration_ms(query.connect_timeout_ms)),
                circuit_breakers: Some(circuit_breakers(&Default::default())),
                outlier_detection: Some(outlier_detection(&Default::default())),
                transport_socket: Some(upstream_tls(
                    snapshot,
                    &query.sni,
                    &query.spiffe_ids,
                    "tcp",
                )),
                ..Default::default()
            };
            (query.sni.clone(), cluster)
        })
        .collect()
}

/// Every prepared-query cluster's load assignment (an empty one when the query selects
/// nothing, or Envoy would wait for it).
pub fn endpoints(snapshot: &Snapshot) -> Vec<(String, ClusterLoadAssignment)> {
    snapshot
        .prepared_queries
        .iter()
        .map(|query| (query.sni.clone(), assignment(&query.sni, &query.endpoints)))
        .collect()
}

/// Consul's stat prefix of a prepared-query upstream's TCP proxy: `upstream.` and the
/// upstream's ID.
fn stat_prefix(id: &str) -> String {
    format!("upstream.{id}")
}

/// Every prepared-query upstream's outbound listener (none without a bind port).
pub fn listeners(snapshot: &Snapshot) -> Vec<Listener> {
    snapshot
        .prepared_queries
        .iter()
        .filter(|query| query.bind_port != 0)
        .map(|query| Listener {
            name: format!("{}:{}:{}", query.id, query.bind_address, query.bind_port),
            address: Some(socket_address(&query.bind_address, query.bind_port)),
            traffic_direction: core::TrafficDirection::Outbound as i32,
            filter_chains: vec![FilterChain {
                filters: vec![tcp_proxy_filter(stat_prefix(&query.id), query.sni.clone())],
                ..Default::default()
            }],
            ..Default::default()
        })
        .collect()
}
