//! The config keys praetor knows and the type each must have, checked on every source
//! document before the sources merge, so a value of the wrong type stops the agent with one
//! line naming the file and the key path, in the words Consul's decoder (mapstructure) uses:
//! `failed to parse agent.hcl: 'ports.http' expected type 'int', got unconvertible type
//! 'string', value: 'abc'`.
//!
//! Like Consul's decoder, the check is strict: a number in quotes is a string, not a number.
//! Where praetor's readers have always been more lenient (a duration given as a bare number
//! of seconds, a single string where a list of strings is expected), the schema keeps that
//! leniency so no config that loads today stops loading.
//!
//! Sections praetor reads key by key are described field by field: a key inside them that is
//! not described is reported as unknown (and ignored) with its dotted path. Sections that
//! other subsystems decode themselves (`acl`, `connect`, `services`, `telemetry`, …) are
//! opaque here. Pure: no I/O.

use crate::proto::duration::parse_go_duration_nanos;
use serde_json::{Map, Value};

/// The type a key's value must have.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Bool,
    /// An integer (a JSON number without fraction).
    Int,
    /// Any number.
    Float,
    Str,
    /// A Go duration string (`"10s"`), or a number of seconds.
    Duration,
    /// A list of strings, or one string.
    StrList,
    /// An object whose values are strings.
    StrMap,
    /// An object with the given fields; other keys in it are unknown.
    Object(&'static [Field]),
    /// Anything: decoded and validated by the subsystem that reads it.
    Any,
}

/// One known key.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub name: &'static str,
    pub kind: Kind,
}

const fn field(name: &'static str, kind: Kind) -> Field {
    Field { name, kind }
}

const PORTS: &[Field] = &[
    field("http", Kind::Int),
    field("https", Kind::Int),
    field("dns", Kind::Int),
    field("server", Kind::Int),
    field("serf_lan", Kind::Int),
    field("serf_wan", Kind::Int),
    field("grpc", Kind::Int),
    field("grpc_tls", Kind::Int),
    field("sidecar_min_port", Kind::Int),
    field("sidecar_max_port", Kind::Int),
];

/// One block of the `tls` stanza (`defaults`, `internal_rpc`, `https`, `grpc`); which keys a
/// block may hold is checked by `config::tls` with Consul's messages.
const TLS_PROTOCOL: &[Field] = &[
    field("ca_file", Kind::Str),
    field("ca_path", Kind::Str),
    field("cert_file", Kind::Str),
    field("key_file", Kind::Str),
    field("tls_min_version", Kind::Str),
    field("tls_cipher_suites", Kind::Str),
    field("verify_incoming", Kind::Bool),
    field("verify_outgoing", Kind::Bool),
    field("verify_server_hostname", Kind::Bool),
    field("use_auto_cert", Kind::Bool),
];

const TLS: &[Field] = &[
    field("defaults", Kind::Object(TLS_PROTOCOL)),
    field("internal_rpc", Kind::Object(TLS_PROTOCOL)),
    field("https", Kind::Object(TLS_PROTOCOL)),
    field("grpc", Kind::Object(TLS_PROTOCOL)),
];

const AUTO_ENCRYPT: &[Field] = &[
    field("tls", Kind::Bool),
    field("allow_tls", Kind::Bool),
    field("dns_san", Kind::StrList),
    field("ip_san", Kind::StrList),
];

const ADDRESSES: &[Field] = &[
    field("http", Kind::Str),
    field("https", Kind::Str),
    field("dns", Kind::Str),
    field("grpc", Kind::Str),
    field("grpc_tls", Kind::Str),
];

const LIMITS: &[Field] = &[
    field("http_max_conns_per_client", Kind::Int),
    field("rpc_rate", Kind::Float),
    field("rpc_max_burst", Kind::Int),
    field("kv_max_value_size", Kind::Int),
    field("txn_max_req_len", Kind::Int),
];

const HTTP_CONFIG: &[Field] = &[
    field("response_headers", Kind::StrMap),
    field("allow_write_http_from", Kind::StrList),
    field("use_cache", Kind::Bool),
];

const PERFORMANCE: &[Field] = &[
    field("raft_multiplier", Kind::Int),
    field("leave_drain_time", Kind::Duration),
    field("rpc_hold_timeout", Kind::Duration),
];

pub const AUTOPILOT: &[Field] = &[
    field("cleanup_dead_servers", Kind::Bool),
    field("last_contact_threshold", Kind::Duration),
    field("max_trailing_logs", Kind::Int),
    field("min_quorum", Kind::Int),
    field("server_stabilization_time", Kind::Duration),
    field("redundancy_zone_tag", Kind::Str),
    field("disable_upgrade_migration", Kind::Bool),
    field("upgrade_version_tag", Kind::Str),
];

/// `telemetry`, read by `config::telemetry`.
const TELEMETRY: &[Field] = &[
    field("circonus_api_app", Kind::Str),
    field("circonus_api_token", Kind::Str),
    field("circonus_api_url", Kind::Str),
    field("circonus_broker_id", Kind::Str),
    field("circonus_broker_select_tag", Kind::Str),
    field("circonus_check_display_name", Kind::Str),
    field("circonus_check_force_metric_activation", Kind::Str),
    field("circonus_check_id", Kind::Str),
    field("circonus_check_instance_id", Kind::Str),
    field("circonus_check_search_tag", Kind::Str),
    field("circonus_check_tags", Kind::Str),
    field("circonus_submission_interval", Kind::Str),
    field("circonus_submission_url", Kind::Str),
    field("disable_compat_1.9", Kind::Bool),
    field("disable_hostname", Kind::Bool),
    field("dogstatsd_addr", Kind::Str),
    field("dogstatsd_tags", Kind::StrList),
    field("enable_host_metrics", Kind::Bool),
    field("filter_default", Kind::Bool),
    field("metrics_prefix", Kind::Str),
    field("prefix_filter", Kind::StrList),
    field("prometheus_retention_time", Kind::Duration),
    field("retry_failed_connection", Kind::Bool),
    field("statsd_address", Kind::Str),
    field("statsite_address", Kind::Str),
    field("statsite_prefix", Kind::Str),
];

const SOA: &[Field] = &[
    field("refresh", Kind::Int),
    field("retry", Kind::Int),
    field("expire", Kind::Int),
    field("min_ttl", Kind::Int),
];

const DNS_CONFIG: &[Field] = &[
    field("allow_stale", Kind::Bool),
    field("max_stale", Kind::Duration),
    field("node_ttl", Kind::Duration),
    field("service_ttl", Kind::StrMap),
    field("recursors", Kind::StrList),
    field("recursor_strategy", Kind::Str),
    field("recursor_timeout", Kind::Duration),
    field("udp_answer_limit", Kind::Int),
    field("a_record_limit", Kind::Int),
    field("enable_truncate", Kind::Bool),
    field("only_passing", Kind::Bool),
    field("enable_additional_node_meta_txt", Kind::Bool),
    field("soa", Kind::Object(SOA)),
    // Accepted and documented as needless: the DNS answer cache is exact and answers are
    // always compressed (README, DNS).
    field("use_cache", Kind::Bool),
    field("cache_max_age", Kind::Duration),
    field("disable_compression", Kind::Bool),
    field("prefer_namespace", Kind::Bool),
];

/// Every top-level key praetor knows, now or in a subsystem that reads it itself.
pub const TOP_LEVEL: &[Field] = &[
    field("acl", Kind::Any),
    field("acl_agent_master_token", Kind::Str),
    field("acl_agent_token", Kind::Str),
    field("acl_datacenter", Kind::Str),
    field("acl_default_policy", Kind::Str),
    field("acl_down_policy", Kind::Str),
    field("acl_enable_key_list_policy", Kind::Bool),
    field("acl_master_token", Kind::Str),
    field("acl_replication_token", Kind::Str),
    field("acl_token", Kind::Str),
    field("acl_ttl", Kind::Duration),
    field("addresses", Kind::Object(ADDRESSES)),
    field("advertise_addr", Kind::Str),
    field("advertise_addr_wan", Kind::Str),
    field("auto_encrypt", Kind::Object(AUTO_ENCRYPT)),
    field("ae_interval", Kind::Duration),
    field("alt_domain", Kind::Str),
    field("autopilot", Kind::Object(AUTOPILOT)),
    field("bind_addr", Kind::Str),
    field("bootstrap", Kind::Bool),
    field("bootstrap_expect", Kind::Int),
    // The old top-level TLS keys, moved into `tls` by `config::tls::apply_deprecated_keys`.
    field("ca_file", Kind::Str),
    field("ca_path", Kind::Str),
    field("cert_file", Kind::Str),
    field("check", Kind::Any),
    field("check_update_interval", Kind::Duration),
    // Consul's non-user `check_deregister_interval_min` and `check_reap_interval`, read so
    // that tests can shorten them (as `ae_interval`).
    field("check_deregister_interval_min", Kind::Duration),
    field("check_reap_interval", Kind::Duration),
    field("checks", Kind::Any),
    field("client_addr", Kind::Str),
    field("config_entries", Kind::Any),
    field("connect", Kind::Any),
    field("data_dir", Kind::Str),
    field("datacenter", Kind::Str),
    field("default_query_time", Kind::Duration),
    field("dev_mode", Kind::Bool),
    field("disable_host_node_id", Kind::Bool),
    field("disable_remote_exec", Kind::Bool),
    field("disable_update_check", Kind::Bool),
    field("discovery_max_stale", Kind::Duration),
    field("dns_config", Kind::Object(DNS_CONFIG)),
    field("domain", Kind::Str),
    field("enable_debug_faults", Kind::Bool),
    field("enable_acl_replication", Kind::Bool),
    field("enable_local_script_checks", Kind::Bool),
    field("enable_script_checks", Kind::Bool),
    field("enable_syslog", Kind::Bool),
    field("encrypt", Kind::Str),
    field("encrypt_verify_incoming", Kind::Bool),
    field("encrypt_verify_outgoing", Kind::Bool),
    field("http_config", Kind::Object(HTTP_CONFIG)),
    field("key_file", Kind::Str),
    field("kv_max_value_size", Kind::Int),
    field("leave_on_terminate", Kind::Bool),
    field("limits", Kind::Object(LIMITS)),
    field("log_level", Kind::Str),
    field("log_file", Kind::Str),
    field("log_json", Kind::Bool),
    field("log_rotate_bytes", Kind::Int),
    field("log_rotate_duration", Kind::Duration),
    field("log_rotate_max_files", Kind::Int),
    field("max_query_time", Kind::Duration),
    field("node_id", Kind::Str),
    field("node_meta", Kind::StrMap),
    field("node_name", Kind::Str),
    field("performance", Kind::Object(PERFORMANCE)),
    field("pid_file", Kind::Str),
    field("ports", Kind::Object(PORTS)),
    field("primary_datacenter", Kind::Str),
    field("protocol", Kind::Int),
    field("raft_protocol", Kind::Int),
    field("raft_log_cache_bytes", Kind::Int),
    field("raft_snapshot_interval", Kind::Duration),
    field("raft_snapshot_threshold", Kind::Int),
    field("raft_trailing_logs", Kind::Int),
    field("reconnect_timeout", Kind::Duration),
    field("reconnect_timeout_wan", Kind::Duration),
    field("recursor", Kind::StrList),
    field("recursors", Kind::StrList),
    field("rejoin_after_leave", Kind::Bool),
    field("retry_interval", Kind::Duration),
    field("retry_interval_wan", Kind::Duration),
    field("retry_join", Kind::StrList),
    field("retry_join_wan", Kind::StrList),
    field("retry_max", Kind::Int),
    field("retry_max_wan", Kind::Int),
    field("segment", Kind::Str),
    field("serf_lan", Kind::Str),
    field("serf_wan", Kind::Str),
    field("server", Kind::Bool),
    field("server_name", Kind::Str),
    field("service", Kind::Any),
    field("services", Kind::Any),
    field("session_ttl_min", Kind::Duration),
    field("shards", Kind::Int),
    field("skip_leave_on_interrupt", Kind::Bool),
    field("start_join", Kind::StrList),
    field("start_join_wan", Kind::StrList),
    field("syslog_facility", Kind::Str),
    field("telemetry", Kind::Object(TELEMETRY)),
    field("tls", Kind::Object(TLS)),
    field("tls_cipher_suites", Kind::Str),
    field("tls_min_version", Kind::Str),
    field("tls_prefer_server_cipher_suites", Kind::Bool),
    field("translate_wan_addrs", Kind::Bool),
    field("txn_max_req_len", Kind::Int),
    field("ui", Kind::Bool),
    field("ui_config", Kind::Any),
    field("ui_dir", Kind::Str),
    field("ui_content_path", Kind::Str),
    field("verify_incoming", Kind::Bool),
    field("verify_incoming_https", Kind::Bool),
    field("verify_incoming_rpc", Kind::Bool),
    field("verify_outgoing", Kind::Bool),
    field("verify_server_hostname", Kind::Bool),
    field("watches", Kind::Any),
];

/// Go's name for the type a decoded value has, as mapstructure prints it.
fn go_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn expected_type_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Bool => "bool",
        Kind::Int => "int",
        Kind::Float => "float64",
        Kind::Str | Kind::Duration => "string",
        Kind::StrList => "[]string",
        Kind::StrMap => "map[string]string",
        Kind::Object(_) | Kind::Any => "struct",
    }
}

/// A value as Go's `%v` shows it, shortened so the message stays one readable line.
fn go_value_text(value: &Value) -> String {
    const VALUE_TEXT_CHARS_MAX: usize = 64;
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut short: String = text.chars().take(VALUE_TEXT_CHARS_MAX).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short.replace('\n', "\\n")
}

fn mismatch(path: &str, kind: Kind, value: &Value) -> String {
    match kind {
        Kind::Object(_) | Kind::StrMap => {
            format!("'{path}' expected a map, got '{}'", go_kind_name(value))
        }
        Kind::StrList => format!(
            "'{path}': source data must be an array or slice, got {}",
            go_kind_name(value)
        ),
        _ => format!(
            "'{path}' expected type '{}', got unconvertible type '{}', value: '{}'",
            expected_type_name(kind),
            go_type_name(value),
            go_value_text(value)
        ),
    }
}

/// Go's `reflect.Kind` name of a decoded value (mapstructure's wording for maps and lists).
fn go_kind_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "invalid",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "slice",
        Value::Object(_) => "map",
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn check_value(path: &str, kind: Kind, value: &Value) -> Result<(), String> {
    if value.is_null() {
        return Ok(());
    }
    let ok = match kind {
        Kind::Any => true,
        Kind::Bool => value.is_boolean(),
        Kind::Int => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        Kind::Float => value.is_number(),
        Kind::Str => value.is_string(),
        Kind::Duration => match value {
            Value::String(text) => {
                parse_go_duration_nanos(text)
                    .map_err(|e| format!("{path}: invalid duration: {text:?}: {e}"))?;
                true
            }
            Value::Number(n) => n.is_u64(),
            _ => false,
        },
        Kind::StrList => match value {
            Value::String(_) => true,
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if !item.is_string() {
                        return Err(mismatch(&format!("{path}[{i}]"), Kind::Str, item));
                    }
                }
                true
            }
            _ => false,
        },
        Kind::StrMap => match value {
            Value::Object(map) => {
                for (key, item) in map {
                    if !item.is_string() {
                        return Err(mismatch(&format!("{path}[{key}]"), Kind::Str, item));
                    }
                }
                true
            }
            _ => false,
        },
        Kind::Object(_) => value.is_object(),
    };
    if ok {
        Ok(())
    } else {
        Err(mismatch(path, kind, value))
    }
}

/// Checks the type of every known key of one source document; the error names the key path.
pub fn check_types(document: &Map<String, Value>) -> Result<(), String> {
    walk(document, TOP_LEVEL, "", &mut |_| {})
}

/// The keys of a merged configuration that praetor does not know, as dotted paths, sorted.
pub fn unknown_keys(merged: &Map<String, Value>) -> Vec<String> {
    let mut unknown = Vec::new();
    // The merged object was built from checked documents, so only unknown keys are reported.
    let _ = walk(merged, TOP_LEVEL, "", &mut |path| unknown.push(path));
    unknown.sort();
    unknown.dedup();
    unknown
}

fn walk(
    object: &Map<String, Value>,
    fields: &[Field],
    prefix: &str,
    unknown: &mut dyn FnMut(String),
) -> Result<(), String> {
    for (key, value) in object {
        let path = join(prefix, key);
        let Some(field) = fields.iter().find(|f| f.name == key) else {
            unknown(path);
            continue;
        };
        check_value(&path, field.kind, value)?;
        if let (Kind::Object(inner), Value::Object(map)) = (field.kind, value) {
            walk(map, inner, &path, unknown)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(v: Value) -> Result<(), String> {
        check_types(v.as_object().unwrap())
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
    }

    #[test]
    fn well_typed_documents_pass_and_opaque_sections_are_not_entered() {
        let document = json!({
            "ports": {"http": 8500, "dns": -1},
            "limits": {"rpc_rate": 10, "rpc_max_burst": 5, "kv_max_value_size": 1024.0},
            "retry_join": "one",
            "reconnect_timeout": "72h",
            "ae_interval": 60,
            "node_meta": {"rack": "r1"},
            "acl": {"tokens": {"initial_management": 5}},
            "services": [{"name": "web", "port": "not checked here"}],
            "data_dir": null,
        });
        check(document).unwrap();
    }

    #[test]
    fn unknown_keys_are_reported_with_their_paths() {
        let merged = json!({
            "future": 1,
            "ports": {"http": 1, "expose_min_port": 2},
            "limits": {"rpc_handshake_timeout": "5s"},
            "acl": {"anything": true},
            "dns_config": {"soa": {"refresh": 1, "serial": 2}},
        });
        assert_eq!(
            unknown_keys(merged.as_object().unwrap()),
            vec![
                "dns_config.soa.serial",
                "future",
                "limits.rpc_handshake_timeout",
                "ports.expose_min_port"
            ]
        );
    }
}
