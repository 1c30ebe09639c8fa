//! The leader side of replication: appending its own entries, pipelining them to each
//! follower within its flow-control window, heartbeats and check-quorum, counting the
//! durable matches into the commit index (only entries of its own term, §5.4.2), and the
//! messages that must wait until the leader's own entries are durable.

use super::*;

impl RaftCore {
    pub(super) fn tick_leader(&mut self) {
        debug_assert_eq!(self.role, Role::Leader);
        if self.config.check_quorum && self.now >= self.check_quorum_deadline {
            let membership = self.membership();
            let active = membership
                .voters()
                .filter(|&id| {
                    id == self.id || self.progress.get(&id).is_some_and(|pr| pr.recent_active)
                })
                .count();
            if active < membership.quorum() {
                // Partitioned away from a quorum: stop acting as leader.
                let term = self.term;
                self.become_follower(term, None);
                return;
            }
            for pr in self.progress.values_mut() {
                pr.recent_active = false;
            }
            self.check_quorum_deadline = self.now + self.config.election_timeout_ms;
        }
        if self
            .transfer
            .as_ref()
            .is_some_and(|t| self.now >= t.deadline)
        {
            self.transfer = None;
        }
        if self.commit_notice_due.is_some_and(|due| self.now >= due) {
            self.send_commit_notices();
        }
        if self.now >= self.heartbeat_deadline {
            self.heartbeat_deadline = self.now + self.config.heartbeat_interval_ms;
            self.broadcast_heartbeat();
        }
    }

    /// The largest value that a quorum of voters has reached; `self_value` stands for this
    /// server, `peer_value` for the others.
    pub(super) fn quorum_value(
        &self,
        self_value: Option<u64>,
        peer_value: impl Fn(&Progress) -> Option<u64>,
    ) -> Option<u64> {
        let membership = self.membership();
        let quorum = membership.quorum();
        if quorum == 0 {
            return None;
        }
        let mut values: Vec<Option<u64>> = membership
            .voters()
            .map(|id| {
                if id == self.id {
                    self_value
                } else {
                    self.progress.get(&id).and_then(&peer_value)
                }
            })
            .collect();
        // Descending; `None` sorts lowest.
        values.sort_unstable_by(|a, b| b.cmp(a));
        debug_assert!(quorum <= values.len(), "a quorum larger than the voters");
        values[quorum - 1]
    }

    pub(super) fn check_accepting_proposals(&self) -> Result<(), RaftError> {
        if self.role != Role::Leader {
            return Err(RaftError::NotLeader {
                leader: self.leader,
            });
        }
        if let Some(transfer) = &self.transfer {
            return Err(RaftError::LeadershipTransferInProgress { to: transfer.to });
        }
        let uncommitted = self.log.last_index() - self.log.committed;
        if uncommitted >= self.config.uncommitted_entries_max {
            return Err(RaftError::TooManyUncommitted {
                entries_max: self.config.uncommitted_entries_max,
            });
        }
        Ok(())
    }

    pub(super) fn append_entry(&mut self, kind: EntryKind, data: Bytes) -> LogIndex {
        debug_assert_eq!(
            self.role,
            Role::Leader,
            "only a leader appends its own entries"
        );
        let index = self.log.last_index() + 1;
        if kind == EntryKind::Membership {
            self.push_config(index, &data);
        }
        self.log.append([Entry {
            index,
            term: self.term,
            kind,
            data,
        }]);
        index
    }

    pub(super) fn append_as_leader(&mut self, kind: EntryKind, data: Bytes) -> LogIndex {
        // One configuration change in flight at most: the last must be committed.
        debug_assert!(
            kind != EntryKind::Membership || self.membership_index() <= self.log.committed,
            "a second configuration change in flight"
        );
        let index = self.append_entry(kind, data);
        if kind == EntryKind::Membership {
            self.on_leader_membership_changed();
        }
        self.broadcast_pending = true;
        index
    }

    pub(super) fn on_leader_membership_changed(&mut self) {
        let members: Vec<NodeId> = self.membership().members.keys().copied().collect();
        let next = self.log.last_index() + 1;
        for &id in &members {
            if id != self.id {
                self.progress
                    .entry(id)
                    .or_insert_with(|| Progress::new(next));
            }
        }
        let membership = self.membership().clone();
        self.progress.retain(|id, _| membership.contains(*id));
        debug_assert_eq!(
            self.progress.len() + usize::from(membership.contains(self.id)),
            membership.members.len()
        );
        if self
            .transfer
            .as_ref()
            .is_some_and(|t| !membership.is_voter(t.to))
        {
            self.transfer = None;
        }
        // Fewer voters can make an index committed right away.
        self.maybe_commit();
    }

    pub(super) fn maybe_commit(&mut self) {
        if self.role != Role::Leader {
            return;
        }
        let self_match = self.is_voter().then_some(self.log.persisted);
        let Some(index) = self.quorum_value(self_match, |pr| Some(pr.match_index)) else {
            return;
        };
        // Only entries of our own term are committed by counting (Raft §5.4.2).
        if index > self.log.committed && self.log.term(index) == Some(self.term) {
            debug_assert!(
                index <= self.log.last_index(),
                "committing past the last index"
            );
            self.log.committed = index;
            self.on_commit_advanced();
        }
    }

    pub(super) fn on_commit_advanced(&mut self) {
        if self.log.committed >= self.term_start_index {
            while let Some(context) = self.reads_awaiting_term_commit.pop_front() {
                self.start_read(context);
            }
        }
        self.broadcast_pending = true;
        if !self.is_voter() && self.membership_index() <= self.log.committed {
            self.step_down_after_removal();
        }
    }

    /// Our removal committed: hand over to the most up-to-date voter and step down.
    pub(super) fn step_down_after_removal(&mut self) {
        debug_assert!(!self.is_voter() && self.membership_index() <= self.log.committed);
        let last = self.log.last_index();
        let successor = self
            .membership()
            .voters()
            .filter(|id| {
                self.progress
                    .get(id)
                    .is_some_and(|pr| pr.match_index == last)
            })
            .min();
        // Let everyone learn the final commit index first.
        self.flush_leader_messages();
        self.send_commit_notices();
        if let Some(successor) = successor {
            self.send(successor, Message::TimeoutNow { term: self.term });
        }
        let term = self.term;
        self.become_follower(term, None);
    }

    pub(super) fn handle_append_response(
        &mut self,
        from: NodeId,
        match_index: LogIndex,
        reject: Option<AppendReject>,
        read_seq: u64,
        sent_at: Millis,
    ) {
        if self.role != Role::Leader || !self.note_peer_answer(from, read_seq, sent_at) {
            return;
        }
        let last = self.log.last_index();
        let now = self.now;
        let pr = self.progress.get_mut(&from).expect("noted above");
        match reject {
            None => {
                if match_index > last {
                    self.messages_dropped += 1;
                    return;
                }
                let moved = pr.update_match(match_index, now);
                debug_assert!(pr.match_index <= last && pr.next_index > pr.match_index);
                match pr.state {
                    ReplicationState::Probe => pr.become_replicate(now),
                    ReplicationState::Snapshot => {
                        let covered = pr
                            .snapshot
                            .as_ref()
                            .is_some_and(|s| pr.match_index >= s.meta.last_index);
                        if covered {
                            pr.become_replicate(now);
                        }
                    }
                    ReplicationState::Replicate => {}
                }
                if moved {
                    self.maybe_commit();
                }
                if self.role != Role::Leader {
                    return;
                }
                self.maybe_send_timeout_now();
                self.send_appends(from);
            }
            Some(reject) => {
                let stale = match pr.state {
                    ReplicationState::Replicate => reject.prev_index <= pr.match_index,
                    ReplicationState::Probe => reject.prev_index + 1 != pr.next_index,
                    ReplicationState::Snapshot => true,
                };
                if !stale {
                    let hinted = match reject.conflict_term {
                        Some(term) => self
                            .log
                            .last_index_of_term(term)
                            .map_or(reject.hint_index, |i| i + 1),
                        None => reject.hint_index,
                    };
                    pr.next_index = hinted.min(reject.prev_index).max(pr.match_index + 1);
                    pr.become_probe();
                    debug_assert!(pr.next_index <= last + 1);
                    self.send_appends(from);
                }
            }
        }
        self.advance_reads();
    }

    pub(super) fn maybe_send_timeout_now(&mut self) -> bool {
        let last = self.log.last_index();
        let Some(transfer) = &self.transfer else {
            return false;
        };
        if transfer.timeout_now_sent {
            return false;
        }
        let to = transfer.to;
        if self
            .progress
            .get(&to)
            .is_none_or(|pr| pr.match_index != last)
        {
            return false;
        }
        debug_assert!(self.membership().is_voter(to), "TimeoutNow to a non-voter");
        self.send(to, Message::TimeoutNow { term: self.term });
        if let Some(transfer) = &mut self.transfer {
            transfer.timeout_now_sent = true;
        }
        // From now on the target may win an election at any moment.
        self.lease_revoked = true;
        true
    }

    pub(super) fn flush_leader_messages(&mut self) {
        if self.broadcast_pending {
            self.broadcast_pending = false;
            let peers: Vec<NodeId> = self.progress.keys().copied().collect();
            let commit = self.log.committed;
            let mut notice_owed = false;
            for peer in peers {
                self.send_appends(peer);
                let pr = &self.progress[&peer];
                notice_owed |= pr.state == ReplicationState::Replicate && pr.commit_sent < commit;
            }
            if notice_owed {
                if self.config.commit_notice_delay_ms == 0 {
                    self.send_commit_notices();
                } else if self.commit_notice_due.is_none() {
                    self.commit_notice_due = Some(self.now + self.config.commit_notice_delay_ms);
                }
            }
        }
        if self.read_broadcast_pending {
            self.read_broadcast_pending = false;
            self.broadcast_heartbeat();
        }
    }

    /// Tells every replicating follower that has not heard it the current commit index, with
    /// an append checked at the known match so that reordering cannot cause a refusal.
    pub(super) fn send_commit_notices(&mut self) {
        self.commit_notice_due = None;
        let commit = self.log.committed;
        let owed: Vec<(NodeId, LogIndex)> = self
            .progress
            .iter()
            .filter(|(_, pr)| pr.state == ReplicationState::Replicate && pr.commit_sent < commit)
            .map(|(peer, pr)| (*peer, pr.match_index))
            .collect();
        for (peer, at) in owed {
            self.send_empty_append(peer, at);
        }
    }

    pub(super) fn broadcast_heartbeat(&mut self) {
        let peers: Vec<NodeId> = self.progress.keys().copied().collect();
        for peer in peers {
            let pr = self.progress.get_mut(&peer).expect("listed");
            let read_lost = pr
                .log_read
                .is_some_and(|(_, at)| self.now >= at + 2 * self.config.heartbeat_interval_ms);
            if read_lost {
                // The driver answers every read; one that never came back is asked again.
                pr.log_read = None;
            }
            match pr.state {
                ReplicationState::Probe => {
                    pr.probe_sent = false;
                    self.send_append(peer, true);
                }
                ReplicationState::Replicate => {
                    let stalled = !pr.inflight.is_empty()
                        && self.now >= pr.progress_at + 2 * self.config.heartbeat_interval_ms;
                    if stalled {
                        // Appends in flight and nothing acknowledged for two heartbeat
                        // intervals: the pipeline's tail was lost. Probe from the match.
                        pr.next_index = pr.match_index + 1;
                        pr.become_probe();
                        self.send_append(peer, true);
                    } else {
                        // Check at the known match: a follower never refuses that, even
                        // when the heartbeat overtakes appends still in flight.
                        let at = pr.match_index;
                        self.send_empty_append(peer, at);
                    }
                }
                ReplicationState::Snapshot => {
                    let now = self.now;
                    let retransmit_ms = self.config.snapshot_retransmit_ms;
                    if let Some(s) = pr.snapshot.as_mut() {
                        if now >= s.progress_at + retransmit_ms {
                            // No acknowledged progress for a while: a chunk or the final
                            // answer was lost. Resend from the last acknowledged offset.
                            s.next_offset = s.acked_offset;
                            s.final_sent = false;
                            s.rewound_to = None;
                            s.progress_at = now;
                        }
                    }
                    self.send_snapshot_chunks(peer);
                }
            }
        }
    }

    /// An AppendEntries without entries, checking the log at `prev_index`.
    pub(super) fn send_empty_append(&mut self, to: NodeId, prev_index: LogIndex) {
        let Some(prev_term) = self.log.term(prev_index) else {
            self.start_snapshot(to);
            return;
        };
        let commit = self.log.committed;
        if let Some(pr) = self.progress.get_mut(&to) {
            pr.commit_sent = commit;
        }
        let message = Message::AppendEntries {
            term: self.term,
            prev_log_index: prev_index,
            prev_log_term: prev_term,
            entries: Vec::new(),
            leader_commit: commit,
            read_seq: self.read_seq,
            sent_at: self.now,
        };
        self.send(to, message);
    }

    /// Sends appends to `to` until its window is full or it has everything.
    pub(super) fn send_appends(&mut self, to: NodeId) {
        while self.send_append(to, false) {}
    }

    /// Sends one append to `to` if flow control allows; true if something was sent and
    /// more might follow.
    pub(super) fn send_append(&mut self, to: NodeId, allow_empty: bool) -> bool {
        let inflight_max = self.config.inflight_appends_max;
        let Some(pr) = self.progress.get(&to) else {
            return false;
        };
        if pr.is_paused(inflight_max) {
            return false;
        }
        let next = pr.next_index;
        if self.log.term(next - 1).is_none() {
            self.start_snapshot(to);
            return false;
        }
        let entries = match self.log.entries_from(
            next,
            self.config.append_entries_max,
            self.config.append_bytes_max,
        ) {
            Fetched::Held(entries) => entries,
            Fetched::OnDisk { through } => {
                let now = self.now;
                let pr = self.progress.get_mut(&to).expect("checked");
                pr.log_read = Some((next, now));
                self.out_log_reads.push(LogRead {
                    to,
                    from: next,
                    through,
                    bytes_max: self.config.append_bytes_max,
                });
                return false;
            }
            Fetched::Compacted => {
                self.start_snapshot(to);
                return false;
            }
        };
        if entries.is_empty() && !allow_empty {
            return false;
        }
        self.send_entries(to, entries)
    }

    /// Sends `entries` (which follow the peer's `next_index`, or none: a probe) to `to`;
    /// true if more might follow.
    pub(super) fn send_entries(&mut self, to: NodeId, entries: Vec<Entry>) -> bool {
        let next = self.progress[&to].next_index;
        debug_assert_eq!(self.role, Role::Leader);
        debug_assert!(entries.first().is_none_or(|e| e.index == next));
        debug_assert!(entries
            .last()
            .is_none_or(|e| e.index <= self.log.last_index()));
        let prev_term = self
            .log
            .term(next - 1)
            .expect("the caller checked the entry before the peer's next is stored");
        let commit = self.log.committed;
        let pr = self.progress.get_mut(&to).expect("checked");
        let more = match (pr.state, entries.last()) {
            (ReplicationState::Replicate, Some(last)) => {
                pr.next_index = last.index + 1;
                pr.inflight.push_back(last.index);
                true
            }
            _ => {
                pr.probe_sent = true;
                false
            }
        };
        pr.commit_sent = commit;
        let message = Message::AppendEntries {
            term: self.term,
            prev_log_index: next - 1,
            prev_log_term: prev_term,
            entries,
            leader_commit: commit,
            read_seq: self.read_seq,
            sent_at: self.now,
        };
        self.send(to, message);
        more
    }

    /// Lets go of held log entries no peer needs (see `RaftLog::evict`). A leader keeps what
    /// its peers have not acknowledged (a peer receiving a snapshot needs what follows it);
    /// any other server keeps nothing it has applied: if it is elected, it reads back what
    /// its peers lack.
    pub(super) fn evict_log_cache(&mut self) {
        let keep_from = if self.role == Role::Leader {
            self.progress
                .values()
                .map(|pr| match (&pr.state, &pr.snapshot) {
                    (ReplicationState::Snapshot, Some(s)) => s.meta.last_index + 1,
                    _ => pr.match_index + 1,
                })
                .min()
                .unwrap_or(LogIndex::MAX)
        } else {
            LogIndex::MAX
        };
        self.log.evict(keep_from, self.config.log_cache_bytes);
    }

    pub(super) fn send(&mut self, to: NodeId, message: Message) {
        // A leader speaks in its term only once that term is durable (its Noop, written no
        // earlier than the hard state, is persisted). Elected by a vote round it always is;
        // a sole voter elects itself at once, and after a crash that lost the term it could
        // lead the same term again with different entries.
        if self.role == Role::Leader && self.log.persisted < self.term_start_index {
            self.out_after_persist.push((to, message));
        } else {
            self.out_messages.push((to, message));
        }
    }

    pub(super) fn send_after_persist(&mut self, to: NodeId, message: Message) {
        self.out_after_persist.push((to, message));
    }
}
