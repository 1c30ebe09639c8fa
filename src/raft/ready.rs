//! The core's output: a [`Ready`] batch of effects for the driver, and the [`ReadyDone`]
//! report the driver gives back once it has carried them out.
//!
//! The driver handles a `Ready` in this order:
//!
//! 1. send `messages` at once (they do not depend on local durability);
//! 2. write `snapshot_chunks` where the snapshot being received is assembled; if `snapshot`
//!    is set, the assembled snapshot is complete: make it durable, drop the whole durable
//!    log, restore the store from it (now, or later: see [`ReadyDone::snapshot_restored`]);
//! 3. if `truncate_from` is set: drop durable entries at and above it;
//! 4. append `entries` and write `hard_state` (no later than the entries), then fsync;
//! 5. only now send `messages_after_persist` (votes, acknowledgements);
//! 6. apply `committed` to the store (they are already durable), answer `read_states`;
//! 7. optionally delete durable entries at or below `compact_through`;
//! 8. read each of `log_reads` back from the durable log (they are durable: any time after
//!    step 1 will do, and later Readys may come first) and hand the entries to
//!    [`RaftCore::log_read_done`](super::RaftCore::log_read_done);
//! 9. call [`RaftCore::advance`](super::RaftCore::advance) with what was done, e.g.
//!    [`Ready::done`].
//!
//! `ready` may be called again before `advance` (the driver may pipeline), as long as the
//! driver persists Readys in order and sends each Ready's `messages_after_persist` only after
//! that Ready and all earlier ones are durable.

use super::message::Message;
use super::types::{
    Entry, HardState, LogIndex, LogRead, NodeId, ReadState, RoleChange, SnapshotChunk,
    SnapshotMeta, Term,
};

#[derive(Debug, Default)]
pub struct Ready {
    /// Persist before any message in `messages_after_persist` is sent.
    pub hard_state: Option<HardState>,
    /// The durable log must drop entries `>=` this before appending `entries`.
    pub truncate_from: Option<LogIndex>,
    /// Append to the durable log.
    pub entries: Vec<Entry>,
    /// Pieces of a snapshot being received from the leader, to write in order where it is
    /// assembled (they are not kept in memory).
    pub snapshot_chunks: Vec<SnapshotChunk>,
    /// The snapshot assembled from `snapshot_chunks` is complete: persist it, replace the
    /// whole durable log by it and restore the store from it before applying anything else.
    /// Nothing committed is handed out until its restore is reported.
    pub snapshot: Option<SnapshotMeta>,
    /// Safe to send immediately (a leader's appends while its own fsync runs, pre-votes).
    pub messages: Vec<(NodeId, Message)>,
    /// Votes and acknowledgements: send only once everything above is durable.
    pub messages_after_persist: Vec<(NodeId, Message)>,
    /// Committed and locally durable entries, in order, to apply (including `Noop` and
    /// `Membership` entries, which advance the applied index without touching the store).
    pub committed: Vec<Entry>,
    pub read_states: Vec<ReadState>,
    /// ReadIndex contexts that will never be confirmed because leadership was lost; the
    /// driver fails or retries them.
    pub dropped_reads: Vec<u64>,
    pub role_changed: Option<RoleChange>,
    /// Durable entries at or below this index are no longer needed (a snapshot covers them
    /// and the trailing entries are kept above it).
    pub compact_through: Option<LogIndex>,
    /// A follower needs a snapshot and the core holds none: the driver should serialize the
    /// store and call [`RaftCore::snapshot_taken`](super::RaftCore::snapshot_taken).
    pub snapshot_wanted: bool,
    /// Stored entries a peer needs that are no longer held in memory: read them back from
    /// the durable log and hand them to
    /// [`RaftCore::log_read_done`](super::RaftCore::log_read_done).
    pub log_reads: Vec<LogRead>,
}

/// What the driver did with a [`Ready`], reported through `advance`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadyDone {
    /// The last entry (index and term) now durable, if `entries` were persisted.
    pub persisted_through: Option<(LogIndex, Term)>,
    /// The last index of `snapshot`, once it is durable and restored into the store. A
    /// driver that restores in the background reports it in a later `advance` of its own.
    pub snapshot_restored: Option<LogIndex>,
    /// The highest index the store has applied.
    pub applied_through: LogIndex,
}

impl Ready {
    /// The report for "everything in this Ready was persisted and applied" (a snapshot
    /// included). Take it before moving the Ready's fields out.
    pub fn done(&self) -> ReadyDone {
        let snapshot_restored = self.snapshot.as_ref().map(|meta| meta.last_index);
        let applied_through = self
            .committed
            .last()
            .map(|e| e.index)
            .or(snapshot_restored)
            .unwrap_or(0);
        ReadyDone {
            persisted_through: self.entries.last().map(|e| (e.index, e.term)),
            snapshot_restored,
            applied_through,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hard_state.is_none()
            && self.truncate_from.is_none()
            && self.entries.is_empty()
            && self.snapshot_chunks.is_empty()
            && self.snapshot.is_none()
            && self.messages.is_empty()
            && self.messages_after_persist.is_empty()
            && self.committed.is_empty()
            && self.read_states.is_empty()
            && self.dropped_reads.is_empty()
            && self.role_changed.is_none()
            && self.compact_through.is_none()
            && !self.snapshot_wanted
            && self.log_reads.is_empty()
    }
}
