//! The raft core thread: drives the pure [`RaftCore`], owns the durable log and the
//! authoritative store, and publishes every applied batch to the shards.
//!
//! One loop iteration: take everything waiting in the inbox (proposals from all shards), hand
//! it to the core, then carry out each `Ready` in the order the core documents — append to the
//! WAL with one write and one fdatasync for the whole batch (group commit), apply what is
//! committed to the store, and send the new version, its change set and the shards' write
//! results down each shard's bounded channel.
//!
//! Invariants: nothing is applied before it is durable; a proposal is answered only after the
//! entry holding it is applied, and with an error if a different entry took its index; the
//! published index only moves forward. A storage error is fatal: a server that cannot persist
//! must not keep acknowledging.

use crate::raft::{
    Entry, EntryKind, HardState, Membership, RaftConfig, RaftCore, Ready, Restored, Role,
    SnapshotMeta,
};
use crate::shard::runtime::{
    shard_of_request, AppliedBatch, ClusterStatus, RaftInput, ShardMessage, Shared,
};
use crate::shard::wal::{self, Wal, WalEntry, WalHardState, WalSnapshot};
use crate::store::kv::KvOp;
use crate::store::{Change, ChangeKey, Command, CommandResult, StoreVersion, Table, Tables};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the core is ticked when no input arrives.
const TICK_INTERVAL: Duration = Duration::from_millis(10);
/// Inputs taken from the inbox per loop iteration; bounds the latency one iteration adds.
const INPUTS_PER_ITERATION_MAX: usize = 8192;
/// Applied entries after which a snapshot is taken (Consul's `raft_snapshot_threshold`).
pub const SNAPSHOT_THRESHOLD_ENTRIES: u64 = 16_384;
/// How long a KV tombstone lives before the leader reaps it (Consul's `tombstone_ttl`).
const TOMBSTONE_TTL: Duration = Duration::from_secs(15 * 60);
/// How often the leader samples the index for tombstone reaping (Consul's granularity).
const TOMBSTONE_GRANULARITY: Duration = Duration::from_secs(30);

/// A snapshot written by the helper thread, ready to hand to the core.
type FinishedSnapshot = (SnapshotMeta, WalSnapshot);

pub struct RaftDriverConfig {
    pub data_dir: PathBuf,
    pub raft_id: u64,
    pub node_name: String,
    /// This server's RPC address as peers reach it, `ip:port`.
    pub rpc_address: String,
    /// Form a one-voter group if the log is pristine (`-dev`, `-bootstrap`, expect 1).
    pub bootstrap_single: bool,
}

/// Recovered state handed from startup to the thread.
pub struct RaftDriver {
    core: RaftCore,
    wal: Wal,
    data_dir: PathBuf,
    tables: StoreVersion,
    inbox: flume::Receiver<RaftInput>,
    shards: Vec<flume::Sender<ShardMessage>>,
    shared: Arc<Shared>,
    /// Proposals waiting for their entry: index → (term, request id).
    pending: BTreeMap<u64, (u64, u64)>,
    /// Results that cannot wait for an applied batch (refused proposals), per shard.
    immediate_results: Vec<Vec<(u64, CommandResult)>>,
    clock_origin: Instant,
    membership: Membership,
    role: Role,
    leader: Option<u64>,
    term: u64,
    /// Index of the first entry of this leader's term; reads are served once it is applied.
    leader_ready_index: Option<u64>,
    last_snapshot_index: u64,
    snapshot_in_progress: bool,
    snapshot_results: (
        flume::Sender<FinishedSnapshot>,
        flume::Receiver<FinishedSnapshot>,
    ),
    tombstone_samples: VecDeque<(Instant, u64)>,
    last_tombstone_sample: Instant,
    published_status: Arc<ClusterStatus>,
}

fn to_wal_entry(entry: &Entry) -> WalEntry {
    let kind = match entry.kind {
        EntryKind::Normal => 0,
        EntryKind::Noop => 1,
        EntryKind::Membership => 2,
    };
    WalEntry {
        index: entry.index,
        term: entry.term,
        kind,
        payload: entry.data.clone(),
    }
}

fn from_wal_entry(entry: WalEntry) -> Result<Entry, String> {
    let kind = match entry.kind {
        0 => EntryKind::Normal,
        1 => EntryKind::Noop,
        2 => EntryKind::Membership,
        other => {
            return Err(format!(
                "unknown entry kind {other} at index {}",
                entry.index
            ))
        }
    };
    Ok(Entry {
        index: entry.index,
        term: entry.term,
        kind,
        data: entry.payload,
    })
}

fn fatal(what: &str, error: impl std::fmt::Display) -> ! {
    log::error!("raft: fatal: {what}: {error}");
    eprintln!("praetor: fatal: {what}: {error}");
    std::process::abort();
}

/// Opens the log, restores the store, and builds the driver. Returns the initial version so
/// shards can start from it.
pub fn open(
    config: RaftDriverConfig,
    inbox: flume::Receiver<RaftInput>,
    shards: Vec<flume::Sender<ShardMessage>>,
    shared: Arc<Shared>,
) -> Result<(RaftDriver, StoreVersion), String> {
    let wal_dir = config.data_dir.join("raft");
    let (wal, recovered) = Wal::open(&wal_dir, wal::SEGMENT_BYTES_DEFAULT)
        .map_err(|e| format!("cannot open raft log in {}: {e}", wal_dir.display()))?;
    if recovered.torn_tail_bytes > 0 {
        log::warn!(
            "raft: discarded {} bytes of torn log tail (a write that never completed)",
            recovered.torn_tail_bytes
        );
    }
    let mut tables = Tables::default();
    let mut snapshot_meta = None;
    if let Some(snapshot) = &recovered.snapshot {
        let meta: SnapshotMeta = rmp_serde::from_slice(&snapshot.meta)
            .map_err(|e| format!("corrupt snapshot metadata: {e}"))?;
        tables = Tables::from_snapshot_bytes(&snapshot.data)?;
        if tables.index != snapshot.last_index {
            return Err(format!(
                "snapshot claims index {} but its store is at {}",
                snapshot.last_index, tables.index
            ));
        }
        snapshot_meta = Some(meta);
    }
    let entries = recovered
        .entries
        .into_iter()
        .map(from_wal_entry)
        .collect::<Result<Vec<_>, _>>()?;
    let hard_state = HardState {
        term: recovered.hard_state.term,
        vote: (recovered.hard_state.vote != 0).then_some(recovered.hard_state.vote),
        commit: recovered.hard_state.commit,
    };
    let pristine = hard_state.term == 0 && entries.is_empty() && snapshot_meta.is_none();
    let last_snapshot_index = snapshot_meta.as_ref().map(|m| m.last_index).unwrap_or(0);
    let mut membership = snapshot_meta
        .as_ref()
        .map(|m| m.membership.clone())
        .unwrap_or_default();
    for entry in &entries {
        if entry.kind == EntryKind::Membership {
            membership = Membership::decode(&entry.data).map_err(|e| e.to_string())?;
        }
    }
    let restored = Restored {
        hard_state,
        snapshot: snapshot_meta,
        entries,
    };
    let now = 0;
    let mut core = RaftCore::try_new(
        RaftConfig::new(config.raft_id),
        restored,
        rand::random(),
        now,
    )
    .map_err(|e| format!("cannot start raft: {e}"))?;
    if pristine && config.bootstrap_single {
        membership =
            Membership::single_voter(config.raft_id, &config.node_name, &config.rpc_address);
        core.bootstrap(membership.clone())
            .map_err(|e| format!("cannot bootstrap: {e}"))?;
        log::info!("raft: bootstrapped a single-server cluster");
    }
    let version: StoreVersion = Arc::new(tables);
    let shard_count = shards.len();
    let driver = RaftDriver {
        core,
        wal,
        data_dir: wal_dir,
        tables: version.clone(),
        inbox,
        shards,
        shared,
        pending: BTreeMap::new(),
        immediate_results: vec![Vec::new(); shard_count],
        clock_origin: Instant::now(),
        membership,
        role: Role::Follower,
        leader: None,
        term: hard_state.term,
        leader_ready_index: None,
        last_snapshot_index,
        snapshot_in_progress: false,
        snapshot_results: flume::bounded(1),
        tombstone_samples: VecDeque::new(),
        last_tombstone_sample: Instant::now(),
        published_status: Arc::new(ClusterStatus::default()),
    };
    Ok((driver, version))
}

impl RaftDriver {
    fn now_ms(&self) -> u64 {
        self.clock_origin.elapsed().as_millis() as u64
    }

    /// Runs until a shutdown input arrives or every shard is gone.
    pub fn run(mut self) {
        self.process_ready();
        self.publish_status();
        loop {
            let mut shutdown = false;
            match self.inbox.recv_timeout(TICK_INTERVAL) {
                Ok(input) => {
                    shutdown |= self.handle_input(input);
                    for _ in 1..INPUTS_PER_ITERATION_MAX {
                        match self.inbox.try_recv() {
                            Ok(input) => shutdown |= self.handle_input(input),
                            Err(_) => break,
                        }
                    }
                }
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => shutdown = true,
            }
            let now = self.now_ms();
            self.core.tick(now);
            while let Ok((meta, snapshot)) = self.snapshot_results.1.try_recv() {
                self.finish_snapshot(meta, snapshot);
            }
            self.process_ready();
            self.flush_immediate_results();
            self.maybe_reap_tombstones();
            if shutdown {
                break;
            }
        }
        if let Err(e) = self.wal.sync() {
            fatal("final log sync failed", e);
        }
        log::info!("raft: stopped at applied index {}", self.tables.index);
    }

    /// Returns true when the input asks to stop.
    fn handle_input(&mut self, input: RaftInput) -> bool {
        match input {
            RaftInput::Propose {
                request_id,
                payload,
            } => {
                let now = self.now_ms();
                match self.core.propose(now, payload) {
                    Ok((index, term)) => {
                        self.pending.insert(index, (term, request_id));
                    }
                    Err(error) => {
                        let message = match error {
                            crate::raft::RaftError::NotLeader { .. } => {
                                "No cluster leader".to_string()
                            }
                            other => other.to_string(),
                        };
                        let shard = shard_of_request(request_id);
                        if let Some(results) = self.immediate_results.get_mut(shard) {
                            results.push((request_id, CommandResult::Error(message)));
                        }
                    }
                }
                false
            }
            RaftInput::Shutdown => true,
        }
    }

    fn process_ready(&mut self) {
        while self.core.has_ready() {
            let mut ready: Ready = self.core.ready();
            let done = ready.done();
            // Peer messages travel once the cluster transport exists; a single voter has
            // no peers, so nothing is dropped here.
            debug_assert!(ready.messages.is_empty() || self.membership.members.len() > 1);

            let mut changes: Vec<Change> = Vec::new();
            if let Some((meta, data)) = ready.snapshot.take() {
                self.install_snapshot(&meta, data, &mut changes);
            }
            let hard_state = ready.hard_state.map(|hs| WalHardState {
                term: hs.term,
                vote: hs.vote.unwrap_or(0),
                commit: hs.commit,
            });
            if hard_state.is_some() || ready.truncate_from.is_some() || !ready.entries.is_empty() {
                let entries: Vec<WalEntry> = ready.entries.iter().map(to_wal_entry).collect();
                self.wal.append(hard_state, ready.truncate_from, &entries);
                if let Err(e) = self.wal.sync() {
                    fatal("raft log write failed", e);
                }
            }
            if let Some(change) = ready.role_changed {
                self.on_role_change(change.role, change.term, change.leader);
            }

            let mut results: Vec<Vec<(u64, CommandResult)>> = vec![Vec::new(); self.shards.len()];
            if !ready.committed.is_empty() {
                let tables = Arc::make_mut(&mut self.tables);
                for entry in &ready.committed {
                    match entry.kind {
                        EntryKind::Normal => {
                            let result = match Command::decode(&entry.data) {
                                Ok(command) => tables.apply(entry.index, &command, &mut changes),
                                Err(e) => {
                                    // A command we cannot decode would make servers diverge if
                                    // skipped on some; every server fails the same way here.
                                    fatal(
                                        &format!("undecodable command at index {}", entry.index),
                                        e,
                                    )
                                }
                            };
                            Self::route_result(
                                &mut self.pending,
                                &mut results,
                                entry.index,
                                entry.term,
                                result,
                            );
                        }
                        EntryKind::Noop => {
                            tables.advance_to(entry.index);
                            Self::route_result(
                                &mut self.pending,
                                &mut results,
                                entry.index,
                                entry.term,
                                CommandResult::Bool(true),
                            );
                        }
                        EntryKind::Membership => {
                            tables.advance_to(entry.index);
                            if let Ok(m) = Membership::decode(&entry.data) {
                                self.membership = m;
                            }
                            Self::route_result(
                                &mut self.pending,
                                &mut results,
                                entry.index,
                                entry.term,
                                CommandResult::Bool(true),
                            );
                        }
                    }
                }
            }
            let applied_something = !ready.committed.is_empty() || done.snapshot_restored.is_some();
            if applied_something {
                self.publish(changes, results);
            }
            self.core.advance(self.now_ms(), done);
            if applied_something {
                self.publish_status();
                self.maybe_snapshot();
            }
            if ready.snapshot_wanted {
                self.start_snapshot();
            }
        }
    }

    /// Answers the proposal that owned `index`, if any: with the result when the applied
    /// entry is the one it proposed, with an error when another term's entry replaced it.
    fn route_result(
        pending: &mut BTreeMap<u64, (u64, u64)>,
        results: &mut [Vec<(u64, CommandResult)>],
        index: u64,
        term: u64,
        result: CommandResult,
    ) {
        while let Some((&pending_index, _)) = pending.first_key_value() {
            if pending_index > index {
                break;
            }
            let (pending_term, request_id) =
                pending.remove(&pending_index).expect("first key exists");
            let outcome = if pending_index == index && pending_term == term {
                result.clone()
            } else {
                CommandResult::Error("leadership lost while committing".to_string())
            };
            if let Some(list) = results.get_mut(shard_of_request(request_id)) {
                list.push((request_id, outcome));
            }
        }
    }

    fn publish(&mut self, changes: Vec<Change>, results: Vec<Vec<(u64, CommandResult)>>) {
        let batch = Arc::new(AppliedBatch {
            version: self.tables.clone(),
            changes,
        });
        for (shard, results) in self.shards.iter().zip(results) {
            // Blocking send is the back-pressure: a shard that falls behind slows the core,
            // and shards never block their thread on the way back.
            let _ = shard.send(ShardMessage::Applied(batch.clone(), results));
        }
        self.shared
            .published_index
            .store(self.tables.index, Ordering::Release);
    }

    fn flush_immediate_results(&mut self) {
        if self.immediate_results.iter().all(Vec::is_empty) {
            return;
        }
        let results = std::mem::replace(
            &mut self.immediate_results,
            vec![Vec::new(); self.shards.len()],
        );
        let batch = Arc::new(AppliedBatch {
            version: self.tables.clone(),
            changes: Vec::new(),
        });
        for (shard, results) in self.shards.iter().zip(results) {
            if !results.is_empty() {
                let _ = shard.send(ShardMessage::Applied(batch.clone(), results));
            }
        }
    }

    fn on_role_change(&mut self, role: Role, term: u64, leader: Option<u64>) {
        let was_leader = self.role == Role::Leader;
        self.role = role;
        self.term = term;
        self.leader = leader;
        if role == Role::Leader && !was_leader {
            // The leader's no-op is the last entry right now; reads wait until it applies so
            // that they see everything committed by earlier terms.
            self.leader_ready_index = Some(self.core.status().last_index);
            log::info!("raft: cluster leadership acquired (term {term})");
        } else if role != Role::Leader {
            if was_leader {
                log::info!("raft: cluster leadership lost (term {term})");
            }
            self.leader_ready_index = None;
        }
        self.publish_status();
    }

    fn publish_status(&mut self) {
        let serving = self.role == Role::Leader
            && self
                .leader_ready_index
                .is_some_and(|i| self.tables.index >= i);
        let leader_member = self.leader.and_then(|id| self.membership.members.get(&id));
        let status = ClusterStatus {
            is_leader: serving,
            leader_rpc_address: leader_member.map(|m| m.address.clone()).unwrap_or_default(),
            leader_name: leader_member.map(|m| m.name.clone()).unwrap_or_default(),
            term: self.term,
            commit_index: self.core.status().commit,
            voter_rpc_addresses: self
                .membership
                .members
                .values()
                .filter(|m| m.voter)
                .map(|m| m.address.clone())
                .collect(),
        };
        let changed = status.is_leader != self.published_status.is_leader
            || status.leader_rpc_address != self.published_status.leader_rpc_address
            || status.term != self.published_status.term
            || status.voter_rpc_addresses != self.published_status.voter_rpc_addresses;
        if !changed {
            return;
        }
        let status = Arc::new(status);
        self.published_status = status.clone();
        for shard in &self.shards {
            let _ = shard.send(ShardMessage::Status(status.clone()));
        }
    }

    fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        data: bytes::Bytes,
        changes: &mut Vec<Change>,
    ) {
        let tables = match Tables::from_snapshot_bytes(&data) {
            Ok(t) => t,
            Err(e) => fatal("snapshot from the leader does not decode", e),
        };
        let encoded_meta = rmp_serde::to_vec(meta).expect("snapshot metadata encodes");
        let snapshot = WalSnapshot {
            last_index: meta.last_index,
            last_term: meta.last_term,
            meta: encoded_meta,
            data,
        };
        if let Err(e) = wal::write_snapshot_file(&self.data_dir, &snapshot) {
            fatal("cannot persist received snapshot", e);
        }
        // Everything in the log is superseded; the core sends a truncation with the next
        // entries, and old segments go now.
        if let Err(e) = self.wal.compact(meta.last_index) {
            fatal("cannot compact raft log", e);
        }
        self.tables = Arc::new(tables);
        self.membership = meta.membership.clone();
        self.last_snapshot_index = meta.last_index;
        for table in [Table::Kvs, Table::Tombstones] {
            changes.push(Change {
                table,
                key: ChangeKey::All,
            });
        }
    }

    fn maybe_snapshot(&mut self) {
        if self.tables.index >= self.last_snapshot_index + SNAPSHOT_THRESHOLD_ENTRIES {
            self.start_snapshot();
        }
    }

    /// Serializes the current version on a helper thread; applies continue meanwhile because
    /// the version is immutable.
    fn start_snapshot(&mut self) {
        if self.snapshot_in_progress || self.tables.index == 0 {
            return;
        }
        self.snapshot_in_progress = true;
        let version = self.tables.clone();
        let last_index = version.index;
        let Some(meta) = self.core.snapshot_meta(last_index) else {
            self.snapshot_in_progress = false;
            return;
        };
        let last_term = meta.last_term;
        let dir = self.data_dir.clone();
        let done = self.snapshot_results.0.clone();
        std::thread::Builder::new()
            .name("praetor-snapshot".into())
            .spawn(move || {
                let data = bytes::Bytes::from(version.to_snapshot_bytes());
                let encoded_meta = rmp_serde::to_vec(&meta).expect("snapshot metadata encodes");
                let snapshot = WalSnapshot {
                    last_index,
                    last_term,
                    meta: encoded_meta,
                    data,
                };
                if let Err(e) = wal::write_snapshot_file(&dir, &snapshot) {
                    fatal("cannot write snapshot", e);
                }
                let _ = done.send((meta, snapshot));
            })
            .expect("spawning the snapshot thread");
    }

    fn finish_snapshot(&mut self, meta: SnapshotMeta, snapshot: WalSnapshot) {
        self.snapshot_in_progress = false;
        self.last_snapshot_index = meta.last_index;
        let compact_up_to = meta
            .last_index
            .saturating_sub(RaftConfig::new(1).trailing_entries);
        self.core.snapshot_taken(meta, snapshot.data);
        if let Err(e) = self.wal.compact(compact_up_to) {
            fatal("cannot compact raft log", e);
        }
        log::debug!("raft: snapshot at index {} saved", snapshot.last_index);
    }

    /// The leader reaps KV tombstones older than the TTL, as Consul's tombstone GC does.
    fn maybe_reap_tombstones(&mut self) {
        if self.role != Role::Leader || self.last_tombstone_sample.elapsed() < TOMBSTONE_GRANULARITY
        {
            return;
        }
        let now = Instant::now();
        self.last_tombstone_sample = now;
        self.tombstone_samples.push_back((now, self.tables.index));
        let mut reap_up_to = None;
        while let Some(&(at, index)) = self.tombstone_samples.front() {
            if now.duration_since(at) < TOMBSTONE_TTL {
                break;
            }
            reap_up_to = Some(index);
            self.tombstone_samples.pop_front();
        }
        let Some(up_to_index) = reap_up_to else {
            return;
        };
        if self
            .tables
            .kv
            .tombstones
            .values()
            .all(|deleted_at| *deleted_at > up_to_index)
        {
            return;
        }
        let payload =
            bytes::Bytes::from(Command::Kv(KvOp::ReapTombstones { up_to_index }).encode());
        let now_ms = self.now_ms();
        if let Err(e) = self.core.propose(now_ms, payload) {
            log::debug!("raft: tombstone reap not proposed: {e}");
        }
    }
}
