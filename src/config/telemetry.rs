//! The `telemetry` stanza, with Consul's keys and defaults: the metric names' prefix and
//! host name, the Prometheus retention, the statsd and dogstatsd sinks, and the prefix
//! filter. Keys for sinks praetor does not have (Circonus, statsite over TCP, host metrics)
//! are accepted, and warned about by the key table (`config::keys`).

use super::{get_bool, get_duration, get_string, get_strings};
use serde_json::{Map, Value};
use std::time::Duration;

/// Consul's `telemetry.metrics_prefix` default.
pub const METRICS_PREFIX_DEFAULT: &str = "consul";
/// Most `prefix_filter` rules and `dogstatsd_tags` accepted; more is a config mistake.
pub const TELEMETRY_LIST_ENTRIES_MAX: usize = 256;

/// What `telemetry { … }` asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct TelemetryConfig {
    /// Gauges are named `<prefix>.<host>.<name>` unless this is set.
    pub disable_hostname: bool,
    pub metrics_prefix: String,
    /// How long a Prometheus series lives without updates; zero turns
    /// `/v1/agent/metrics?format=prometheus` off, as in Consul.
    pub prometheus_retention: Duration,
    /// `host:port` of a statsd server (UDP).
    pub statsd_address: Option<String>,
    /// `host:port` of a dogstatsd server (UDP).
    pub dogstatsd_addr: Option<String>,
    /// Tags added to every dogstatsd line (`key:value`).
    pub dogstatsd_tags: Vec<String>,
    /// Whether a metric no `prefix_filter` rule matches is recorded.
    pub filter_default: bool,
    /// `prefix_filter` rules starting with `+`, without it.
    pub allowed_prefixes: Vec<String>,
    /// `prefix_filter` rules starting with `-`, without it.
    pub blocked_prefixes: Vec<String>,
    /// Keep trying a sink address that does not resolve at start (Consul's default) instead
    /// of refusing to start.
    pub retry_failed_connection: bool,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            disable_hostname: false,
            metrics_prefix: METRICS_PREFIX_DEFAULT.to_string(),
            prometheus_retention: Duration::ZERO,
            statsd_address: None,
            dogstatsd_addr: None,
            dogstatsd_tags: Vec::new(),
            filter_default: true,
            allowed_prefixes: Vec::new(),
            blocked_prefixes: Vec::new(),
            retry_failed_connection: true,
        }
    }
}

/// A sink address must be `host:port`.
fn sink_address(key: &str, value: Option<String>) -> Result<Option<String>, String> {
    let Some(address) = value.filter(|a| !a.is_empty()) else {
        return Ok(None);
    };
    let port_ok = address
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !port_ok {
        return Err(format!(
            "telemetry.{key}: {address:?} is not a host:port address"
        ));
    }
    Ok(Some(address))
}

impl TelemetryConfig {
    /// Reads `telemetry` from the merged configuration; warnings go to `warnings`.
    pub fn from_raw(
        raw: &Map<String, Value>,
        warnings: &mut Vec<String>,
    ) -> Result<TelemetryConfig, String> {
        let empty = Map::new();
        let block = match raw.get("telemetry") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(map)) => map,
            Some(other) => return Err(format!("telemetry: expected an object, got {other}")),
        };
        let in_block = |e: String| format!("telemetry.{e}");
        let defaults = TelemetryConfig::default();
        let prefix_rules = get_strings(block, "prefix_filter").map_err(in_block)?;
        let dogstatsd_tags = get_strings(block, "dogstatsd_tags").map_err(in_block)?;
        if prefix_rules.len() > TELEMETRY_LIST_ENTRIES_MAX
            || dogstatsd_tags.len() > TELEMETRY_LIST_ENTRIES_MAX
        {
            return Err(format!(
                "telemetry: at most {TELEMETRY_LIST_ENTRIES_MAX} prefix_filter rules and dogstatsd_tags"
            ));
        }
        let mut allowed_prefixes = Vec::new();
        let mut blocked_prefixes = Vec::new();
        for rule in prefix_rules {
            // Consul's builder warns about a rule it cannot read and goes on.
            match rule.chars().next() {
                None => {
                    warnings.push("config: Cannot have empty filter rule in prefix_filter".into())
                }
                Some('+') => allowed_prefixes.push(rule[1..].to_string()),
                Some('-') => blocked_prefixes.push(rule[1..].to_string()),
                Some(_) => warnings.push(format!(
                    "config: Filter rule must begin with either '+' or '-': {rule:?}"
                )),
            }
        }
        let metrics_prefix = get_string(block, "metrics_prefix")
            .map_err(in_block)?
            .map(|p| p.trim_end_matches('.').to_string())
            .unwrap_or(defaults.metrics_prefix);
        Ok(TelemetryConfig {
            disable_hostname: get_bool(block, "disable_hostname")
                .map_err(in_block)?
                .unwrap_or(defaults.disable_hostname),
            metrics_prefix,
            prometheus_retention: get_duration(block, "prometheus_retention_time")
                .map_err(in_block)?
                .unwrap_or(defaults.prometheus_retention),
            statsd_address: sink_address(
                "statsd_address",
                get_string(block, "statsd_address").map_err(in_block)?,
            )?,
            dogstatsd_addr: sink_address(
                "dogstatsd_addr",
                get_string(block, "dogstatsd_addr").map_err(in_block)?,
            )?,
            dogstatsd_tags,
            filter_default: get_bool(block, "filter_default")
                .map_err(in_block)?
                .unwrap_or(defaults.filter_default),
            allowed_prefixes,
            blocked_prefixes,
            retry_failed_connection: get_bool(block, "retry_failed_connection")
                .map_err(in_block)?
                .unwrap_or(defaults.retry_failed_connection),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> (Result<TelemetryConfig, String>, Vec<String>) {
        let mut warnings = Vec::new();
        let raw = value.as_object().unwrap().clone();
        (TelemetryConfig::from_raw(&raw, &mut warnings), warnings)
    }

    #[test]
    fn reads_consul_keys_with_consul_defaults() {
        let (config, warnings) = parse(json!({}));
        assert_eq!(config.unwrap(), TelemetryConfig::default());
        assert!(warnings.is_empty());
        let (config, warnings) = parse(json!({"telemetry": {
            "disable_hostname": true,
            "metrics_prefix": "praetor.",
            "prometheus_retention_time": "60s",
            "statsd_address": "127.0.0.1:8125",
            "dogstatsd_addr": "localhost:8126",
            "dogstatsd_tags": ["env:prod", "dc:east"],
            "filter_default": false,
            "prefix_filter": ["+consul.raft.apply", "-consul.http", "bad"],
            "circonus_api_token": "x",
        }}));
        let config = config.unwrap();
        assert!(config.disable_hostname);
        assert_eq!(config.metrics_prefix, "praetor");
        assert_eq!(config.prometheus_retention, Duration::from_secs(60));
        assert_eq!(config.statsd_address.as_deref(), Some("127.0.0.1:8125"));
        assert_eq!(config.dogstatsd_tags, ["env:prod", "dc:east"]);
        assert!(!config.filter_default);
        assert_eq!(config.allowed_prefixes, ["consul.raft.apply"]);
        assert_eq!(config.blocked_prefixes, ["consul.http"]);
        // The Circonus key is the key table's to warn about; this reader warns about the
        // filter rule it cannot read.
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("must begin with either '+' or '-'"));
    }

    #[test]
    fn refuses_malformed_values() {
        let (config, _) = parse(json!({"telemetry": {"statsd_address": "nowhere"}}));
        assert!(config.unwrap_err().contains("not a host:port address"));
        let (config, _) = parse(json!({"telemetry": {"prometheus_retention_time": "soon"}}));
        assert!(config
            .unwrap_err()
            .starts_with("telemetry.prometheus_retention_time"));
    }
}
