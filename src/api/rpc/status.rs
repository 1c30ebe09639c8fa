//! `Status.Leader` and `Status.Peers`, from the Raft status this server publishes. Both take
//! a `DCSpecificRequest`: one naming another datacenter is handed to a server there, as
//! Consul's `Status` endpoint forwards it, so `GET /v1/status/leader?dc=` answers that
//! datacenter's leader.

use super::{decode_error, elsewhere, Answer, Placement};
use crate::api::server::Server;
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::status::{leader_reply, peers_reply};
use crate::shard::rpc_server::TypedCall;

/// The answer of a call that names another datacenter, from a server there; `None` when
/// this server answers it.
async fn in_other_datacenter(server: &Server, call: &TypedCall) -> Option<Answer> {
    let request = match DcSpecificRequest::decode(&call.body) {
        Ok(request) => request,
        Err(error) => return Some(Err(decode_error(error))),
    };
    elsewhere(server, call, request.datacenter, Placement::Anywhere, None).await
}

/// `Status.Leader`: the leader's RPC address, "" when none is known — or, as over HTTP,
/// while the leader's own registration is not applied here yet
/// ([`crate::api::status::reported_leader`]), so a client agent reports what its server does.
pub async fn leader(server: &Server, call: &TypedCall) -> Answer {
    if let Some(answer) = in_other_datacenter(server, call).await {
        return answer;
    }
    Ok(leader_reply(&crate::api::status::reported_leader(
        server.context(),
    )))
}

/// `Status.Peers`: the voters' RPC addresses.
pub async fn peers(server: &Server, call: &TypedCall) -> Answer {
    if let Some(answer) = in_other_datacenter(server, call).await {
        return answer;
    }
    let status = server.context().cluster_status();
    Ok(peers_reply(
        status.voter_rpc_addresses.iter().map(String::as_str),
    ))
}
