//! The raft core thread: drives the pure [`RaftCore`], owns the durable log and the
//! authoritative store, talks to peers, and publishes every applied batch to the shards.
//!
//! One loop iteration: take everything waiting in the inbox (proposals and reads from all
//! shards, gossip's view of the servers) and on the peers' Raft streams
//! ([`crate::shard::raft_inbox`]), hand it to the core, then carry
//! out each `Ready` in the order the core documents: send the messages that need no
//! durability, append to the WAL with one write for the whole batch, send the messages that
//! need durability once it is synced, apply what is committed to the store, and send the new
//! version, its change set and the shards' results down each shard's bounded channel.
//!
//! Syncing: while this server leads other voters, the fdatasync runs on a sync thread so that
//! the loop keeps taking proposals and acknowledgements and sends the next appends while the
//! disk works (the core allows pipelined Readys); writes that arrive meanwhile share the next
//! sync (group commit). What must follow durability — the Ready's `messages_after_persist`
//! and the core's `persisted_through` — waits in [`AwaitingSync`] until the thread reports
//! back. Everyone else syncs inline: a follower's acknowledgement and a lone voter's commit
//! wait for the disk either way, and two thread hand-offs would only add to that (measured:
//! a `-dev` agent lost a fifth of its PUT throughput with the sync thread).
//!
//! Reads: concurrent ReadIndex requests that arrive in one iteration share one quorum round;
//! each is answered once the store has applied up to the confirmed index. The leader lease
//! and the time of last contact with the leader are published in atomics for the shards.
//!
//! Membership: gossip tells the thread which servers exist. A pristine server with
//! `bootstrap_expect = N` bootstraps once it sees N servers expecting N; the leader adds
//! servers that joined, removes servers that left, and removes failed servers when a
//! replacement is waiting, one single-server change at a time.
//!
//! Invariants: nothing is applied before it is durable; a proposal is answered only after the
//! entry holding it is applied, and with an error if a different entry took its index; the
//! published index only moves forward. A storage error is fatal: a server that cannot persist
//! must not keep acknowledging.

use crate::raft::{
    Entry, EntryKind, HardState, Membership, MembershipChange, Message, NodeId, RaftConfig,
    RaftCore, RaftError, Ready, Restored, Role, SnapshotMeta,
};
use crate::shard::peer_transport::{Faults, PeerTransport};
use crate::shard::raft_inbox::{RaftInbox, RaftInboxReceiver};
use crate::shard::runtime::{
    shard_of_request, AppliedBatch, ClusterStatus, OperatorOp, PeerHealth, RaftInput, RaftServer,
    ServerInfo, ShardMessage, ShardSender, Shared,
};
use crate::shard::session_timers::SessionTimers;
use crate::shard::wal::{self, Wal, WalEntry, WalHardState, WalSnapshot};
use crate::store::command::{split_stamp, stamp_entry};
use crate::store::kv::KvOp;
use crate::store::session::{self, SessionOp};
use crate::store::{Change, Command, CommandResult, StoreVersion, Tables};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often the core is ticked when no input arrives.
const TICK_INTERVAL: Duration = Duration::from_millis(10);
/// Inputs taken from the inbox per loop iteration; bounds the latency one iteration adds.
const INPUTS_PER_ITERATION_MAX: usize = 8192;
/// How long a KV tombstone lives before the leader reaps it (Consul's `tombstone_ttl`).
const TOMBSTONE_TTL: Duration = Duration::from_secs(15 * 60);
/// How often the leader samples the index for tombstone reaping (Consul's granularity).
const TOMBSTONE_GRANULARITY: Duration = Duration::from_secs(30);
/// How often the leader re-checks membership against gossip and refreshes peer health.
const RECONCILE_INTERVAL: Duration = Duration::from_millis(500);

/// A snapshot written by the helper thread, ready to hand to the core.
type FinishedSnapshot = (SnapshotMeta, bytes::Bytes);

/// Sync requests the sync thread may have queued; the raft thread blocks past this, which
/// cannot happen in practice since one sync covers every queued request.
const SYNC_QUEUE_CAPACITY: usize = 4096;

/// One write handed to the sync thread: its sequence number and the file to sync.
struct SyncRequest {
    sequence: u64,
    file: Arc<std::fs::File>,
}

/// What a written but not yet synced Ready still owes once its sync (or a later one) is done.
struct AwaitingSync {
    sequence: u64,
    persisted_through: Option<(u64, u64)>,
    messages: Vec<(NodeId, Message)>,
}

/// The sync thread: takes every queued request, syncs each distinct file once (a roll leaves
/// at most two), and reports the highest sequence number back through the raft inbox.
fn sync_loop(requests: flume::Receiver<SyncRequest>, inbox: RaftInbox) {
    while let Ok(first) = requests.recv() {
        let mut through = first.sequence;
        let mut files = vec![first.file];
        while let Ok(more) = requests.try_recv() {
            through = through.max(more.sequence);
            if !files.iter().any(|f| Arc::ptr_eq(f, &more.file)) {
                files.push(more.file);
            }
        }
        for file in &files {
            if let Err(e) = file.sync_data() {
                fatal("raft log sync failed", e);
            }
        }
        if inbox.send(RaftInput::Synced { through }).is_err() {
            return;
        }
    }
}

pub struct RaftDriverConfig {
    pub data_dir: PathBuf,
    pub raft_id: u64,
    pub node_id: String,
    pub node_name: String,
    /// This server's RPC address as peers reach it, `ip:port`.
    pub rpc_address: String,
    pub datacenter: String,
    /// Form a one-voter group if the log is pristine (`-dev`, `-bootstrap`, expect 1).
    pub bootstrap_single: bool,
    /// `bootstrap_expect` when > 1: bootstrap once that many servers are seen.
    pub bootstrap_expect: u32,
    /// Raft timings scale (Consul's `raft_multiplier`, 1 = fastest).
    pub raft_config: RaftConfig,
    /// Applied entries after which a snapshot is taken (`raft_snapshot_threshold`).
    pub snapshot_threshold_entries: u64,
}

pub struct RaftDriver {
    core: RaftCore,
    wal: Wal,
    data_dir: PathBuf,
    tables: StoreVersion,
    inbox: RaftInboxReceiver,
    shards: Vec<ShardSender>,
    shared: Arc<Shared>,
    transport: PeerTransport,
    local_id: NodeId,
    node_id: String,
    datacenter: String,
    bootstrap_expect: u32,
    trailing_entries: u64,
    snapshot_threshold_entries: u64,
    /// Proposals waiting for their entry: index → (term, request id).
    pending: BTreeMap<u64, (u64, u64)>,
    /// Results that cannot wait for an applied batch (refused requests), per shard.
    immediate_results: Vec<Vec<(u64, CommandResult)>>,
    /// Read requests that arrived this iteration and still need a quorum round.
    reads_unsent: Vec<u64>,
    /// Read contexts sent to the core, waiting for confirmation.
    reads_confirming: HashMap<u64, Vec<u64>>,
    /// Confirmed reads waiting for the store to reach their index.
    reads_applying: VecDeque<(u64, Vec<u64>)>,
    next_read_context: u64,
    membership: Membership,
    role: Role,
    leader: Option<u64>,
    term: u64,
    /// Term and vote as last written with a sync requested; a hard state that differs only
    /// in its commit index is written without a sync of its own.
    durable_term_vote: (u64, u64),
    /// Sequence number of the last write handed to the sync thread, and of the last one it
    /// reported durable.
    sync_requested: u64,
    sync_completed: u64,
    /// Readys written but not yet synced, oldest first.
    awaiting_sync: VecDeque<AwaitingSync>,
    sync_requests: Option<flume::Sender<SyncRequest>>,
    /// Messages read from peer streams this iteration (kept to reuse its allocation).
    peer_messages: Vec<(NodeId, Message)>,
    /// Index of this leader's first entry (its no-op); `None` when not leading.
    leader_term_start: Option<u64>,
    last_snapshot_index: u64,
    snapshot_in_progress: bool,
    snapshot_results: (
        flume::Sender<FinishedSnapshot>,
        flume::Receiver<FinishedSnapshot>,
    ),
    tombstone_samples: VecDeque<(Instant, u64)>,
    last_tombstone_sample: Instant,
    last_reconcile: Instant,
    /// Servers as gossip last reported them, by raft id.
    servers: BTreeMap<u64, ServerInfo>,
    published_status: Arc<ClusterStatus>,
    /// TTL timers of sessions; kept only while leading.
    session_timers: SessionTimers,
}

/// This server's wall clock in Unix milliseconds: the stamp every proposed entry carries.
fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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

fn not_leader_text(error: &RaftError) -> String {
    match error {
        RaftError::NotLeader { .. } => "No cluster leader".to_string(),
        other => other.to_string(),
    }
}

/// Opens the log, restores the store, and builds the driver. Returns the initial version so
/// shards can start from it.
pub fn open(
    config: RaftDriverConfig,
    inbox: RaftInboxReceiver,
    shards: Vec<ShardSender>,
    shared: Arc<Shared>,
    faults: Arc<Faults>,
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
    let restored_snapshot_meta = snapshot_meta.clone();
    let restored = Restored {
        hard_state,
        snapshot: snapshot_meta,
        entries,
    };
    let raft_config = config.raft_config.clone();
    let trailing_entries = raft_config.trailing_entries;
    let mut core = RaftCore::try_new(raft_config, restored, rand::random(), 0)
        .map_err(|e| format!("cannot start raft: {e}"))?;
    // The core keeps the snapshot it may have to send to lagging followers; after a restart
    // it learns it from us.
    if let (Some(snapshot), Some(meta)) = (&recovered.snapshot, &restored_snapshot_meta) {
        core.snapshot_taken(meta.clone(), snapshot.data.clone());
    }
    if pristine && config.bootstrap_single {
        let membership =
            Membership::single_voter(config.raft_id, &config.node_name, &config.rpc_address);
        core.bootstrap(membership)
            .map_err(|e| format!("cannot bootstrap: {e}"))?;
        log::info!("raft: bootstrapped a single-server cluster");
    }
    let membership = core.membership().clone();
    let mut transport = PeerTransport::new(config.raft_id, faults, shared.tls.clone());
    transport.update_peers(
        &membership
            .members
            .iter()
            .map(|(id, m)| (*id, m.address.clone()))
            .collect(),
    );
    let version: StoreVersion = Arc::new(tables);
    let shard_count = shards.len();
    let mut servers = BTreeMap::new();
    servers.insert(
        config.raft_id,
        ServerInfo {
            raft_id: config.raft_id,
            node_id: config.node_id.clone(),
            name: config.node_name.clone(),
            rpc_address: config.rpc_address.clone(),
            datacenter: config.datacenter.clone(),
            expect: config.bootstrap_expect,
            alive: true,
            left: false,
        },
    );
    let driver = RaftDriver {
        core,
        wal,
        data_dir: wal_dir,
        tables: version.clone(),
        inbox,
        shards,
        shared,
        transport,
        local_id: config.raft_id,
        node_id: config.node_id,
        datacenter: config.datacenter,
        bootstrap_expect: config.bootstrap_expect,
        trailing_entries,
        snapshot_threshold_entries: config.snapshot_threshold_entries,
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
        leader_term_start: None,
        durable_term_vote: (hard_state.term, hard_state.vote.unwrap_or(0)),
        sync_requested: 0,
        sync_completed: 0,
        awaiting_sync: VecDeque::new(),
        sync_requests: None,
        peer_messages: Vec::new(),
        last_snapshot_index,
        snapshot_in_progress: false,
        snapshot_results: flume::bounded(1),
        tombstone_samples: VecDeque::new(),
        last_tombstone_sample: Instant::now(),
        last_reconcile: Instant::now(),
        servers,
        published_status: Arc::new(ClusterStatus::default()),
        session_timers: SessionTimers::default(),
    };
    Ok((driver, version))
}

impl RaftDriver {
    fn now_ms(&self) -> u64 {
        self.shared.now_ms()
    }

    /// Runs until a shutdown input arrives or every shard is gone.
    pub fn run(mut self) {
        let (sync_tx, sync_rx) = flume::bounded(SYNC_QUEUE_CAPACITY);
        let inbox = self.shared.raft_inbox.clone();
        // Not joined at shutdown: the final inline sync covers whatever it still holds.
        std::thread::Builder::new()
            .name("praetor-sync".into())
            .spawn(move || sync_loop(sync_rx, inbox))
            .unwrap_or_else(|e| fatal("cannot start the log sync thread", e));
        self.sync_requests = Some(sync_tx);
        self.process_ready();
        self.publish_status(true);
        loop {
            let mut shutdown = false;
            self.inbox.wait(TICK_INTERVAL);
            for _ in 0..INPUTS_PER_ITERATION_MAX {
                match self.inbox.try_recv() {
                    Ok(input) => shutdown |= self.handle_input(input),
                    Err(flume::TryRecvError::Empty) => break,
                    Err(flume::TryRecvError::Disconnected) => {
                        shutdown = true;
                        break;
                    }
                }
            }
            let mut messages = std::mem::take(&mut self.peer_messages);
            self.inbox.read_peers(&mut messages);
            for (from, message) in messages.drain(..) {
                self.handle_input(RaftInput::Message { from, message });
            }
            self.peer_messages = messages;
            self.send_reads();
            let now = self.now_ms();
            self.core.tick(now);
            while let Ok((meta, snapshot)) = self.snapshot_results.1.try_recv() {
                self.finish_snapshot(meta, snapshot);
            }
            self.process_ready();
            self.expire_sessions();
            self.flush_immediate_results();
            self.publish_lease();
            if self.last_reconcile.elapsed() >= RECONCILE_INTERVAL {
                self.last_reconcile = Instant::now();
                self.reconcile_membership();
                self.publish_status(true);
                self.maybe_reap_tombstones();
            }
            if shutdown {
                break;
            }
        }
        self.transport.shutdown();
        self.sync_inline();
        self.sync_requests = None;
        log::info!("raft: stopped at applied index {}", self.tables.index);
    }

    fn refuse(&mut self, request_id: u64, reason: String) {
        if let Some(results) = self.immediate_results.get_mut(shard_of_request(request_id)) {
            results.push((request_id, CommandResult::Error(reason)));
        }
    }

    fn succeed(&mut self, request_id: u64) {
        if let Some(results) = self.immediate_results.get_mut(shard_of_request(request_id)) {
            results.push((request_id, CommandResult::Bool(true)));
        }
    }

    /// Returns true when the input asks to stop.
    fn handle_input(&mut self, input: RaftInput) -> bool {
        let now = self.now_ms();
        match input {
            RaftInput::Propose {
                request_id,
                payload,
            } => match self.core.propose(
                now,
                bytes::Bytes::from(stamp_entry(wall_clock_ms(), &payload)),
            ) {
                Ok((index, term)) => {
                    self.pending.insert(index, (term, request_id));
                }
                Err(error) => self.refuse(request_id, not_leader_text(&error)),
            },
            RaftInput::ReadIndex { request_id } => self.reads_unsent.push(request_id),
            RaftInput::Message { from, message } => {
                if Some(from) == self.leader
                    && matches!(
                        message,
                        Message::AppendEntries { .. } | Message::InstallSnapshot { .. }
                    )
                {
                    self.shared
                        .last_leader_contact_ms
                        .store(now, Ordering::Relaxed);
                }
                self.core.step(now, from, message);
            }
            RaftInput::Servers(servers) => {
                self.servers = servers
                    .into_iter()
                    .filter(|s| s.datacenter == self.datacenter)
                    .map(|s| (s.raft_id, s))
                    .collect();
                self.update_transport();
                self.maybe_bootstrap_expect();
                self.reconcile_membership();
            }
            RaftInput::Operator { request_id, op } => self.operator(request_id, op),
            RaftInput::Synced { through } => self.complete_syncs(through),
            RaftInput::PeerStream { socket, peer } => self.inbox.adopt(socket, peer),
            RaftInput::Shutdown => return true,
        }
        false
    }

    /// One quorum round for every read that arrived in this iteration.
    fn send_reads(&mut self) {
        if self.reads_unsent.is_empty() {
            return;
        }
        let reads = std::mem::take(&mut self.reads_unsent);
        let context = self.next_read_context;
        self.next_read_context += 1;
        match self.core.read_index(self.now_ms(), context) {
            Ok(()) => {
                self.reads_confirming.insert(context, reads);
            }
            Err(error) => {
                let reason = not_leader_text(&error);
                for request_id in reads {
                    self.refuse(request_id, reason.clone());
                }
            }
        }
    }

    fn operator(&mut self, request_id: u64, op: OperatorOp) {
        let now = self.now_ms();
        let find = |membership: &Membership,
                    servers: &BTreeMap<u64, ServerInfo>,
                    id: Option<&str>,
                    address: Option<&str>|
         -> Option<NodeId> {
            membership.members.iter().find_map(|(raft_id, member)| {
                let node_id = servers
                    .get(raft_id)
                    .map(|s| s.node_id.as_str())
                    .unwrap_or("");
                let id_matches = id.is_some_and(|id| {
                    id == node_id || id == format!("{raft_id:016x}") || id == member.name
                });
                let address_matches = address.is_some_and(|a| a == member.address);
                (id_matches || address_matches).then_some(*raft_id)
            })
        };
        let result = match op {
            OperatorOp::RemovePeer { id, address } => match find(
                &self.membership,
                &self.servers,
                id.as_deref(),
                address.as_deref(),
            ) {
                Some(target) => self
                    .core
                    .propose_membership_change(now, MembershipChange::Remove { id: target })
                    .map(|_| ())
                    .map_err(|e| not_leader_text(&e)),
                None => Err(format!(
                    "address \"{}\" was not found in the Raft configuration",
                    address.or(id).unwrap_or_default()
                )),
            },
            OperatorOp::RenewSession { id } => {
                if self.role != Role::Leader {
                    Err("No cluster leader".to_string())
                } else if let Some(session) = session::get(&self.tables, &id) {
                    self.session_timers.reset(session, now);
                    Ok(())
                } else {
                    if let Some(results) =
                        self.immediate_results.get_mut(shard_of_request(request_id))
                    {
                        results.push((request_id, CommandResult::Bool(false)));
                    }
                    return;
                }
            }
            OperatorOp::TransferLeader { id } => {
                let target = match id.as_deref() {
                    Some(id) => match find(&self.membership, &self.servers, Some(id), None) {
                        Some(target) => Ok(Some(target)),
                        None => Err(format!("cannot find peer {id}")),
                    },
                    None => Ok(None),
                };
                target.and_then(|t| {
                    self.core
                        .transfer_leadership(now, t)
                        .map_err(|e| not_leader_text(&e))
                })
            }
        };
        match result {
            Ok(()) => self.succeed(request_id),
            Err(reason) => self.refuse(request_id, reason),
        }
    }

    /// Bootstraps a pristine server once `bootstrap_expect` servers expecting the same number
    /// are known, with all of them as voters (Consul's `maybeBootstrap`).
    fn maybe_bootstrap_expect(&mut self) {
        if self.bootstrap_expect < 2 || self.core.last_index() > 0 || self.core.term() > 0 {
            return;
        }
        let candidates: Vec<&ServerInfo> = self
            .servers
            .values()
            .filter(|s| s.alive && s.expect == self.bootstrap_expect)
            .collect();
        if candidates
            .iter()
            .any(|s| s.expect != 0 && s.expect != self.bootstrap_expect)
            || candidates.len() < self.bootstrap_expect as usize
        {
            return;
        }
        let mut membership = Membership::default();
        for server in candidates {
            membership.members.insert(
                server.raft_id,
                crate::raft::Member {
                    voter: true,
                    name: server.name.clone(),
                    address: server.rpc_address.clone(),
                },
            );
        }
        let names: Vec<&str> = membership
            .members
            .values()
            .map(|m| m.name.as_str())
            .collect();
        match self.core.bootstrap(membership.clone()) {
            Ok(()) => {
                log::info!(
                    "raft: bootstrapped a cluster of {} servers: {}",
                    names.len(),
                    names.join(", ")
                );
                self.membership = membership;
                self.update_transport();
            }
            Err(e) => log::warn!("raft: bootstrap skipped: {e}"),
        }
    }

    /// On the leader: bring the Raft configuration in line with the servers gossip knows —
    /// add servers that joined, remove servers that left, and remove failed servers when a
    /// replacement is waiting (autopilot's dead-server cleanup). One change at a time.
    fn reconcile_membership(&mut self) {
        if self.role != Role::Leader
            || self.servers.len() <= 1 && self.membership.members.len() <= 1
        {
            return;
        }
        let now = self.now_ms();
        let change = {
            let joined: Vec<&ServerInfo> = self
                .servers
                .values()
                .filter(|s| s.alive && !self.membership.contains(s.raft_id))
                .collect();
            let left =
                self.membership.members.keys().find(|id| {
                    **id != self.local_id && self.servers.get(id).is_some_and(|s| s.left)
                });
            let is_failed = |id: &NodeId| {
                *id != self.local_id && self.servers.get(id).is_some_and(|s| !s.alive && !s.left)
            };
            let failed = self.membership.members.keys().find(|id| is_failed(id));
            // A failed server goes once a replacement exists: either one is waiting to be
            // added, or one was added before gossip declared the old one failed and the
            // healthy voters alone already make the cluster's expected size.
            let healthy_voters = self
                .membership
                .members
                .keys()
                .filter(|id| !is_failed(id))
                .count();
            // Without -bootstrap-expect (0 or 1) the expected size is unknown; two healthy
            // voters is the least that still has a quorum after the removal.
            let replaced =
                !joined.is_empty() || healthy_voters >= self.bootstrap_expect.max(2) as usize;
            if let Some(id) = left {
                Some(MembershipChange::Remove { id: *id })
            } else if let (Some(id), true) = (failed, replaced) {
                Some(MembershipChange::Remove { id: *id })
            } else {
                joined.first().map(|s| MembershipChange::AddVoter {
                    id: s.raft_id,
                    name: s.name.clone(),
                    address: s.rpc_address.clone(),
                })
            }
        };
        if let Some(change) = change {
            let description = format!("{change:?}");
            match self.core.propose_membership_change(now, change) {
                Ok(index) => log::info!("raft: membership change at index {index}: {description}"),
                Err(RaftError::MembershipChangePending { .. } | RaftError::LeaderNotReady) => {}
                Err(e) => log::debug!("raft: membership change {description} not proposed: {e}"),
            }
        }
    }

    fn process_ready(&mut self) {
        while self.core.has_ready() {
            let mut ready: Ready = self.core.ready();
            let done = ready.done();
            for (to, message) in ready.messages.drain(..) {
                self.transport.send(to, message);
            }
            let mut changes: Vec<Change> = Vec::new();
            if let Some((meta, data)) = ready.snapshot.take() {
                // The snapshot replaces the log: settle every write before it first.
                self.sync_inline();
                self.install_snapshot(&meta, data, &mut changes);
            }
            let mut persisted_through = done.persisted_through;
            let mut messages_after_persist = std::mem::take(&mut ready.messages_after_persist);
            let hard_state = ready.hard_state.map(|hs| WalHardState {
                term: hs.term,
                vote: hs.vote.unwrap_or(0),
                commit: hs.commit,
            });
            if hard_state.is_some() || ready.truncate_from.is_some() || !ready.entries.is_empty() {
                let entries: Vec<WalEntry> = ready.entries.iter().map(to_wal_entry).collect();
                self.wal.append(hard_state, ready.truncate_from, &entries);
                // Term and vote must be durable before anyone hears of them, and entries
                // before they count; the commit index may lag (it is recomputed from the
                // leader after a crash), so a Ready that only moves it rides along with the
                // next sync instead of paying an fdatasync of its own.
                let term_or_vote_moved =
                    hard_state.is_some_and(|hs| (hs.term, hs.vote) != self.durable_term_vote);
                if term_or_vote_moved || ready.truncate_from.is_some() || !ready.entries.is_empty()
                {
                    if let Some(hs) = hard_state {
                        self.durable_term_vote = (hs.term, hs.vote);
                    }
                    if self.role == Role::Leader && self.core.membership().voter_count() > 1 {
                        self.request_sync();
                    } else {
                        self.sync_inline();
                    }
                }
            }
            // Anything still awaiting a sync implies an outstanding one, so this one test
            // covers both.
            if self.sync_completed < self.sync_requested {
                // This Ready's durable effects follow the writes before it (and its own).
                self.awaiting_sync.push_back(AwaitingSync {
                    sequence: self.sync_requested,
                    persisted_through: persisted_through.take(),
                    messages: std::mem::take(&mut messages_after_persist),
                });
            }
            for (to, message) in messages_after_persist {
                self.transport.send(to, message);
            }
            if let Some(change) = ready.role_changed {
                self.on_role_change(change.role, change.term, change.leader);
            }

            let mut results: Vec<Vec<(u64, CommandResult)>> = vec![Vec::new(); self.shards.len()];
            let mut membership_changed = false;
            if !ready.committed.is_empty() {
                let tables = Arc::make_mut(&mut self.tables);
                for entry in &ready.committed {
                    let result = match entry.kind {
                        EntryKind::Normal => match split_stamp(&entry.data)
                            .and_then(|(stamp, bytes)| Ok((stamp, Command::decode(bytes)?)))
                        {
                            Ok((stamp, command)) => {
                                if let Some(stamp) = stamp {
                                    tables.observe_leader_time(stamp);
                                }
                                tables.apply(entry.index, &command, &mut changes)
                            }
                            // Every server fails the same way on the same bytes, so stopping
                            // here cannot make servers diverge.
                            Err(e) => {
                                fatal(&format!("undecodable command at index {}", entry.index), e)
                            }
                        },
                        EntryKind::Noop | EntryKind::Membership => {
                            tables.advance_to(entry.index);
                            CommandResult::Bool(true)
                        }
                    };
                    Self::route_result(
                        &mut self.pending,
                        &mut results,
                        entry.index,
                        entry.term,
                        result,
                    );
                    membership_changed |= entry.kind == EntryKind::Membership;
                }
            }
            for (context, index) in ready.read_states.iter().map(|r| (r.context, r.index)) {
                if let Some(reads) = self.reads_confirming.remove(&context) {
                    self.reads_applying.push_back((index, reads));
                }
            }
            for context in ready.dropped_reads.drain(..) {
                for request_id in self.reads_confirming.remove(&context).unwrap_or_default() {
                    if let Some(list) = results.get_mut(shard_of_request(request_id)) {
                        list.push((
                            request_id,
                            CommandResult::Error("No cluster leader".to_string()),
                        ));
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
                        list.push((request_id, CommandResult::Bool(true)));
                    }
                }
            }
            let applied_something = !ready.committed.is_empty() || done.snapshot_restored.is_some();
            if applied_something && self.role == Role::Leader {
                self.session_timers
                    .observe(&self.tables, &changes, self.now_ms());
            }
            if applied_something || results.iter().any(|r| !r.is_empty()) {
                self.publish(changes, results);
            }
            self.core.advance(
                self.now_ms(),
                crate::raft::ReadyDone {
                    persisted_through,
                    ..done
                },
            );
            // The core's membership moves as soon as a change is appended (not committed).
            if membership_changed || self.core.membership() != &self.membership {
                self.membership = self.core.membership().clone();
                let names: Vec<&str> = self
                    .membership
                    .members
                    .values()
                    .map(|m| m.name.as_str())
                    .collect();
                log::info!("raft: configuration is now [{}]", names.join(", "));
                self.update_transport();
                self.publish_status(false);
            }
            if applied_something {
                self.publish_status(false);
                self.maybe_snapshot();
            }
            if ready.snapshot_wanted {
                self.start_snapshot();
            }
        }
    }

    /// Writes what the WAL buffered and hands its sync to the sync thread.
    fn request_sync(&mut self) {
        let file = match self.wal.write() {
            Ok(file) => file,
            Err(e) => fatal("raft log write failed", e),
        };
        self.sync_requested += 1;
        let request = SyncRequest {
            sequence: self.sync_requested,
            file,
        };
        let sender = self.sync_requests.as_ref().expect("the sync thread runs");
        if sender.send(request).is_err() {
            fatal("raft log sync failed", "the sync thread is gone");
        }
    }

    /// Writes and syncs on this thread, which also makes every write handed to the sync
    /// thread durable (they went to this file or to one synced when it was rolled).
    fn sync_inline(&mut self) {
        if let Err(e) = self.wal.sync() {
            fatal("raft log write failed", e);
        }
        self.sync_requested += 1;
        self.complete_syncs(self.sync_requested);
    }

    /// Carries out what waited for writes up to sequence number `through` to be durable.
    fn complete_syncs(&mut self, through: u64) {
        if through <= self.sync_completed {
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
                self.transport.send(to, message);
            }
        }
        if persisted_through.is_some() {
            self.core.advance(
                self.now_ms(),
                crate::raft::ReadyDone {
                    persisted_through,
                    snapshot_restored: None,
                    applied_through: self.tables.index,
                },
            );
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
                CommandResult::Error("leadership lost while committing log".to_string())
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
        let has_changes = !batch.changes.is_empty();
        // The index goes out before the batch: a shard may answer a write from this batch as
        // soon as it is queued there, and a read on another shard must then find the index
        // moved, or it would skip catching up and miss the acknowledged write. A shard that
        // sees the index before its batch arrives waits for it (`Shard::catch_up`).
        self.shared
            .published_index
            .store(self.tables.index, Ordering::Release);
        let stall_ms = self.shared.faults.publish_stall_ms();
        for (position, (shard, results)) in self.shards.iter().zip(results).enumerate() {
            if stall_ms > 0 && position > 0 {
                std::thread::sleep(Duration::from_millis(stall_ms));
            }
            shard.queue_applied(batch.clone(), results);
        }
        // A shard rung above has a ring pending; ringing it again costs no wake-up.
        if has_changes {
            for shard in &self.shards {
                shard.ring_if_watching();
            }
        }
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
                shard.queue_applied(batch.clone(), results);
            }
        }
    }

    fn publish_lease(&self) {
        let lease = if self.role == Role::Leader {
            self.core.leader_lease_until().unwrap_or(0)
        } else {
            0
        };
        self.shared.lease_until_ms.store(lease, Ordering::Release);
        if self.role == Role::Leader {
            self.shared
                .last_leader_contact_ms
                .store(self.now_ms(), Ordering::Relaxed);
        }
    }

    fn on_role_change(&mut self, role: Role, term: u64, leader: Option<u64>) {
        let was_leader = self.role == Role::Leader;
        self.role = role;
        self.term = term;
        if leader != self.leader && leader.is_some() {
            self.shared
                .last_leader_contact_ms
                .store(self.now_ms(), Ordering::Relaxed);
        }
        if leader != self.leader {
            let name = leader
                .and_then(|id| self.membership.members.get(&id))
                .map(|m| m.name.as_str())
                .unwrap_or("unknown");
            log::debug!("raft: role {role:?} in term {term}; leader {leader:?} ({name})");
        }
        self.leader = leader;
        if role == Role::Leader && !was_leader {
            // The no-op the core appended on winning is the last entry right now.
            self.leader_term_start = Some(self.core.last_index());
            log::info!("raft: cluster leadership acquired (term {term})");
            // Every TTL session gets a full timer from now, whatever the previous leader had.
            self.session_timers.start_all(&self.tables, self.now_ms());
        } else if role != Role::Leader {
            self.leader_term_start = None;
            self.session_timers.clear();
            if was_leader {
                log::info!("raft: cluster leadership lost (term {term})");
                // Whether these entries commit is now up to the next leader; the clients
                // learn that the outcome is unknown, as with Consul.
                for (_, (_, request_id)) in std::mem::take(&mut self.pending) {
                    self.refuse(
                        request_id,
                        "leadership lost while committing log".to_string(),
                    );
                }
                for request_id in std::mem::take(&mut self.reads_unsent) {
                    self.refuse(request_id, "No cluster leader".to_string());
                }
            }
        }
        self.publish_status(false);
    }

    /// Points the transport at every configuration member and every server gossip knows.
    fn update_transport(&mut self) {
        let mut peers: BTreeMap<NodeId, String> = self
            .servers
            .values()
            .map(|s| (s.raft_id, s.rpc_address.clone()))
            .collect();
        for (id, member) in &self.membership.members {
            peers.insert(*id, member.address.clone());
        }
        self.transport.update_peers(&peers);
    }

    fn node_id_of(&self, raft_id: u64) -> String {
        match self.servers.get(&raft_id) {
            Some(server) => server.node_id.clone(),
            None if raft_id == self.local_id => self.node_id.clone(),
            None => format!("{raft_id:016x}"),
        }
    }

    /// Publishes leadership, membership and (with `with_health`) peer health to the shards
    /// when any of it changed.
    fn publish_status(&mut self, with_health: bool) {
        let core_status = self.core.status();
        // A new leader serves only once its term's first entry is applied, so that it has
        // seen everything earlier terms committed.
        let serving = self.role == Role::Leader
            && self
                .leader_term_start
                .is_some_and(|start| self.tables.index >= start);
        let leader_member = self.leader.and_then(|id| self.membership.members.get(&id));
        let servers: Vec<RaftServer> = self
            .membership
            .members
            .iter()
            .map(|(id, m)| RaftServer {
                raft_id: *id,
                node_id: self.node_id_of(*id),
                name: m.name.clone(),
                address: m.address.clone(),
                voter: m.voter,
            })
            .collect();
        let now = self.now_ms();
        let peer_health = if with_health || self.published_status.peer_health.is_empty() {
            core_status
                .peers
                .iter()
                .map(|p| PeerHealth {
                    raft_id: p.id,
                    match_index: p.match_index,
                    last_contact_ms: p.last_contact.map(|t| now.saturating_sub(t)),
                })
                .collect()
        } else {
            self.published_status.peer_health.clone()
        };
        let status = ClusterStatus {
            is_leader: serving,
            leader_rpc_address: leader_member.map(|m| m.address.clone()).unwrap_or_default(),
            leader_name: leader_member.map(|m| m.name.clone()).unwrap_or_default(),
            leader_raft_id: self.leader,
            term: self.term,
            commit_index: core_status.commit,
            last_index: core_status.last_index,
            membership_index: core_status.membership_index,
            voter_rpc_addresses: self
                .membership
                .members
                .values()
                .filter(|m| m.voter)
                .map(|m| m.address.clone())
                .collect(),
            servers,
            peer_health,
        };
        let previous = &self.published_status;
        let changed = status.is_leader != previous.is_leader
            || status.leader_rpc_address != previous.leader_rpc_address
            || status.term != previous.term
            || status.servers != previous.servers
            || (with_health
                && (status.peer_health != previous.peer_health
                    || status.commit_index != previous.commit_index));
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
        // The log before the snapshot is superseded; the core sends a truncation with the
        // next entries, and old segments go now.
        if let Err(e) = self.wal.compact(meta.last_index) {
            fatal("cannot compact raft log", e);
        }
        self.tables = Arc::new(tables);
        self.membership = meta.membership.clone();
        self.update_transport();
        self.last_snapshot_index = meta.last_index;
        changes.extend(crate::store::changes_everywhere());
        log::info!(
            "raft: installed snapshot at index {} from the leader",
            meta.last_index
        );
    }

    fn maybe_snapshot(&mut self) {
        if self.tables.index >= self.last_snapshot_index + self.snapshot_threshold_entries {
            self.start_snapshot();
        }
    }

    /// Serializes the current version on a helper thread; applies continue meanwhile because
    /// the version is immutable.
    fn start_snapshot(&mut self) {
        if self.snapshot_in_progress || self.tables.index == 0 {
            return;
        }
        let version = self.tables.clone();
        let last_index = version.index;
        let Some(meta) = self.core.snapshot_meta(last_index) else {
            return;
        };
        self.snapshot_in_progress = true;
        let last_term = meta.last_term;
        let dir = self.data_dir.clone();
        let done = self.snapshot_results.0.clone();
        std::thread::Builder::new()
            .name("praetor-snapshot".into())
            .spawn(move || {
                let encoded_meta = rmp_serde::to_vec(&meta).expect("snapshot metadata encodes");
                // Streamed to the file; the core gets the bytes mapped from it, which cost
                // no memory unless a follower has to be sent the snapshot.
                let written = wal::write_snapshot_streaming(
                    &dir,
                    last_index,
                    last_term,
                    &encoded_meta,
                    |out| version.write_snapshot(out),
                );
                drop(version);
                match written {
                    Ok(data) => {
                        let _ = done.send((meta, data));
                    }
                    Err(e) => fatal("cannot write snapshot", e),
                }
            })
            .expect("spawning the snapshot thread");
    }

    fn finish_snapshot(&mut self, meta: SnapshotMeta, data: bytes::Bytes) {
        self.snapshot_in_progress = false;
        self.last_snapshot_index = meta.last_index;
        let compact_up_to = meta.last_index.saturating_sub(self.trailing_entries);
        let last_index = meta.last_index;
        self.core.snapshot_taken(meta, data);
        if let Err(e) = self.wal.compact(compact_up_to) {
            fatal("cannot compact raft log", e);
        }
        log::debug!("raft: snapshot at index {last_index} saved");
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
        if let Err(e) = self.propose_internal(&Command::Kv(KvOp::ReapTombstones { up_to_index })) {
            log::debug!("raft: tombstone reap not proposed: {e}");
        }
    }

    /// Proposes a command the leader itself originates (no client waits for it).
    fn propose_internal(&mut self, command: &Command) -> Result<(), RaftError> {
        let payload = bytes::Bytes::from(stamp_entry(wall_clock_ms(), &command.encode()));
        self.core.propose(self.now_ms(), payload).map(|_| ())
    }

    /// On the leader: destroys every session whose TTL timer ran out, as Consul's
    /// `invalidateSession` does. A proposal lost to a leadership change is harmless: the
    /// next leader starts fresh timers.
    fn expire_sessions(&mut self) {
        if self.role != Role::Leader || self.session_timers.is_empty() {
            return;
        }
        for id in self.session_timers.take_expired(self.now_ms()) {
            log::debug!("raft: session {id} TTL expired");
            let destroy = Command::Session(SessionOp::Destroy { id: id.to_string() });
            if let Err(e) = self.propose_internal(&destroy) {
                log::debug!("raft: session {id} invalidation not proposed: {e}");
            }
        }
    }
}
