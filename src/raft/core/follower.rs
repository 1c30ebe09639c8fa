//! The follower side of replication: an AppendEntries is accepted only from the term's
//! leader and only when it matches our log at its previous index; entries that conflict are
//! truncated (never at or below the commit index), configuration entries take effect on
//! append.

use super::*;

impl RaftCore {
    /// Accepts `from` as this term's leader; false if that is impossible (we lead ourselves).
    pub(super) fn accept_leader(&mut self, from: NodeId) -> bool {
        if self.role == Role::Leader {
            // Two leaders in one term cannot happen with correct peers.
            self.messages_dropped += 1;
            return false;
        }
        if self.role != Role::Follower || self.leader != Some(from) {
            let term = self.term;
            self.become_follower(term, Some(from));
        }
        self.heard_from_leader();
        true
    }

    pub(super) fn entries_well_formed(
        &self,
        prev_log_index: LogIndex,
        prev_log_term: Term,
        entries: &[Entry],
    ) -> bool {
        let mut previous_term = prev_log_term;
        for (expected_index, entry) in (prev_log_index + 1..).zip(entries) {
            if entry.index != expected_index || entry.term < previous_term || entry.term > self.term
            {
                return false;
            }
            previous_term = entry.term;
        }
        prev_log_term <= self.term
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn handle_append(
        &mut self,
        from: NodeId,
        prev_log_index: LogIndex,
        prev_log_term: Term,
        mut entries: Vec<Entry>,
        leader_commit: LogIndex,
        read_seq: u64,
        sent_at: Millis,
    ) {
        if !self.entries_well_formed(prev_log_index, prev_log_term, &entries) {
            self.messages_dropped += 1;
            return;
        }
        let mut prev_index = prev_log_index;
        let mut prev_term = prev_log_term;
        let committed = self.log.committed;
        if prev_index < committed {
            // Everything up to our commit index is in the leader's log (Leader Completeness);
            // skip it and check from there.
            let skip = entries.len().min((committed - prev_index) as usize);
            if skip > 0 {
                let last_skipped = &entries[skip - 1];
                if self
                    .log
                    .term(last_skipped.index)
                    .is_some_and(|t| t != last_skipped.term)
                {
                    self.messages_dropped += 1;
                    return;
                }
            }
            entries.drain(..skip);
            prev_index = committed;
            prev_term = self
                .log
                .term(committed)
                .expect("the commit index is always known");
        }
        let (match_index, reject) = match self.log.term(prev_index) {
            None => (
                0,
                Some(AppendReject {
                    prev_index: prev_log_index,
                    conflict_term: None,
                    hint_index: self.log.last_index() + 1,
                }),
            ),
            Some(term) if term != prev_term => (
                0,
                Some(AppendReject {
                    prev_index: prev_log_index,
                    conflict_term: Some(term),
                    hint_index: self
                        .log
                        .first_index_of_term(term, prev_index)
                        .max(committed + 1),
                }),
            ),
            Some(_) => {
                let last_new = prev_index + entries.len() as u64;
                if !self.follower_append(entries) {
                    self.messages_dropped += 1;
                    return;
                }
                let new_commit = leader_commit.min(last_new);
                if new_commit > self.log.committed {
                    self.log.committed = new_commit;
                }
                debug_assert!(self.log.committed <= self.log.last_index());
                debug_assert!(last_new <= self.log.last_index());
                (last_new, None)
            }
        };
        let response = Message::AppendResponse {
            term: self.term,
            match_index,
            reject,
            read_seq,
            sent_at,
        };
        // An acknowledgement claims durability; send it early only if that already holds.
        if reject.is_some() || match_index <= self.log.persisted {
            self.send(from, response);
        } else {
            self.send_after_persist(from, response);
        }
    }

    /// Appends entries whose predecessor matches, truncating a conflicting suffix. False if
    /// that would drop a committed entry (a faulty leader).
    pub(super) fn follower_append(&mut self, entries: Vec<Entry>) -> bool {
        let Some(start) = entries
            .iter()
            .position(|e| self.log.term(e.index) != Some(e.term))
        else {
            return true;
        };
        let first_new = entries[start].index;
        debug_assert!(
            first_new <= self.log.last_index() + 1,
            "a gap in the follower's log"
        );
        if first_new <= self.log.last_index() {
            if first_new <= self.log.committed {
                return false;
            }
            // Only uncommitted entries are ever replaced.
            debug_assert!(first_new > self.log.committed);
            self.log.truncate_from(first_new);
            self.configs.retain(|(at, _)| *at < first_new);
            debug_assert!(!self.configs.is_empty());
        }
        for entry in entries.into_iter().skip(start) {
            if entry.kind == EntryKind::Membership {
                self.push_config(entry.index, &entry.data);
            }
            self.log.append([entry]);
        }
        true
    }

    pub(super) fn push_config(&mut self, index: LogIndex, data: &[u8]) {
        debug_assert!(
            self.membership_index() < index,
            "configurations out of log order"
        );
        let membership = match Membership::decode(data) {
            Ok(membership) => membership,
            Err(_) => {
                // Keep the entry (the log must stay identical) but not its unusable content.
                self.messages_dropped += 1;
                self.membership().clone()
            }
        };
        self.configs.push((index, membership));
    }
}
