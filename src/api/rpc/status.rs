//! `Status.Leader` and `Status.Peers`, from the Raft status this server publishes.

use super::Answer;
use crate::api::server::Server;
use crate::consul::rpc::status::{leader_reply, peers_reply};

/// `Status.Leader`: the leader's RPC address, "" when none is known.
pub fn leader(server: &Server) -> Answer {
    let status = server.context().cluster_status();
    Ok(leader_reply(&status.leader_rpc_address))
}

/// `Status.Peers`: the voters' RPC addresses.
pub fn peers(server: &Server) -> Answer {
    let status = server.context().cluster_status();
    Ok(peers_reply(
        status.voter_rpc_addresses.iter().map(String::as_str),
    ))
}
