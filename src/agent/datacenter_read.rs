//! The xDS server's reads of other datacenters' catalogs, made on shard 0 for the gRPC
//! thread (which has no connections of its own): a mesh gateway needs every other
//! datacenter's mesh gateways, and a sidecar whose upstream resolves in another datacenter
//! needs that datacenter's proxies or gateways.
//!
//! A read is an HTTP GET carried in a `FORWARD_HTTP` frame, as `?dc=` reads are forwarded:
//! a server sends it through the WAN router to a server of the datacenter it names, a
//! client agent to its own server (the path's `?dc=` makes that server hand it on). The
//! answer is the remote server's own, status, `X-Consul-Index` and body, so a blocking
//! read (`?index=`) blocks there.

use super::catalog_client::{forwarded_answer, forwarded_request};
use super::Agent;
use crate::api::agent_channel::AgentReply;
use crate::cluster::servers::Retry;
use crate::proto::rpc::kind;
use std::time::Duration;

/// How long a client agent's read of its servers' datacenter list may take.
const DATACENTERS_TIMEOUT: Duration = Duration::from_secs(10);

/// Answers `path` from a server of `datacenter` (never this one: the caller reads its own
/// store for that).
pub async fn read(
    agent: &Agent,
    datacenter: &str,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> AgentReply {
    let token = token.filter(|t| !t.is_empty() && !t.contains(['\r', '\n']));
    let answer = if agent.shard.is_client() {
        to_servers(agent, path, token, timeout).await
    } else {
        if datacenter == agent.config.borrow().datacenter {
            return AgentReply::text(400, "a server reads its own datacenter from its store");
        }
        let request = forwarded_request("GET", path, token, b"");
        agent
            .pools
            .router
            .forward(
                &agent.shard.forward,
                datacenter,
                kind::FORWARD_HTTP,
                &request,
                timeout,
                Retry::Always,
            )
            .await
            .and_then(|frame| forwarded_answer(&frame, "the other datacenter"))
    };
    match answer {
        Ok((status, index, body)) => {
            let mut reply = AgentReply::json(status, body);
            reply.headers = format!("X-Consul-Index: {index}\r\n").into_bytes();
            reply
        }
        Err(reason) => AgentReply::text(502, reason),
    }
}

/// A client agent's GET to one of its servers (which hands a `?dc=` read on).
async fn to_servers(
    agent: &Agent,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<(u16, u64, Vec<u8>), String> {
    let request = forwarded_request("GET", path, token, b"");
    crate::cluster::servers::call(
        &agent.pools.servers,
        &agent.shard.forward,
        kind::FORWARD_HTTP,
        &request,
        timeout,
        Retry::Always,
    )
    .await
    .and_then(|frame| forwarded_answer(&frame, "the server"))
}

/// The datacenters known here: the WAN router's on a server, its servers' on a client.
pub async fn datacenters(agent: &Agent) -> AgentReply {
    if !agent.shard.is_client() {
        let names = agent.pools.router.datacenters();
        return AgentReply::json(
            200,
            serde_json::to_vec(&names).expect("a list of names encodes"),
        );
    }
    match to_servers(agent, "/v1/catalog/datacenters", None, DATACENTERS_TIMEOUT).await {
        Ok((status, _, body)) => AgentReply::json(status, body),
        Err(reason) => AgentReply::text(502, reason),
    }
}
