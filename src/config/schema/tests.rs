use super::*;
use serde_json::json;

fn check_as(v: Value, syntax: Syntax) -> Result<Map<String, Value>, String> {
    let mut map = v.as_object().unwrap().clone();
    check_document(&mut map, syntax).map(|()| map)
}

fn check(v: Value) -> Result<Map<String, Value>, String> {
    check_as(v, Syntax::Hcl)
}

fn json_check(v: Value) -> Result<Map<String, Value>, String> {
    check_as(v, Syntax::Json)
}

#[test]
fn wrong_types_name_their_key_path_as_consul_does() {
    assert_eq!(
        check(json!({"ports": {"http": "abc"}})).unwrap_err(),
        "'ports.http' expected type 'int', got unconvertible type 'string', value: 'abc'"
    );
    assert_eq!(
        check(json!({"server": "true"})).unwrap_err(),
        "'server' expected type 'bool', got unconvertible type 'string', value: 'true'"
    );
    assert_eq!(
        check(json!({"limits": {"rpc_rate": "fast"}})).unwrap_err(),
        "'limits.rpc_rate' expected type 'float64', got unconvertible type 'string', value: 'fast'"
    );
    // Every JSON number is a float64 to Go; an HCL integer is an int.
    assert_eq!(
        json_check(json!({"node_meta": {"rack": 1}})).unwrap_err(),
        "'node_meta[rack]' expected type 'string', got unconvertible type 'float64', value: '1'"
    );
    assert_eq!(
        check(json!({"node_meta": {"rack": 1}})).unwrap_err(),
        "'node_meta[rack]' expected type 'string', got unconvertible type 'int', value: '1'"
    );
    assert_eq!(
        check(json!({"limits": 5})).unwrap_err(),
        "'limits' expected a map, got 'int'"
    );
    assert_eq!(
        check(json!({"http_config": {"allow_write_http_from": {"a": "b"}}})).unwrap_err(),
        "'http_config.allow_write_http_from': source data must be an array or slice, got map"
    );
    assert_eq!(
        check(json!({"retry_join": ["a", 2]})).unwrap_err(),
        "'retry_join[1]' expected type 'string', got unconvertible type 'int', value: '2'"
    );
    assert!(check(json!({"performance": {"leave_drain_time": "soon"}}))
        .unwrap_err()
        .starts_with("performance.leave_drain_time: invalid duration: \"soon\""));
    assert!(check(json!({"autopilot": {"max_trailing_logs": 1.5}}))
        .unwrap_err()
        .contains("'autopilot.max_trailing_logs' expected type 'int'"));
    assert_eq!(
        check(json!({"autopilot": {"min_quorum": -1}})).unwrap_err(),
        "cannot parse 'autopilot.min_quorum', -1 overflows uint"
    );
    assert_eq!(
        json_check(json!({"limits": {"kv_max_value_size": -1}})).unwrap_err(),
        "cannot parse 'limits.kv_max_value_size', -1.000000 overflows uint"
    );
}

/// Consul's decoder is not weakly typed: a single string is not a list, a number is not a
/// duration string, a quoted number is not a number.
#[test]
fn no_weak_conversions() {
    assert_eq!(
        check(json!({"retry_join": "one"})).unwrap_err(),
        "'retry_join': source data must be an array or slice, got string"
    );
    assert_eq!(
        json_check(json!({"ae_interval": 60})).unwrap_err(),
        "'ae_interval' expected type 'string', got unconvertible type 'float64', value: '60'"
    );
    assert_eq!(
        check(json!({"bootstrap_expect": "3"})).unwrap_err(),
        "'bootstrap_expect' expected type 'int', got unconvertible type 'string', value: '3'"
    );
    assert_eq!(
        check(json!({"services": {"name": "web"}})).unwrap_err(),
        "'services': source data must be an array or slice, got map"
    );
    assert_eq!(
        check(json!({"service": {"name": "web", "port": "80"}})).unwrap_err(),
        "'service.port' expected type 'int', got unconvertible type 'string', value: '80'"
    );
    assert_eq!(
        check(json!({"check": {"ttl": 30}})).unwrap_err(),
        "'check.ttl' expected type 'string', got unconvertible type 'int', value: '30'"
    );
    assert_eq!(
        check(json!({"services": [{"checks": [{"header": {"X": "one"}}]}]})).unwrap_err(),
        "'services[0].checks[0].header[X]': source data must be an array or slice, got string"
    );
    // A number that is whole is an integer even when JSON wrote it with a fraction.
    check(json!({"ports": {"http": 8500.0}})).unwrap();
}

#[test]
fn well_typed_documents_pass() {
    let document = json!({
        "ports": {"http": 8500, "dns": -1},
        "limits": {"rpc_rate": 10, "rpc_max_burst": 5, "kv_max_value_size": 1024.0},
        "retry_join": ["one"],
        "reconnect_timeout": "72h",
        "ae_interval": "60s",
        "node_meta": {"rack": "r1"},
        "acl": {"enabled": true, "tokens": {"initial_management": "x"}},
        "services": [{"name": "web", "port": 80, "proxy": {"config": {"anything": [1, {"x": 2}]}}}],
        "connect": {"ca_config": {"leaf_cert_ttl": "72h", "free": {"form": true}}},
        "watches": [{"type": "key", "key": "a", "args": ["/bin/true"]}],
        "snapshot_agent": {"anything": 1},
        "data_dir": null,
    });
    check(document).unwrap();
}

#[test]
fn unknown_keys_at_any_depth_are_errors_with_their_paths() {
    assert_eq!(
        check(json!({"acl": {"enabeld": true}})).unwrap_err(),
        "invalid config key acl.enabeld"
    );
    assert_eq!(
        check(json!({
            "future": 1,
            "ports": {"http": 1, "htttp": 2},
            "limits": {"rpc_handshake_timeout": "5s", "kv_max": 1},
            "dns_config": {"soa": {"refresh": 1, "serial": 2}},
            "acl": {"tokens": {"agnet": "x"}},
        }))
        .unwrap_err(),
        "invalid config key acl.tokens.agnet; invalid config key dns_config.soa.serial; \
         invalid config key future; invalid config key limits.kv_max; \
         invalid config key ports.htttp"
    );
    assert_eq!(
        check(json!({"services": [{"name": "a"}, {"name": "b", "connect": {"sidecar_service": {"prot": 1}}}]}))
            .unwrap_err(),
        "invalid config key services[1].connect.sidecar_service.prot"
    );
    assert_eq!(
        check(json!({"service": {"name": "a", "checks": [{"intervl": "1s"}]}})).unwrap_err(),
        "invalid config key service.checks[0].intervl"
    );
    assert_eq!(
        check(json!({"services": [{"proxy": {"upstreams": [{"destination_nam": "db"}]}}]}))
            .unwrap_err(),
        "invalid config key services[0].proxy.upstreams[0].destination_nam"
    );
    assert_eq!(
        check(json!({"services": [{"tagged_addresses": {"lan": {"adress": "x"}}}]})).unwrap_err(),
        "invalid config key services[0].tagged_addresses[lan].adress"
    );
    // Keys Consul CE does not know either: a namespace on a service, `recursor`, the old
    // top-level KV limit.
    assert_eq!(
        check(json!({"service": {"name": "a", "namespace": "ns"}})).unwrap_err(),
        "invalid config key service.namespace"
    );
    for key in ["recursor", "kv_max_value_size", "dev_mode", "tombstone_ttl"] {
        assert_eq!(
            check(json!({key: 1})).unwrap_err(),
            format!("invalid config key {key}")
        );
    }
    // Inside maps read by their subsystem, keys are free.
    check(json!({"connect": {"ca_config": {"anything": 1}}})).unwrap();
}

/// Consul matches keys case-insensitively and also takes a nested struct's Go field names
/// and alias tags; the document comes back spelled canonically.
#[test]
fn consuls_other_spellings_are_accepted_and_canonicalized() {
    let map = check(json!({
        "ACL": {"Enabled": true, "TokenReplication": false, "Tokens": {"InitialManagement": "x"}},
        "Ports": {"HTTP": 1, "SerfLAN": 2},
        "service": {
            "Name": "web",
            "EnableTagOverride": true,
            "Check": {"ServiceID": "web", "DeregisterCriticalServiceAfter": "1m", "ScriptArgs": ["a"], "TLSSkipVerify": true},
            "Connect": {"SidecarService": {"Port": 1}},
            "Proxy": {"Upstreams": [{"DestinationName": "db", "LocalBindPort": 9}]},
        },
        "dns_config": {"NodeMetaTXT": false},
        "telemetry": {"StatsdAddr": "127.0.0.1:8125"},
    }))
    .unwrap();
    assert_eq!(
        Value::Object(map),
        json!({
            "acl": {"enabled": true, "enable_token_replication": false, "tokens": {"initial_management": "x"}},
            "ports": {"http": 1, "serf_lan": 2},
            "service": {
                "name": "web",
                "enable_tag_override": true,
                "check": {"service_id": "web", "deregister_critical_service_after": "1m", "args": ["a"], "tls_skip_verify": true},
                "connect": {"sidecar_service": {"port": 1}},
                "proxy": {"upstreams": [{"destination_name": "db", "local_bind_port": 9}]},
            },
            "dns_config": {"enable_additional_node_meta_txt": false},
            "telemetry": {"statsd_address": "127.0.0.1:8125"},
        })
    );
    // The canonical key wins over an alias of it; a second spelling of a name in another
    // case is unknown, as Consul's decoder leaves it unused.
    let map = check(json!({"check": {"service_id": "a", "ServiceID": "b"}})).unwrap();
    assert_eq!(map["check"], json!({"service_id": "a"}));
    assert_eq!(
        check(json!({"acl": {"enabled": true, "Enabled": false}})).unwrap_err(),
        "invalid config key acl.Enabled"
    );
    // The top level takes no Go names (Consul's embedded structs), and embedded fields of a
    // block take none either.
    assert_eq!(
        check(json!({"ServerMode": true})).unwrap_err(),
        "invalid config key ServerMode"
    );
    assert_eq!(
        check(json!({"acl": {"tokens": {"agentmaster": "x"}}})).unwrap_err(),
        "invalid config key acl.tokens.agentmaster"
    );
    check(json!({"Server": true, "acl": {"tokens": {"AGENT_MASTER": "x"}}})).unwrap();
}

fn warned(v: Value) -> Vec<String> {
    warnings(v.as_object().unwrap())
}

#[test]
fn keys_not_acted_on_warn_unless_their_value_holds() {
    assert_eq!(
        warned(json!({
            "limits": {"http_max_conns_per_client": 7, "rpc_rate": 12.5},
            "disable_update_check": true,
            "disable_remote_exec": false,
            "discovery_max_stale": "5s",
            "ports": {"grpc": -1, "http": 1},
            "server": true,
        })),
        vec![
            "config: disable_remote_exec = false is accepted but not acted on yet: praetor has no remote exec (`consul exec`), so there is nothing to enable",
            "config: discovery_max_stale is accepted but not acted on yet: service discovery reads are served as their consistency mode asks",
            "config: limits.http_max_conns_per_client = 7 is accepted but not acted on yet: the HTTP API does not limit connections per client address",
            "config: limits.rpc_rate = 12.5 is accepted but not acted on yet: RPC requests from agents are not rate-limited",
        ]
    );
    // A block not acted on as a whole warns once; Enterprise keys in Consul CE's words,
    // except when left empty.
    assert_eq!(
        warned(json!({
            "gossip_lan": {"probe_interval": "1s", "gossip_nodes": 4},
            "autopilot": {"redundancy_zone_tag": "zone", "upgrade_version_tag": ""},
        })),
        vec![
            "\"autopilot.redundancy_zone_tag\" is a Consul Enterprise configuration and will have no effect",
            "config: gossip_lan is accepted but not acted on yet: the gossip pools keep memberlist's default timings",
        ]
    );
    // Keys that act say nothing, nor do working features that once warned.
    assert!(warned(json!({
        "connect": {"enabled": true},
        "watches": [{"type": "key", "key": "a", "args": ["true"]}],
        "retry_join_wan": ["10.0.0.1"],
        "advertise_addr_wan": "10.0.0.1",
        "retry_interval_wan": "5s",
        "retry_max_wan": 3,
        "services": [{"name": "web", "socket_path": "/x"}],
    }))
    .is_empty());
}

#[test]
fn every_block_is_listed_once_and_names_are_unique_in_each() {
    let blocks = all_blocks();
    assert!(blocks.len() > 40, "{}", blocks.len());
    for block in &blocks {
        let mut names: Vec<&str> = block.fields.iter().map(|f| f.name).collect();
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a key repeated in {}", block.title);
        for field in block.fields {
            // A spelling Consul accepts for one field must not be another field's name.
            if let Some(go) = go_spelling(block, field) {
                assert!(
                    block.fields.iter().all(|other| other.name != go),
                    "{}.{}: its Go name {go} is another key",
                    block.title,
                    field.name
                );
            }
        }
    }
    let text = render_key_list();
    assert!(text.contains("| `enabled` | bool | acts |"), "{text}");
}
