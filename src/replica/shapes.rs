//! Plain data the replica shares with the runtime: what the shards receive (applied batches,
//! the cluster status), what gossip and the operator endpoints send in (servers, operator
//! requests), and the request-id layout that routes a result back to its shard.
//!
//! These types live beside the replica rather than in the runtime because the replica
//! produces or consumes every one of them, and a pure layer must not import the runtime.

use crate::store::{Change, StoreVersion};
use std::fmt;
use std::sync::Arc;

/// Bits of a request id below the shard id. A shard numbers its requests in these bits and
/// puts its own id above them, so the replica can route a result without a lookup table.
pub const REQUEST_SEQUENCE_BITS: u32 = 48;

/// The request id a shard gives its `sequence`-th request.
pub fn request_id(shard: usize, sequence: u64) -> u64 {
    debug_assert!(
        (shard as u64) < (1 << (64 - REQUEST_SEQUENCE_BITS)),
        "shard id {shard} does not fit above the sequence bits"
    );
    ((shard as u64) << REQUEST_SEQUENCE_BITS) | (sequence & ((1 << REQUEST_SEQUENCE_BITS) - 1))
}

/// The shard a request id came from.
pub fn shard_of_request(request_id: u64) -> usize {
    (request_id >> REQUEST_SEQUENCE_BITS) as usize
}

/// One applied batch, shared by every shard: the new immutable version and what changed.
pub struct AppliedBatch {
    pub version: StoreVersion,
    pub changes: Vec<Change>,
}

impl fmt::Debug for AppliedBatch {
    /// The index and the size of the change set: the whole store would drown a trace.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppliedBatch")
            .field("index", &self.version.index)
            .field("changes", &self.changes.len())
            .finish()
    }
}

/// One server in the Raft configuration, as the operator endpoints show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RaftServer {
    pub raft_id: u64,
    /// The node's UUID when known (from gossip or our own identity), else the raft id in hex.
    pub node_id: String,
    pub name: String,
    pub address: String,
    pub voter: bool,
}

/// The leader's view of one follower, for `/v1/operator/autopilot/health`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerHealth {
    pub raft_id: u64,
    pub match_index: u64,
    /// Milliseconds since the peer last answered, if it ever did in this term.
    pub last_contact_ms: Option<u64>,
}

/// Leadership and membership as the replica last published it.
#[derive(Clone, Debug, Default)]
pub struct ClusterStatus {
    /// This server leads and has applied its term's first entry, so it may serve reads.
    pub is_leader: bool,
    /// The leader's server RPC address, or empty when no leader is known.
    pub leader_rpc_address: String,
    pub leader_name: String,
    pub leader_raft_id: Option<u64>,
    pub term: u64,
    pub commit_index: u64,
    pub last_index: u64,
    pub membership_index: u64,
    pub servers: Vec<RaftServer>,
    pub voter_rpc_addresses: Vec<String>,
    pub peer_health: Vec<PeerHealth>,
    /// Autopilot's view of every server, published by the leader only.
    pub autopilot: Option<Arc<AutopilotHealth>>,
}

/// Autopilot's health of the servers, as the leader computes it from the Raft
/// configuration, its followers' progress, gossip and the autopilot configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AutopilotHealth {
    /// Every server is healthy (and there is a leader: this is the leader's view).
    pub healthy: bool,
    /// Healthy voters beyond a quorum: how many could fail without an outage.
    pub failure_tolerance: usize,
    pub servers: Vec<ServerHealth>,
}

/// One server's health, as `/v1/operator/autopilot/health` and `/state` show it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerHealth {
    pub raft_id: u64,
    pub node_id: String,
    pub name: String,
    pub address: String,
    /// Gossip's word for the server: `alive`, `failed`, `left` or `none` (unknown).
    pub serf_status: &'static str,
    pub leader: bool,
    pub voter: bool,
    /// Milliseconds since the leader last heard from it; `None` if never in this term.
    pub last_contact_ms: Option<u64>,
    pub last_term: u64,
    pub last_index: u64,
    pub healthy: bool,
    /// When `healthy` last changed, in Unix milliseconds.
    pub stable_since_unix_ms: u64,
    /// Healthy for at least the stabilization time: a non-voter in this state is promoted.
    pub stable: bool,
}

/// A server as gossip sees it, for bootstrapping and membership reconciliation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    pub raft_id: u64,
    pub node_id: String,
    pub name: String,
    /// Server RPC address, `ip:port`.
    pub rpc_address: String,
    pub datacenter: String,
    /// The server's `bootstrap_expect`, 0 when unset.
    pub expect: u32,
    pub alive: bool,
    /// Gracefully left (as opposed to failed).
    pub left: bool,
}

/// Operator requests that change the Raft configuration or leadership.
#[derive(Clone, Debug)]
pub enum OperatorOp {
    RemovePeer {
        id: Option<String>,
        address: Option<String>,
    },
    TransferLeader {
        id: Option<String>,
    },
    /// Restart a session's TTL timer; the leader keeps timers, renewals touch no log entry.
    /// Answers `false` when the session does not exist.
    RenewSession {
        id: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_names_its_shard_and_keeps_its_sequence_bits() {
        let id = request_id(3, 42);
        assert_eq!(shard_of_request(id), 3);
        assert_eq!(id & ((1 << REQUEST_SEQUENCE_BITS) - 1), 42);
        // A sequence that overflows its bits wraps instead of spilling into the shard id.
        let wrapped = request_id(1, (1 << REQUEST_SEQUENCE_BITS) + 7);
        assert_eq!(shard_of_request(wrapped), 1);
        assert_eq!(wrapped & ((1 << REQUEST_SEQUENCE_BITS) - 1), 7);
    }
}
