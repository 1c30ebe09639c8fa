//! `/v1/status/*` and `/v1/catalog/datacenters`: who leads, who votes, which datacenters.

use super::{check_datacenter, ApiError, Outcome, Reply, Request};
use crate::shard::Shard;

/// The leader's server RPC address as `"ip:port"`, or `""` when there is none.
pub fn leader(shard: &Shard, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    check_datacenter(shard, &request.query)?;
    if shard.is_client() {
        // A client agent asks a server, as Consul's does.
        return Ok(Outcome::Forward);
    }
    let status = shard.cluster_status();
    reply.json(200, b"", &status.leader_rpc_address);
    Ok(Outcome::Done)
}

/// Server RPC addresses of the Raft voters.
pub fn peers(shard: &Shard, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    check_datacenter(shard, &request.query)?;
    if shard.is_client() {
        return Ok(Outcome::Forward);
    }
    let status = shard.cluster_status();
    reply.json(200, b"", &status.voter_rpc_addresses);
    Ok(Outcome::Done)
}

/// Datacenters this agent knows, its own first. WAN federation will extend the list.
pub fn datacenters(
    shard: &Shard,
    _request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    reply.json(200, b"", &[shard.config().datacenter.as_str()]);
    Ok(Outcome::Done)
}
