//! `Status.Leader` and `Status.Peers`, from the Raft status this server publishes.

use super::Answer;
use crate::api::server::Server;
use crate::consul::rpc::status::{leader_reply, peers_reply};

/// `Status.Leader`: the leader's RPC address, "" when none is known — or, as over HTTP,
/// while the leader's own registration is not applied here yet
/// ([`crate::api::status::reported_leader`]), so a client agent reports what its server does.
pub fn leader(server: &Server) -> Answer {
    Ok(leader_reply(&crate::api::status::reported_leader(
        server.context(),
    )))
}

/// `Status.Peers`: the voters' RPC addresses.
pub fn peers(server: &Server) -> Answer {
    let status = server.context().cluster_status();
    Ok(peers_reply(
        status.voter_rpc_addresses.iter().map(String::as_str),
    ))
}
