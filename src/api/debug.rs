//! Test-only fault injection: `/v1/agent/debug/faults` blocks Raft and RPC traffic to and from
//! the given peer IPs, to partition a cluster without network namespaces, and can make the
//! raft core stall between handing an applied batch to successive shards (`PublishStallMs`),
//! to test that no shard answers from behind a write another shard acknowledged. It exists
//! only when the agent is started with `enable_debug_faults = true`; otherwise it answers 404
//! like any unknown path.

use super::{ApiError, Context, Outcome, Reply, Request};
use crate::proto::http::Method;
use crate::shard::peer_transport::Faults;
use serde_json::json;
use std::collections::HashSet;
use std::net::IpAddr;

/// Most peers one fault list may name.
const BLOCKED_PEERS_MAX: usize = 64;

pub fn faults(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let enabled = ctx
        .config()
        .raw
        .get("enable_debug_faults")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    if !enabled {
        return Err(ApiError::NotFound(format!(
            "404 page not found: {}",
            request.path
        )));
    }
    let faults = &ctx.faults();
    if request.method == Method::Put {
        // Each field present replaces that fault; both are checked before either applies.
        let body: serde_json::Value = serde_json::from_slice(request.body)
            .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
        let blocked = body
            .get("BlockedPeers")
            .or_else(|| body.get("blocked_peers"))
            .map(parse_blocked_peers)
            .transpose()?;
        let stall_ms = body
            .get("PublishStallMs")
            .map(|stall| {
                stall
                    .as_u64()
                    .filter(|ms| *ms <= Faults::PUBLISH_STALL_MS_MAX)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "PublishStallMs must be a whole number of milliseconds up to {}",
                            Faults::PUBLISH_STALL_MS_MAX
                        ))
                    })
            })
            .transpose()?;
        if let Some(blocked) = blocked {
            faults.set_blocked(blocked);
        }
        if let Some(stall_ms) = stall_ms {
            faults.set_publish_stall_ms(stall_ms);
        }
    }
    let blocked: Vec<String> = faults.blocked().iter().map(|ip| ip.to_string()).collect();
    reply.json(
        200,
        b"",
        &json!({ "BlockedPeers": blocked, "PublishStallMs": faults.publish_stall_ms() }),
    );
    Ok(Outcome::Done)
}

fn parse_blocked_peers(list: &serde_json::Value) -> Result<HashSet<IpAddr>, ApiError> {
    let list = list
        .as_array()
        .ok_or_else(|| ApiError::bad_request("BlockedPeers must be a list of IP strings"))?;
    if list.len() > BLOCKED_PEERS_MAX {
        return Err(ApiError::bad_request(format!(
            "at most {BLOCKED_PEERS_MAX} blocked peers"
        )));
    }
    let mut blocked = HashSet::new();
    for entry in list {
        let text = entry
            .as_str()
            .ok_or_else(|| ApiError::bad_request("BlockedPeers must be a list of IP strings"))?;
        let ip: IpAddr = text
            .parse()
            .map_err(|_| ApiError::bad_request(format!("{text:?} is not an IP address")))?;
        blocked.insert(ip);
    }
    Ok(blocked)
}
