//! The service mesh settings: `connect { … }`, `config_entries { bootstrap = [ … ] }` and
//! the sidecar port range in `ports`, parsed into [`ConnectConfig`] with Consul's defaults
//! (`connect.enabled` is on by default, as in Consul ≥ 1.14, and in `-dev`).
//!
//! Bootstrap entries are decoded and validated here, at start, so a bad one stops the
//! agent naming its position (`config_entries.bootstrap[0]: …`), as Consul does; the leader
//! writes those that do not exist yet.
//!
//! A CA key or root brought from outside (`ca_config.private_key`, `root_cert`) is refused;
//! the CSR rate limits are accepted (the built-in CA signs as fast as it is asked). Which
//! other `connect` keys act is the key table's (`config::keys`) to say.

use crate::consul::config_entry;
use crate::proto::duration::{format_go_duration, parse_go_duration_nanos};
use crate::store::mesh::config_entry::ConfigEntry;
use serde_json::{Map, Value};
use std::time::Duration;

/// Consul's defaults for the built-in CA.
pub const LEAF_CERT_TTL_DEFAULT: Duration = Duration::from_secs(72 * 3600);
pub const INTERMEDIATE_CERT_TTL_DEFAULT: Duration = Duration::from_secs(8760 * 3600);
pub const ROOT_CERT_TTL_DEFAULT: Duration = Duration::from_secs(87600 * 3600);
/// Consul's bounds on the leaf TTL.
pub const LEAF_CERT_TTL_MIN: Duration = Duration::from_secs(3600);
pub const LEAF_CERT_TTL_MAX: Duration = Duration::from_secs(365 * 24 * 3600);
/// Consul's sidecar port range.
pub const SIDECAR_MIN_PORT_DEFAULT: u16 = 21000;
pub const SIDECAR_MAX_PORT_DEFAULT: u16 = 21255;
/// `ports.expose_min_port` and `ports.expose_max_port` as Consul defaults them: where a
/// sidecar with `Proxy.Expose.Checks` serves its service's HTTP and gRPC checks.
pub const EXPOSE_MIN_PORT_DEFAULT: u16 = 21500;
pub const EXPOSE_MAX_PORT_DEFAULT: u16 = 21755;

/// The built-in CA's key and lifetimes (`connect.ca_config`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaSettings {
    /// `ec`: the only type rcgen and ring generate.
    pub private_key_type: String,
    /// 256 or 384 (NIST P-256, P-384).
    pub private_key_bits: u32,
    pub leaf_cert_ttl: Duration,
    pub intermediate_cert_ttl: Duration,
    pub root_cert_ttl: Duration,
}

impl Default for CaSettings {
    fn default() -> Self {
        CaSettings {
            private_key_type: "ec".to_string(),
            private_key_bits: 256,
            leaf_cert_ttl: LEAF_CERT_TTL_DEFAULT,
            intermediate_cert_ttl: INTERMEDIATE_CERT_TTL_DEFAULT,
            root_cert_ttl: ROOT_CERT_TTL_DEFAULT,
        }
    }
}

impl CaSettings {
    /// The `Config` map of the CA configuration, as `/v1/connect/ca/configuration` shows it.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "LeafCertTTL": format_go_duration(self.leaf_cert_ttl.as_nanos() as i64),
            "IntermediateCertTTL": format_go_duration(self.intermediate_cert_ttl.as_nanos() as i64),
            "RootCertTTL": format_go_duration(self.root_cert_ttl.as_nanos() as i64),
            "PrivateKeyType": self.private_key_type,
            "PrivateKeyBits": self.private_key_bits,
        })
    }

    /// Reads a CA `Config` map (keys in CamelCase or snake case, as Consul's decoder takes
    /// them), over `base`, with Consul's validation.
    pub fn from_map(map: &Map<String, Value>, base: &CaSettings) -> Result<CaSettings, String> {
        let mut settings = base.clone();
        for (key, value) in map {
            let normalized = crate::consul::body::normalize_key(key);
            let duration = || -> Result<Duration, String> {
                let ns = match value {
                    Value::String(text) => parse_go_duration_nanos(text)
                        .map_err(|e| format!("error decoding config: {e}"))?,
                    Value::Number(n) => n.as_i64().unwrap_or(0),
                    _ => return Err(format!("error decoding config: {key} is not a duration")),
                };
                Ok(Duration::from_nanos(ns.max(0) as u64))
            };
            match normalized.as_str() {
                "leafcertttl" => settings.leaf_cert_ttl = duration()?,
                "intermediatecertttl" => settings.intermediate_cert_ttl = duration()?,
                "rootcertttl" => settings.root_cert_ttl = duration()?,
                "privatekeytype" => {
                    settings.private_key_type = value.as_str().unwrap_or_default().to_string()
                }
                "privatekeybits" => {
                    settings.private_key_bits = match value {
                        Value::Number(n) => n.as_u64().unwrap_or(0) as u32,
                        Value::String(s) => s.parse().unwrap_or(0),
                        _ => 0,
                    }
                }
                // Accepted for compatibility; the built-in CA signs as fast as it is asked.
                "csrmaxpersecond" | "csrmaxconcurrent" | "skipvalidate" | "rotationperiod" => {}
                "privatekey" | "rootcert" if value.as_str().is_some_and(|s| !s.is_empty()) => {
                    return Err(format!(
                        "{key}: praetor's built-in CA generates its own keys; bringing a key or root is not supported"
                    ));
                }
                _ => {}
            }
        }
        settings.validate()?;
        Ok(settings)
    }

    /// Consul's `CommonCAProviderConfig.Validate`, narrowed to the keys rcgen can make.
    pub fn validate(&self) -> Result<(), String> {
        if self.leaf_cert_ttl < LEAF_CERT_TTL_MIN {
            return Err("leaf cert TTL must be greater or equal than 1h0m0s".to_string());
        }
        if self.leaf_cert_ttl > LEAF_CERT_TTL_MAX {
            return Err("leaf cert TTL must be less than 8760h0m0s".to_string());
        }
        if self.intermediate_cert_ttl < Duration::from_secs(3 * 3600) {
            return Err("Intermediate Cert TTL must be greater or equal than 3h".to_string());
        }
        if self.intermediate_cert_ttl < 3 * self.leaf_cert_ttl {
            return Err(format!(
                "Intermediate Cert TTL must be greater or equal than 3 * LeafCertTTL (>={}).",
                format_go_duration((3 * self.leaf_cert_ttl).as_nanos() as i64)
            ));
        }
        if self.root_cert_ttl < self.intermediate_cert_ttl {
            return Err(format!(
                "root cert TTL is set and is not greater than intermediate cert ttl. root cert ttl: {}, intermediate cert ttl: {}",
                format_go_duration(self.root_cert_ttl.as_nanos() as i64),
                format_go_duration(self.intermediate_cert_ttl.as_nanos() as i64)
            ));
        }
        match self.private_key_type.as_str() {
            "ec" => {
                if ![224, 256, 384, 521].contains(&self.private_key_bits) {
                    return Err(
                        "EC key length must be one of (224, 256, 384, 521) bits".to_string()
                    );
                }
                if ![256, 384].contains(&self.private_key_bits) {
                    return Err(format!(
                        "EC key length {} is not supported by praetor's built-in CA (256 or 384 bits)",
                        self.private_key_bits
                    ));
                }
            }
            "rsa" => {
                if ![2048, 4096].contains(&self.private_key_bits) {
                    return Err("RSA key length must be 2048 or 4096 bits".to_string());
                }
                return Err(
                    "RSA keys are not supported by praetor's built-in CA: use private_key_type \"ec\""
                        .to_string(),
                );
            }
            other => {
                return Err(format!(
                    "private key type must be either 'ec' or 'rsa': {other:?}"
                ))
            }
        }
        Ok(())
    }
}

/// The mesh settings of an agent.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectConfig {
    pub enabled: bool,
    pub ca_provider: String,
    pub ca: CaSettings,
    /// `config_entries.bootstrap`, decoded and validated.
    pub bootstrap_entries: Vec<ConfigEntry>,
    /// `ports.sidecar_min_port` ..= `ports.sidecar_max_port`: where sidecar proxies
    /// registered without a port are placed.
    pub sidecar_min_port: u16,
    pub sidecar_max_port: u16,
    /// `ports.expose_min_port` ..= `ports.expose_max_port`: the listener ports the agent
    /// gives the checks a sidecar exposes (`Proxy.Expose.Checks`).
    pub expose_min_port: u16,
    pub expose_max_port: u16,
    /// `connect.enable_mesh_gateway_wan_federation`: servers reach other datacenters'
    /// servers through mesh gateways (the router, `cluster::router`).
    pub mesh_gateway_wan_federation: bool,
}

impl Default for ConnectConfig {
    fn default() -> Self {
        ConnectConfig {
            enabled: true,
            ca_provider: crate::store::mesh::ca::PROVIDER_CONSUL.to_string(),
            ca: CaSettings::default(),
            bootstrap_entries: Vec::new(),
            sidecar_min_port: SIDECAR_MIN_PORT_DEFAULT,
            sidecar_max_port: SIDECAR_MAX_PORT_DEFAULT,
            expose_min_port: EXPOSE_MIN_PORT_DEFAULT,
            expose_max_port: EXPOSE_MAX_PORT_DEFAULT,
            mesh_gateway_wan_federation: false,
        }
    }
}

fn port(ports: Option<&Map<String, Value>>, key: &str, default: u16) -> Result<u16, String> {
    match ports.and_then(|p| p.get(key)) {
        None | Some(Value::Null) => Ok(default),
        Some(value) => value
            .as_i64()
            .and_then(|v| u16::try_from(v).ok())
            .ok_or_else(|| format!("ports.{key}: {value} is not a port")),
    }
}

impl ConnectConfig {
    /// Reads the merged configuration.
    pub fn from_raw(raw: &Map<String, Value>) -> Result<ConnectConfig, String> {
        let mut config = ConnectConfig::default();
        let empty = Map::new();
        let connect = match raw.get("connect") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(map)) => map,
            Some(other) => return Err(format!("connect: expected an object, got {other}")),
        };
        for (key, value) in connect {
            match key.as_str() {
                "enabled" => {
                    config.enabled = value
                        .as_bool()
                        .ok_or_else(|| format!("connect.enabled: {value} is not a boolean"))?
                }
                "ca_provider" => {
                    let provider = value.as_str().unwrap_or_default();
                    if provider != crate::store::mesh::ca::PROVIDER_CONSUL {
                        return Err(format!(
                            "connect.ca_provider: {provider:?} is not supported; praetor has the built-in \"consul\" provider"
                        ));
                    }
                    config.ca_provider = provider.to_string();
                }
                "ca_config" => {
                    let map = value
                        .as_object()
                        .ok_or_else(|| format!("connect.ca_config: {value} is not an object"))?;
                    config.ca = CaSettings::from_map(map, &config.ca)
                        .map_err(|e| format!("connect.ca_config: {e}"))?;
                }
                "enable_mesh_gateway_wan_federation" => {
                    config.mesh_gateway_wan_federation = value.as_bool().ok_or_else(|| {
                        format!(
                            "connect.enable_mesh_gateway_wan_federation: {value} is not a boolean"
                        )
                    })?
                }
                // Checked against the key table, which warns about them.
                _ => {}
            }
        }
        let ports = raw.get("ports").and_then(Value::as_object);
        config.sidecar_min_port = port(ports, "sidecar_min_port", SIDECAR_MIN_PORT_DEFAULT)?;
        config.sidecar_max_port = port(ports, "sidecar_max_port", SIDECAR_MAX_PORT_DEFAULT)?;
        if config.sidecar_min_port > config.sidecar_max_port {
            return Err(format!(
                "Sidecar min port {} must be less than or equal to the max port {}",
                config.sidecar_min_port, config.sidecar_max_port
            ));
        }
        config.expose_min_port = port(ports, "expose_min_port", EXPOSE_MIN_PORT_DEFAULT)?;
        config.expose_max_port = port(ports, "expose_max_port", EXPOSE_MAX_PORT_DEFAULT)?;
        if config.expose_min_port > 0
            && (config.expose_max_port == 0 || config.expose_min_port > config.expose_max_port)
        {
            return Err(format!(
                "Expose min port {} must be less than or equal to the max port {}",
                config.expose_min_port, config.expose_max_port
            ));
        }
        if let Some(entries) = raw.get("config_entries") {
            let map = entries
                .as_object()
                .ok_or_else(|| format!("config_entries: expected an object, got {entries}"))?;
            // The key table allows `bootstrap` only.
            for value in map.values() {
                let list: Vec<&Value> = match value {
                    Value::Array(items) => items.iter().collect(),
                    Value::Null => Vec::new(),
                    other => vec![other],
                };
                for (i, item) in list.into_iter().enumerate() {
                    let entry = config_entry::decode(item)
                        .map_err(|e| format!("config_entries.bootstrap[{i}]: {}", e.message()))?;
                    config.bootstrap_entries.push(entry);
                }
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ConnectConfig, String> {
        let raw: Value = serde_json::from_str(text).unwrap();
        ConnectConfig::from_raw(raw.as_object().unwrap())
    }

    #[test]
    fn defaults_and_ca_config_as_consul() {
        let c = parse("{}").unwrap();
        assert!(c.enabled);
        assert_eq!(c.ca.leaf_cert_ttl, LEAF_CERT_TTL_DEFAULT);
        assert_eq!((c.sidecar_min_port, c.sidecar_max_port), (21000, 21255));
        assert_eq!((c.expose_min_port, c.expose_max_port), (21500, 21755));
        let c = parse(r#"{"ports":{"expose_min_port":30000,"expose_max_port":30001}}"#).unwrap();
        assert_eq!((c.expose_min_port, c.expose_max_port), (30000, 30001));
        assert_eq!(
            parse(r#"{"ports":{"expose_min_port":30001,"expose_max_port":30000}}"#).unwrap_err(),
            "Expose min port 30001 must be less than or equal to the max port 30000"
        );
        let c = parse(r#"{"connect":{"enabled":false,"ca_config":{"leaf_cert_ttl":"2h","private_key_bits":384}}}"#).unwrap();
        assert!(!c.enabled);
        assert_eq!(c.ca.leaf_cert_ttl, Duration::from_secs(7200));
        assert_eq!(c.ca.private_key_bits, 384);
        assert!(
            parse(r#"{"connect":{"ca_config":{"leaf_cert_ttl":"10m"}}}"#)
                .unwrap_err()
                .contains("leaf cert TTL must be greater or equal than 1h0m0s")
        );
        assert!(parse(
            r#"{"connect":{"ca_config":{"private_key_type":"rsa","private_key_bits":2048}}}"#
        )
        .is_err());
        assert!(parse(r#"{"connect":{"ca_provider":"vault"}}"#).is_err());
    }

    #[test]
    fn bootstrap_entries_decode_or_name_their_position() {
        let c = parse(
            r#"{"config_entries":{"bootstrap":[{"kind":"proxy-defaults","name":"global","config":{"protocol":"http"}}]}}"#,
        )
        .unwrap();
        assert_eq!(c.bootstrap_entries.len(), 1);
        assert_eq!(c.bootstrap_entries[0].protocol, "http");
        let err = parse(r#"{"config_entries":{"bootstrap":[{"kind":"nope"}]}}"#).unwrap_err();
        assert_eq!(
            err,
            "config_entries.bootstrap[0]: invalid config entry kind: nope"
        );
    }
}
