//! Agent configuration: Consul's command-line flags and its JSON and HCL config files, merged
//! into one typed [`AgentConfig`].
//!
//! Sources apply in Consul's order: built-in defaults (dev-mode defaults under `-dev`), then
//! config files and directories in the order given (a directory's `.json`/`.hcl` files in
//! lexical order), then `-hcl` snippets, then flags. Objects merge key by key; lists such as
//! `services`, `checks` and `retry_join` concatenate; scalars are overridden by later sources.
//! HCL is read as Consul reads it, in HCL1 (`proto::hcl`).
//!
//! Every document is checked against the key table (`keys`, run by `schema`) before the
//! merge, as Consul checks each source: a key the table does not know, at any depth, or a
//! value of the wrong type stops the agent with one line naming the file and the key path
//! (`failed to parse agent.hcl: invalid config key acl.enabeld`). The same table says what
//! each key does: the keys praetor accepts without acting on them are warned about once each
//! at start ([`AgentConfig::warnings`]), so nothing a Consul config says is silently dropped.

pub mod keys;
pub mod schema;
pub mod telemetry;
pub mod tls;

pub mod ui;

pub mod acl;
pub mod connect;

pub mod process;

pub mod reload;

pub mod watches;

mod autopilot;
pub mod dns;
mod sources;
mod values;

pub use autopilot::AutopilotConfig;
use dns::dns_config_from;
pub use dns::{
    parse_recursor, DnsConfig, RecursorStrategy, SoaConfig, DNS_MAX_STALE_DEFAULT,
    DNS_RECURSORS_MAX, DNS_RECURSOR_PORT_DEFAULT, DNS_RECURSOR_TIMEOUT_DEFAULT,
    DNS_UDP_ANSWER_LIMIT_DEFAULT,
};
pub use sources::{check_documents, merge, parse_document, ConfigFormat, ConfigSources};
use sources::{config_dir_files, read_config_file};
use values::{get_bool, get_duration, get_i64, get_string, get_strings, parse_ip};

use schema::not_acted_on;
use serde_json::{Map, Value};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

/// Consul's default `raft_snapshot_threshold`, in applied entries.
pub const RAFT_SNAPSHOT_THRESHOLD_ENTRIES_DEFAULT: u64 = 16_384;
/// Consul's default `raft_trailing_logs`, in entries.
pub const RAFT_TRAILING_LOGS_ENTRIES_DEFAULT: u64 = 10_240;
/// Upper bound for both raft entry-count settings: far above any sensible value, low enough
/// that a typo cannot make the log grow without bound.
const RAFT_ENTRIES_SETTING_MAX: i64 = 100_000_000;
/// The default of `raft_log_cache_bytes`: 64 MiB, the raft core's own default (`node`
/// asserts at compile time that the two agree).
pub const RAFT_LOG_CACHE_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;
/// Upper bound for `raft_log_cache_bytes`: 1 TiB, past any machine's memory.
const RAFT_LOG_CACHE_BYTES_MAX: i64 = 1 << 40;

/// Consul's default `kv_max_value_size`: 512 KiB.
pub const KV_MAX_VALUE_SIZE_DEFAULT: usize = 512 * 1024;
/// Consul's default `txn_max_req_len`: 512 KiB.
pub const TXN_MAX_REQ_LEN_DEFAULT: usize = 512 * 1024;

/// The gRPC port of a `-dev` agent (Consul's).
pub const DEV_GRPC_PORT: i32 = 8502;

/// Listener ports; a negative port disables that listener, as in Consul.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ports {
    pub http: i32,
    pub https: i32,
    pub dns: i32,
    pub server: i32,
    pub serf_lan: i32,
    pub serf_wan: i32,
    /// gRPC in plain text (`ports.grpc`): Envoy's xDS. Off by default, 8502 in `-dev`, as
    /// in Consul.
    pub grpc: i32,
    /// gRPC over TLS (`ports.grpc_tls`): Envoy's xDS with the `tls.grpc` certificate.
    pub grpc_tls: i32,
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
            grpc_tls: -1,
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
    /// `advertise_addr_wan`: where other datacenters reach this server (its WAN pool
    /// address and its node's `wan` tagged address); `advertise_addr` when not set.
    pub advertise_addr_wan: Option<IpAddr>,
    /// `translate_wan_addrs`: answers about another datacenter's nodes carry their WAN
    /// addresses (HTTP catalog, health and prepared-query answers, and DNS).
    pub translate_wan_addrs: bool,
    pub client_addrs: Vec<IpAddr>,
    /// Where the HTTP, HTTPS and DNS listeners bind (`addresses.*`, each defaulting to
    /// `client_addr`).
    pub addresses: Addresses,
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
    /// `raft_log_cache_bytes`: the most log bytes a server holds in memory for followers that
    /// have not acknowledged them (default 64 MiB); older entries are read back from the
    /// log on disk. praetor's own key, named in Consul's style.
    pub raft_log_cache_bytes: u64,
    /// `ui_config` and the deprecated `ui`, `ui_dir`, `ui_content_path` keys.
    pub ui: ui::UiConfig,
    /// `domain`, `alt_domain`, `recursors` and `dns_config.*`.
    pub dns: DnsConfig,
    /// `node_meta`, validated as Consul validates it; published on this agent's node.
    pub node_meta: Vec<(String, String)>,
    /// `disable_remote_exec` (Consul's default: true). praetor has no remote exec, so `true`
    /// holds by construction and `false` is warned about.
    pub disable_remote_exec: bool,
    /// Leave the gossip pool gracefully on SIGTERM (Consul's `leave_on_terminate`: true on
    /// clients, false on servers, whose leaving would shrink the Raft quorum's pool).
    pub leave_on_terminate: bool,
    /// Skip the graceful leave on SIGINT (Consul's `skip_leave_on_interrupt`: true on
    /// servers, false on clients).
    pub skip_leave_on_interrupt: bool,
    /// Shortest session TTL accepted (`session_ttl_min`, Consul's default 10 s), in ns.
    pub session_ttl_min_ns: i64,
    /// `http_config.use_cache` (default true): whether `?cached` reads use the agent cache.
    pub http_use_cache: bool,
    /// Settings parsed and checked but not acted on yet; each one given was warned about.
    pub pending: PendingSettings,
    /// `acl { … }`, `primary_datacenter` and the legacy ACL keys.
    pub acl: acl::AclConfig,
    /// The `tls` stanza (and the old top-level TLS keys), resolved per protocol.
    pub tls: tls::TlsConfig,
    /// `telemetry { … }`: metric names, the Prometheus retention, statsd and dogstatsd.
    pub telemetry: telemetry::TelemetryConfig,
    /// The pid file, log outputs, blocking-query times and gossip bind addresses.
    pub process: process::ProcessConfig,
    /// The watch plans the agent runs (`watches`).
    pub watches: Vec<watches::WatchConfig>,
    /// `connect`, `config_entries` and the sidecar port range: the service mesh.
    pub connect: connect::ConnectConfig,
    /// The merged configuration object, every key in its canonical spelling, for sections
    /// later subsystems read themselves (`services`, `checks`, `node_meta`, …).
    pub raw: Map<String, Value>,
    /// One line per accepted setting that is not acted on yet, logged at start.
    pub warnings: Vec<String>,
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

    /// The address other datacenters reach this agent at: `advertise_addr_wan`, else
    /// [`AgentConfig::advertise`].
    pub fn advertise_wan(&self) -> IpAddr {
        self.advertise_addr_wan.unwrap_or_else(|| self.advertise())
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

/// Merges every source and extracts the typed configuration.
pub fn build(sources: &ConfigSources) -> Result<AgentConfig, String> {
    let mut merged = Map::new();
    // The old top-level TLS keys move into the `tls` stanza document by document, as in
    // Consul, so a later document's stanza overrides an earlier document's old key.
    let mut deprecations = Vec::new();
    let mut add = |merged: &mut Map<String, Value>, mut document: Map<String, Value>| {
        deprecations.extend(tls::apply_deprecated_keys(&mut document));
        merge(merged, document);
    };
    if sources.dev {
        merged.insert("dev_mode".into(), Value::Bool(true));
        merged.insert("server".into(), Value::Bool(true));
        merged.insert("bootstrap".into(), Value::Bool(true));
        merged.insert("bind_addr".into(), Value::String("127.0.0.1".into()));
        merged.insert("client_addr".into(), Value::String("127.0.0.1".into()));
        merged.insert("ui_config".into(), serde_json::json!({"enabled": true}));
    }
    for file in &sources.config_files {
        add(&mut merged, read_config_file(file, sources.config_format)?);
    }
    for dir in &sources.config_dirs {
        for file in config_dir_files(dir, sources.config_format)? {
            add(&mut merged, read_config_file(&file, sources.config_format)?);
        }
    }
    for (i, snippet) in sources.hcl_snippets.iter().enumerate() {
        add(
            &mut merged,
            parse_document(snippet, true, &format!("-hcl #{}", i + 1))?,
        );
    }
    add(&mut merged, sources.flags.clone());
    let mut config = from_merged(merged)?;
    config.warnings.splice(0..0, deprecations);
    config.sources = sources.clone();
    Ok(config)
}

/// This machine's host name (the default node name; gauges carry it in their names).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return "praetor".to_string();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Where the agent listens and what it advertises.
struct Addressing {
    ports: Ports,
    bind_addr: IpAddr,
    advertise_addr: Option<IpAddr>,
    advertise_addr_wan: Option<IpAddr>,
    translate_wan_addrs: bool,
    client_addrs: Vec<IpAddr>,
}

/// The ports, the bind and advertise addresses and the client addresses.
fn addressing_from(raw: &Map<String, Value>, dev_mode: bool) -> Result<Addressing, String> {
    let ports = ports_from(raw, dev_mode)?;
    let bind_addr = match get_string(raw, "bind_addr")? {
        Some(text) => parse_ip("bind_addr", &text)?,
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    let advertise_addr = get_string(raw, "advertise_addr")?
        .map(|t| parse_ip("advertise_addr", &t))
        .transpose()?;
    let advertise_addr_wan = get_string(raw, "advertise_addr_wan")?
        .map(|t| parse_ip("advertise_addr_wan", &t))
        .transpose()?;
    Ok(Addressing {
        ports,
        bind_addr,
        advertise_addr,
        advertise_addr_wan,
        translate_wan_addrs: get_bool(raw, "translate_wan_addrs")?.unwrap_or(false),
        client_addrs: client_addrs_from(raw)?,
    })
}

fn from_merged(raw: Map<String, Value>) -> Result<AgentConfig, String> {
    let dev_mode = get_bool(&raw, "dev_mode")?.unwrap_or(false);
    let Addressing {
        ports,
        bind_addr,
        advertise_addr,
        advertise_addr_wan,
        translate_wan_addrs,
        client_addrs,
    } = addressing_from(&raw, dev_mode)?;
    let (server, bootstrap, bootstrap_expect) = server_role_from(&raw, dev_mode)?;
    let data_dir = get_string(&raw, "data_dir")?.map(PathBuf::from);
    if data_dir.is_none() && !dev_mode {
        return Err(
            "data_dir cannot be empty (use -data-dir, or -dev for a throwaway agent)".to_string(),
        );
    }
    let datacenter = datacenter_from(&raw)?;
    let node_name = get_string(&raw, "node_name")?.unwrap_or_else(hostname);
    if node_name.is_empty() || node_name.len() > 256 {
        return Err("node_name: must be 1 to 256 characters".to_string());
    }
    let shards = int_in_range(&raw, "shards", 0, 0..=256)?;
    let (kv_max_value_size, txn_max_req_len) = request_limits_from(&raw)?;
    let (raft_snapshot_threshold_entries, raft_trailing_logs_entries, raft_log_cache_bytes) =
        raft_settings_from(&raw)?;
    let mut warnings = schema::warnings(&raw);
    warnings.extend(bootstrap_warnings(
        server,
        dev_mode,
        bootstrap,
        bootstrap_expect,
    ));
    let pending = pending_settings(&raw, &datacenter, &mut warnings)?;
    inert_settings(&raw)?;
    let addresses = addresses_from(&raw, &client_addrs)?;
    let session_ttl_min_ns = session_ttl_min_from(&raw)?;
    let node_meta = node_meta_from(&raw)?;
    let telemetry = telemetry::TelemetryConfig::from_raw(&raw, &mut warnings)?;
    let tls = tls::TlsConfig::from_merged(&raw, server)?;
    let process = process::from_raw(&raw, &mut warnings)?;
    let watches = watches::from_raw(&raw, &mut warnings)?;
    let connect = connect::ConnectConfig::from_raw(&raw)?;
    if connect.mesh_gateway_wan_federation {
        check_wan_federation_through_gateways(&raw, server, &node_name)?;
    }
    warnings.extend(tls.not_active_warnings());
    warnings.extend(primary_gateways_warning(&raw));
    let disable_remote_exec = get_bool(&raw, "disable_remote_exec")?.unwrap_or(true);
    let leave_on_terminate = get_bool(&raw, "leave_on_terminate")?.unwrap_or(!server);
    let skip_leave_on_interrupt = get_bool(&raw, "skip_leave_on_interrupt")?.unwrap_or(server);
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
        advertise_addr_wan,
        translate_wan_addrs,
        client_addrs,
        addresses,
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
        raft_log_cache_bytes: raft_log_cache_bytes as u64,
        ui: ui::UiConfig::from_raw(&raw, dev_mode)?,
        dns: dns_config_from(&raw)?,
        node_meta,
        disable_remote_exec,
        leave_on_terminate,
        skip_leave_on_interrupt,
        session_ttl_min_ns,
        http_use_cache: get_bool(section(&raw, "http_config", &Map::new())?, "use_cache")
            .map_err(|e| format!("http_config.{e}"))?
            .unwrap_or(true),
        pending,
        acl: acl::AclConfig::from_raw(&raw)?,
        tls,
        telemetry,
        process,
        watches,
        connect,
        raw,
        warnings,
        sources: ConfigSources::default(),
    })
}

/// `primary_gateways` feeds the gateway locator, which servers dial through only when
/// `connect.enable_mesh_gateway_wan_federation` is on; an operator who lists them without
/// it is told.
fn primary_gateways_warning(raw: &Map<String, Value>) -> Option<String> {
    let listed = match raw.get("primary_gateways") {
        Some(Value::Array(items)) => !items.is_empty(),
        Some(Value::String(one)) => !one.is_empty(),
        _ => false,
    };
    listed
        .then(|| {
            "primary_gateways: used only with connect.enable_mesh_gateway_wan_federation = true; \
         the gateway locator resolves them and logs its choice, and servers dial other \
         datacenters directly"
                .to_string()
        })
        .filter(|_| !wan_federation_through_gateways(raw))
}

fn wan_federation_through_gateways(raw: &Map<String, Value>) -> bool {
    raw.get("connect")
        .and_then(|connect| connect.get("enable_mesh_gateway_wan_federation"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// What Consul refuses alongside `connect.enable_mesh_gateway_wan_federation = true`:
/// a client agent, a node name with `/` (WAN join addresses are `name/address`), and WAN
/// join addresses, since a secondary joins its primary through the gateways by itself.
fn check_wan_federation_through_gateways(
    raw: &Map<String, Value>,
    server: bool,
    node_name: &str,
) -> Result<(), String> {
    const SWITCH: &str = "'connect.enable_mesh_gateway_wan_federation = true'";
    if !server {
        return Err(format!("{SWITCH} requires 'server = true'"));
    }
    if node_name.contains('/') {
        return Err(format!(
            "{SWITCH} requires that 'node_name' not contain '/' characters"
        ));
    }
    for key in ["retry_join_wan", "start_join_wan"] {
        let listed = match raw.get(key) {
            Some(Value::Array(items)) => !items.is_empty(),
            Some(Value::String(one)) => !one.is_empty(),
            _ => false,
        };
        if listed {
            return Err(format!("'{key}' is incompatible with {SWITCH}"));
        }
    }
    Ok(())
}

/// The agent's ports: Consul's defaults (the dev agent also serves xDS on 8502), each
/// overridden by `ports.<name>`, -1 meaning off.
fn ports_from(raw: &Map<String, Value>, dev_mode: bool) -> Result<Ports, String> {
    let mut ports = Ports::default();
    if dev_mode {
        ports.grpc = DEV_GRPC_PORT;
    }
    let Some(Value::Object(p)) = raw.get("ports") else {
        return Ok(ports);
    };
    let port = |key: &str, default: i32| -> Result<i32, String> {
        match get_i64(p, key)? {
            None => Ok(default),
            Some(v) if (-1..=65535).contains(&v) => Ok(v as i32),
            Some(v) => Err(format!("ports.{key}: {v} is not a valid port")),
        }
    };
    Ok(Ports {
        http: port("http", ports.http)?,
        https: port("https", ports.https)?,
        dns: port("dns", ports.dns)?,
        server: port("server", ports.server)?,
        serf_lan: port("serf_lan", ports.serf_lan)?,
        serf_wan: port("serf_wan", ports.serf_wan)?,
        grpc: port("grpc", ports.grpc)?,
        grpc_tls: port("grpc_tls", ports.grpc_tls)?,
    })
}

/// Whether the agent is a server, and how it bootstraps: `bootstrap` (alone) or
/// `bootstrap_expect` servers (0 to 32), both only on a server, never both outside dev mode.
fn server_role_from(raw: &Map<String, Value>, dev_mode: bool) -> Result<(bool, bool, i64), String> {
    let server = get_bool(raw, "server")?.unwrap_or(false);
    let bootstrap = get_bool(raw, "bootstrap")?.unwrap_or(false);
    let bootstrap_expect = int_in_range(raw, "bootstrap_expect", 0, 0..=32)?;
    if bootstrap && bootstrap_expect > 0 && !dev_mode {
        return Err("'bootstrap_expect' and 'bootstrap' are mutually exclusive".to_string());
    }
    if !server && (bootstrap || bootstrap_expect > 0) {
        return Err("bootstrap and bootstrap_expect require server mode (-server)".to_string());
    }
    Ok((server, bootstrap, bootstrap_expect))
}

/// The addresses the client interfaces bind (`client_addr`, space-separated), loopback by
/// default; at least one.
fn client_addrs_from(raw: &Map<String, Value>) -> Result<Vec<IpAddr>, String> {
    let text = get_string(raw, "client_addr")?.unwrap_or_else(|| "127.0.0.1".to_string());
    let addrs = text
        .split_whitespace()
        .map(|t| parse_ip("client_addr", t))
        .collect::<Result<Vec<_>, _>>()?;
    if addrs.is_empty() {
        return Err("client_addr: no address given".to_string());
    }
    Ok(addrs)
}

/// `limits.kv_max_value_size` and `limits.txn_max_req_len` in bytes, both positive. Consul
/// reads both under `limits` only (the top-level spelling is refused).
fn request_limits_from(raw: &Map<String, Value>) -> Result<(i64, i64), String> {
    let empty = Map::new();
    let limits = section(raw, "limits", &empty)?;
    let kv_max_value_size = get_i64(limits, "kv_max_value_size")
        .map_err(|e| format!("limits.{e}"))?
        .unwrap_or(KV_MAX_VALUE_SIZE_DEFAULT as i64);
    let txn_max_req_len = get_i64(limits, "txn_max_req_len")
        .map_err(|e| format!("limits.{e}"))?
        .unwrap_or(TXN_MAX_REQ_LEN_DEFAULT as i64);
    if kv_max_value_size <= 0 || txn_max_req_len <= 0 {
        return Err("kv_max_value_size and txn_max_req_len must be positive".to_string());
    }
    Ok((kv_max_value_size, txn_max_req_len))
}

/// The shortest session TTL a client may ask for, in nanoseconds: positive and no longer
/// than the longest TTL.
fn session_ttl_min_from(raw: &Map<String, Value>) -> Result<i64, String> {
    use crate::store::session::{SESSION_TTL_MAX_NS, SESSION_TTL_MIN_NS};
    let Some(min) = get_duration(raw, "session_ttl_min")? else {
        return Ok(SESSION_TTL_MIN_NS);
    };
    i64::try_from(min.as_nanos())
        .ok()
        .filter(|ns| *ns > 0 && *ns <= SESSION_TTL_MAX_NS)
        .ok_or_else(|| {
            format!(
                "session_ttl_min: {}s is not a positive duration within the longest session TTL",
                min.as_secs()
            )
        })
}

/// The Raft log settings: the snapshot threshold and the trailing logs kept, in entries,
/// and the log cache, in bytes, each within its limit.
fn raft_settings_from(raw: &Map<String, Value>) -> Result<(i64, i64, i64), String> {
    let raft_snapshot_threshold_entries = int_in_range(
        raw,
        "raft_snapshot_threshold",
        RAFT_SNAPSHOT_THRESHOLD_ENTRIES_DEFAULT as i64,
        1..=RAFT_ENTRIES_SETTING_MAX,
    )?;
    let raft_trailing_logs_entries = int_in_range(
        raw,
        "raft_trailing_logs",
        RAFT_TRAILING_LOGS_ENTRIES_DEFAULT as i64,
        0..=RAFT_ENTRIES_SETTING_MAX,
    )?;
    let raft_log_cache_bytes = int_in_range(
        raw,
        "raft_log_cache_bytes",
        RAFT_LOG_CACHE_BYTES_DEFAULT as i64,
        0..=RAFT_LOG_CACHE_BYTES_MAX,
    )?;
    Ok((
        raft_snapshot_threshold_entries,
        raft_trailing_logs_entries,
        raft_log_cache_bytes,
    ))
}

/// An integer setting, `default` when absent, refused outside `range` with the key named.
fn int_in_range(
    raw: &Map<String, Value>,
    key: &str,
    default: i64,
    range: std::ops::RangeInclusive<i64>,
) -> Result<i64, String> {
    let value = get_i64(raw, key)?.unwrap_or(default);
    if !range.contains(&value) {
        return Err(format!(
            "{key}: {value} is out of range {}..={}",
            range.start(),
            range.end()
        ));
    }
    Ok(value)
}

/// The datacenter's name, lowercased (as Consul lowercases it), `dc1` when absent; only
/// letters, digits, '-' and '_'.
fn datacenter_from(raw: &Map<String, Value>) -> Result<String, String> {
    let datacenter = get_string(raw, "datacenter")?
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
    Ok(datacenter)
}

/// Consul's warnings about a server's bootstrap settings, in its words: the deployment
/// table's advice, and the number of servers a server waits for.
fn bootstrap_warnings(server: bool, dev: bool, bootstrap: bool, expect: i64) -> Vec<String> {
    const DEPLOYMENT_TABLE: &str =
        "See https://www.consul.io/docs/internals/consensus.html#deployment-table";
    let mut warnings = Vec::new();
    if !server {
        return warnings;
    }
    if !dev && !bootstrap && expect == 2 {
        warnings.push(format!(
            "bootstrap_expect = 2: A cluster with 2 servers will provide no failure tolerance. {DEPLOYMENT_TABLE}"
        ));
    }
    if !bootstrap && expect > 2 && expect % 2 == 0 {
        warnings.push(format!(
            "bootstrap_expect is even number: A cluster with an even number of servers does not achieve optimum fault tolerance. {DEPLOYMENT_TABLE}"
        ));
    }
    // `-dev` bootstraps by itself, which asks nothing of the operator.
    if !dev && bootstrap && expect == 0 {
        warnings.push("bootstrap = true: do not enable unless necessary".to_string());
    }
    if !dev && !bootstrap && expect > 1 {
        warnings.push(format!("bootstrap_expect > 0: expecting {expect} servers"));
    }
    warnings
}

/// A config section that must be an object, or `empty` when absent.
fn section<'a>(
    raw: &'a Map<String, Value>,
    key: &str,
    empty: &'a Map<String, Value>,
) -> Result<&'a Map<String, Value>, String> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(empty),
        Some(Value::Object(map)) => Ok(map),
        Some(other) => Err(format!("{key}: expected an object, got {other}")),
    }
}

/// Listener addresses per interface (Consul's `addresses { http, https, dns }`): each a
/// space-separated list of IPs, `client_addr` when absent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Addresses {
    pub http: Vec<IpAddr>,
    pub https: Vec<IpAddr>,
    pub dns: Vec<IpAddr>,
    pub grpc: Vec<IpAddr>,
    pub grpc_tls: Vec<IpAddr>,
}

fn addresses_from(raw: &Map<String, Value>, client: &[IpAddr]) -> Result<Addresses, String> {
    let empty = Map::new();
    let section = section(raw, "addresses", &empty)?;
    let listener = |key: &str| -> Result<Vec<IpAddr>, String> {
        let path = format!("addresses.{key}");
        match get_string(section, key).map_err(|e| format!("addresses.{e}"))? {
            None => Ok(client.to_vec()),
            Some(text) if text.starts_with("unix://") => Err(format!(
                "{path} = {text:?}: praetor's agent listens on IP addresses only, not Unix sockets"
            )),
            Some(text) => {
                let ips = text
                    .split_whitespace()
                    .map(|t| parse_ip(&path, t))
                    .collect::<Result<Vec<_>, _>>()?;
                if ips.is_empty() {
                    return Err(format!("{path}: no address given"));
                }
                Ok(ips)
            }
        }
    };
    Ok(Addresses {
        http: listener("http")?,
        https: listener("https")?,
        dns: listener("dns")?,
        grpc: listener("grpc")?,
        grpc_tls: listener("grpc_tls")?,
    })
}

/// Validation Consul applies to settings praetor does not act on: a value Consul refuses is
/// refused here too (the key table warns about the ones it accepts).
fn inert_settings(raw: &Map<String, Value>) -> Result<(), String> {
    if let Some(version) = get_i64(raw, "raft_protocol")? {
        if version != 3 {
            return Err(format!(
                "raft_protocol version {version} is not supported by this version of Consul"
            ));
        }
    }
    if let Some(timeout) = get_duration(raw, "reconnect_timeout_wan")? {
        if timeout < RECONNECT_TIMEOUT_MIN {
            return Err("reconnect_timeout_wan must be >= 8h0m0s".to_string());
        }
    }
    Ok(())
}

/// Consul's limits on node metadata (`structs.ValidateNodeMetadata`).
const NODE_META_PAIRS_MAX: usize = 64;
const NODE_META_KEY_CHARS_MAX: usize = 128;
const NODE_META_VALUE_CHARS_MAX: usize = 512;
const NODE_META_RESERVED_PREFIX: &str = "consul-";

/// `node_meta`, validated with Consul's rules and messages.
fn node_meta_from(raw: &Map<String, Value>) -> Result<Vec<(String, String)>, String> {
    let empty = Map::new();
    let meta = section(raw, "node_meta", &empty)?;
    if meta.len() > NODE_META_PAIRS_MAX {
        return Err(format!(
            "node_meta invalid: Node metadata cannot contain more than {NODE_META_PAIRS_MAX} key/value pairs"
        ));
    }
    let mut pairs = Vec::with_capacity(meta.len());
    for (key, value) in meta {
        let value = value
            .as_str()
            .ok_or_else(|| format!("node_meta[{key}]: expected a string, got {value}"))?;
        let invalid = |why: &str| format!("node_meta invalid: {why}");
        if key.is_empty() {
            return Err(invalid("Key cannot be blank"));
        }
        if key.chars().count() > NODE_META_KEY_CHARS_MAX {
            return Err(invalid(&format!(
                "Key is too long (limit: {NODE_META_KEY_CHARS_MAX} characters)"
            )));
        }
        if !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(invalid(&format!(
                "Key contains invalid characters: {key:?}"
            )));
        }
        if key.starts_with(NODE_META_RESERVED_PREFIX) {
            return Err(invalid(&format!(
                "Key prefix '{NODE_META_RESERVED_PREFIX}' is reserved for internal use"
            )));
        }
        if value.chars().count() > NODE_META_VALUE_CHARS_MAX {
            return Err(invalid(&format!(
                "Value is too long (limit: {NODE_META_VALUE_CHARS_MAX} characters)"
            )));
        }
        pairs.push((key.clone(), value.to_string()));
    }
    debug_assert!(pairs.len() <= NODE_META_PAIRS_MAX);
    Ok(pairs)
}

/// An address range (`10.0.0.0/8`), as `http_config.allow_write_http_from` lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNetwork {
    pub address: IpAddr,
    pub prefix_bits: u8,
}

impl IpNetwork {
    pub fn parse(text: &str) -> Result<IpNetwork, String> {
        let (address, bits) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not a CIDR range (address/prefix)"))?;
        let address: IpAddr = address
            .parse()
            .map_err(|_| format!("{text:?} is not a CIDR range: bad address"))?;
        let bits_max = if address.is_ipv4() { 32 } else { 128 };
        let prefix_bits = bits
            .parse::<u8>()
            .ok()
            .filter(|b| *b <= bits_max)
            .ok_or_else(|| format!("{text:?} is not a CIDR range: bad prefix length"))?;
        Ok(IpNetwork {
            address,
            prefix_bits,
        })
    }
}

/// Consul's default `limits.http_max_conns_per_client`.
pub const HTTP_MAX_CONNS_PER_CLIENT_DEFAULT: u32 = 200;
/// Consul's default `limits.rpc_max_burst`.
pub const RPC_MAX_BURST_DEFAULT: u32 = 1000;
/// Consul's default `reconnect_timeout`: 72 hours.
pub const RECONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(72 * 3600);
/// Consul refuses a shorter `reconnect_timeout`: a node briefly away must not be reaped.
pub const RECONNECT_TIMEOUT_MIN: Duration = Duration::from_secs(8 * 3600);
/// Consul's default `performance.raft_multiplier`, and its bounds.
pub const RAFT_MULTIPLIER_DEFAULT: u32 = 5;
const RAFT_MULTIPLIER_MAX: i64 = 10;
/// Consul's defaults for `performance.leave_drain_time` and `performance.rpc_hold_timeout`.
pub const LEAVE_DRAIN_TIME_DEFAULT: Duration = Duration::from_secs(5);
pub const RPC_HOLD_TIMEOUT_DEFAULT: Duration = Duration::from_secs(7);

/// Settings that are parsed and checked, kept for the code that will act on them (the HTTP
/// server, the RPC layer, gossip, Raft); every one given produced a startup warning.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingSettings {
    /// `limits.http_max_conns_per_client`.
    pub http_max_conns_per_client: u32,
    /// `limits.rpc_rate`, requests per second (infinite by default, as in Consul).
    pub rpc_rate_per_second: f64,
    /// `limits.rpc_max_burst`.
    pub rpc_max_burst: u32,
    /// `http_config.response_headers`.
    pub http_response_headers: Vec<(String, String)>,
    /// `http_config.allow_write_http_from` (empty: writes from anywhere).
    pub allow_write_http_from: Vec<IpNetwork>,
    /// `primary_datacenter` (`acl_datacenter` is its old name); defaults to `datacenter`.
    pub primary_datacenter: String,
    /// `reconnect_timeout`: how long a failed LAN member is kept before it is reaped.
    pub reconnect_timeout: Duration,
    /// `performance.raft_multiplier`.
    pub raft_multiplier: u32,
    /// `performance.leave_drain_time`.
    pub leave_drain_time: Duration,
    /// `performance.rpc_hold_timeout`.
    pub rpc_hold_timeout: Duration,
    /// `autopilot { … }`, acted on by the leader's autopilot (kept here beside the settings
    /// parsed with it; only its Enterprise keys are warned about).
    pub autopilot: AutopilotConfig,
}

/// Parses the settings that are not acted on yet, with Consul's validation (the key table
/// warns about each one given); `primary_datacenter` is warned about here when it names
/// another datacenter, which only this reader knows.
fn pending_settings(
    raw: &Map<String, Value>,
    datacenter: &str,
    warnings: &mut Vec<String>,
) -> Result<PendingSettings, String> {
    let empty = Map::new();
    let limits = section(raw, "limits", &empty)?;
    let http = section(raw, "http_config", &empty)?;
    let performance = section(raw, "performance", &empty)?;
    let autopilot = section(raw, "autopilot", &empty)?;
    let http_max_conns_per_client = count_in(limits, "http_max_conns_per_client", "limits")?;
    let rpc_rate_per_second = match limits.get("rpc_rate") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_f64()
                .filter(|r| *r > 0.0)
                .ok_or_else(|| format!("limits.rpc_rate: {v} is not a positive number"))?,
        ),
    };
    let rpc_max_burst = count_in(limits, "rpc_max_burst", "limits")?;
    let (http_response_headers, allow_write_http_from) = http_config_settings(http)?;
    let primary_datacenter = primary_datacenter(raw, datacenter, warnings)?;
    let reconnect_timeout = get_duration(raw, "reconnect_timeout")?;
    if let Some(timeout) = reconnect_timeout {
        if timeout < RECONNECT_TIMEOUT_MIN {
            return Err("reconnect_timeout must be >= 8h0m0s".to_string());
        }
    }
    let (raft_multiplier, leave_drain_time, rpc_hold_timeout) = performance_settings(performance)?;
    Ok(PendingSettings {
        http_max_conns_per_client: http_max_conns_per_client
            .unwrap_or(HTTP_MAX_CONNS_PER_CLIENT_DEFAULT),
        rpc_rate_per_second: rpc_rate_per_second.unwrap_or(f64::INFINITY),
        rpc_max_burst: rpc_max_burst.unwrap_or(RPC_MAX_BURST_DEFAULT),
        http_response_headers,
        allow_write_http_from,
        primary_datacenter,
        reconnect_timeout: reconnect_timeout.unwrap_or(RECONNECT_TIMEOUT_DEFAULT),
        raft_multiplier,
        leave_drain_time,
        rpc_hold_timeout,
        autopilot: autopilot_settings(autopilot)?,
    })
}

/// Prefixes a section's key error with the section's name.
fn in_section(name: &'static str) -> impl Fn(String) -> String {
    move |e: String| format!("{name}.{e}")
}

/// A count in section `name`: absent, or a whole number of at least zero.
fn count_in(
    map: &Map<String, Value>,
    key: &str,
    name: &'static str,
) -> Result<Option<u32>, String> {
    let value = get_i64(map, key).map_err(in_section(name))?;
    value
        .map(|v| {
            u32::try_from(v).map_err(|_| {
                format!("{name}.{key} cannot be {v}. Must be greater than or equal to zero")
            })
        })
        .transpose()
}

/// `http_config`'s response headers (each a string) and the networks allowed to write.
#[allow(clippy::type_complexity)]
fn http_config_settings(
    http: &Map<String, Value>,
) -> Result<(Vec<(String, String)>, Vec<IpNetwork>), String> {
    let mut http_response_headers = Vec::new();
    if let Some(Value::Object(headers)) = http.get("response_headers") {
        for (name, value) in headers {
            let value = value.as_str().ok_or_else(|| {
                format!("http_config.response_headers[{name}]: expected a string")
            })?;
            http_response_headers.push((name.clone(), value.to_string()));
        }
    }
    let allow_write_http_from = get_strings(http, "allow_write_http_from")
        .map_err(in_section("http_config"))?
        .iter()
        .map(|text| {
            IpNetwork::parse(text).map_err(|e| format!("http_config.allow_write_http_from: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((http_response_headers, allow_write_http_from))
}

/// `primary_datacenter` (or the older `acl_datacenter`), lowercased and validated as
/// Consul does; this datacenter when absent. Naming another one is warned about.
fn primary_datacenter(
    raw: &Map<String, Value>,
    datacenter: &str,
    warnings: &mut Vec<String>,
) -> Result<String, String> {
    let primary_datacenter =
        match get_string(raw, "primary_datacenter")?.or(get_string(raw, "acl_datacenter")?) {
            None => datacenter.to_string(),
            Some(text) => {
                let primary = text.to_lowercase();
                if primary.is_empty()
                    || !primary
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    return Err(
                    "primary_datacenter can only contain lowercase alphanumeric, - or _ characters."
                        .to_string(),
                );
                }
                primary
            }
        };
    if primary_datacenter != datacenter {
        // The Connect CA follows the primary (its roots, this datacenter's intermediate);
        // ACLs and config entries are still this datacenter's own.
        warnings.push(not_acted_on(
            &format!(
                "primary_datacenter = {primary_datacenter:?} (datacenter is {datacenter:?}) \
                 for ACLs and config entries"
            ),
            "they are not replicated from the primary (the Connect CA follows it)",
        ));
    }
    Ok(primary_datacenter)
}

/// `performance`'s raft multiplier (1 to [`RAFT_MULTIPLIER_MAX`]), leave drain time and
/// RPC hold timeout, each defaulted.
fn performance_settings(
    performance: &Map<String, Value>,
) -> Result<(u32, Duration, Duration), String> {
    let raft_multiplier =
        get_i64(performance, "raft_multiplier").map_err(in_section("performance"))?;
    if let Some(v) = raft_multiplier {
        if !(1..=RAFT_MULTIPLIER_MAX).contains(&v) {
            return Err(format!(
                "performance.raft_multiplier cannot be {v}. Must be between 1 and {RAFT_MULTIPLIER_MAX}"
            ));
        }
    }
    let leave_drain_time =
        get_duration(performance, "leave_drain_time").map_err(in_section("performance"))?;
    let rpc_hold_timeout =
        get_duration(performance, "rpc_hold_timeout").map_err(in_section("performance"))?;
    Ok((
        raft_multiplier
            .map(|v| v as u32)
            .unwrap_or(RAFT_MULTIPLIER_DEFAULT),
        leave_drain_time.unwrap_or(LEAVE_DRAIN_TIME_DEFAULT),
        rpc_hold_timeout.unwrap_or(RPC_HOLD_TIMEOUT_DEFAULT),
    ))
}

/// `autopilot { … }` with Consul's defaults for what it leaves out.
fn autopilot_settings(autopilot: &Map<String, Value>) -> Result<AutopilotConfig, String> {
    let defaults = AutopilotConfig::default();
    let max_trailing_logs =
        get_i64(autopilot, "max_trailing_logs").map_err(in_section("autopilot"))?;
    if let Some(v) = max_trailing_logs.filter(|v| *v < 0) {
        return Err(format!(
            "autopilot.max_trailing_logs cannot be {v}. Must be greater than or equal to zero"
        ));
    }
    Ok(AutopilotConfig {
        cleanup_dead_servers: get_bool(autopilot, "cleanup_dead_servers")
            .map_err(in_section("autopilot"))?
            .unwrap_or(defaults.cleanup_dead_servers),
        last_contact_threshold: get_duration(autopilot, "last_contact_threshold")
            .map_err(in_section("autopilot"))?
            .unwrap_or(defaults.last_contact_threshold),
        max_trailing_logs: max_trailing_logs
            .map(|v| v as u64)
            .unwrap_or(defaults.max_trailing_logs),
        min_quorum: count_in(autopilot, "min_quorum", "autopilot")?.unwrap_or(defaults.min_quorum),
        server_stabilization_time: get_duration(autopilot, "server_stabilization_time")
            .map_err(in_section("autopilot"))?
            .unwrap_or(defaults.server_stabilization_time),
        redundancy_zone_tag: get_string(autopilot, "redundancy_zone_tag")
            .map_err(in_section("autopilot"))?
            .unwrap_or_default(),
        disable_upgrade_migration: get_bool(autopilot, "disable_upgrade_migration")
            .map_err(in_section("autopilot"))?
            .unwrap_or(defaults.disable_upgrade_migration),
        upgrade_version_tag: get_string(autopilot, "upgrade_version_tag")
            .map_err(in_section("autopilot"))?
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::net::SocketAddr;

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
        // -dev serves xDS on 8502, as Consul's dev mode does.
        assert_eq!(
            c.ports,
            Ports {
                grpc: 8502,
                ..Ports::default()
            }
        );
        assert_eq!(c.datacenter, "dc1");
        assert_eq!(c.client_addrs, vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
        assert_eq!(c.kv_max_value_size, 512 * 1024);
    }

    /// Each ranged integer setting is refused outside its range, with the key, the value and
    /// the range in the error; the edges are accepted.
    #[test]
    fn ranged_integer_settings_name_the_key_and_the_range() {
        let with = |key: &str, value: i64| {
            from_merged(object(json!({"dev_mode": true, key: value}))).map(|_| ())
        };
        for (key, low, high) in [
            ("shards", 0, 256),
            ("raft_snapshot_threshold", 1, RAFT_ENTRIES_SETTING_MAX),
            ("raft_trailing_logs", 0, RAFT_ENTRIES_SETTING_MAX),
            ("raft_log_cache_bytes", 0, RAFT_LOG_CACHE_BYTES_MAX),
        ] {
            assert_eq!(with(key, low), Ok(()), "{key} = {low}");
            assert_eq!(with(key, high), Ok(()), "{key} = {high}");
            assert_eq!(
                with(key, high + 1),
                Err(format!(
                    "{key}: {} is out of range {low}..={high}",
                    high + 1
                ))
            );
            assert_eq!(
                with(key, low - 1),
                Err(format!("{key}: {} is out of range {low}..={high}", low - 1))
            );
        }
    }

    #[test]
    fn listed_primary_gateways_warn_when_servers_do_not_dial_through_gateways() {
        let warned = |raw: Value| {
            from_merged(object(raw))
                .unwrap()
                .warnings
                .iter()
                .any(|w| w.starts_with("primary_gateways: "))
        };
        assert!(warned(
            json!({"dev_mode": true, "primary_gateways": ["10.0.0.1:8443"]})
        ));
        assert!(!warned(json!({"dev_mode": true, "primary_gateways": []})));
        assert!(!warned(json!({"dev_mode": true})));
        let through_gateways = json!({"enable_mesh_gateway_wan_federation": true});
        assert!(!warned(json!({
            "dev_mode": true,
            "server": true,
            "primary_gateways": ["10.0.0.1:8443"],
            "connect": through_gateways,
        })));
    }

    #[test]
    fn wan_federation_through_gateways_refuses_what_consul_refuses() {
        let through_gateways = json!({"enable_mesh_gateway_wan_federation": true});
        let refusal = |mut raw: Value| {
            raw["connect"] = through_gateways.clone();
            if raw.get("server").is_none() {
                raw["server"] = json!(true);
            }
            from_merged(object(raw)).err()
        };
        assert_eq!(refusal(json!({"dev_mode": true, "node_name": "s1"})), None);
        assert_eq!(
            refusal(json!({"dev_mode": true, "retry_join_wan": ["10.0.0.1"]})),
            Some(
                "'retry_join_wan' is incompatible with \
                 'connect.enable_mesh_gateway_wan_federation = true'"
                    .to_string()
            )
        );
        assert_eq!(
            refusal(json!({"dev_mode": true, "start_join_wan": ["10.0.0.1"]})),
            Some(
                "'start_join_wan' is incompatible with \
                 'connect.enable_mesh_gateway_wan_federation = true'"
                    .to_string()
            )
        );
        assert_eq!(
            refusal(json!({"dev_mode": true, "node_name": "a/b"})),
            Some(
                "'connect.enable_mesh_gateway_wan_federation = true' requires that \
                 'node_name' not contain '/' characters"
                    .to_string()
            )
        );
        assert_eq!(
            refusal(json!({"dev_mode": true, "server": false})),
            Some(
                "'connect.enable_mesh_gateway_wan_federation = true' requires 'server = true'"
                    .to_string()
            )
        );
    }

    #[test]
    fn flags_override_files_and_lists_append() {
        let dir = std::env::temp_dir().join(format!("praetor-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json_path = dir.join("a.json");
        std::fs::write(
            &json_path,
            r#"{"datacenter":"east","ports":{"http":1000,"dns":1001},"retry_join":["a"]}"#,
        )
        .unwrap();
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
            config_format: None,
        };
        let c = build(&sources).unwrap();
        assert_eq!(c.datacenter, "east");
        assert_eq!(c.ports.http, 3000);
        assert_eq!(c.ports.dns, 2001);
        assert_eq!(c.node_name, "n1");
        assert_eq!(c.retry_join, vec!["a", "b"]);
        assert_eq!(c.raw["services"], json!([{"name": "web"}]));
        // A key no block knows stops the build, naming the file.
        let future = dir.join("future.json");
        std::fs::write(&future, r#"{"future_key":1}"#).unwrap();
        let error = build(&ConfigSources {
            config_files: vec![future.clone()],
            ..sources
        })
        .unwrap_err();
        assert_eq!(
            error,
            format!(
                "failed to parse {}: invalid config key future_key",
                future.display()
            )
        );
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
        assert!(
            bad_json.starts_with("failed to parse x.json: invalid JSON"),
            "{bad_json}"
        );
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

    fn dev_with_hcl(snippet: &str) -> Result<AgentConfig, String> {
        build(&ConfigSources {
            dev: true,
            hcl_snippets: vec![snippet.to_string()],
            ..Default::default()
        })
    }

    /// The forms Consul's own config fixtures use (`agent/config/testdata/full-config.hcl`,
    /// `runtime_test.go`), in a config of our own.
    #[test]
    fn consul_hcl_forms_load() {
        let c = dev_with_hcl(
            r#"
            # one-line nested blocks, several items on a line, quoted keys, commas after blocks
            acl { tokens { initial_management = "x" } }
            ports { dns = -1 http = 18500 }
            node_meta { "rack-id" = "r1", zone = "z" },
            limits = { kv_max_value_size = 1024 txn_max_req_len = 2048 }
            limits { http_max_conns_per_client = 7 }
            service { name = "a" port = 80 }
            service = { name = "b" port = 90 meta={my="value"}, weights={passing=13}}
            check = { name = "c" ttl = "10s" }
            retry_join = ["10.0.0.1", "10.0.0.2",]
            /* a block comment */ bootstrap_expect = 0 server = true
            "#,
        )
        .unwrap();
        assert_eq!((c.ports.http, c.ports.dns), (18500, -1));
        assert_eq!(
            c.node_meta,
            vec![
                ("rack-id".to_string(), "r1".to_string()),
                ("zone".to_string(), "z".to_string())
            ]
        );
        assert_eq!((c.kv_max_value_size, c.txn_max_req_len), (1024, 2048));
        assert_eq!(c.pending.http_max_conns_per_client, 7);
        assert_eq!(c.retry_join, vec!["10.0.0.1", "10.0.0.2"]);
        let services = c.raw["services"].as_array().unwrap();
        assert_eq!(services.len(), 2);
        assert_eq!(services[1]["meta"]["my"], "value");
        assert_eq!(c.raw["checks"][0]["ttl"], "10s");
        assert_eq!(
            c.warnings,
            vec!["config: limits.http_max_conns_per_client = 7 is accepted but not acted on yet: the HTTP API does not limit connections per client address"]
        );
    }

    #[test]
    fn type_errors_name_the_source_and_key_path() {
        let err = dev_with_hcl("ports { http = \"abc\" }").unwrap_err();
        assert_eq!(
            err,
            "failed to parse -hcl #1: 'ports.http' expected type 'int', got unconvertible type 'string', value: 'abc'"
        );
        let err = dev_with_hcl("limits { rpc_rate = true }").unwrap_err();
        assert!(
            err.contains("'limits.rpc_rate' expected type 'float64'"),
            "{err}"
        );
        let err = dev_with_hcl("node_meta = [\"a\"]").unwrap_err();
        assert!(
            err.contains("'node_meta' expected a map, got 'slice'"),
            "{err}"
        );
        let err = dev_with_hcl("ports {\n  http = 8500\n  dns = abc\n}").unwrap_err();
        assert_eq!(
            err,
            "failed to parse -hcl #1: line 3, column 9: unexpected word \"abc\": strings must be quoted"
        );
        assert!(!err.contains('\n'));
    }

    #[test]
    fn settings_not_acted_on_are_kept_and_warned_once_each() {
        let c = dev_with_hcl(
            r#"
            limits { rpc_rate = 12.5 rpc_max_burst = 40 }
            http_config {
              response_headers { "Access-Control-Allow-Origin" = "*" }
              allow_write_http_from = ["127.0.0.0/8", "::1/128"]
              use_cache = false
            }
            primary_datacenter = "Primary"
            reconnect_timeout = "9h"
            performance { raft_multiplier = 3 leave_drain_time = "2s" rpc_hold_timeout = "1s" }
            autopilot { cleanup_dead_servers = false max_trailing_logs = 10 }
            disable_remote_exec = false
            disable_update_check = true
            "#,
        )
        .unwrap();
        let p = &c.pending;
        assert_eq!((p.rpc_rate_per_second, p.rpc_max_burst), (12.5, 40));
        assert_eq!(
            p.http_response_headers,
            vec![("Access-Control-Allow-Origin".to_string(), "*".to_string())]
        );
        assert_eq!(
            p.allow_write_http_from[0],
            IpNetwork {
                address: "127.0.0.0".parse().unwrap(),
                prefix_bits: 8
            }
        );
        assert!(!c.http_use_cache);
        assert_eq!(p.primary_datacenter, "primary");
        assert_eq!(p.reconnect_timeout, Duration::from_secs(9 * 3600));
        assert_eq!(p.raft_multiplier, 3);
        assert_eq!(p.leave_drain_time, Duration::from_secs(2));
        assert_eq!(p.rpc_hold_timeout, Duration::from_secs(1));
        assert!(!p.autopilot.cleanup_dead_servers);
        assert_eq!(p.autopilot.max_trailing_logs, 10);
        assert_eq!(
            p.autopilot.server_stabilization_time,
            Duration::from_secs(10)
        );
        assert!(!c.disable_remote_exec);
        let keys: Vec<&str> = c
            .warnings
            .iter()
            .map(|w| {
                w.trim_start_matches("config: ")
                    .split([' ', '='])
                    .next()
                    .unwrap()
            })
            .collect();
        // In the key table's order; `primary_datacenter` last, from its own reader, which
        // alone knows the datacenter it differs from.
        assert_eq!(
            keys,
            vec![
                "disable_remote_exec",
                "http_config.allow_write_http_from",
                "http_config.response_headers",
                "limits.rpc_max_burst",
                "limits.rpc_rate",
                "performance.leave_drain_time",
                "performance.raft_multiplier",
                "performance.rpc_hold_timeout",
                "reconnect_timeout",
                "primary_datacenter",
            ]
        );
        assert!(c.warnings.iter().all(|w| w.contains("not acted on yet")));
        // Defaults warn about nothing, and a primary equal to the datacenter acts.
        let plain =
            dev_with_hcl("primary_datacenter = \"dc1\" disable_remote_exec = true").unwrap();
        assert!(plain.warnings.is_empty(), "{:?}", plain.warnings);
        assert_eq!(plain.pending.primary_datacenter, "dc1");
        assert!(plain.pending.rpc_rate_per_second.is_infinite());
    }

    #[test]
    fn validation_follows_consul() {
        let cases = [
            (
                "performance = { raft_multiplier = 20 }",
                "performance.raft_multiplier cannot be 20. Must be between 1 and 10",
            ),
            (
                "performance = { raft_multiplier = 0 }",
                "performance.raft_multiplier cannot be 0. Must be between 1 and 10",
            ),
            (
                "autopilot = { max_trailing_logs = -1 }",
                "autopilot.max_trailing_logs cannot be -1. Must be greater than or equal to zero",
            ),
            (
                "primary_datacenter = \"%\"",
                "primary_datacenter can only contain lowercase alphanumeric, - or _ characters.",
            ),
            ("reconnect_timeout = \"4h\"", "reconnect_timeout must be >= 8h0m0s"),
            (
                "node_meta { \"consul-x\" = \"a\" }",
                "node_meta invalid: Key prefix 'consul-' is reserved for internal use",
            ),
            (
                "http_config { allow_write_http_from = [\"10.0.0.1\"] }",
                "http_config.allow_write_http_from: \"10.0.0.1\" is not a CIDR range (address/prefix)",
            ),
        ];
        for (snippet, expected) in cases {
            assert_eq!(dev_with_hcl(snippet).unwrap_err(), expected, "{snippet}");
        }
        let long_key = format!("node_meta {{ \"{}\" = \"a\" }}", "k".repeat(130));
        assert_eq!(
            dev_with_hcl(&long_key).unwrap_err(),
            "node_meta invalid: Key is too long (limit: 128 characters)"
        );
        let many: String = (0..70).map(|i| format!("k{i} = \"v\"\n")).collect();
        assert!(dev_with_hcl(&format!("node_meta {{\n{many}}}"))
            .unwrap_err()
            .contains("cannot contain more than 64 key/value pairs"));
    }

    #[test]
    fn the_kv_limits_live_under_limits_only() {
        let c = dev_with_hcl("limits { kv_max_value_size = 20 }").unwrap();
        assert_eq!(c.kv_max_value_size, 20);
        assert_eq!(
            dev_with_hcl("kv_max_value_size = 10").unwrap_err(),
            "failed to parse -hcl #1: invalid config key kv_max_value_size"
        );
    }

    #[test]
    fn the_raft_log_cache_is_bounded_in_bytes() {
        let c = dev_with_hcl("").unwrap();
        assert_eq!(c.raft_log_cache_bytes, 64 * 1024 * 1024);
        let c = dev_with_hcl("raft_log_cache_bytes = 1048576").unwrap();
        assert_eq!(c.raft_log_cache_bytes, 1 << 20);
        let c = dev_with_hcl("raft_log_cache_bytes = 0").unwrap();
        assert_eq!(c.raft_log_cache_bytes, 0);
        let error = dev_with_hcl("raft_log_cache_bytes = -1").unwrap_err();
        assert!(
            error.contains("raft_log_cache_bytes: -1 is out of range"),
            "{error}"
        );
        let error = dev_with_hcl("raft_log_cache_bytes = \"64MB\"").unwrap_err();
        assert!(error.contains("raft_log_cache_bytes"), "{error}");
    }

    #[test]
    fn bootstrap_settings_are_warned_about_in_consuls_words() {
        let warnings = |hcl: &str| -> Vec<String> {
            build(&ConfigSources {
                hcl_snippets: vec![format!("data_dir = \"/tmp/x\" {hcl}")],
                ..Default::default()
            })
            .unwrap()
            .warnings
        };
        assert_eq!(
            warnings("server = true bootstrap_expect = 3"),
            vec!["bootstrap_expect > 0: expecting 3 servers"]
        );
        assert_eq!(
            warnings("server = true bootstrap_expect = 4")[0],
            "bootstrap_expect is even number: A cluster with an even number of servers does not achieve optimum fault tolerance. See https://www.consul.io/docs/internals/consensus.html#deployment-table"
        );
        assert!(
            warnings("server = true bootstrap_expect = 2")[0].starts_with(
                "bootstrap_expect = 2: A cluster with 2 servers will provide no failure tolerance."
            )
        );
        assert_eq!(
            warnings("server = true bootstrap = true"),
            vec!["bootstrap = true: do not enable unless necessary"]
        );
        assert!(warnings("server = true").is_empty());
        assert!(dev_with_hcl("").unwrap().warnings.is_empty());
    }
}
