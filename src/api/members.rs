//! `/v1/agent/members`, `/v1/agent/join/<addr>`, `/v1/agent/leave` and
//! `/v1/agent/force-leave/<node>`: the agent's view of its gossip pools and the requests
//! that change its membership. Everything is answered by this agent from its own pools;
//! nothing is forwarded to a server.
//!
//! The WAN pool is served only on servers that run one; `?wan` elsewhere answers as
//! Consul's client agents do (no WAN members, joining refused).

use super::{ApiError, AsyncResponder, Context, Outcome, Reply, Request};
use crate::cluster::gossip::GossipHandle;
use crate::gossip::MemberInfo;
use std::time::Duration;

/// How long after answering `/v1/agent/leave` the agent starts shutting down, so that the
/// answer reaches the client first.
const LEAVE_SHUTDOWN_DELAY: Duration = Duration::from_millis(200);

/// The LAN pool's handle, or Consul-like refusal when gossip is disabled.
pub fn lan_handle(ctx: &Context) -> Result<GossipHandle, ApiError> {
    ctx.lan()
        .cloned()
        .ok_or_else(|| ApiError::Internal("gossip is disabled on this agent".to_string()))
}

/// The WAN pool's handle, if this agent runs one (servers only).
pub fn wan_handle(ctx: &Context) -> Option<GossipHandle> {
    ctx.wan().cloned()
}

/// Consul's JSON for one serf member (`api.AgentMember`): `Status` as serf's integer.
pub fn member_json(member: &MemberInfo) -> serde_json::Value {
    serde_json::json!({
        "Name": member.name,
        "Addr": member.addr.to_string(),
        "Port": member.port,
        "Tags": member.tags,
        "Status": member.status as i32,
        "ProtocolMin": member.protocol_min,
        "ProtocolMax": member.protocol_max,
        "ProtocolCur": member.protocol_cur,
        "DelegateMin": member.delegate_min,
        "DelegateMax": member.delegate_max,
        "DelegateCur": member.delegate_cur,
    })
}

/// `GET /v1/agent/members`.
pub fn members(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    // Members whose node the token may not read are left out, as Consul's agent does.
    let rows = super::authz::RowFilter::of(request);
    let readable = |member: &&MemberInfo| rows.node(&member.name);
    let mut hidden = false;
    let mut listed = |members: &[MemberInfo]| -> Vec<serde_json::Value> {
        let kept: Vec<serde_json::Value> =
            members.iter().filter(readable).map(member_json).collect();
        hidden |= kept.len() != members.len();
        kept
    };
    let list: Vec<serde_json::Value> = if wants_wan(request) {
        if !matches!(request.query.get("segment"), None | Some("") | Some("_all")) {
            return Err(ApiError::bad_request(
                "Cannot provide a segment with wan=true",
            ));
        }
        match wan_handle(ctx) {
            Some(handle) => listed(&handle.members()),
            // Client agents have no WAN pool: Consul answers an empty list.
            None => Vec::new(),
        }
    } else {
        let handle = lan_handle(ctx)?;
        let members = handle.members();
        match request.query.get("segment") {
            // praetor, like Consul's community edition, has only the default segment;
            // `_all` asks for every segment, which is the same pool.
            None | Some("") | Some("_all") => listed(&members),
            Some(_) => {
                return Err(ApiError::BadRequest(
                    "Network segments are not supported in this version of Consul".to_string(),
                ))
            }
        }
    };
    let mut headers = Vec::new();
    rows.write_header(hidden, &mut headers);
    reply.json(200, &headers, &list);
    Ok(Outcome::Done)
}

/// Consul's members and join endpoints take `?wan` only with a value (`wan=1`); a bare
/// `?wan` means the LAN pool there (force-leave, by contrast, looks at presence).
fn wants_wan(request: &Request) -> bool {
    request.query.get("wan").is_some_and(|v| !v.is_empty())
}

fn empty_ok(reply: &mut Reply) {
    reply.send(200, None, b"", b"");
}

/// `PUT /v1/agent/join/<address>`.
pub fn join(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    let address = request.rest;
    if address.is_empty() {
        return Err(ApiError::bad_request("Missing address to join"));
    }
    let handle = if wants_wan(request) {
        wan_handle(ctx)
            .ok_or_else(|| ApiError::Internal("Must be a server to join WAN cluster".to_string()))?
    } else {
        lan_handle(ctx)?
    };
    let address = address.to_string();
    Ok(Outcome::Async(Box::pin(async move {
        let result = handle.join(std::slice::from_ref(&address)).await;
        Box::new(move |reply: &mut Reply| match result {
            Ok(_) => empty_ok(reply),
            Err(e) => reply.error(&ApiError::Internal(e.to_string())),
        }) as AsyncResponder
    })))
}

/// `PUT /v1/agent/leave`.
pub fn leave(ctx: &Context, _: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    let lan = lan_handle(ctx)?;
    let wan = wan_handle(ctx);
    Ok(Outcome::Async(Box::pin(async move {
        let result = lan.leave().await;
        if let Some(wan) = &wan {
            let _ = wan.leave().await;
        }
        if result.is_ok() {
            // Consul's agent shuts down after a graceful leave; the signal path does that
            // here too, once the answer has gone out.
            monoio::spawn(async {
                monoio::time::sleep(LEAVE_SHUTDOWN_DELAY).await;
                log::info!("agent: left the cluster gracefully, shutting down");
                // SAFETY: signalling our own process; the agent waits for SIGTERM.
                unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
            });
        }
        Box::new(move |reply: &mut Reply| match result {
            Ok(()) => empty_ok(reply),
            Err(e) => reply.error(&ApiError::Internal(e.to_string())),
        }) as AsyncResponder
    })))
}

/// `PUT /v1/agent/force-leave/<node>`.
pub fn force_leave(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    let node = request.rest;
    if node.is_empty() {
        return Err(ApiError::bad_request("Missing node name"));
    }
    let lan = lan_handle(ctx)?;
    let wan = wan_handle(ctx);
    let prune = request.query.has("prune");
    let wan_only = request.query.has("wan");
    let known_lan = lan.members().iter().any(|m| m.name == node);
    let known_wan = wan
        .as_ref()
        .is_some_and(|w| w.members().iter().any(|m| m.name == node));
    if !(known_lan && !wan_only || known_wan) {
        // Consul's agent returns a plain error here, which its HTTP layer answers with 500
        // (only typed not-found errors become 404 there), with or without `?prune`.
        return Err(ApiError::Internal(format!(
            "agent: No node found with name '{node}'"
        )));
    }
    let node = node.to_string();
    Ok(Outcome::Async(Box::pin(async move {
        let mut result = Ok(());
        if known_lan && !wan_only {
            result = lan.force_leave(&node, prune).await;
        }
        if let (Some(wan), true, Ok(())) = (&wan, known_wan, &result) {
            result = wan.force_leave(&node, prune).await;
        }
        Box::new(move |reply: &mut Reply| match result {
            Ok(()) => empty_ok(reply),
            Err(e) => reply.error(&ApiError::Internal(e.to_string())),
        }) as AsyncResponder
    })))
}
