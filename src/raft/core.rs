//! [`RaftCore`]: the Raft state machine of one server.
//!
//! It is driven entirely from outside: `tick` with the driver's monotonic clock, `step` with
//! each message received, `propose`/`read_index`/... for requests, and it answers with a
//! [`Ready`] of effects. It never blocks, sleeps, reads a clock or does I/O; its only
//! randomness is a generator seeded by the driver. So a run is a pure function of its inputs,
//! which is what lets the seeded simulator replay any failure.
//!
//! Safety rules it keeps (Raft, Ongaro's thesis):
//! - term and vote reach the disk before a vote or a RequestVote leaves (`messages_after_persist`);
//! - a server's own entries count towards a commit quorum only once the driver reported them
//!   durable, and a leader commits by counting only entries of its own term (§5.4.2);
//! - a follower acknowledges entries only in messages sent after they are durable;
//! - membership changes are single-server, one uncommitted at a time, effective on append;
//! - the leader lease (check-quorum) rests on followers refusing ordinary candidates for an
//!   election timeout after hearing from the leader, including right after a restart.
//!
//! Assertions: every public input is a seam. Across each one the durable promises only move
//! forward (the term never goes back, the vote never changes within a term, the commit and
//! applied indexes never decrease, the entry at the commit index is never replaced), and
//! [`RaftCore::ready`], where effects leave, checks the whole state against
//! `check_invariants` (commit never past the last index, a follower's match never above the
//! leader's last index, at most one configuration change of this leader in flight, ...),
//! scanning at most `INVARIANT_SCAN_MAX` items of each collection so its cost stays bounded.
//! They are `debug_assert!`s, kept by the `ci` profile the simulator runs under.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use super::config::RaftConfig;
use super::log::{Fetched, RaftLog};
use super::message::{AppendReject, Message};
use super::progress::{Progress, SnapshotSend};
use super::ready::{Ready, ReadyDone};
use super::rng::SplitMix64;
use super::types::{
    Entry, EntryKind, HardState, LogIndex, LogRead, Member, Membership, MembershipChange, Millis,
    NodeId, PeerStatus, RaftError, ReadState, ReplicationState, Restored, Role, RoleChange,
    SnapshotChunk, SnapshotMeta, Status, Term, MEMBERS_MAX,
};

mod election;
mod follower;
mod invariants;
mod leader;
mod reads;
mod snapshots;

/// A leadership transfer in progress.
#[derive(Debug)]
struct Transfer {
    to: NodeId,
    deadline: Millis,
    timeout_now_sent: bool,
}

/// A ReadIndex request waiting for a quorum to echo `seq`.
#[derive(Debug)]
struct PendingRead {
    context: u64,
    index: LogIndex,
    seq: u64,
}

/// A snapshot being received from the leader. Its bytes are not kept: each new piece goes
/// to the driver (`Ready::snapshot_chunks`), which assembles the snapshot on disk, so a
/// follower receiving a large state holds none of it in memory while it arrives.
#[derive(Debug)]
struct IncomingSnapshot {
    meta: SnapshotMeta,
    total_bytes: u64,
    received_bytes: u64,
}

/// The most items of each collection (peers, configurations, pending reads) one
/// `check_invariants` pass looks at: it runs at every `ready`, so its cost must not grow
/// with a long log or a deep read queue.
const INVARIANT_SCAN_MAX: usize = 64;

/// What a seam compares across one input: the durable promises and the entry at the commit
/// index, none of which any input may take back.
#[derive(Clone, Copy, Debug)]
struct SeamState {
    term: Term,
    vote: Option<NodeId>,
    committed: LogIndex,
    committed_term: Option<Term>,
    applied: LogIndex,
    snapshot_index: LogIndex,
}

#[derive(Debug, PartialEq, Eq)]
enum VoteTally {
    Won,
    Lost,
    Pending,
}

/// The Raft state machine of one server. See the module documentation.
#[derive(Debug)]
pub struct RaftCore {
    config: RaftConfig,
    id: NodeId,
    rng: SplitMix64,
    /// The latest time the driver gave us.
    now: Millis,
    term: Term,
    vote: Option<NodeId>,
    role: Role,
    leader: Option<NodeId>,
    log: RaftLog,
    /// Configurations in log order: first the one in force at the snapshot, then one per
    /// Membership entry held. The last one is in force.
    configs: Vec<(LogIndex, Membership)>,
    /// Leader only: every other member's replication state.
    progress: BTreeMap<NodeId, Progress>,
    /// (Pre)candidate only: the answers received.
    votes: BTreeMap<NodeId, bool>,
    election_deadline: Millis,
    heartbeat_deadline: Millis,
    check_quorum_deadline: Millis,
    /// Until then, ordinary (pre)vote requests are refused: we heard from a leader recently.
    vote_guard_until: Millis,
    transfer: Option<Transfer>,
    /// TimeoutNow was sent this term: another server may be elected at any moment.
    lease_revoked: bool,
    /// The index of this leader's first entry (its Noop).
    term_start_index: LogIndex,
    read_seq: u64,
    read_broadcast_pending: bool,
    reads_pending: VecDeque<PendingRead>,
    /// Reads that arrived before this leader committed an entry of its term.
    reads_awaiting_term_commit: VecDeque<u64>,
    incoming_snapshot: Option<IncomingSnapshot>,
    /// The latest local snapshot, served to followers behind the log start.
    snapshot_data: Option<(SnapshotMeta, Bytes)>,
    /// A received snapshot handed to the driver and not yet reported restored.
    snapshot_restore_pending: Option<LogIndex>,
    out_messages: Vec<(NodeId, Message)>,
    out_after_persist: Vec<(NodeId, Message)>,
    out_read_states: Vec<ReadState>,
    out_dropped_reads: Vec<u64>,
    out_snapshot_chunks: Vec<SnapshotChunk>,
    out_snapshot: Option<SnapshotMeta>,
    out_compact_through: Option<LogIndex>,
    out_log_reads: Vec<LogRead>,
    snapshot_wanted: bool,
    snapshot_wanted_reported: bool,
    /// Leader: appends or commit updates may be due; flushed in `ready`.
    broadcast_pending: bool,
    /// When followers that have not heard the current commit index get an append carrying
    /// only it (see `commit_notice_delay_ms`).
    commit_notice_due: Option<Millis>,
    hard_state_handed_out: HardState,
    role_reported: RoleChange,
    messages_dropped: u64,
}

impl RaftCore {
    /// Creates the core from durable state. Panics with a clear message on an invalid config
    /// or inconsistent restored state; use [`RaftCore::try_new`] to handle those as errors.
    pub fn new(config: RaftConfig, restored: Restored, rng_seed: u64, now: Millis) -> Self {
        match Self::try_new(config, restored, rng_seed, now) {
            Ok(core) => core,
            Err(error) => panic!("RaftCore::new: {error}"),
        }
    }

    pub fn try_new(
        config: RaftConfig,
        restored: Restored,
        rng_seed: u64,
        now: Millis,
    ) -> Result<Self, RaftError> {
        config.validate()?;
        let Restored {
            hard_state,
            snapshot,
            entries,
        } = restored;
        let log = RaftLog::restore(snapshot, entries, hard_state.commit)?;
        let mut configs = vec![(log.snapshot.last_index, log.snapshot.membership.clone())];
        for index in (log.snapshot.last_index + 1)..=log.last_index() {
            let entry = log.entry(index).expect("restored entries are contiguous");
            if entry.kind == EntryKind::Membership {
                let membership = Membership::decode(&entry.data).map_err(|error| {
                    RaftError::InvalidRestoredState(format!("membership entry {index}: {error}"))
                })?;
                configs.push((index, membership));
            }
        }
        // A log entry from a later term than the hard state means the hard state write was
        // lost while the entries survived (a driver writing them out of order). The term can
        // only move forward, and since we may have voted or led in it, count our vote as
        // given so we never vote for someone else in it.
        let (term, vote) = if log.last_term() > hard_state.term {
            (log.last_term(), Some(config.id))
        } else {
            (hard_state.term, hard_state.vote)
        };
        let id = config.id;
        let election_timeout_ms = config.election_timeout_ms;
        let mut core = RaftCore {
            id,
            rng: SplitMix64::new(rng_seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            now,
            term,
            vote,
            role: Role::Follower,
            leader: None,
            hard_state_handed_out: HardState {
                term: hard_state.term,
                vote: hard_state.vote,
                commit: log.committed,
            },
            log,
            configs,
            progress: BTreeMap::new(),
            votes: BTreeMap::new(),
            election_deadline: now,
            heartbeat_deadline: now,
            check_quorum_deadline: now,
            // After a restart we cannot know whether we acknowledged a leader a moment ago,
            // so behave as if we had: this keeps a leader's lease sound across our crash.
            vote_guard_until: if config.check_quorum {
                now + election_timeout_ms
            } else {
                now
            },
            transfer: None,
            lease_revoked: false,
            term_start_index: 0,
            read_seq: 0,
            read_broadcast_pending: false,
            reads_pending: VecDeque::new(),
            reads_awaiting_term_commit: VecDeque::new(),
            incoming_snapshot: None,
            snapshot_data: None,
            snapshot_restore_pending: None,
            out_messages: Vec::new(),
            out_after_persist: Vec::new(),
            out_read_states: Vec::new(),
            out_dropped_reads: Vec::new(),
            out_snapshot_chunks: Vec::new(),
            out_snapshot: None,
            out_compact_through: None,
            out_log_reads: Vec::new(),
            snapshot_wanted: false,
            snapshot_wanted_reported: false,
            broadcast_pending: false,
            commit_notice_due: None,
            role_reported: RoleChange {
                role: Role::Follower,
                term,
                leader: None,
            },
            messages_dropped: 0,
            config,
        };
        core.reset_election_deadline();
        Ok(core)
    }

    /// Starts a new cluster on a pristine server: appends the Membership entry at index 1,
    /// term 1. Every server of a `bootstrap-expect` set must call this with the same
    /// membership so they all hold the identical first entry.
    ///
    /// Pristine means no log entry and no snapshot. A durable hard state alone does not count:
    /// the first write carries the hard state together with the bootstrap entry, and a torn
    /// write may keep only the former; bootstrapping again then re-creates the same entry.
    pub fn bootstrap(&mut self, membership: Membership) -> Result<(), RaftError> {
        if self.log.last_index() != 0 || self.log.snapshot.last_index != 0 {
            return Err(RaftError::NotPristine);
        }
        if membership.voter_count() == 0 {
            return Err(RaftError::InvalidMembership("no voters".to_string()));
        }
        if membership.members.len() > MEMBERS_MAX {
            return Err(RaftError::InvalidMembership(format!(
                "more than {MEMBERS_MAX} members"
            )));
        }
        self.term = self.term.max(1);
        self.log.append([Entry {
            index: 1,
            term: 1,
            kind: EntryKind::Membership,
            data: membership.encode(),
        }]);
        self.configs.push((1, membership));
        Ok(())
    }

    // ----- inputs -----------------------------------------------------------------------

    /// Advances timers: elections for followers and candidates, heartbeats, check-quorum
    /// and transfer timeouts for leaders. Call it at least every heartbeat interval / 2.
    pub fn tick(&mut self, now: Millis) {
        let before = self.seam_state();
        self.tick_timers(now);
        self.assert_seam(before);
    }

    fn tick_timers(&mut self, now: Millis) {
        self.set_now(now);
        if self.role == Role::Leader {
            self.tick_leader();
            return;
        }
        if !self.may_campaign() {
            return;
        }
        // The only voter needs nobody's permission: a `-dev` server leads at once.
        let sole_voter = self.is_voter() && self.membership().voter_count() == 1;
        if sole_voter || self.now >= self.election_deadline {
            self.campaign(false);
        }
    }

    /// Handles one message from peer `from`.
    pub fn step(&mut self, now: Millis, from: NodeId, message: Message) {
        let before = self.seam_state();
        self.step_message(now, from, message);
        self.assert_seam(before);
    }

    fn step_message(&mut self, now: Millis, from: NodeId, message: Message) {
        self.set_now(now);
        if from == self.id || from == 0 {
            self.messages_dropped += 1;
            return;
        }
        if self.reconcile_term(from, &message) {
            // Only a pre-vote's term may run ahead of ours: it is a proposal, not a term.
            debug_assert!(
                message.term() <= self.term
                    || matches!(
                        message,
                        Message::RequestVote { pre_vote: true, .. }
                            | Message::VoteResponse {
                                pre_vote: true,
                                granted: true,
                                ..
                            }
                    )
            );
            self.dispatch(from, message);
        }
    }

    /// Brings our term in line with a message's before it is handled (§5.1): a newer term
    /// makes us a follower (except for a disruptive candidate inside the vote guard, and a
    /// granted pre-vote, whose term is only a proposal); an older one is answered so that a
    /// deposed leader or a stale pre-candidate learns ours. Whether the message goes on to
    /// its handler.
    fn reconcile_term(&mut self, from: NodeId, message: &Message) -> bool {
        let message_term = message.term();
        if message_term > self.term {
            match &message {
                Message::RequestVote {
                    pre_vote,
                    leadership_transfer,
                    ..
                } => {
                    if !leadership_transfer && self.in_vote_guard() {
                        // We hear from a leader: refuse a disruptive candidate and keep our term.
                        self.answer_vote(from, *pre_vote, false, self.term);
                        return false;
                    }
                    if !pre_vote {
                        self.become_follower(message_term, None);
                    }
                }
                // A granted pre-vote carries the term we would campaign in, not a real term.
                Message::VoteResponse {
                    pre_vote: true,
                    granted: true,
                    ..
                } => {}
                Message::AppendEntries { .. }
                | Message::InstallSnapshot { .. }
                | Message::TimeoutNow { .. } => self.become_follower(message_term, Some(from)),
                _ => self.become_follower(message_term, None),
            }
        } else if message_term < self.term {
            match message {
                Message::AppendEntries { .. } | Message::InstallSnapshot { .. } => {
                    // A deposed leader: tell it our term so it steps down.
                    let reply = Message::AppendResponse {
                        term: self.term,
                        match_index: 0,
                        reject: None,
                        read_seq: 0,
                        sent_at: 0,
                    };
                    self.send(from, reply);
                }
                Message::RequestVote { pre_vote: true, .. } => {
                    self.answer_vote(from, true, false, self.term);
                }
                _ => {}
            }
            return false;
        }
        true
    }

    /// Hands a message of our term (or a pre-vote's) to its handler.
    fn dispatch(&mut self, from: NodeId, message: Message) {
        match message {
            Message::RequestVote {
                term,
                last_log_index,
                last_log_term,
                pre_vote,
                ..
            } => self.handle_request_vote(from, term, last_log_index, last_log_term, pre_vote),
            Message::VoteResponse {
                term,
                pre_vote,
                granted,
            } => self.handle_vote_response(from, term, pre_vote, granted),
            Message::AppendEntries {
                prev_log_index,
                prev_log_term,
                entries,
                leader_commit,
                read_seq,
                sent_at,
                ..
            } => {
                if !self.accept_leader(from) {
                    return;
                }
                self.handle_append(
                    from,
                    prev_log_index,
                    prev_log_term,
                    entries,
                    leader_commit,
                    read_seq,
                    sent_at,
                );
            }
            Message::AppendResponse {
                match_index,
                reject,
                read_seq,
                sent_at,
                ..
            } => self.handle_append_response(from, match_index, reject, read_seq, sent_at),
            Message::InstallSnapshot {
                meta,
                total_bytes,
                offset,
                chunk,
                done,
                read_seq,
                sent_at,
                ..
            } => {
                if !self.accept_leader(from) {
                    return;
                }
                self.handle_snapshot_chunk(
                    from,
                    meta,
                    total_bytes,
                    offset,
                    chunk,
                    done,
                    read_seq,
                    sent_at,
                );
            }
            Message::InstallSnapshotResponse {
                snapshot_last_index,
                next_offset,
                gap,
                done,
                read_seq,
                sent_at,
                ..
            } => self.handle_snapshot_response(
                from,
                snapshot_last_index,
                next_offset,
                gap,
                done,
                read_seq,
                sent_at,
            ),
            Message::TimeoutNow { .. } => {
                if self.role != Role::Leader && self.leader == Some(from) && self.may_campaign() {
                    self.become_candidate(true);
                }
            }
        }
    }

    /// Appends a command to the log. Only the leader accepts; the result is the entry's
    /// position. The command is acknowledged once the entry at that index, with that term,
    /// is applied; a different term there means the proposal was lost to a leader change.
    pub fn propose(&mut self, now: Millis, data: Bytes) -> Result<(LogIndex, Term), RaftError> {
        self.set_now(now);
        self.check_accepting_proposals()?;
        if data.len() > self.config.proposal_bytes_max {
            return Err(RaftError::ProposalTooLarge {
                bytes: data.len(),
                bytes_max: self.config.proposal_bytes_max,
            });
        }
        let index = self.append_as_leader(EntryKind::Normal, data);
        debug_assert_eq!(index, self.log.last_index());
        debug_assert_eq!(self.log.term(index), Some(self.term));
        Ok((index, self.term))
    }

    /// Requests a linearizable read point. Once a quorum confirms this server still leads,
    /// `Ready::read_states` carries `context` with the index the store must reach first.
    /// Batch concurrent reads under one context; reads issued before the confirmation
    /// heartbeat leaves share one quorum round anyway.
    pub fn read_index(&mut self, now: Millis, context: u64) -> Result<(), RaftError> {
        self.set_now(now);
        if self.role != Role::Leader {
            return Err(RaftError::NotLeader {
                leader: self.leader,
            });
        }
        let queued = self.reads_pending.len() + self.reads_awaiting_term_commit.len();
        if queued >= self.config.read_requests_pending_max {
            return Err(RaftError::ReadQueueFull {
                reads_max: self.config.read_requests_pending_max,
            });
        }
        if self.log.committed < self.term_start_index {
            // Our commit index may lag the cluster's until our Noop commits.
            self.reads_awaiting_term_commit.push_back(context);
        } else {
            self.start_read(context);
        }
        debug_assert!(
            self.reads_pending.len() + self.reads_awaiting_term_commit.len()
                <= self.config.read_requests_pending_max
        );
        Ok(())
    }

    /// `Some(t)` while this server leads and no other leader can exist before `t` (on this
    /// server's clock): a quorum acknowledged messages sent at `t - lease_ms` or later, and
    /// those voters refuse ordinary elections for an election timeout after receiving them.
    /// The store is also known to hold every write acknowledged by earlier leaders. Compare
    /// `t` with the current time before serving a read locally.
    pub fn leader_lease_until(&self) -> Option<Millis> {
        // A leader removing itself has no lease: the remaining voters follow the new
        // configuration, in which a sole voter may elect itself at once.
        if self.role != Role::Leader
            || !self.config.check_quorum
            || self.lease_revoked
            || self.transfer.is_some()
            || self.log.applied < self.term_start_index
            || !self.is_voter()
        {
            return None;
        }
        let acked = self.quorum_value(Some(Millis::MAX), |pr| pr.acked_sent_at)?;
        // Only our own `sent_at`s are echoed, and only those not from the future.
        debug_assert!(acked <= self.now || acked == Millis::MAX);
        Some(acked.saturating_add(self.config.lease_ms))
    }

    /// Hands leadership to `to` (or the most up-to-date voter): once it has caught up it
    /// receives TimeoutNow and wins an immediate election. Proposals are refused meanwhile;
    /// the transfer is abandoned after an election timeout.
    pub fn transfer_leadership(
        &mut self,
        now: Millis,
        to: Option<NodeId>,
    ) -> Result<(), RaftError> {
        self.set_now(now);
        if self.role != Role::Leader {
            return Err(RaftError::NotLeader {
                leader: self.leader,
            });
        }
        if let Some(transfer) = &self.transfer {
            return Err(RaftError::LeadershipTransferInProgress { to: transfer.to });
        }
        let target = match to {
            Some(id) => id,
            None => {
                let best = self
                    .membership()
                    .voters()
                    .filter(|&id| id != self.id)
                    .max_by_key(|id| {
                        (
                            self.progress.get(id).map_or(0, |pr| pr.match_index),
                            u64::MAX - id,
                        )
                    });
                match best {
                    Some(id) => id,
                    None => {
                        return Err(RaftError::InvalidTransferTarget(
                            "no other voter".to_string(),
                        ))
                    }
                }
            }
        };
        if target == self.id {
            return Ok(());
        }
        if !self.membership().is_voter(target) {
            return Err(RaftError::InvalidTransferTarget(format!(
                "{target} is not a voter"
            )));
        }
        debug_assert!(target != self.id && self.progress.contains_key(&target));
        self.transfer = Some(Transfer {
            to: target,
            deadline: self.now + self.config.election_timeout_ms,
            timeout_now_sent: false,
        });
        if !self.maybe_send_timeout_now() {
            self.send_appends(target);
        }
        Ok(())
    }

    /// Proposes a single-server membership change; it takes effect as soon as it is
    /// appended. Refused while an earlier change is uncommitted, and until this leader has
    /// committed an entry of its own term.
    pub fn propose_membership_change(
        &mut self,
        now: Millis,
        change: MembershipChange,
    ) -> Result<LogIndex, RaftError> {
        self.set_now(now);
        self.check_accepting_proposals()?;
        if self.log.committed < self.term_start_index {
            return Err(RaftError::LeaderNotReady);
        }
        let pending_index = self.membership_index();
        if pending_index > self.log.committed {
            return Err(RaftError::MembershipChangePending {
                index: pending_index,
            });
        }
        let invalid = |why: String| Err(RaftError::InvalidMembershipChange(why));
        let mut next = self.membership().clone();
        match change {
            MembershipChange::AddVoter { id: 0, .. }
            | MembershipChange::AddNonvoter { id: 0, .. } => {
                return invalid("id 0 is reserved".to_string());
            }
            MembershipChange::AddVoter { id, name, address } => {
                if next.is_voter(id) {
                    return invalid(format!("{id} is already a voter"));
                }
                next.members.insert(
                    id,
                    Member {
                        voter: true,
                        name,
                        address,
                    },
                );
            }
            MembershipChange::AddNonvoter { id, name, address } => {
                if next.contains(id) {
                    return invalid(format!("{id} is already a member"));
                }
                next.members.insert(
                    id,
                    Member {
                        voter: false,
                        name,
                        address,
                    },
                );
            }
            MembershipChange::Promote { id } => match next.members.get_mut(&id) {
                None => return invalid(format!("{id} is not a member")),
                Some(member) if member.voter => return invalid(format!("{id} is already a voter")),
                Some(member) => member.voter = true,
            },
            MembershipChange::Remove { id } => {
                if !next.contains(id) {
                    return invalid(format!("{id} is not a member"));
                }
                if next.is_voter(id) && next.voter_count() == 1 {
                    return invalid("cannot remove the last voter".to_string());
                }
                next.members.remove(&id);
            }
        }
        if next.members.len() > MEMBERS_MAX {
            return invalid(format!("more than {MEMBERS_MAX} members"));
        }
        debug_assert!(next.voter_count() > 0, "a change left no voter");
        let index = self.append_as_leader(EntryKind::Membership, next.encode());
        debug_assert_eq!(self.membership_index(), index);
        Ok(index)
    }

    /// The driver made a snapshot of the store at `meta.last_index` (at most the applied
    /// index) durable. The core keeps `data` to send to lagging followers and compacts its
    /// log, keeping `trailing_entries` below the snapshot. `meta.membership` is filled in by
    /// the core from its own record (see [`RaftCore::snapshot_meta`]). After a restart from a
    /// snapshot, call this with the restored snapshot so the core can serve it.
    /// A stale (older than the current snapshot) or inconsistent `meta` is ignored.
    pub fn snapshot_taken(&mut self, meta: SnapshotMeta, data: Bytes) {
        let index = meta.last_index;
        if index < self.log.snapshot.last_index || index > self.log.applied {
            debug_assert!(
                index <= self.log.applied,
                "snapshot beyond the applied index"
            );
            return;
        }
        if self.log.term(index) != Some(meta.last_term) {
            debug_assert!(false, "snapshot term does not match the log");
            return;
        }
        let meta = SnapshotMeta {
            last_index: index,
            last_term: meta.last_term,
            membership: self.membership_at(index).clone(),
        };
        self.snapshot_data = Some((meta.clone(), data));
        self.snapshot_wanted = false;
        self.snapshot_wanted_reported = false;
        if index > self.log.snapshot.last_index {
            self.log.snapshot = meta;
            let through = index.saturating_sub(self.config.trailing_entries);
            if through >= self.log.first_index() {
                self.log.compact(through);
                self.out_compact_through = Some(through);
            }
            let keep_from = self
                .configs
                .iter()
                .rposition(|(at, _)| *at <= index)
                .unwrap_or(0);
            self.configs.drain(..keep_from);
        }
        debug_assert!(self.configs.first().is_some_and(|(at, _)| *at <= index));
        debug_assert!(self.log.first_index() <= self.log.applied + 1);
    }

    /// The metadata for a snapshot of the store at `applied_index`: its term and the
    /// membership in force there. `None` if that index is not in the log any more.
    pub fn snapshot_meta(&self, applied_index: LogIndex) -> Option<SnapshotMeta> {
        if applied_index > self.log.applied || applied_index < self.log.snapshot.last_index {
            return None;
        }
        Some(SnapshotMeta {
            last_index: applied_index,
            last_term: self.log.term(applied_index)?,
            membership: self.membership_at(applied_index).clone(),
        })
    }

    // ----- outputs ----------------------------------------------------------------------

    pub fn has_ready(&self) -> bool {
        self.hard_state() != self.hard_state_handed_out
            || self.log.has_unstable()
            || self.out_snapshot.is_some()
            || !self.out_snapshot_chunks.is_empty()
            || !self.out_messages.is_empty()
            || !self.out_after_persist.is_empty()
            || (self.snapshot_restore_pending.is_none()
                && self.log.applicable() > self.log.committed_handed_out)
            || !self.out_read_states.is_empty()
            || !self.out_dropped_reads.is_empty()
            || self.role_reported.role != self.role
            || self.role_reported.leader != self.leader
            || self.out_compact_through.is_some()
            || !self.out_log_reads.is_empty()
            || (self.snapshot_wanted && !self.snapshot_wanted_reported)
            || (self.role == Role::Leader
                && (self.broadcast_pending || self.read_broadcast_pending))
    }

    /// Collects everything the driver must do now. See [`Ready`] for the order.
    pub fn ready(&mut self) -> Ready {
        self.check_invariants();
        let handed_out_before = self.hard_state_handed_out;
        if self.role == Role::Leader {
            self.flush_leader_messages();
        }
        let hard_state = self.hard_state();
        let hard_state = (hard_state != self.hard_state_handed_out).then(|| {
            self.hard_state_handed_out = hard_state;
            hard_state
        });
        let snapshot = self.out_snapshot.take();
        let truncate_from = self.log.pending_truncate.take();
        let entries = self.log.take_unstable();
        let mut committed = Vec::new();
        if self.snapshot_restore_pending.is_none() {
            let through = self.log.applicable();
            if through > self.log.committed_handed_out {
                committed = self.log.slice(self.log.committed_handed_out + 1, through);
                self.log.committed_handed_out = through;
            }
        }
        let role_changed = (self.role_reported.role != self.role
            || self.role_reported.leader != self.leader)
            .then(|| {
                self.role_reported = RoleChange {
                    role: self.role,
                    term: self.term,
                    leader: self.leader,
                };
                self.role_reported
            });
        let snapshot_wanted = self.snapshot_wanted && !self.snapshot_wanted_reported;
        if snapshot_wanted {
            self.snapshot_wanted_reported = true;
        }
        // What reaches the disk: a term that never goes back, one vote per term.
        if let Some(hard_state) = hard_state {
            debug_assert!(
                hard_state.term >= handed_out_before.term,
                "the term went back"
            );
            debug_assert!(
                hard_state.term > handed_out_before.term
                    || handed_out_before.vote.is_none()
                    || hard_state.vote == handed_out_before.vote,
                "the vote changed within term {}",
                hard_state.term
            );
            debug_assert!(hard_state.commit >= handed_out_before.commit);
        }
        // Entries handed out follow one another, and none is from a term not yet reached.
        debug_assert!(entries
            .windows(2)
            .all(|pair| pair[1].index == pair[0].index + 1 && pair[1].term >= pair[0].term));
        debug_assert!(entries.last().is_none_or(|e| e.term <= self.term));
        // Entries to apply are committed, durable and contiguous.
        debug_assert!(committed
            .last()
            .is_none_or(|e| e.index <= self.log.committed && e.index <= self.log.persisted));
        debug_assert!(committed
            .windows(2)
            .all(|pair| pair[1].index == pair[0].index + 1));
        self.check_invariants();
        Ready {
            hard_state,
            truncate_from,
            entries,
            snapshot_chunks: std::mem::take(&mut self.out_snapshot_chunks),
            snapshot,
            messages: std::mem::take(&mut self.out_messages),
            messages_after_persist: std::mem::take(&mut self.out_after_persist),
            committed,
            read_states: std::mem::take(&mut self.out_read_states),
            dropped_reads: std::mem::take(&mut self.out_dropped_reads),
            role_changed,
            compact_through: self.out_compact_through.take(),
            snapshot_wanted,
            log_reads: std::mem::take(&mut self.out_log_reads),
        }
    }

    /// Reports what the driver did with one or more Readys.
    pub fn advance(&mut self, now: Millis, done: ReadyDone) {
        let before = self.seam_state();
        self.advance_reported(now, done);
        debug_assert!(self.log.persisted <= self.log.handed_out);
        debug_assert!(self.log.applied <= self.log.committed_handed_out);
        self.assert_seam(before);
    }

    fn advance_reported(&mut self, now: Millis, done: ReadyDone) {
        self.set_now(now);
        if let Some(index) = done.snapshot_restored {
            if self.snapshot_restore_pending == Some(index) {
                self.snapshot_restore_pending = None;
                self.log.applied = self.log.applied.max(index);
                self.log.persisted = self.log.persisted.max(index);
            }
        }
        if let Some((index, term)) = done.persisted_through {
            if index > self.log.persisted
                && index <= self.log.handed_out
                && self.log.term(index) == Some(term)
            {
                self.log.persisted = index;
            }
        }
        let applied = done.applied_through.min(self.log.committed_handed_out);
        if applied > self.log.applied {
            self.log.applied = applied;
        }
        if self.role == Role::Leader {
            self.maybe_commit();
        }
        self.evict_log_cache();
    }

    /// The driver read back what a [`Ready::log_reads`] asked for: `entries` from `read.from`
    /// on, or `Err` when the durable log no longer has them (the peer then gets a snapshot).
    /// Entries that do not match the log's terms are refused the same way. An answer to a
    /// read that is no longer outstanding is ignored.
    pub fn log_read_done(
        &mut self,
        now: Millis,
        read: LogRead,
        entries: Result<Vec<Entry>, String>,
    ) {
        let before = self.seam_state();
        self.take_log_read(now, read, entries);
        self.assert_seam(before);
    }

    fn take_log_read(&mut self, now: Millis, read: LogRead, entries: Result<Vec<Entry>, String>) {
        self.set_now(now);
        if self.role != Role::Leader {
            return;
        }
        let to = read.to;
        let Some(pr) = self.progress.get_mut(&to) else {
            return;
        };
        if pr.log_read.map(|(from, _)| from) != Some(read.from) {
            return;
        }
        pr.log_read = None;
        let usable = entries.ok().filter(|entries| {
            // The entry before them must still be known to check the peer's log against.
            self.log.term(read.from - 1).is_some()
                && !entries.is_empty()
                && entries.len() as u64 <= read.through + 1 - read.from
                && (read.from..)
                    .zip(entries)
                    .all(|(index, e)| e.index == index && self.log.term(index) == Some(e.term))
        });
        let Some(entries) = usable else {
            // Gone from the durable log, or compacted away while the read ran (the terms
            // are no longer known): only a snapshot brings the peer past them now.
            self.start_snapshot(to);
            return;
        };
        let pr = &self.progress[&to];
        if pr.state == ReplicationState::Snapshot || pr.next_index != read.from {
            // The peer moved on meanwhile; carry on from where it is now.
            self.send_appends(to);
            return;
        }
        if self.send_entries(to, entries) {
            self.send_appends(to);
        }
    }

    pub fn status(&self) -> Status {
        let membership = self.membership().clone();
        let peers = self
            .progress
            .iter()
            .map(|(&id, pr)| PeerStatus {
                id,
                voter: membership.is_voter(id),
                match_index: pr.match_index,
                next_index: pr.next_index,
                state: pr.state,
                last_contact: pr.last_contact,
            })
            .collect();
        Status {
            id: self.id,
            role: self.role,
            term: self.term,
            vote: self.vote,
            leader: self.leader,
            commit: self.log.committed,
            applied: self.log.applied,
            persisted: self.log.persisted,
            first_index: self.log.first_index(),
            cache_first_index: self.log.cache_first_index(),
            cached_log_bytes: self.log.cached_bytes(),
            last_index: self.log.last_index(),
            last_term: self.log.last_term(),
            snapshot_index: self.log.snapshot.last_index,
            membership,
            membership_index: self.membership_index(),
            peers,
            leadership_transfer_to: self.transfer.as_ref().map(|t| t.to),
            messages_dropped: self.messages_dropped,
        }
    }

    // ----- small accessors (also used by tests and the simulator) ------------------------

    pub fn id(&self) -> NodeId {
        self.id
    }
    pub fn role(&self) -> Role {
        self.role
    }
    pub fn term(&self) -> Term {
        self.term
    }
    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }
    pub fn commit_index(&self) -> LogIndex {
        self.log.committed
    }
    pub fn applied_index(&self) -> LogIndex {
        self.log.applied
    }
    pub fn last_index(&self) -> LogIndex {
        self.log.last_index()
    }
    /// The term of the entry at `index`, if the log still knows it.
    pub fn log_term(&self, index: LogIndex) -> Option<Term> {
        self.log.term(index)
    }
    /// The entry at `index`, if held in memory.
    pub fn log_entry(&self, index: LogIndex) -> Option<&Entry> {
        self.log.entry(index)
    }
    pub fn first_log_index(&self) -> LogIndex {
        self.log.first_index()
    }
    pub fn snapshot_index(&self) -> LogIndex {
        self.log.snapshot.last_index
    }
    /// The membership in force (the latest appended).
    pub fn membership(&self) -> &Membership {
        &self
            .configs
            .last()
            .expect("there is always a configuration")
            .1
    }
    /// The index of the entry that set the membership in force.
    pub fn membership_index(&self) -> LogIndex {
        self.configs
            .last()
            .expect("there is always a configuration")
            .0
    }
    pub fn config(&self) -> &RaftConfig {
        &self.config
    }
    /// Until when this server refuses to vote for an ordinary (non-transfer) candidate: an
    /// election timeout after it last heard from a leader, or after it started. `None` without
    /// check-quorum. A leader's lease is sound only while a quorum of its voters is guarded.
    pub fn vote_guard_until(&self) -> Option<Millis> {
        if !self.config.check_quorum {
            return None;
        }
        if self.role == Role::Leader {
            return Some(Millis::MAX);
        }
        Some(self.vote_guard_until)
    }
    /// Messages dropped as malformed or inconsistent (see [`Status::messages_dropped`]).
    pub fn messages_dropped(&self) -> u64 {
        self.messages_dropped
    }

    // ----- internals: assertions --------------------------------------------------------

    // ----- internals: roles -------------------------------------------------------------

    fn set_now(&mut self, now: Millis) {
        // The driver's clock is monotonic; tolerate equal or (defensively) older readings.
        self.now = self.now.max(now);
    }

    fn hard_state(&self) -> HardState {
        HardState {
            term: self.term,
            vote: self.vote,
            commit: self.log.committed,
        }
    }

    fn is_voter(&self) -> bool {
        self.membership().is_voter(self.id)
    }

    fn membership_at(&self, index: LogIndex) -> &Membership {
        self.configs
            .iter()
            .rev()
            .find(|(at, _)| *at <= index)
            .map_or(&self.configs[0].1, |(_, m)| m)
    }

    // ----- internals: votes -------------------------------------------------------------

    // ----- internals: follower side of replication ---------------------------------------

    // ----- internals: leader side -------------------------------------------------------
}
