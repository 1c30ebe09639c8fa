//! The [`Replica`] itself: its state, [`Replica::step`], the handling of each `Ready`, the
//! sync bookkeeping and the publish decision. The leader's duties are in `duties.rs`.
//!
//! Invariants kept here (and asserted by `check_invariants` after every step): the store's
//! index never exceeds the core's commit index; the commit index and the published index
//! never go backwards; every Ready taken is advanced once before the next is taken; the
//! sync sequence numbers complete in order and nothing waits for a sync that completed; a
//! proposal leaves `pending` exactly when its result is routed.

use super::{
    shard_of_request, AppliedBatch, ClusterStatus, Effect, Fatal, Input, Now, ProposalResult,
    Recovered, ReplicaConfig, ServerInfo, SessionTimers,
};
use crate::raft::{
    EntryKind, LogIndex, Membership, Message, NodeId, RaftCore, RaftError, Ready, ReadyDone,
    Restored, Role, SnapshotMeta, Term,
};
use crate::store::command::{split_stamp, stamp_entry};
use crate::store::{Change, Command, CommandResult, StoreVersion, Tables};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

/// What a written but not yet synced Ready still owes once its sync (or a later one) is done.
#[derive(Debug)]
struct AwaitingSync {
    sequence: u64,
    persisted_through: Option<(LogIndex, Term)>,
    messages: Vec<(NodeId, Message)>,
}

/// The raft thread's decisions as a pure state machine. See the module documentation.
pub struct Replica {
    pub(super) core: RaftCore,
    /// The authoritative store; a shard holds an older `Arc` while it reads, so applying
    /// copies on write.
    pub(super) tables: StoreVersion,
    pub(super) config: ReplicaConfig,
    /// The clocks of the step being processed.
    pub(super) now: Now,
    started: bool,
    /// Effects accumulated since the driver last drained them.
    pub(super) effects: Vec<Effect>,
    /// Proposals waiting for their entry: index → (term, request id).
    pub(super) pending: BTreeMap<LogIndex, (Term, u64)>,
    /// Results that cannot wait for an applied batch (refused requests), per shard.
    pub(super) immediate_results: Vec<Vec<(u64, ProposalResult)>>,
    /// Read requests that arrived since the last tick and still need a quorum round.
    pub(super) reads_unsent: Vec<u64>,
    /// Read contexts sent to the core, waiting for confirmation.
    reads_confirming: HashMap<u64, Vec<u64>>,
    /// Confirmed reads waiting for the store to reach their index, in index order.
    reads_applying: VecDeque<(LogIndex, Vec<u64>)>,
    next_read_context: u64,
    pub(super) membership: Membership,
    pub(super) role: Role,
    pub(super) leader: Option<NodeId>,
    pub(super) term: Term,
    /// Term and vote as last written with a sync requested; a hard state that differs only
    /// in its commit index is written without a sync of its own.
    durable_term_vote: (Term, Option<NodeId>),
    /// Sequence number of the last sync handed out, and of the last one known complete.
    sync_requested: u64,
    sync_completed: u64,
    /// Readys written but not yet synced, oldest first; their sequences never decrease.
    awaiting_sync: VecDeque<AwaitingSync>,
    /// Index of this leader's first entry (its no-op); `None` when not leading.
    pub(super) leader_term_start: Option<LogIndex>,
    pub(super) last_snapshot_index: LogIndex,
    pub(super) snapshot_in_progress: bool,
    /// The index of a snapshot from the leader being restored in the background.
    restoring: Option<LogIndex>,
    /// Index samples for tombstone reaping: (monotonic ms, applied index), oldest first.
    pub(super) tombstone_samples: VecDeque<(u64, LogIndex)>,
    pub(super) last_tombstone_sample_ms: u64,
    pub(super) last_reconcile_ms: u64,
    /// Servers as gossip last reported them, by raft id.
    pub(super) servers: BTreeMap<NodeId, ServerInfo>,
    /// The leader's autopilot: each server's health and when it last changed.
    pub(super) autopilot: super::autopilot::Autopilot,
    pub(super) published_status: Arc<ClusterStatus>,
    /// TTL timers of sessions; kept only while leading.
    pub(super) session_timers: SessionTimers,
    /// The index of the last [`Effect::PublishIndex`].
    published_index: LogIndex,
    /// The core's commit index at the end of the previous step.
    commit_seen: LogIndex,
    /// Readys taken from the core and Readys advanced; equal between steps.
    readys_taken: u64,
    readys_advanced: u64,
}

/// The store as the snapshot holds it (empty without one); a snapshot whose store is not at
/// the index its metadata claims is refused.
fn tables_from_snapshot(snapshot: Option<&(SnapshotMeta, Bytes)>) -> Result<Tables, String> {
    let Some((meta, data)) = snapshot else {
        return Ok(Tables::default());
    };
    let tables = Tables::from_snapshot_bytes(data)?;
    if tables.index != meta.last_index {
        return Err(format!(
            "snapshot claims index {} but its store is at {}",
            meta.last_index, tables.index
        ));
    }
    Ok(tables)
}

/// This server as the server list first knows it: alive, from its own configuration.
fn local_server(config: &ReplicaConfig) -> ServerInfo {
    ServerInfo {
        raft_id: config.raft.id,
        node_id: config.node_id.clone(),
        name: config.node_name.clone(),
        rpc_address: config.rpc_address.clone(),
        datacenter: config.datacenter.clone(),
        expect: config.bootstrap_expect,
        alive: true,
        left: false,
    }
}

impl Replica {
    /// Builds the replica from durable state: restores the store from the snapshot, the core
    /// from the hard state, the snapshot's metadata and the log, and bootstraps a pristine
    /// single-server group when configured to. `rng_seed` seeds the core's election timers.
    pub fn open(
        config: ReplicaConfig,
        recovered: Recovered,
        rng_seed: u64,
        now: Now,
    ) -> Result<Replica, String> {
        let Recovered {
            hard_state,
            entries,
            snapshot,
        } = recovered;
        let tables = tables_from_snapshot(snapshot.as_ref())?;
        // Pristine as the core defines it: no entry and no snapshot. A durable hard state
        // alone does not count: the first write carries it together with the bootstrap
        // entry, and a torn write may keep only the hard state; a single-server group then
        // bootstraps again (the same entry), instead of waiting forever for a leader.
        let pristine = entries.is_empty() && snapshot.is_none();
        let last_snapshot_index = snapshot.as_ref().map_or(0, |(meta, _)| meta.last_index);
        let restored = Restored {
            hard_state,
            snapshot: snapshot.as_ref().map(|(meta, _)| meta.clone()),
            entries,
        };
        let mut core = RaftCore::try_new(config.raft.clone(), restored, rng_seed, now.monotonic_ms)
            .map_err(|e| format!("cannot start raft: {e}"))?;
        // The core keeps the snapshot it may have to send to lagging followers; after a
        // restart it learns it from us.
        if let Some((meta, data)) = snapshot {
            core.snapshot_taken(meta, data);
        }
        let mut effects = Vec::new();
        if pristine && config.bootstrap_single {
            let membership =
                Membership::single_voter(config.raft.id, &config.node_name, &config.rpc_address);
            core.bootstrap(membership)
                .map_err(|e| format!("cannot bootstrap: {e}"))?;
            effects.push(Effect::Log {
                level: log::Level::Info,
                text: "raft: bootstrapped a single-server cluster".to_string(),
            });
        }
        let membership = core.membership().clone();
        let servers = BTreeMap::from([(config.raft.id, local_server(&config))]);
        let commit_seen = core.commit_index();
        let shard_count = config.shard_count;
        let mut replica = Replica {
            core,
            tables: Arc::new(tables),
            now,
            started: false,
            effects,
            pending: BTreeMap::new(),
            immediate_results: vec![Vec::new(); shard_count],
            reads_unsent: Vec::new(),
            reads_confirming: HashMap::new(),
            reads_applying: VecDeque::new(),
            next_read_context: 1,
            membership,
            role: Role::Follower,
            leader: None,
            term: hard_state.term,
            durable_term_vote: (hard_state.term, hard_state.vote),
            sync_requested: 0,
            sync_completed: 0,
            awaiting_sync: VecDeque::new(),
            leader_term_start: None,
            last_snapshot_index,
            snapshot_in_progress: false,
            restoring: None,
            tombstone_samples: VecDeque::new(),
            last_tombstone_sample_ms: now.monotonic_ms,
            last_reconcile_ms: now.monotonic_ms,
            servers,
            autopilot: Default::default(),
            published_status: Arc::new(ClusterStatus::default()),
            session_timers: SessionTimers::default(),
            published_index: 0,
            commit_seen,
            readys_taken: 0,
            readys_advanced: 0,
            config,
        };
        // The transport starts with the configuration's members.
        replica.update_transport();
        replica.published_index = replica.tables.index;
        Ok(replica)
    }

    /// The store version the shards start from (published by the driver before they run).
    pub fn version(&self) -> &StoreVersion {
        &self.tables
    }

    /// The Raft core, for status and for the simulator's checks; read-only.
    pub fn raft(&self) -> &RaftCore {
        &self.core
    }

    /// The index of the last [`Effect::PublishIndex`] (or of the restored store).
    pub fn published_index(&self) -> LogIndex {
        self.published_index
    }

    /// Proposals accepted by the core and not yet answered.
    pub fn pending_proposals(&self) -> usize {
        self.pending.len()
    }

    /// Takes the effects accumulated so far, oldest first. The driver carries them out in
    /// this order before it steps the replica again.
    pub fn drain_effects(&mut self) -> std::vec::Drain<'_, Effect> {
        self.effects.drain(..)
    }

    /// Swaps the accumulated effects into `buffer`, which must be empty, and keeps its
    /// allocation for the next ones: the raft thread's way of taking them without moving
    /// each effect twice.
    pub fn swap_effects(&mut self, buffer: &mut Vec<Effect>) {
        debug_assert!(
            buffer.is_empty(),
            "effects left behind in the driver's buffer"
        );
        std::mem::swap(&mut self.effects, buffer);
    }

    /// Feeds one input at time `now`. Effects accumulate until drained. An `Err` means the
    /// server must stop (see [`Fatal`]); the replica is not to be stepped again.
    pub fn step(&mut self, now: Now, input: Input) -> Result<(), Fatal> {
        debug_assert!(
            now.monotonic_ms >= self.now.monotonic_ms,
            "the monotonic clock went back from {} to {}",
            self.now.monotonic_ms,
            now.monotonic_ms
        );
        debug_assert!(
            self.started != matches!(input, Input::Start),
            "Start must be the first input, and only the first"
        );
        self.now = now;
        match input {
            Input::Start => {
                self.started = true;
                self.process_ready()?;
                self.publish_status(true);
            }
            Input::Propose {
                request_id,
                payload,
            } => self.propose(request_id, &payload),
            Input::ReadIndex { request_id } => self.reads_unsent.push(request_id),
            Input::Message { from, message } => self.receive(from, message),
            Input::Servers(servers) => self.servers_changed(servers),
            Input::Operator { request_id, op } => self.operator(request_id, op),
            Input::Synced { through } => self.complete_syncs(through),
            Input::SnapshotWritten { meta, data } => self.finish_snapshot(meta, data),
            Input::SnapshotRestored { meta, tables, data } => {
                self.finish_install(meta, tables, data)?
            }
            Input::LogRead { read, entries } => {
                // Answered at once: a lagging follower catching up from the durable log gets
                // its next append without waiting for the next tick.
                self.core.log_read_done(self.now_ms(), read, entries);
                self.process_ready()?;
            }
            Input::Tick => self.tick()?,
        }
        self.check_invariants();
        Ok(())
    }

    fn now_ms(&self) -> u64 {
        self.now.monotonic_ms
    }

    pub(super) fn log(&mut self, level: log::Level, text: String) {
        self.effects.push(Effect::Log { level, text });
    }

    fn propose(&mut self, request_id: u64, payload: &[u8]) {
        let stamped = Bytes::from(stamp_entry(self.now.unix_ms, payload));
        match self.core.propose(self.now_ms(), stamped) {
            Ok((index, term)) => {
                let previous = self.pending.insert(index, (term, request_id));
                debug_assert!(previous.is_none(), "two proposals at index {index}");
            }
            Err(error) => self.refuse(request_id, refusal(&error)),
        }
    }

    fn receive(&mut self, from: NodeId, message: Message) {
        if Some(from) == self.leader
            && matches!(
                message,
                Message::AppendEntries { .. } | Message::InstallSnapshot { .. }
            )
        {
            self.effects.push(Effect::LeaderContact {
                at_ms: self.now_ms(),
            });
        }
        self.core.step(self.now_ms(), from, message);
    }

    /// The end of one batch of inputs: the order matches what the driver did before the
    /// replica existed, and every step in it is needed by the one after.
    fn tick(&mut self) -> Result<(), Fatal> {
        self.send_reads();
        self.core.tick(self.now_ms());
        self.process_ready()?;
        self.expire_sessions();
        self.flush_immediate_results();
        self.publish_lease();
        if self.now_ms().saturating_sub(self.last_reconcile_ms) >= super::RECONCILE_INTERVAL_MS {
            self.last_reconcile_ms = self.now_ms();
            self.update_autopilot();
            self.reconcile_membership();
            self.publish_status(true);
            self.maybe_reap_tombstones();
            self.maybe_reap_tokens();
        }
        Ok(())
    }

    pub(super) fn refuse(&mut self, request_id: u64, result: ProposalResult) {
        debug_assert!(
            !matches!(result, ProposalResult::Applied(CommandResult::Bool(true))),
            "a success is not a refusal"
        );
        self.answer_now(request_id, result);
    }

    /// Queues a result that does not wait for an applied batch.
    pub(super) fn answer_now(&mut self, request_id: u64, result: ProposalResult) {
        if let Some(results) = self.immediate_results.get_mut(shard_of_request(request_id)) {
            results.push((request_id, result));
        }
    }

    /// One quorum round for every read that arrived since the last tick.
    fn send_reads(&mut self) {
        if self.reads_unsent.is_empty() {
            return;
        }
        let reads = std::mem::take(&mut self.reads_unsent);
        let context = self.next_read_context;
        self.next_read_context += 1;
        match self.core.read_index(self.now_ms(), context) {
            Ok(()) => {
                let previous = self.reads_confirming.insert(context, reads);
                debug_assert!(previous.is_none(), "read context {context} reused");
            }
            Err(error) => {
                let result = refusal(&error);
                for request_id in reads {
                    self.refuse(request_id, result.clone());
                }
            }
        }
    }

    /// Handles every Ready the core has, in the order `Ready` documents.
    pub(super) fn process_ready(&mut self) -> Result<(), Fatal> {
        while self.core.has_ready() {
            self.process_one_ready()?;
        }
        Ok(())
    }

    /// One Ready: what may leave at once, then the writes and what waits for them, the
    /// role, the applied entries and answered reads, the core advanced, and what follows
    /// from the new state.
    fn process_one_ready(&mut self) -> Result<(), Fatal> {
        debug_assert_eq!(
            self.readys_taken, self.readys_advanced,
            "a Ready was taken before the previous one was advanced"
        );
        let mut ready = self.core.ready();
        self.readys_taken += 1;
        let mut done = ready.done();
        for (to, message) in ready.messages.drain(..) {
            self.effects.push(Effect::Send { to, message });
        }
        for read in ready.log_reads.drain(..) {
            self.effects.push(Effect::ReadLog(read));
        }
        for chunk in ready.snapshot_chunks.drain(..) {
            self.effects.push(Effect::SnapshotChunk(chunk));
        }
        let mut changes: Vec<Change> = Vec::new();
        if let Some(meta) = ready.snapshot.take() {
            // Restored in the background: reported to the core once it is done.
            debug_assert!(
                ready.committed.is_empty(),
                "nothing applies before a restore"
            );
            done.snapshot_restored = None;
            done.applied_through = 0;
            self.install_snapshot(meta);
        }
        let mut persisted_through = done.persisted_through;
        let mut messages_after_persist = std::mem::take(&mut ready.messages_after_persist);
        self.persist(&mut ready);
        // Anything still awaiting a sync implies an outstanding one, so this one test
        // covers both.
        if self.sync_completed < self.sync_requested {
            // This Ready's durable effects follow the writes before it (and its own).
            debug_assert!(self
                .awaiting_sync
                .back()
                .is_none_or(|last| last.sequence <= self.sync_requested));
            self.awaiting_sync.push_back(AwaitingSync {
                sequence: self.sync_requested,
                persisted_through: persisted_through.take(),
                messages: std::mem::take(&mut messages_after_persist),
            });
        }
        for (to, message) in messages_after_persist {
            self.effects.push(Effect::Send { to, message });
        }
        if let Some(change) = ready.role_changed {
            self.on_role_change(change.role, change.term, change.leader);
        }

        let mut results: Vec<Vec<(u64, ProposalResult)>> =
            vec![Vec::new(); self.config.shard_count];
        let mut membership_changed = false;
        if !ready.committed.is_empty() {
            membership_changed =
                self.apply_committed(&ready.committed, &mut changes, &mut results)?;
        }
        self.answer_reads(&ready.read_states, &mut ready.dropped_reads, &mut results);
        let applied_something = !ready.committed.is_empty() || done.snapshot_restored.is_some();
        if applied_something && self.role == Role::Leader {
            self.session_timers
                .observe(&self.tables, &changes, self.now_ms());
        }
        if applied_something || results.iter().any(|r| !r.is_empty()) {
            self.publish(changes, results);
        }
        debug_assert!(
            done.applied_through <= self.tables.index,
            "the Ready reports {} applied but the store is at {}",
            done.applied_through,
            self.tables.index
        );
        self.core.advance(
            self.now_ms(),
            ReadyDone {
                persisted_through,
                ..done
            },
        );
        self.readys_advanced += 1;
        self.follow_membership(membership_changed);
        if applied_something {
            self.publish_status(false);
            self.maybe_snapshot();
        }
        if ready.snapshot_wanted {
            self.start_snapshot();
        }
        Ok(())
    }

    /// Hands a Ready's hard state, truncation and entries to the disk, syncing when they
    /// must be durable before they count.
    fn persist(&mut self, ready: &mut Ready) {
        let hard_state = ready.hard_state;
        if hard_state.is_none() && ready.truncate_from.is_none() && ready.entries.is_empty() {
            return;
        }
        // Term and vote must be durable before anyone hears of them, and entries before
        // they count; the commit index may lag (it is recomputed from the leader after a
        // crash), so a Ready that only moves it rides along with the next sync instead of
        // paying an fdatasync of its own.
        let term_or_vote_moved =
            hard_state.is_some_and(|hs| (hs.term, hs.vote) != self.durable_term_vote);
        let must_sync =
            term_or_vote_moved || ready.truncate_from.is_some() || !ready.entries.is_empty();
        self.effects.push(Effect::Append {
            hard_state,
            truncate_from: ready.truncate_from,
            entries: std::mem::take(&mut ready.entries),
        });
        if !must_sync {
            return;
        }
        if let Some(hs) = hard_state {
            self.durable_term_vote = (hs.term, hs.vote);
        }
        // While leading other voters the fsync runs beside the thread, which keeps taking
        // proposals and sending appends; everyone else waits for the disk anyway, and a
        // hand-off would only add to that.
        if self.role == Role::Leader && self.core.membership().voter_count() > 1 {
            self.sync_in_background();
        } else {
            self.sync_now();
        }
    }

    /// Takes up the core's membership, which moves as soon as a change is appended (not
    /// committed): logged, and the transport and status follow it.
    fn follow_membership(&mut self, membership_changed: bool) {
        if !membership_changed && self.core.membership() == &self.membership {
            return;
        }
        self.membership = self.core.membership().clone();
        let names: Vec<String> = self
            .membership
            .members
            .iter()
            .map(|(id, m)| self.server_name(*id, &m.name))
            .collect();
        let text = format!("raft: configuration is now [{}]", names.join(", "));
        self.log(log::Level::Info, text);
        self.update_transport();
        self.publish_status(false);
    }

    /// Applies committed entries to the store and routes each result. Returns whether a
    /// membership entry was among them.
    fn apply_committed(
        &mut self,
        committed: &[crate::raft::Entry],
        changes: &mut Vec<Change>,
        results: &mut [Vec<(u64, ProposalResult)>],
    ) -> Result<bool, Fatal> {
        let mut membership_changed = false;
        let tables = Arc::make_mut(&mut self.tables);
        for entry in committed {
            debug_assert_eq!(
                entry.index,
                tables.index + 1,
                "committed entries arrive in order and without gaps"
            );
            let result = match entry.kind {
                EntryKind::Normal => {
                    let decoded = split_stamp(&entry.data)
                        .and_then(|(stamp, bytes)| Ok((stamp, Command::decode_borrowed(bytes)?)));
                    match decoded {
                        Ok((stamp, command)) => {
                            if let Some(stamp) = stamp {
                                tables.observe_leader_time(stamp);
                            }
                            tables.apply(entry.index, &command, changes)
                        }
                        // Every server fails the same way on the same bytes, so stopping
                        // here cannot make servers diverge.
                        Err(e) => {
                            return Err(Fatal::new(
                                &format!("undecodable command at index {}", entry.index),
                                e,
                            ))
                        }
                    }
                }
                EntryKind::Noop | EntryKind::Membership => {
                    tables.advance_to(entry.index);
                    CommandResult::Bool(true)
                }
            };
            debug_assert_eq!(
                tables.index, entry.index,
                "apply moved the store to the entry"
            );
            route_result(&mut self.pending, results, entry.index, entry.term, result);
            membership_changed |= entry.kind == EntryKind::Membership;
        }
        Ok(membership_changed)
    }

    /// Moves confirmed reads to wait for their index, fails reads the core dropped, and
    /// answers every confirmed read whose index the store has reached.
    fn answer_reads(
        &mut self,
        read_states: &[crate::raft::ReadState],
        dropped: &mut Vec<u64>,
        results: &mut [Vec<(u64, ProposalResult)>],
    ) {
        for state in read_states {
            if let Some(reads) = self.reads_confirming.remove(&state.context) {
                debug_assert!(
                    self.reads_applying
                        .back()
                        .is_none_or(|(index, _)| *index <= state.index),
                    "read indexes are confirmed in order"
                );
                self.reads_applying.push_back((state.index, reads));
            }
        }
        for context in dropped.drain(..) {
            for request_id in self.reads_confirming.remove(&context).unwrap_or_default() {
                if let Some(list) = results.get_mut(shard_of_request(request_id)) {
                    list.push((request_id, ProposalResult::NotLeader));
                }
            }
        }
        while self
            .reads_applying
            .front()
            .is_some_and(|(index, _)| *index <= self.tables.index)
        {
            let (_, reads) = self.reads_applying.pop_front().expect("front exists");
            for request_id in reads {
                if let Some(list) = results.get_mut(shard_of_request(request_id)) {
                    list.push((
                        request_id,
                        ProposalResult::Applied(CommandResult::Bool(true)),
                    ));
                }
            }
        }
    }

    /// A snapshot from the leader replaces the log and the store.
    /// A snapshot from the leader is complete: the driver stores it and decodes it in the
    /// background ([`Effect::InstallSnapshot`]), and [`Replica::finish_install`] puts the
    /// store in place. The store is not decoded from bytes held here: the pieces went to the
    /// disk as they arrived, so a follower catching up holds the old store and the new one,
    /// never the snapshot's bytes besides.
    fn install_snapshot(&mut self, meta: SnapshotMeta) {
        let index = meta.last_index;
        // The snapshot replaces the whole log, but the log file still holds what this server
        // wrote before, possibly a divergent tail above the snapshot's index. Truncating
        // above it, durably and before the snapshot is stored, keeps that tail from coming
        // back after a restart behind a snapshot of a later term (which recovery refuses);
        // the same sync settles every earlier write.
        self.effects.push(Effect::Append {
            hard_state: None,
            truncate_from: Some(index + 1),
            entries: Vec::new(),
        });
        self.sync_now();
        debug_assert_eq!(self.sync_completed, self.sync_requested);
        self.membership = meta.membership.clone();
        self.update_transport();
        self.last_snapshot_index = self.last_snapshot_index.max(index);
        // A newer snapshot supersedes one still being restored: that one is ignored.
        self.restoring = Some(index);
        self.effects.push(Effect::InstallSnapshot { meta });
        self.log(
            log::Level::Info,
            format!("raft: restoring snapshot at index {index} from the leader"),
        );
    }

    /// The store decoded from the snapshot at `meta.last_index` replaces this one, unless a
    /// newer snapshot superseded it meanwhile.
    fn finish_install(
        &mut self,
        meta: SnapshotMeta,
        tables: Result<Box<Tables>, String>,
        data: Bytes,
    ) -> Result<(), Fatal> {
        let index = meta.last_index;
        if self.restoring != Some(index) {
            return Ok(());
        }
        let tables =
            tables.map_err(|e| Fatal::new("snapshot from the leader does not decode", e))?;
        if tables.index != index {
            return Err(Fatal::new(
                "snapshot from the leader is inconsistent",
                format!(
                    "it claims index {index} but its store is at {}",
                    tables.index
                ),
            ));
        }
        self.restoring = None;
        self.tables = Arc::new(*tables);
        self.core.advance(
            self.now_ms(),
            ReadyDone {
                persisted_through: None,
                snapshot_restored: Some(index),
                applied_through: index,
            },
        );
        // Restored: the core may send it on to followers that fall behind this server.
        self.core.snapshot_taken(meta, data);
        let results = vec![Vec::new(); self.config.shard_count];
        self.publish(crate::store::changes_everywhere(), results);
        self.log(
            log::Level::Info,
            format!("raft: installed snapshot at index {index} from the leader"),
        );
        self.publish_status(false);
        self.process_ready()
    }

    /// Asks for everything buffered to be written and synced off the thread.
    fn sync_in_background(&mut self) {
        self.sync_requested += 1;
        self.effects.push(Effect::SyncInBackground {
            sequence: self.sync_requested,
        });
    }

    /// Writes and syncs on the driver's thread before any later effect, which also makes
    /// every write handed to the background durable (they went to the same file, or to one
    /// synced when it was rolled).
    pub(super) fn sync_now(&mut self) {
        self.sync_requested += 1;
        self.effects.push(Effect::SyncNow);
        self.complete_syncs(self.sync_requested);
    }

    /// Carries out what waited for writes up to sequence number `through` to be durable.
    fn complete_syncs(&mut self, through: u64) {
        debug_assert!(
            through <= self.sync_requested,
            "sync {through} reported but only {} requested",
            self.sync_requested
        );
        if through <= self.sync_completed {
            // A background report overtaken by a sync on this thread.
            return;
        }
        self.sync_completed = through;
        let mut persisted_through = None;
        while self
            .awaiting_sync
            .front()
            .is_some_and(|awaiting| awaiting.sequence <= through)
        {
            let awaiting = self.awaiting_sync.pop_front().expect("front exists");
            persisted_through = awaiting.persisted_through.or(persisted_through);
            for (to, message) in awaiting.messages {
                self.effects.push(Effect::Send { to, message });
            }
        }
        if persisted_through.is_some() {
            self.core.advance(
                self.now_ms(),
                ReadyDone {
                    persisted_through,
                    snapshot_restored: None,
                    applied_through: self.tables.index,
                },
            );
        }
    }

    /// Publishes the current version with its change set and the shards' results. The
    /// published index moves first: a shard may answer a write from this batch as soon as
    /// it is queued there, and a read on another shard must then find the index moved, or
    /// it would skip catching up and miss the acknowledged write. A shard that sees the
    /// index before its batch arrives waits for it (`Shard::catch_up`).
    fn publish(&mut self, changes: Vec<Change>, results: Vec<Vec<(u64, ProposalResult)>>) {
        debug_assert_eq!(results.len(), self.config.shard_count);
        let index = self.tables.index;
        debug_assert!(
            index >= self.published_index,
            "the published index would go back from {} to {index}",
            self.published_index
        );
        let batch = Arc::new(AppliedBatch {
            version: self.tables.clone(),
            changes,
        });
        let has_changes = !batch.changes.is_empty();
        self.published_index = index;
        self.effects.push(Effect::PublishIndex { index });
        for (shard, results) in results.into_iter().enumerate() {
            // The other half of the rule, at the point a shard is given the batch.
            debug_assert!(
                batch.version.index <= self.published_index,
                "the batch at {} is queued while the published index is {}",
                batch.version.index,
                self.published_index
            );
            self.effects.push(Effect::Deliver {
                shard,
                batch: batch.clone(),
                results,
            });
        }
        // A shard rung for its results has a ring pending; ringing it again costs nothing.
        if has_changes {
            self.effects.push(Effect::RingWatchers);
        }
    }

    /// Delivers refusals, with the version every shard already has (it was published).
    fn flush_immediate_results(&mut self) {
        if self.immediate_results.iter().all(Vec::is_empty) {
            return;
        }
        debug_assert_eq!(
            self.tables.index, self.published_index,
            "refusals go out with a published version"
        );
        let results = std::mem::replace(
            &mut self.immediate_results,
            vec![Vec::new(); self.config.shard_count],
        );
        let batch = Arc::new(AppliedBatch {
            version: self.tables.clone(),
            changes: Vec::new(),
        });
        for (shard, results) in results.into_iter().enumerate() {
            if !results.is_empty() {
                self.effects.push(Effect::Deliver {
                    shard,
                    batch: batch.clone(),
                    results,
                });
            }
        }
    }

    fn publish_lease(&mut self) {
        let until_ms = if self.role == Role::Leader {
            self.core.leader_lease_until().unwrap_or(0)
        } else {
            0
        };
        self.effects.push(Effect::Lease { until_ms });
        if self.role == Role::Leader {
            self.effects.push(Effect::LeaderContact {
                at_ms: self.now_ms(),
            });
        }
    }

    pub(super) fn on_role_change(&mut self, role: Role, term: Term, leader: Option<NodeId>) {
        let was_leader = self.role == Role::Leader;
        self.role = role;
        self.term = term;
        if leader != self.leader && leader.is_some() {
            self.effects.push(Effect::LeaderContact {
                at_ms: self.now_ms(),
            });
        }
        if leader != self.leader {
            let name = leader
                .and_then(|id| Some(self.server_name(id, &self.membership.members.get(&id)?.name)))
                .unwrap_or_else(|| "unknown".to_string());
            let text = format!("raft: role {role:?} in term {term}; leader {leader:?} ({name})");
            self.log(log::Level::Debug, text);
        }
        self.leader = leader;
        if role == Role::Leader && !was_leader {
            // The no-op the core appended on winning is the last entry right now.
            self.leader_term_start = Some(self.core.last_index());
            self.log(
                log::Level::Info,
                format!("raft: cluster leadership acquired (term {term})"),
            );
            // Every TTL session gets a full timer from now, whatever the previous leader had.
            self.session_timers.start_all(&self.tables, self.now_ms());
            self.initialize_acls();
            self.initialize_autopilot();
        } else if role != Role::Leader {
            self.leader_term_start = None;
            self.session_timers.clear();
            if was_leader {
                self.log(
                    log::Level::Info,
                    format!("raft: cluster leadership lost (term {term})"),
                );
                // Whether these entries commit is now up to the next leader; the clients
                // learn that the outcome is unknown, as with Consul.
                for (_, (_, request_id)) in std::mem::take(&mut self.pending) {
                    self.refuse(request_id, ProposalResult::LeadershipLost);
                }
                for request_id in std::mem::take(&mut self.reads_unsent) {
                    self.refuse(request_id, ProposalResult::NotLeader);
                }
            }
        }
        // A new leader judges the servers at once, so it never answers without a view; a
        // server that stops leading forgets its judgement.
        self.update_autopilot();
        self.publish_status(false);
    }

    /// The assertions every step ends with.
    fn check_invariants(&mut self) {
        let commit = self.core.commit_index();
        debug_assert!(
            self.tables.index <= commit,
            "applied {} beyond commit {commit}",
            self.tables.index
        );
        debug_assert!(
            commit >= self.commit_seen,
            "the commit index went back from {} to {commit}",
            self.commit_seen
        );
        self.commit_seen = commit;
        debug_assert!(self.published_index <= self.tables.index);
        debug_assert_eq!(self.readys_taken, self.readys_advanced);
        debug_assert!(self.sync_completed <= self.sync_requested);
        debug_assert!(
            self.awaiting_sync.is_empty() || self.sync_completed < self.sync_requested,
            "writes wait for a sync that already completed"
        );
        debug_assert!(self
            .awaiting_sync
            .front()
            .is_none_or(|first| first.sequence > self.sync_completed));
        debug_assert!(
            self.role == Role::Leader || self.pending.is_empty(),
            "a follower holds proposals"
        );
    }
}

/// Answers the proposal that owned `index`, if any: with the result when the applied entry
/// is the one it proposed, with `LeadershipLost` when another term's entry replaced it.
/// Proposals at lower indexes still waiting were replaced as well.
fn route_result(
    pending: &mut BTreeMap<LogIndex, (Term, u64)>,
    results: &mut [Vec<(u64, ProposalResult)>],
    index: LogIndex,
    term: Term,
    result: CommandResult,
) {
    let mut result = Some(result);
    while let Some((&pending_index, _)) = pending.first_key_value() {
        if pending_index > index {
            break;
        }
        let (pending_term, request_id) = pending.remove(&pending_index).expect("first key exists");
        let outcome = if pending_index == index && pending_term == term {
            ProposalResult::Applied(result.take().expect("one proposal per index"))
        } else {
            ProposalResult::LeadershipLost
        };
        if let Some(list) = results.get_mut(shard_of_request(request_id)) {
            list.push((request_id, outcome));
        }
    }
}

/// The result of a request the core refused.
pub(super) fn refusal(error: &RaftError) -> ProposalResult {
    match error {
        RaftError::NotLeader { .. } | RaftError::LeadershipTransferInProgress { .. } => {
            ProposalResult::NotLeader
        }
        RaftError::TooManyUncommitted { .. } | RaftError::ReadQueueFull { .. } => {
            ProposalResult::Overloaded
        }
        RaftError::ProposalTooLarge { bytes, bytes_max } => ProposalResult::TooLarge {
            bytes: *bytes,
            bytes_max: *bytes_max,
        },
        other => ProposalResult::Applied(CommandResult::Error(other.to_string())),
    }
}
