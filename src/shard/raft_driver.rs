//! The raft core thread: the I/O around the pure [`Replica`]. It owns the durable log and
//! its sync thread, the peer transport, the snapshot files and the atomics and doorbells the
//! shards watch; every decision is the replica's.
//!
//! One loop iteration: take everything waiting in the inbox (proposals and reads from all
//! shards, gossip's view of the servers, sync reports) and on the peers' Raft streams
//! ([`crate::shard::raft_inbox`]), step the replica with each, then with a finished
//! snapshot if any, then with [`Input::Tick`]; after every step, carry out the effects it
//! accumulated, in order ([`RaftDriver::execute`]). The effects' order is the replica's
//! durability and publication contract: the thread never reorders, merges or skips them.
//!
//! Syncing: [`Effect::SyncNow`] writes and fdatasyncs on this thread;
//! [`Effect::SyncInBackground`] writes and hands the fdatasync to the sync thread, which
//! reports [`RaftInput::Synced`] through the inbox (the replica asks for that while it leads
//! other voters, so the loop keeps taking proposals and acknowledgements while the disk
//! works; writes queued meanwhile share the next sync).
//!
//! Invariant: a storage error is fatal. A server that cannot persist must not keep
//! acknowledging, and an effect that follows a sync assumes it succeeded.

use crate::raft::{Entry, HardState, LogRead, SnapshotChunk, SnapshotMeta};
use crate::replica::{Effect, Input, Now, Recovered, Replica, ReplicaConfig};
use crate::shard::peer_transport::{Faults, PeerTransport};
use crate::shard::raft_inbox::{RaftInbox, RaftInboxReceiver};
use crate::shard::runtime::{RaftInput, ShardMessage, ShardSender, Shared};
use crate::shard::telemetry::RaftMetrics;
use crate::shard::wal::{self, Wal, WalEntry, WalHardState};
use crate::store::{StoreVersion, Tables};
use crate::telemetry::{self, Sample};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often the replica is ticked when no input arrives.
const TICK_INTERVAL: Duration = Duration::from_millis(10);
/// Inputs taken from the inbox per loop iteration; bounds the latency one iteration adds.
const INPUTS_PER_ITERATION_MAX: usize = 8192;

/// A snapshot written by the helper thread, ready to hand to the replica.
type FinishedSnapshot = (SnapshotMeta, bytes::Bytes);
/// A snapshot from the leader decoded by the helper thread, with its stored state bytes.
type RestoredSnapshot = (SnapshotMeta, Result<Box<Tables>, String>, bytes::Bytes);

/// Sync requests the sync thread may have queued; the raft thread blocks past this, which
/// cannot happen in practice since one sync covers every queued request.
const SYNC_QUEUE_CAPACITY: usize = 4096;

/// One write handed to the sync thread: its sequence number and the file to sync.
struct SyncRequest {
    sequence: u64,
    file: Arc<std::fs::File>,
}

/// The sync thread: takes every queued request, syncs each distinct file once (a roll leaves
/// at most two), and reports the highest sequence number back through the raft inbox.
fn sync_loop(requests: flume::Receiver<SyncRequest>, inbox: RaftInbox) {
    while let Ok(first) = requests.recv() {
        let mut through = first.sequence;
        let mut files = vec![first.file];
        while let Ok(more) = requests.try_recv() {
            debug_assert!(more.sequence > through, "sync requests arrive in order");
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
    pub raft_config: crate::raft::RaftConfig,
    /// Applied entries after which a snapshot is taken (`raft_snapshot_threshold`).
    pub snapshot_threshold_entries: u64,
}

pub struct RaftDriver {
    replica: Replica,
    wal: Wal,
    data_dir: PathBuf,
    inbox: RaftInboxReceiver,
    shards: Vec<ShardSender>,
    shared: Arc<Shared>,
    transport: PeerTransport,
    /// Effects drained from the replica, carried out in order (kept to reuse its allocation).
    effects: Vec<Effect>,
    /// The wall clock as last read, for [`Now::unix_ms`].
    unix_ms: u64,
    /// Set once [`RaftDriver::run`] started the sync thread.
    sync_requests: Option<flume::Sender<SyncRequest>>,
    /// Messages read from peer streams this iteration (kept to reuse its allocation).
    peer_messages: Vec<(crate::raft::NodeId, crate::raft::Message)>,
    snapshot_results: (
        flume::Sender<FinishedSnapshot>,
        flume::Receiver<FinishedSnapshot>,
    ),
    metrics: RaftMetrics,
    /// Log reads carried out while executing effects, handed back to the replica once the
    /// effects of that step are all done.
    log_reads_done: Vec<(LogRead, Result<Vec<Entry>, String>)>,
    /// The snapshot being received from the leader, written as its pieces arrive.
    incoming_snapshot: Option<wal::SnapshotAssembly>,
    restore_results: (
        flume::Sender<RestoredSnapshot>,
        flume::Receiver<RestoredSnapshot>,
    ),
}

/// This server's wall clock in Unix milliseconds: the stamp every proposed entry carries.
fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn fatal(what: &str, error: impl std::fmt::Display) -> ! {
    log::error!("raft: fatal: {what}: {error}");
    eprintln!("praetor: fatal: {what}: {error}");
    std::process::abort();
}

/// Opens the log, restores the replica from it, and builds the driver. Returns the initial
/// version so shards can start from it.
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
    let snapshot = match recovered.snapshot {
        Some(snapshot) => {
            let meta: SnapshotMeta = rmp_serde::from_slice(&snapshot.meta)
                .map_err(|e| format!("corrupt snapshot metadata: {e}"))?;
            Some((meta, snapshot.data))
        }
        None => None,
    };
    let entries = recovered
        .entries
        .into_iter()
        .map(WalEntry::into_entry)
        .collect::<Result<Vec<_>, _>>()?;
    let hard_state = HardState::from(recovered.hard_state);
    let replica_config = ReplicaConfig {
        raft: config.raft_config,
        node_id: config.node_id,
        node_name: config.node_name,
        rpc_address: config.rpc_address,
        datacenter: config.datacenter,
        bootstrap_single: config.bootstrap_single,
        bootstrap_expect: config.bootstrap_expect,
        snapshot_threshold_entries: config.snapshot_threshold_entries,
        shard_count: shards.len(),
        acl_enabled: shared.config.acl.enabled,
        acl_initial_management: shared
            .config
            .acl
            .tokens
            .initial_management
            .clone()
            .filter(|secret| !secret.is_empty())
            .map(|secret| (uuid::Uuid::new_v4().to_string(), secret)),
        autopilot: shared.config.pending.autopilot.to_replicated(),
    };
    let recovered = Recovered {
        hard_state,
        entries,
        snapshot,
    };
    let now = Now {
        monotonic_ms: shared.now_ms(),
        unix_ms: wall_clock_ms(),
    };
    let replica = Replica::open(replica_config, recovered, rand::random(), now)?;
    let transport = PeerTransport::new(
        config.raft_id,
        faults,
        shared.tls.clone(),
        shared.config.bind_addr,
    );
    let version = replica.version().clone();
    let mut driver = RaftDriver {
        replica,
        wal,
        data_dir: wal_dir,
        inbox,
        shards,
        shared,
        transport,
        effects: Vec::new(),
        unix_ms: now.unix_ms,
        sync_requests: None,
        peer_messages: Vec::new(),
        snapshot_results: flume::bounded(1),
        metrics: RaftMetrics::default(),
        log_reads_done: Vec::new(),
        incoming_snapshot: None,
        restore_results: flume::unbounded(),
    };
    // Opening only logs and points the transport at the configuration's members; nothing
    // it asks for needs the sync thread.
    driver.execute_effects();
    Ok((driver, version))
}

impl RaftDriver {
    /// Steps the replica once and carries out what it asked for.
    fn step(&mut self, input: Input) {
        // The wall clock is read only for the inputs that stamp proposals with it (a peer
        // message does not): one clock read less on every replicated message.
        if matches!(input, Input::Propose { .. } | Input::Tick | Input::Start) {
            self.unix_ms = wall_clock_ms();
        }
        let now = Now {
            monotonic_ms: self.shared.now_ms(),
            unix_ms: self.unix_ms,
        };
        match &input {
            Input::Propose { .. } => self.metrics.proposed(&self.replica),
            Input::Synced { through } => self.metrics.synced_through(*through),
            Input::SnapshotWritten { .. } => self.metrics.snapshot_written(),
            _ => {}
        }
        let started = self.metrics.step_started();
        let applied_before = self.replica.version().index;
        if let Err(error) = self.replica.step(now, input) {
            fatal("raft", error);
        }
        self.metrics
            .stepped(&self.replica, started, applied_before, now.monotonic_ms);
        self.execute_effects();
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
        self.step(Input::Start);
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
                self.step(Input::Message { from, message });
            }
            self.peer_messages = messages;
            while let Ok((meta, data)) = self.snapshot_results.1.try_recv() {
                self.step(Input::SnapshotWritten { meta, data });
            }
            while let Ok((meta, tables, data)) = self.restore_results.1.try_recv() {
                self.step(Input::SnapshotRestored { meta, tables, data });
            }
            self.step(Input::Tick);
            if shutdown {
                break;
            }
        }
        self.transport.shutdown();
        if let Err(e) = self.wal.sync() {
            fatal("raft log write failed", e);
        }
        self.sync_requests = None;
        log::info!(
            "raft: stopped at applied index {}",
            self.replica.version().index
        );
    }

    /// Hands one inbox input to the replica. Returns true when the input asks to stop.
    fn handle_input(&mut self, input: RaftInput) -> bool {
        let input = match input {
            RaftInput::Propose {
                request_id,
                payload,
            } => Input::Propose {
                request_id,
                payload,
            },
            RaftInput::ReadIndex { request_id } => Input::ReadIndex { request_id },
            RaftInput::Message { from, message } => Input::Message { from, message },
            RaftInput::Servers(servers) => Input::Servers(servers),
            RaftInput::Operator { request_id, op } => Input::Operator { request_id, op },
            RaftInput::Synced { through } => Input::Synced { through },
            RaftInput::PeerStream { socket, peer } => {
                self.inbox.adopt(socket, peer);
                return false;
            }
            RaftInput::Shutdown => return true,
        };
        self.step(input);
        false
    }

    /// Carries out every effect the replica accumulated, in order, then hands back the log
    /// reads among them (whose answers may ask for more: a follower catching up from the
    /// log gets append after append until its window is full).
    fn execute_effects(&mut self) {
        loop {
            let mut effects = std::mem::take(&mut self.effects);
            self.replica.swap_effects(&mut effects);
            for effect in effects.drain(..) {
                self.execute(effect);
            }
            self.effects = effects;
            if self.log_reads_done.is_empty() {
                return;
            }
            let now = Now {
                monotonic_ms: self.shared.now_ms(),
                unix_ms: self.unix_ms,
            };
            for (read, entries) in std::mem::take(&mut self.log_reads_done) {
                if let Err(error) = self.replica.step(now, Input::LogRead { read, entries }) {
                    fatal("raft", error);
                }
            }
        }
    }

    /// Reads entries a lagging follower needs back from the log. A failure is not fatal
    /// here: the replica answers it by sending the follower a snapshot instead.
    fn read_log(&mut self, read: LogRead) {
        let entries = self
            .wal
            .read_entries(read.from, read.through, read.bytes_max)
            .and_then(|entries| {
                entries
                    .into_iter()
                    .map(|entry| {
                        entry
                            .into_entry()
                            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
                    })
                    .collect::<Result<Vec<Entry>, _>>()
            })
            .map_err(|error| {
                if error.kind() != std::io::ErrorKind::NotFound {
                    log::warn!(
                        "raft: cannot read entries {}..={} back from the log: {error}",
                        read.from,
                        read.through
                    );
                }
                error.to_string()
            });
        self.log_reads_done.push((read, entries));
    }

    fn execute(&mut self, effect: Effect) {
        match effect {
            Effect::Send { to, message } => self.transport.send(to, message),
            Effect::Append {
                hard_state,
                truncate_from,
                entries,
            } => {
                self.metrics.appending(&self.replica, &entries);
                let entries: Vec<WalEntry> = entries.iter().map(WalEntry::from_entry).collect();
                self.wal
                    .append(hard_state.map(WalHardState::from), truncate_from, &entries);
            }
            Effect::SyncNow => {
                let started = self.metrics.sync_now_started();
                if let Err(e) = self.wal.sync() {
                    fatal("raft log write failed", e);
                }
                self.metrics.synced_now(&self.replica, started);
            }
            Effect::SyncInBackground { sequence } => {
                self.metrics.sync_started(sequence);
                self.sync_in_background(sequence);
            }
            Effect::SnapshotChunk(chunk) => self.assemble_snapshot(chunk),
            Effect::InstallSnapshot { meta } => self.install_snapshot(meta),
            Effect::WriteSnapshot { meta, version } => self.write_snapshot(meta, version),
            Effect::CompactLog { through } => {
                if let Err(e) = self.wal.compact(through) {
                    fatal("cannot compact raft log", e);
                }
            }
            Effect::ReadLog(read) => self.read_log(read),
            Effect::PublishIndex { index } => {
                self.shared.published_index.store(index, Ordering::Release)
            }
            Effect::Deliver {
                shard,
                batch,
                results,
            } => {
                // The test-only publish stall widens the window between queueing the batch
                // to one shard and the next (`http_kv::read_on_another_shard_sees_…`).
                let stall_ms = self.shared.faults.publish_stall_ms();
                if stall_ms > 0 && shard > 0 {
                    std::thread::sleep(Duration::from_millis(stall_ms));
                }
                self.shards[shard].queue_applied(batch, results);
            }
            Effect::RingWatchers => {
                for shard in &self.shards {
                    shard.ring_if_watching();
                }
            }
            Effect::Status(status) => {
                for shard in &self.shards {
                    let _ = shard.send(ShardMessage::Status(status.clone()));
                }
            }
            Effect::Lease { until_ms } => self
                .shared
                .lease_until_ms
                .store(until_ms, Ordering::Release),
            Effect::LeaderContact { at_ms } => self
                .shared
                .last_leader_contact_ms
                .store(at_ms, Ordering::Relaxed),
            Effect::Peers(peers) => self.transport.update_peers(&peers),
            Effect::Log { level, text } => log::log!(level, "{text}"),
        }
    }

    /// Writes what the WAL buffered and hands its sync to the sync thread.
    fn sync_in_background(&mut self, sequence: u64) {
        let file = match self.wal.write() {
            Ok(file) => file,
            Err(e) => fatal("raft log write failed", e),
        };
        let sender = self
            .sync_requests
            .as_ref()
            .unwrap_or_else(|| fatal("raft", "a background sync before the sync thread runs"));
        if sender.send(SyncRequest { sequence, file }).is_err() {
            fatal("raft log sync failed", "the sync thread is gone");
        }
    }

    /// Writes a piece of the snapshot being received from the leader to its file.
    fn assemble_snapshot(&mut self, chunk: SnapshotChunk) {
        if let Some(meta) = &chunk.meta {
            let encoded_meta = rmp_serde::to_vec(meta).expect("snapshot metadata encodes");
            match wal::SnapshotAssembly::create(
                &self.data_dir,
                meta.last_index,
                meta.last_term,
                &encoded_meta,
            ) {
                Ok(assembly) => self.incoming_snapshot = Some(assembly),
                Err(e) => fatal("cannot store a snapshot from the leader", e),
            }
        }
        let Some(assembly) = self.incoming_snapshot.as_mut() else {
            fatal("raft", "a snapshot piece came before the snapshot's first")
        };
        if let Err(e) = assembly.append(chunk.offset, &chunk.data) {
            fatal("cannot store a snapshot from the leader", e);
        }
    }

    /// Stores the snapshot received from the leader under its name (the log before it is
    /// superseded and its old segments go now), then decodes it on a helper thread, reading
    /// the file through a small buffer, and hands the store to the replica.
    fn install_snapshot(&mut self, meta: SnapshotMeta) {
        let started = Instant::now();
        let Some(assembly) = self.incoming_snapshot.take() else {
            fatal("raft", "a snapshot to install that was never received")
        };
        if assembly.last_index() != meta.last_index {
            fatal(
                "raft",
                format!(
                    "the snapshot received is at {}, the one to install at {}",
                    assembly.last_index(),
                    meta.last_index
                ),
            );
        }
        let (path, data) = match assembly.finish() {
            Ok(stored) => stored,
            Err(e) => fatal("cannot persist received snapshot", e),
        };
        if let Err(e) = self.wal.compact(meta.last_index) {
            fatal("cannot compact raft log", e);
        }
        let done = self.restore_results.0.clone();
        std::thread::Builder::new()
            .name("praetor-restore".into())
            .spawn(move || {
                let tables = wal::read_snapshot_state(&path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))
                    .and_then(|mut state| Tables::read_snapshot(&mut state))
                    .map(Box::new);
                telemetry::observe_since(Sample::RaftRpcInstallSnapshot, started);
                let _ = done.send((meta, tables, data));
            })
            .unwrap_or_else(|e| fatal("cannot start the snapshot restore thread", e));
    }

    /// Serializes a version on a helper thread; applies continue meanwhile because the
    /// version is immutable.
    fn write_snapshot(&mut self, meta: SnapshotMeta, version: StoreVersion) {
        self.metrics.snapshot_started(Instant::now());
        let dir = self.data_dir.clone();
        let done = self.snapshot_results.0.clone();
        std::thread::Builder::new()
            .name("praetor-snapshot".into())
            .spawn(move || {
                let started = Instant::now();
                let encoded_meta = rmp_serde::to_vec(&meta).expect("snapshot metadata encodes");
                // Streamed to the file; the core gets the bytes mapped from it, which cost
                // no memory unless a follower has to be sent the snapshot.
                let written = wal::write_snapshot_streaming(
                    &dir,
                    meta.last_index,
                    meta.last_term,
                    &encoded_meta,
                    |out| version.write_snapshot(out),
                );
                drop(version);
                telemetry::observe_since(Sample::RaftSnapshotPersist, started);
                match written {
                    Ok(data) => {
                        let _ = done.send((meta, data));
                    }
                    Err(e) => fatal("cannot write snapshot", e),
                }
            })
            .expect("spawning the snapshot thread");
    }
}
