//! The messages Raft servers exchange. The sender's id travels outside the message (the
//! transport knows which peer a connection belongs to), so it is passed to
//! [`RaftCore::step`](super::RaftCore::step) separately.
//!
//! Every message carries the sender's term. Leader messages carry `sent_at` (the leader's own
//! clock when sending) which followers echo back: a quorum of echoes of time `t` proves nobody
//! else can become leader before `t + lease_ms`. `read_seq` is echoed the same way to confirm
//! batched ReadIndex requests.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::types::{Entry, LogIndex, Millis, SnapshotMeta, Term};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    /// Ask for a vote. With `pre_vote`, `term` is the term the candidate would use and the
    /// receiver changes no state. `leadership_transfer` marks an election the leader asked
    /// for (TimeoutNow), which voters accept even while they hear from that leader.
    RequestVote {
        term: Term,
        last_log_index: LogIndex,
        last_log_term: Term,
        pre_vote: bool,
        leadership_transfer: bool,
    },
    VoteResponse {
        term: Term,
        pre_vote: bool,
        granted: bool,
    },
    /// Replicate entries after (`prev_log_index`, `prev_log_term`); empty means heartbeat.
    AppendEntries {
        term: Term,
        prev_log_index: LogIndex,
        prev_log_term: Term,
        entries: Vec<Entry>,
        leader_commit: LogIndex,
        read_seq: u64,
        sent_at: Millis,
    },
    AppendResponse {
        term: Term,
        /// On success, the follower's log matches the leader's through this index.
        match_index: LogIndex,
        /// Set when the consistency check failed.
        reject: Option<AppendReject>,
        read_seq: u64,
        sent_at: Millis,
    },
    /// One chunk of a snapshot; chunks are pipelined, `offset` places this one.
    InstallSnapshot {
        term: Term,
        meta: SnapshotMeta,
        total_bytes: u64,
        offset: u64,
        chunk: Bytes,
        done: bool,
        read_seq: u64,
        sent_at: Millis,
    },
    InstallSnapshotResponse {
        term: Term,
        /// Identifies the snapshot (its `meta.last_index`).
        snapshot_last_index: LogIndex,
        /// The next byte offset the follower expects.
        next_offset: u64,
        /// The follower skipped a gap: `next_offset` is a retransmission request.
        gap: bool,
        /// The whole snapshot is durable on the follower (or its log already covered it).
        done: bool,
        read_seq: u64,
        sent_at: Millis,
    },
    /// The leader asks an up-to-date voter to start an election now (leadership transfer).
    TimeoutNow { term: Term },
}

/// Why a follower refused an AppendEntries, with a hint for fast back-tracking (Raft §5.3's
/// optimization): the leader skips a whole conflicting term per round trip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendReject {
    /// The `prev_log_index` of the refused message (lets the leader drop stale refusals).
    pub prev_index: LogIndex,
    /// The term the follower holds at `prev_index`, or `None` if its log is shorter.
    pub conflict_term: Option<Term>,
    /// The first index the follower holds with `conflict_term`, or its last index + 1.
    pub hint_index: LogIndex,
}

impl Message {
    pub fn term(&self) -> Term {
        match self {
            Message::RequestVote { term, .. }
            | Message::VoteResponse { term, .. }
            | Message::AppendEntries { term, .. }
            | Message::AppendResponse { term, .. }
            | Message::InstallSnapshot { term, .. }
            | Message::InstallSnapshotResponse { term, .. }
            | Message::TimeoutNow { term } => *term,
        }
    }
}
