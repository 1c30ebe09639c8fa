//! ReadIndex: a consistent read waits for the commit index at the time it was asked and for
//! a quorum round that confirms this server was still the leader after that moment.

use super::*;

impl RaftCore {
    pub(super) fn start_read(&mut self, context: u64) {
        debug_assert!(self.role == Role::Leader && self.log.committed >= self.term_start_index);
        let membership = self.membership();
        if self.is_voter() && membership.voter_count() == 1 {
            self.out_read_states.push(ReadState {
                context,
                index: self.log.committed,
            });
            return;
        }
        if !self.read_broadcast_pending {
            self.read_seq += 1;
            self.read_broadcast_pending = true;
        }
        self.reads_pending.push_back(PendingRead {
            context,
            index: self.log.committed,
            seq: self.read_seq,
        });
    }

    pub(super) fn advance_reads(&mut self) {
        if self.reads_pending.is_empty() {
            return;
        }
        let self_value = self.is_voter().then_some(u64::MAX);
        let Some(acked) = self.quorum_value(self_value, |pr| Some(pr.acked_read_seq)) else {
            return;
        };
        while self.reads_pending.front().is_some_and(|r| r.seq <= acked) {
            let read = self.reads_pending.pop_front().expect("checked");
            debug_assert!(read.index <= self.log.committed);
            self.out_read_states.push(ReadState {
                context: read.context,
                index: read.index,
            });
        }
    }

    /// Records that `from` answered us in this term.
    pub(super) fn note_peer_answer(
        &mut self,
        from: NodeId,
        read_seq: u64,
        sent_at: Millis,
    ) -> bool {
        let now = self.now;
        let Some(pr) = self.progress.get_mut(&from) else {
            return false;
        };
        pr.recent_active = true;
        pr.last_contact = Some(now);
        if sent_at <= now {
            pr.acked_sent_at = Some(pr.acked_sent_at.map_or(sent_at, |t| t.max(sent_at)));
        }
        if read_seq <= self.read_seq {
            pr.acked_read_seq = pr.acked_read_seq.max(read_seq);
        }
        true
    }
}
