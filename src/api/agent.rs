//! `/v1/agent/*` endpoints about the agent itself.
//!
//! `/v1/agent/self` answers Consul's shape (`agent/agent_endpoint.go`'s `Self`): `Config`, the
//! sanitized `DebugConfig` (only the keys tools read), `Coord` (this node's LAN coordinate),
//! `Member` (this node's entry of the LAN pool, the very value `/v1/agent/members` lists),
//! `Stats` with the sections and keys Consul's agent and server report, `Meta` and `xDS`
//! (present only when a gRPC port is configured, as Consul has no xDS server without one).

use super::coordinate::coordinate_json;
use super::members::member_json;
use super::{ApiError, Context, Outcome, Reply, Request};
use crate::gossip::MemberStatus;
use serde_json::{json, Map, Value};

/// The Envoy versions Consul's xDS server lists as supported (`xdscommon.EnvoyVersions` of the
/// Consul release whose API praetor implements); tools pick an Envoy image from it.
const ENVOY_VERSIONS_SUPPORTED: &[&str] = &["1.34.1", "1.33.2", "1.32.5", "1.31.8"];

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

/// The keys of Consul's sanitized runtime configuration that tools read: ports (negative
/// when disabled, as Consul reports them), roles, datacenters and feature switches.
fn debug_config(ctx: &Context) -> Value {
    let config = ctx.config();
    let ports = &config.ports;
    json!({
        "ACLsEnabled": config.acl.enabled,
        "Bootstrap": config.bootstrap,
        "BootstrapExpect": config.bootstrap_expect,
        "ConnectEnabled": false,
        "Datacenter": config.datacenter,
        "DevMode": config.dev_mode,
        "DisableRemoteExec": config.disable_remote_exec,
        "DNSPort": ports.dns,
        "EnableDebug": false,
        "GRPCPort": ports.grpc,
        "GRPCTLSPort": -1,
        "HTTPPort": ports.http,
        "HTTPSPort": ports.https,
        "NodeID": ctx.identity().node_id,
        "NodeName": config.node_name,
        "PrimaryDatacenter": config.pending.primary_datacenter,
        "SerfPortLAN": ports.serf_lan,
        "SerfPortWAN": ports.serf_wan,
        "ServerMode": config.server,
        "ServerPort": ports.server,
        "UIConfig": { "Enabled": config.ui.enabled },
    })
}

/// Consul's `xDS` section: present only when a gRPC port is configured, preferring the TLS
/// port as Consul does (praetor has no gRPC TLS listener, so the plain port).
fn xds(ctx: &Context) -> Option<Value> {
    let grpc_port = ctx.config().ports.grpc;
    (grpc_port > 0).then(|| {
        json!({
            "SupportedProxies": { "envoy": ENVOY_VERSIONS_SUPPORTED },
            "Port": grpc_port,
            "Ports": { "Plaintext": grpc_port, "TLS": -1 },
        })
    })
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
