//! Resource names and shapes for hand-made snapshots: Consul's names, children, versions
//! that change with content only.

use super::*;
use crate::xds::registration::ProxyKind;
use crate::xds::snapshot::{ChainNode, Endpoint, Inbound, Split, Target, Upstream};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::route::v3::{route, route_action, RouteConfiguration};

const TD: &str = "11111111-2222-3333-4444-555555555555.consul";

fn target(service: &str, endpoints: Vec<Endpoint>) -> Target {
    Target {
        id: format!("{service}.default.default.dc1"),
        service: service.into(),
        subset: String::new(),
        datacenter: "dc1".into(),
        sni: format!("{service}.default.dc1.internal.{TD}"),
        spiffe_id: crate::xds::snapshot::spiffe_id(TD, "dc1", service),
        connect_timeout_ms: 5000,
        mesh_gateway_mode: String::new(),
        endpoints,
    }
}

fn upstream(protocol: &str, nodes: Vec<(&str, ChainNode)>, targets: Vec<Target>) -> Upstream {
    Upstream {
        id: "db".into(),
        destination: "db".into(),
        datacenter: "dc1".into(),
        bind_address: "127.0.0.1".into(),
        bind_port: 9191,
        protocol: protocol.into(),
        start: nodes[0].0.to_string(),
        nodes: nodes.into_iter().map(|(k, n)| (k.to_string(), n)).collect(),
        targets: targets.into_iter().map(|t| (t.id.clone(), t)).collect(),
        limits: Default::default(),
        escape_hatches: Default::default(),
    }
}

pub(crate) fn snapshot(upstreams: Vec<Upstream>) -> Snapshot {
    Snapshot {
        kind: ProxyKind::ConnectProxy,
        proxy_id: "web-sidecar-proxy".into(),
        service: "web-sidecar-proxy".into(),
        destination: "web".into(),
        datacenter: "dc1".into(),
        trust_domain: TD.into(),
        leaf_cert_pem: "CERT".into(),
        leaf_key_pem: "KEY".into(),
        roots_pem: vec!["ROOT".into()],
        inbound: Inbound {
            bind_address: "0.0.0.0".into(),
            bind_port: 21000,
            local_address: "127.0.0.1".into(),
            local_port: 8080,
            local_connect_timeout_ms: 5000,
            protocol: "tcp".into(),
            default_allow: true,
            sources: Vec::new(),
        },
        upstreams,
        ingress: Vec::new(),
        terminating: Vec::new(),
        mesh: Default::default(),
        unapplied: Vec::new(),
        expose: Vec::new(),
        exposes_checks: false,
        prepared_queries: Vec::new(),
        escape_hatches: Default::default(),
    }
}

fn healthy(port: u16) -> Endpoint {
    Endpoint {
        address: "10.0.0.1".into(),
        port,
        healthy: true,
        weight: 1,
    }
}

fn tcp_db() -> Upstream {
    upstream(
        "tcp",
        vec![(
            "resolver:db.default.default.dc1",
            ChainNode::Resolver {
                target: "db.default.default.dc1".into(),
                failover: Vec::new(),
            },
        )],
        vec![target("db", vec![healthy(21000)])],
    )
}

fn names(resources: &Resources, kind: ResourceType) -> Vec<String> {
    resources.of(kind).keys().cloned().collect()
}

#[test]
fn a_tcp_sidecar_has_consuls_names() {
    let r = build(&snapshot(vec![tcp_db()])).unwrap();
    let sni = format!("db.default.dc1.internal.{TD}");
    assert_eq!(
        names(&r, ResourceType::Cluster),
        vec![sni.clone(), "local_app".to_string()]
    );
    assert_eq!(names(&r, ResourceType::Endpoint), vec![sni.clone()]);
    assert_eq!(
        names(&r, ResourceType::Listener),
        vec![
            "db:127.0.0.1:9191".to_string(),
            "public_listener:0.0.0.0:21000".to_string()
        ]
    );
    assert!(names(&r, ResourceType::Route).is_empty());
    // An EDS cluster's child is its load assignment; a static one has none.
    assert_eq!(
        r.of(ResourceType::Cluster)[&sni].children,
        vec![sni.clone()]
    );
    assert!(r.of(ResourceType::Cluster)["local_app"].children.is_empty());
    let cluster = Cluster::decode(&*r.of(ResourceType::Cluster)[&sni].any.value).unwrap();
    assert_eq!(cluster.alt_stat_name, sni);
    let assignment =
        ClusterLoadAssignment::decode(&*r.of(ResourceType::Endpoint)[&sni].any.value).unwrap();
    assert_eq!(assignment.endpoints.len(), 1);
    assert_eq!(assignment.endpoints[0].lb_endpoints.len(), 1);
}

#[test]
fn versions_follow_content_only() {
    let a = build(&snapshot(vec![tcp_db()])).unwrap();
    let b = build(&snapshot(vec![tcp_db()])).unwrap();
    assert!(a.same_versions(&b));
    let mut changed = tcp_db();
    changed
        .targets
        .values_mut()
        .for_each(|t| t.endpoints[0].healthy = false);
    let c = build(&snapshot(vec![changed])).unwrap();
    assert!(!a.same_versions(&c));
    let sni = format!("db.default.dc1.internal.{TD}");
    assert_eq!(
        a.of(ResourceType::Cluster)[&sni].version,
        c.of(ResourceType::Cluster)[&sni].version,
        "the cluster did not change, only its endpoints"
    );
    assert_ne!(
        a.of(ResourceType::Endpoint)[&sni].version,
        c.of(ResourceType::Endpoint)[&sni].version
    );
}

#[test]
fn a_splitter_becomes_weighted_clusters_over_rds() {
    let up = upstream(
        "http",
        vec![
            (
                "splitter:db.default.default",
                ChainNode::Splitter(vec![
                    Split {
                        weight: 80.0,
                        next: "resolver:v1.db.default.default.dc1".into(),
                    },
                    Split {
                        weight: 20.0,
                        next: "resolver:v2.db.default.default.dc1".into(),
                    },
                ]),
            ),
            (
                "resolver:v1.db.default.default.dc1",
                ChainNode::Resolver {
                    target: "v1".into(),
                    failover: Vec::new(),
                },
            ),
            (
                "resolver:v2.db.default.default.dc1",
                ChainNode::Resolver {
                    target: "v2".into(),
                    failover: Vec::new(),
                },
            ),
        ],
        vec![
            Target {
                id: "v1".into(),
                sni: format!("v1.db.default.dc1.internal.{TD}"),
                ..target("db", Vec::new())
            },
            Target {
                id: "v2".into(),
                sni: format!("v2.db.default.dc1.internal.{TD}"),
                ..target("db", Vec::new())
            },
        ],
    );
    let r = build(&snapshot(vec![up])).unwrap();
    assert_eq!(names(&r, ResourceType::Route), vec!["db".to_string()]);
    assert_eq!(
        r.of(ResourceType::Listener)["db:127.0.0.1:9191"].children,
        vec!["db".to_string()]
    );
    let routes = RouteConfiguration::decode(&*r.of(ResourceType::Route)["db"].any.value).unwrap();
    let Some(route::Action::Route(action)) = &routes.virtual_hosts[0].routes[0].action else {
        panic!("{routes:?}");
    };
    let Some(route_action::ClusterSpecifier::WeightedClusters(weighted)) =
        &action.cluster_specifier
    else {
        panic!("{action:?}");
    };
    let weights: Vec<(String, u32)> = weighted
        .clusters
        .iter()
        .map(|c| (c.name.clone(), c.weight.as_ref().unwrap().value))
        .collect();
    assert_eq!(
        weights,
        vec![
            (format!("v1.db.default.dc1.internal.{TD}"), 8000),
            (format!("v2.db.default.dc1.internal.{TD}"), 2000)
        ]
    );
    // Empty targets still get their (empty) assignments.
    assert_eq!(r.of(ResourceType::Endpoint).len(), 2);
}

#[test]
fn a_failover_target_fills_the_next_priority() {
    let up = upstream(
        "tcp",
        vec![(
            "resolver:db.default.default.dc1",
            ChainNode::Resolver {
                target: "db.default.default.dc1".into(),
                failover: vec!["db.default.default.dc2".into()],
            },
        )],
        vec![
            target("db", vec![healthy(1)]),
            Target {
                id: "db.default.default.dc2".into(),
                datacenter: "dc2".into(),
                sni: format!("db.default.dc2.internal.{TD}"),
                spiffe_id: crate::xds::snapshot::spiffe_id(TD, "dc2", "db"),
                ..target("db", vec![healthy(2)])
            },
        ],
    );
    let r = build(&snapshot(vec![up])).unwrap();
    let sni = format!("db.default.dc1.internal.{TD}");
    let assignment =
        ClusterLoadAssignment::decode(&*r.of(ResourceType::Endpoint)[&sni].any.value).unwrap();
    let priorities: Vec<u32> = assignment.endpoints.iter().map(|l| l.priority).collect();
    assert_eq!(priorities, vec![0, 1]);
}

/// An ingress gateway exposing an HTTP `web` and a TCP `db`.
fn ingress_snapshot() -> Snapshot {
    use crate::xds::snapshot::{ingress_domains, IngressListener, IngressService};
    let web = Upstream {
        id: "web".into(),
        destination: "web".into(),
        bind_port: 0,
        ..upstream(
            "http",
            vec![(
                "resolver:web.default.default.dc1",
                ChainNode::Resolver {
                    target: "web.default.default.dc1".into(),
                    failover: Vec::new(),
                },
            )],
            vec![target("web", vec![healthy(21001)])],
        )
    };
    let db = Upstream {
        bind_port: 0,
        ..tcp_db()
    };
    let mut s = snapshot(vec![web, db]);
    s.kind = ProxyKind::IngressGateway;
    s.inbound.bind_port = 0;
    s.inbound.bind_address = "10.0.0.9".into();
    s.ingress = vec![
        IngressListener {
            bind_address: "10.0.0.9".into(),
            port: 8080,
            protocol: "http".into(),
            services: vec![IngressService {
                upstream: "web".into(),
                domains: ingress_domains("web", &[], 8080),
                request_headers: Default::default(),
                response_headers: Default::default(),
            }],
            tls: None,
        },
        IngressListener {
            bind_address: "10.0.0.9".into(),
            port: 9090,
            protocol: "tcp".into(),
            services: vec![IngressService {
                upstream: "db".into(),
                domains: ingress_domains("db", &[], 9090),
                request_headers: Default::default(),
                response_headers: Default::default(),
            }],
            tls: None,
        },
    ];
    s
}

#[test]
fn an_ingress_gateway_has_consuls_listeners_and_routes() {
    let r = build(&ingress_snapshot()).unwrap();
    assert_eq!(
        names(&r, ResourceType::Listener),
        vec![
            "db:10.0.0.9:9090".to_string(),
            "http:10.0.0.9:8080".to_string()
        ]
    );
    // No local application, one cluster per exposed service.
    assert_eq!(
        names(&r, ResourceType::Cluster),
        vec![
            format!("db.default.dc1.internal.{TD}"),
            format!("web.default.dc1.internal.{TD}")
        ]
    );
    assert_eq!(names(&r, ResourceType::Route), vec!["8080".to_string()]);
    assert_eq!(
        r.of(ResourceType::Listener)["http:10.0.0.9:8080"].children,
        vec!["8080".to_string()]
    );
    let route = RouteConfiguration::decode(&*r.of(ResourceType::Route)["8080"].any.value).unwrap();
    assert_eq!(route.virtual_hosts.len(), 1);
    assert_eq!(route.virtual_hosts[0].name, "web");
    assert_eq!(
        route.virtual_hosts[0].domains,
        vec![
            "web.ingress.*".to_string(),
            "web.ingress.*:8080".to_string()
        ]
    );
}

#[test]
fn ingress_hosts_replace_the_default_and_gain_the_port() {
    use crate::xds::snapshot::ingress_domains;
    assert_eq!(
        ingress_domains("api", &["api.example.com".into(), "x.test:81".into()], 8080),
        vec!["api.example.com", "x.test:81", "api.example.com:8080"]
    );
    assert_eq!(
        ingress_domains("api", &["[::1]:81".into(), "*".into()], 443),
        vec!["[::1]:81", "*", "*:443"]
    );
}

#[test]
fn a_tcp_ingress_listener_exposes_exactly_one_service() {
    let mut s = ingress_snapshot();
    let extra = s.ingress[0].services[0].clone();
    s.ingress[1].services.push(extra);
    let err = build(&s).unwrap_err();
    assert!(err.contains("exactly one service"), "{err}");
}

#[test]
fn a_terminating_gateway_has_one_sni_chain_per_service_and_a_fallback() {
    use crate::xds::snapshot::TerminatingService;
    use envoy_types::pb::envoy::config::listener::v3::Listener;
    let mut s = snapshot(Vec::new());
    s.kind = ProxyKind::TerminatingGateway;
    s.inbound.bind_address = "10.0.0.9".into();
    s.inbound.bind_port = 8443;
    let linked = |name: &str, ca_file: &str| TerminatingService {
        name: name.into(),
        sni: format!("{name}.default.dc1.internal.{TD}"),
        leaf_cert_pem: format!("{name} CERT"),
        leaf_key_pem: format!("{name} KEY"),
        sources: Vec::new(),
        ca_file: ca_file.into(),
        cert_file: String::new(),
        key_file: String::new(),
        tls_sni: String::new(),
        endpoints: vec![healthy(443)],
    };
    s.terminating = vec![linked("ledger", ""), linked("billing", "/ca.pem")];
    let r = build(&s).unwrap();
    let billing = format!("billing.default.dc1.internal.{TD}");
    let ledger = format!("ledger.default.dc1.internal.{TD}");
    assert_eq!(
        names(&r, ResourceType::Cluster),
        vec![billing.clone(), ledger.clone()]
    );
    assert_eq!(
        names(&r, ResourceType::Endpoint),
        vec![billing.clone(), ledger.clone()]
    );
    assert_eq!(
        names(&r, ResourceType::Listener),
        vec!["default:10.0.0.9:8443".to_string()]
    );
    let listener = Listener::decode(
        &*r.of(ResourceType::Listener)["default:10.0.0.9:8443"]
            .any
            .value,
    )
    .unwrap();
    let snis = chain_server_names(&listener);
    assert_eq!(
        snis,
        vec![vec![billing.clone()], vec![ledger.clone()], vec![]]
    );
    assert_eq!(
        listener.listener_filters[0].name,
        terminating::TLS_INSPECTOR_FILTER
    );
    // TLS origination only where the entry names a CA.
    let cluster =
        |name: &str| Cluster::decode(&*r.of(ResourceType::Cluster)[name].any.value).unwrap();
    assert!(cluster(&billing).transport_socket.is_some());
    assert!(cluster(&ledger).transport_socket.is_none());
}

#[test]
fn a_mesh_gateway_routes_by_sni_without_terminating() {
    use crate::xds::snapshot::{GatewayCluster, GatewayListener, MeshGatewayRoutes};
    use envoy_types::pb::envoy::config::listener::v3::Listener;
    let mut s = snapshot(Vec::new());
    s.kind = ProxyKind::MeshGateway;
    s.inbound.bind_port = 0;
    s.mesh = MeshGatewayRoutes {
        listeners: vec![
            GatewayListener {
                name: "default".into(),
                address: "10.0.0.9".into(),
                port: 8443,
            },
            GatewayListener {
                name: "wan".into(),
                address: "198.51.100.9".into(),
                port: 443,
            },
        ],
        services: vec![GatewayCluster {
            name: format!("db.default.dc1.internal.{TD}"),
            endpoints: vec![healthy(21000)],
        }],
        datacenters: vec![(
            "dc2".into(),
            GatewayCluster {
                name: format!("dc2.internal.{TD}"),
                endpoints: vec![healthy(443)],
            },
        )],
        servers: Vec::new(),
        server_datacenters: Vec::new(),
        any_server: None,
    };
    let r = build(&s).unwrap();
    assert_eq!(
        names(&r, ResourceType::Listener),
        vec!["default:10.0.0.9:8443", "wan:198.51.100.9:443"]
    );
    assert_eq!(
        names(&r, ResourceType::Cluster),
        vec![
            format!("db.default.dc1.internal.{TD}"),
            format!("dc2.internal.{TD}")
        ]
    );
    assert_eq!(
        names(&r, ResourceType::Endpoint),
        names(&r, ResourceType::Cluster)
    );
    for cluster in r.of(ResourceType::Cluster).values() {
        let cluster = Cluster::decode(&*cluster.any.value).unwrap();
        assert!(
            cluster.transport_socket.is_none(),
            "a gateway never speaks TLS itself"
        );
    }
    let listener = Listener::decode(
        &*r.of(ResourceType::Listener)["default:10.0.0.9:8443"]
            .any
            .value,
    )
    .unwrap();
    assert_eq!(
        listener.listener_filters[0].name,
        terminating::TLS_INSPECTOR_FILTER
    );
    let chains = &listener.filter_chains;
    assert_eq!(chains.len(), 2);
    assert_eq!(
        chains[0].filter_chain_match.as_ref().unwrap().server_names,
        vec![format!("*.dc2.internal.{TD}")]
    );
    assert!(chains.iter().all(|c| c.transport_socket.is_none()));
    assert!(chains[1].filter_chain_match.is_none());
    assert_eq!(chains[1].filters[0].name, terminating::SNI_CLUSTER_FILTER);
}

#[test]
fn a_mesh_gateway_exposing_the_servers_routes_their_names_as_consul_does() {
    use crate::xds::snapshot::{GatewayCluster, GatewayListener, MeshGatewayRoutes};
    use envoy_types::pb::envoy::config::listener::v3::Listener;
    let mut s = snapshot(Vec::new());
    s.kind = ProxyKind::MeshGateway;
    s.inbound.bind_port = 0;
    let cluster = |name: &str, port: u16| GatewayCluster {
        name: name.to_string(),
        endpoints: vec![healthy(port)],
    };
    s.mesh = MeshGatewayRoutes {
        listeners: vec![GatewayListener {
            name: "default".into(),
            address: "10.0.0.9".into(),
            port: 8443,
        }],
        services: Vec::new(),
        datacenters: vec![("dc2".into(), cluster(&format!("dc2.internal.{TD}"), 443))],
        servers: vec![
            cluster("s1.server.dc1.consul", 8300),
            cluster("s2.server.dc1.consul", 8300),
        ],
        server_datacenters: vec![("dc2".into(), cluster("server.dc2.consul", 443))],
        any_server: Some(GatewayCluster {
            name: "server.dc1.consul".into(),
            endpoints: vec![healthy(8300), healthy(8301)],
        }),
    };
    let r = build(&s).unwrap();
    assert_eq!(
        names(&r, ResourceType::Cluster),
        vec![
            format!("dc2.internal.{TD}"),
            "s1.server.dc1.consul".to_string(),
            "s2.server.dc1.consul".to_string(),
            "server.dc1.consul".to_string(),
            "server.dc2.consul".to_string(),
        ]
    );
    assert_eq!(
        names(&r, ResourceType::Endpoint),
        names(&r, ResourceType::Cluster)
    );
    let listener = Listener::decode(
        &*r.of(ResourceType::Listener)["default:10.0.0.9:8443"]
            .any
            .value,
    )
    .unwrap();
    let matched = chain_server_names(&listener);
    assert_eq!(
        matched,
        vec![
            vec![format!("*.dc2.internal.{TD}")],
            vec!["*.server.dc2.consul".to_string()],
            vec!["s1.server.dc1.consul".to_string()],
            vec!["s2.server.dc1.consul".to_string()],
            Vec::new(),
        ],
        "Consul's order: remote services, remote servers, local servers, then the SNI fallback"
    );
    assert!(listener
        .filter_chains
        .iter()
        .all(|c| c.transport_socket.is_none()));
}

/// Each filter chain's matched server names, in chain order (empty for a chain without a
/// match, such as the SNI fallback).
fn chain_server_names(
    listener: &envoy_types::pb::envoy::config::listener::v3::Listener,
) -> Vec<Vec<String>> {
    listener
        .filter_chains
        .iter()
        .map(|c| {
            c.filter_chain_match
                .as_ref()
                .map(|m| m.server_names.clone())
                .unwrap_or_default()
        })
        .collect()
}

// Expose paths and prepared-query upstreams (helper r12expose).

fn hcm_of(
    listener: &envoy_types::pb::envoy::config::listener::v3::Listener,
) -> envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager{
    use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
    let Some(ConfigType::TypedConfig(any)) = &listener.filter_chains[0].filters[0].config_type
    else {
        panic!("no typed config");
    };
    prost::Message::decode(&*any.value).unwrap()
}

#[test]
fn an_exposed_path_is_a_plain_listener_routing_only_its_path() {
    use crate::xds::expose::ExposePath;
    use envoy_types::pb::envoy::config::listener::v3::Listener;
    use envoy_types::pb::envoy::config::route::v3::route_match::PathSpecifier;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::RouteSpecifier;
    let mut s = snapshot(Vec::new());
    s.expose = vec![
        ExposePath {
            path: "/health".into(),
            local_path_port: 8080,
            listener_port: 21500,
            protocol: String::new(),
            allowed_sources: Vec::new(),
        },
        // As `Expose.Checks` derives a gRPC check's path.
        ExposePath {
            path: "/grpc.health.v1.Health/Check".into(),
            local_path_port: 9090,
            listener_port: 21501,
            protocol: "http2".into(),
            allowed_sources: vec![("127.0.0.1".into(), 8), ("10.0.0.7".into(), 32)],
        },
    ];
    let r = build(&s).unwrap();
    assert_eq!(
        names(&r, ResourceType::Listener),
        vec![
            "exposed_path_grpchealthv1HealthCheck:0.0.0.0:21501".to_string(),
            "exposed_path_health:0.0.0.0:21500".to_string(),
            "public_listener:0.0.0.0:21000".to_string(),
        ]
    );
    // The service's own port goes to local_app; another port gets a cluster of its own.
    assert_eq!(
        names(&r, ResourceType::Cluster),
        vec!["exposed_cluster_9090".to_string(), "local_app".to_string()]
    );
    let cluster = Cluster::decode(
        &*r.of(ResourceType::Cluster)["exposed_cluster_9090"]
            .any
            .value,
    )
    .unwrap();
    assert!(
        !cluster.typed_extension_protocol_options.is_empty(),
        "HTTP/2"
    );
    let listener =
        |name: &str| Listener::decode(&*r.of(ResourceType::Listener)[name].any.value).unwrap();
    let health = listener("exposed_path_health:0.0.0.0:21500");
    assert!(health.filter_chains[0].transport_socket.is_none(), "no TLS");
    assert_eq!(health.filter_chains[0].filters.len(), 1, "no RBAC");
    let manager = hcm_of(&health);
    assert_eq!(manager.stat_prefix, "exposed_path_filter_health_21500");
    assert!(manager.http2_protocol_options.is_none());
    let Some(RouteSpecifier::RouteConfig(routes)) = manager.route_specifier else {
        panic!("an inline route configuration");
    };
    assert_eq!(routes.name, "exposed_path_filter_health_21500");
    let host = &routes.virtual_hosts[0];
    assert_eq!(host.domains, vec!["*".to_string()]);
    assert_eq!(host.routes.len(), 1, "exactly the path, no catch-all");
    assert_eq!(
        host.routes[0].r#match.as_ref().unwrap().path_specifier,
        Some(PathSpecifier::Path("/health".into()))
    );
    let Some(route::Action::Route(action)) = &host.routes[0].action else {
        panic!("a route");
    };
    assert_eq!(
        action.cluster_specifier,
        Some(route_action::ClusterSpecifier::Cluster("local_app".into()))
    );
    assert!(
        health.filter_chains[0].filter_chain_match.is_none(),
        "a registered path takes any source"
    );
    let grpc_listener = listener("exposed_path_grpchealthv1HealthCheck:0.0.0.0:21501");
    let sources: Vec<(String, u32)> = grpc_listener.filter_chains[0]
        .filter_chain_match
        .as_ref()
        .expect("a check's path takes only the agent's sources")
        .source_prefix_ranges
        .iter()
        .map(|range| {
            (
                range.address_prefix.clone(),
                range.prefix_len.map_or(0, |len| len.value),
            )
        })
        .collect();
    assert_eq!(
        sources,
        vec![("127.0.0.1".to_string(), 8), ("10.0.0.7".to_string(), 32)]
    );
    let grpc = hcm_of(&grpc_listener);
    assert!(grpc.http2_protocol_options.is_some());
    // A gateway exposes nothing.
    s.kind = ProxyKind::IngressGateway;
    assert!(expose::listeners(&s).is_empty() && expose::clusters(&s).is_empty());
}

#[test]
fn a_prepared_query_upstream_has_consuls_names_and_sans() {
    use crate::xds::prepared_query::QueryUpstream;
    use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
    use envoy_types::pb::envoy::config::listener::v3::Listener;
    use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
        tcp_proxy, TcpProxy,
    };
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        common_tls_context::ValidationContextType, UpstreamTlsContext,
    };
    let sni = format!("db-query.default.dc1.query.{TD}");
    let mut s = snapshot(Vec::new());
    s.prepared_queries = vec![QueryUpstream {
        id: "prepared_query:db-query".into(),
        query: "db-query".into(),
        bind_address: "127.0.0.1".into(),
        bind_port: 9292,
        sni: sni.clone(),
        spiffe_ids: vec![crate::xds::snapshot::spiffe_id(TD, "dc1", "db")],
        connect_timeout_ms: 5000,
        endpoints: vec![healthy(21000)],
        unserved: String::new(),
    }];
    let r = build(&s).unwrap();
    assert_eq!(
        names(&r, ResourceType::Cluster),
        vec![sni.clone(), "local_app".to_string()]
    );
    assert_eq!(names(&r, ResourceType::Endpoint), vec![sni.clone()]);
    assert_eq!(
        r.of(ResourceType::Cluster)[&sni].children,
        vec![sni.clone()]
    );
    let listener_name = "prepared_query:db-query:127.0.0.1:9292";
    assert!(r.of(ResourceType::Listener).contains_key(listener_name));
    let listener =
        Listener::decode(&*r.of(ResourceType::Listener)[listener_name].any.value).unwrap();
    let Some(ConfigType::TypedConfig(any)) = &listener.filter_chains[0].filters[0].config_type
    else {
        panic!("no typed config");
    };
    let proxy = TcpProxy::decode(&*any.value).unwrap();
    assert_eq!(proxy.stat_prefix, "upstream.prepared_query:db-query");
    assert_eq!(
        proxy.cluster_specifier,
        Some(tcp_proxy::ClusterSpecifier::Cluster(sni.clone()))
    );
    let cluster = Cluster::decode(&*r.of(ResourceType::Cluster)[&sni].any.value).unwrap();
    let socket = cluster.transport_socket.unwrap();
    let Some(envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(
        any,
    )) = socket.config_type
    else {
        panic!("a TLS context");
    };
    let tls = UpstreamTlsContext::decode(&*any.value).unwrap();
    assert_eq!(tls.sni, sni);
    let Some(ValidationContextType::ValidationContext(validation)) =
        tls.common_tls_context.unwrap().validation_context_type
    else {
        panic!("a validation context");
    };
    let sans: Vec<_> = validation
        .match_typed_subject_alt_names
        .iter()
        .map(|m| format!("{:?}", m.matcher))
        .collect();
    assert_eq!(sans.len(), 1);
    assert!(sans[0].contains(&format!("spiffe://{TD}/ns/default/dc/dc1/svc/db")));
    let assignment =
        ClusterLoadAssignment::decode(&*r.of(ResourceType::Endpoint)[&sni].any.value).unwrap();
    assert_eq!(assignment.endpoints[0].lb_endpoints.len(), 1);
}

// The gRPC flavour (proxyless gRPC clients): names, api listeners, certificate providers,
// weighted localities.
mod grpc_flavour {
    use super::*;
    use envoy_types::pb::envoy::config::listener::v3::Listener;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
        http_connection_manager::RouteSpecifier, HttpConnectionManager,
    };
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        common_tls_context::ValidationContextType, UpstreamTlsContext,
    };
    use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;

    fn listener(r: &Resources, name: &str) -> (Listener, HttpConnectionManager) {
        let listener = Listener::decode(&*r.of(ResourceType::Listener)[name].any.value).unwrap();
        let api = listener
            .api_listener
            .clone()
            .expect("an api listener")
            .api_listener;
        let manager = HttpConnectionManager::decode(&*api.expect("a manager").value).unwrap();
        (listener, manager)
    }

    #[test]
    fn grpc_libraries_are_told_from_envoy_by_their_user_agent() {
        for name in ["gRPC C-core", "grpc-java", "gRPC Go", "gRPC Python"] {
            assert!(grpc::is_grpc_client(name), "{name}");
        }
        for name in ["envoy", "", "grp"] {
            assert!(!grpc::is_grpc_client(name), "{name}");
        }
    }

    #[test]
    fn a_tcp_upstream_is_an_api_listener_an_eds_cluster_and_weighted_endpoints() {
        let r = grpc::build(&snapshot(vec![tcp_db()])).unwrap();
        let sni = format!("db.default.dc1.internal.{TD}");
        // No public listener, no local_app: a proxyless client only dials out.
        assert_eq!(names(&r, ResourceType::Listener), vec!["db".to_string()]);
        assert_eq!(names(&r, ResourceType::Cluster), vec![sni.clone()]);
        assert_eq!(names(&r, ResourceType::Endpoint), vec![sni.clone()]);
        assert!(names(&r, ResourceType::Route).is_empty());

        let (listener, manager) = listener(&r, "db");
        assert!(listener.address.is_none() && listener.filter_chains.is_empty());
        assert_eq!(
            manager.http_filters.last().map(|f| f.name.as_str()),
            Some("envoy.filters.http.router")
        );
        let Some(RouteSpecifier::RouteConfig(routes)) = &manager.route_specifier else {
            panic!("an inline route configuration: {manager:?}");
        };
        let Some(route::Action::Route(action)) = &routes.virtual_hosts[0].routes[0].action else {
            panic!("{routes:?}");
        };
        assert_eq!(
            action.cluster_specifier,
            Some(route_action::ClusterSpecifier::Cluster(sni.clone()))
        );

        let cluster = Cluster::decode(&*r.of(ResourceType::Cluster)[&sni].any.value).unwrap();
        let socket = cluster.transport_socket.expect("mTLS");
        assert_eq!(socket.name, "envoy.transport_sockets.tls");
        let Some(
            envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(
                any,
            ),
        ) = socket.config_type
        else {
            panic!("a typed TLS context");
        };
        let tls = UpstreamTlsContext::decode(&*any.value).unwrap();
        let common = tls.common_tls_context.unwrap();
        // Certificates from the bootstrap's file watcher, never inline PEM.
        assert!(common.tls_certificates.is_empty());
        assert_eq!(
            common
                .tls_certificate_provider_instance
                .unwrap()
                .instance_name,
            grpc::CERTIFICATE_PROVIDER_INSTANCE
        );
        let Some(ValidationContextType::ValidationContext(validation)) =
            common.validation_context_type
        else {
            panic!("a validation context");
        };
        assert_eq!(
            validation
                .ca_certificate_provider_instance
                .unwrap()
                .instance_name,
            grpc::CERTIFICATE_PROVIDER_INSTANCE
        );
        assert!(validation.trusted_ca.is_none());
        #[allow(deprecated)]
        let sans: Vec<_> = validation
            .match_subject_alt_names
            .iter()
            .map(|m| m.match_pattern.clone())
            .collect();
        assert_eq!(
            sans,
            vec![Some(MatchPattern::Exact(crate::xds::snapshot::spiffe_id(
                TD, "dc1", "db"
            )))]
        );

        let assignment =
            ClusterLoadAssignment::decode(&*r.of(ResourceType::Endpoint)[&sni].any.value).unwrap();
        assert_eq!(assignment.endpoints.len(), 1);
        let locality = &assignment.endpoints[0];
        assert_eq!(
            locality.load_balancing_weight.as_ref().map(|w| w.value),
            Some(1)
        );
        let named = locality.locality.as_ref().unwrap();
        assert_eq!(
            (named.region.as_str(), named.zone.as_str()),
            ("dc1", "db.default.default.dc1")
        );
        assert_eq!(locality.lb_endpoints.len(), 1);
    }

    #[test]
    fn failover_targets_are_named_localities_at_the_next_priorities() {
        let up = upstream(
            "tcp",
            vec![(
                "resolver:db.default.default.dc1",
                ChainNode::Resolver {
                    target: "db.default.default.dc1".into(),
                    failover: vec!["empty".into(), "db.default.default.dc2".into()],
                },
            )],
            vec![
                target("db", vec![healthy(21000)]),
                Target {
                    id: "empty".into(),
                    ..target("db", Vec::new())
                },
                Target {
                    id: "db.default.default.dc2".into(),
                    datacenter: "dc2".into(),
                    spiffe_id: crate::xds::snapshot::spiffe_id(TD, "dc2", "db"),
                    ..target("db", vec![healthy(21001)])
                },
            ],
        );
        let r = grpc::build(&snapshot(vec![up])).unwrap();
        let sni = format!("db.default.dc1.internal.{TD}");
        let assignment =
            ClusterLoadAssignment::decode(&*r.of(ResourceType::Endpoint)[&sni].any.value).unwrap();
        // The failover without instances hands its level to the next one.
        let levels: Vec<(u32, String, String)> = assignment
            .endpoints
            .iter()
            .map(|l| {
                let named = l.locality.clone().unwrap();
                (l.priority, named.region, named.zone)
            })
            .collect();
        assert_eq!(
            levels,
            vec![
                (0, "dc1".to_string(), "db.default.default.dc1".to_string()),
                (1, "dc2".to_string(), "db.default.default.dc2".to_string()),
            ]
        );
        assert!(assignment
            .endpoints
            .iter()
            .all(|l| l.load_balancing_weight.is_some()));
    }

    #[test]
    fn an_l7_upstream_carries_its_chain_inline() {
        let r = grpc::build(&snapshot(vec![upstream(
            "grpc",
            vec![(
                "resolver:db.default.default.dc1",
                ChainNode::Resolver {
                    target: "db.default.default.dc1".into(),
                    failover: Vec::new(),
                },
            )],
            vec![target("db", vec![healthy(21000)])],
        )]))
        .unwrap();
        let (_, manager) = listener(&r, "db");
        let Some(RouteSpecifier::RouteConfig(routes)) = &manager.route_specifier else {
            panic!("{manager:?}");
        };
        assert_eq!(routes.virtual_hosts[0].domains, vec!["*".to_string()]);
        assert!(names(&r, ResourceType::Route).is_empty());
    }
}

mod escape_hatches;
