//! The `acl { … }` section and Consul's legacy ACL keys, parsed into [`AclConfig`].
//!
//! Legacy keys are mapped as Consul maps them: the new key wins when both are given, and
//! each legacy key found adds Consul's deprecation warning (`The 'acl_token' field is
//! deprecated. Use the 'acl.tokens.default' field instead.`). `acl_datacenter` also turns
//! ACLs on, as in Consul.
//!
//! Which of these settings act is the key table's (`config::keys`) to say; it warns about
//! the others.

use crate::proto::duration::parse_go_duration;
use crate::store::acl::authorizer::DefaultPolicy;
use serde_json::{Map, Value};
use std::time::Duration;

/// Consul's default `acl.policy_ttl`, `acl.token_ttl` and `acl.role_ttl`.
pub const ACL_CACHE_TTL_DEFAULT: Duration = Duration::from_secs(30);

/// `acl.down_policy`: what a non-authoritative server does when it cannot reach the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DownPolicy {
    Allow,
    Deny,
    ExtendCache,
    AsyncCache,
}

/// `acl.tokens`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AclTokens {
    pub initial_management: Option<String>,
    pub agent: Option<String>,
    pub agent_recovery: Option<String>,
    pub default: Option<String>,
    pub replication: Option<String>,
    pub config_file_service_registration: Option<String>,
}

/// The ACL settings of an agent.
#[derive(Clone, Debug, PartialEq)]
pub struct AclConfig {
    pub enabled: bool,
    pub default_policy: DefaultPolicy,
    pub down_policy: DownPolicy,
    pub policy_ttl: Duration,
    pub token_ttl: Duration,
    pub role_ttl: Duration,
    pub enable_token_persistence: bool,
    pub enable_token_replication: bool,
    pub enable_key_list_policy: bool,
    pub tokens: AclTokens,
    /// `primary_datacenter` (or legacy `acl_datacenter`): the authoritative ACL datacenter.
    pub primary_datacenter: Option<String>,
    /// Deprecation warnings and the not-enforced warning, to log once at start.
    pub warnings: Vec<String>,
}

impl Default for AclConfig {
    fn default() -> AclConfig {
        AclConfig {
            enabled: false,
            default_policy: DefaultPolicy::Allow,
            down_policy: DownPolicy::ExtendCache,
            policy_ttl: ACL_CACHE_TTL_DEFAULT,
            token_ttl: ACL_CACHE_TTL_DEFAULT,
            role_ttl: ACL_CACHE_TTL_DEFAULT,
            enable_token_persistence: false,
            enable_token_replication: false,
            enable_key_list_policy: false,
            tokens: AclTokens::default(),
            primary_datacenter: None,
            warnings: Vec::new(),
        }
    }
}

fn object<'a>(
    map: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(inner)) => Ok(Some(inner)),
        // HCL blocks may arrive as a list of objects; the last one wins like a merge.
        Some(Value::Array(items)) => match items.last() {
            Some(Value::Object(inner)) => Ok(Some(inner)),
            _ => Err(format!("{key}: expected an object")),
        },
        Some(other) => Err(format!("{key}: expected an object, got {other}")),
    }
}

fn string(map: &Map<String, Value>, path: &str, key: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{path}: expected a string, got {other}")),
    }
}

fn boolean(map: &Map<String, Value>, path: &str, key: &str) -> Result<Option<bool>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if s == "true" || s == "false" => Ok(Some(s == "true")),
        Some(other) => Err(format!("{path}: expected a boolean, got {other}")),
    }
}

fn duration(map: &Map<String, Value>, path: &str, key: &str) -> Result<Option<Duration>, String> {
    match string(map, path, key)? {
        None => Ok(None),
        Some(text) => parse_go_duration(&text)
            .map(Some)
            .map_err(|e| format!("{path}: {e}")),
    }
}

fn deprecation(old: &str, new: &str) -> String {
    format!("The '{old}' field is deprecated. Use the '{new}' field instead.")
}

impl AclConfig {
    /// Reads `acl`, `primary_datacenter` and the legacy top-level ACL keys from the merged
    /// configuration.
    pub fn from_raw(raw: &Map<String, Value>) -> Result<AclConfig, String> {
        let mut config = AclConfig::default();
        let empty = Map::new();
        let acl = object(raw, "acl")?.unwrap_or(&empty);
        let tokens = object(acl, "tokens")?.unwrap_or(&empty);
        let mut warnings = Vec::new();

        let mut enabled = boolean(acl, "acl.enabled", "enabled")?;
        let mut default_policy = string(acl, "acl.default_policy", "default_policy")?;
        let mut down_policy = string(acl, "acl.down_policy", "down_policy")?;
        let mut token_ttl = duration(acl, "acl.token_ttl", "token_ttl")?;
        let mut token_replication = boolean(
            acl,
            "acl.enable_token_replication",
            "enable_token_replication",
        )?;
        let mut key_list = boolean(acl, "acl.enable_key_list_policy", "enable_key_list_policy")?;
        let mut t = AclTokens {
            initial_management: string(
                tokens,
                "acl.tokens.initial_management",
                "initial_management",
            )?,
            agent: string(tokens, "acl.tokens.agent", "agent")?,
            agent_recovery: string(tokens, "acl.tokens.agent_recovery", "agent_recovery")?,
            default: string(tokens, "acl.tokens.default", "default")?,
            replication: string(tokens, "acl.tokens.replication", "replication")?,
            config_file_service_registration: string(
                tokens,
                "acl.tokens.config_file_service_registration",
                "config_file_service_registration",
            )?,
        };
        let mut primary = string(raw, "primary_datacenter", "primary_datacenter")?;

        // Consul's order (applyDeprecatedConfig): each legacy key fills its new key if unset.
        let legacy = |key: &str| string(raw, key, key);
        if let Some(v) = string(tokens, "acl.tokens.agent_master", "agent_master")? {
            t.agent_recovery.get_or_insert(v);
            warnings.push(deprecation(
                "acl.tokens.agent_master",
                "acl.tokens.agent_recovery",
            ));
        }
        if let Some(v) = legacy("acl_agent_master_token")? {
            t.agent_recovery.get_or_insert(v);
            warnings.push(deprecation(
                "acl_agent_master_token",
                "acl.tokens.agent_recovery",
            ));
        }
        if let Some(v) = legacy("acl_agent_token")? {
            t.agent.get_or_insert(v);
            warnings.push(deprecation("acl_agent_token", "acl.tokens.agent"));
        }
        if let Some(v) = legacy("acl_token")? {
            t.default.get_or_insert(v);
            warnings.push(deprecation("acl_token", "acl.tokens.default"));
        }
        if let Some(v) = string(tokens, "acl.tokens.master", "master")? {
            t.initial_management.get_or_insert(v);
            warnings.push(deprecation(
                "acl.tokens.master",
                "acl.tokens.initial_management",
            ));
        }
        if let Some(v) = legacy("acl_master_token")? {
            t.initial_management.get_or_insert(v);
            warnings.push(deprecation(
                "acl_master_token",
                "acl.tokens.initial_management",
            ));
        }
        if let Some(v) = legacy("acl_replication_token")? {
            t.replication.get_or_insert(v);
            token_replication = Some(true);
            warnings.push(deprecation(
                "acl_replication_token",
                "acl.tokens.replication",
            ));
        }
        if let Some(v) = boolean(raw, "enable_acl_replication", "enable_acl_replication")? {
            token_replication.get_or_insert(v);
            warnings.push(deprecation(
                "enable_acl_replication",
                "acl.enable_token_replication",
            ));
        }
        if let Some(v) = legacy("acl_datacenter")? {
            primary.get_or_insert(v);
            // Consul: the acl_datacenter key implicitly enables ACLs.
            enabled = Some(true);
            warnings.push(deprecation("acl_datacenter", "primary_datacenter"));
        }
        if let Some(v) = legacy("acl_default_policy")? {
            default_policy.get_or_insert(v);
            warnings.push(deprecation("acl_default_policy", "acl.default_policy"));
        }
        if let Some(v) = legacy("acl_down_policy")? {
            down_policy.get_or_insert(v);
            warnings.push(deprecation("acl_down_policy", "acl.down_policy"));
        }
        if let Some(v) = duration(raw, "acl_ttl", "acl_ttl")? {
            token_ttl.get_or_insert(v);
            warnings.push(deprecation("acl_ttl", "acl.token_ttl"));
        }
        if let Some(v) = boolean(
            raw,
            "acl_enable_key_list_policy",
            "acl_enable_key_list_policy",
        )? {
            key_list.get_or_insert(v);
            warnings.push(deprecation(
                "acl_enable_key_list_policy",
                "acl.enable_key_list_policy",
            ));
        }

        config.enabled = enabled.unwrap_or(false);
        config.default_policy = match default_policy.as_deref() {
            None | Some("allow") => DefaultPolicy::Allow,
            Some("deny") => DefaultPolicy::Deny,
            Some(other) => {
                return Err(format!(
                    "acl.default_policy: invalid value {other:?}: must be \"allow\" or \"deny\""
                ))
            }
        };
        config.down_policy = match down_policy.as_deref() {
            None | Some("extend-cache") => DownPolicy::ExtendCache,
            Some("allow") => DownPolicy::Allow,
            Some("deny") => DownPolicy::Deny,
            Some("async-cache") => DownPolicy::AsyncCache,
            Some(other) => return Err(format!("invalid value for acl.down_policy: {other:?}")),
        };
        config.token_ttl = token_ttl.unwrap_or(ACL_CACHE_TTL_DEFAULT);
        config.policy_ttl =
            duration(acl, "acl.policy_ttl", "policy_ttl")?.unwrap_or(ACL_CACHE_TTL_DEFAULT);
        config.role_ttl =
            duration(acl, "acl.role_ttl", "role_ttl")?.unwrap_or(ACL_CACHE_TTL_DEFAULT);
        config.enable_token_persistence = boolean(
            acl,
            "acl.enable_token_persistence",
            "enable_token_persistence",
        )?
        .unwrap_or(false);
        config.enable_token_replication = token_replication.unwrap_or(false);
        config.enable_key_list_policy = key_list.unwrap_or(false);
        config.tokens = t;
        config.primary_datacenter = primary;
        config.warnings = warnings;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<AclConfig, String> {
        AclConfig::from_raw(value.as_object().unwrap())
    }

    #[test]
    fn defaults_are_consuls() {
        let c = parse(json!({})).unwrap();
        assert!(!c.enabled);
        assert_eq!(c.default_policy, DefaultPolicy::Allow);
        assert_eq!(c.down_policy, DownPolicy::ExtendCache);
        assert_eq!(c.token_ttl, Duration::from_secs(30));
        assert!(
            c.warnings.is_empty(),
            "nothing enabled, nothing to warn about"
        );
    }

    #[test]
    fn the_acl_block_is_read() {
        let c = parse(json!({
            "primary_datacenter": "dc1",
            "acl": {
                "enabled": true, "default_policy": "deny", "down_policy": "async-cache",
                "policy_ttl": "1m", "token_ttl": "45s", "role_ttl": "2m",
                "enable_token_persistence": true, "enable_token_replication": true,
                "tokens": {
                    "initial_management": "im", "agent": "ag", "agent_recovery": "ar",
                    "default": "df", "replication": "rp", "config_file_service_registration": "cf"
                }
            }
        }))
        .unwrap();
        assert!(c.enabled && c.enable_token_persistence && c.enable_token_replication);
        assert_eq!(c.default_policy, DefaultPolicy::Deny);
        assert_eq!(c.down_policy, DownPolicy::AsyncCache);
        assert_eq!(c.policy_ttl, Duration::from_secs(60));
        assert_eq!(c.token_ttl, Duration::from_secs(45));
        assert_eq!(c.role_ttl, Duration::from_secs(120));
        assert_eq!(c.tokens.initial_management.as_deref(), Some("im"));
        assert_eq!(
            c.tokens.config_file_service_registration.as_deref(),
            Some("cf")
        );
        assert_eq!(c.primary_datacenter.as_deref(), Some("dc1"));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn legacy_keys_map_as_consul_maps_them_with_warnings() {
        let c = parse(json!({
            "acl_master_token": "m", "acl_token": "t", "acl_agent_token": "a",
            "acl_agent_master_token": "am", "acl_default_policy": "deny",
            "acl_down_policy": "deny", "acl_datacenter": "dc9", "acl_ttl": "10s",
            "acl_replication_token": "r",
            "acl": {"tokens": {"master": "from-acl.tokens.master", "agent_master": "am2"}}
        }))
        .unwrap();
        // acl.tokens.master is applied before acl_master_token, so it wins (first one set).
        assert_eq!(
            c.tokens.initial_management.as_deref(),
            Some("from-acl.tokens.master")
        );
        assert_eq!(c.tokens.agent_recovery.as_deref(), Some("am2"));
        assert_eq!(c.tokens.default.as_deref(), Some("t"));
        assert_eq!(c.tokens.agent.as_deref(), Some("a"));
        assert_eq!(c.tokens.replication.as_deref(), Some("r"));
        assert!(c.enable_token_replication);
        assert!(c.enabled, "acl_datacenter turns ACLs on");
        assert_eq!(c.primary_datacenter.as_deref(), Some("dc9"));
        assert_eq!(c.default_policy, DefaultPolicy::Deny);
        assert_eq!(c.down_policy, DownPolicy::Deny);
        assert_eq!(c.token_ttl, Duration::from_secs(10));
        assert!(c.warnings.contains(&"The 'acl_master_token' field is deprecated. Use the 'acl.tokens.initial_management' field instead.".to_string()));
        assert!(c.warnings.contains(&"The 'acl.tokens.agent_master' field is deprecated. Use the 'acl.tokens.agent_recovery' field instead.".to_string()));
        assert!(c.warnings.contains(&"The 'acl_datacenter' field is deprecated. Use the 'primary_datacenter' field instead.".to_string()));
        assert!(!c.warnings.iter().any(|w| w.contains("not implemented")));
        // The new key wins over the legacy one.
        let c = parse(json!({"acl_default_policy": "deny", "acl": {"default_policy": "allow"}}))
            .unwrap();
        assert_eq!(c.default_policy, DefaultPolicy::Allow);
        assert_eq!(c.warnings.len(), 1);
    }

    #[test]
    fn bad_values_are_refused_with_the_key() {
        for (value, needle) in [
            (
                json!({"acl": {"default_policy": "maybe"}}),
                "acl.default_policy",
            ),
            (
                json!({"acl": {"down_policy": "later"}}),
                "invalid value for acl.down_policy",
            ),
            (
                json!({"acl": {"enabled": 3}}),
                "acl.enabled: expected a boolean",
            ),
            (json!({"acl": {"token_ttl": "soon"}}), "acl.token_ttl"),
            (
                json!({"acl": {"tokens": {"agent": 5}}}),
                "acl.tokens.agent: expected a string",
            ),
            (json!({"acl": "on"}), "acl: expected an object"),
            (json!({"acl_token": true}), "acl_token: expected a string"),
        ] {
            let err = parse(value.clone()).unwrap_err();
            assert!(err.contains(needle), "{value}: {err}");
        }
    }
}
