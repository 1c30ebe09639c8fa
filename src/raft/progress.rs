//! The leader's replication state for one peer: flow control for log appends (probe vs
//! pipelined replicate with a bounded inflight window) and for snapshot chunks (a window of
//! chunks, go-back-N on a reported gap or a stall).

use std::collections::VecDeque;

use bytes::Bytes;

use super::types::{LogIndex, Millis, ReplicationState, SnapshotMeta};

#[derive(Debug)]
pub(crate) struct Progress {
    pub match_index: LogIndex,
    pub next_index: LogIndex,
    pub state: ReplicationState,
    /// In `Probe`, an append is outstanding; cleared by a response or the next heartbeat.
    pub probe_sent: bool,
    /// In `Replicate`, the last index of each append in flight, oldest first.
    pub inflight: VecDeque<LogIndex>,
    pub snapshot: Option<SnapshotSend>,
    /// Heard from in the current check-quorum period.
    pub recent_active: bool,
    pub last_contact: Option<Millis>,
    /// The largest `sent_at` of ours this peer echoed in the current term (lease evidence).
    pub acked_sent_at: Option<Millis>,
    /// The largest `read_seq` this peer echoed in the current term.
    pub acked_read_seq: u64,
    /// The commit index carried by the last message sent, to avoid commit-only chatter.
    pub commit_sent: LogIndex,
    /// When `match_index` last moved (or replication (re)started): appends in flight with no
    /// progress for long mean the pipeline's tail was lost.
    pub progress_at: Millis,
    /// A read from the durable log made for this peer and not answered yet (its first index
    /// and when it was asked for); no other append is sent meanwhile.
    pub log_read: Option<(LogIndex, Millis)>,
}

/// An ongoing snapshot transfer to one peer.
#[derive(Debug)]
pub(crate) struct SnapshotSend {
    pub meta: SnapshotMeta,
    pub data: Bytes,
    /// The next offset to send.
    pub next_offset: u64,
    /// Everything below this offset is acknowledged.
    pub acked_offset: u64,
    /// The last time the acknowledged offset moved (or the transfer started).
    pub progress_at: Millis,
    /// The offset of the last gap-triggered rewind, so a burst of gap reports for the same
    /// hole rewinds once.
    pub rewound_to: Option<u64>,
    /// The final chunk was sent (since the last rewind): nothing more to send unless a gap
    /// or a stall rewinds the transfer.
    pub final_sent: bool,
}

impl Progress {
    pub fn new(next_index: LogIndex) -> Self {
        Progress {
            match_index: 0,
            next_index,
            state: ReplicationState::Probe,
            probe_sent: false,
            inflight: VecDeque::new(),
            snapshot: None,
            recent_active: false,
            last_contact: None,
            acked_sent_at: None,
            acked_read_seq: 0,
            commit_sent: 0,
            progress_at: 0,
            log_read: None,
        }
    }

    /// Whether no further append may be sent right now.
    pub fn is_paused(&self, inflight_max: usize) -> bool {
        if self.log_read.is_some() {
            return true;
        }
        match self.state {
            ReplicationState::Probe => self.probe_sent,
            ReplicationState::Replicate => self.inflight.len() >= inflight_max,
            ReplicationState::Snapshot => true,
        }
    }

    /// Records an acknowledged match; returns whether it moved forward.
    pub fn update_match(&mut self, index: LogIndex, now: Millis) -> bool {
        let moved = index > self.match_index;
        if moved {
            self.match_index = index;
            self.progress_at = now;
        }
        if self.next_index <= index {
            self.next_index = index + 1;
        }
        while self.inflight.front().is_some_and(|&last| last <= index) {
            self.inflight.pop_front();
        }
        moved
    }

    pub fn become_probe(&mut self) {
        self.state = ReplicationState::Probe;
        self.probe_sent = false;
        self.inflight.clear();
        self.snapshot = None;
        self.next_index = self.next_index.max(self.match_index + 1);
    }

    pub fn become_replicate(&mut self, now: Millis) {
        self.state = ReplicationState::Replicate;
        self.progress_at = now;
        self.probe_sent = false;
        self.inflight.clear();
        self.snapshot = None;
        self.next_index = self.match_index + 1;
    }
}
