//! `/v1/status/*` and `/v1/catalog/datacenters`: who leads, who votes, which datacenters.

use super::{check_datacenter, ApiError, Context, Outcome, Reply, Request};

/// The leader's server RPC address as `"ip:port"`, or `""` when there is none.
pub fn leader(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    if ctx.is_client() {
        // A client agent asks a server, as Consul's does.
        return Ok(Outcome::Forward);
    }
    let status = ctx.cluster_status();
    reply.json(200, b"", &status.leader_rpc_address);
    Ok(Outcome::Done)
}

/// Server RPC addresses of the Raft voters.
pub fn peers(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    if ctx.is_client() {
        return Ok(Outcome::Forward);
    }
    let status = ctx.cluster_status();
    reply.json(200, b"", &status.voter_rpc_addresses);
    Ok(Outcome::Done)
}

/// Datacenters this agent knows, its own first. WAN federation will extend the list.
pub fn datacenters(
    ctx: &Context,
    _request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    reply.json(200, b"", &[ctx.config().datacenter.as_str()]);
    Ok(Outcome::Done)
}
