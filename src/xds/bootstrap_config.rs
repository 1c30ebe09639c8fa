//! The `Proxy.Config` keys that shape a proxy's Envoy bootstrap, as Consul's
//! `consul connect envoy` reads them (`BootstrapConfig`): stats sinks (`envoy_statsd_url`,
//! `envoy_dogstatsd_url`, `envoy_extra_stats_sinks_json`), the stats configuration
//! (`envoy_stats_tags`, or `envoy_stats_config_json` replacing it whole,
//! `envoy_stats_flush_interval`), tracing (`envoy_tracing_json`), extra static clusters and
//! listeners, and the listeners that expose a part of Envoy's admin without the rest of it
//! (`envoy_prometheus_bind_addr`: `/metrics` → `/stats/prometheus`; `envoy_stats_bind_addr`:
//! `/stats`).
//!
//! Parsing is separate from applying so a bad value is refused, with Consul's message,
//! before Envoy starts. The one value read from the environment (a statsd URL given as
//! `$NAME`, or holding `${HOST_IP}`) is looked up through the caller's function: this module
//! does no I/O. `envoy_bootstrap_json_tpl` (a Go template replacing the whole bootstrap) and
//! `envoy_telemetry_collector_bind_socket_dir` are not applied: [`unapplied_keys`] names
//! them so `connect envoy` can say so.

use serde_json::{json, Map, Value};

/// Consul's name of the static cluster that reaches Envoy's own admin.
pub const SELF_ADMIN_CLUSTER: &str = "self_admin";
/// The path Consul's prometheus listener answers (its `-prometheus-scrape-path` default).
pub const PROMETHEUS_SCRAPE_PATH: &str = "/metrics";

/// The `Proxy.Config` keys of the bootstrap that praetor does not apply.
const UNAPPLIED: [&str; 2] = [
    "envoy_bootstrap_json_tpl",
    "envoy_telemetry_collector_bind_socket_dir",
];

/// Every `Proxy.Config` key of the bootstrap, applied or not: `connect envoy` acts on them
/// (or names them in its warning), so the agent's xDS warning leaves them out.
const BOOTSTRAP_KEYS: [&str; 13] = [
    "envoy_statsd_url",
    "envoy_dogstatsd_url",
    "envoy_prometheus_bind_addr",
    "envoy_stats_bind_addr",
    "envoy_stats_tags",
    "envoy_stats_flush_interval",
    "envoy_extra_static_clusters_json",
    "envoy_extra_static_listeners_json",
    "envoy_extra_stats_sinks_json",
    "envoy_stats_config_json",
    "envoy_tracing_json",
    "envoy_bootstrap_json_tpl",
    "envoy_telemetry_collector_bind_socket_dir",
];

/// Whether `key` is one of the bootstrap's `Proxy.Config` keys (not the agent's).
pub fn is_bootstrap_key(key: &str) -> bool {
    BOOTSTRAP_KEYS.contains(&key)
}

/// The bootstrap keys of one proxy's `Proxy.Config`, parsed and checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BootstrapConfig {
    /// Stats sinks in order: statsd, dogstatsd, then the extra ones.
    pub stats_sinks: Vec<Value>,
    /// `envoy_stats_tags`: `name=value` (or `name`, valued `1`), names lower-cased.
    pub stats_tags: Vec<(String, String)>,
    /// `envoy_stats_config_json`: the whole `stats_config`, tags included.
    pub stats_config: Option<Value>,
    /// `envoy_stats_flush_interval`, a proto3 JSON duration (`"5s"`).
    pub stats_flush_interval: Option<String>,
    pub tracing: Option<Value>,
    pub extra_clusters: Vec<Value>,
    pub extra_listeners: Vec<Value>,
    /// `envoy_prometheus_bind_addr` as host and port.
    pub prometheus_bind: Option<(String, u16)>,
    /// `envoy_stats_bind_addr` as host and port.
    pub stats_bind: Option<(String, u16)>,
}

/// The bootstrap keys present in `config` that praetor does not apply.
pub fn unapplied_keys(config: &Map<String, Value>) -> Vec<&'static str> {
    UNAPPLIED
        .iter()
        .copied()
        .filter(|k| config.get(*k).is_some_and(|v| !is_empty(v)))
        .collect()
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// A string-typed key, with the conversions Consul's weak decoding makes (numbers and
/// booleans become their text); absent or empty is `None`.
fn string_key(config: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    let text = match config.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => if *b { "1" } else { "0" }.to_string(),
        Some(other) => {
            return Err(format!(
                "failed parsing Proxy.Config: '{key}' expected type 'string', got unconvertible type '{}'",
                go_type_name(other)
            ))
        }
    };
    Ok(Some(text).filter(|t| !t.is_empty()))
}

/// The name Go gives a decoded JSON value's type, as Consul's decoding errors print it.
fn go_type_name(value: &Value) -> &'static str {
    match value {
        Value::Object(_) => "map[string]interface {}",
        Value::Array(_) => "[]interface {}",
        Value::String(_) => "string",
        Value::Number(_) => "float64",
        Value::Bool(_) => "bool",
        Value::Null => "<nil>",
    }
}

/// Parses the bootstrap keys of `config`; `env` looks up an environment variable.
pub fn parse(
    config: &Map<String, Value>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BootstrapConfig, String> {
    let mut parsed = BootstrapConfig::default();
    if let Some(url) = string_key(config, "envoy_statsd_url")? {
        parsed.stats_sinks.push(stats_sink(
            "envoy.stat_sinks.statsd",
            "type.googleapis.com/envoy.config.metrics.v3.StatsdSink",
            &url,
            env,
        )?);
    }
    if let Some(url) = string_key(config, "envoy_dogstatsd_url")? {
        parsed.stats_sinks.push(stats_sink(
            "envoy.stat_sinks.dog_statsd",
            "type.googleapis.com/envoy.config.metrics.v3.DogStatsdSink",
            &url,
            env,
        )?);
    }
    if let Some(text) = string_key(config, "envoy_extra_stats_sinks_json")? {
        parsed
            .stats_sinks
            .extend(json_list("envoy_extra_stats_sinks_json", &text)?);
    }
    parsed.stats_tags = stats_tags(config)?;
    if let Some(text) = string_key(config, "envoy_stats_config_json")? {
        parsed.stats_config = Some(json_object("envoy_stats_config_json", &text)?);
    }
    parsed.stats_flush_interval = string_key(config, "envoy_stats_flush_interval")?;
    if let Some(text) = string_key(config, "envoy_tracing_json")? {
        parsed.tracing = Some(json_object("envoy_tracing_json", &text)?);
    }
    if let Some(text) = string_key(config, "envoy_extra_static_clusters_json")? {
        parsed.extra_clusters = json_list("envoy_extra_static_clusters_json", &text)?;
    }
    if let Some(text) = string_key(config, "envoy_extra_static_listeners_json")? {
        parsed.extra_listeners = json_list("envoy_extra_static_listeners_json", &text)?;
    }
    if let Some(text) = string_key(config, "envoy_prometheus_bind_addr")? {
        parsed.prometheus_bind = Some(bind_address("envoy_prometheus_metrics", &text)?);
    }
    if let Some(text) = string_key(config, "envoy_stats_bind_addr")? {
        parsed.stats_bind = Some(bind_address("envoy_metrics", &text)?);
    }
    Ok(parsed)
}

/// `envoy_stats_tags`: a list of strings (one string is a list of one, as Consul's weak
/// decoding takes it).
fn stats_tags(config: &Map<String, Value>) -> Result<Vec<(String, String)>, String> {
    let items: Vec<&Value> = match config.get("envoy_stats_tags") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(one) => vec![one],
    };
    let mut tags = Vec::new();
    for item in items {
        let text = match item {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => if *b { "1" } else { "0" }.to_string(),
            other => {
                return Err(format!(
                    "failed parsing Proxy.Config: 'envoy_stats_tags[]' expected type 'string', got unconvertible type '{}'",
                    go_type_name(other)
                ))
            }
        };
        let (name, value) = text.split_once('=').unwrap_or((&text, "1"));
        tags.push((name.to_lowercase(), value.to_string()));
    }
    Ok(tags)
}

/// A JSON value given as a string: one object, or several separated by commas (Consul
/// pastes them into a JSON array).
fn json_list(key: &str, text: &str) -> Result<Vec<Value>, String> {
    let items: Vec<Value> = serde_json::from_str(&format!("[{text}]"))
        .map_err(|e| format!("failed to parse {key}: {e}"))?;
    if let Some(bad) = items.iter().find(|v| !v.is_object()) {
        return Err(format!(
            "failed to parse {key}: expected JSON objects, found {bad}"
        ));
    }
    Ok(items)
}

fn json_object(key: &str, text: &str) -> Result<Value, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("failed to parse {key}: {e}"))?;
    if !value.is_object() {
        return Err(format!(
            "failed to parse {key}: expected a JSON object, found {value}"
        ));
    }
    Ok(value)
}

/// `<host>:<port>` (Go's `net.SplitHostPort`), with Consul's error naming the listener.
fn bind_address(listener: &str, text: &str) -> Result<(String, u16), String> {
    let bad = |why: &str| format!("invalid {listener} bind address: address {text}: {why}");
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| bad("missing ']' in address"))?;
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| bad("missing port in address"))?;
        (host, port)
    } else {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| bad("missing port in address"))?;
        if host.contains(':') {
            return Err(bad("too many colons in address"));
        }
        (host, port)
    };
    let port: u16 = port.parse().map_err(|_| bad("invalid port"))?;
    Ok((host.to_string(), port))
}

/// A statsd or dogstatsd sink from its URL: `udp://<ip>:<port>` or `unix:///<path>`;
/// `$NAME` takes the URL from that environment variable, and `${HOST_IP}` inside it is
/// replaced (the one variable Consul expands there).
fn stats_sink(
    name: &str,
    type_url: &str,
    raw: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Value, String> {
    let url = if raw.len() > 2 && raw.starts_with('$') && !raw.starts_with("${") {
        env(&raw[1..]).unwrap_or_default()
    } else {
        let host_ip = env("HOST_IP").unwrap_or_default();
        raw.replace("${HOST_IP}", &host_ip)
            .replace("$HOST_IP", &host_ip)
    };
    let unparsed = || format!("failed to parse {name} sink address {url:?}");
    let (scheme, rest) = match url.split_once(':') {
        Some((scheme, rest))
            if scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            (scheme.to_ascii_lowercase(), rest)
        }
        _ => (String::new(), url.as_str()),
    };
    let address = match scheme.as_str() {
        "udp" => {
            let authority = rest.strip_prefix("//").ok_or_else(unparsed)?;
            let authority = authority.split(['/', '?', '#']).next().unwrap_or_default();
            let (host, port) = bind_address("sink", authority).map_err(|_| unparsed())?;
            json!({"socket_address": {"address": host, "port_value": port}})
        }
        "unix" => {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            let path = &path[path.find('/').ok_or_else(unparsed)?..];
            json!({"pipe": {"path": path}})
        }
        other => {
            return Err(format!(
                "unsupported address protocol {other:?} for {name} sink"
            ))
        }
    };
    Ok(json!({"name": name, "typedConfig": {"@type": type_url, "address": address}}))
}

/// A listener exposing one path (or prefix) of Envoy's admin through the `self_admin`
/// cluster, everything else answered 404 (Consul's `<name>_listener`, stat prefix `<name>`).
pub fn admin_path_listener(
    name: &str,
    (host, port): (&str, u16),
    match_kind: &str,
    match_value: &str,
    rewrite: &str,
) -> Value {
    json!({
        "name": format!("{name}_listener"),
        "address": {"socket_address": {"address": host, "port_value": port}},
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typedConfig": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": name,
                "codec_type": "HTTP1",
                "route_config": {
                    "name": "self_admin_route",
                    "virtual_hosts": [{
                        "name": SELF_ADMIN_CLUSTER,
                        "domains": ["*"],
                        "routes": [
                            {"match": {match_kind: match_value}, "route": {"cluster": SELF_ADMIN_CLUSTER, "prefix_rewrite": rewrite}},
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn statsd_urls_become_sinks() {
        let env = |name: &str| match name {
            "STATSD" => Some("udp://10.0.0.9:8125".to_string()),
            "HOST_IP" => Some("10.1.1.1".to_string()),
            _ => None,
        };
        let parsed = parse(
            &config(json!({
                "envoy_statsd_url": "$STATSD",
                "envoy_dogstatsd_url": "unix:///var/run/dog.sock",
            })),
            &env,
        )
        .unwrap();
        assert_eq!(
            parsed.stats_sinks[0],
            json!({"name": "envoy.stat_sinks.statsd", "typedConfig": {
                "@type": "type.googleapis.com/envoy.config.metrics.v3.StatsdSink",
                "address": {"socket_address": {"address": "10.0.0.9", "port_value": 8125}}}})
        );
        assert_eq!(
            parsed.stats_sinks[1]["typedConfig"]["address"],
            json!({"pipe": {"path": "/var/run/dog.sock"}})
        );
        let expanded = parse(
            &config(json!({"envoy_dogstatsd_url": "udp://${HOST_IP}:9125"})),
            &env,
        )
        .unwrap();
        assert_eq!(
            expanded.stats_sinks[0]["typedConfig"]["address"]["socket_address"]["address"],
            "10.1.1.1"
        );
    }

    #[test]
    fn bad_values_get_consuls_errors() {
        let error = |value: Value| parse(&config(value), &no_env).unwrap_err();
        assert_eq!(
            error(json!({"envoy_statsd_url": "not-a-url"})),
            "unsupported address protocol \"\" for envoy.stat_sinks.statsd sink"
        );
        assert_eq!(
            error(json!({"envoy_statsd_url": "tcp://1.2.3.4:8125"})),
            "unsupported address protocol \"tcp\" for envoy.stat_sinks.statsd sink"
        );
        assert_eq!(
            error(json!({"envoy_statsd_url": "udp://1.2.3.4"})),
            "failed to parse envoy.stat_sinks.statsd sink address \"udp://1.2.3.4\""
        );
        assert!(
            error(json!({"envoy_extra_static_clusters_json": "{\"name\": "}))
                .starts_with("failed to parse envoy_extra_static_clusters_json: ")
        );
        assert!(error(json!({"envoy_tracing_json": "[1]"}))
            .starts_with("failed to parse envoy_tracing_json: expected a JSON object"));
        assert_eq!(
            error(json!({"envoy_prometheus_bind_addr": "0.0.0.0"})),
            "invalid envoy_prometheus_metrics bind address: address 0.0.0.0: missing port in address"
        );
        assert_eq!(
            error(json!({"envoy_tracing_json": {"http": {}}})),
            "failed parsing Proxy.Config: 'envoy_tracing_json' expected type 'string', got unconvertible type 'map[string]interface {}'"
        );
        for message in [
            error(json!({"envoy_statsd_url": "udp://[::1"})),
            error(json!({"envoy_stats_bind_addr": "a:b:c"})),
        ] {
            assert!(!message.contains('\n'), "{message}");
        }
    }

    #[test]
    fn extra_json_takes_one_object_or_several() {
        let parsed = parse(
            &config(json!({
                "envoy_extra_static_clusters_json": "{\"name\": \"a\"}, {\"name\": \"b\"}",
                "envoy_extra_static_listeners_json": "{\"name\": \"l\"}",
                "envoy_stats_tags": ["Team=payments", "canary"],
                "envoy_stats_flush_interval": "7s",
                "envoy_prometheus_bind_addr": "[::1]:9102",
            })),
            &no_env,
        )
        .unwrap();
        assert_eq!(parsed.extra_clusters.len(), 2);
        assert_eq!(parsed.extra_listeners[0]["name"], "l");
        assert_eq!(
            parsed.stats_tags,
            vec![
                ("team".to_string(), "payments".to_string()),
                ("canary".to_string(), "1".to_string())
            ]
        );
        assert_eq!(parsed.stats_flush_interval.as_deref(), Some("7s"));
        assert_eq!(parsed.prometheus_bind, Some(("::1".to_string(), 9102)));
    }

    #[test]
    fn the_template_key_is_named_as_unapplied() {
        let keys = config(json!({"envoy_bootstrap_json_tpl": "{}", "envoy_statsd_url": "x"}));
        assert_eq!(unapplied_keys(&keys), vec!["envoy_bootstrap_json_tpl"]);
        assert!(is_bootstrap_key("envoy_tracing_json"));
        assert!(!is_bootstrap_key("envoy_public_listener_json"));
        assert!(!is_bootstrap_key("envoy_listener_tracing_json"));
    }
}
