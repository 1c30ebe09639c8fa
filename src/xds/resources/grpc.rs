//! The gRPC flavour of a sidecar's resources, for a proxyless gRPC client (grpc-go,
//! grpc-java, gRPC C-core and the languages wrapping it) that takes the place of a sidecar
//! and asks for them itself over state-of-the-world ADS (gRFC A27, A28, A29).
//!
//! Built from the same [`Snapshot`] as Envoy's, with different names and shapes because a
//! gRPC client reads them differently:
//! - one listener per upstream, named by the upstream's ID (`db`, what the client dials as
//!   `xds:///db`), with no address: an `api_listener` holding an HTTP connection manager
//!   whose route configuration is inline (the upstream's discovery chain for an L7
//!   upstream, else one route to its resolver's cluster) and whose last filter is the
//!   router, as gRPC requires;
//! - one EDS cluster per resolver target, named by its SNI like Envoy's, whose TLS context
//!   names certificate provider instances instead of carrying PEM: gRPC reads the leaf and
//!   the roots from the files of the bootstrap's `file_watcher` provider
//!   ([`CERTIFICATE_PROVIDER_INSTANCE`], kept current by `praetor connect grpc-bootstrap`),
//!   and accepts only a peer whose URI SAN is one of the targets' SPIFFE IDs;
//! - one load assignment per cluster whose every locality has a name and a
//!   `load_balancing_weight` (gRPC ignores a locality without a weight).
//!
//! There is no public listener and no `local_app`: a proxyless client only dials out.
//! Invariants: pure; every cluster a listener routes to is in the clusters, and every EDS
//! cluster has its load assignment (empty when the target has no instances).

use super::clusters::{resolvers, tcp_cluster_name, Resolver};
use super::{ads_config_source, any, duration_ms, Resource, ResourceType};
use super::{endpoints::lb_endpoints, Resources};
use crate::xds::snapshot::{is_l7, Snapshot, Target, Upstream};
use envoy_types::pb::envoy::config::cluster::v3::{
    cluster::{self, ClusterDiscoveryType, DiscoveryType},
    Cluster,
};
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, LocalityLbEndpoints};
use envoy_types::pb::envoy::config::listener::v3::{ApiListener, Listener};
use envoy_types::pb::envoy::config::route::v3::{
    route, route_action, route_match, Route, RouteAction, RouteConfiguration, RouteMatch,
    VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, http_filter, HttpConnectionManager, HttpFilter,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    common_tls_context::ValidationContextType, CertificateProviderPluginInstance,
    CertificateValidationContext, CommonTlsContext, UpstreamTlsContext,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher::MatchPattern, StringMatcher};
use envoy_types::pb::google::protobuf::UInt32Value;

/// The certificate provider instance the clusters name and the bootstrap written by
/// `praetor connect grpc-bootstrap` defines (a `file_watcher` over the leaf, its key and
/// the roots).
pub const CERTIFICATE_PROVIDER_INSTANCE: &str = "connect";
/// The name gRPC looks the TLS transport socket up by.
pub const TLS_TRANSPORT_SOCKET: &str = "envoy.transport_sockets.tls";
/// The router filter's name; gRPC requires it last in the connection manager.
const ROUTER_FILTER: &str = "envoy.filters.http.router";
/// The weight of every locality: one locality per priority, so the value only has to be
/// present (gRPC drops localities without one).
const LOCALITY_WEIGHT: u32 = 1;

/// Whether a client announcing itself with `user_agent_name` is a gRPC library: gRPC's xDS
/// clients send `gRPC C-core`, `gRPC Go`, `grpc-java`, `gRPC Python` and the like, where
/// Envoy sends `envoy`.
pub fn is_grpc_client(user_agent_name: &str) -> bool {
    user_agent_name
        .get(..4)
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case("grpc"))
}

/// Builds and encodes the gRPC flavour of every resource of a sidecar's `snapshot`.
pub fn build(snapshot: &Snapshot) -> Result<Resources, String> {
    let mut out = Resources::default();
    for upstream in &snapshot.upstreams {
        let listener = api_listener(upstream)?;
        out.insert(
            ResourceType::Listener,
            listener.name.clone(),
            Resource::encode(&listener, Vec::new()),
        );
        for (name, cluster, assignment) in upstream_clusters(upstream)? {
            // Two upstreams may share a target: the cluster is the same, keep the first.
            if out.of(ResourceType::Cluster).contains_key(&name) {
                continue;
            }
            out.insert(
                ResourceType::Cluster,
                name.clone(),
                Resource::encode(&cluster, vec![name.clone()]),
            );
            out.insert(
                ResourceType::Endpoint,
                name,
                Resource::encode(&assignment, Vec::new()),
            );
        }
    }
    Ok(out)
}

/// The listener a client dialing `xds:///<upstream id>` asks for.
fn api_listener(upstream: &Upstream) -> Result<Listener, String> {
    let route_config = if is_l7(&upstream.protocol) {
        super::routes::route_configuration(upstream)?
    } else {
        let cluster = tcp_cluster_name(upstream)?;
        RouteConfiguration {
            name: upstream.id.clone(),
            virtual_hosts: vec![VirtualHost {
                name: upstream.id.clone(),
                domains: vec!["*".to_string()],
                routes: vec![Route {
                    r#match: Some(RouteMatch {
                        path_specifier: Some(route_match::PathSpecifier::Prefix(String::new())),
                        ..Default::default()
                    }),
                    action: Some(route::Action::Route(RouteAction {
                        cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster)),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    };
    let manager = HttpConnectionManager {
        stat_prefix: upstream.id.clone(),
        route_specifier: Some(RouteSpecifier::RouteConfig(route_config)),
        http_filters: vec![HttpFilter {
            name: ROUTER_FILTER.to_string(),
            config_type: Some(http_filter::ConfigType::TypedConfig(
                any(&Router::default()),
            )),
            ..Default::default()
        }],
        ..Default::default()
    };
    Ok(Listener {
        name: upstream.id.clone(),
        api_listener: Some(ApiListener {
            api_listener: Some(any(&manager)),
        }),
        ..Default::default()
    })
}

/// The clusters of `upstream`'s resolvers with their load assignments.
fn upstream_clusters(
    upstream: &Upstream,
) -> Result<Vec<(String, Cluster, ClusterLoadAssignment)>, String> {
    let mut out = Vec::new();
    for Resolver {
        primary,
        failovers,
        spiffe_ids,
    } in resolvers(upstream)?
    {
        let name = primary.sni.clone();
        let cluster = Cluster {
            name: name.clone(),
            cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
            eds_cluster_config: Some(cluster::EdsClusterConfig {
                eds_config: Some(ads_config_source()),
                service_name: String::new(),
            }),
            connect_timeout: Some(duration_ms(primary.connect_timeout_ms)),
            transport_socket: Some(upstream_tls(&spiffe_ids)),
            ..Default::default()
        };
        let assignment = assignment(&name, std::iter::once(primary).chain(failovers));
        out.push((name, cluster, assignment));
    }
    Ok(out)
}

/// mTLS as gRPC takes it: the leaf and the roots from the certificate provider, the peer
/// accepted only with one of `spiffe_ids` as a URI SAN.
fn upstream_tls(spiffe_ids: &[String]) -> core::TransportSocket {
    let provider = |certificate_name: &str| CertificateProviderPluginInstance {
        instance_name: CERTIFICATE_PROVIDER_INSTANCE.to_string(),
        certificate_name: certificate_name.to_string(),
    };
    #[allow(deprecated)]
    let validation = CertificateValidationContext {
        ca_certificate_provider_instance: Some(provider("ROOTCA")),
        // gRPC matches this (deprecated in Envoy) list against every SAN of the peer.
        match_subject_alt_names: spiffe_ids
            .iter()
            .map(|id| StringMatcher {
                match_pattern: Some(MatchPattern::Exact(id.clone())),
                ignore_case: false,
            })
            .collect(),
        ..Default::default()
    };
    let context = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificate_provider_instance: Some(provider("DEFAULT")),
            validation_context_type: Some(ValidationContextType::ValidationContext(validation)),
            ..Default::default()
        }),
        ..Default::default()
    };
    core::TransportSocket {
        name: TLS_TRANSPORT_SOCKET.to_string(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(
            &context,
        ))),
    }
}

/// The load assignment of cluster `name` over `targets`, the resolver's own first: one
/// named, weighted locality per target with instances, at contiguous priorities.
fn assignment<'a>(name: &str, targets: impl Iterator<Item = &'a Target>) -> ClusterLoadAssignment {
    let mut endpoints = Vec::new();
    for target in targets {
        let lb_endpoints = lb_endpoints(&target.endpoints);
        if lb_endpoints.is_empty() {
            continue;
        }
        endpoints.push(LocalityLbEndpoints {
            locality: Some(core::Locality {
                region: target.datacenter.clone(),
                zone: target.id.clone(),
                sub_zone: String::new(),
            }),
            lb_endpoints,
            load_balancing_weight: Some(UInt32Value {
                value: LOCALITY_WEIGHT,
            }),
            priority: endpoints.len() as u32,
            ..Default::default()
        });
    }
    ClusterLoadAssignment {
        cluster_name: name.to_string(),
        endpoints,
        ..Default::default()
    }
}
