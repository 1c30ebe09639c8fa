//! A sidecar's exposed paths (Consul's `makeExposedCheckListener` and the expose clusters
//! of `clustersFromSnapshotConnectProxy`): per path, a plain-text listener
//! `exposed_path_<path>:<address>:<port>` on the public listener's address whose HTTP
//! connection manager routes exactly that path and nothing else (Envoy answers 404 to any
//! other), to `local_app` when the path is on the service's own port, else to a static
//! cluster `exposed_cluster_<port>` of the local address. No TLS and no RBAC: exposing a
//! path is opening it to whoever reaches the port, as in Consul — except a path made from
//! a check (`Expose.Checks`), whose filter chain matches only the probing agent's sources.

use super::clusters::http2_options;
use super::listeners::{router_filter, HCM_FILTER};
use super::terminating::network_filter;
use super::{any, duration_ms, socket_address, LOCAL_APP_CLUSTER};
use crate::xds::expose::{cluster_name, ExposePath};
use crate::xds::registration::ProxyKind;
use crate::xds::snapshot::Snapshot;
use envoy_types::pb::envoy::config::cluster::v3::{
    cluster::{ClusterDiscoveryType, DiscoveryType},
    Cluster,
};
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint::HostIdentifier, ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::envoy::config::listener::v3::{FilterChain, FilterChainMatch, Listener};
use envoy_types::pb::envoy::config::route::v3::{
    route, route_action, route_match, Route, RouteAction, RouteConfiguration, RouteMatch,
    VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, HttpConnectionManager,
};
use std::collections::BTreeMap;

/// The cluster a path is routed to.
fn path_cluster(snapshot: &Snapshot, path: &ExposePath) -> String {
    if path.local_path_port == snapshot.inbound.local_port {
        LOCAL_APP_CLUSTER.to_string()
    } else {
        cluster_name(path.local_path_port)
    }
}

/// The static clusters of the paths on ports other than the service's, by name (two paths
/// on one port share one).
pub fn clusters(snapshot: &Snapshot) -> BTreeMap<String, Cluster> {
    let mut out = BTreeMap::new();
    if snapshot.kind != ProxyKind::ConnectProxy {
        return out;
    }
    let inbound = &snapshot.inbound;
    for path in &snapshot.expose {
        let name = path_cluster(snapshot, path);
        if name == LOCAL_APP_CLUSTER || out.contains_key(&name) {
            continue;
        }
        let cluster = Cluster {
            name: name.clone(),
            cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
            connect_timeout: Some(duration_ms(inbound.local_connect_timeout_ms)),
            load_assignment: Some(ClusterLoadAssignment {
                cluster_name: name.clone(),
                endpoints: vec![LocalityLbEndpoints {
                    lb_endpoints: vec![LbEndpoint {
                        host_identifier: Some(HostIdentifier::Endpoint(Endpoint {
                            address: Some(socket_address(
                                &inbound.local_address,
                                path.local_path_port,
                            )),
                            ..Default::default()
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }),
            typed_extension_protocol_options: http2_options(if path.is_http2() {
                "http2"
            } else {
                "http"
            }),
            ..Default::default()
        };
        out.insert(name, cluster);
    }
    out
}

/// The filter chain match of a path that takes connections from some sources only (a
/// check's path: the probing agent's), none for a path open to any source.
fn source_match(path: &ExposePath) -> Option<FilterChainMatch> {
    if path.allowed_sources.is_empty() {
        return None;
    }
    Some(FilterChainMatch {
        source_prefix_ranges: path
            .allowed_sources
            .iter()
            .map(|(address, prefix_len)| core::CidrRange {
                address_prefix: address.clone(),
                prefix_len: Some(envoy_types::pb::google::protobuf::UInt32Value {
                    value: *prefix_len,
                }),
            })
            .collect(),
        ..Default::default()
    })
}

/// One listener per exposed path.
pub fn listeners(snapshot: &Snapshot) -> Vec<Listener> {
    if snapshot.kind != ProxyKind::ConnectProxy {
        return Vec::new();
    }
    let address = &snapshot.inbound.bind_address;
    snapshot
        .expose
        .iter()
        .map(|path| {
            let filter_name = path.filter_name();
            let route_config = RouteConfiguration {
                name: filter_name.clone(),
                virtual_hosts: vec![VirtualHost {
                    name: filter_name.clone(),
                    domains: vec!["*".to_string()],
                    routes: vec![Route {
                        r#match: Some(RouteMatch {
                            path_specifier: Some(route_match::PathSpecifier::Path(
                                path.path.clone(),
                            )),
                            ..Default::default()
                        }),
                        action: Some(route::Action::Route(RouteAction {
                            cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(
                                path_cluster(snapshot, path),
                            )),
                            ..Default::default()
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            };
            let manager = HttpConnectionManager {
                stat_prefix: filter_name,
                route_specifier: Some(RouteSpecifier::RouteConfig(route_config)),
                http_filters: vec![router_filter()],
                http2_protocol_options: path.is_http2().then(core::Http2ProtocolOptions::default),
                ..Default::default()
            };
            Listener {
                name: format!("{}:{address}:{}", path.listener_name(), path.listener_port),
                address: Some(socket_address(address, path.listener_port)),
                traffic_direction: core::TrafficDirection::Inbound as i32,
                filter_chains: vec![FilterChain {
                    filter_chain_match: source_match(path),
                    filters: vec![network_filter(HCM_FILTER, any(&manager))],
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect()
}
