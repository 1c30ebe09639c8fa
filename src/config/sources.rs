//! Where configuration comes from: reading config files and directories (JSON or HCL, each
//! checked against the key table before it is used), and merging documents in Consul's order.
//!
//! Invariant: a document reaches [`merge`] only after `schema` accepted every key in it, and
//! the lists Consul concatenates ([`APPEND_KEYS`]) are the only values that do not replace.

use super::schema;
use crate::proto::hcl;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// Largest config file praetor reads.
pub(super) const CONFIG_FILE_BYTES_MAX: u64 = 16 << 20;

/// Keys whose list values concatenate across sources instead of replacing.
pub(super) const APPEND_KEYS: &[&str] = &[
    "services",
    "checks",
    "retry_join",
    "start_join",
    "recursors",
    "retry_join_wan",
    "watches",
];

/// Deep-merges `overlay` into `base`.
pub fn merge(base: &mut Map<String, Value>, overlay: Map<String, Value>) {
    for (key, value) in overlay {
        // Consul accepts both `service {…}` and `services [...]`; fold singular forms.
        let (key, value) = match key.as_str() {
            "service" => ("services".to_string(), as_list(value)),
            "check" => ("checks".to_string(), as_list(value)),
            _ => (key, value),
        };
        match (base.get_mut(&key), value) {
            (Some(Value::Object(existing)), Value::Object(incoming)) => merge(existing, incoming),
            (Some(Value::Array(existing)), Value::Array(incoming))
                if APPEND_KEYS.contains(&key.as_str()) =>
            {
                existing.extend(incoming)
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

pub(super) fn as_list(value: Value) -> Value {
    match value {
        Value::Array(_) => value,
        other => Value::Array(vec![other]),
    }
}

/// Parses one config document; `hcl` selects the syntax. Every key is checked against the
/// key table here, so the error names the document as well as the key path, as Consul's does
/// (`failed to parse agent.hcl: 'ports.http' expected type 'int', …`); the document comes
/// back with its keys in their canonical spelling.
pub fn parse_document(text: &str, hcl: bool, origin: &str) -> Result<Map<String, Value>, String> {
    let mut map = if hcl {
        hcl::parse(text).map_err(|e| format!("failed to parse {origin}: {e}"))?
    } else {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => {
                return Err(format!(
                    "failed to parse {origin}: the top level must be an object"
                ))
            }
            Err(e) => return Err(format!("failed to parse {origin}: invalid JSON: {e}")),
        }
    };
    let syntax = if hcl {
        schema::Syntax::Hcl
    } else {
        schema::Syntax::Json
    };
    schema::check_document(&mut map, syntax)
        .map_err(|e| format!("failed to parse {origin}: {e}"))?;
    Ok(map)
}

pub(super) fn read_config_file(
    path: &Path,
    format: Option<ConfigFormat>,
) -> Result<Map<String, Value>, String> {
    let metadata = std::fs::metadata(path)
        .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
    if metadata.len() > CONFIG_FILE_BYTES_MAX {
        return Err(format!(
            "config file {} exceeds {CONFIG_FILE_BYTES_MAX} bytes",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
    let hcl = match format {
        Some(format) => format == ConfigFormat::Hcl,
        None => path.extension().is_some_and(|e| e == "hcl"),
    };
    parse_document(&text, hcl, &path.display().to_string())
}

/// Files of a config directory that Consul would load, in lexical order: those ending in
/// `.json` or `.hcl`, or every file when `-config-format` names the format.
pub(super) fn config_dir_files(
    dir: &Path,
    format: Option<ConfigFormat>,
) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read config dir {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        let loadable =
            format.is_some() || path.extension().is_some_and(|e| e == "json" || e == "hcl");
        if path.is_file() && loadable {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Command-line inputs to [`build`], already parsed by the CLI.
#[derive(Clone, Debug, Default)]
pub struct ConfigSources {
    pub dev: bool,
    pub config_files: Vec<PathBuf>,
    pub config_dirs: Vec<PathBuf>,
    pub hcl_snippets: Vec<String>,
    /// Flag values as a config object (e.g. `-http-port 1` becomes `{"ports":{"http":1}}`).
    pub flags: Map<String, Value>,
    /// `-config-format`: read every config file in this format, whatever its extension.
    pub config_format: Option<ConfigFormat>,
}

/// The syntax `-config-format` forces on config files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigFormat {
    Json,
    Hcl,
}

impl ConfigFormat {
    /// Consul's values and its message for any other.
    pub fn parse(text: &str) -> Result<ConfigFormat, String> {
        match text {
            "json" => Ok(ConfigFormat::Json),
            "hcl" => Ok(ConfigFormat::Hcl),
            _ => Err("-config-format must be either 'hcl' or 'json'".to_string()),
        }
    }
}

/// Reads every config file the sources name, each on its own, and returns one line per
/// file that cannot be read or parsed (`praetor validate` reports them all, where a start
/// stops at the first).
pub fn check_documents(sources: &ConfigSources) -> Vec<String> {
    let mut problems = Vec::new();
    let mut files = sources.config_files.clone();
    for dir in &sources.config_dirs {
        match config_dir_files(dir, sources.config_format) {
            Ok(found) => files.extend(found),
            Err(e) => problems.push(e),
        }
    }
    for file in files {
        if let Err(e) = read_config_file(&file, sources.config_format) {
            problems.push(e);
        }
    }
    problems
}
