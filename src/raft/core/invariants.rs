//! The assertions at the core's seams: the durable promises that only move forward across
//! each public input, and the whole-state invariants `ready` checks (each scan bounded by
//! `INVARIANT_SCAN_MAX`).

use super::*;

impl RaftCore {
    pub(super) fn seam_state(&self) -> SeamState {
        SeamState {
            term: self.term,
            vote: self.vote,
            committed: self.log.committed,
            committed_term: self.log.term(self.log.committed),
            applied: self.log.applied,
            snapshot_index: self.log.snapshot.last_index,
        }
    }

    /// What no input may take back: checked at the end of every public input.
    pub(super) fn assert_seam(&self, before: SeamState) {
        debug_assert!(self.term >= before.term, "the term went back");
        debug_assert!(
            self.term > before.term || before.vote.is_none() || self.vote == before.vote,
            "the vote changed within term {}: {:?} then {:?}",
            self.term,
            before.vote,
            self.vote
        );
        debug_assert!(
            self.log.committed >= before.committed,
            "the commit went back"
        );
        // The committed entry is never replaced; it may only leave the log by compaction.
        debug_assert!(
            before.committed_term.is_none()
                || self
                    .log
                    .term(before.committed)
                    .is_none_or(|term| Some(term) == before.committed_term),
            "the entry at commit index {} was overwritten",
            before.committed
        );
        debug_assert!(
            self.log.applied >= before.applied,
            "the applied index went back"
        );
        debug_assert!(self.log.snapshot.last_index >= before.snapshot_index);
    }

    /// The whole state's invariants, checked where effects leave (`ready`). Each scan looks
    /// at no more than [`INVARIANT_SCAN_MAX`] items.
    pub(super) fn check_invariants(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        self.check_log_order();
        self.check_configs();
        self.check_campaign();
        if self.role == Role::Leader {
            self.check_leader();
        } else {
            self.check_no_leader_state();
        }
    }

    /// The log's indexes in their order: snapshot ≤ applied ≤ handed to apply ≤ commit ≤
    /// last, and durable ≤ handed to the driver ≤ last; nothing from a term not reached, and
    /// no snapshot past what the log knows.
    fn check_log_order(&self) {
        let log = &self.log;
        let last = log.last_index();
        debug_assert!(
            log.committed <= last,
            "commit {} past the last index {last}",
            log.committed
        );
        debug_assert!(log.snapshot.last_index <= log.committed);
        debug_assert!(log.applied <= log.committed_handed_out);
        debug_assert!(log.committed_handed_out <= log.committed);
        debug_assert!(log.committed_handed_out <= log.persisted);
        debug_assert!(log.persisted <= log.handed_out && log.handed_out <= last);
        debug_assert!(
            log.last_term() <= self.term,
            "an entry from a term not reached"
        );
        debug_assert!(self.hard_state_handed_out.term <= self.term);
        debug_assert!(
            self.snapshot_restore_pending
                .is_none_or(|index| index <= log.committed),
            "a snapshot to restore beyond the commit index"
        );
        debug_assert!(self
            .snapshot_data
            .as_ref()
            .is_none_or(|(meta, _)| meta.last_index <= log.snapshot.last_index));
        debug_assert!(self
            .incoming_snapshot
            .as_ref()
            .is_none_or(|s| s.received_bytes <= s.total_bytes));
    }

    /// The newest configurations, at most [`INVARIANT_SCAN_MAX`] of them.
    fn recent_configs(&self) -> &[(LogIndex, Membership)] {
        let configs_scanned = self.configs.len().min(INVARIANT_SCAN_MAX);
        &self.configs[self.configs.len() - configs_scanned..]
    }

    /// Configurations: one at least, in strictly increasing log order, none past the last
    /// index.
    fn check_configs(&self) {
        debug_assert!(!self.configs.is_empty());
        debug_assert!(self
            .recent_configs()
            .windows(2)
            .all(|pair| pair[0].0 < pair[1].0));
        debug_assert!(self.membership_index() <= self.log.last_index());
    }

    /// Votes are counted only while campaigning; the vote of a candidate is its own.
    fn check_campaign(&self) {
        match self.role {
            Role::PreCandidate => debug_assert_eq!(self.leader, None),
            Role::Candidate => {
                debug_assert_eq!(self.leader, None);
                debug_assert_eq!(self.vote, Some(self.id));
            }
            Role::Follower | Role::Leader => debug_assert!(self.votes.is_empty()),
        }
    }

    /// A leader's state goes with its leadership.
    fn check_no_leader_state(&self) {
        debug_assert!(self.progress.is_empty());
        debug_assert!(self.transfer.is_none());
        debug_assert!(self.reads_pending.is_empty());
        debug_assert!(self.reads_awaiting_term_commit.is_empty());
        debug_assert_eq!(self.term_start_index, 0);
    }

    /// A leader voted for itself in its term and never for another, and started its term
    /// with an entry of that term.
    fn check_leader(&self) {
        let last = self.log.last_index();
        debug_assert_eq!(self.vote, Some(self.id), "a leader that voted for another");
        debug_assert_eq!(self.leader, Some(self.id));
        debug_assert!(self.term_start_index > 0 && self.term_start_index <= last);
        debug_assert!(self
            .log
            .term(self.term_start_index)
            .is_none_or(|term| term == self.term));
        self.check_progress();
        // At most one configuration change of this leader's in flight: it proposes the next
        // only once the last is committed.
        let uncommitted_own = self
            .recent_configs()
            .iter()
            .filter(|(at, _)| *at >= self.term_start_index && *at > self.log.committed)
            .count();
        debug_assert!(
            uncommitted_own <= 1,
            "{uncommitted_own} configuration changes in flight"
        );
        debug_assert!(self
            .transfer
            .as_ref()
            .is_none_or(|t| t.to != self.id && self.membership().is_voter(t.to)));
        self.check_reads_pending();
    }

    /// A leader tracks each other member, with match < next ≤ last + 1.
    fn check_progress(&self) {
        let last = self.log.last_index();
        debug_assert!(self.progress.len() <= MEMBERS_MAX);
        for (id, pr) in self.progress.iter().take(INVARIANT_SCAN_MAX) {
            debug_assert!(*id != self.id, "a leader tracking itself");
            debug_assert!(
                self.membership().contains(*id),
                "progress for non-member {id}"
            );
            debug_assert!(
                pr.match_index <= last,
                "peer {id}'s match {} above the last index {last}",
                pr.match_index
            );
            debug_assert!(pr.match_index < pr.next_index && pr.next_index <= last + 1);
            debug_assert!(pr.inflight.back().is_none_or(|&index| index <= last));
        }
    }

    /// Pending reads wait on a committed index of this term, in sequence order.
    fn check_reads_pending(&self) {
        let mut previous_seq = 0;
        for read in self.reads_pending.iter().take(INVARIANT_SCAN_MAX) {
            debug_assert!(read.index <= self.log.committed && read.index >= self.term_start_index);
            debug_assert!(read.seq >= previous_seq && read.seq <= self.read_seq);
            previous_seq = read.seq;
        }
    }
}
