//! The `acl { … }` section and Consul's legacy ACL keys, parsed into [`AclConfig`].
//!
//! Legacy keys are mapped as Consul maps them: the new key wins when both are given, and
//! each legacy key found adds Consul's deprecation warning (`The 'acl_token' field is
//! deprecated. Use the 'acl.tokens.default' field instead.`). `acl_datacenter` also turns
//! ACLs on, as in Consul.
//!
//! Which of these settings act is the key table's (`config::keys`) to say; it warns about
//! the others.
//!
//! With `acl.enable_token_persistence`, the tokens set through `/v1/agent/token/<kind>` are
//! kept in `<data_dir>/acl-tokens.json` (Consul's file and format) and win over the
//! configuration's at the next start ([`PersistedTokens`]); this module parses and renders
//! the file, the node reads it and the API handler writes it.

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
        let empty = Map::new();
        let acl = object(raw, "acl")?.unwrap_or(&empty);
        let tokens = object(acl, "tokens")?.unwrap_or(&empty);
        let mut given = GivenAcl::read(raw, acl, tokens)?;
        let warnings = given.fill_from_deprecated_keys(raw, tokens)?;
        Ok(AclConfig {
            enabled: given.enabled.unwrap_or(false),
            default_policy: default_policy_from(given.default_policy.as_deref())?,
            down_policy: down_policy_from(given.down_policy.as_deref())?,
            token_ttl: given.token_ttl.unwrap_or(ACL_CACHE_TTL_DEFAULT),
            policy_ttl: duration(acl, "acl.policy_ttl", "policy_ttl")?
                .unwrap_or(ACL_CACHE_TTL_DEFAULT),
            role_ttl: duration(acl, "acl.role_ttl", "role_ttl")?.unwrap_or(ACL_CACHE_TTL_DEFAULT),
            enable_token_persistence: boolean(
                acl,
                "acl.enable_token_persistence",
                "enable_token_persistence",
            )?
            .unwrap_or(false),
            enable_token_replication: given.token_replication.unwrap_or(false),
            enable_key_list_policy: given.key_list.unwrap_or(false),
            tokens: given.tokens,
            primary_datacenter: given.primary,
            warnings,
        })
    }
}

/// The ACL settings a configuration gives, before defaults: read from the current keys, then
/// filled in from the deprecated ones.
struct GivenAcl {
    enabled: Option<bool>,
    default_policy: Option<String>,
    down_policy: Option<String>,
    token_ttl: Option<Duration>,
    token_replication: Option<bool>,
    key_list: Option<bool>,
    tokens: AclTokens,
    primary: Option<String>,
}

impl GivenAcl {
    /// The current keys: `acl`, `acl.tokens` and `primary_datacenter`.
    fn read(
        raw: &Map<String, Value>,
        acl: &Map<String, Value>,
        tokens: &Map<String, Value>,
    ) -> Result<GivenAcl, String> {
        let enabled = boolean(acl, "acl.enabled", "enabled")?;
        let default_policy = string(acl, "acl.default_policy", "default_policy")?;
        let down_policy = string(acl, "acl.down_policy", "down_policy")?;
        let token_ttl = duration(acl, "acl.token_ttl", "token_ttl")?;
        let token_replication = boolean(
            acl,
            "acl.enable_token_replication",
            "enable_token_replication",
        )?;
        let key_list = boolean(acl, "acl.enable_key_list_policy", "enable_key_list_policy")?;
        let t = AclTokens {
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
        let primary = string(raw, "primary_datacenter", "primary_datacenter")?;

        Ok(GivenAcl {
            enabled,
            default_policy,
            down_policy,
            token_ttl,
            token_replication,
            key_list,
            tokens: t,
            primary,
        })
    }

    /// Fills unset settings from the deprecated keys, returning Consul's warning for each
    /// deprecated key given.
    fn fill_from_deprecated_keys(
        &mut self,
        raw: &Map<String, Value>,
        tokens: &Map<String, Value>,
    ) -> Result<Vec<String>, String> {
        let deprecations = self.tokens_from_deprecated(raw, tokens)?;
        self.settings_from_deprecated(raw, deprecations)
    }

    /// The deprecated token keys, top-level and under `acl.tokens`.
    fn tokens_from_deprecated(
        &mut self,
        raw: &Map<String, Value>,
        tokens: &Map<String, Value>,
    ) -> Result<Deprecations, String> {
        let g = self;
        // Consul's order (applyDeprecatedConfig): each legacy key fills its new key if unset.
        let legacy = |key: &str| string(raw, key, key);
        let mut d = Deprecations::default();
        let recovery = "acl.tokens.agent_recovery";
        let value = string(tokens, "acl.tokens.agent_master", "agent_master")?;
        d.fill(
            &mut g.tokens.agent_recovery,
            value,
            "acl.tokens.agent_master",
            recovery,
        );
        let value = legacy("acl_agent_master_token")?;
        d.fill(
            &mut g.tokens.agent_recovery,
            value,
            "acl_agent_master_token",
            recovery,
        );
        let value = legacy("acl_agent_token")?;
        d.fill(
            &mut g.tokens.agent,
            value,
            "acl_agent_token",
            "acl.tokens.agent",
        );
        let value = legacy("acl_token")?;
        d.fill(
            &mut g.tokens.default,
            value,
            "acl_token",
            "acl.tokens.default",
        );
        let management = "acl.tokens.initial_management";
        let value = string(tokens, "acl.tokens.master", "master")?;
        d.fill(
            &mut g.tokens.initial_management,
            value,
            "acl.tokens.master",
            management,
        );
        let value = legacy("acl_master_token")?;
        d.fill(
            &mut g.tokens.initial_management,
            value,
            "acl_master_token",
            management,
        );
        Ok(d)
    }

    /// The deprecated keys for settings other than the tokens, after `tokens_from_deprecated`.
    fn settings_from_deprecated(
        &mut self,
        raw: &Map<String, Value>,
        mut d: Deprecations,
    ) -> Result<Vec<String>, String> {
        let g = self;
        let legacy = |key: &str| string(raw, key, key);
        let value = legacy("acl_replication_token")?;
        if value.is_some() {
            g.token_replication = Some(true);
        }
        let replication = "acl.tokens.replication";
        d.fill(
            &mut g.tokens.replication,
            value,
            "acl_replication_token",
            replication,
        );
        let key = "enable_acl_replication";
        let value = boolean(raw, key, key)?;
        d.fill(
            &mut g.token_replication,
            value,
            key,
            "acl.enable_token_replication",
        );
        let value = legacy("acl_datacenter")?;
        if value.is_some() {
            // Consul: the acl_datacenter key implicitly enables ACLs.
            g.enabled = Some(true);
        }
        d.fill(
            &mut g.primary,
            value,
            "acl_datacenter",
            "primary_datacenter",
        );
        let value = legacy("acl_default_policy")?;
        d.fill(
            &mut g.default_policy,
            value,
            "acl_default_policy",
            "acl.default_policy",
        );
        let value = legacy("acl_down_policy")?;
        d.fill(
            &mut g.down_policy,
            value,
            "acl_down_policy",
            "acl.down_policy",
        );
        let value = duration(raw, "acl_ttl", "acl_ttl")?;
        d.fill(&mut g.token_ttl, value, "acl_ttl", "acl.token_ttl");
        let key = "acl_enable_key_list_policy";
        let value = boolean(raw, key, key)?;
        d.fill(&mut g.key_list, value, key, "acl.enable_key_list_policy");
        Ok(d.warnings)
    }
}

/// The deprecated keys given, as Consul warns about them.
#[derive(Default)]
struct Deprecations {
    warnings: Vec<String>,
}

impl Deprecations {
    /// A deprecated key's value fills its replacement's `slot` when the replacement is
    /// unset, and the deprecation is warned about whenever the old key is given.
    fn fill<T>(&mut self, slot: &mut Option<T>, value: Option<T>, old: &str, new: &str) {
        if let Some(value) = value {
            slot.get_or_insert(value);
            self.warnings.push(deprecation(old, new));
        }
    }
}

/// `acl.default_policy`: `allow` (the default) or `deny`.
fn default_policy_from(text: Option<&str>) -> Result<DefaultPolicy, String> {
    match text {
        None | Some("allow") => Ok(DefaultPolicy::Allow),
        Some("deny") => Ok(DefaultPolicy::Deny),
        Some(other) => Err(format!(
            "acl.default_policy: invalid value {other:?}: must be \"allow\" or \"deny\""
        )),
    }
}

/// `acl.down_policy`: what a server does when it cannot resolve a token, `extend-cache` by
/// default.
fn down_policy_from(text: Option<&str>) -> Result<DownPolicy, String> {
    match text {
        None | Some("extend-cache") => Ok(DownPolicy::ExtendCache),
        Some("allow") => Ok(DownPolicy::Allow),
        Some("deny") => Ok(DownPolicy::Deny),
        Some("async-cache") => Ok(DownPolicy::AsyncCache),
        Some(other) => Err(format!("invalid value for acl.down_policy: {other:?}")),
    }
}

/// The file in the data directory that keeps the tokens set through
/// `/v1/agent/token/<kind>` when `acl.enable_token_persistence` is on (Consul's name).
pub const TOKENS_FILE: &str = "acl-tokens.json";
/// Largest tokens file read back, in bytes: five tokens fit in it many times over, and a
/// larger file is not one praetor or Consul wrote.
pub const TOKENS_FILE_BYTES_MAX: u64 = 64 * 1024;

/// The tokens file of an agent with `acl.enable_token_persistence` on: where it is and the
/// tokens it holds, rewritten whole at each change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenFile {
    pub path: std::path::PathBuf,
    pub persisted: PersistedTokens,
}

/// The agent's tokens that `/v1/agent/token/<kind>` sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    Default,
    Agent,
    AgentRecovery,
    Replication,
    ConfigFileServiceRegistration,
}

impl TokenKind {
    /// The kind a `/v1/agent/token/<kind>` path names, with Consul's legacy names.
    pub fn parse(kind: &str) -> Option<TokenKind> {
        Some(match kind {
            "default" | "acl_token" => TokenKind::Default,
            "agent" | "acl_agent_token" => TokenKind::Agent,
            "agent_recovery" | "agent_master" | "acl_agent_master_token" => {
                TokenKind::AgentRecovery
            }
            "replication" | "acl_replication_token" => TokenKind::Replication,
            "config_file_service_registration" => TokenKind::ConfigFileServiceRegistration,
            _ => return None,
        })
    }

    /// The name the tokens file keeps this kind under (Consul's).
    pub fn file_key(self) -> &'static str {
        match self {
            TokenKind::Default => "default",
            TokenKind::Agent => "agent",
            TokenKind::AgentRecovery => "agent_recovery",
            TokenKind::Replication => "replication",
            TokenKind::ConfigFileServiceRegistration => "config_file_service_registration",
        }
    }

    pub const ALL: [TokenKind; 5] = [
        TokenKind::Default,
        TokenKind::Agent,
        TokenKind::AgentRecovery,
        TokenKind::Replication,
        TokenKind::ConfigFileServiceRegistration,
    ];

    /// This kind's slot among the agent's tokens.
    pub fn slot(self, tokens: &mut AclTokens) -> &mut Option<String> {
        match self {
            TokenKind::Default => &mut tokens.default,
            TokenKind::Agent => &mut tokens.agent,
            TokenKind::AgentRecovery => &mut tokens.agent_recovery,
            TokenKind::Replication => &mut tokens.replication,
            TokenKind::ConfigFileServiceRegistration => {
                &mut tokens.config_file_service_registration
            }
        }
    }
}

/// The tokens set through `/v1/agent/token/<kind>`, as the tokens file keeps them: only
/// those set through the API, never the configuration's (Consul's rule), so that a token
/// removed from the configuration is not brought back by the file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PersistedTokens {
    /// Indexed as [`TokenKind::ALL`].
    tokens: [Option<String>; 5],
}

impl PersistedTokens {
    fn index(kind: TokenKind) -> usize {
        TokenKind::ALL
            .iter()
            .position(|k| *k == kind)
            .expect("every kind is listed")
    }

    pub fn get(&self, kind: TokenKind) -> Option<&str> {
        self.tokens[Self::index(kind)].as_deref()
    }

    /// Records a token set through the API; an empty one clears the kind.
    pub fn set(&mut self, kind: TokenKind, token: Option<String>) {
        self.tokens[Self::index(kind)] = token.filter(|t| !t.is_empty());
    }

    /// Reads a tokens file as Consul writes it (`{"agent": "…", …}`), including the
    /// `agent_master` name Consul before 1.11 wrote for the recovery token.
    pub fn from_json(text: &str) -> Result<PersistedTokens, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let Value::Object(map) = value else {
            return Err("the top level must be an object".to_string());
        };
        let mut persisted = PersistedTokens::default();
        let text_of = |key: &str| -> Result<Option<String>, String> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(token)) => Ok(Some(token.clone())),
                Some(other) => Err(format!("{key}: expected a string, got {other}")),
            }
        };
        for kind in TokenKind::ALL {
            persisted.set(kind, text_of(kind.file_key())?);
        }
        if persisted.get(TokenKind::AgentRecovery).is_none() {
            persisted.set(TokenKind::AgentRecovery, text_of("agent_master")?);
        }
        Ok(persisted)
    }

    /// The file's text: the tokens set, under Consul's names.
    pub fn to_json(&self) -> String {
        let mut map = Map::new();
        for kind in TokenKind::ALL {
            if let Some(token) = self.get(kind) {
                map.insert(
                    kind.file_key().to_string(),
                    Value::String(token.to_string()),
                );
            }
        }
        Value::Object(map).to_string()
    }

    /// Puts the persisted tokens over the configuration's, as Consul loads them: a persisted
    /// token wins, with a warning when the configuration sets that kind too.
    pub fn apply(&self, tokens: &mut AclTokens) -> Vec<String> {
        let mut warnings = Vec::new();
        for kind in TokenKind::ALL {
            let Some(persisted) = self.get(kind) else {
                continue;
            };
            let slot = kind.slot(tokens);
            if slot.as_deref().is_some_and(|t| !t.is_empty()) {
                warnings.push(format!(
                    "acl: {:?} token present in both the configuration and persisted token store, using the persisted token",
                    kind.file_key()
                ));
            }
            *slot = Some(persisted.to_string());
        }
        warnings
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

    #[test]
    fn persisted_tokens_read_write_and_win_as_consuls_do() {
        let file = PersistedTokens::from_json(
            r#"{"agent": "a1", "agent_master": "old-recovery", "default": ""}"#,
        )
        .unwrap();
        assert_eq!(file.get(TokenKind::Agent), Some("a1"));
        assert_eq!(file.get(TokenKind::AgentRecovery), Some("old-recovery"));
        assert_eq!(file.get(TokenKind::Default), None, "an empty token is none");
        let mut written = file.clone();
        written.set(TokenKind::Replication, Some("r1".into()));
        written.set(TokenKind::Agent, None);
        assert_eq!(
            written.to_json(),
            r#"{"agent_recovery":"old-recovery","replication":"r1"}"#
        );
        assert_eq!(
            PersistedTokens::from_json(&written.to_json()).unwrap(),
            written
        );

        let mut tokens = AclTokens {
            agent: Some("from-config".into()),
            default: Some("config-default".into()),
            ..AclTokens::default()
        };
        let warnings = file.apply(&mut tokens);
        assert_eq!(tokens.agent.as_deref(), Some("a1"));
        assert_eq!(tokens.agent_recovery.as_deref(), Some("old-recovery"));
        assert_eq!(tokens.default.as_deref(), Some("config-default"));
        assert_eq!(
            warnings,
            vec!["acl: \"agent\" token present in both the configuration and persisted token store, using the persisted token"]
        );
        for bad in ["[]", "{\"agent\": 5}", "{"] {
            assert!(PersistedTokens::from_json(bad).is_err(), "{bad}");
        }
        assert_eq!(
            TokenKind::parse("acl_agent_master_token"),
            Some(TokenKind::AgentRecovery)
        );
        assert_eq!(TokenKind::parse("master"), None);
    }
}
