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
                        return;
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
            return;
        }

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

    fn seam_state(&self) -> SeamState {
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
    fn assert_seam(&self, before: SeamState) {
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
    fn check_invariants(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let log = &self.log;
        let last = log.last_index();
        // The log's indexes in their order: snapshot ≤ applied ≤ handed to apply ≤ commit ≤
        // last, and durable ≤ handed to the driver ≤ last.
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

        // Configurations: one at least, in strictly increasing log order, none past the
        // last index.
        debug_assert!(!self.configs.is_empty());
        let configs_scanned = self.configs.len().min(INVARIANT_SCAN_MAX);
        let recent_configs = &self.configs[self.configs.len() - configs_scanned..];
        debug_assert!(recent_configs.windows(2).all(|pair| pair[0].0 < pair[1].0));
        debug_assert!(self.membership_index() <= last);

        // Votes are counted only while campaigning; the vote of a candidate is its own.
        match self.role {
            Role::PreCandidate => debug_assert_eq!(self.leader, None),
            Role::Candidate => {
                debug_assert_eq!(self.leader, None);
                debug_assert_eq!(self.vote, Some(self.id));
            }
            Role::Follower | Role::Leader => debug_assert!(self.votes.is_empty()),
        }

        if self.role != Role::Leader {
            // A leader's state goes with its leadership.
            debug_assert!(self.progress.is_empty());
            debug_assert!(self.transfer.is_none());
            debug_assert!(self.reads_pending.is_empty());
            debug_assert!(self.reads_awaiting_term_commit.is_empty());
            debug_assert_eq!(self.term_start_index, 0);
            return;
        }
        // A leader voted for itself in its term and never for another.
        debug_assert_eq!(self.vote, Some(self.id), "a leader that voted for another");
        debug_assert_eq!(self.leader, Some(self.id));
        debug_assert!(self.term_start_index > 0 && self.term_start_index <= last);
        debug_assert!(log
            .term(self.term_start_index)
            .is_none_or(|term| term == self.term));
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
        // At most one configuration change of this leader's in flight: it proposes the next
        // only once the last is committed.
        let uncommitted_own = recent_configs
            .iter()
            .filter(|(at, _)| *at >= self.term_start_index && *at > log.committed)
            .count();
        debug_assert!(
            uncommitted_own <= 1,
            "{uncommitted_own} configuration changes in flight"
        );
        debug_assert!(self
            .transfer
            .as_ref()
            .is_none_or(|t| t.to != self.id && self.membership().is_voter(t.to)));
        let mut previous_seq = 0;
        for read in self.reads_pending.iter().take(INVARIANT_SCAN_MAX) {
            debug_assert!(read.index <= log.committed && read.index >= self.term_start_index);
            debug_assert!(read.seq >= previous_seq && read.seq <= self.read_seq);
            previous_seq = read.seq;
        }
    }

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

    /// Voters campaign; so does a voter whose removal is appended but not committed. It
    /// may hold the longest log, which the remaining voters need to elect anyone; it counts
    /// the votes of its latest configuration and steps down once the removal commits
    /// (Ongaro's thesis §4.2.2: it is a legitimate leader until then).
    fn may_campaign(&self) -> bool {
        if self.is_voter() {
            return true;
        }
        let count = self.configs.len();
        count >= 2
            && self.membership_index() > self.log.committed
            && self.configs[count - 2].1.is_voter(self.id)
    }

    fn membership_at(&self, index: LogIndex) -> &Membership {
        self.configs
            .iter()
            .rev()
            .find(|(at, _)| *at <= index)
            .map_or(&self.configs[0].1, |(_, m)| m)
    }

    fn in_vote_guard(&self) -> bool {
        self.config.check_quorum && (self.role == Role::Leader || self.now < self.vote_guard_until)
    }

    fn reset_election_deadline(&mut self) {
        let timeout = self.config.election_timeout_ms;
        self.election_deadline = self.now + timeout + self.rng.below(timeout);
    }

    fn heard_from_leader(&mut self) {
        self.reset_election_deadline();
        if self.config.check_quorum {
            self.vote_guard_until = self.now + self.config.election_timeout_ms;
        }
    }

    /// The largest value that a quorum of voters has reached; `self_value` stands for this
    /// server, `peer_value` for the others.
    fn quorum_value(
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

    fn become_follower(&mut self, term: Term, leader: Option<NodeId>) {
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

    fn abandon_leadership(&mut self) {
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

    fn campaign(&mut self, leadership_transfer: bool) {
        if !self.may_campaign() {
            return;
        }
        if self.config.pre_vote && !leadership_transfer {
            self.become_pre_candidate();
        } else {
            self.become_candidate(leadership_transfer);
        }
    }

    fn become_pre_candidate(&mut self) {
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

    fn become_candidate(&mut self, leadership_transfer: bool) {
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

    fn tally_votes(&self) -> VoteTally {
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

    fn become_leader(&mut self) {
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

    fn tick_leader(&mut self) {
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

    // ----- internals: votes -------------------------------------------------------------

    fn answer_vote(&mut self, to: NodeId, pre_vote: bool, granted: bool, term: Term) {
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

    fn handle_request_vote(
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

    fn handle_vote_response(&mut self, from: NodeId, term: Term, pre_vote: bool, granted: bool) {
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

    // ----- internals: follower side of replication ---------------------------------------

    /// Accepts `from` as this term's leader; false if that is impossible (we lead ourselves).
    fn accept_leader(&mut self, from: NodeId) -> bool {
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

    fn entries_well_formed(
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
    fn handle_append(
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
    fn follower_append(&mut self, entries: Vec<Entry>) -> bool {
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

    fn push_config(&mut self, index: LogIndex, data: &[u8]) {
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

    #[allow(clippy::too_many_arguments)]
    fn handle_snapshot_chunk(
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
    fn install_snapshot(&mut self, meta: SnapshotMeta) {
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

    // ----- internals: leader side -------------------------------------------------------

    fn check_accepting_proposals(&self) -> Result<(), RaftError> {
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

    fn append_entry(&mut self, kind: EntryKind, data: Bytes) -> LogIndex {
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

    fn append_as_leader(&mut self, kind: EntryKind, data: Bytes) -> LogIndex {
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

    fn on_leader_membership_changed(&mut self) {
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

    fn maybe_commit(&mut self) {
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

    fn on_commit_advanced(&mut self) {
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
    fn step_down_after_removal(&mut self) {
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

    fn start_read(&mut self, context: u64) {
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

    fn advance_reads(&mut self) {
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
    fn note_peer_answer(&mut self, from: NodeId, read_seq: u64, sent_at: Millis) -> bool {
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

    fn handle_append_response(
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

    #[allow(clippy::too_many_arguments)]
    fn handle_snapshot_response(
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

    fn maybe_send_timeout_now(&mut self) -> bool {
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

    fn flush_leader_messages(&mut self) {
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
    fn send_commit_notices(&mut self) {
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

    fn broadcast_heartbeat(&mut self) {
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
    fn send_empty_append(&mut self, to: NodeId, prev_index: LogIndex) {
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
    fn send_appends(&mut self, to: NodeId) {
        while self.send_append(to, false) {}
    }

    /// Sends one append to `to` if flow control allows; true if something was sent and
    /// more might follow.
    fn send_append(&mut self, to: NodeId, allow_empty: bool) -> bool {
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
    fn send_entries(&mut self, to: NodeId, entries: Vec<Entry>) -> bool {
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
    fn evict_log_cache(&mut self) {
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

    fn start_snapshot(&mut self, to: NodeId) {
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
    fn send_snapshot_chunks(&mut self, to: NodeId) {
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

    fn send(&mut self, to: NodeId, message: Message) {
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

    fn send_after_persist(&mut self, to: NodeId, message: Message) {
        self.out_after_persist.push((to, message));
    }
}
