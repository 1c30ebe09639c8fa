//! `/v1/status/*` and `/v1/catalog/datacenters`: who leads, who votes, which datacenters.

use super::{check_datacenter, ApiError, Context, Outcome, Reply, Request};

/// The leader's server RPC address as `"ip:port"`, or `""` when there is none or its
/// catalog registration has not been applied here yet ([`leader_registered`]).
pub fn leader(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    if ctx.is_client() {
        // A client agent asks a server, as Consul's does.
        return Ok(super::rpc::client::status(
            ctx,
            request,
            "Status.Leader",
            "",
        ));
    }
    reply.json(200, b"", &reported_leader(ctx));
    Ok(Outcome::Done)
}

/// The leader a server reports, over HTTP and as `Status.Leader` alike: its RPC address
/// once its registration is applied here ([`leader_registered`]), else "".
pub fn reported_leader(ctx: &Context) -> String {
    let status = ctx.cluster_status();
    if leader_registered(&ctx.current_version(), &status.leader_name) {
        status.leader_rpc_address.clone()
    } else {
        String::new()
    }
}

/// Whether the leader's own catalog registration (its node with the `serfHealth` check and
/// the `consul` service, written in one command) is in `tables`.
///
/// A leader is reported only from then on, so a client that waits for a leader and then
/// creates a session (which needs the node's `serfHealth` check) or reads
/// `/v1/health/state/any` finds the registration there, as it does once Consul's leader
/// has run its first reconcile.
pub fn leader_registered(tables: &crate::store::Tables, leader_name: &str) -> bool {
    use crate::store::catalog::{rows::fold, SERF_CHECK_ID};
    if leader_name.is_empty() {
        return false;
    }
    let serf_check = fold(SERF_CHECK_ID);
    tables
        .catalog
        .nodes
        .get(&*fold(leader_name))
        .is_some_and(|entry| entry.checks.contains_key(&*serf_check))
}

/// Server RPC addresses of the Raft voters.
pub fn peers(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    if ctx.is_client() {
        return Ok(super::rpc::client::status(ctx, request, "Status.Peers", ""));
    }
    let status = ctx.cluster_status();
    reply.json(200, b"", &status.voter_rpc_addresses);
    Ok(Outcome::Done)
}

/// Every datacenter the WAN pool shows, nearest first by estimated round trip (this one
/// first), as Consul's `Catalog.ListDatacenters`. A client agent asks its server.
pub fn datacenters(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if ctx.is_client() {
        return Ok(super::rpc::client::status(
            ctx,
            request,
            "Catalog.ListDatacenters",
            "",
        ));
    }
    let datacenters = ctx.router().datacenters_by_distance();
    debug_assert!(datacenters.contains(&ctx.config().datacenter));
    reply.json(200, b"", &datacenters);
    Ok(Outcome::Done)
}
