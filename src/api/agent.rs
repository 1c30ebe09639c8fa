//! `/v1/agent/*` endpoints about the agent itself.
//!
//! `/v1/agent/self` answers Consul's shape (`agent/agent_endpoint.go`'s `Self`): `Config`, the
//! sanitized `DebugConfig` (the keys tools read, each from the running configuration, tokens
//! shown as `hidden` as Consul shows them), `Coord` (this node's LAN coordinate), `Member`
//! (this node's entry of the LAN pool, the very value `/v1/agent/members` lists), `Stats` with
//! the sections and keys Consul's agent and server report, `Meta`, and `xDS`, present only
//! when an xDS server listens ([`xds_server_listens`]).

use super::coordinate::coordinate_json;
use super::members::member_json;
use super::{ApiError, Context, Outcome, Reply, Request};
use crate::config::AgentConfig;
use crate::gossip::MemberStatus;
use serde_json::{json, Map, Value};

/// The Envoy versions the xDS server is built and tested for (newest first), as Consul's
/// `proxysupport.EnvoyVersions` lists them: `/v1/agent/self` shows them, tools pick an Envoy
/// image from them, and `praetor connect envoy` refuses others (`xds` re-exports them; the
/// list lives here because the API may not depend on `xds`).
pub const ENVOY_VERSIONS: &[&str] = &["1.38.3", "1.37.5", "1.36.7", "1.35.8"];

/// `/v1/agent/self`: the agent's configuration summary, its gossip member entry and stats.
/// `Config.Version` is the Consul API version praetor implements, so clients that gate
/// features on the version behave; `Config.PraetorVersion` is praetor's own.
pub fn agent_self(
    ctx: &Context,
    _request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let config = ctx.config();
    let identity = ctx.identity();
    let member = local_member(ctx);
    let coordinate = ctx
        .lan()
        .map_or(Value::Null, |lan| coordinate_json(&lan.local_coordinate()));
    let mut body = json!({
        "Config": {
            "Datacenter": config.datacenter,
            "PrimaryDatacenter": config.pending.primary_datacenter,
            "NodeName": config.node_name,
            "NodeID": identity.node_id,
            "Revision": "praetor",
            "Server": config.server,
            "Version": crate::CONSUL_API_VERSION,
            "PraetorVersion": crate::PRAETOR_VERSION,
            "BuildDate": "",
        },
        "DebugConfig": debug_config(ctx),
        "Coord": coordinate,
        "Member": member,
        "Stats": stats(ctx),
        "Meta": node_meta(ctx),
    });
    if let Some(xds) = xds(ctx) {
        body["xDS"] = xds;
    }
    reply.json(200, b"", &body);
    Ok(Outcome::Done)
}

/// This node's entry in the LAN pool, as `/v1/agent/members` lists it. Without a LAN pool
/// (gossip disabled) the entry is built from the configuration with the tags the pool would
/// carry.
fn local_member(ctx: &Context) -> Value {
    if let Some(lan) = ctx.lan() {
        let members = lan.members();
        if let Some(own) = members.iter().find(|m| m.name == lan.local_name()) {
            return member_json(own);
        }
    }
    let config = ctx.config();
    json!({
        "Name": config.node_name,
        "Addr": config.advertise().to_string(),
        "Port": config.ports.serf_lan.max(0),
        "Tags": crate::cluster::pools::lan_tags(config, &ctx.identity().node_id),
        "Status": MemberStatus::Alive as i32,
        "ProtocolMin": 1,
        "ProtocolMax": 5,
        "ProtocolCur": 2,
        "DelegateMin": 2,
        "DelegateMax": 5,
        "DelegateCur": 4,
    })
}

/// The node's metadata, as Consul's `Meta` reports `node_meta`.
fn node_meta(ctx: &Context) -> Value {
    let meta: Map<String, Value> = ctx
        .node_meta()
        .iter()
        .map(|(key, value)| (key.clone(), Value::String(value.clone())))
        .collect();
    Value::Object(meta)
}

/// praetor serves no `/debug/pprof` endpoints, whatever `enable_debug` asks (the key table
/// warns about it), so `DebugConfig.EnableDebug` is this.
const PPROF_SERVED: bool = false;
/// praetor has no remote exec, whatever `disable_remote_exec` asks, so
/// `DebugConfig.DisableRemoteExec` is the negation of this.
const REMOTE_EXEC_SERVED: bool = false;

/// A duration as Consul's sanitized configuration shows one (`"30s"`, `"0s"`).
fn go_duration(duration: std::time::Duration) -> String {
    crate::proto::duration::format_go_duration(duration.as_nanos().min(i64::MAX as u128) as i64)
}

/// A port the gRPC server listens on, or -1 while none listens (a port nothing serves is
/// not one a tool should dial).
fn grpc_port(port: i32) -> i32 {
    if crate::config::keys::GRPC_SERVER_LISTENS {
        port
    } else {
        -1
    }
}

/// The keys of Consul's sanitized runtime configuration that tools read, with Consul's
/// names and shapes, each from the configuration this agent runs with: ports (negative when
/// disabled, as Consul reports them), roles, datacenters, ACL and Connect settings, DNS and
/// feature switches. Secrets are `hidden`, as in Consul.
fn debug_config(ctx: &Context) -> Value {
    let config = ctx.config();
    // In groups, each small enough for `json!`'s recursion limit.
    let groups = [
        acl_keys(config),
        agent_keys(config),
        dns_keys(config),
        more_keys(config),
        last_keys(ctx, config),
    ];
    let mut all = Map::new();
    for group in groups {
        if let Value::Object(keys) = group {
            all.extend(keys);
        }
    }
    Value::Object(all)
}

/// A secret as Consul's sanitized configuration shows it: `hidden` when set.
fn hidden(token: &Option<String>) -> &'static str {
    if token.is_some() {
        "hidden"
    } else {
        ""
    }
}

/// The URLs of a listener's addresses; none when its port is disabled.
fn listener_urls(ips: &[std::net::IpAddr], port: i32, scheme: &str) -> Vec<String> {
    if port < 0 {
        return Vec::new();
    }
    ips.iter()
        .map(|ip| format!("{scheme}://{}", std::net::SocketAddr::new(*ip, port as u16)))
        .collect()
}

/// Whether a script-check switch is on.
fn script_checks(config: &AgentConfig, key: &str) -> bool {
    config
        .raw
        .get(key)
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The ACL keys, tokens hidden.
fn acl_keys(config: &AgentConfig) -> Value {
    let acl = &config.acl;
    let default_policy = match acl.default_policy {
        crate::store::acl::authorizer::DefaultPolicy::Allow => "allow",
        crate::store::acl::authorizer::DefaultPolicy::Deny => "deny",
    };
    let down_policy = match acl.down_policy {
        crate::config::acl::DownPolicy::Allow => "allow",
        crate::config::acl::DownPolicy::Deny => "deny",
        crate::config::acl::DownPolicy::ExtendCache => "extend-cache",
        crate::config::acl::DownPolicy::AsyncCache => "async-cache",
    };
    json!({
        "ACLsEnabled": acl.enabled,
        "ACLResolverSettings": {
            "ACLDefaultPolicy": default_policy,
            "ACLDownPolicy": down_policy,
            "ACLTokenTTL": go_duration(acl.token_ttl),
            "ACLsEnabled": acl.enabled,
            "Datacenter": config.datacenter,
            "NodeName": config.node_name,
        },
        "ACLInitialManagementToken": hidden(&acl.tokens.initial_management),
        "ACLTokens": {
            "ACLAgentRecoveryToken": hidden(&acl.tokens.agent_recovery),
            "ACLAgentToken": hidden(&acl.tokens.agent),
            "ACLDefaultToken": hidden(&acl.tokens.default),
            "ACLReplicationToken": hidden(&acl.tokens.replication),
            "DataDir": config.data_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default(),
            "EnablePersistence": acl.enable_token_persistence,
        },
    })
}

/// The addressing, bootstrap, auto-encrypt and Connect keys.
fn agent_keys(config: &AgentConfig) -> Value {
    json!({
        "AdvertiseAddrLAN": config.advertise().to_string(),
        "AdvertiseAddrWAN": config.advertise_wan().to_string(),
        "AutoEncryptAllowTLS": config.tls.auto_encrypt.allow_tls,
        "AutoEncryptTLS": config.tls.auto_encrypt.tls,
        "BindAddr": config.bind_addr.to_string(),
        "Bootstrap": config.bootstrap,
        "BootstrapExpect": config.bootstrap_expect,
        "ClientAddrs": config.client_addrs.iter().map(|ip| ip.to_string()).collect::<Vec<_>>(),
        "ConnectCAProvider": config.connect.ca_provider,
        "ConnectEnabled": config.connect.enabled,
        "ConnectSidecarMaxPort": config.connect.sidecar_max_port,
        "ConnectSidecarMinPort": config.connect.sidecar_min_port,
        "ExposeMaxPort": config.connect.expose_max_port,
        "ExposeMinPort": config.connect.expose_min_port,
    })
}

/// The DNS keys.
fn dns_keys(config: &AgentConfig) -> Value {
    let ports = &config.ports;
    json!({
        "DNSAddrs": listener_urls(&config.addresses.dns, ports.dns, "tcp")
            .into_iter()
            .chain(listener_urls(&config.addresses.dns, ports.dns, "udp"))
            .collect::<Vec<_>>(),
        "DNSAllowStale": config.dns.allow_stale,
        "DNSAltDomain": config.dns.alt_domain.clone().unwrap_or_default(),
        "DNSDomain": format!("{}.", config.dns.domain),
        "DNSEnableTruncate": config.dns.enable_truncate,
        "DNSMaxStale": go_duration(config.dns.max_stale),
        "DNSNodeTTL": go_duration(config.dns.node_ttl),
        "DNSOnlyPassing": config.dns.only_passing,
        "DNSPort": ports.dns,
        "DNSRecursors": config.dns.recursors.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
        "DNSUDPAnswerLimit": config.dns.udp_answer_limit,
    })
}

/// The data directory, datacenter, query times, feature switches and HTTP keys.
fn more_keys(config: &AgentConfig) -> Value {
    let ports = &config.ports;
    let remote_scripts = script_checks(config, "enable_script_checks");
    json!({
        "DataDir": config.data_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default(),
        "Datacenter": config.datacenter,
        "DefaultQueryTime": go_duration(config.process.default_query_time),
        "DevMode": config.dev_mode,
        "DisableRemoteExec": !REMOTE_EXEC_SERVED,
        "EnableDebug": PPROF_SERVED,
        "EnableLocalScriptChecks": remote_scripts || script_checks(config, "enable_local_script_checks"),
        "EnableRemoteScriptChecks": remote_scripts,
        "GRPCPort": grpc_port(ports.grpc),
        "GRPCTLSPort": grpc_port(ports.grpc_tls),
        "HTTPAddrs": listener_urls(&config.addresses.http, ports.http, "tcp"),
        "HTTPPort": ports.http,
        "HTTPSAddrs": listener_urls(&config.addresses.https, ports.https, "tcp"),
        "HTTPSPort": ports.https,
        "HTTPUseCache": config.http_use_cache,
        "KVMaxValueSize": config.kv_max_value_size,
    })
}

/// The logging, node, Raft, serf, server, session, transaction and UI keys.
fn last_keys(ctx: &Context, config: &AgentConfig) -> Value {
    let ports = &config.ports;
    json!({
        "LeaveOnTerm": config.leave_on_terminate,
        "Logging": {
            "LogFilePath": config.process.log_file.as_ref().map(|f| f.path.display().to_string()).unwrap_or_default(),
            "LogJSON": config.process.log_json,
            "LogLevel": config.log_level,
        },
        "MaxQueryTime": go_duration(config.process.max_query_time),
        "NodeID": ctx.identity().node_id,
        "NodeMeta": node_meta(ctx),
        "NodeName": config.node_name,
        "PrimaryDatacenter": config.pending.primary_datacenter,
        "RaftProtocol": crate::config::process::RAFT_PROTOCOL,
        "RaftSnapshotThreshold": config.raft_snapshot_threshold_entries,
        "RaftTrailingLogs": config.raft_trailing_logs_entries,
        "SerfPortLAN": ports.serf_lan,
        "SerfPortWAN": ports.serf_wan,
        "ServerMode": config.server,
        "ServerPort": ports.server,
        "SessionTTLMin": go_duration(std::time::Duration::from_nanos(config.session_ttl_min_ns.max(0) as u64)),
        "SkipLeaveOnInt": config.skip_leave_on_interrupt,
        "TranslateWANAddrs": config.translate_wan_addrs,
        "TxnMaxReqLen": config.txn_max_req_len,
        "UIConfig": {
            "ContentPath": config.ui.content_path,
            "Dir": config.ui.dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default(),
            "Enabled": config.ui.enabled,
            "MetricsProvider": config.ui.metrics_provider,
        },
    })
}

/// Whether an xDS server (Envoy's gRPC ADS) listens on this agent: the one place that
/// decides `/v1/agent/self`'s `xDS` section. A configured gRPC port is bound at start or the
/// agent refuses to start, so a configured port is a listening one.
fn xds_server_listens(ctx: &Context) -> bool {
    let ports = &ctx.config().ports;
    crate::config::keys::GRPC_SERVER_LISTENS && (ports.grpc > 0 || ports.grpc_tls > 0)
}

/// Consul's `xDS` section, only when an xDS server listens: the supported Envoy versions and
/// the ports it serves, the TLS one preferred as Consul prefers it.
fn xds(ctx: &Context) -> Option<Value> {
    if !xds_server_listens(ctx) {
        return None;
    }
    let ports = &ctx.config().ports;
    let port = if ports.grpc_tls > 0 {
        ports.grpc_tls
    } else {
        ports.grpc
    };
    Some(json!({
        "SupportedProxies": { "envoy": ENVOY_VERSIONS },
        "Port": port,
        "Ports": { "Plaintext": ports.grpc, "TLS": ports.grpc_tls },
    }))
}

/// Consul's `Stats`: every value a string, as Consul's are.
fn stats(ctx: &Context) -> Value {
    let config = ctx.config();
    let mut stats = Map::new();
    stats.insert("agent".into(), agent_stats(ctx));
    stats.insert(
        "build".into(),
        json!({
            "prerelease": "",
            "revision": "praetor",
            "version": crate::CONSUL_API_VERSION,
            "version_metadata": "",
        }),
    );
    stats.insert(
        "runtime".into(),
        json!({
            "arch": std::env::consts::ARCH,
            "os": std::env::consts::OS,
            "cpu_count": std::thread::available_parallelism().map_or(1, |n| n.get()).to_string(),
            "max_procs": ctx.shard_count().to_string(),
            "version": format!("praetor {}", crate::PRAETOR_VERSION),
        }),
    );
    if let Some(lan) = ctx.lan() {
        stats.insert("serf_lan".into(), serf_stats(&lan.members()));
    }
    if let Some(wan) = ctx.wan() {
        stats.insert("serf_wan".into(), serf_stats(&wan.members()));
    }
    if config.server {
        let (consul, raft) = server_stats(ctx);
        stats.insert("consul".into(), consul);
        stats.insert("raft".into(), raft);
    } else {
        let known_servers = ctx.lan().map_or(0, |lan| {
            lan.members()
                .iter()
                .filter(|m| m.status == MemberStatus::Alive)
                .filter(|m| crate::cluster::pools::server_of(m).is_some())
                .count()
        });
        stats.insert(
            "consul".into(),
            json!({ "server": "false", "known_servers": known_servers.to_string() }),
        );
    }
    Value::Object(stats)
}

/// `Stats.agent`: praetor's shard count. Consul's check and service counts live with the
/// agent on shard 0, which this handler cannot read without a round trip, so they are left
/// out rather than reported wrong.
fn agent_stats(ctx: &Context) -> Value {
    json!({ "shards": ctx.shard_count().to_string() })
}

/// Counts of a gossip pool's members by status, as serf's `Stats` reports them.
fn serf_stats(members: &[crate::gossip::MemberInfo]) -> Value {
    let count = |status: MemberStatus| members.iter().filter(|m| m.status == status).count();
    json!({
        "members": members.len().to_string(),
        "failed": count(MemberStatus::Failed).to_string(),
        "left": count(MemberStatus::Left).to_string(),
    })
}

/// `Stats.consul` and `Stats.raft` of a server.
fn server_stats(ctx: &Context) -> (Value, Value) {
    let config = ctx.config();
    let status = ctx.cluster_status();
    let leader_contact = ctx.query_meta(0, crate::shard::runtime::Consistency::Leader);
    let state = if status.is_leader {
        "Leader"
    } else if status.leader_rpc_address.is_empty() {
        "Candidate"
    } else {
        "Follower"
    };
    let last_contact = if status.is_leader {
        "0".to_string()
    } else if leader_contact.known_leader {
        format!("{}ms", leader_contact.last_contact_ms)
    } else {
        "never".to_string()
    };
    let configuration: Vec<String> = status
        .servers
        .iter()
        .map(|server| {
            let suffrage = if server.voter { "Voter" } else { "Nonvoter" };
            format!(
                "{{Suffrage:{suffrage} ID:{} Address:{}}}",
                server.node_id, server.address
            )
        })
        .collect();
    let consul = json!({
        "server": "true",
        "leader": status.is_leader.to_string(),
        "leader_addr": status.leader_rpc_address,
        "bootstrap": config.bootstrap.to_string(),
        "known_datacenters": "1",
    });
    let raft = json!({
        "state": state,
        "term": status.term.to_string(),
        "last_log_index": status.last_index.to_string(),
        "commit_index": status.commit_index.to_string(),
        "applied_index": ctx.local_index().to_string(),
        "fsm_pending": "0",
        "last_contact": last_contact,
        "latest_configuration_index": status.membership_index.to_string(),
        "latest_configuration": format!("[{}]", configuration.join(" ")),
        "num_peers": status.voter_rpc_addresses.len().saturating_sub(1).to_string(),
        "protocol_version": "3",
        "protocol_version_min": "0",
        "protocol_version_max": "3",
        "snapshot_version_min": "0",
        "snapshot_version_max": "1",
    });
    (consul, raft)
}
