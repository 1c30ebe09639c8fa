//! The web UI's configuration: Consul's `ui_config` block, the deprecated top-level `ui`,
//! `ui_dir` and `ui_content_path` keys, and what the `-ui`, `-ui-dir` and `-ui-content-path`
//! flags set (the CLI turns them into `ui_config` keys, so they override files as flags do).
//!
//! Parsing and validation only: nothing here reads a file or serves a byte. Validation
//! follows Consul's, with its messages, so a config file Consul refuses is refused here too
//! (an unknown key inside `ui_config` is refused by the key table before this reads it).
//! Deprecations are collected in [`UiConfig::warnings`] and logged once at startup.

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where the UI is served when `content_path` is not set (Consul's default).
pub const UI_CONTENT_PATH_DEFAULT: &str = "/ui/";
/// Longest `content_path` accepted, in bytes.
pub const UI_CONTENT_PATH_BYTES_MAX: usize = 256;
/// Most `dashboard_url_templates` entries accepted.
pub const UI_DASHBOARD_TEMPLATES_MAX: usize = 64;
/// Most entries accepted in each `metrics_proxy` list and in `metrics_provider_files`.
pub const UI_METRICS_PROXY_ENTRIES_MAX: usize = 64;
/// Longest URL or template accepted anywhere in `ui_config`, in bytes.
pub const UI_URL_BYTES_MAX: usize = 4096;

/// `ui_config.metrics_proxy`: a read-only proxy from the agent to one metrics backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsProxy {
    /// `http://` or `https://` URL of the backend; empty when no proxy is configured.
    pub base_url: String,
    /// Headers added to every proxied request, as `(name, value)`.
    pub add_headers: Vec<(String, String)>,
    /// Absolute paths the proxy may request; empty allows every path below `base_url`.
    pub path_allowlist: Vec<String>,
}

/// The UI settings of one agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UiConfig {
    /// `ui_config.enabled` (or the deprecated `ui`, or `-ui`): serve the embedded UI.
    pub enabled: bool,
    /// `ui_config.dir` (or `-ui-dir`): serve the UI from this directory instead.
    pub dir: Option<PathBuf>,
    /// Where the UI lives: starts and ends with `/`, e.g. `/ui/`.
    pub content_path: String,
    /// Name of the metrics provider the UI should use (passed to the UI in its settings).
    pub metrics_provider: String,
    /// Extra JavaScript files a custom metrics provider would load.
    pub metrics_provider_files: Vec<String>,
    /// The provider's options: empty, or the text of a JSON object.
    pub metrics_provider_options_json: String,
    pub metrics_proxy: MetricsProxy,
    /// Link templates by kind (`service` is the one the UI shows), e.g.
    /// `https://grafana/d/x?var-service={{Service.Name}}`.
    pub dashboard_url_templates: BTreeMap<String, String>,
    /// Deprecations, logged once at startup.
    pub warnings: Vec<String>,
}

impl Default for UiConfig {
    fn default() -> Self {
        UiConfig {
            enabled: false,
            dir: None,
            content_path: UI_CONTENT_PATH_DEFAULT.to_string(),
            metrics_provider: String::new(),
            metrics_provider_files: Vec::new(),
            metrics_provider_options_json: String::new(),
            metrics_proxy: MetricsProxy::default(),
            dashboard_url_templates: BTreeMap::new(),
            warnings: Vec::new(),
        }
    }
}

impl UiConfig {
    /// Whether this agent serves a UI at all: Consul serves one when either `enabled` or
    /// `dir` is set.
    pub fn serves(&self) -> bool {
        self.enabled || self.dir.is_some()
    }

    /// Reads the UI keys from the merged configuration object.
    pub fn from_raw(raw: &Map<String, Value>, dev_mode: bool) -> Result<UiConfig, String> {
        let mut config = UiConfig::default();
        let empty = Map::new();
        let block = match raw.get("ui_config") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(map)) => map,
            // HCL writes a repeated block as a list; one block is the only sensible form.
            Some(Value::Array(items)) if items.len() == 1 && items[0].is_object() => {
                items[0].as_object().expect("checked")
            }
            Some(other) => return Err(format!("ui_config: expected an object, got {other}")),
        };

        let legacy_enabled = bool_at(raw, "ui", "ui")?;
        if legacy_enabled.is_some() {
            config.warnings.push(
                "The 'ui' field is deprecated. Use the 'ui_config.enabled' field instead."
                    .to_string(),
            );
        }
        config.enabled = bool_at(block, "enabled", "ui_config.enabled")?
            .or(legacy_enabled)
            .unwrap_or(false);

        let legacy_dir = string_at(raw, "ui_dir", "ui_dir")?;
        if legacy_dir.is_some() {
            config.warnings.push(
                "The 'ui_dir' field is deprecated. Use the 'ui_config.dir' field instead."
                    .to_string(),
            );
        }
        config.dir = string_at(block, "dir", "ui_config.dir")?
            .or(legacy_dir)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from);

        let legacy_path = string_at(raw, "ui_content_path", "ui_content_path")?;
        if legacy_path.is_some() {
            config.warnings.push(
                "The 'ui_content_path' field is deprecated. Use the 'ui_config.content_path' field instead."
                    .to_string(),
            );
        }
        let content_path =
            string_at(block, "content_path", "ui_config.content_path")?.or(legacy_path);
        config.content_path = normalize_content_path(content_path.as_deref().unwrap_or(""))?;

        config.metrics_provider =
            string_at(block, "metrics_provider", "ui_config.metrics_provider")?.unwrap_or_default();
        validate_basic_name("ui_config.metrics_provider", &config.metrics_provider, true)?;
        config.metrics_provider_files = strings_at(
            block,
            "metrics_provider_files",
            "ui_config.metrics_provider_files",
        )?;
        config.metrics_provider_options_json = string_at(
            block,
            "metrics_provider_options_json",
            "ui_config.metrics_provider_options_json",
        )?
        .unwrap_or_default();
        if !config.metrics_provider_options_json.is_empty() {
            let parsed: Result<Map<String, Value>, _> =
                serde_json::from_str(&config.metrics_provider_options_json);
            if parsed.is_err() {
                return Err(format!(
                    "ui_config.metrics_provider_options_json must be empty or a string containing a valid JSON object. received: {:?}",
                    config.metrics_provider_options_json
                ));
            }
        }
        config.metrics_proxy = metrics_proxy_from(block.get("metrics_proxy"))?;
        config.dashboard_url_templates = dashboard_templates_from(block)?;

        // Consul's rule: the embedded UI and a directory of one's own are alternatives. In
        // -dev the UI is on by default, so a directory simply replaces it there.
        if !dev_mode && config.enabled && config.dir.is_some() {
            return Err(
                "Both the ui_config.enabled and ui_config.dir (or -ui and -ui-dir) were specified, please provide only one.\n\
                 If trying to use your own web UI resources, use ui_config.dir or the -ui-dir flag.\n\
                 The web UI is included in the binary so use ui_config.enabled or the -ui flag to enable it"
                    .to_string(),
            );
        }
        debug_assert!(config.content_path.starts_with('/') && config.content_path.ends_with('/'));
        Ok(config)
    }
}

/// Consul's normalization (`/ui`, `ui/` and `/ui/` are all `/ui/`) and its rules: letters,
/// digits, `-`, `_` and `/` only, and no `v<digits>` segment, which would shadow the API.
/// The root alone is refused too: the UI needs a prefix of its own beside `/v1/`.
pub fn normalize_content_path(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Ok(UI_CONTENT_PATH_DEFAULT.to_string());
    }
    if text.len() > UI_CONTENT_PATH_BYTES_MAX {
        return Err(format!(
            "ui-content-path is longer than {UI_CONTENT_PATH_BYTES_MAX} bytes"
        ));
    }
    if !text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'/')
    {
        return Err(format!(
            "ui-content-path can only contain alphanumeric, -, _, or /. received: {text:?}"
        ));
    }
    let trimmed = text.trim_matches('/');
    if trimmed.is_empty() {
        return Err(format!(
            "ui-content-path must name a path below the root. received: {text:?}"
        ));
    }
    let versioned = trimmed.split('/').any(|segment| {
        segment.len() > 1
            && segment.starts_with('v')
            && segment[1..].bytes().all(|b| b.is_ascii_digit())
    });
    if versioned {
        return Err(format!(
            "ui-content-path cannot have 'v[0-9]'. received: {text:?}"
        ));
    }
    Ok(format!("/{trimmed}/"))
}

/// Consul's basic names: lowercase letters, digits, `-` and `_`.
fn validate_basic_name(field: &str, value: &str, allow_empty: bool) -> Result<(), String> {
    if value.is_empty() {
        return if allow_empty {
            Ok(())
        } else {
            Err(format!("{field} cannot be empty"))
        };
    }
    let basic = value
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if basic {
        Ok(())
    } else {
        Err(format!(
            "{field} can only contain lowercase alphanumeric, - or _ characters. received: {value:?}"
        ))
    }
}

/// Whether `url` is an absolute `http://` or `https://` URL with a host.
fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(rest) => {
            let host = rest.split(['/', '?', '#']).next().unwrap_or("");
            !host.is_empty() && url.len() <= UI_URL_BYTES_MAX && !url.contains(char::is_whitespace)
        }
        None => false,
    }
}

fn metrics_proxy_from(value: Option<&Value>) -> Result<MetricsProxy, String> {
    let block = match value {
        None | Some(Value::Null) => return Ok(MetricsProxy::default()),
        Some(Value::Object(map)) => map,
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_object() => {
            items[0].as_object().expect("checked")
        }
        Some(other) => {
            return Err(format!(
                "ui_config.metrics_proxy: expected an object, got {other}"
            ))
        }
    };
    let base_url =
        string_at(block, "base_url", "ui_config.metrics_proxy.base_url")?.unwrap_or_default();
    if !base_url.is_empty() && !is_http_url(&base_url) {
        return Err(format!(
            "ui_config.metrics_proxy.base_url must be a valid http or https URL. received: {base_url:?}"
        ));
    }
    let mut add_headers = Vec::new();
    let headers: Vec<&Value> = match block.get("add_headers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(single @ Value::Object(_)) => vec![single],
        Some(other) => {
            return Err(format!(
                "ui_config.metrics_proxy.add_headers: expected a list of {{name, value}} objects, got {other}"
            ))
        }
    };
    if headers.len() > UI_METRICS_PROXY_ENTRIES_MAX {
        return Err(format!(
            "ui_config.metrics_proxy.add_headers: at most {UI_METRICS_PROXY_ENTRIES_MAX} headers"
        ));
    }
    for header in headers {
        let Some(map) = header.as_object() else {
            return Err(
                "ui_config.metrics_proxy.add_headers: expected {name, value} objects".into(),
            );
        };
        let name =
            string_at(map, "name", "ui_config.metrics_proxy.add_headers.name")?.unwrap_or_default();
        let value = string_at(map, "value", "ui_config.metrics_proxy.add_headers.value")?
            .unwrap_or_default();
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token || value.contains(['\r', '\n']) {
            return Err(format!(
                "ui_config.metrics_proxy.add_headers: invalid header {name:?}"
            ));
        }
        add_headers.push((name, value));
    }
    let path_allowlist = strings_at(
        block,
        "path_allowlist",
        "ui_config.metrics_proxy.path_allowlist",
    )?;
    for path in &path_allowlist {
        if !path.starts_with('/') || path.contains(['?', '#']) || path.contains("/../") {
            return Err(format!(
                "ui_config.metrics_proxy.path_allowlist: path {path:?} must be an absolute URL path without query or fragment"
            ));
        }
    }
    Ok(MetricsProxy {
        base_url,
        add_headers,
        path_allowlist,
    })
}

fn dashboard_templates_from(
    block: &Map<String, Value>,
) -> Result<BTreeMap<String, String>, String> {
    let mut templates = BTreeMap::new();
    let map = match block.get("dashboard_url_templates") {
        None | Some(Value::Null) => return Ok(templates),
        Some(Value::Object(map)) => map,
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_object() => {
            items[0].as_object().expect("checked")
        }
        Some(other) => {
            return Err(format!(
                "ui_config.dashboard_url_templates: expected an object, got {other}"
            ))
        }
    };
    if map.len() > UI_DASHBOARD_TEMPLATES_MAX {
        return Err(format!(
            "ui_config.dashboard_url_templates: at most {UI_DASHBOARD_TEMPLATES_MAX} templates"
        ));
    }
    for (name, value) in map {
        validate_basic_name("ui_config.dashboard_url_templates key names", name, false)?;
        let url = value.as_str().unwrap_or("");
        if !is_http_url(url) {
            return Err(format!(
                "ui_config.dashboard_url_templates values must be a valid http or https URL. received: {value}"
            ));
        }
        templates.insert(name.clone(), url.to_string());
    }
    Ok(templates)
}

fn bool_at(map: &Map<String, Value>, key: &str, name: &str) -> Result<Option<bool>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if s == "true" || s == "false" => Ok(Some(s == "true")),
        Some(other) => Err(format!("{name}: expected a boolean, got {other}")),
    }
}

fn string_at(map: &Map<String, Value>, key: &str, name: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() <= UI_URL_BYTES_MAX => Ok(Some(s.clone())),
        Some(Value::String(_)) => Err(format!("{name}: longer than {UI_URL_BYTES_MAX} bytes")),
        Some(other) => Err(format!("{name}: expected a string, got {other}")),
    }
}

fn strings_at(map: &Map<String, Value>, key: &str, name: &str) -> Result<Vec<String>, String> {
    let items: Vec<&Value> = match map.get(key) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(single @ Value::String(_)) => vec![single],
        Some(Value::Array(items)) => items.iter().collect(),
        Some(other) => return Err(format!("{name}: expected a list of strings, got {other}")),
    };
    if items.len() > UI_METRICS_PROXY_ENTRIES_MAX {
        return Err(format!(
            "{name}: at most {UI_METRICS_PROXY_ENTRIES_MAX} entries"
        ));
    }
    items
        .into_iter()
        .map(|item| match item {
            Value::String(s) if s.len() <= UI_URL_BYTES_MAX => Ok(s.clone()),
            _ => Err(format!("{name}: expected a list of strings")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value, dev: bool) -> Result<UiConfig, String> {
        UiConfig::from_raw(value.as_object().unwrap(), dev)
    }

    #[test]
    fn defaults_serve_nothing_at_ui() {
        let config = parse(json!({}), false).unwrap();
        assert!(!config.serves());
        assert_eq!(config.content_path, "/ui/");
        assert!(config.warnings.is_empty());
    }

    #[test]
    fn content_paths_normalize_and_bad_ones_are_refused() {
        for (given, want) in [
            ("ui", "/ui/"),
            ("/console", "/console/"),
            ("/a/b/", "/a/b/"),
            ("//x//", "/x/"),
            ("/vault/", "/vault/"),
        ] {
            assert_eq!(normalize_content_path(given).unwrap(), want, "{given}");
        }
        for (given, needle) in [
            ("/ui!/", "alphanumeric"),
            ("/v1/", "v[0-9]"),
            ("/x/v22/y", "v[0-9]"),
            ("/", "below the root"),
        ] {
            let error = normalize_content_path(given).unwrap_err();
            assert!(error.contains(needle), "{given}: {error}");
        }
        let long = format!("/{}/", "a".repeat(UI_CONTENT_PATH_BYTES_MAX));
        assert!(normalize_content_path(&long).is_err());
    }

    #[test]
    fn block_keys_win_over_deprecated_ones_which_warn() {
        let config = parse(
            json!({"ui": true, "ui_content_path": "/old", "ui_config": {"content_path": "/new"}}),
            false,
        )
        .unwrap();
        assert!(config.enabled && config.serves());
        assert_eq!(config.content_path, "/new/");
        assert_eq!(config.warnings.len(), 2, "{:?}", config.warnings);
        let config = parse(json!({"ui": true, "ui_config": {"enabled": false}}), false).unwrap();
        assert!(!config.serves(), "ui_config.enabled decides");
        let config = parse(json!({"ui_dir": "/srv/ui"}), false).unwrap();
        assert_eq!(config.dir, Some(PathBuf::from("/srv/ui")));
        assert!(
            config.serves() && !config.enabled,
            "a directory serves on its own"
        );
    }

    #[test]
    fn dev_mode_serves_the_ui_and_flags_override_files() {
        use crate::config::{build, ConfigSources};
        let dev = build(&ConfigSources {
            dev: true,
            ..Default::default()
        })
        .unwrap();
        assert!(
            dev.ui.serves() && dev.ui.warnings.is_empty(),
            "{:?}",
            dev.ui
        );
        let off = build(&ConfigSources {
            dev: true,
            hcl_snippets: vec!["ui_config {\n enabled = false\n }".into()],
            ..Default::default()
        })
        .unwrap();
        assert!(!off.ui.serves(), "a file turns the -dev default off");
        // What the CLI makes of `-ui -ui-content-path console`: flags win over files.
        let flags = json!({"ui_config": {"enabled": true, "content_path": "console"}});
        let on = build(&ConfigSources {
            dev: true,
            hcl_snippets: vec!["ui_config {\n enabled = false\n }".into()],
            flags: flags.as_object().unwrap().clone(),
            ..Default::default()
        })
        .unwrap();
        assert!(on.ui.serves());
        assert_eq!(on.ui.content_path, "/console/");
    }

    #[test]
    fn enabled_and_dir_conflict_outside_dev_mode_only() {
        let both = json!({"ui_config": {"enabled": true, "dir": "/srv/ui"}});
        let error = parse(both.clone(), false).unwrap_err();
        assert!(error.contains("please provide only one"), "{error}");
        let config = parse(both, true).unwrap();
        assert!(config.serves() && config.dir.is_some());
    }

    #[test]
    fn metrics_and_dashboard_settings_are_validated() {
        let config = parse(
            json!({"ui_config": {
                "metrics_provider": "prometheus",
                "metrics_provider_options_json": "{\"x\": 1}",
                "metrics_proxy": {
                    "base_url": "http://prom:9090",
                    "add_headers": [{"name": "Authorization", "value": "Bearer t"}],
                    "path_allowlist": ["/api/v1/query"]
                },
                "dashboard_url_templates": {"service": "https://grafana/d/x?s={{Service.Name}}"}
            }}),
            false,
        )
        .unwrap();
        assert_eq!(config.metrics_provider, "prometheus");
        assert_eq!(config.metrics_proxy.base_url, "http://prom:9090");
        assert_eq!(
            config.metrics_proxy.add_headers,
            vec![("Authorization".to_string(), "Bearer t".to_string())]
        );
        assert_eq!(config.dashboard_url_templates.len(), 1);
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        for (block, needle) in [
            (json!({"metrics_provider": "Prom"}), "lowercase"),
            (
                json!({"metrics_provider_options_json": "[1]"}),
                "JSON object",
            ),
            (
                json!({"metrics_proxy": {"base_url": "ftp://x"}}),
                "http or https",
            ),
            (
                json!({"metrics_proxy": {"path_allowlist": ["relative"]}}),
                "absolute",
            ),
            (
                json!({"metrics_proxy": {"add_headers": [{"name": "Bad Name", "value": "v"}]}}),
                "invalid header",
            ),
            (
                json!({"dashboard_url_templates": {"service": "nope"}}),
                "http or https",
            ),
            (
                json!({"dashboard_url_templates": {"Svc": "http://x"}}),
                "lowercase",
            ),
            (json!({"enabled": "yes"}), "boolean"),
        ] {
            let error = parse(json!({ "ui_config": block }), false).unwrap_err();
            assert!(error.contains(needle), "{block}: {error}");
        }
    }
}
