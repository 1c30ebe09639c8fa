//! The requests about a datacenter's servers that name another datacenter (`?dc=`):
//! `GET /v1/status/leader` and `/v1/status/peers` become `Status.Leader` and `Status.Peers`
//! naming it, which this agent's server (or this server, through the WAN router) hands to a
//! server there, as Consul's `Status` endpoint forwards them; the answer is that
//! datacenter's leader or voters, rendered as its own HTTP answer.

use crate::api::{ApiError, Context, Outcome, Request};

/// `/v1/status/leader|peers?dc=<other>` as the typed call naming `datacenter`
/// ([`super::client::across_datacenters`]); `None` for other paths.
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    let method = match request.path {
        "/v1/status/leader" => "Status.Leader",
        "/v1/status/peers" => "Status.Peers",
        _ => return None,
    };
    Some(Ok(super::client::status(ctx, request, method, datacenter)))
}
