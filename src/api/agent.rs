//! `/v1/agent/*` endpoints about the agent itself.

use super::{ApiError, Context, Outcome, Reply, Request};
use serde_json::json;

/// `/v1/agent/self`: the agent's configuration summary, its gossip member entry and stats.
/// `Config.Version` is the Consul API version praetor implements, so clients that gate
/// features on the version behave; `Config.PraetorVersion` is praetor's own.
pub fn agent_self(
    ctx: &Context,
    _request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let config = ctx.config();
    let status = ctx.cluster_status();
    let identity = ctx.identity();
    let advertise = config.advertise().to_string();
    let role = if config.server { "consul" } else { "node" };
    let body = json!({
        "Config": {
            "Datacenter": config.datacenter,
            "PrimaryDatacenter": config.datacenter,
            "NodeName": config.node_name,
            "NodeID": identity.node_id,
            "Revision": "praetor",
            "Server": config.server,
            "Version": crate::CONSUL_API_VERSION,
            "PraetorVersion": crate::PRAETOR_VERSION,
            "BuildDate": "",
        },
        "Coord": null,
        "Member": {
            "Name": config.node_name,
            "Addr": advertise,
            "Port": config.ports.serf_lan.max(0),
            "Tags": {
                "role": role,
                "dc": config.datacenter,
                "id": identity.node_id,
                "port": config.ports.server.max(0).to_string(),
                "build": format!("{}:praetor", crate::CONSUL_API_VERSION),
                "vsn": "2",
                "vsn_min": "2",
                "vsn_max": "3",
                "raft_vsn": "3",
            },
            "Status": 1,
            "ProtocolMin": 1,
            "ProtocolMax": 5,
            "ProtocolCur": 2,
            "DelegateMin": 2,
            "DelegateMax": 5,
            "DelegateCur": 4,
        },
        "Stats": {
            "agent": {
                "shards": ctx.shard_count().to_string(),
            },
            "raft": {
                "state": if status.is_leader { "Leader" } else if status.leader_rpc_address.is_empty() { "Candidate" } else { "Follower" },
                "term": status.term.to_string(),
                "commit_index": status.commit_index.to_string(),
                "applied_index": ctx.local_index().to_string(),
                "num_peers": status.voter_rpc_addresses.len().saturating_sub(1).to_string(),
            },
            "consul": {
                "server": config.server.to_string(),
                "leader": status.is_leader.to_string(),
                "known_datacenters": "1",
            },
        },
        "Meta": {},
    });
    reply.json(200, b"", &body);
    Ok(Outcome::Done)
}
