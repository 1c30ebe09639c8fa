//! Snapshots between servers: a leader streams one in bounded chunks to a follower whose
//! next entry it no longer holds; a follower stages the chunks in order and installs the
//! snapshot only once the last one arrived, replacing its log up to the snapshot's index.

use super::*;

impl RaftCore {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn handle_snapshot_chunk(
        &mut self,
        from: NodeId,
        meta: SnapshotMeta,
        total_bytes: u64,
        offset: u64,
        chunk: Bytes,
        done: bool,
        read_seq: u64,
        sent_at: Millis,
    ) {
        let chunk_end = offset.checked_add(chunk.len() as u64);
        let well_formed = total_bytes <= self.config.snapshot_bytes_max
            && chunk_end.is_some_and(|end| end <= total_bytes && done == (end == total_bytes))
            && meta.last_index > 0
            && meta.last_term <= self.term
            && meta.membership.members.len() <= MEMBERS_MAX;
        if !well_formed {
            self.messages_dropped += 1;
            return;
        }
        let term = self.term;
        let snapshot_last_index = meta.last_index;
        let respond = |next_offset, gap, done| Message::InstallSnapshotResponse {
            term,
            snapshot_last_index,
            next_offset,
            gap,
            done,
            read_seq,
            sent_at,
        };
        if meta.last_index <= self.log.committed {
            // Our log already covers it (e.g. the final answer was lost and this is a poll).
            if self
                .incoming_snapshot
                .as_ref()
                .is_some_and(|s| s.meta.last_index <= self.log.committed)
            {
                self.incoming_snapshot = None;
            }
            self.send_after_persist(from, respond(total_bytes, false, true));
            return;
        }
        let same = self
            .incoming_snapshot
            .as_ref()
            .is_some_and(|s| s.meta == meta && s.total_bytes == total_bytes);
        if !same {
            if offset != 0 {
                self.send(from, respond(0, true, false));
                return;
            }
            self.incoming_snapshot = Some(IncomingSnapshot {
                meta: meta.clone(),
                total_bytes,
                received_bytes: 0,
            });
        }
        let incoming = self.incoming_snapshot.as_mut().expect("set above");
        let have = incoming.received_bytes;
        if offset > have {
            self.send(from, respond(have, true, false));
            return;
        }
        let end = offset + chunk.len() as u64;
        if end > have || !same {
            // A retransmitted chunk may overlap what we hold; only its new tail goes on. The
            // first piece of a snapshot (even an empty one) tells the driver to start anew.
            self.out_snapshot_chunks.push(SnapshotChunk {
                meta: (!same).then(|| meta.clone()),
                offset: have,
                data: chunk.slice((have - offset) as usize..),
            });
            incoming.received_bytes = end.max(have);
        }
        let have = incoming.received_bytes;
        if have < total_bytes {
            self.send(from, respond(have, false, false));
            return;
        }
        let incoming = self.incoming_snapshot.take().expect("set above");
        debug_assert_eq!(incoming.received_bytes, incoming.total_bytes);
        self.install_snapshot(incoming.meta);
        self.send_after_persist(from, respond(total_bytes, false, true));
    }

    /// Takes in the snapshot whose pieces the driver assembled. The core can send it on to
    /// other servers only once the driver hands it back (`snapshot_taken`, after restoring).
    pub(super) fn install_snapshot(&mut self, meta: SnapshotMeta) {
        if self.log.term(meta.last_index) == Some(meta.last_term) {
            // Our log holds the snapshot's last entry: keep the log, it agrees (Raft fig. 13).
            if meta.last_index > self.log.committed {
                self.log.committed = meta.last_index;
            }
            return;
        }
        debug_assert!(meta.last_index > self.log.committed && meta.last_term <= self.term);
        self.log.install_snapshot(meta.clone());
        self.configs = vec![(meta.last_index, meta.membership.clone())];
        self.snapshot_restore_pending = Some(meta.last_index);
        // An older snapshot held to send is behind the new log start: of no use any more.
        self.snapshot_data = None;
        self.out_snapshot = Some(meta);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn handle_snapshot_response(
        &mut self,
        from: NodeId,
        snapshot_last_index: LogIndex,
        next_offset: u64,
        gap: bool,
        done: bool,
        read_seq: u64,
        sent_at: Millis,
    ) {
        if self.role != Role::Leader || !self.note_peer_answer(from, read_seq, sent_at) {
            return;
        }
        let now = self.now;
        let last = self.log.last_index();
        let pr = self.progress.get_mut(&from).expect("noted above");
        let current = pr
            .snapshot
            .as_ref()
            .is_some_and(|s| s.meta.last_index == snapshot_last_index);
        if done && snapshot_last_index <= last {
            // The follower durably holds everything through the snapshot.
            let moved = pr.update_match(snapshot_last_index, now);
            debug_assert!(pr.match_index <= last);
            if current || pr.state == ReplicationState::Probe {
                pr.become_replicate(now);
            }
            if moved {
                self.maybe_commit();
            }
            if self.role == Role::Leader {
                self.maybe_send_timeout_now();
                self.send_appends(from);
                self.advance_reads();
            }
            return;
        }
        if current {
            let s = pr.snapshot.as_mut().expect("current");
            let total = s.data.len() as u64;
            let next_offset = next_offset.min(total);
            if next_offset > s.acked_offset {
                s.acked_offset = next_offset;
                s.progress_at = now;
            }
            if gap && next_offset < s.next_offset && s.rewound_to != Some(next_offset) {
                // Go back to the hole the follower reported (go-back-N). Below the
                // acknowledged offset it means the follower lost its partial copy (it
                // restarted): what it had acknowledged is gone.
                s.acked_offset = s.acked_offset.min(next_offset);
                s.next_offset = next_offset;
                s.final_sent = false;
                s.rewound_to = Some(next_offset);
            }
            self.send_snapshot_chunks(from);
        }
        self.advance_reads();
    }

    pub(super) fn start_snapshot(&mut self, to: NodeId) {
        let Some((meta, data)) = self.snapshot_data.clone() else {
            self.snapshot_wanted = true;
            return;
        };
        debug_assert!(
            meta.last_index <= self.log.committed,
            "sending an uncommitted snapshot"
        );
        let now = self.now;
        let Some(pr) = self.progress.get_mut(&to) else {
            return;
        };
        pr.state = ReplicationState::Snapshot;
        pr.probe_sent = false;
        pr.inflight.clear();
        pr.snapshot = Some(SnapshotSend {
            meta,
            data,
            next_offset: 0,
            acked_offset: 0,
            progress_at: now,
            rewound_to: None,
            final_sent: false,
        });
        self.send_snapshot_chunks(to);
    }

    /// Sends snapshot chunks to `to` while its chunk window has room.
    pub(super) fn send_snapshot_chunks(&mut self, to: NodeId) {
        let chunk_bytes = self.config.snapshot_chunk_bytes;
        let window_bytes = chunk_bytes.saturating_mul(self.config.snapshot_inflight_chunks_max);
        let (term, read_seq, now) = (self.term, self.read_seq, self.now);
        let mut outgoing = Vec::new();
        if let Some(s) = self
            .progress
            .get_mut(&to)
            .and_then(|pr| pr.snapshot.as_mut())
        {
            let total = s.data.len() as u64;
            // An empty snapshot is one empty final chunk.
            while !s.final_sent && s.next_offset < s.acked_offset.saturating_add(window_bytes) {
                let offset = s.next_offset;
                let end = (offset + chunk_bytes).min(total);
                let done = end == total;
                outgoing.push(Message::InstallSnapshot {
                    term,
                    meta: s.meta.clone(),
                    total_bytes: total,
                    offset,
                    chunk: s.data.slice(offset as usize..end as usize),
                    done,
                    read_seq,
                    sent_at: now,
                });
                s.next_offset = end;
                if done {
                    s.final_sent = true;
                }
            }
        }
        for message in outgoing {
            self.send(to, message);
        }
    }
}
