//! The xDS server's reads of other datacenters' catalogs, made on shard 0 for the gRPC
//! thread (which has no connections of its own): a mesh gateway needs every other
//! datacenter's mesh gateways, and a sidecar whose upstream resolves in another datacenter
//! needs that datacenter's proxies or gateways.
//!
//! A read is one of Consul's typed calls whose request names the other datacenter
//! (`xds::remote` builds it): a server sends it through the WAN router to a server of that
//! datacenter, a client agent to one of its own servers, which hands it on, as Consul's
//! `forwardDC` does. The reply is the remote server's msgpack, its `QueryMeta` included, so
//! a blocking call (`MinQueryIndex`) blocks there.

use super::Agent;
use crate::api::agent_channel::AgentReply;
use crate::cluster::servers::Retry;
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::status::read_string_list_reply;
use std::time::Duration;

/// How long a client agent's read of its servers' datacenter list may take.
const DATACENTERS_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes `method` (a read whose `body` names `datacenter`, never this one: the caller reads
/// its own store for that) on a server of that datacenter: 200 with the reply's msgpack, or
/// 502 with why not.
pub async fn call(
    agent: &Agent,
    datacenter: &str,
    method: &'static str,
    body: &[u8],
    timeout: Duration,
) -> AgentReply {
    let answer = if agent.shard.is_client() {
        crate::cluster::servers::call_typed(
            &agent.pools.servers,
            &agent.shard.rpc,
            method,
            body,
            timeout,
            Retry::Always,
        )
        .await
    } else {
        if datacenter == agent.config.borrow().datacenter {
            return AgentReply::text(400, "a server reads its own datacenter from its store");
        }
        agent
            .pools
            .router
            .call_typed(
                &agent.shard.rpc,
                datacenter,
                method,
                body,
                timeout,
                Retry::Always,
            )
            .await
    };
    match answer {
        Ok(reply) => AgentReply {
            content_type: Some("application/msgpack"),
            ..AgentReply::json(200, reply.to_vec())
        },
        Err(reason) => AgentReply::text(502, reason.to_string()),
    }
}

/// The datacenters known here, as a JSON list: the WAN router's on a server, its servers'
/// (`Catalog.ListDatacenters`) on a client.
pub async fn datacenters(agent: &Agent) -> AgentReply {
    let names = if agent.shard.is_client() {
        let body = DcSpecificRequest::default().encode();
        let answer = crate::cluster::servers::call_typed(
            &agent.pools.servers,
            &agent.shard.rpc,
            "Catalog.ListDatacenters",
            &body,
            DATACENTERS_TIMEOUT,
            Retry::Always,
        )
        .await;
        match answer.map(|reply| read_string_list_reply(&reply).map(|names| to_owned(&names))) {
            Ok(Ok(names)) => names,
            Ok(Err(error)) => {
                return AgentReply::text(502, crate::consul::rpc::decode_error(error));
            }
            Err(reason) => return AgentReply::text(502, reason.to_string()),
        }
    } else {
        agent.pools.router.datacenters()
    };
    AgentReply::json(
        200,
        serde_json::to_vec(&names).expect("a list of names encodes"),
    )
}

fn to_owned(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}
