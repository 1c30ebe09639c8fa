//! Elections: pre-vote and vote requests, the answers to them, and the role changes they
//! lead to (follower, pre-candidate, candidate, leader). A vote is granted only to a log at
//! least as up to date as ours, never twice in a term, and never while the leader lease
//! holds (the vote guard).

use super::*;

impl RaftCore {
    /// Voters campaign; so does a voter whose removal is appended but not committed. It
    /// may hold the longest log, which the remaining voters need to elect anyone; it counts
    /// the votes of its latest configuration and steps down once the removal commits
    /// (Ongaro's thesis §4.2.2: it is a legitimate leader until then).
    pub(super) fn may_campaign(&self) -> bool {
        if self.is_voter() {
            return true;
        }
        let count = self.configs.len();
        count >= 2
            && self.membership_index() > self.log.committed
            && self.configs[count - 2].1.is_voter(self.id)
    }

    pub(super) fn in_vote_guard(&self) -> bool {
        self.config.check_quorum && (self.role == Role::Leader || self.now < self.vote_guard_until)
    }

    pub(super) fn reset_election_deadline(&mut self) {
        let timeout = self.config.election_timeout_ms;
        self.election_deadline = self.now + timeout + self.rng.below(timeout);
    }

    pub(super) fn heard_from_leader(&mut self) {
        self.reset_election_deadline();
        if self.config.check_quorum {
            self.vote_guard_until = self.now + self.config.election_timeout_ms;
        }
    }

    pub(super) fn become_follower(&mut self, term: Term, leader: Option<NodeId>) {
        debug_assert!(term >= self.term, "following a term behind our own");
        debug_assert!(leader != Some(self.id));
        if term > self.term {
            self.term = term;
            self.vote = None;
        }
        if self.role == Role::Leader {
            self.abandon_leadership();
        }
        self.role = Role::Follower;
        self.leader = leader;
        self.votes.clear();
        self.reset_election_deadline();
    }

    pub(super) fn abandon_leadership(&mut self) {
        debug_assert_eq!(self.role, Role::Leader);
        self.progress.clear();
        self.transfer = None;
        self.broadcast_pending = false;
        self.read_broadcast_pending = false;
        self.term_start_index = 0;
        for read in self.reads_pending.drain(..) {
            self.out_dropped_reads.push(read.context);
        }
        self.out_dropped_reads
            .extend(self.reads_awaiting_term_commit.drain(..));
    }

    pub(super) fn campaign(&mut self, leadership_transfer: bool) {
        if !self.may_campaign() {
            return;
        }
        if self.config.pre_vote && !leadership_transfer {
            self.become_pre_candidate();
        } else {
            self.become_candidate(leadership_transfer);
        }
    }

    pub(super) fn become_pre_candidate(&mut self) {
        debug_assert!(self.role != Role::Leader && self.may_campaign());
        self.role = Role::PreCandidate;
        self.leader = None;
        self.votes.clear();
        self.votes.insert(self.id, true);
        self.reset_election_deadline();
        if self.tally_votes() == VoteTally::Won {
            self.become_candidate(false);
            return;
        }
        let request = Message::RequestVote {
            term: self.term + 1,
            last_log_index: self.log.last_index(),
            last_log_term: self.log.last_term(),
            pre_vote: true,
            leadership_transfer: false,
        };
        let voters: Vec<NodeId> = self
            .membership()
            .voters()
            .filter(|&v| v != self.id)
            .collect();
        for voter in voters {
            // A pre-vote changes no durable state, so it may leave at once.
            self.send(voter, request.clone());
        }
    }

    pub(super) fn become_candidate(&mut self, leadership_transfer: bool) {
        debug_assert!(
            self.may_campaign(),
            "a server that may not campaign campaigns"
        );
        if self.role == Role::Leader {
            self.abandon_leadership();
        }
        self.term += 1;
        self.vote = Some(self.id);
        self.role = Role::Candidate;
        self.leader = None;
        self.votes.clear();
        self.votes.insert(self.id, true);
        self.reset_election_deadline();
        if self.tally_votes() == VoteTally::Won {
            self.become_leader();
            return;
        }
        let request = Message::RequestVote {
            term: self.term,
            last_log_index: self.log.last_index(),
            last_log_term: self.log.last_term(),
            pre_vote: false,
            leadership_transfer,
        };
        let voters: Vec<NodeId> = self
            .membership()
            .voters()
            .filter(|&v| v != self.id)
            .collect();
        for voter in voters {
            // Our own vote must be durable before anyone can count on this term.
            self.send_after_persist(voter, request.clone());
        }
    }

    pub(super) fn tally_votes(&self) -> VoteTally {
        let membership = self.membership();
        let quorum = membership.quorum();
        let voters = membership.voter_count();
        let mut granted = 0;
        let mut refused = 0;
        for id in membership.voters() {
            match self.votes.get(&id) {
                Some(true) => granted += 1,
                Some(false) => refused += 1,
                None => {}
            }
        }
        if quorum > 0 && granted >= quorum {
            VoteTally::Won
        } else if refused > voters - quorum {
            VoteTally::Lost
        } else {
            VoteTally::Pending
        }
    }

    pub(super) fn become_leader(&mut self) {
        debug_assert_eq!(self.role, Role::Candidate, "leading without an election");
        debug_assert_eq!(self.vote, Some(self.id));
        debug_assert_eq!(self.tally_votes(), VoteTally::Won);
        self.role = Role::Leader;
        self.leader = Some(self.id);
        self.votes.clear();
        self.transfer = None;
        self.lease_revoked = false;
        self.progress.clear();
        let next = self.log.last_index() + 1;
        let peers: Vec<NodeId> = self
            .membership()
            .members
            .keys()
            .copied()
            .filter(|&id| id != self.id)
            .collect();
        for peer in peers {
            self.progress.insert(peer, Progress::new(next));
        }
        self.heartbeat_deadline = self.now + self.config.heartbeat_interval_ms;
        self.check_quorum_deadline = self.now + self.config.election_timeout_ms;
        self.term_start_index = self.append_entry(EntryKind::Noop, Bytes::new());
        debug_assert!(self.term_start_index > self.log.committed);
        self.broadcast_pending = true;
    }

    pub(super) fn answer_vote(&mut self, to: NodeId, pre_vote: bool, granted: bool, term: Term) {
        let response = Message::VoteResponse {
            term,
            pre_vote,
            granted,
        };
        if pre_vote {
            self.send(to, response);
        } else {
            self.send_after_persist(to, response);
        }
    }

    pub(super) fn handle_request_vote(
        &mut self,
        from: NodeId,
        term: Term,
        last_log_index: LogIndex,
        last_log_term: Term,
        pre_vote: bool,
    ) {
        let up_to_date = self.log.is_up_to_date(last_log_index, last_log_term);
        let granted = if pre_vote {
            term > self.term && up_to_date
        } else {
            up_to_date
                && (self.vote == Some(from) || (self.vote.is_none() && self.leader.is_none()))
        };
        if granted && !pre_vote {
            // A leader or candidate voted for itself in this term; it never votes again.
            debug_assert!(self.role == Role::Follower || self.role == Role::PreCandidate);
            debug_assert!(
                self.vote.is_none_or(|v| v == from),
                "a second vote in one term"
            );
            self.vote = Some(from);
            self.reset_election_deadline();
        }
        let answer_term = if granted && pre_vote { term } else { self.term };
        self.answer_vote(from, pre_vote, granted, answer_term);
    }

    pub(super) fn handle_vote_response(
        &mut self,
        from: NodeId,
        term: Term,
        pre_vote: bool,
        granted: bool,
    ) {
        if !self.membership().is_voter(from) {
            return;
        }
        let counts = match self.role {
            Role::PreCandidate => pre_vote && (!granted || term == self.term + 1),
            Role::Candidate => !pre_vote && term == self.term,
            _ => false,
        };
        if !counts {
            return;
        }
        debug_assert!(from != self.id);
        self.votes.insert(from, granted);
        match self.tally_votes() {
            VoteTally::Won if self.role == Role::PreCandidate => self.become_candidate(false),
            VoteTally::Won => self.become_leader(),
            VoteTally::Lost => {
                let term = self.term;
                self.become_follower(term, None);
            }
            VoteTally::Pending => {}
        }
    }
}
