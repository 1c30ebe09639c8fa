//! A terminating gateway's resources (Consul's `makeTerminatingGatewayListener` and its
//! gateway clusters): one listener at the registration's address and port whose TLS
//! inspector reads the SNI a sidecar sends, one filter chain per linked service matching
//! that service's SNI, and one EDS cluster per linked service to its instances outside the
//! mesh.
//!
//! A filter chain ends the mesh's mTLS with the linked service's own leaf (so the sidecar's
//! check of the service's SPIFFE ID holds), requires a client certificate that chains to
//! the roots, decides by the service's intentions (network RBAC: the gateway enforces at
//! L4 whatever the service's protocol), then proxies TCP to the service's cluster. The
//! cluster speaks plain TCP, or TLS it originates with the entry's `CAFile`, `CertFile`,
//! `KeyFile` and `SNI` (files Envoy reads from the gateway's host). A last chain without a
//! match routes by SNI to a cluster of that name, as Consul's fallback does, so an unknown
//! SNI finds no cluster and is reset.

use super::clusters::TLS_TRANSPORT_SOCKET;
use super::listeners::TCP_PROXY_FILTER;
use super::rbac::{self, NetworkRbac};
use super::{ads_config_source, any, duration_ms, inline, socket_address};
use crate::xds::snapshot::{Snapshot, TerminatingService};
use envoy_types::pb::envoy::config::cluster::v3::{
    cluster::{self, ClusterDiscoveryType, DiscoveryType},
    Cluster,
};
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::{
    filter, listener_filter, Filter, FilterChain, FilterChainMatch, Listener, ListenerFilter,
};
use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use envoy_types::pb::envoy::extensions::filters::network::sni_cluster::v3::SniCluster;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    common_tls_context::ValidationContextType, CertificateValidationContext, CommonTlsContext,
    DownstreamTlsContext, TlsCertificate, TlsParameters, UpstreamTlsContext,
};
use envoy_types::pb::google::protobuf::BoolValue;

/// Envoy's names of the filters only gateways use.
pub const TLS_INSPECTOR_FILTER: &str = "envoy.filters.listener.tls_inspector";
pub const SNI_CLUSTER_FILTER: &str = "envoy.filters.network.sni_cluster";
/// Consul's name of a gateway's listener at its registration's address.
const DEFAULT_LISTENER: &str = "default";
/// Consul's connect timeout of a terminating gateway's clusters.
const CONNECT_TIMEOUT_MS: u64 = 5_000;

pub(super) fn network_filter(name: &str, config: envoy_types::pb::google::protobuf::Any) -> Filter {
    Filter {
        name: name.to_string(),
        config_type: Some(filter::ConfigType::TypedConfig(config)),
    }
}

pub(super) fn tcp_proxy_filter(stat_prefix: String, cluster: String) -> Filter {
    network_filter(
        TCP_PROXY_FILTER,
        any(&TcpProxy {
            stat_prefix,
            cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(cluster)),
            ..Default::default()
        }),
    )
}

/// A file on the gateway's host, as Envoy reads certificates the entry names.
fn file(path: &str) -> core::DataSource {
    core::DataSource {
        specifier: Some(core::data_source::Specifier::Filename(path.to_string())),
        ..Default::default()
    }
}

/// The filter chain of one linked service.
fn service_chain(snapshot: &Snapshot, service: &TerminatingService) -> FilterChain {
    let rules = rbac::rules_of(
        &service.sources,
        snapshot.inbound.default_allow,
        &snapshot.trust_domain,
        false,
    );
    let tls = DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_params: Some(TlsParameters::default()),
            tls_certificates: vec![TlsCertificate {
                certificate_chain: Some(inline(&service.leaf_cert_pem)),
                private_key: Some(inline(&service.leaf_key_pem)),
                ..Default::default()
            }],
            validation_context_type: Some(ValidationContextType::ValidationContext(
                CertificateValidationContext {
                    trusted_ca: Some(inline(&snapshot.roots_bundle())),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }),
        require_client_certificate: Some(BoolValue { value: true }),
        ..Default::default()
    };
    FilterChain {
        filter_chain_match: Some(FilterChainMatch {
            server_names: vec![service.sni.clone()],
            ..Default::default()
        }),
        filters: vec![
            network_filter(
                rbac::NETWORK_RBAC_FILTER,
                any(&NetworkRbac {
                    rules: Some(rules),
                    stat_prefix: "connect_authz".to_string(),
                }),
            ),
            tcp_proxy_filter(
                format!(
                    "upstream.{}.default.default.{}",
                    service.name, snapshot.datacenter
                ),
                service.sni.clone(),
            ),
        ],
        transport_socket: Some(core::TransportSocket {
            name: TLS_TRANSPORT_SOCKET.to_string(),
            config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(&tls))),
        }),
        ..Default::default()
    }
}

/// The gateway's one listener, when it has a port.
pub fn listener(snapshot: &Snapshot) -> Option<Listener> {
    let inbound = &snapshot.inbound;
    if inbound.bind_port == 0 {
        return None;
    }
    let name = format!(
        "{DEFAULT_LISTENER}:{}:{}",
        inbound.bind_address, inbound.bind_port
    );
    // Sorted by SNI, so the same services always give the same listener.
    let mut chains: Vec<FilterChain> = snapshot
        .terminating
        .iter()
        .map(|s| service_chain(snapshot, s))
        .collect();
    chains.sort_by(|a, b| {
        let key = |c: &FilterChain| {
            c.filter_chain_match
                .as_ref()
                .and_then(|m| m.server_names.first().cloned())
                .unwrap_or_default()
        };
        key(a).cmp(&key(b))
    });
    let stat_prefix = format!("terminating_gateway.{name}");
    Some(sni_listener(
        name,
        socket_address(&inbound.bind_address, inbound.bind_port),
        chains,
        stat_prefix,
    ))
}

/// A gateway's listener: a TLS inspector reads each connection's SNI, `chains` match it,
/// and a last chain without a match routes by SNI to the cluster of that name
/// (`sni_cluster`), its TCP stats under `fallback_stat_prefix`.
pub(super) fn sni_listener(
    name: String,
    address: core::Address,
    mut chains: Vec<FilterChain>,
    fallback_stat_prefix: String,
) -> Listener {
    chains.push(FilterChain {
        filters: vec![
            network_filter(SNI_CLUSTER_FILTER, any(&SniCluster::default())),
            tcp_proxy_filter(fallback_stat_prefix, String::new()),
        ],
        ..Default::default()
    });
    Listener {
        address: Some(address),
        name,
        listener_filters: vec![ListenerFilter {
            name: TLS_INSPECTOR_FILTER.to_string(),
            config_type: Some(listener_filter::ConfigType::TypedConfig(any(
                &TlsInspector::default(),
            ))),
            ..Default::default()
        }],
        filter_chains: chains,
        ..Default::default()
    }
}

/// One EDS cluster per linked service, named by its mesh SNI.
pub fn clusters(snapshot: &Snapshot) -> Vec<(String, Cluster)> {
    snapshot
        .terminating
        .iter()
        .map(|service| {
            let transport_socket = (!service.ca_file.is_empty()).then(|| {
                let mut certificates = Vec::new();
                if !service.cert_file.is_empty() && !service.key_file.is_empty() {
                    certificates.push(TlsCertificate {
                        certificate_chain: Some(file(&service.cert_file)),
                        private_key: Some(file(&service.key_file)),
                        ..Default::default()
                    });
                }
                let context = UpstreamTlsContext {
                    common_tls_context: Some(CommonTlsContext {
                        tls_params: Some(TlsParameters::default()),
                        tls_certificates: certificates,
                        validation_context_type: Some(ValidationContextType::ValidationContext(
                            CertificateValidationContext {
                                trusted_ca: Some(file(&service.ca_file)),
                                ..Default::default()
                            },
                        )),
                        ..Default::default()
                    }),
                    sni: service.tls_sni.clone(),
                    ..Default::default()
                };
                core::TransportSocket {
                    name: TLS_TRANSPORT_SOCKET.to_string(),
                    config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(
                        &context,
                    ))),
                }
            });
            let cluster = Cluster {
                name: service.sni.clone(),
                alt_stat_name: service.sni.clone(),
                cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
                eds_cluster_config: Some(cluster::EdsClusterConfig {
                    eds_config: Some(ads_config_source()),
                    service_name: String::new(),
                }),
                connect_timeout: Some(duration_ms(CONNECT_TIMEOUT_MS)),
                transport_socket,
                ..Default::default()
            };
            (service.sni.clone(), cluster)
        })
        .collect()
}

/// The instances of every linked service, by cluster name.
pub fn endpoints(snapshot: &Snapshot) -> Vec<(String, ClusterLoadAssignment)> {
    snapshot
        .terminating
        .iter()
        .map(|service| {
            (
                service.sni.clone(),
                super::endpoints::assignment(&service.sni, &service.endpoints),
            )
        })
        .collect()
}
