//! The agent process's own settings: the pid file, where logs go (`log_file` and its
//! rotation, `log_json`, and `enable_syslog`, which praetor refuses), how long blocking
//! queries wait (`default_query_time`, `max_query_time`), the gossip bind addresses
//! (`serf_lan`, `serf_wan`), and the version and layout keys Consul's flags set
//! (`raft_protocol`, `protocol`, `segment`, `disable_host_node_id`, the WAN join keys).
//!
//! Each is read with Consul's default and validated with a message naming the key; a value
//! praetor cannot act on stops the agent where acting otherwise would mislead (a network
//! segment, syslog); the key table (`config::keys`) warns about the others. Pure: no I/O.

use super::{get_bool, get_i64, get_string, not_acted_on, parse_ip};
use crate::proto::duration::parse_go_duration;
use serde_json::{Map, Value};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Consul's `log_rotate_duration` default.
pub const LOG_ROTATE_DURATION_DEFAULT: Duration = Duration::from_secs(24 * 3600);
/// Consul's `default_query_time`: how long a blocking query waits without `?wait`.
pub const DEFAULT_QUERY_TIME_DEFAULT: Duration = Duration::from_secs(300);
/// Consul's `max_query_time`: the longest a blocking query waits, whatever `?wait` says.
pub const MAX_QUERY_TIME_DEFAULT: Duration = Duration::from_secs(600);
/// The only Raft protocol praetor's servers speak (Consul's default since 1.0).
pub const RAFT_PROTOCOL: i64 = 3;
/// The gossip protocol versions Consul accepts for `protocol` (praetor speaks 2; the key
/// table warns about any other).
pub const GOSSIP_PROTOCOL_MIN: i64 = 2;
pub const GOSSIP_PROTOCOL_MAX: i64 = 3;

/// `log_file` and its rotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFileConfig {
    /// The active file, or a directory (ending in `/`) to hold `consul.log`.
    pub path: PathBuf,
    /// Rotate once the active file has this many bytes; 0: no size limit.
    pub rotate_bytes: u64,
    /// Rotate once the active file is this old.
    pub rotate_duration: Duration,
    /// Rotated files kept: 0 keeps all of them, a negative number none.
    pub rotate_max_files: i64,
}

/// The settings this module reads.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessConfig {
    /// `pid_file`: written at start, removed at a clean exit.
    pub pid_file: Option<PathBuf>,
    pub log_json: bool,
    pub log_file: Option<LogFileConfig>,
    pub default_query_time: Duration,
    pub max_query_time: Duration,
    /// `serf_lan` (`-serf-lan-bind`): the address the LAN pool binds, instead of `bind_addr`.
    pub serf_lan_bind: Option<IpAddr>,
    /// `serf_wan` (`-serf-wan-bind`): the address the WAN pool binds.
    pub serf_wan_bind: Option<IpAddr>,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig {
            pid_file: None,
            log_json: false,
            log_file: None,
            default_query_time: DEFAULT_QUERY_TIME_DEFAULT,
            max_query_time: MAX_QUERY_TIME_DEFAULT,
            serf_lan_bind: None,
            serf_wan_bind: None,
        }
    }
}

fn duration(raw: &Map<String, Value>, key: &str) -> Result<Option<Duration>, String> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => parse_go_duration(text)
            .map(Some)
            .map_err(|_| format!("{key}: {text:?} is not a duration")),
        Some(Value::Number(seconds)) => seconds
            .as_u64()
            .map(|s| Some(Duration::from_secs(s)))
            .ok_or_else(|| format!("{key}: {seconds} is not a duration")),
        Some(other) => Err(format!("{key}: expected a duration, got {other}")),
    }
}

fn positive_duration(raw: &Map<String, Value>, key: &str) -> Result<Option<Duration>, String> {
    match duration(raw, key)? {
        Some(d) if d.is_zero() => Err(format!("{key} must be greater than zero")),
        other => Ok(other),
    }
}

/// Reads the process settings; warnings for keys accepted but not acted on go to `warnings`.
pub fn from_raw(
    raw: &Map<String, Value>,
    warnings: &mut Vec<String>,
) -> Result<ProcessConfig, String> {
    if get_bool(raw, "enable_syslog")? == Some(true) {
        return Err("enable_syslog (-syslog): praetor does not write to syslog; under systemd its stderr goes to the journal, or set log_file".to_string());
    }
    let log_file = log_file_from(raw, warnings)?;
    let default_query_time =
        positive_duration(raw, "default_query_time")?.unwrap_or(DEFAULT_QUERY_TIME_DEFAULT);
    let max_query_time =
        positive_duration(raw, "max_query_time")?.unwrap_or(MAX_QUERY_TIME_DEFAULT);
    check_versions(raw)?;
    if let Some(addr) = get_string(raw, "advertise_addr_wan")? {
        parse_ip("advertise_addr_wan", &addr)?;
    }
    let bind = |key: &str| {
        get_string(raw, key)?
            .map(|text| parse_ip(key, &text))
            .transpose()
    };
    Ok(ProcessConfig {
        pid_file: get_string(raw, "pid_file")?
            .filter(|p| !p.is_empty())
            .map(PathBuf::from),
        log_json: get_bool(raw, "log_json")?.unwrap_or(false),
        log_file,
        default_query_time,
        max_query_time,
        serf_lan_bind: bind("serf_lan")?,
        serf_wan_bind: bind("serf_wan")?,
    })
}

fn log_file_from(
    raw: &Map<String, Value>,
    warnings: &mut Vec<String>,
) -> Result<Option<LogFileConfig>, String> {
    let rotate_bytes = get_i64(raw, "log_rotate_bytes")?;
    if let Some(bytes) = rotate_bytes.filter(|b| *b < 0) {
        return Err(format!(
            "log_rotate_bytes cannot be {bytes}. Must be greater than or equal to zero"
        ));
    }
    let rotate_duration = positive_duration(raw, "log_rotate_duration")?;
    let rotate_max_files = get_i64(raw, "log_rotate_max_files")?;
    let Some(path) = get_string(raw, "log_file")?.filter(|p| !p.is_empty()) else {
        for (key, given) in [
            ("log_rotate_bytes", rotate_bytes.is_some()),
            ("log_rotate_duration", rotate_duration.is_some()),
            ("log_rotate_max_files", rotate_max_files.is_some()),
        ] {
            if given {
                warnings.push(not_acted_on(
                    key,
                    "it rotates the log file, and log_file is not set",
                ));
            }
        }
        return Ok(None);
    };
    Ok(Some(LogFileConfig {
        path: PathBuf::from(path),
        rotate_bytes: rotate_bytes.unwrap_or(0) as u64,
        rotate_duration: rotate_duration.unwrap_or(LOG_ROTATE_DURATION_DEFAULT),
        rotate_max_files: rotate_max_files.unwrap_or(0),
    }))
}

/// `raft_protocol`, `protocol` and `segment`: what praetor speaks and how it names itself
/// are fixed, so a value asking for something else is refused as Consul refuses it.
fn check_versions(raw: &Map<String, Value>) -> Result<(), String> {
    if let Some(version) = get_i64(raw, "raft_protocol")? {
        if version != RAFT_PROTOCOL {
            return Err(format!(
                "raft_protocol version {version} is not supported by this version of Consul (praetor speaks Raft protocol {RAFT_PROTOCOL})"
            ));
        }
    }
    if let Some(version) = get_i64(raw, "protocol")? {
        if !(GOSSIP_PROTOCOL_MIN..=GOSSIP_PROTOCOL_MAX).contains(&version) {
            return Err(format!(
                "protocol: version {version} is not supported (Consul accepts {GOSSIP_PROTOCOL_MIN} to {GOSSIP_PROTOCOL_MAX})"
            ));
        }
    }
    if get_string(raw, "segment")?.is_some_and(|s| !s.is_empty()) {
        return Err("Network segments are not supported in this version of Consul".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(value: Value) -> (Result<ProcessConfig, String>, Vec<String>) {
        let mut warnings = Vec::new();
        let result = from_raw(value.as_object().unwrap(), &mut warnings);
        (result, warnings)
    }

    #[test]
    fn defaults_are_consuls() {
        let (config, warnings) = read(json!({}));
        assert_eq!(config.unwrap(), ProcessConfig::default());
        assert!(warnings.is_empty());
    }

    #[test]
    fn log_file_and_rotation() {
        let (config, warnings) = read(json!({
            "log_file": "/var/log/praetor/",
            "log_rotate_bytes": 1024,
            "log_rotate_duration": "1h",
            "log_rotate_max_files": -1,
            "log_json": true,
            "pid_file": "/run/praetor.pid",
        }));
        let config = config.unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(config.log_json);
        assert_eq!(config.pid_file, Some(PathBuf::from("/run/praetor.pid")));
        assert_eq!(
            config.log_file,
            Some(LogFileConfig {
                path: PathBuf::from("/var/log/praetor/"),
                rotate_bytes: 1024,
                rotate_duration: Duration::from_secs(3600),
                rotate_max_files: -1,
            })
        );
        let (_, warnings) = read(json!({"log_rotate_bytes": 5}));
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("log_rotate_bytes"), "{warnings:?}");
        let (error, _) = read(json!({"log_rotate_duration": "0s", "log_file": "x"}));
        assert_eq!(
            error.unwrap_err(),
            "log_rotate_duration must be greater than zero"
        );
    }

    #[test]
    fn refusals_are_one_line() {
        for (raw, expected) in [
            (json!({"enable_syslog": true}), "enable_syslog (-syslog)"),
            (json!({"raft_protocol": 2}), "raft_protocol version 2"),
            (json!({"protocol": 7}), "protocol: version 7"),
            (
                json!({"segment": "alpha"}),
                "Network segments are not supported",
            ),
            (json!({"serf_lan": "nowhere"}), "serf_lan"),
            (json!({"default_query_time": "soon"}), "default_query_time"),
        ] {
            let error = read(raw.clone()).0.unwrap_err();
            assert!(error.starts_with(expected), "{raw}: {error}");
            assert!(!error.contains('\n'), "{error}");
        }
    }

    #[test]
    fn accepted_values_act() {
        let (config, warnings) = read(json!({
            "raft_protocol": 3,
            "protocol": 2,
            "disable_host_node_id": true,
            "serf_lan": "127.0.0.2",
            "default_query_time": "30s",
            "max_query_time": "1m",
        }));
        let config = config.unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(config.serf_lan_bind, Some("127.0.0.2".parse().unwrap()));
        assert_eq!(config.default_query_time, Duration::from_secs(30));
        assert_eq!(config.max_query_time, Duration::from_secs(60));
        // The WAN join keys act (`cluster::pools`); this reader only validates the address.
        let (config, warnings) = read(json!({
            "retry_join_wan": ["a"],
            "start_join_wan": ["b"],
            "advertise_addr_wan": "10.0.0.1",
        }));
        assert!(config.is_ok() && warnings.is_empty(), "{warnings:?}");
        let (error, _) = read(json!({"advertise_addr_wan": "nowhere"}));
        assert!(error.unwrap_err().starts_with("advertise_addr_wan"));
    }
}
