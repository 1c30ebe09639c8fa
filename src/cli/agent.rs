//! `praetor agent`: Consul's agent flags, turned into a config object that overrides files.

use crate::config::{self, ConfigSources};
use clap::Args;
use serde_json::{json, Map, Value};
use std::path::PathBuf;

#[derive(Args, Debug, Default)]
pub struct AgentArgs {
    /// Development mode: a single in-memory-ish server with everything enabled.
    #[arg(long)]
    pub dev: bool,
    // The booleans below are `Option`s, as Consul's agent flags are pointers: `-server=false`
    // overrides a config file's `server = true`, and an absent flag leaves the files alone.
    /// Run as a server (Raft voter) rather than a client agent.
    #[arg(long)]
    pub server: Option<bool>,
    /// Bootstrap a one-server cluster.
    #[arg(long)]
    pub bootstrap: Option<bool>,
    /// Servers to wait for before bootstrapping the cluster.
    #[arg(long = "bootstrap-expect")]
    pub bootstrap_expect: Option<u32>,
    /// Directory the agent keeps its state in (Raft log, snapshots, node ID).
    #[arg(long = "data-dir")]
    pub data_dir: Option<PathBuf>,
    /// Node name (default: the host name).
    #[arg(long = "node")]
    pub node: Option<String>,
    /// The node's unique ID, a UUID (default: generated once and kept in -data-dir).
    #[arg(long = "node-id")]
    pub node_id: Option<String>,
    /// Datacenter the agent belongs to (default `dc1`).
    #[arg(long)]
    pub datacenter: Option<String>,
    /// Address for cluster communication.
    #[arg(long)]
    pub bind: Option<String>,
    /// Address advertised to the other agents, when it differs from -bind.
    #[arg(long)]
    pub advertise: Option<String>,
    /// Address(es) the HTTP and DNS interfaces listen on.
    #[arg(long)]
    pub client: Option<String>,
    /// HTTP API port (default 8500; -1 turns the HTTP API off).
    #[arg(long = "http-port", allow_negative_numbers = true)]
    pub http_port: Option<i32>,
    /// DNS port (default 8600; -1 turns DNS off).
    #[arg(long = "dns-port", allow_negative_numbers = true)]
    pub dns_port: Option<i32>,
    /// Server RPC port (default 8300).
    #[arg(long = "server-port", allow_negative_numbers = true)]
    pub server_port: Option<i32>,
    /// LAN gossip port (default 8301).
    #[arg(long = "serf-lan-port", allow_negative_numbers = true)]
    pub serf_lan_port: Option<i32>,
    /// WAN gossip port of a server (default 8302; -1 turns the WAN pool off).
    #[arg(long = "serf-wan-port", allow_negative_numbers = true)]
    pub serf_wan_port: Option<i32>,
    /// gRPC port without TLS (off by default; -1 turns it off).
    #[arg(long = "grpc-port", allow_negative_numbers = true)]
    pub grpc_port: Option<i32>,
    /// HTTPS API port (off by default; needs a certificate in `tls`).
    #[arg(long = "https-port", allow_negative_numbers = true)]
    pub https_port: Option<i32>,
    /// gRPC port with TLS (off by default; -1 turns it off).
    #[arg(long = "grpc-tls-port", allow_negative_numbers = true)]
    pub grpc_tls_port: Option<i32>,
    /// Shard threads (default: one per core).
    #[arg(long)]
    pub shards: Option<usize>,
    /// Log level: trace, debug, info, warn or error (default info).
    #[arg(long = "log-level")]
    pub log_level: Option<String>,
    /// A config file (JSON or HCL) to load; repeatable, loaded in order.
    #[arg(long = "config-file")]
    pub config_file: Vec<PathBuf>,
    /// A directory whose .json and .hcl files are loaded in name order; repeatable.
    #[arg(long = "config-dir")]
    pub config_dir: Vec<PathBuf>,
    /// An HCL config fragment.
    #[arg(long)]
    pub hcl: Vec<String>,
    /// Address of an agent to join at start, retried until one answers; repeatable.
    #[arg(long = "retry-join")]
    pub retry_join: Vec<String>,
    /// Address of an agent to join at start (Consul's deprecated alias of -retry-join); repeatable.
    #[arg(long = "join")]
    pub join: Vec<String>,
    /// Serve the web UI at /ui/.
    #[arg(long)]
    pub ui: Option<bool>,
    /// Serve the web UI from this directory instead of the embedded one.
    #[arg(long = "ui-dir")]
    pub ui_dir: Option<PathBuf>,
    /// Where the web UI is served (default `/ui/`).
    #[arg(long = "ui-content-path")]
    pub ui_content_path: Option<String>,
    /// Upstream DNS server for names outside the agent's domain; repeatable.
    #[arg(long)]
    pub recursor: Vec<String>,
    /// DNS domain the agent answers for (default `consul.`).
    #[arg(long)]
    pub domain: Option<String>,
    /// A second DNS domain answered like -domain.
    #[arg(long = "alt-domain")]
    pub alt_domain: Option<String>,
    /// Gossip encryption key, base64 (see `praetor keygen`).
    #[arg(long)]
    pub encrypt: Option<String>,
    /// Run script checks, whoever registers them (prefer -enable-local-script-checks).
    #[arg(long = "enable-script-checks")]
    pub enable_script_checks: Option<bool>,
    /// Run script checks defined in config files only, not those registered over HTTP.
    #[arg(long = "enable-local-script-checks")]
    pub enable_local_script_checks: Option<bool>,
    /// Node metadata as `key:value` (repeatable).
    #[arg(long = "node-meta")]
    pub node_meta: Vec<String>,
    /// WAN addresses to join once at start (Consul's deprecated alias of -retry-join-wan).
    #[arg(long = "join-wan")]
    pub join_wan: Vec<String>,
    /// WAN addresses to join at start, retried until one answers.
    #[arg(long = "retry-join-wan")]
    pub retry_join_wan: Vec<String>,
    /// Address advertised to the WAN pool.
    #[arg(long = "advertise-wan")]
    pub advertise_wan: Option<String>,
    /// Rejoin the cluster after a previous leave (praetor always does: it keeps no gossip
    /// snapshot, so every start joins through its join addresses).
    #[arg(long)]
    pub rejoin: Option<bool>,
    /// Never derive the node ID from the host (praetor never does).
    #[arg(long = "disable-host-node-id")]
    pub disable_host_node_id: Option<bool>,
    /// Time between -retry-join attempts (Go duration, default 30s).
    #[arg(long = "retry-interval")]
    pub retry_interval: Option<String>,
    /// -retry-join attempts before the agent exits with code 1 (0: retry forever).
    #[arg(long = "retry-max")]
    pub retry_max: Option<u64>,
    /// Time between -retry-join-wan attempts (Go duration, default 30s).
    #[arg(long = "retry-interval-wan")]
    pub retry_interval_wan: Option<String>,
    /// -retry-join-wan attempts before giving up (0: retry forever).
    #[arg(long = "retry-max-wan")]
    pub retry_max_wan: Option<u64>,
    /// Address the LAN gossip pool binds (default: -bind).
    #[arg(long = "serf-lan-bind")]
    pub serf_lan_bind: Option<String>,
    /// Address the WAN gossip pool binds (default: -bind).
    #[arg(long = "serf-wan-bind")]
    pub serf_wan_bind: Option<String>,
    /// Raft protocol version (praetor speaks 3 only).
    #[arg(long = "raft-protocol")]
    pub raft_protocol: Option<i64>,
    /// Gossip protocol version (2 or 3; praetor speaks 2).
    #[arg(long)]
    pub protocol: Option<i64>,
    /// How long a blocking query waits without `?wait` (default 300s).
    #[arg(long = "default-query-time")]
    pub default_query_time: Option<String>,
    /// The longest a blocking query waits (default 600s).
    #[arg(long = "max-query-time")]
    pub max_query_time: Option<String>,
    /// Read every config file as `json` or `hcl`, whatever its extension.
    #[arg(long = "config-format")]
    pub config_format: Option<String>,
    /// Network segment (Consul Enterprise; refused).
    #[arg(long)]
    pub segment: Option<String>,
    /// File to write the agent's PID to; removed when the agent exits.
    #[arg(long = "pid-file")]
    pub pid_file: Option<PathBuf>,
    /// Also write logs to this file (a path ending in `/` holds `consul.log`).
    #[arg(long = "log-file")]
    pub log_file: Option<String>,
    /// Size at which the -log-file is rotated (0: no size limit).
    #[arg(long = "log-rotate-bytes")]
    pub log_rotate_bytes: Option<i64>,
    /// Age at which the -log-file is rotated (Go duration, default 24h).
    #[arg(long = "log-rotate-duration")]
    pub log_rotate_duration: Option<String>,
    /// Rotated log files kept (0: keep all; -1: keep none).
    #[arg(long = "log-rotate-max-files", allow_negative_numbers = true)]
    pub log_rotate_max_files: Option<i64>,
    /// Log in hclog's JSON format.
    #[arg(long = "log-json")]
    pub log_json: Option<bool>,
    /// Log to syslog (not supported; refused).
    #[arg(long)]
    pub syslog: Option<bool>,
    /// Arguments after the flags, which the agent refuses with Consul's message.
    #[arg(hide = true)]
    pub extra: Vec<String>,
}

/// `-node-meta key:value` as Consul splits it: at the first `:`; no `:` is an empty value.
fn node_meta_pair(raw: &str) -> (String, String) {
    match raw.split_once(':') {
        Some((key, value)) => (key.to_string(), value.to_string()),
        None => (raw.to_string(), String::new()),
    }
}

impl AgentArgs {
    /// The flags as a config object; only flags actually given appear, so files fill the rest.
    pub fn to_config_object(&self) -> Map<String, Value> {
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| json!(p.to_string_lossy()));
        let list = |l: &Vec<String>| (!l.is_empty()).then(|| json!(l));
        let object = |m: Map<String, Value>| (!m.is_empty()).then_some(Value::Object(m));
        let ui = given_fields([
            ("enabled", given(&self.ui)),
            ("dir", path(&self.ui_dir)),
            ("content_path", given(&self.ui_content_path)),
        ]);
        let node_meta: Map<String, Value> = self
            .node_meta
            .iter()
            .map(|raw| {
                let (key, value) = node_meta_pair(raw);
                (key, Value::String(value))
            })
            .collect();
        let ports = given_fields([
            ("http", given(&self.http_port)),
            ("dns", given(&self.dns_port)),
            ("server", given(&self.server_port)),
            ("serf_lan", given(&self.serf_lan_port)),
            ("serf_wan", given(&self.serf_wan_port)),
            ("grpc", given(&self.grpc_port)),
            ("https", given(&self.https_port)),
            ("grpc_tls", given(&self.grpc_tls_port)),
        ]);
        given_fields([
            ("server", given(&self.server)),
            ("bootstrap", given(&self.bootstrap)),
            ("bootstrap_expect", given(&self.bootstrap_expect)),
            ("data_dir", path(&self.data_dir)),
            ("node_name", given(&self.node)),
            ("node_id", given(&self.node_id)),
            ("datacenter", given(&self.datacenter)),
            ("bind_addr", given(&self.bind)),
            ("advertise_addr", given(&self.advertise)),
            ("client_addr", given(&self.client)),
            ("shards", given(&self.shards)),
            ("log_level", given(&self.log_level)),
            ("retry_join", list(&self.retry_join)),
            ("start_join", list(&self.join)),
            ("ui_config", object(ui)),
            ("recursors", list(&self.recursor)),
            ("domain", given(&self.domain)),
            ("alt_domain", given(&self.alt_domain)),
            ("encrypt", given(&self.encrypt)),
            ("enable_script_checks", given(&self.enable_script_checks)),
            (
                "enable_local_script_checks",
                given(&self.enable_local_script_checks),
            ),
            ("node_meta", object(node_meta)),
            ("start_join_wan", list(&self.join_wan)),
            ("retry_join_wan", list(&self.retry_join_wan)),
            ("advertise_addr_wan", given(&self.advertise_wan)),
            ("retry_interval", given(&self.retry_interval)),
            ("retry_interval_wan", given(&self.retry_interval_wan)),
            ("serf_lan", given(&self.serf_lan_bind)),
            ("serf_wan", given(&self.serf_wan_bind)),
            ("default_query_time", given(&self.default_query_time)),
            ("max_query_time", given(&self.max_query_time)),
            ("segment", given(&self.segment)),
            ("log_file", given(&self.log_file)),
            ("log_rotate_duration", given(&self.log_rotate_duration)),
            ("retry_max", given(&self.retry_max)),
            ("retry_max_wan", given(&self.retry_max_wan)),
            ("raft_protocol", given(&self.raft_protocol)),
            ("protocol", given(&self.protocol)),
            ("log_rotate_bytes", given(&self.log_rotate_bytes)),
            ("log_rotate_max_files", given(&self.log_rotate_max_files)),
            ("rejoin_after_leave", given(&self.rejoin)),
            ("disable_host_node_id", given(&self.disable_host_node_id)),
            ("log_json", given(&self.log_json)),
            ("enable_syslog", given(&self.syslog)),
            ("pid_file", path(&self.pid_file)),
            ("ports", object(ports)),
        ])
    }
}

/// A flag's value as JSON, when the flag was given.
fn given<T: serde::Serialize>(value: &Option<T>) -> Option<Value> {
    value.as_ref().map(|v| json!(v))
}

/// An object of the fields that were given, in the order listed.
fn given_fields<const N: usize>(fields: [(&str, Option<Value>); N]) -> Map<String, Value> {
    fields
        .into_iter()
        .filter_map(|(key, value)| Some((key.to_string(), value?)))
        .collect()
}

pub fn run(args: AgentArgs) -> Result<i32, String> {
    if !args.extra.is_empty() {
        return Err(format!(
            "Unexpected extra arguments: [{}]",
            args.extra.join(" ")
        ));
    }
    crate::node::defer_reload_signals();
    let config_format = args
        .config_format
        .as_deref()
        .map(config::ConfigFormat::parse)
        .transpose()?;
    let sources = ConfigSources {
        dev: args.dev,
        config_files: args.config_file.clone(),
        config_dirs: args.config_dir.clone(),
        hcl_snippets: args.hcl.clone(),
        flags: args.to_config_object(),
        config_format,
    };
    let config = config::build(&sources)?;
    // Invalid service or check definitions stop the agent at startup, as in Consul.
    crate::agent::config_definitions(&config)?;
    crate::logging::init(&crate::logging::LogSettings {
        level: &config.log_level,
        json: config.process.log_json,
        file: config.process.log_file.as_ref(),
    })?;
    for warning in &config.warnings {
        log::warn!("{warning}");
    }
    for warning in &config.acl.warnings {
        log::warn!("{warning}");
    }
    crate::api::ui_assets::install(&config)?;
    if config.dev_mode {
        log::info!("agent: running in -dev mode: data is kept in a temporary directory unless -data-dir is given");
    }
    crate::node::run_agent(config)?;
    Ok(0)
}
