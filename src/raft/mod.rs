//! The pure Raft core: leader election with pre-vote and check-quorum, a leader lease on the
//! driver's monotonic clock, pipelined replication with flow control and fast back-tracking,
//! ReadIndex, leadership transfer, chunked snapshots, log compaction and single-server
//! membership changes.
//!
//! [`RaftCore`] does no I/O, reads no clock and starts no thread: the driver (the raft
//! thread in `shard`) feeds it time, messages and requests, and carries out the [`Ready`]
//! effects it returns — persisting, sending, applying — in the order `Ready` documents, then
//! reports back with [`RaftCore::advance`]. Its behaviour is a function of its inputs and the
//! seed it is given, which the seeded simulator (`tests/sim`) relies on.

mod config;
mod core;
mod log;
mod message;
mod progress;
mod ready;
mod rng;
mod types;

#[cfg(test)]
mod tests;

pub use self::config::RaftConfig;
pub use self::core::RaftCore;
pub use self::message::{AppendReject, Message};
pub use self::ready::{Ready, ReadyDone};
pub use self::types::{
    Entry, EntryKind, HardState, LogIndex, Member, Membership, MembershipChange, Millis, NodeId,
    PeerStatus, RaftError, ReadState, ReplicationState, Restored, Role, RoleChange, SnapshotMeta,
    Status, Term, MEMBERS_MAX,
};
