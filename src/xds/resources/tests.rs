//! Resource names and shapes for hand-made snapshots: Consul's names, children, versions
//! that change with content only.

use super::*;
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
    }
}

fn snapshot(upstreams: Vec<Upstream>) -> Snapshot {
    Snapshot {
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
