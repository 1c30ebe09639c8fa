//! The pure Raft core: leader election with pre-vote and check-quorum, a leader lease on the
//! driver's monotonic clock, pipelined replication with flow control and fast back-tracking,
//! ReadIndex, leadership transfer, chunked snapshots, log compaction and single-server
//! membership changes.
//!
//! [`RaftCore`] does no I/O, reads no clock and starts no thread: the driver (the pure
//! `crate::replica`, whose effects the raft thread and the simulator carry out) feeds it time,
//! messages and requests, and carries out the [`Ready`] effects it returns — persisting,
//! sending, applying — in the order `Ready` documents, then reports back with
//! [`RaftCore::advance`]. Its behaviour is a function of its inputs and the seed it is given,
//! which the seeded simulator (`tests/sim`) relies on.
//!
//! Driver checklist (`crate::replica` follows it):
//! - start: `RaftCore::new` from the durable hard state, snapshot meta and entries; if there
//!   is a snapshot, restore the store from it and call `snapshot_taken` with it so the core
//!   can send it to lagging followers; on a pristine bootstrap server call `bootstrap`;
//! - call `tick` every few tens of milliseconds and `step` for every message received;
//! - whenever `has_ready`, handle `ready()` in the order [`Ready`] documents (the hard state
//!   is written no later than the entries of the same Ready), then `advance`;
//! - a proposal `(index, term)` succeeded once the entry at `index` with that `term` is
//!   applied; a different term there, or losing leadership first, means it did not;
//! - serve default reads locally while `leader_lease_until() > now`, consistent reads after
//!   a `read_state` once the store has applied its index;
//! - take snapshots of applied store versions with `snapshot_meta` + `snapshot_taken`
//!   (after making them durable), and when a Ready says `snapshot_wanted`;
//! - read the entries a Ready's `log_reads` name back from the durable log and hand them to
//!   `log_read_done` (only a bounded suffix of the log is held in memory, see `log.rs`).

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

pub use self::config::{RaftConfig, LOG_CACHE_BYTES_DEFAULT};
pub use self::core::RaftCore;
pub use self::message::{AppendReject, Message};
pub use self::ready::{Ready, ReadyDone};
pub use self::types::{
    Entry, EntryKind, HardState, LogIndex, LogRead, Member, Membership, MembershipChange, Millis,
    NodeId, PeerStatus, RaftError, ReadState, ReplicationState, Restored, Role, RoleChange,
    SnapshotChunk, SnapshotMeta, Status, Term, MEMBERS_MAX,
};
