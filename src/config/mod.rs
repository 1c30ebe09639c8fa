//! Agent configuration: Consul's command-line flags and its JSON and HCL config files, merged
//! into one typed [`AgentConfig`].
//!
//! Sources apply in Consul's order: built-in defaults (dev-mode defaults under `-dev`), then
//! config files and directories in the order given (a directory's `.json`/`.hcl` files in
//! lexical order), then `-hcl` snippets, then flags. Objects merge key by key; lists such as
//! `services`, `checks` and `retry_join` concatenate; scalars are overridden by later sources.
//! Keys that praetor does not know are accepted and reported once as a warning, so a Consul
//! config file keeps working.

pub mod acl;

use crate::proto::duration::parse_go_duration;
use serde_json::{Map, Value};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Consul's default `raft_snapshot_threshold`, in applied entries.
pub const RAFT_SNAPSHOT_THRESHOLD_ENTRIES_DEFAULT: u64 = 16_384;
/// Consul's default `raft_trailing_logs`, in entries.
pub const RAFT_TRAILING_LOGS_ENTRIES_DEFAULT: u64 = 10_240;
/// Upper bound for both raft entry-count settings: far above any sensible value, low enough
/// that a typo cannot make the log grow without bound.
const RAFT_ENTRIES_SETTING_MAX: i64 = 100_000_000;

/// Consul's default `kv_max_value_size`: 512 KiB.
pub const KV_MAX_VALUE_SIZE_DEFAULT: usize = 512 * 1024;
/// Consul's default `txn_max_req_len`: 512 KiB.
pub const TXN_MAX_REQ_LEN_DEFAULT: usize = 512 * 1024;
/// Largest config file praetor reads.
const CONFIG_FILE_BYTES_MAX: u64 = 16 << 20;

/// Listener ports; a negative port disables that listener, as in Consul.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ports {
    pub http: i32,
    pub https: i32,
    pub dns: i32,
    pub server: i32,
    pub serf_lan: i32,
    pub serf_wan: i32,
    pub grpc: i32,
}

impl Default for Ports {
    fn default() -> Self {
        Ports {
            http: 8500,
            https: -1,
            dns: 8600,
            server: 8300,
            serf_lan: 8301,
            serf_wan: 8302,
            grpc: -1,
        }
    }
}

#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub dev_mode: bool,
    pub server: bool,
    pub bootstrap: bool,
    pub bootstrap_expect: u32,
    pub node_name: String,
    pub node_id: Option<String>,
    pub datacenter: String,
    pub data_dir: Option<PathBuf>,
    pub bind_addr: IpAddr,
    pub advertise_addr: Option<IpAddr>,
    pub client_addrs: Vec<IpAddr>,
    pub ports: Ports,
    /// Shard threads; 0 means one per available core.
    pub shards: usize,
    pub log_level: String,
    pub retry_join: Vec<String>,
    pub start_join: Vec<String>,
    pub kv_max_value_size: usize,
    pub txn_max_req_len: usize,
    /// Applied entries between snapshots (Consul's `raft_snapshot_threshold`, default 16384).
    pub raft_snapshot_threshold_entries: u64,
    /// Entries kept in the log below a snapshot so that slightly lagging followers catch up
    /// from the log instead of a snapshot (Consul's `raft_trailing_logs`, default 10240).
    pub raft_trailing_logs_entries: u64,
    pub ui: bool,
    /// `domain`, `alt_domain`, `recursors` and `dns_config.*`.
    pub dns: DnsConfig,
    /// `acl { … }`, `primary_datacenter` and the legacy ACL keys.
    pub acl: acl::AclConfig,
    /// The merged configuration object, for sections later subsystems read themselves
    /// (`services`, `checks`, `dns_config`, `recursors`, …).
    pub raw: Map<String, Value>,
    /// Keys present in the sources that praetor does not know, for the startup warning.
    pub unknown_keys: Vec<String>,
    /// Where this configuration came from, so `reload` can read the files again.
    pub sources: ConfigSources,
}

impl AgentConfig {
    /// The address other servers and agents reach this one at.
    pub fn advertise(&self) -> IpAddr {
        if let Some(addr) = self.advertise_addr {
            return addr;
        }
        if !self.bind_addr.is_unspecified() {
            return self.bind_addr;
        }
        guess_private_address().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
    }

    pub fn raw_str(&self, key: &str) -> Option<&str> {
        self.raw.get(key).and_then(Value::as_str)
    }
}

/// Finds the address the host would use for outbound traffic, without sending a packet.
fn guess_private_address() -> Option<IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("10.255.255.255:1").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

/// The top-level keys praetor understands (now or in a later subsystem). Anything else is
/// warned about and ignored.
const KNOWN_KEYS: &[&str] = &[
    "acl",
    "acl_datacenter",
    "ae_interval",
    "check_update_interval",
    "acl_default_policy",
    "addresses",
    "advertise_addr",
    "advertise_addr_wan",
    "alt_domain",
    "autopilot",
    "bind_addr",
    "bootstrap",
    "bootstrap_expect",
    "check",
    "checks",
    "client_addr",
    "connect",
    "data_dir",
    "datacenter",
    "dev_mode",
    "disable_remote_exec",
    "disable_update_check",
    "discovery_max_stale",
    "dns_config",
    "domain",
    "enable_local_script_checks",
    "enable_script_checks",
    "encrypt",
    "encrypt_verify_incoming",
    "encrypt_verify_outgoing",
    "leave_on_terminate",
    "limits",
    "log_level",
    "node_id",
    "node_meta",
    "node_name",
    "performance",
    "ports",
    "primary_datacenter",
    "raft_protocol",
    "raft_snapshot_interval",
    "raft_snapshot_threshold",
    "raft_trailing_logs",
    "reconnect_timeout",
    "reconnect_timeout_wan",
    "recursor",
    "recursors",
    "retry_interval",
    "retry_interval_wan",
    "retry_join",
    "retry_join_wan",
    "retry_max",
    "retry_max_wan",
    "server",
    "server_name",
    "service",
    "services",
    "session_ttl_min",
    "shards",
    "skip_leave_on_interrupt",
    "start_join",
    "start_join_wan",
    "telemetry",
    "tls",
    "translate_wan_addrs",
    "txn_max_req_len",
    "kv_max_value_size",
    "ui",
    "ui_config",
    "watches",
    "rejoin_after_leave",
    "http_config",
    "tombstone_ttl",
    "enable_debug_faults",
];

/// Keys whose list values concatenate across sources instead of replacing.
const APPEND_KEYS: &[&str] = &[
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
            "recursor" => ("recursors".to_string(), as_list(value)),
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

fn as_list(value: Value) -> Value {
    match value {
        Value::Array(_) => value,
        other => Value::Array(vec![other]),
    }
}

/// Parses one config document; `hcl` selects the syntax.
pub fn parse_document(text: &str, hcl: bool, origin: &str) -> Result<Map<String, Value>, String> {
    let value: Value = if hcl {
        hcl::from_str(text).map_err(|e| format!("{origin}: invalid HCL: {e}"))?
    } else {
        serde_json::from_str(text).map_err(|e| format!("{origin}: invalid JSON: {e}"))?
    };
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(format!("{origin}: the top level must be an object")),
    }
}

fn read_config_file(path: &Path) -> Result<Map<String, Value>, String> {
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
    let hcl = path.extension().is_some_and(|e| e == "hcl");
    parse_document(&text, hcl, &path.display().to_string())
}

/// Files of a config directory that Consul would load, in lexical order.
fn config_dir_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read config dir {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "json" || e == "hcl") {
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
}

/// Merges every source and extracts the typed configuration.
pub fn build(sources: &ConfigSources) -> Result<AgentConfig, String> {
    let mut merged = Map::new();
    if sources.dev {
        merged.insert("dev_mode".into(), Value::Bool(true));
        merged.insert("server".into(), Value::Bool(true));
        merged.insert("bootstrap".into(), Value::Bool(true));
        merged.insert("bind_addr".into(), Value::String("127.0.0.1".into()));
        merged.insert("client_addr".into(), Value::String("127.0.0.1".into()));
        merged.insert("ui".into(), Value::Bool(true));
    }
    for file in &sources.config_files {
        merge(&mut merged, read_config_file(file)?);
    }
    for dir in &sources.config_dirs {
        for file in config_dir_files(dir)? {
            merge(&mut merged, read_config_file(&file)?);
        }
    }
    for (i, snippet) in sources.hcl_snippets.iter().enumerate() {
        merge(
            &mut merged,
            parse_document(snippet, true, &format!("-hcl #{}", i + 1))?,
        );
    }
    merge(&mut merged, sources.flags.clone());
    let mut config = from_merged(merged)?;
    config.sources = sources.clone();
    Ok(config)
}

fn get_bool(map: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if s == "true" || s == "false" => Ok(Some(s == "true")),
        Some(other) => Err(format!("{key}: expected a boolean, got {other}")),
    }
}

fn get_i64(map: &Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| format!("{key}: expected an integer, got {n}")),
        Some(Value::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| format!("{key}: expected an integer, got {s:?}")),
        Some(other) => Err(format!("{key}: expected an integer, got {other}")),
    }
}

fn get_string(map: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{key}: expected a string, got {other}")),
    }
}

fn get_strings(map: &Map<String, Value>, key: &str) -> Result<Vec<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{key}: expected a list of strings"))
            })
            .collect(),
        Some(other) => Err(format!("{key}: expected a list of strings, got {other}")),
    }
}

fn parse_ip(key: &str, text: &str) -> Result<IpAddr, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{key}: {text:?} is not an IP address"))
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return "praetor".to_string();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn from_merged(raw: Map<String, Value>) -> Result<AgentConfig, String> {
    let dev_mode = get_bool(&raw, "dev_mode")?.unwrap_or(false);
    let mut ports = Ports::default();
    if let Some(Value::Object(p)) = raw.get("ports") {
        let port = |key: &str, default: i32| -> Result<i32, String> {
            match get_i64(p, key)? {
                None => Ok(default),
                Some(v) if (-1..=65535).contains(&v) => Ok(v as i32),
                Some(v) => Err(format!("ports.{key}: {v} is not a valid port")),
            }
        };
        ports = Ports {
            http: port("http", ports.http)?,
            https: port("https", ports.https)?,
            dns: port("dns", ports.dns)?,
            server: port("server", ports.server)?,
            serf_lan: port("serf_lan", ports.serf_lan)?,
            serf_wan: port("serf_wan", ports.serf_wan)?,
            grpc: port("grpc", ports.grpc)?,
        };
    }
    let bind_addr = match get_string(&raw, "bind_addr")? {
        Some(text) => parse_ip("bind_addr", &text)?,
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    let advertise_addr = get_string(&raw, "advertise_addr")?
        .map(|t| parse_ip("advertise_addr", &t))
        .transpose()?;
    let client_text = get_string(&raw, "client_addr")?.unwrap_or_else(|| "127.0.0.1".to_string());
    let client_addrs = client_text
        .split_whitespace()
        .map(|t| parse_ip("client_addr", t))
        .collect::<Result<Vec<_>, _>>()?;
    if client_addrs.is_empty() {
        return Err("client_addr: no address given".to_string());
    }
    let server = get_bool(&raw, "server")?.unwrap_or(false);
    let bootstrap = get_bool(&raw, "bootstrap")?.unwrap_or(false);
    let bootstrap_expect = get_i64(&raw, "bootstrap_expect")?.unwrap_or(0);
    if !(0..=32).contains(&bootstrap_expect) {
        return Err(format!(
            "bootstrap_expect: {bootstrap_expect} is out of range 0..=32"
        ));
    }
    if bootstrap && bootstrap_expect > 0 && !dev_mode {
        return Err("'bootstrap_expect' and 'bootstrap' are mutually exclusive".to_string());
    }
    if !server && (bootstrap || bootstrap_expect > 0) {
        return Err("bootstrap and bootstrap_expect require server mode (-server)".to_string());
    }
    let data_dir = get_string(&raw, "data_dir")?.map(PathBuf::from);
    if data_dir.is_none() && !dev_mode {
        return Err(
            "data_dir cannot be empty (use -data-dir, or -dev for a throwaway agent)".to_string(),
        );
    }
    let datacenter = get_string(&raw, "datacenter")?
        .unwrap_or_else(|| "dc1".to_string())
        .to_lowercase();
    if datacenter.is_empty()
        || !datacenter
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "datacenter: {datacenter:?} must be alphanumeric, '-' or '_'"
        ));
    }
    let node_name = get_string(&raw, "node_name")?.unwrap_or_else(hostname);
    if node_name.is_empty() || node_name.len() > 256 {
        return Err("node_name: must be 1 to 256 characters".to_string());
    }
    let shards = get_i64(&raw, "shards")?.unwrap_or(0);
    if !(0..=256).contains(&shards) {
        return Err(format!("shards: {shards} is out of range 0..=256"));
    }
    let kv_max_value_size =
        get_i64(&raw, "kv_max_value_size")?.unwrap_or(KV_MAX_VALUE_SIZE_DEFAULT as i64);
    let txn_max_req_len =
        get_i64(&raw, "txn_max_req_len")?.unwrap_or(TXN_MAX_REQ_LEN_DEFAULT as i64);
    if kv_max_value_size <= 0 || txn_max_req_len <= 0 {
        return Err("kv_max_value_size and txn_max_req_len must be positive".to_string());
    }
    let raft_snapshot_threshold_entries = get_i64(&raw, "raft_snapshot_threshold")?
        .unwrap_or(RAFT_SNAPSHOT_THRESHOLD_ENTRIES_DEFAULT as i64);
    if !(1..=RAFT_ENTRIES_SETTING_MAX).contains(&raft_snapshot_threshold_entries) {
        return Err(format!(
            "raft_snapshot_threshold: {raft_snapshot_threshold_entries} is out of range 1..={RAFT_ENTRIES_SETTING_MAX}"
        ));
    }
    let raft_trailing_logs_entries =
        get_i64(&raw, "raft_trailing_logs")?.unwrap_or(RAFT_TRAILING_LOGS_ENTRIES_DEFAULT as i64);
    if !(0..=RAFT_ENTRIES_SETTING_MAX).contains(&raft_trailing_logs_entries) {
        return Err(format!(
            "raft_trailing_logs: {raft_trailing_logs_entries} is out of range 0..={RAFT_ENTRIES_SETTING_MAX}"
        ));
    }
    let mut unknown_keys: Vec<String> = raw
        .keys()
        .filter(|k| {
            !KNOWN_KEYS.contains(&k.as_str()) && !acl::LEGACY_TOP_LEVEL_KEYS.contains(&k.as_str())
        })
        .cloned()
        .collect();
    unknown_keys.sort();
    Ok(AgentConfig {
        dev_mode,
        server,
        bootstrap,
        bootstrap_expect: bootstrap_expect as u32,
        node_name,
        node_id: get_string(&raw, "node_id")?,
        datacenter,
        data_dir,
        bind_addr,
        advertise_addr,
        client_addrs,
        ports,
        shards: shards as usize,
        log_level: get_string(&raw, "log_level")?
            .unwrap_or_else(|| if dev_mode { "debug" } else { "info" }.to_string()),
        retry_join: get_strings(&raw, "retry_join")?,
        start_join: get_strings(&raw, "start_join")?,
        kv_max_value_size: kv_max_value_size as usize,
        txn_max_req_len: txn_max_req_len as usize,
        raft_snapshot_threshold_entries: raft_snapshot_threshold_entries as u64,
        raft_trailing_logs_entries: raft_trailing_logs_entries as u64,
        ui: get_bool(&raw, "ui")?.unwrap_or(false),
        dns: dns_config_from(&raw)?,
        acl: acl::AclConfig::from_raw(&raw)?,
        raw,
        unknown_keys,
        sources: ConfigSources::default(),
    })
}

/// Consul's default `dns_config.udp_answer_limit`.
pub const DNS_UDP_ANSWER_LIMIT_DEFAULT: usize = 3;
/// Consul's default `dns_config.max_stale`: 87600h (ten years, i.e. effectively unbounded).
pub const DNS_MAX_STALE_DEFAULT: Duration = Duration::from_secs(87_600 * 3600);
/// Consul's default `dns_config.recursor_timeout`.
pub const DNS_RECURSOR_TIMEOUT_DEFAULT: Duration = Duration::from_secs(2);
/// Port assumed for a recursor given without one.
pub const DNS_RECURSOR_PORT_DEFAULT: u16 = 53;
/// Most recursors praetor accepts; more would only lengthen the worst-case failover.
pub const DNS_RECURSORS_MAX: usize = 16;

/// Consul's `dns_config.soa` block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SoaConfig {
    pub refresh_seconds: u32,
    pub retry_seconds: u32,
    pub expire_seconds: u32,
    pub min_ttl_seconds: u32,
}

/// How recursors are tried: in order, or starting from a random one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecursorStrategy {
    Sequential,
    Random,
}

/// The DNS interface's configuration, with Consul's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct DnsConfig {
    /// The domain answered authoritatively, lowercase, without the trailing dot ("consul").
    pub domain: String,
    /// A second domain answered like `domain` (`alt_domain`), if any.
    pub alt_domain: Option<String>,
    /// Upstream servers for names outside the domains, tried per `recursor_strategy`.
    pub recursors: Vec<SocketAddr>,
    pub recursor_strategy: RecursorStrategy,
    pub recursor_timeout: Duration,
    pub allow_stale: bool,
    pub max_stale: Duration,
    pub node_ttl: Duration,
    /// `service_ttl`: exact service names, and prefixes (keys ending in `*`, stored without it).
    pub service_ttl_exact: Vec<(String, Duration)>,
    pub service_ttl_prefix: Vec<(String, Duration)>,
    pub udp_answer_limit: usize,
    /// Most A/AAAA answers per service lookup (0: no limit).
    pub a_record_limit: usize,
    pub enable_truncate: bool,
    pub only_passing: bool,
    pub enable_additional_node_meta_txt: bool,
    pub soa: SoaConfig,
}

impl Default for DnsConfig {
    fn default() -> Self {
        DnsConfig {
            domain: "consul".to_string(),
            alt_domain: None,
            recursors: Vec::new(),
            recursor_strategy: RecursorStrategy::Sequential,
            recursor_timeout: DNS_RECURSOR_TIMEOUT_DEFAULT,
            allow_stale: true,
            max_stale: DNS_MAX_STALE_DEFAULT,
            node_ttl: Duration::ZERO,
            service_ttl_exact: Vec::new(),
            service_ttl_prefix: Vec::new(),
            udp_answer_limit: DNS_UDP_ANSWER_LIMIT_DEFAULT,
            a_record_limit: 0,
            enable_truncate: false,
            only_passing: false,
            enable_additional_node_meta_txt: true,
            soa: SoaConfig {
                refresh_seconds: 3600,
                retry_seconds: 600,
                expire_seconds: 86_400,
                min_ttl_seconds: 0,
            },
        }
    }
}

impl DnsConfig {
    /// The TTL for a service: an exact `service_ttl` key wins, then the longest matching
    /// `prefix*` key (`*` alone matches everything), else 0.
    pub fn service_ttl(&self, service: &str) -> Duration {
        if let Some((_, ttl)) = self
            .service_ttl_exact
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(service))
        {
            return *ttl;
        }
        self.service_ttl_prefix
            .iter()
            .filter(|(prefix, _)| {
                service.len() >= prefix.len()
                    && service.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
            })
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, ttl)| *ttl)
            .unwrap_or(Duration::ZERO)
    }
}

fn get_duration(map: &Map<String, Value>, key: &str) -> Result<Option<Duration>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => parse_go_duration(text)
            .map(Some)
            .map_err(|e| format!("{key}: {}", e.0)),
        // A bare number is seconds, as Consul's HCL decoder reads it.
        Some(Value::Number(n)) => n
            .as_u64()
            .map(|s| Some(Duration::from_secs(s)))
            .ok_or_else(|| format!("{key}: expected a duration, got {n}")),
        Some(other) => Err(format!("{key}: expected a duration, got {other}")),
    }
}

fn get_u32(map: &Map<String, Value>, key: &str) -> Result<Option<u32>, String> {
    match get_i64(map, key)? {
        None => Ok(None),
        Some(v) => u32::try_from(v)
            .map(Some)
            .map_err(|_| format!("{key}: {v} is out of range")),
    }
}

/// Normalizes a domain: lowercase, no leading or trailing dot, valid labels.
fn normalize_domain(key: &str, text: &str) -> Result<String, String> {
    let domain = text.trim().trim_matches('.').to_ascii_lowercase();
    if domain.is_empty() {
        return Err(format!("{key}: must not be empty or the root"));
    }
    crate::proto::dns::WireName::from_dotted(&domain)
        .map_err(|_| format!("{key}: {text:?} is not a valid domain name"))?;
    Ok(domain)
}

/// Parses a recursor address: `ip`, `ip:port`, `[ipv6]:port` or a bare IPv6 address.
pub fn parse_recursor(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Ok(ip) = text
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        return Ok(SocketAddr::new(ip, DNS_RECURSOR_PORT_DEFAULT));
    }
    Err(format!(
        "recursors: {text:?} is not an IP address with an optional port"
    ))
}

fn dns_config_from(raw: &Map<String, Value>) -> Result<DnsConfig, String> {
    let mut config = DnsConfig::default();
    if let Some(domain) = get_string(raw, "domain")? {
        config.domain = normalize_domain("domain", &domain)?;
    }
    if let Some(alt) = get_string(raw, "alt_domain")? {
        if !alt.trim().trim_matches('.').is_empty() {
            let alt = normalize_domain("alt_domain", &alt)?;
            if alt == config.domain {
                return Err("alt_domain: must differ from domain".to_string());
            }
            config.alt_domain = Some(alt);
        }
    }
    let empty = Map::new();
    let section = match raw.get("dns_config") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(map)) => map,
        Some(other) => return Err(format!("dns_config: expected an object, got {other}")),
    };
    // Consul reads recursors at the top level; `dns_config.recursors` is accepted too.
    let mut recursors = get_strings(raw, "recursors")?;
    recursors.extend(get_strings(section, "recursors")?);
    if recursors.len() > DNS_RECURSORS_MAX {
        return Err(format!(
            "recursors: at most {DNS_RECURSORS_MAX} are supported, got {}",
            recursors.len()
        ));
    }
    config.recursors = recursors
        .iter()
        .map(|r| parse_recursor(r))
        .collect::<Result<_, _>>()?;
    let prefixed = |key: &str| format!("dns_config.{key}");
    let wrap = |e: String| format!("dns_config.{e}");
    if let Some(v) = get_bool(section, "allow_stale").map_err(wrap)? {
        config.allow_stale = v;
    }
    if let Some(v) = get_duration(section, "max_stale").map_err(wrap)? {
        config.max_stale = v;
    }
    if let Some(v) = get_duration(section, "node_ttl").map_err(wrap)? {
        config.node_ttl = v;
    }
    if let Some(v) = get_duration(section, "recursor_timeout").map_err(wrap)? {
        if v.is_zero() {
            return Err(format!(
                "{}: must be positive",
                prefixed("recursor_timeout")
            ));
        }
        config.recursor_timeout = v;
    }
    if let Some(strategy) = get_string(section, "recursor_strategy").map_err(wrap)? {
        config.recursor_strategy = match strategy.as_str() {
            "sequential" | "" => RecursorStrategy::Sequential,
            "random" => RecursorStrategy::Random,
            other => {
                return Err(format!(
                    "{}: {other:?} is not sequential or random",
                    prefixed("recursor_strategy")
                ))
            }
        };
    }
    match section.get("service_ttl") {
        None | Some(Value::Null) => {}
        Some(Value::Object(ttls)) => {
            for key in ttls.keys() {
                let ttl = get_duration(ttls, key)
                    .map_err(|e| format!("dns_config.service_ttl.{e}"))?
                    .unwrap_or(Duration::ZERO);
                match key.strip_suffix('*') {
                    Some(prefix) => config.service_ttl_prefix.push((prefix.to_string(), ttl)),
                    None => config.service_ttl_exact.push((key.clone(), ttl)),
                }
            }
        }
        Some(other) => {
            return Err(format!(
                "dns_config.service_ttl: expected an object of durations, got {other}"
            ))
        }
    }
    if let Some(v) = get_i64(section, "udp_answer_limit").map_err(wrap)? {
        if v < 0 {
            return Err(format!(
                "{}: must not be negative",
                prefixed("udp_answer_limit")
            ));
        }
        config.udp_answer_limit = v as usize;
    }
    if let Some(v) = get_i64(section, "a_record_limit").map_err(wrap)? {
        if v < 0 {
            return Err(format!(
                "{}: must not be negative",
                prefixed("a_record_limit")
            ));
        }
        config.a_record_limit = v as usize;
    }
    if let Some(v) = get_bool(section, "enable_truncate").map_err(wrap)? {
        config.enable_truncate = v;
    }
    if let Some(v) = get_bool(section, "only_passing").map_err(wrap)? {
        config.only_passing = v;
    }
    if let Some(v) = get_bool(section, "enable_additional_node_meta_txt").map_err(wrap)? {
        config.enable_additional_node_meta_txt = v;
    }
    if let Some(Value::Object(soa)) = section.get("soa") {
        let field = |key: &str, default: u32| -> Result<u32, String> {
            Ok(get_u32(soa, key)
                .map_err(|e| format!("dns_config.soa.{e}"))?
                .unwrap_or(default))
        };
        config.soa = SoaConfig {
            refresh_seconds: field("refresh", config.soa.refresh_seconds)?,
            retry_seconds: field("retry", config.soa.retry_seconds)?,
            expire_seconds: field("expire", config.soa.expire_seconds)?,
            min_ttl_seconds: field("min_ttl", config.soa.min_ttl_seconds)?,
        };
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn dev_defaults() {
        let c = build(&ConfigSources {
            dev: true,
            ..Default::default()
        })
        .unwrap();
        assert!(c.dev_mode && c.server && c.bootstrap);
        assert_eq!(c.ports, Ports::default());
        assert_eq!(c.datacenter, "dc1");
        assert_eq!(c.client_addrs, vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
        assert_eq!(c.kv_max_value_size, 512 * 1024);
    }

    #[test]
    fn flags_override_files_and_lists_append() {
        let dir = std::env::temp_dir().join(format!("praetor-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json_path = dir.join("a.json");
        std::fs::write(&json_path, r#"{"datacenter":"east","ports":{"http":1000,"dns":1001},"retry_join":["a"],"future_key":1}"#).unwrap();
        let hcl_path = dir.join("b.hcl");
        std::fs::write(
            &hcl_path,
            "retry_join = [\"b\"]\nports {\n  dns = 2001\n}\nservice {\n  name = \"web\"\n}\n",
        )
        .unwrap();
        let sources = ConfigSources {
            dev: false,
            config_files: vec![json_path, hcl_path],
            config_dirs: vec![],
            hcl_snippets: vec!["node_name = \"n1\"".into()],
            flags: object(json!({"data_dir": "/tmp/x", "ports": {"http": 3000}})),
        };
        let c = build(&sources).unwrap();
        assert_eq!(c.datacenter, "east");
        assert_eq!(c.ports.http, 3000);
        assert_eq!(c.ports.dns, 2001);
        assert_eq!(c.node_name, "n1");
        assert_eq!(c.retry_join, vec!["a", "b"]);
        assert_eq!(c.raw["services"], json!([{"name": "web"}]));
        assert_eq!(c.unknown_keys, vec!["future_key"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_are_readable() {
        let err = build(&ConfigSources::default()).unwrap_err();
        assert!(err.contains("data_dir"), "{err}");
        let bad_port = ConfigSources {
            dev: true,
            flags: object(json!({"ports": {"http": 70000}})),
            ..Default::default()
        };
        assert!(build(&bad_port).unwrap_err().contains("ports.http"));
        let bad_json = parse_document("{", false, "x.json").unwrap_err();
        assert!(bad_json.starts_with("x.json: invalid JSON"));
        let disabled = ConfigSources {
            dev: true,
            flags: object(json!({"ports": {"dns": -1}})),
            ..Default::default()
        };
        assert_eq!(build(&disabled).unwrap().ports.dns, -1);
    }

    #[test]
    fn dns_config_defaults_and_overrides() {
        let c = build(&ConfigSources {
            dev: true,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.dns, DnsConfig::default());
        assert!(c.dns.allow_stale && !c.dns.only_passing && !c.dns.enable_truncate);
        assert_eq!(c.dns.udp_answer_limit, 3);
        let sources = ConfigSources {
            dev: true,
            hcl_snippets: vec![r#"
                domain = "Example."
                alt_domain = "alt.test"
                recursors = ["127.0.0.1:5353", "::1", "10.0.0.1"]
                dns_config {
                  only_passing = true
                  enable_truncate = true
                  udp_answer_limit = 5
                  node_ttl = "10s"
                  max_stale = "1m30s"
                  service_ttl = { "*" = "5s", "db*" = "7s", "db-main" = "9s" }
                  soa { min_ttl = 30 }
                }
            "#
            .into()],
            ..Default::default()
        };
        let c = build(&sources).unwrap().dns;
        assert_eq!(c.domain, "example");
        assert_eq!(c.alt_domain.as_deref(), Some("alt.test"));
        assert_eq!(
            c.recursors,
            vec![
                "127.0.0.1:5353".parse::<SocketAddr>().unwrap(),
                "[::1]:53".parse().unwrap(),
                "10.0.0.1:53".parse().unwrap()
            ]
        );
        assert!(c.only_passing && c.enable_truncate);
        assert_eq!(c.udp_answer_limit, 5);
        assert_eq!(c.node_ttl, Duration::from_secs(10));
        assert_eq!(c.max_stale, Duration::from_secs(90));
        assert_eq!(c.soa.min_ttl_seconds, 30);
        assert_eq!(c.soa.refresh_seconds, 3600);
        assert_eq!(c.service_ttl("web"), Duration::from_secs(5));
        assert_eq!(c.service_ttl("db-replica"), Duration::from_secs(7));
        assert_eq!(c.service_ttl("db-main"), Duration::from_secs(9));
        let bad = ConfigSources {
            dev: true,
            hcl_snippets: vec!["recursors = [\"not-an-ip\"]".into()],
            ..Default::default()
        };
        assert!(build(&bad).unwrap_err().contains("recursors"));
        let bad = ConfigSources {
            dev: true,
            hcl_snippets: vec!["dns_config { node_ttl = \"soon\" }".into()],
            ..Default::default()
        };
        assert!(build(&bad).unwrap_err().contains("dns_config.node_ttl"));
    }
}
