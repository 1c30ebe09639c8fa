//! A mesh gateway's resources (Consul's `makeMeshGatewayListener`,
//! `makeGatewayServiceClusters` and `makeGatewayCluster`): the gateway never terminates
//! TLS, it reads the SNI of each connection's ClientHello and passes the bytes on.
//!
//! - One listener per address (`default:<lan address>:<port>`, and `wan:<address>:<port>`
//!   when the WAN address is another socket), each with a TLS inspector and the same
//!   filter chains: one per other datacenter matching `*.<dc>.internal.<trust domain>`
//!   that proxies TCP to that datacenter's cluster, and a last chain without a match whose
//!   `sni_cluster` filter names the cluster by the SNI itself (a local service's SNI is its
//!   cluster's name; an unknown SNI finds no cluster and is reset).
//! - One EDS cluster per local service and resolver subset, named by its SNI, whose
//!   endpoints are its Connect-capable instances (the sidecars end the mTLS), and one EDS
//!   cluster `<dc>.internal.<trust domain>` per other datacenter whose endpoints are that
//!   datacenter's mesh gateways at their WAN addresses. No cluster has a transport socket:
//!   the bytes stay the client's TLS.
//! - With `-expose-servers` (WAN federation through mesh gateways, Consul's
//!   `MetaWANFederationKey`): a chain per other datacenter matching
//!   `*.server.<dc>.<domain>` to the cluster `server.<dc>.<domain>` (that datacenter's
//!   gateways), and a chain per local server matching `<node>.server.<dc>.<domain>` exactly
//!   to that server's cluster (its server RPC port, where native TLS with Consul's ALPN
//!   names is spoken end to end).

use super::terminating::{sni_listener, tcp_proxy_filter};
use super::{ads_config_source, duration_ms, socket_address};
use crate::xds::snapshot::{GatewayCluster, Snapshot};
use envoy_types::pb::envoy::config::cluster::v3::{
    cluster::{self, ClusterDiscoveryType, DiscoveryType},
    Cluster,
};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::{FilterChain, FilterChainMatch, Listener};

/// Consul's connect timeout of a mesh gateway's clusters.
const CONNECT_TIMEOUT_MS: u64 = 5_000;

/// The gateway's listeners, by name.
pub fn listeners(snapshot: &Snapshot) -> Vec<Listener> {
    let routes = &snapshot.mesh;
    let mut out = Vec::with_capacity(routes.listeners.len());
    for listener in &routes.listeners {
        if listener.port == 0 {
            continue;
        }
        let name = format!("{}:{}:{}", listener.name, listener.address, listener.port);
        let remote_chain = |datacenter: &str, cluster: &GatewayCluster| FilterChain {
            filter_chain_match: Some(FilterChainMatch {
                server_names: vec![format!("*.{}", cluster.name)],
                ..Default::default()
            }),
            filters: vec![tcp_proxy_filter(
                format!("mesh_gateway_remote.{}.{datacenter}", listener.name),
                cluster.name.clone(),
            )],
            ..Default::default()
        };
        // Consul's order: other datacenters' services, then (WAN federation) other
        // datacenters' servers, then each local server by its exact name.
        let mut chains: Vec<FilterChain> = routes
            .datacenters
            .iter()
            .chain(&routes.server_datacenters)
            .map(|(datacenter, cluster)| remote_chain(datacenter, cluster))
            .collect();
        chains.extend(routes.servers.iter().map(|server| FilterChain {
            filter_chain_match: Some(FilterChainMatch {
                server_names: vec![server.name.clone()],
                ..Default::default()
            }),
            filters: vec![tcp_proxy_filter(
                format!("mesh_gateway_local_server.{}", listener.name),
                server.name.clone(),
            )],
            ..Default::default()
        }));
        out.push(sni_listener(
            name,
            socket_address(&listener.address, listener.port),
            chains,
            format!("mesh_gateway_local.{}", listener.name),
        ));
    }
    out
}

fn all_clusters(snapshot: &Snapshot) -> impl Iterator<Item = &GatewayCluster> {
    snapshot
        .mesh
        .services
        .iter()
        .chain(snapshot.mesh.datacenters.iter().map(|(_, c)| c))
        .chain(&snapshot.mesh.servers)
        .chain(snapshot.mesh.server_datacenters.iter().map(|(_, c)| c))
        .chain(&snapshot.mesh.any_server)
}

/// One EDS cluster per local service (or subset) and per other datacenter, by name.
pub fn clusters(snapshot: &Snapshot) -> Vec<(String, Cluster)> {
    all_clusters(snapshot)
        .map(|c| {
            let cluster = Cluster {
                name: c.name.clone(),
                alt_stat_name: c.name.clone(),
                cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
                eds_cluster_config: Some(cluster::EdsClusterConfig {
                    eds_config: Some(ads_config_source()),
                    service_name: String::new(),
                }),
                connect_timeout: Some(duration_ms(CONNECT_TIMEOUT_MS)),
                ..Default::default()
            };
            (c.name.clone(), cluster)
        })
        .collect()
}

/// The endpoints of every cluster, by cluster name (empty ones too, so Envoy does not
/// wait for them).
pub fn endpoints(snapshot: &Snapshot) -> Vec<(String, ClusterLoadAssignment)> {
    all_clusters(snapshot)
        .map(|c| {
            (
                c.name.clone(),
                super::endpoints::assignment(&c.name, &c.endpoints),
            )
        })
        .collect()
}
