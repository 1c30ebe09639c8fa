//! Envoy's bootstrap configuration for a proxy of this agent, in the shape Consul's
//! `consul connect envoy` writes (`bootstrap_tpl.go`): the admin listener, the node (ID =
//! the proxy's service ID, cluster = the service it fronts), the static `local_agent`
//! cluster pointing at the agent's gRPC port (HTTP/2, TLS with the agent's CA on
//! `grpc_tls`), Consul's stats tags, and ADS over `DELTA_GRPC` carrying the ACL token as
//! `x-consul-token` metadata, with `initial_fetch_timeout: 0s` so Envoy waits for its
//! configuration instead of starting without it; then what the proxy's `Proxy.Config`
//! adds (`bootstrap_config`): stats sinks, tags and flush interval, tracing, extra static
//! clusters and listeners, and the listeners exposing `/metrics`, `/stats` and `/ready`
//! from Envoy's admin through the `self_admin` cluster. Pure.

use super::bootstrap_config::{
    admin_path_listener, BootstrapConfig, PROMETHEUS_SCRAPE_PATH, SELF_ADMIN_CLUSTER,
};
use serde_json::{json, Value};

/// The name of the static cluster that reaches the agent (Consul's `LocalAgentClusterName`).
pub const LOCAL_AGENT_CLUSTER: &str = "local_agent";

/// Everything the bootstrap is written from.
#[derive(Clone, Debug, Default)]
pub struct BootstrapArgs {
    /// `node.cluster`: the service the proxy fronts.
    pub proxy_cluster: String,
    /// `node.id`: the proxy's service ID on the agent.
    pub proxy_id: String,
    /// The service stats are tagged as coming from.
    pub proxy_source_service: String,
    pub datacenter: String,
    pub agent_address: String,
    pub agent_port: u16,
    /// The PEM bundle Envoy verifies the agent with; TLS when `Some`.
    pub agent_ca_pem: Option<String>,
    pub admin_access_log_path: String,
    pub admin_bind_address: String,
    pub admin_bind_port: u16,
    pub token: String,
    /// Where Envoy answers `GET /ready` from its admin (Consul's `envoy_ready_listener`,
    /// which an ingress gateway gets at its LAN address so the TCP check of its
    /// registration finds a listener there).
    pub ready_bind: Option<(String, u16)>,
    /// The bootstrap keys of the proxy's `Proxy.Config`.
    pub config: BootstrapConfig,
}

/// A static cluster's one endpoint.
fn load_assignment(cluster: &str, address: &str, port: u16) -> Value {
    json!({
        "clusterName": cluster,
        "endpoints": [{"lbEndpoints": [{"endpoint": {"address": {"socket_address": {
            "address": address,
            "port_value": port
        }}}}]}]
    })
}

/// Consul's stats tags: the parts of a cluster name (`<subset>.<svc>.<ns>.<dc>.internal.
/// <trust domain>.consul.` and its `consul.destination.*` twins) and of an upstream's stat
/// prefix, then the source's fixed values.
fn stats_tags(args: &BootstrapArgs) -> Vec<Value> {
    const CLUSTER_PARTS: [(&str, &str); 10] = [
        (
            "custom_hash",
            r"^cluster\.(?:passthrough~)?((?:([^.]+)~)?(?:[^.]+\.)?[^.]+\.[^.]+\.(?:[^.]+\.)?[^.]+\.[^.]+\.[^.]+\.consul\.)",
        ),
        (
            "service_subset",
            r"^cluster\.(?:passthrough~)?((?:[^.]+~)?(?:([^.]+)\.)?[^.]+\.[^.]+\.(?:[^.]+\.)?[^.]+\.[^.]+\.[^.]+\.consul\.)",
        ),
        (
            "service",
            r"^cluster\.(?:passthrough~)?((?:[^.]+~)?(?:[^.]+\.)?([^.]+)\.[^.]+\.(?:[^.]+\.)?[^.]+\.[^.]+\.[^.]+\.consul\.)",
        ),
        (
            "namespace",
            r"^cluster\.(?:passthrough~)?((?:[^.]+~)?(?:[^.]+\.)?[^.]+\.([^.]+)\.(?:[^.]+\.)?[^.]+\.[^.]+\.[^.]+\.consul\.)",
        ),
        (
            "partition",
            r"^cluster\.(?:passthrough~)?((?:[^.]+~)?(?:[^.]+\.)?[^.]+\.[^.]+\.(?:([^.]+)\.)?[^.]+\.[^.]+\.[^.]+\.consul\.)",
        ),
        (
            "datacenter",
            r"^cluster\.(?:passthrough~)?((?:[^.]+~)?(?:[^.]+\.)?[^.]+\.[^.]+\.(?:[^.]+\.)?([^.]+)\.[^.]+\.[^.]+\.consul\.)",
        ),
        (
            "routing_type",
            r"^cluster\.(?:passthrough~)?((?:[^.]+~)?(?:[^.]+\.)?[^.]+\.[^.]+\.(?:[^.]+\.)?[^.]+\.([^.]+)\.[^.]+\.consul\.)",
        ),
        (
            "trust_domain",
            r"^cluster\.(?:passthrough~)?((?:[^.]+~)?(?:[^.]+\.)?[^.]+\.[^.]+\.(?:[^.]+\.)?[^.]+\.[^.]+\.([^.]+)\.consul\.)",
        ),
        (
            "target",
            r"^cluster\.(?:passthrough~)?(((?:[^.]+~)?(?:[^.]+\.)?[^.]+\.[^.]+\.(?:[^.]+\.)?[^.]+)\.[^.]+\.[^.]+\.consul\.)",
        ),
        (
            "full_target",
            r"^cluster\.(?:passthrough~)?(((?:[^.]+~)?(?:[^.]+\.)?[^.]+\.[^.]+\.(?:[^.]+\.)?[^.]+\.[^.]+\.[^.]+)\.consul\.)",
        ),
    ];
    const UPSTREAM_PARTS: [(&str, &str); 4] = [
        (
            "service",
            r"^(?:tcp|http)\.upstream\.(([^.]+)(?:\.[^.]+)?(?:\.[^.]+)?\.[^.]+\.)",
        ),
        (
            "datacenter",
            r"^(?:tcp|http)\.upstream\.([^.]+(?:\.[^.]+)?(?:\.[^.]+)?\.([^.]+)\.)",
        ),
        (
            "namespace",
            r"^(?:tcp|http)\.upstream\.([^.]+(?:\.([^.]+))?(?:\.[^.]+)?\.[^.]+\.)",
        ),
        (
            "partition",
            r"^(?:tcp|http)\.upstream\.([^.]+(?:\.[^.]+)?(?:\.([^.]+))?\.[^.]+\.)",
        ),
    ];
    // The proxy's own `envoy_stats_tags` come first; a default tag of the same name gives
    // way to one of them.
    let mut tags: Vec<Value> = args
        .config
        .stats_tags
        .iter()
        .map(|(name, value)| json!({"tag_name": name, "fixed_value": value}))
        .collect();
    for (part, regex) in CLUSTER_PARTS {
        tags.push(json!({"regex": regex, "tag_name": format!("consul.destination.{part}")}));
    }
    for (part, regex) in UPSTREAM_PARTS {
        tags.push(json!({"regex": regex, "tag_name": format!("consul.upstream.{part}")}));
    }
    // The tags Consul kept from before 1.9: the same parts without `destination`.
    for (part, regex) in CLUSTER_PARTS {
        let old = regex.replacen(r"(?:passthrough~)?", "", 1);
        tags.push(json!({"regex": old, "tag_name": format!("consul.{part}")}));
    }
    let defaults = [
        ("local_cluster", args.proxy_cluster.as_str()),
        ("consul.source.service", args.proxy_source_service.as_str()),
        ("consul.source.namespace", "default"),
        ("consul.source.partition", "default"),
        ("consul.source.datacenter", args.datacenter.as_str()),
    ];
    for (name, value) in defaults {
        if value.is_empty() || args.config.stats_tags.iter().any(|(n, _)| n == name) {
            continue;
        }
        tags.push(json!({"tag_name": name, "fixed_value": value}));
    }
    tags
}

/// The bootstrap document.
pub fn generate(args: &BootstrapArgs) -> Value {
    let mut local_agent = json!({
        "name": LOCAL_AGENT_CLUSTER,
        "ignore_health_on_host_removal": false,
        "connect_timeout": "1s",
        "type": "STATIC",
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}}
            }
        },
        "loadAssignment": load_assignment(LOCAL_AGENT_CLUSTER, &args.agent_address, args.agent_port)
    });
    if let Some(ca) = &args.agent_ca_pem {
        local_agent["transport_socket"] = json!({
            "name": "tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "common_tls_context": {"validation_context": {"trusted_ca": {"inline_string": ca}}}
            }
        });
    }
    // Consul's order: the agent's cluster, the proxy's extra clusters, then `self_admin`
    // when a listener needs it and the proxy did not name one so; the proxy's extra
    // listeners, then the prometheus, stats and ready listeners.
    let config = &args.config;
    let mut clusters = vec![local_agent];
    clusters.extend(config.extra_clusters.iter().cloned());
    let mut listeners = config.extra_listeners.clone();
    let admin_listeners = [
        (
            "envoy_prometheus_metrics",
            &config.prometheus_bind,
            "path",
            PROMETHEUS_SCRAPE_PATH,
            "/stats/prometheus",
        ),
        (
            "envoy_metrics",
            &config.stats_bind,
            "prefix",
            "/stats",
            "/stats",
        ),
        ("envoy_ready", &args.ready_bind, "path", "/ready", "/ready"),
    ];
    for (name, bind, match_kind, match_value, rewrite) in admin_listeners {
        let Some((address, port)) = bind else {
            continue;
        };
        if !clusters.iter().any(|c| c["name"] == SELF_ADMIN_CLUSTER) {
            clusters.push(json!({
                "name": SELF_ADMIN_CLUSTER,
                "ignore_health_on_host_removal": false,
                "connect_timeout": "5s",
                "type": "STATIC",
                "http_protocol_options": {},
                "loadAssignment": load_assignment(
                    SELF_ADMIN_CLUSTER,
                    &args.admin_bind_address,
                    args.admin_bind_port,
                )
            }));
        }
        listeners.push(admin_path_listener(
            name,
            (address, *port),
            match_kind,
            match_value,
            rewrite,
        ));
    }
    let mut static_resources = json!({"clusters": clusters});
    if !listeners.is_empty() {
        static_resources["listeners"] = Value::Array(listeners);
    }
    let stats_config = config
        .stats_config
        .clone()
        .unwrap_or_else(|| json!({"stats_tags": stats_tags(args), "use_all_default_tags": true}));
    let mut document = json!({
        "admin": {
            "access_log": [{
                "name": "Consul Listener Filter Log",
                "typedConfig": {
                    "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
                    "path": args.admin_access_log_path
                }
            }],
            "address": {"socket_address": {
                "address": args.admin_bind_address,
                "port_value": args.admin_bind_port
            }}
        },
        "node": {
            "cluster": args.proxy_cluster,
            "id": args.proxy_id,
            "metadata": {"namespace": "default", "partition": "default"}
        },
        "layered_runtime": {"layers": [{
            "name": "base",
            "static_layer": {"re2.max_program_size.error_level": 1048576}
        }]},
        "static_resources": static_resources,
        "stats_config": stats_config,
        "dynamic_resources": {
            "lds_config": {"ads": {}, "initial_fetch_timeout": "0s", "resource_api_version": "V3"},
            "cds_config": {"ads": {}, "initial_fetch_timeout": "0s", "resource_api_version": "V3"},
            "ads_config": {
                "api_type": "DELTA_GRPC",
                "transport_api_version": "V3",
                "grpc_services": {
                    "initial_metadata": [{"key": "x-consul-token", "value": args.token}],
                    "envoy_grpc": {"cluster_name": LOCAL_AGENT_CLUSTER}
                }
            }
        }
    });
    if !config.stats_sinks.is_empty() {
        document["stats_sinks"] = Value::Array(config.stats_sinks.clone());
    }
    if let Some(interval) = &config.stats_flush_interval {
        document["stats_flush_interval"] = json!(interval);
    }
    if let Some(tracing) = &config.tracing {
        document["tracing"] = tracing.clone();
    }
    document
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sidecar_args() -> BootstrapArgs {
        BootstrapArgs {
            proxy_cluster: "web".into(),
            proxy_id: "web-sidecar-proxy".into(),
            proxy_source_service: "web".into(),
            datacenter: "dc1".into(),
            agent_address: "127.0.0.1".into(),
            agent_port: 8502,
            agent_ca_pem: None,
            admin_access_log_path: "/dev/null".into(),
            admin_bind_address: "127.0.0.1".into(),
            admin_bind_port: 19000,
            token: "secret".into(),
            ready_bind: None,
            config: BootstrapConfig::default(),
        }
    }

    #[test]
    fn the_bootstrap_names_the_proxy_and_the_agent() {
        let doc = generate(&sidecar_args());
        assert_eq!(doc["node"]["id"], "web-sidecar-proxy");
        assert_eq!(doc["node"]["cluster"], "web");
        assert_eq!(
            doc["dynamic_resources"]["ads_config"]["api_type"],
            "DELTA_GRPC"
        );
        assert_eq!(
            doc["dynamic_resources"]["ads_config"]["grpc_services"]["initial_metadata"][0]["value"],
            "secret"
        );
        assert_eq!(
            doc["static_resources"]["clusters"][0]["name"],
            "local_agent"
        );
        assert!(doc["static_resources"]["clusters"][0]
            .get("transport_socket")
            .is_none());
        let tags = doc["stats_config"]["stats_tags"].as_array().unwrap();
        assert_eq!(tags.len(), 29);
        assert_eq!(tags[tags.len() - 1]["fixed_value"], "dc1");
        assert!(doc["static_resources"].get("listeners").is_none());
    }

    #[test]
    fn an_ingress_gateway_gets_a_ready_listener_on_its_address() {
        let doc = generate(&BootstrapArgs {
            proxy_cluster: "ingress".into(),
            proxy_id: "ingress".into(),
            proxy_source_service: "ingress".into(),
            ready_bind: Some(("10.0.0.1".into(), 8443)),
            ..sidecar_args()
        });
        let listener = &doc["static_resources"]["listeners"][0];
        assert_eq!(listener["name"], "envoy_ready_listener");
        assert_eq!(listener["address"]["socket_address"]["port_value"], 8443);
        assert_eq!(doc["static_resources"]["clusters"][1]["name"], "self_admin");
    }

    #[test]
    fn proxy_config_keys_shape_the_bootstrap_in_consuls_order() {
        let config = crate::xds::bootstrap_config::parse(
            json!({
                "envoy_statsd_url": "udp://127.0.0.1:8125",
                "envoy_extra_stats_sinks_json": "{\"name\": \"envoy.stat_sinks.hystrix\"}",
                "envoy_extra_static_clusters_json": "{\"name\": \"zipkin\"}",
                "envoy_extra_static_listeners_json": "{\"name\": \"mine\"}",
                "envoy_prometheus_bind_addr": "0.0.0.0:9102",
                "envoy_stats_bind_addr": "0.0.0.0:9103",
                "envoy_stats_tags": ["local_cluster=mine", "team=a"],
                "envoy_stats_flush_interval": "3s",
                "envoy_tracing_json": "{\"http\": {\"name\": \"z\"}}",
            })
            .as_object()
            .unwrap(),
            &|_| None,
        )
        .unwrap();
        let doc = generate(&BootstrapArgs {
            config,
            ..sidecar_args()
        });
        let names = |list: &str| -> Vec<String> {
            doc["static_resources"][list]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names("clusters"), ["local_agent", "zipkin", "self_admin"]);
        assert_eq!(
            names("listeners"),
            [
                "mine",
                "envoy_prometheus_metrics_listener",
                "envoy_metrics_listener"
            ]
        );
        let prometheus = &doc["static_resources"]["listeners"][1]["filter_chains"][0]["filters"][0]
            ["typedConfig"]["route_config"]["virtual_hosts"][0]["routes"][0];
        assert_eq!(prometheus["match"]["path"], "/metrics");
        assert_eq!(prometheus["route"]["prefix_rewrite"], "/stats/prometheus");
        assert_eq!(doc["stats_sinks"][0]["name"], "envoy.stat_sinks.statsd");
        assert_eq!(doc["stats_sinks"][1]["name"], "envoy.stat_sinks.hystrix");
        assert_eq!(doc["stats_flush_interval"], "3s");
        assert_eq!(doc["tracing"]["http"]["name"], "z");
        let tags = doc["stats_config"]["stats_tags"].as_array().unwrap();
        assert_eq!(
            tags[0],
            json!({"tag_name": "local_cluster", "fixed_value": "mine"})
        );
        assert_eq!(tags[1], json!({"tag_name": "team", "fixed_value": "a"}));
        // The default `local_cluster` gave way to the proxy's.
        assert_eq!(
            tags.iter()
                .filter(|t| t["tag_name"] == "local_cluster")
                .count(),
            1
        );
        assert_eq!(tags.len(), 30);
    }

    #[test]
    fn stats_config_json_replaces_the_tags_and_a_named_self_admin_is_kept() {
        let config = crate::xds::bootstrap_config::parse(
            json!({
                "envoy_stats_config_json": "{\"use_all_default_tags\": false}",
                "envoy_stats_tags": ["ignored=1"],
                "envoy_extra_static_clusters_json": "{\"name\": \"self_admin\", \"type\": \"STATIC\"}",
                "envoy_prometheus_bind_addr": "127.0.0.1:9102",
            })
            .as_object()
            .unwrap(),
            &|_| None,
        )
        .unwrap();
        let doc = generate(&BootstrapArgs {
            config,
            ..sidecar_args()
        });
        assert_eq!(doc["stats_config"], json!({"use_all_default_tags": false}));
        let clusters = doc["static_resources"]["clusters"].as_array().unwrap();
        assert_eq!(clusters.len(), 2);
        assert_eq!(clusters[1], json!({"name": "self_admin", "type": "STATIC"}));
        assert!(doc.get("stats_sinks").is_none());
    }
}
