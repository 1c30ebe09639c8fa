//! Values the gossip core hands to its driver and, through it, to the rest of the agent.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

/// serf `MemberStatus`; the integers are what Consul's `/v1/agent/members` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberStatus {
    Alive = 1,
    Leaving = 2,
    Left = 3,
    Failed = 4,
}

impl MemberStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberStatus::Alive => "alive",
            MemberStatus::Leaving => "leaving",
            MemberStatus::Left => "left",
            MemberStatus::Failed => "failed",
        }
    }
}

/// One member of the pool as serf reports it (serf `Member`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    pub name: String,
    pub addr: IpAddr,
    pub port: u16,
    pub tags: BTreeMap<String, String>,
    pub status: MemberStatus,
    pub protocol_min: u8,
    pub protocol_max: u8,
    pub protocol_cur: u8,
    pub delegate_min: u8,
    pub delegate_max: u8,
    pub delegate_cur: u8,
}

/// A serf user event (`serf event`, Consul `/v1/event/fire`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserEvent {
    pub ltime: u64,
    pub name: String,
    pub payload: Vec<u8>,
    pub coalesce: bool,
}

/// A serf query addressed to this node that is not one of serf's internal ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryEvent {
    pub ltime: u64,
    pub id: u32,
    pub name: String,
    pub payload: Vec<u8>,
    pub source_node: String,
}

/// Membership and user events, in the order serf would deliver them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GossipEvent {
    MemberJoin(MemberInfo),
    MemberLeave(MemberInfo),
    MemberFailed(MemberInfo),
    MemberUpdate(MemberInfo),
    /// The member was forgotten (reconnect/tombstone timeout, or force-leave with prune).
    MemberReap(MemberInfo),
    User(UserEvent),
    Query(QueryEvent),
}

/// A cluster-wide keyring operation (serf `KeyManager`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOp {
    Install(Vec<u8>),
    Use(Vec<u8>),
    Remove(Vec<u8>),
    List,
}

impl KeyOp {
    pub fn query_name(&self) -> &'static str {
        match self {
            KeyOp::Install(_) => "_serf_install-key",
            KeyOp::Use(_) => "_serf_use-key",
            KeyOp::Remove(_) => "_serf_remove-key",
            KeyOp::List => "_serf_list-keys",
        }
    }
}

/// serf `KeyResponse`: what every node answered, aggregated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyOpResult {
    /// Node name to its error (or informational) message.
    pub messages: BTreeMap<String, String>,
    pub num_nodes: usize,
    pub num_resp: usize,
    pub num_err: usize,
    /// Base64 key to how many nodes have it installed.
    pub keys: BTreeMap<String, usize>,
    /// Base64 key to how many nodes use it as primary.
    pub primary_keys: BTreeMap<String, usize>,
}

/// An effect the driver must carry out.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Send one UDP datagram.
    Packet {
        to: SocketAddr,
        bytes: Vec<u8>,
    },
    /// Dial `to` over TCP, write `bytes`, read one stream message back, and report it
    /// with [`crate::gossip::Gossip::handle_stream_reply`] under `id`. The driver applies
    /// `tcp_timeout`.
    Stream {
        id: u64,
        to: SocketAddr,
        bytes: Vec<u8>,
    },
    Event(GossipEvent),
    /// A join request finished: how many addresses a push/pull succeeded with.
    JoinDone {
        request: u64,
        joined: usize,
        errors: Vec<String>,
    },
    /// A graceful leave finished (the node is now Left and silent).
    LeaveDone {
        request: u64,
    },
    /// A cluster-wide keyring operation finished.
    KeyOpDone {
        request: u64,
        result: KeyOpResult,
    },
}
