//! Escape hatches through the builders: the user's JSON becomes the resource, the public
//! listener still gets the intentions' RBAC and the inbound mTLS, an upstream cluster the
//! upstream's mTLS, and JSON that does not decode fails the build (or, for tracing, falls
//! back with a warning).

use super::*;
use crate::xds::resources::rbac::{HTTP_RBAC_FILTER, NETWORK_RBAC_FILTER};
use envoy_types::pb::envoy::config::core::v3::transport_socket;
use envoy_types::pb::envoy::config::listener::v3::{filter::ConfigType, Listener};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    DownstreamTlsContext, UpstreamTlsContext,
};

const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

/// A listener named `name` with one chain holding `filter`.
fn listener_json(name: &str, filter: serde_json::Value) -> String {
    serde_json::json!({
        "@type": LISTENER,
        "name": name,
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": 21000}},
        "filter_chains": [{"filters": [filter]}],
    })
    .to_string()
}

fn tcp_proxy_filter(cluster: &str) -> serde_json::Value {
    serde_json::json!({
        "name": "envoy.filters.network.tcp_proxy",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
            "stat_prefix": "custom",
            "cluster": cluster,
        }
    })
}

fn hcm_filter() -> serde_json::Value {
    serde_json::json!({
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": "custom_http",
            "rds": {"route_config_name": "custom_routes", "config_source": {"ads": {}, "resource_api_version": "V3"}},
            "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]
        }
    })
}

fn decoded_listener(r: &Resources, name: &str) -> Listener {
    Listener::decode(&*r.of(ResourceType::Listener)[name].any.value).unwrap()
}

fn filter_names(listener: &Listener) -> Vec<Vec<String>> {
    listener
        .filter_chains
        .iter()
        .map(|c| c.filters.iter().map(|f| f.name.clone()).collect())
        .collect()
}

fn manager_of(listener: &Listener) -> HttpConnectionManager {
    let filter = listener.filter_chains[0]
        .filters
        .iter()
        .find(|f| f.name == listeners::HCM_FILTER)
        .unwrap();
    let Some(ConfigType::TypedConfig(config)) = &filter.config_type else {
        panic!("{filter:?}");
    };
    HttpConnectionManager::decode(config.value.as_slice()).unwrap()
}

/// The inbound TLS of every chain of `listener`.
fn downstream_tls(listener: &Listener) -> Vec<DownstreamTlsContext> {
    listener
        .filter_chains
        .iter()
        .map(|chain| {
            let socket = chain.transport_socket.as_ref().expect("a transport socket");
            let Some(transport_socket::ConfigType::TypedConfig(config)) = &socket.config_type
            else {
                panic!("{socket:?}");
            };
            DownstreamTlsContext::decode(config.value.as_slice()).unwrap()
        })
        .collect()
}

#[test]
fn a_custom_tcp_public_listener_gets_the_network_rbac_and_mtls_on_every_chain() {
    let mut s = snapshot(vec![tcp_db()]);
    let mut json: serde_json::Value = serde_json::from_str(&listener_json(
        "custom_public",
        tcp_proxy_filter("local_app"),
    ))
    .unwrap();
    // A second chain, matched by server name, gets the same injections.
    let second = serde_json::json!({
        "filter_chain_match": {"server_names": ["other.example"]},
        "filters": [tcp_proxy_filter("local_app")],
    });
    json["filter_chains"].as_array_mut().unwrap().push(second);
    s.escape_hatches.public_listener_json = Some(json.to_string());
    let r = build(&s).unwrap();
    assert_eq!(
        names(&r, ResourceType::Listener),
        vec!["custom_public".to_string(), "db:127.0.0.1:9191".to_string()]
    );
    let listener = decoded_listener(&r, "custom_public");
    let expected = vec![
        NETWORK_RBAC_FILTER.to_string(),
        listeners::TCP_PROXY_FILTER.to_string(),
    ];
    assert_eq!(filter_names(&listener), vec![expected.clone(), expected]);
    for tls in downstream_tls(&listener) {
        assert!(tls.require_client_certificate.unwrap().value);
        let common = tls.common_tls_context.unwrap();
        assert_eq!(common.tls_certificates.len(), 1);
    }
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}

#[test]
fn a_custom_http_public_listener_gets_the_http_rbac_first_in_its_connection_manager() {
    let mut s = snapshot(vec![tcp_db()]);
    s.inbound.protocol = "http".into();
    s.escape_hatches.public_listener_json = Some(listener_json("custom_http", hcm_filter()));
    let r = build(&s).unwrap();
    let listener = decoded_listener(&r, "custom_http");
    assert_eq!(
        filter_names(&listener),
        vec![vec![listeners::HCM_FILTER.to_string()]]
    );
    let manager = manager_of(&listener);
    let http: Vec<&str> = manager
        .http_filters
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(http, vec![HTTP_RBAC_FILTER, listeners::ROUTER_FILTER]);
    assert_eq!(manager.stat_prefix, "custom_http");
    // The listener asks for its route configuration over RDS: a child of the listener.
    assert_eq!(
        r.of(ResourceType::Listener)["custom_http"].children,
        vec!["custom_routes".to_string()]
    );
    assert_eq!(downstream_tls(&listener).len(), 1);
}

#[test]
fn an_http_service_whose_custom_listener_has_no_connection_manager_falls_back_to_l4_rbac() {
    let mut s = snapshot(vec![tcp_db()]);
    s.inbound.protocol = "http".into();
    s.escape_hatches.public_listener_json = Some(listener_json(
        "custom_public",
        tcp_proxy_filter("local_app"),
    ));
    let r = build(&s).unwrap();
    let listener = decoded_listener(&r, "custom_public");
    assert_eq!(filter_names(&listener)[0][0], NETWORK_RBAC_FILTER);
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(
        r.warnings[0].contains("falling back on the RBAC network filter")
            && r.warnings[0].contains("filter chain 0 lacks"),
        "{:?}",
        r.warnings
    );
}

#[test]
fn a_custom_local_cluster_replaces_local_app_as_given() {
    let mut s = snapshot(vec![tcp_db()]);
    s.escape_hatches.local_cluster_json = Some(
        serde_json::json!({
            "@type": CLUSTER, "name": "local_app", "type": "STATIC", "connect_timeout": "0.333s",
            "load_assignment": {"cluster_name": "local_app", "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 8181}}}}
            ]}]}
        })
        .to_string(),
    );
    let r = build(&s).unwrap();
    let cluster = Cluster::decode(&*r.of(ResourceType::Cluster)["local_app"].any.value).unwrap();
    assert_eq!(cluster.connect_timeout.unwrap().nanos, 333_000_000);
    assert!(cluster.transport_socket.is_none());
    assert!(r.of(ResourceType::Cluster)["local_app"].children.is_empty());
}

#[test]
fn a_custom_upstream_cluster_gets_the_upstreams_mtls_and_names_its_endpoints() {
    let mut db = tcp_db();
    db.escape_hatches.cluster_json = Some(
        serde_json::json!({
            "@type": CLUSTER, "name": "db_custom", "type": "EDS", "connect_timeout": "7s",
            "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}},
            // Whatever the user gives is replaced by the upstream's mTLS.
            "transport_socket": {"name": "raw", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"}}
        })
        .to_string(),
    );
    let r = build(&snapshot(vec![db])).unwrap();
    assert_eq!(
        names(&r, ResourceType::Cluster),
        vec!["db_custom".to_string(), "local_app".to_string()]
    );
    assert_eq!(
        names(&r, ResourceType::Endpoint),
        vec!["db_custom".to_string()]
    );
    let resource = &r.of(ResourceType::Cluster)["db_custom"];
    assert_eq!(resource.children, vec!["db_custom".to_string()]);
    let cluster = Cluster::decode(&*resource.any.value).unwrap();
    assert_eq!(cluster.connect_timeout.unwrap().seconds, 7);
    let socket = cluster.transport_socket.unwrap();
    assert_eq!(socket.name, "tls");
    let Some(transport_socket::ConfigType::TypedConfig(config)) = socket.config_type else {
        panic!("no TLS config");
    };
    let tls = UpstreamTlsContext::decode(config.value.as_slice()).unwrap();
    assert_eq!(tls.sni, format!("db.default.dc1.internal.{TD}"));
}

#[test]
fn a_custom_upstream_listener_is_served_as_given() {
    let mut db = tcp_db();
    db.escape_hatches.listener_json = Some(listener_json(
        "db_custom_listener",
        tcp_proxy_filter("db.default.dc1.internal.x"),
    ));
    let r = build(&snapshot(vec![db])).unwrap();
    let listener = decoded_listener(&r, "db_custom_listener");
    assert_eq!(
        filter_names(&listener),
        vec![vec![listeners::TCP_PROXY_FILTER.to_string()]]
    );
    assert!(listener.filter_chains[0].transport_socket.is_none());
    assert!(!r
        .of(ResourceType::Listener)
        .contains_key("db:127.0.0.1:9191"));
}

#[test]
fn tracing_json_reaches_the_connection_managers_and_bad_tracing_falls_back() {
    let mut s = snapshot(vec![tcp_db()]);
    s.inbound.protocol = "http".into();
    s.escape_hatches.listener_tracing_json = Some(
        serde_json::json!({
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.Tracing",
            "random_sampling": {"value": 42.5},
            "spawn_upstream_span": true
        })
        .to_string(),
    );
    let r = build(&s).unwrap();
    let listener = decoded_listener(&r, "public_listener:0.0.0.0:21000");
    let tracing = manager_of(&listener).tracing.unwrap();
    assert_eq!(tracing.random_sampling.unwrap().value, 42.5);
    assert!(r.warnings.is_empty());

    s.escape_hatches.listener_tracing_json = Some(r#"{"random_sampling": 1}"#.into());
    let r = build(&s).unwrap();
    let listener = decoded_listener(&r, "public_listener:0.0.0.0:21000");
    assert!(manager_of(&listener).tracing.is_none());
    assert!(
        r.warnings[0].starts_with("failed to parse ListenerTracingJSON config"),
        "{:?}",
        r.warnings
    );
}

#[test]
fn bad_escape_hatch_json_fails_the_build_with_the_key_named() {
    let bad = r#"{"@type": "type.googleapis.com/envoy.config.listener.v3.Listener", "name": "x", "bogus": 1}"#;
    let mut s = snapshot(vec![tcp_db()]);
    s.escape_hatches.public_listener_json = Some(bad.into());
    let error = build(&s).unwrap_err();
    assert!(
        error.starts_with("failed to parse Proxy.Config.envoy_public_listener_json: proto:")
            && error.contains("bogus"),
        "{error}"
    );

    let mut s = snapshot(vec![tcp_db()]);
    s.escape_hatches.local_cluster_json = Some("not json".into());
    let error = build(&s).unwrap_err();
    assert!(
        error.starts_with("failed to parse Proxy.Config.envoy_local_cluster_json: proto:"),
        "{error}"
    );

    let mut db = tcp_db();
    db.escape_hatches.cluster_json =
        Some(format!("{{\"@type\": \"{LISTENER}\", \"name\": \"l\"}}"));
    let error = build(&snapshot(vec![db])).unwrap_err();
    assert!(
        error.starts_with(
            "failed to parse Upstreams[db].Config.envoy_cluster_json: proto: @type is"
        ),
        "{error}"
    );

    let mut db = tcp_db();
    db.escape_hatches.listener_json =
        Some(format!("{{\"@type\": \"{CLUSTER}\", \"name\": \"c\"}}"));
    let error = build(&snapshot(vec![db])).unwrap_err();
    assert!(
        error.starts_with("failed to parse Upstreams[db].Config.envoy_listener_json:"),
        "{error}"
    );
}
