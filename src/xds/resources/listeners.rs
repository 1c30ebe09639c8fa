//! Listeners (Consul's `listeners.go`): `public_listener:<addr>:<port>` for inbound mTLS,
//! and one outbound listener `<upstream id>:<addr>:<port>` per upstream.
//!
//! The public listener requires a client certificate that chains to the roots, then
//! enforces intentions: a network RBAC filter before `tcp_proxy` to `local_app` for a TCP
//! service, an HTTP connection manager with an HTTP RBAC filter (L7 permissions) for an
//! HTTP-family one. An upstream listener proxies TCP to its chain's cluster, or for an L7
//! chain runs an HTTP connection manager whose routes come over RDS under the upstream's
//! ID.
//!
//! Escape hatches replace listeners with the user's Envoy JSON ([`escape_hatch`]): an
//! upstream's is served as given, as Consul serves it; the public listener's still gets the
//! intentions' RBAC filter first and the inbound mTLS on every filter chain, so a custom
//! listener can never take plain-text or unauthorized traffic. `envoy_listener_tracing_json`
//! sets the tracing of every HTTP connection manager praetor writes.

use super::clusters::{tcp_cluster_name, TLS_TRANSPORT_SOCKET};
use super::escape_hatch::{self, LISTENER_TRACING_KEY, PUBLIC_LISTENER_KEY, UPSTREAM_LISTENER_KEY};
use super::rbac::{self, HttpRbac, NetworkRbac};
use super::{ads_config_source, any, inline, socket_address, LOCAL_APP_CLUSTER, PUBLIC_LISTENER};
use crate::xds::registration::ProxyKind;
use crate::xds::snapshot::{is_l7, IngressListener, IngressTls, Snapshot, Upstream};
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::listener::v3::{filter, Filter, FilterChain, Listener};
use envoy_types::pb::envoy::config::route::v3::{
    route, route_action, route_match, Route, RouteAction, RouteConfiguration, RouteMatch,
    VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::{
        ForwardClientCertDetails, RouteSpecifier, SetCurrentClientCertDetails, Tracing,
    },
    http_filter, HttpConnectionManager, HttpFilter, Rds,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    common_tls_context::ValidationContextType, tls_parameters::TlsProtocol,
    CertificateValidationContext, CommonTlsContext, DownstreamTlsContext, TlsParameters,
};
use envoy_types::pb::google::protobuf::BoolValue;
use prost::{Message, Name};

pub const TCP_PROXY_FILTER: &str = "envoy.filters.network.tcp_proxy";
pub const HCM_FILTER: &str = "envoy.filters.network.http_connection_manager";
/// The connection manager's deprecated name, which Envoy still takes in user JSON.
const HCM_FILTER_OLD: &str = "envoy.http_connection_manager";
pub const ROUTER_FILTER: &str = "envoy.filters.http.router";

/// A listener and the route configurations it asks for over RDS.
pub struct BuiltListener {
    pub listener: Listener,
    pub routes: Vec<String>,
}

/// Every listener of `snapshot`; what an escape hatch could not do is added to `warnings`
/// (the builder stays pure: the watcher logs them).
pub fn build(
    snapshot: &Snapshot,
    warnings: &mut Vec<String>,
) -> Result<Vec<BuiltListener>, String> {
    let mut out = Vec::with_capacity(1 + snapshot.upstreams.len());
    let tracing = listener_tracing(snapshot, warnings);
    if snapshot.kind == ProxyKind::ConnectProxy {
        if let Some(json) = &snapshot.escape_hatches.public_listener_json {
            out.push(custom_public_listener(snapshot, json, warnings)?);
        } else if snapshot.inbound.bind_port != 0 {
            out.push(BuiltListener {
                listener: public_listener(snapshot, tracing.as_ref()),
                routes: Vec::new(),
            });
        }
    }
    for upstream in &snapshot.upstreams {
        if let Some(json) = &upstream.escape_hatches.listener_json {
            let listener = escape_hatch::listener(json).map_err(|e| {
                format!(
                    "failed to parse Upstreams[{}].Config.{UPSTREAM_LISTENER_KEY}: {e}",
                    upstream.id
                )
            })?;
            out.push(BuiltListener {
                routes: rds_route_names(&listener),
                listener,
            });
            continue;
        }
        if upstream.bind_port == 0 {
            continue;
        }
        out.push(upstream_listener(upstream, tracing.as_ref())?);
    }
    for listener in &snapshot.ingress {
        out.push(ingress_listener(snapshot, listener)?);
    }
    let mut names: Vec<&str> = out.iter().map(|b| b.listener.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    if names.len() != out.len() {
        return Err("two listeners of the proxy bind the same address and port".to_string());
    }
    Ok(out)
}

fn network_filter(name: &str, config: envoy_types::pb::google::protobuf::Any) -> Filter {
    Filter {
        name: name.to_string(),
        config_type: Some(filter::ConfigType::TypedConfig(config)),
    }
}

fn http_filter(name: &str, config: envoy_types::pb::google::protobuf::Any) -> HttpFilter {
    HttpFilter {
        name: name.to_string(),
        config_type: Some(http_filter::ConfigType::TypedConfig(config)),
        ..Default::default()
    }
}

pub(super) fn router_filter() -> HttpFilter {
    http_filter(ROUTER_FILTER, any(&Router::default()))
}

/// The tracing `envoy_listener_tracing_json` gives the HTTP connection managers; JSON that
/// does not decode leaves them Envoy's default, as Consul does, with a warning.
fn listener_tracing(snapshot: &Snapshot, warnings: &mut Vec<String>) -> Option<Tracing> {
    if snapshot.kind != ProxyKind::ConnectProxy {
        return None;
    }
    let json = snapshot.escape_hatches.listener_tracing_json.as_ref()?;
    match escape_hatch::tracing(json) {
        Ok(tracing) => Some(tracing),
        Err(e) => {
            warnings.push(format!(
                "failed to parse ListenerTracingJSON config (Proxy.Config.{LISTENER_TRACING_KEY}), the listeners keep Envoy's default tracing: {e}"
            ));
            None
        }
    }
}

/// The public listener's transport socket: mTLS with the leaf, client certificates checked
/// against the roots.
fn public_tls_socket(snapshot: &Snapshot) -> core::TransportSocket {
    core::TransportSocket {
        name: TLS_TRANSPORT_SOCKET.to_string(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(
            &public_tls(snapshot),
        ))),
    }
}

/// The sidecar's public listener from `envoy_public_listener_json` (Consul's
/// `makeListenerFromUserConfig`, then `finalizePublicListenerFromConfig`): the user's
/// listener with the intentions enforced first in every filter chain and the inbound mTLS on
/// every chain. For an HTTP-family service the HTTP RBAC filter goes first into each chain's
/// HTTP connection manager; a chain without one makes every chain take the network RBAC
/// filter first instead, with a warning, as Consul falls back.
fn custom_public_listener(
    snapshot: &Snapshot,
    json: &str,
    warnings: &mut Vec<String>,
) -> Result<BuiltListener, String> {
    let mut listener = escape_hatch::listener(json)
        .map_err(|e| format!("failed to parse Proxy.Config.{PUBLIC_LISTENER_KEY}: {e}"))?;
    let inbound = &snapshot.inbound;
    let mut http_rbac = false;
    if is_l7(&inbound.protocol) {
        let rules = rbac::rules(inbound, &snapshot.trust_domain, true);
        match with_http_rbac(&listener.filter_chains, rules) {
            Ok(chains) => {
                listener.filter_chains = chains;
                http_rbac = true;
            }
            Err(reason) => warnings.push(format!(
                "could not inject the HTTP RBAC filter to enforce intentions on user-provided '{PUBLIC_LISTENER_KEY}' config; falling back on the RBAC network filter instead: {reason}"
            )),
        }
    }
    if !http_rbac {
        let rbac = NetworkRbac {
            rules: Some(rbac::rules(inbound, &snapshot.trust_domain, false)),
            stat_prefix: "connect_authz".to_string(),
        };
        let filter = network_filter(rbac::NETWORK_RBAC_FILTER, any(&rbac));
        for chain in &mut listener.filter_chains {
            chain.filters.insert(0, filter.clone());
        }
    }
    let socket = public_tls_socket(snapshot);
    for chain in &mut listener.filter_chains {
        chain.transport_socket = Some(socket.clone());
    }
    Ok(BuiltListener {
        routes: rds_route_names(&listener),
        listener,
    })
}

/// The HTTP connection manager of a user's filter, if it is one.
fn connection_manager(filter: &Filter) -> Option<Result<HttpConnectionManager, String>> {
    if filter.name != HCM_FILTER && filter.name != HCM_FILTER_OLD {
        return None;
    }
    Some(match &filter.config_type {
        Some(filter::ConfigType::TypedConfig(config))
            if config.type_url == HttpConnectionManager::type_url() =>
        {
            HttpConnectionManager::decode(config.value.as_slice()).map_err(|e| e.to_string())
        }
        _ => Err(format!(
            "a {:?} filter with an unsupported config type",
            filter.name
        )),
    })
}

/// `chains` with the HTTP RBAC filter first in each chain's HTTP connection manager (Consul's
/// `injectHTTPFilterOnFilterChains`), or why a chain cannot take it.
fn with_http_rbac(chains: &[FilterChain], rules: rbac::Rules) -> Result<Vec<FilterChain>, String> {
    let filter = http_filter(
        rbac::HTTP_RBAC_FILTER,
        any(&HttpRbac { rules: Some(rules) }),
    );
    let mut out = chains.to_vec();
    for (index, chain) in out.iter_mut().enumerate() {
        let (position, manager) = chain
            .filters
            .iter()
            .enumerate()
            .find_map(|(i, f)| connection_manager(f).map(|m| (i, m)))
            .ok_or_else(|| {
                format!("filter chain {index} lacks either a {HCM_FILTER_OLD:?} or {HCM_FILTER:?} filter")
            })?;
        let mut manager = manager.map_err(|e| format!("filter chain {index} has {e}"))?;
        manager.http_filters.insert(0, filter.clone());
        let name = chain.filters[position].name.clone();
        chain.filters[position] = network_filter(&name, any(&manager));
    }
    Ok(out)
}

/// The route configurations a user's listener asks for over RDS.
fn rds_route_names(listener: &Listener) -> Vec<String> {
    let mut names = Vec::new();
    for chain in &listener.filter_chains {
        for filter in &chain.filters {
            if let Some(Ok(manager)) = connection_manager(filter) {
                if let Some(RouteSpecifier::Rds(rds)) = manager.route_specifier {
                    names.push(rds.route_config_name);
                }
            }
        }
    }
    names.sort_unstable();
    names.dedup();
    names
}

/// The sidecar's public listener: mTLS from other proxies, authorized by the intentions'
/// RBAC, forwarded to the local application (through HTTP routing for an L7 protocol).
fn public_listener(snapshot: &Snapshot, tracing: Option<&Tracing>) -> Listener {
    let inbound = &snapshot.inbound;
    let l7 = is_l7(&inbound.protocol);
    let rules = rbac::rules(inbound, &snapshot.trust_domain, l7);
    let filters = if l7 {
        public_http_filters(rules, tracing)
    } else {
        public_tcp_filters(rules)
    };
    Listener {
        name: format!(
            "{PUBLIC_LISTENER}:{}:{}",
            inbound.bind_address, inbound.bind_port
        ),
        address: Some(socket_address(&inbound.bind_address, inbound.bind_port)),
        traffic_direction: core::TrafficDirection::Inbound as i32,
        filter_chains: vec![FilterChain {
            filters,
            transport_socket: Some(public_tls_socket(snapshot)),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// An L7 public listener's filters: an HTTP connection manager with the RBAC filter, routing
/// every request to the local application and passing the client certificate on.
fn public_http_filters(rules: rbac::Rules, tracing: Option<&Tracing>) -> Vec<Filter> {
    let route_config = RouteConfiguration {
        name: PUBLIC_LISTENER.to_string(),
        virtual_hosts: vec![VirtualHost {
            name: PUBLIC_LISTENER.to_string(),
            domains: vec!["*".to_string()],
            routes: vec![Route {
                r#match: Some(RouteMatch {
                    path_specifier: Some(route_match::PathSpecifier::Prefix("/".to_string())),
                    ..Default::default()
                }),
                action: Some(route::Action::Route(RouteAction {
                    cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(
                        LOCAL_APP_CLUSTER.to_string(),
                    )),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        validate_clusters: Some(BoolValue { value: false }),
        ..Default::default()
    };
    let manager = HttpConnectionManager {
        stat_prefix: PUBLIC_LISTENER.to_string(),
        route_specifier: Some(RouteSpecifier::RouteConfig(route_config)),
        http_filters: vec![
            http_filter(
                rbac::HTTP_RBAC_FILTER,
                any(&HttpRbac { rules: Some(rules) }),
            ),
            router_filter(),
        ],
        forward_client_cert_details: ForwardClientCertDetails::AppendForward as i32,
        set_current_client_cert_details: Some(SetCurrentClientCertDetails {
            subject: Some(BoolValue { value: true }),
            cert: true,
            chain: true,
            dns: true,
            uri: true,
            ..Default::default()
        }),
        tracing: tracing.cloned(),
        ..Default::default()
    };
    vec![network_filter(HCM_FILTER, any(&manager))]
}

/// An L4 public listener's filters: the network RBAC filter, then a TCP proxy to the local
/// application.
fn public_tcp_filters(rules: rbac::Rules) -> Vec<Filter> {
    let rbac = NetworkRbac {
        rules: Some(rules),
        stat_prefix: "connect_authz".to_string(),
    };
    let proxy = TcpProxy {
        stat_prefix: PUBLIC_LISTENER.to_string(),
        cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(
            LOCAL_APP_CLUSTER.to_string(),
        )),
        ..Default::default()
    };
    vec![
        network_filter(rbac::NETWORK_RBAC_FILTER, any(&rbac)),
        network_filter(TCP_PROXY_FILTER, any(&proxy)),
    ]
}

/// The public listener's TLS: its leaf, the CA roots as the only trust, a client
/// certificate required.
fn public_tls(snapshot: &Snapshot) -> DownstreamTlsContext {
    DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_params: Some(TlsParameters::default()),
            tls_certificates: vec![super::leaf_certificate(snapshot)],
            validation_context_type: Some(ValidationContextType::ValidationContext(
                CertificateValidationContext {
                    trusted_ca: Some(inline(&snapshot.roots_bundle())),
                    ..Default::default()
                },
            )),
            alpn_protocols: if matches!(snapshot.inbound.protocol.as_str(), "http2" | "grpc") {
                vec!["h2".to_string(), "http/1.1".to_string()]
            } else {
                Vec::new()
            },
            ..Default::default()
        }),
        require_client_certificate: Some(BoolValue { value: true }),
        ..Default::default()
    }
}

/// Consul's stat prefix of an upstream: `upstream.<svc>.<namespace>.<partition>.<dc>`.
fn upstream_stat_prefix(upstream: &Upstream) -> String {
    format!(
        "upstream.{}.default.default.{}",
        upstream.destination, upstream.datacenter
    )
}

fn upstream_listener(
    upstream: &Upstream,
    tracing: Option<&Tracing>,
) -> Result<BuiltListener, String> {
    let stat_prefix = upstream_stat_prefix(upstream);
    let (filter, routes) = if is_l7(&upstream.protocol) {
        let manager = HttpConnectionManager {
            stat_prefix,
            route_specifier: Some(RouteSpecifier::Rds(Rds {
                config_source: Some(ads_config_source()),
                route_config_name: upstream.id.clone(),
            })),
            http_filters: vec![router_filter()],
            tracing: tracing.cloned(),
            ..Default::default()
        };
        (
            network_filter(HCM_FILTER, any(&manager)),
            vec![upstream.id.clone()],
        )
    } else {
        let cluster = tcp_cluster_name(upstream)?;
        let proxy = TcpProxy {
            stat_prefix,
            cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(cluster)),
            ..Default::default()
        };
        (network_filter(TCP_PROXY_FILTER, any(&proxy)), Vec::new())
    };
    Ok(BuiltListener {
        listener: Listener {
            name: format!(
                "{}:{}:{}",
                upstream.id, upstream.bind_address, upstream.bind_port
            ),
            address: Some(socket_address(&upstream.bind_address, upstream.bind_port)),
            traffic_direction: core::TrafficDirection::Outbound as i32,
            filter_chains: vec![FilterChain {
                filters: vec![filter],
                ..Default::default()
            }],
            ..Default::default()
        },
        routes,
    })
}

/// The stat prefix of an ingress gateway's HTTP listener, Consul's.
const INGRESS_STAT_PREFIX: &str = "ingress_upstream_";

/// The name of the route configuration an ingress gateway's HTTP listener on `port` asks
/// for: the port, as Consul names it.
pub fn ingress_route_name(port: u16) -> String {
    port.to_string()
}

/// Envoy's protocol version for one of Consul's names (`TLS_AUTO`, `TLSv1_0` … `TLSv1_3`);
/// unset and unknown names (the entry was validated when written) leave Envoy's default.
fn tls_protocol(name: &str) -> Option<TlsProtocol> {
    Some(match name {
        "TLS_AUTO" => TlsProtocol::TlsAuto,
        "TLSv1_0" => TlsProtocol::TlSv10,
        "TLSv1_1" => TlsProtocol::TlSv11,
        "TLSv1_2" => TlsProtocol::TlSv12,
        "TLSv1_3" => TlsProtocol::TlSv13,
        _ => return None,
    })
}

/// Envoy's (BoringSSL's) name of a TLS 1.2 cipher suite given by its IANA name, as
/// Consul translates the suites its entries accept.
pub fn envoy_cipher_suite(iana: &str) -> Option<&'static str> {
    Some(match iana {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA" => "ECDHE-ECDSA-AES128-SHA",
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA" => "ECDHE-RSA-AES128-SHA",
        "TLS_RSA_WITH_AES_128_GCM_SHA256" => "AES128-GCM-SHA256",
        "TLS_RSA_WITH_AES_128_CBC_SHA" => "AES128-SHA",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA" => "ECDHE-ECDSA-AES256-SHA",
        "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA" => "ECDHE-RSA-AES256-SHA",
        "TLS_RSA_WITH_AES_256_GCM_SHA384" => "AES256-GCM-SHA384",
        "TLS_RSA_WITH_AES_256_CBC_SHA" => "AES256-SHA",
        _ => return None,
    })
}

/// The TLS an ingress listener ends (Consul's downstream context of an ingress listener):
/// the gateway's leaf, the roots as validation context without asking clients for a
/// certificate, the entry's versions and cipher suites, and for an HTTP-family listener
/// the ALPN protocols Consul offers (`http/1.1`, with `h2` first for `http2` and `grpc`).
fn ingress_tls_socket(
    snapshot: &Snapshot,
    listener: &IngressListener,
    tls: &IngressTls,
) -> core::TransportSocket {
    let params = TlsParameters {
        tls_minimum_protocol_version: tls_protocol(&tls.min_version).unwrap_or_default() as i32,
        tls_maximum_protocol_version: tls_protocol(&tls.max_version).unwrap_or_default() as i32,
        cipher_suites: tls
            .cipher_suites
            .iter()
            .filter_map(|c| envoy_cipher_suite(c))
            .map(str::to_string)
            .collect(),
        ..Default::default()
    };
    let alpn_protocols = match listener.protocol.as_str() {
        "http" => vec!["http/1.1".to_string()],
        "http2" | "grpc" => vec!["h2".to_string(), "http/1.1".to_string()],
        _ => Vec::new(),
    };
    let context = DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_params: Some(params),
            tls_certificates: vec![super::leaf_certificate(snapshot)],
            validation_context_type: Some(ValidationContextType::ValidationContext(
                CertificateValidationContext {
                    trusted_ca: Some(inline(&snapshot.roots_bundle())),
                    ..Default::default()
                },
            )),
            alpn_protocols,
            ..Default::default()
        }),
        require_client_certificate: Some(BoolValue { value: false }),
        ..Default::default()
    };
    core::TransportSocket {
        name: TLS_TRANSPORT_SOCKET.to_string(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(
            &context,
        ))),
    }
}

/// One listener of an ingress gateway (Consul's `makeIngressGatewayListeners`). A TCP
/// listener exposes one service and is that service's upstream listener bound at the
/// gateway's address and the listener's port (`<service>:<addr>:<port>`); an HTTP-family
/// listener (`<protocol>:<addr>:<port>`) routes by `Host` over RDS, its route
/// configuration named by the port. Clients outside the mesh speak plain TCP or HTTP to
/// it, or TLS ended with the gateway's leaf when the entry enables it; upstream connections carry the gateway's leaf, so the services' sidecars decide by
/// intentions with the gateway as the source.
fn ingress_listener(
    snapshot: &Snapshot,
    listener: &IngressListener,
) -> Result<BuiltListener, String> {
    let upstream_of = |id: &str| {
        snapshot
            .upstreams
            .iter()
            .find(|u| u.id == id)
            .ok_or_else(|| format!("ingress listener {}: no upstream {id:?}", listener.port))
    };
    if !is_l7(&listener.protocol) {
        let [service] = listener.services.as_slice() else {
            return Err(format!(
                "ingress listener {}: a tcp listener exposes exactly one service, not {}",
                listener.port,
                listener.services.len()
            ));
        };
        let mut upstream = upstream_of(&service.upstream)?.clone();
        upstream.bind_address = listener.bind_address.clone();
        upstream.bind_port = listener.port;
        // The chain of a TCP listener is served as TCP whatever the service's protocol.
        upstream.protocol = "tcp".to_string();
        let mut built = upstream_listener(&upstream, None)?;
        if let Some(tls) = &listener.tls {
            for chain in &mut built.listener.filter_chains {
                chain.transport_socket = Some(ingress_tls_socket(snapshot, listener, tls));
            }
        }
        return Ok(built);
    }
    let route = ingress_route_name(listener.port);
    let manager = HttpConnectionManager {
        stat_prefix: format!("{INGRESS_STAT_PREFIX}{}", listener.port),
        route_specifier: Some(RouteSpecifier::Rds(Rds {
            config_source: Some(ads_config_source()),
            route_config_name: route.clone(),
        })),
        http_filters: vec![router_filter()],
        ..Default::default()
    };
    Ok(BuiltListener {
        listener: Listener {
            name: format!(
                "{}:{}:{}",
                listener.protocol, listener.bind_address, listener.port
            ),
            address: Some(socket_address(&listener.bind_address, listener.port)),
            traffic_direction: core::TrafficDirection::Outbound as i32,
            filter_chains: vec![FilterChain {
                filters: vec![network_filter(HCM_FILTER, any(&manager))],
                transport_socket: listener
                    .tls
                    .as_ref()
                    .map(|tls| ingress_tls_socket(snapshot, listener, tls)),
                ..Default::default()
            }],
            ..Default::default()
        },
        routes: vec![route],
    })
}
