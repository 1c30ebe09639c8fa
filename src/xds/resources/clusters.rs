//! Clusters (Consul's `clusters.go`): `local_app`, a static cluster to the local service,
//! and one EDS cluster per resolver of every upstream's discovery chain, named by the
//! resolver's target SNI (`<svc>.default.<dc>.internal.<trust domain>`). An upstream
//! cluster speaks mTLS with the proxy's leaf, trusts the roots, sends the target's SNI and
//! accepts only the SPIFFE IDs of the targets it may reach (its own and its failovers').
//!
//! Escape hatches replace clusters with the user's Envoy JSON: `envoy_local_cluster_json`
//! replaces `local_app` as given; an upstream's `envoy_cluster_json` replaces its one
//! cluster and gets that cluster's mTLS transport socket, as Consul overlays it, so a custom
//! upstream cluster still speaks mTLS with the right SNI and SPIFFE IDs.

use super::escape_hatch::{self, LOCAL_CLUSTER_KEY, UPSTREAM_CLUSTER_KEY};
use super::{ads_config_source, any, duration_ms, inline, socket_address, LOCAL_APP_CLUSTER};
use crate::xds::registration::ProxyKind;
use crate::xds::snapshot::{
    is_l7, ChainNode, OutlierSettings, Snapshot, Target, Upstream, UpstreamLimits,
};
use envoy_types::pb::envoy::config::cluster::v3::circuit_breakers;
use envoy_types::pb::envoy::config::cluster::v3::{
    cluster::{self, ClusterDiscoveryType, DiscoveryType},
    CircuitBreakers, Cluster, OutlierDetection,
};
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint::HostIdentifier, ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    common_tls_context::ValidationContextType, subject_alt_name_matcher::SanType,
    CertificateValidationContext, CommonTlsContext, SubjectAltNameMatcher, TlsParameters,
    UpstreamTlsContext,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::{
    http_protocol_options::{
        explicit_http_config::ProtocolConfig, ExplicitHttpConfig, UpstreamProtocolOptions,
    },
    HttpProtocolOptions,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher::MatchPattern, StringMatcher};
use envoy_types::pb::google::protobuf::UInt32Value;
use std::collections::BTreeMap;

/// The key Envoy reads upstream HTTP protocol options under.
const HTTP_PROTOCOL_OPTIONS_KEY: &str = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";
/// Envoy's name of the TLS transport socket.
pub const TLS_TRANSPORT_SOCKET: &str = "tls";

/// Every cluster of `snapshot`, by name.
pub fn build(snapshot: &Snapshot) -> Result<BTreeMap<String, Cluster>, String> {
    let mut clusters = BTreeMap::new();
    if snapshot.kind == ProxyKind::ConnectProxy {
        // A gateway fronts no local application.
        let local = match &snapshot.escape_hatches.local_cluster_json {
            Some(json) => escape_hatch::cluster(json)
                .map_err(|e| format!("failed to parse Proxy.Config.{LOCAL_CLUSTER_KEY}: {e}"))?,
            None => local_app(snapshot),
        };
        clusters.insert(local.name.clone(), local);
    }
    for upstream in &snapshot.upstreams {
        for (name, cluster) in upstream_clusters(snapshot, upstream)? {
            clusters.entry(name).or_insert(cluster);
        }
    }
    Ok(clusters)
}

/// HTTP/2 towards the upstream, for `http2` and `grpc` services (a single map entry, so
/// the encoding is the same every time).
pub(super) fn http2_options(
    protocol: &str,
) -> std::collections::HashMap<String, envoy_types::pb::google::protobuf::Any> {
    let mut options = std::collections::HashMap::new();
    if matches!(protocol, "http2" | "grpc") {
        let http = HttpProtocolOptions {
            upstream_protocol_options: Some(UpstreamProtocolOptions::ExplicitHttpConfig(
                ExplicitHttpConfig {
                    protocol_config: Some(ProtocolConfig::Http2ProtocolOptions(
                        core::Http2ProtocolOptions::default(),
                    )),
                },
            )),
            ..Default::default()
        };
        options.insert(HTTP_PROTOCOL_OPTIONS_KEY.to_string(), any(&http));
    }
    options
}

fn local_app(snapshot: &Snapshot) -> Cluster {
    let inbound = &snapshot.inbound;
    Cluster {
        name: LOCAL_APP_CLUSTER.to_string(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
        connect_timeout: Some(duration_ms(inbound.local_connect_timeout_ms)),
        load_assignment: Some(ClusterLoadAssignment {
            cluster_name: LOCAL_APP_CLUSTER.to_string(),
            endpoints: vec![LocalityLbEndpoints {
                lb_endpoints: vec![LbEndpoint {
                    host_identifier: Some(HostIdentifier::Endpoint(Endpoint {
                        address: Some(socket_address(&inbound.local_address, inbound.local_port)),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
        typed_extension_protocol_options: http2_options(&inbound.protocol),
        ..Default::default()
    }
}

/// The TLS context of every upstream connection: the proxy's leaf, the roots, the target's
/// SNI and the SPIFFE IDs the peer may present.
pub fn upstream_tls(
    snapshot: &Snapshot,
    sni: &str,
    spiffe_ids: &[String],
    protocol: &str,
) -> core::TransportSocket {
    let context = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_params: Some(TlsParameters::default()),
            tls_certificates: vec![super::leaf_certificate(snapshot)],
            validation_context_type: Some(ValidationContextType::ValidationContext(
                CertificateValidationContext {
                    trusted_ca: Some(inline(&snapshot.roots_bundle())),
                    match_typed_subject_alt_names: spiffe_ids
                        .iter()
                        .map(|id| SubjectAltNameMatcher {
                            san_type: SanType::Uri as i32,
                            matcher: Some(StringMatcher {
                                match_pattern: Some(MatchPattern::Exact(id.clone())),
                                ignore_case: false,
                            }),
                            oid: String::new(),
                        })
                        .collect(),
                    ..Default::default()
                },
            )),
            alpn_protocols: if matches!(protocol, "http2" | "grpc") {
                vec!["h2".to_string()]
            } else {
                Vec::new()
            },
            ..Default::default()
        }),
        sni: sni.to_string(),
        ..Default::default()
    };
    core::TransportSocket {
        name: TLS_TRANSPORT_SOCKET.to_string(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(
            &context,
        ))),
    }
}

/// The name of the cluster a resolver node sends to: its target's SNI.
pub fn resolver_cluster_name(upstream: &Upstream, node: &str) -> Option<String> {
    match upstream.nodes.get(node)? {
        ChainNode::Resolver { target, .. } => upstream.targets.get(target).map(|t| t.sni.clone()),
        _ => None,
    }
}

/// The one cluster a TCP upstream proxies to: the cluster of the resolver its chain starts
/// at (a TCP chain has no splitter or router to start at).
pub fn tcp_cluster_name(upstream: &Upstream) -> Result<String, String> {
    resolver_cluster_name(upstream, &upstream.start).ok_or_else(|| {
        format!(
            "upstream {:?}: a TCP chain must start at a resolver (it starts at {:?})",
            upstream.id, upstream.start
        )
    })
}

/// Envoy's circuit breakers for `limits`: one threshold with the limits set, else none.
pub(super) fn circuit_breakers(limits: &UpstreamLimits) -> CircuitBreakers {
    let value = |n: u32| (n > 0).then_some(UInt32Value { value: n });
    let threshold = circuit_breakers::Thresholds {
        max_connections: value(limits.max_connections),
        max_pending_requests: value(limits.max_pending_requests),
        max_requests: value(limits.max_requests),
        ..Default::default()
    };
    let any = threshold.max_connections.is_some()
        || threshold.max_pending_requests.is_some()
        || threshold.max_requests.is_some();
    CircuitBreakers {
        thresholds: if any { vec![threshold] } else { Vec::new() },
        ..Default::default()
    }
}

/// Envoy's outlier detection for Consul's `PassiveHealthCheck` (Consul's
/// `ToOutlierDetection`): only what is set, the rest Envoy's defaults.
pub(super) fn outlier_detection(settings: &OutlierSettings) -> OutlierDetection {
    let count = |n: Option<u32>| n.map(|value| UInt32Value { value });
    OutlierDetection {
        interval: settings.interval_ms.map(duration_ms),
        consecutive_5xx: count(settings.consecutive_5xx),
        enforcing_consecutive_5xx: count(settings.enforcing_consecutive_5xx),
        max_ejection_percent: count(settings.max_ejection_percent),
        base_ejection_time: settings.base_ejection_time_ms.map(duration_ms),
        ..Default::default()
    }
}

/// One resolver of an upstream's discovery chain, as its cluster needs it: the target, the
/// failover targets the chain knows, and the SPIFFE IDs a peer may present (the target's
/// first, each once).
pub(super) struct Resolver<'a> {
    pub primary: &'a Target,
    pub failovers: Vec<&'a Target>,
    pub spiffe_ids: Vec<String>,
}

/// The resolvers of `upstream`'s chain, in node order; a resolver of a target the chain
/// does not list is an error.
pub(super) fn resolvers(upstream: &Upstream) -> Result<Vec<Resolver<'_>>, String> {
    let mut out = Vec::new();
    for node in upstream.nodes.values() {
        let ChainNode::Resolver { target, failover } = node else {
            continue;
        };
        let primary = upstream.targets.get(target).ok_or_else(|| {
            format!(
                "upstream {:?}: resolver of unknown target {target:?}",
                upstream.id
            )
        })?;
        let failovers: Vec<&Target> = failover
            .iter()
            .filter_map(|id| upstream.targets.get(id))
            .collect();
        let mut spiffe_ids = vec![primary.spiffe_id.clone()];
        for t in &failovers {
            if !spiffe_ids.contains(&t.spiffe_id) {
                spiffe_ids.push(t.spiffe_id.clone());
            }
        }
        out.push(Resolver {
            primary,
            failovers,
            spiffe_ids,
        });
    }
    Ok(out)
}

fn upstream_clusters(
    snapshot: &Snapshot,
    upstream: &Upstream,
) -> Result<Vec<(String, Cluster)>, String> {
    let mut out = Vec::new();
    for Resolver {
        primary,
        spiffe_ids,
        ..
    } in resolvers(upstream)?
    {
        let protocol = if is_l7(&upstream.protocol) {
            upstream.protocol.as_str()
        } else {
            "tcp"
        };
        let name = primary.sni.clone();
        let cluster = Cluster {
            name: name.clone(),
            alt_stat_name: name.clone(),
            cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
            eds_cluster_config: Some(cluster::EdsClusterConfig {
                eds_config: Some(ads_config_source()),
                service_name: String::new(),
            }),
            connect_timeout: Some(duration_ms(primary.connect_timeout_ms)),
            circuit_breakers: Some(circuit_breakers(&upstream.limits)),
            outlier_detection: Some(outlier_detection(&upstream.limits.outlier)),
            // No panic routing: with every endpoint unhealthy, no traffic, as Consul sets it.
            common_lb_config: Some(cluster::CommonLbConfig {
                healthy_panic_threshold: Some(envoy_types::pb::envoy::r#type::v3::Percent {
                    value: 0.0,
                }),
                ..Default::default()
            }),
            transport_socket: Some(upstream_tls(snapshot, &primary.sni, &spiffe_ids, protocol)),
            typed_extension_protocol_options: http2_options(protocol),
            ..Default::default()
        };
        out.push((name, cluster));
    }
    match &upstream.escape_hatches.cluster_json {
        Some(json) => Ok(vec![escape_hatch_cluster(upstream, json, out)?]),
        None => Ok(out),
    }
}

/// An upstream's `envoy_cluster_json` cluster in place of the one its chain makes, with
/// that cluster's mTLS transport socket (Consul overlays it whatever the user gave).
fn escape_hatch_cluster(
    upstream: &Upstream,
    json: &str,
    generated: Vec<(String, Cluster)>,
) -> Result<(String, Cluster), String> {
    let mut custom = escape_hatch::cluster(json).map_err(|e| {
        format!(
            "failed to parse Upstreams[{}].Config.{UPSTREAM_CLUSTER_KEY}: {e}",
            upstream.id
        )
    })?;
    let [(_, generated)] = <[(String, Cluster); 1]>::try_from(generated).map_err(|_| {
        "cannot inject escape hatch cluster when discovery chain had no nodes".to_string()
    })?;
    custom.transport_socket = generated.transport_socket;
    Ok((custom.name.clone(), custom))
}
