//! Envoy's bootstrap configuration for a proxy of this agent, in the shape Consul's
//! `consul connect envoy` writes (`bootstrap_tpl.go`): the admin listener, the node (ID =
//! the proxy's service ID, cluster = the service it fronts), the static `local_agent`
//! cluster pointing at the agent's gRPC port (HTTP/2, TLS with the agent's CA on
//! `grpc_tls`), Consul's stats tags, and ADS over `DELTA_GRPC` carrying the ACL token as
//! `x-consul-token` metadata, with `initial_fetch_timeout: 0s` so Envoy waits for its
//! configuration instead of starting without it. Pure.

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
}

/// Consul's name of the static cluster that reaches Envoy's own admin.
const SELF_ADMIN_CLUSTER: &str = "self_admin";
/// Consul's name of the readiness listener.
const READY_LISTENER: &str = "envoy_ready_listener";

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

/// The readiness listener: `/ready` is passed to the admin, anything else is 404.
fn ready_listener(address: &str, port: u16) -> Value {
    json!({
        "name": READY_LISTENER,
        "address": {"socket_address": {"address": address, "port_value": port}},
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typedConfig": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": "envoy_ready",
                "codec_type": "HTTP1",
                "route_config": {
                    "name": "self_admin_route",
                    "virtual_hosts": [{
                        "name": SELF_ADMIN_CLUSTER,
                        "domains": ["*"],
                        "routes": [
                            {"match": {"path": "/ready"}, "route": {"cluster": SELF_ADMIN_CLUSTER, "prefix_rewrite": "/ready"}},
                            {"match": {"prefix": "/"}, "direct_response": {"status": 404}}
                        ]
                    }]
                },
                "http_filters": [{
                    "name": "envoy.filters.http.router",
                    "typedConfig": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}
                }]
            }
        }]}]
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
    let mut tags = Vec::new();
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
    tags.push(json!({"tag_name": "local_cluster", "fixed_value": args.proxy_cluster}));
    tags.push(
        json!({"tag_name": "consul.source.service", "fixed_value": args.proxy_source_service}),
    );
    tags.push(json!({"tag_name": "consul.source.namespace", "fixed_value": "default"}));
    tags.push(json!({"tag_name": "consul.source.partition", "fixed_value": "default"}));
    tags.push(json!({"tag_name": "consul.source.datacenter", "fixed_value": args.datacenter}));
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
    let mut static_resources = json!({"clusters": [local_agent]});
    if let Some((address, port)) = &args.ready_bind {
        static_resources["clusters"]
            .as_array_mut()
            .expect("clusters is an array")
            .push(json!({
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
        static_resources["listeners"] = json!([ready_listener(address, *port)]);
    }
    json!({
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
        "stats_config": {"stats_tags": stats_tags(args), "use_all_default_tags": true},
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
    })
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
}
