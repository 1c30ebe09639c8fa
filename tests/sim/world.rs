//! One simulated world: servers running the production replica
//! ([`praetor::replica::Replica`]) on a simulated disk, a simulated network, simulated shards
//! and their clients, gossip's view of the servers, a fault injector, and the checker that
//! runs after every event.
//!
//! Each server is driven as the raft thread drives it: inputs queue in an inbox; an
//! iteration steps the replica with each, then with `Tick`, carrying out every step's effects
//! in order. The thread can be held up between two effects (preempted, or blocked in an
//! fsync), while shards and clients keep running; a crash then loses the effects not yet
//! carried out. The disk (`disk.rs`) has the log's semantics: buffered, written, durable; a
//! crash keeps a prefix of the unsynced writes; an fsync can fail, which stops the server as
//! the real one aborts; background syncs take a while. Shards are modelled as the runtime's:
//! a version, a queue of batches, a published index they compare against before every read.
//!
//! Checked after every event: election safety, log matching (on every entry a server hands
//! to its disk), leader completeness (on every new leader), state-machine safety (one entry
//! per committed index, everywhere), commit never decreasing on a live server, applied ≤
//! commit, no request answered twice, a write's result never before its version, a write
//! refused as certainly not applied never committed, ReadIndex, lease and stale reads seeing
//! every write acknowledged before they started (stale reads: on the same server — the
//! publish-before-queue rule seen from a shard), no leader lease outliving the election of
//! a newer leader; at the end, no acknowledged write lost, and liveness.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

use praetor::raft::{
    Entry, EntryKind, LogIndex, LogRead, Message, Millis, NodeId, RaftConfig, RaftCore, Role,
    SnapshotMeta, Term,
};
use praetor::replica::{
    request_id, shard_of_request, AppliedBatch, ClusterStatus, Effect, Input, Now, OperatorOp,
    ProposalResult, Replica, ReplicaConfig, ServerInfo,
};
use praetor::store::{CommandResult, KvResult, StoreVersion, Tables};

use super::disk::Disk;
use super::kv;
use super::rng::SimRng;

/// Totals over one or more runs, to show the runs exercised what they claim.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    pub seeds: u64,
    pub events: u64,
    pub virtual_ms: u64,
    pub acked_writes: u64,
    pub refused_writes: u64,
    pub reads_checked: u64,
    pub lease_reads: u64,
    pub stale_reads: u64,
    pub reads_waited_for_batch: u64,
    pub elections: u64,
    pub crashes: u64,
    pub fsync_failures: u64,
    pub torn_records: u64,
    pub preemptions: u64,
    pub partitions: u64,
    pub snapshots_installed: u64,
    pub snapshots_taken: u64,
    pub membership_changes: u64,
    pub transfers: u64,
    /// Reads of entries back from the log file, for followers the leader no longer held
    /// entries in memory for.
    pub log_reads: u64,
}

impl RunStats {
    pub fn add(&mut self, other: &RunStats) {
        self.seeds += other.seeds;
        self.events += other.events;
        self.virtual_ms += other.virtual_ms;
        self.acked_writes += other.acked_writes;
        self.refused_writes += other.refused_writes;
        self.reads_checked += other.reads_checked;
        self.lease_reads += other.lease_reads;
        self.stale_reads += other.stale_reads;
        self.reads_waited_for_batch += other.reads_waited_for_batch;
        self.elections += other.elections;
        self.crashes += other.crashes;
        self.fsync_failures += other.fsync_failures;
        self.torn_records += other.torn_records;
        self.preemptions += other.preemptions;
        self.partitions += other.partitions;
        self.snapshots_installed += other.snapshots_installed;
        self.snapshots_taken += other.snapshots_taken;
        self.membership_changes += other.membership_changes;
        self.transfers += other.transfers;
        self.log_reads += other.log_reads;
    }
}

impl fmt::Display for RunStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} seeds, {} events, {:.0} virtual s, {} acked writes ({} refused), {} ReadIndex \
             reads, {} lease reads, {} stale reads ({} waited for their batch), {} elections, \
             {} crashes ({} fsync failures, {} torn records kept), {} preemptions, {} \
             partitions, {} snapshots installed, {} taken, {} membership changes, {} transfers, \
             {} log reads",
            self.seeds,
            self.events,
            self.virtual_ms as f64 / 1000.0,
            self.acked_writes,
            self.refused_writes,
            self.reads_checked,
            self.lease_reads,
            self.stale_reads,
            self.reads_waited_for_batch,
            self.elections,
            self.crashes,
            self.fsync_failures,
            self.torn_records,
            self.preemptions,
            self.partitions,
            self.snapshots_installed,
            self.snapshots_taken,
            self.membership_changes,
            self.transfers,
            self.log_reads
        )
    }
}

/// The command that replays `seed`.
pub fn replay_command(seed: u64, order: DriverOrder) -> String {
    let order = match order {
        DriverOrder::AsEmitted => "",
        DriverOrder::QueueBeforePublish => "SIM_DRIVER_ORDER=queue-before-publish ",
    };
    format!("{order}SIM_SEED={seed} cargo test --profile ci --test sim -- replay --nocapture")
}

/// The order in which the simulated raft thread carries out a batch's publication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverOrder {
    /// As the replica emits it, and as the production raft thread carries it out: the
    /// published index moves before any shard is given the batch.
    AsEmitted,
    /// Deliberately broken, only to show the checker catches it: every `PublishIndex` is
    /// carried out after the `Deliver`s that follow it, so a shard may acknowledge a write
    /// while another shard still compares against the old index.
    QueueBeforePublish,
}

/// Runs one seed; panics (after naming the seed and the replay command) on any violation.
pub fn run_seed(seed: u64, trace: bool) -> RunStats {
    run_seed_with(seed, trace, DriverOrder::AsEmitted)
}

/// Runs one seed with the driver carrying out effects in `order`.
pub fn run_seed_with(seed: u64, trace: bool, order: DriverOrder) -> RunStats {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut world = World::new(seed, trace);
        world.order = order;
        world.run();
        world.stats
    }));
    match outcome {
        Ok(stats) => stats,
        Err(panic) => {
            eprintln!(
                "\nsim: seed {seed} FAILED. Replay with:\n  {}\n(add SIM_TRACE=1 for an event \
                 trace)\n",
                replay_command(seed, order)
            );
            resume_unwind(panic)
        }
    }
}

const ELECTION_TIMEOUT_MS: Millis = 300;
const HEARTBEAT_MS: Millis = 50;
/// The sim has no clock drift, so the lease may come as close to the election timeout as
/// it likes; the tightest setting makes a lease computed from the wrong instant visible.
const LEASE_CHOICES_MS: [Millis; 2] = [250, ELECTION_TIMEOUT_MS - 1];
/// The raft thread's poll timeout: it iterates at least this often.
const TICK_MS: Millis = 10;
const ACTION_MS: Millis = 5;
/// After every fault heals, a leader must be elected and a new write committed and applied
/// on every member within this much virtual time.
const LIVENESS_BOUND_MS: Millis = 20 * ELECTION_TIMEOUT_MS;
const KEYS: u64 = 8;
/// Shards per server: at least two, or the publish-before-queue rule has nothing to order.
const SHARDS: usize = 3;
/// Inputs one iteration takes from the inbox, as the raft thread does.
const INPUTS_PER_ITERATION_MAX: usize = 8192;
/// How long a shard waits for a batch whose index it saw published, as `Shard::catch_up`.
const CATCH_UP_WAIT_MAX_MS: Millis = 5_000;
/// Watchdogs: a run exceeding this is stuck, which is a failure too.
const EVENTS_PER_RUN_MAX: u64 = 20_000_000;

/// Everything a seed decides about a run.
#[derive(Debug)]
struct Scenario {
    nodes: u64,
    initial_voters: u64,
    torn_writes: bool,
    chaos_ms: Millis,
    loss_per_mille: u64,
    dup_per_mille: u64,
    /// Chance that a message ignores its link's FIFO order (links are otherwise ordered,
    /// like the TCP transport).
    reorder_per_mille: u64,
    delay_max_ms: Millis,
    fsync_max_ms: Millis,
    /// Chance that a sync on the raft thread blocks it for up to `fsync_max_ms`.
    sync_stall_per_mille: u64,
    /// Chance, per sync, that the fsync fails (the server stops).
    fsync_fail_per_mille: u64,
    /// Chance that the raft thread is preempted between two effects for 1–3 ms.
    preempt_per_mille: u64,
    append_entries_max: usize,
    inflight_appends_max: usize,
    snapshot_chunk_bytes: u64,
    snapshot_inflight_chunks_max: u64,
    trailing_entries: u64,
    snapshot_threshold_entries: u64,
    crash_per_mille: u64,
    partition_per_mille: u64,
    membership_per_mille: u64,
    transfer_per_mille: u64,
    lease_ms: Millis,
    /// Chance of crashing a server inside the fsync window right after it writes a new term
    /// or vote: the moments where durability rules matter most.
    targeted_crash_per_mille: u64,
    /// Autopilot's `ServerStabilizationTime`: how long a joined server waits to vote.
    stabilization_ms: Millis,
    /// `RaftConfig::log_cache_bytes`: small bounds make leaders read lagging followers'
    /// entries back from the disk.
    log_cache_bytes: u64,
}

impl Scenario {
    fn draw(rng: &mut SimRng) -> Self {
        let nodes = if rng.chance(500) { 3 } else { 5 };
        let initial_voters = match nodes {
            3 if rng.chance(250) => 1,
            3 => 3,
            _ if rng.chance(500) => 3,
            _ => 5,
        };
        Scenario {
            nodes,
            initial_voters,
            torn_writes: rng.chance(500),
            chaos_ms: rng.range(5000, 25000),
            loss_per_mille: rng.pick(&[0, 10, 50, 100]),
            dup_per_mille: rng.pick(&[0, 0, 20, 50]),
            reorder_per_mille: rng.pick(&[0, 20, 200, 1000]),
            delay_max_ms: rng.pick(&[2, 10, 30, 60]),
            fsync_max_ms: rng.pick(&[1, 5, 15]),
            sync_stall_per_mille: rng.pick(&[0, 100, 500]),
            fsync_fail_per_mille: rng.pick(&[0, 0, 1, 3]),
            preempt_per_mille: rng.pick(&[0, 20, 100]),
            append_entries_max: rng.pick(&[2, 8, 64]),
            inflight_appends_max: rng.pick(&[1, 3, 16]),
            snapshot_chunk_bytes: rng.pick(&[16, 64, 512]),
            snapshot_inflight_chunks_max: rng.pick(&[1, 2, 4]),
            trailing_entries: rng.pick(&[0, 5, 50]),
            snapshot_threshold_entries: rng.pick(&[16, 64, 256]),
            crash_per_mille: rng.pick(&[0, 2, 5, 10]),
            partition_per_mille: rng.pick(&[0, 2, 5, 10]),
            membership_per_mille: rng.pick(&[0, 3, 8]),
            transfer_per_mille: rng.pick(&[0, 2, 5]),
            lease_ms: rng.pick(&LEASE_CHOICES_MS),
            targeted_crash_per_mille: rng.pick(&[0, 30, 150]),
            stabilization_ms: rng.pick(&[0, 500, 3000]),
            log_cache_bytes: rng.pick(&[0, 300, 4096, 1 << 20]),
        }
        .fix_up()
    }

    /// A few entries per round trip cannot drain a partitioned follower's backlog within the
    /// liveness bound over slow links (that measures throughput, not liveness): keep at
    /// least 32 entries in flight.
    fn fix_up(mut self) -> Self {
        let entries_in_flight_min = 32;
        if self.append_entries_max * self.inflight_appends_max < entries_in_flight_min {
            self.inflight_appends_max = entries_in_flight_min.div_ceil(self.append_entries_max);
        }
        self
    }

    fn raft_config(&self, id: NodeId) -> RaftConfig {
        let mut config = RaftConfig::new(id);
        config.election_timeout_ms = ELECTION_TIMEOUT_MS;
        config.heartbeat_interval_ms = HEARTBEAT_MS;
        config.lease_ms = self.lease_ms;
        config.append_entries_max = self.append_entries_max;
        config.append_bytes_max = 4096;
        config.inflight_appends_max = self.inflight_appends_max;
        config.snapshot_chunk_bytes = self.snapshot_chunk_bytes;
        config.snapshot_inflight_chunks_max = self.snapshot_inflight_chunks_max;
        config.snapshot_retransmit_ms = 4 * HEARTBEAT_MS;
        config.trailing_entries = self.trailing_entries;
        config.log_cache_bytes = self.log_cache_bytes;
        config.uncommitted_entries_max = 64;
        config.read_requests_pending_max = 64;
        config
    }

    /// The `bootstrap_expect` of server `id`: the initial voters expect each other; a lone
    /// initial voter bootstraps alone; the others wait to be added.
    fn bootstrap_expect(&self, id: NodeId) -> u32 {
        if self.initial_voters > 1 && id <= self.initial_voters {
            self.initial_voters as u32
        } else {
            0
        }
    }

    fn replica_config(&self, id: NodeId) -> ReplicaConfig {
        ReplicaConfig {
            raft: self.raft_config(id),
            node_id: format!("node-{id}"),
            node_name: name_of(id),
            rpc_address: address_of(id),
            datacenter: "dc1".to_string(),
            bootstrap_single: self.initial_voters == 1 && id == 1,
            bootstrap_expect: self.bootstrap_expect(id),
            snapshot_threshold_entries: self.snapshot_threshold_entries,
            shard_count: SHARDS,
            acl_enabled: false,
            acl_initial_management: None,
            autopilot: praetor::store::autopilot::AutopilotConfig {
                server_stabilization_time_ns: self.stabilization_ms as i64 * 1_000_000,
                ..Default::default()
            },
        }
    }
}

fn name_of(id: NodeId) -> String {
    format!("server-{id}")
}

fn address_of(id: NodeId) -> String {
    format!("10.0.0.{id}:8300")
}

/// A read a client made, checked when it is served.
#[derive(Clone, Copy, Debug)]
enum ReadKind {
    /// `?consistent`: after a ReadIndex round; must see every write acknowledged anywhere
    /// before it started.
    Consistent,
    /// Default consistency served under the leader lease; the same requirement.
    Lease,
    /// `?stale`: may lag the leader, but must see every write acknowledged on this server
    /// before it started, whichever shard acknowledged it.
    Stale,
}

#[derive(Clone, Copy, Debug)]
struct Read {
    kind: ReadKind,
    key: u8,
    must_see: LogIndex,
    started_at: Millis,
}

#[derive(Debug)]
enum Event {
    Deliver {
        from: NodeId,
        to: NodeId,
        message: Message,
    },
    /// The raft thread wakes for queued inputs.
    Iterate {
        node: NodeId,
        incarnation: u64,
    },
    /// The raft thread's poll timed out.
    Tick {
        node: NodeId,
        incarnation: u64,
    },
    /// The raft thread continues after a preemption or a blocking fsync.
    Resume {
        node: NodeId,
        incarnation: u64,
    },
    SyncDone {
        node: NodeId,
        incarnation: u64,
        sequence: u64,
    },
    SnapshotDone {
        node: NodeId,
        incarnation: u64,
        meta: SnapshotMeta,
        version: StoreVersion,
    },
    /// The restore of a snapshot from the leader finishes.
    SnapshotRestored {
        node: NodeId,
        incarnation: u64,
        meta: SnapshotMeta,
        data: bytes::Bytes,
    },
    /// A read of the log file the replica asked for comes back.
    LogRead {
        node: NodeId,
        incarnation: u64,
        read: LogRead,
        entries: Result<Vec<Entry>, String>,
    },
    /// A shard's doorbell: it takes in what was queued for it.
    ShardWake {
        node: NodeId,
        incarnation: u64,
        shard: usize,
    },
    /// A client's read reaches a shard (or retries while the shard waits for its batch).
    ShardRead {
        node: NodeId,
        incarnation: u64,
        shard: usize,
        read: Option<Read>,
        key: u8,
    },
    /// Gossip tells a server its current view of the servers.
    Gossip {
        node: NodeId,
        incarnation: u64,
    },
    /// Gossip declares a server that stayed down failed.
    MarkFailed {
        node: NodeId,
        incarnation: u64,
    },
    Restart {
        node: NodeId,
    },
    Crash {
        node: NodeId,
        incarnation: u64,
    },
    Action,
    HealAll,
}

struct Scheduled {
    at: Millis,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    // Reversed: BinaryHeap is a max-heap and we want the earliest event first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// What waits for a client's request.
#[derive(Debug)]
enum Request {
    Write {
        key: u8,
        write_id: u64,
        /// The log index the replica gave it, once accepted.
        index: Option<LogIndex>,
        proposed_at: Millis,
    },
    Read(Read),
    Operator,
}

/// One queued batch and the results for this shard that ride with it.
type Queued = (Arc<AppliedBatch>, Vec<(u64, ProposalResult)>);

/// One shard as the runtime has it: a version and the queue of batches from the raft
/// thread.
struct SimShard {
    version: StoreVersion,
    queue: VecDeque<Queued>,
}

/// Moves every `PublishIndex` after the run of `Deliver`s that follows it: the reversed,
/// broken order [`DriverOrder::QueueBeforePublish`] stands for.
fn queue_before_publish(effects: &mut VecDeque<Effect>) {
    let mut at = 0;
    while at < effects.len() {
        if matches!(effects[at], Effect::PublishIndex { .. }) {
            let mut end = at + 1;
            while end < effects.len() && matches!(effects[end], Effect::Deliver { .. }) {
                end += 1;
            }
            let publish = effects.remove(at).expect("the index is in range");
            effects.insert(end - 1, publish);
            at = end;
        } else {
            at += 1;
        }
    }
}

/// Where an interrupted iteration continues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Continuation {
    /// Remaining inbox inputs, then `Tick`.
    Inputs,
    /// The iteration had reached its `Tick`; nothing more.
    Done,
}

/// The raft thread held up between two effects.
struct Stall {
    effects: VecDeque<Effect>,
    /// The thread is blocked in an fsync that completes (or fails) at resume.
    sync_pending: bool,
    then: Continuation,
}

/// A server. `replica` is `None` while it is down; everything but `disk` and
/// `incarnation` is volatile.
struct Node {
    replica: Option<Replica>,
    incarnation: u64,
    disk: Disk,
    inbox: VecDeque<Input>,
    iteration_pending: bool,
    stalled: Option<Stall>,
    last_sync_done_at: Millis,
    /// Peers the transport knows (the replica's last `Peers`).
    peers: BTreeSet<NodeId>,
    /// The published index the shards compare against.
    published: LogIndex,
    lease_until: Millis,
    status: Arc<ClusterStatus>,
    shards: Vec<SimShard>,
    requests: HashMap<u64, Request>,
    next_request: u64,
    /// The highest index of a write to each key acknowledged by this server's shards.
    acked_here: [LogIndex; KEYS as usize],
    /// The commit index last seen on this incarnation.
    last_commit: LogIndex,
    /// The last term in which this node was seen leading.
    led_term: Option<Term>,
    /// The entries this incarnation wrote (or recovered) above its last known commit, as
    /// the log file holds them: the safety checks read committed entries from here when
    /// the core no longer holds them in memory.
    appended: BTreeMap<LogIndex, Entry>,
    /// The snapshot being received from the leader, as its pieces were written.
    incoming_snapshot: Option<(SnapshotMeta, Vec<u8>)>,
}

impl Node {
    fn down() -> Node {
        Node {
            replica: None,
            incarnation: 0,
            disk: Disk::default(),
            inbox: VecDeque::new(),
            iteration_pending: false,
            stalled: None,
            last_sync_done_at: 0,
            peers: BTreeSet::new(),
            published: 0,
            lease_until: 0,
            status: Arc::new(ClusterStatus::default()),
            shards: Vec::new(),
            requests: HashMap::new(),
            next_request: 1,
            acked_here: [0; KEYS as usize],
            last_commit: 0,
            led_term: None,
            appended: BTreeMap::new(),
            incoming_snapshot: None,
        }
    }

    fn core(&self) -> Option<&RaftCore> {
        self.replica.as_ref().map(Replica::raft)
    }

    fn applied(&self) -> LogIndex {
        self.replica.as_ref().map_or(0, |r| r.version().index)
    }
}

struct CommittedEntry {
    term: Term,
    digest: u64,
    /// The lowest term of a server seen holding it committed: the term of the leader that
    /// committed it (the leader sees its own commit first).
    commit_term: Term,
}

struct World {
    seed: u64,
    trace: bool,
    order: DriverOrder,
    scenario: Scenario,
    rng: SimRng,
    now: Millis,
    seq: u64,
    queue: BinaryHeap<Scheduled>,
    nodes: BTreeMap<NodeId, Node>,
    /// Gossip's view: the servers that joined, alive or failed, left or not.
    gossip: BTreeMap<NodeId, ServerInfo>,
    cut: BTreeSet<(NodeId, NodeId)>,
    /// The latest delivery time scheduled on each directed link (FIFO order).
    link_busy_until: HashMap<(NodeId, NodeId), Millis>,
    healed_at: Option<Millis>,
    loss_per_mille: u64,
    dup_per_mille: u64,
    leader_of_term: BTreeMap<Term, NodeId>,
    max_leader_term: Term,
    committed: Vec<Option<CommittedEntry>>,
    committed_write_ids: HashSet<u64>,
    refused_write_ids: HashSet<u64>,
    appended: HashMap<(LogIndex, Term), (u64, Option<Term>)>,
    acked_max: [LogIndex; KEYS as usize],
    next_write_id: u64,
    liveness_index: Option<LogIndex>,
    finished: bool,
    stats: RunStats,
}

fn digest(entry: &Entry) -> u64 {
    // FNV-1a over the kind and the payload.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let kind = match entry.kind {
        EntryKind::Normal => 1u8,
        EntryKind::Noop => 2,
        EntryKind::Membership => 3,
    };
    for byte in std::iter::once(&kind).chain(entry.data.iter()) {
        hash ^= *byte as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

macro_rules! fail {
    ($world:expr, $($arg:tt)*) => {{
        let message = format!($($arg)*);
        panic!(
            "sim: seed {} at {} ms: {}\n  replay: {}",
            $world.seed, $world.now, message, replay_command($world.seed, $world.order)
        )
    }};
}

impl World {
    fn new(seed: u64, trace: bool) -> Self {
        let mut rng = SimRng::new(seed);
        let scenario = Scenario::draw(&mut rng);
        if trace {
            println!("seed {seed}: {scenario:?}");
        }
        let mut world = World {
            seed,
            trace,
            order: DriverOrder::AsEmitted,
            loss_per_mille: scenario.loss_per_mille,
            dup_per_mille: scenario.dup_per_mille,
            scenario,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            nodes: BTreeMap::new(),
            gossip: BTreeMap::new(),
            cut: BTreeSet::new(),
            link_busy_until: HashMap::new(),
            healed_at: None,
            leader_of_term: BTreeMap::new(),
            max_leader_term: 0,
            committed: Vec::new(),
            committed_write_ids: HashSet::new(),
            refused_write_ids: HashSet::new(),
            appended: HashMap::new(),
            acked_max: [0; KEYS as usize],
            next_write_id: 1,
            liveness_index: None,
            finished: false,
            stats: RunStats {
                seeds: 1,
                ..RunStats::default()
            },
        };
        for id in 1..=world.scenario.nodes {
            world.nodes.insert(id, Node::down());
            if id <= world.scenario.initial_voters {
                world.join(id);
            }
        }
        for id in 1..=world.scenario.nodes {
            world.restart(id);
        }
        world.schedule(1, Event::Action);
        let chaos_ms = world.scenario.chaos_ms;
        world.schedule(chaos_ms, Event::HealAll);
        world
    }

    fn schedule(&mut self, after_ms: Millis, event: Event) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at: self.now + after_ms,
            seq: self.seq,
            event,
        });
    }

    fn clock(&self) -> Now {
        Now {
            monotonic_ms: self.now,
            unix_ms: 1_700_000_000_000 + self.now,
        }
    }

    fn node(&mut self, id: NodeId) -> &mut Node {
        self.nodes.get_mut(&id).expect("node exists")
    }

    fn is_live(&self, id: NodeId, incarnation: u64) -> bool {
        let node = &self.nodes[&id];
        node.incarnation == incarnation && node.replica.is_some()
    }

    fn run(&mut self) {
        while !self.finished {
            let Some(next) = self.queue.pop() else {
                fail!(self, "the event queue ran dry");
            };
            debug_assert!(next.at >= self.now);
            self.now = next.at;
            self.stats.events += 1;
            if self.stats.events > EVENTS_PER_RUN_MAX {
                fail!(
                    self,
                    "more than {EVENTS_PER_RUN_MAX} events: the run is stuck"
                );
            }
            self.handle(next.event);
            self.check_invariants();
            if let Some(healed_at) = self.healed_at {
                if self.now > healed_at + LIVENESS_BOUND_MS {
                    fail!(
                        self,
                        "liveness: no leader committed a new write on all members within {} ms \
                         of healing; {}",
                        LIVENESS_BOUND_MS,
                        self.describe()
                    );
                }
            }
        }
        self.final_checks();
        self.stats.virtual_ms = self.now;
    }

    fn describe(&self) -> String {
        let mut out = String::new();
        for (id, node) in &self.nodes {
            match node.core() {
                None => out.push_str(&format!("\n  node {id}: down")),
                Some(core) => {
                    let status = core.status();
                    out.push_str(&format!(
                        "\n  node {id}: {:?} term {} leader {:?} commit {} applied {} store {} \
                         last {} snapshot {} voters {:?} members {:?} transfer {:?} stalled {}",
                        status.role,
                        status.term,
                        status.leader,
                        status.commit,
                        status.applied,
                        node.applied(),
                        status.last_index,
                        status.snapshot_index,
                        status.membership.voters().collect::<Vec<_>>(),
                        status.membership.members.keys().collect::<Vec<_>>(),
                        status.leadership_transfer_to,
                        node.stalled.is_some(),
                    ));
                }
            }
        }
        out.push_str(&format!(
            "\n  gossip {:?}",
            self.gossip
                .values()
                .map(|s| (s.raft_id, s.alive, s.left))
                .collect::<Vec<_>>()
        ));
        out
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver { from, to, message } => {
                if self.cut.contains(&(from, to)) {
                    return;
                }
                if self.trace {
                    println!("{:>6} {from}->{to} {message:?}", self.now);
                }
                self.deliver_input(to, Input::Message { from, message });
            }
            Event::Iterate { node, incarnation } => {
                if self.is_live(node, incarnation) {
                    self.node(node).iteration_pending = false;
                    self.iterate(node);
                }
            }
            Event::Tick { node, incarnation } => {
                if self.is_live(node, incarnation) {
                    self.iterate(node);
                    self.schedule(TICK_MS, Event::Tick { node, incarnation });
                }
            }
            Event::Resume { node, incarnation } => {
                if self.is_live(node, incarnation) {
                    self.resume(node);
                }
            }
            Event::SyncDone {
                node,
                incarnation,
                sequence,
            } => {
                if self.is_live(node, incarnation) {
                    if self.fsync_fails() {
                        self.stop_on_fsync_failure(node);
                        return;
                    }
                    self.node(node).disk.sync_through(sequence);
                    self.deliver_input(node, Input::Synced { through: sequence });
                }
            }
            Event::SnapshotRestored {
                node,
                incarnation,
                meta,
                data,
            } => {
                if self.is_live(node, incarnation) {
                    let tables = Tables::from_snapshot_bytes(&data).map(Box::new);
                    self.deliver_input(node, Input::SnapshotRestored { meta, tables, data });
                }
            }
            Event::LogRead {
                node,
                incarnation,
                read,
                entries,
            } => {
                if self.is_live(node, incarnation) {
                    self.stats.log_reads += 1;
                    self.deliver_input(node, Input::LogRead { read, entries });
                }
            }
            Event::SnapshotDone {
                node,
                incarnation,
                meta,
                version,
            } => {
                if self.is_live(node, incarnation) {
                    let data = bytes::Bytes::from(version.to_snapshot_bytes());
                    self.node(node)
                        .disk
                        .store_snapshot(meta.clone(), data.clone());
                    self.stats.snapshots_taken += 1;
                    self.deliver_input(node, Input::SnapshotWritten { meta, data });
                }
            }
            Event::ShardWake {
                node,
                incarnation,
                shard,
            } => {
                if self.is_live(node, incarnation) {
                    self.take_in(node, shard);
                }
            }
            Event::ShardRead {
                node,
                incarnation,
                shard,
                read,
                key,
            } => {
                if self.is_live(node, incarnation) {
                    // A read that just arrives starts now and must see what this server
                    // has acknowledged so far.
                    let read = read.unwrap_or(Read {
                        kind: ReadKind::Stale,
                        key,
                        must_see: self.nodes[&node].acked_here[key as usize],
                        started_at: self.now,
                    });
                    self.shard_read(node, shard, read);
                }
            }
            Event::Gossip { node, incarnation } => {
                if self.is_live(node, incarnation) {
                    let view: Vec<ServerInfo> = self.gossip.values().cloned().collect();
                    self.deliver_input(node, Input::Servers(view));
                }
            }
            Event::MarkFailed { node, incarnation } => {
                let still_down = {
                    let n = &self.nodes[&node];
                    n.incarnation == incarnation && n.replica.is_none()
                };
                if still_down && self.healed_at.is_none() {
                    if let Some(info) = self.gossip.get_mut(&node) {
                        info.alive = false;
                        self.publish_gossip();
                    }
                }
            }
            Event::Crash { node, incarnation } => {
                if self.is_live(node, incarnation) && self.healed_at.is_none() {
                    self.crash(node, "targeted");
                    let down_ms = self.rng.range(1, 300);
                    self.schedule(down_ms, Event::Restart { node });
                }
            }
            Event::Restart { node } => {
                if self.nodes[&node].replica.is_none() {
                    self.restart(node);
                }
            }
            Event::Action => {
                self.act();
                self.schedule(ACTION_MS, Event::Action);
            }
            Event::HealAll => self.heal_all(),
        }
    }

    fn heal_all(&mut self) {
        if self.trace {
            println!("{:>6} heal all", self.now);
        }
        self.healed_at = Some(self.now);
        self.cut.clear();
        self.loss_per_mille = 0;
        self.dup_per_mille = 0;
        let down: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.replica.is_none())
            .map(|(id, _)| *id)
            .collect();
        for id in down {
            self.restart(id);
        }
        for id in 1..=self.scenario.nodes {
            self.join(id);
            let info = self.gossip.get_mut(&id).expect("joined");
            info.alive = true;
            info.left = false;
        }
        self.publish_gossip();
    }

    // ----- gossip ------------------------------------------------------------------------

    /// Server `id` appears in gossip (alive, not left).
    fn join(&mut self, id: NodeId) {
        let expect = self.scenario.bootstrap_expect(id);
        self.gossip.entry(id).or_insert_with(|| ServerInfo {
            raft_id: id,
            node_id: format!("node-{id}"),
            name: name_of(id),
            rpc_address: address_of(id),
            datacenter: "dc1".to_string(),
            expect,
            alive: true,
            left: false,
        });
    }

    /// Every live server hears gossip's current view a little later.
    fn publish_gossip(&mut self) {
        let live: Vec<(NodeId, u64)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.replica.is_some())
            .map(|(id, n)| (*id, n.incarnation))
            .collect();
        for (node, incarnation) in live {
            let after = self.rng.range(1, 50);
            self.schedule(after, Event::Gossip { node, incarnation });
        }
    }

    // ----- network -----------------------------------------------------------------------

    fn send(&mut self, from: NodeId, to: NodeId, message: Message) {
        if self.cut.contains(&(from, to)) || self.rng.chance(self.loss_per_mille) {
            return;
        }
        let delay_max = self.scenario.delay_max_ms;
        if self.rng.chance(self.dup_per_mille) {
            let delay = self.rng.range(1, delay_max * 2);
            self.schedule(
                delay,
                Event::Deliver {
                    from,
                    to,
                    message: message.clone(),
                },
            );
        }
        let mut at = self.now + self.rng.range(1, delay_max);
        if !self.rng.chance(self.scenario.reorder_per_mille) {
            let busy_until = self.link_busy_until.entry((from, to)).or_insert(0);
            at = at.max(*busy_until);
            *busy_until = at;
        }
        self.schedule(at - self.now, Event::Deliver { from, to, message });
    }

    // ----- the raft thread ---------------------------------------------------------------

    /// Queues an input for the raft thread and wakes it.
    fn deliver_input(&mut self, id: NodeId, input: Input) {
        let node = self.node(id);
        if node.replica.is_none() {
            return;
        }
        node.inbox.push_back(input);
        if !node.iteration_pending && node.stalled.is_none() {
            node.iteration_pending = true;
            let incarnation = node.incarnation;
            self.schedule(
                0,
                Event::Iterate {
                    node: id,
                    incarnation,
                },
            );
        }
    }

    /// One loop iteration of the raft thread, unless it is held up (it continues then).
    fn iterate(&mut self, id: NodeId) {
        if self.nodes[&id].stalled.is_some() {
            return;
        }
        self.continue_iteration(id);
    }

    fn continue_iteration(&mut self, id: NodeId) {
        for _ in 0..INPUTS_PER_ITERATION_MAX {
            let Some(input) = self.node(id).inbox.pop_front() else {
                break;
            };
            if !self.step(id, input, Continuation::Inputs) {
                return;
            }
        }
        self.step(id, Input::Tick, Continuation::Done);
    }

    /// Steps the replica and carries out its effects; false when the thread was held up or
    /// the server stopped before it finished.
    fn step(&mut self, id: NodeId, input: Input, then: Continuation) -> bool {
        let now = self.clock();
        let order = self.order;
        let proposal_id = match &input {
            Input::Propose { request_id, .. } => Some(*request_id),
            _ => None,
        };
        let timeout_now = matches!(
            input,
            Input::Message {
                message: Message::TimeoutNow { .. },
                ..
            }
        );
        let node = self.node(id);
        let Some(replica) = node.replica.as_mut() else {
            return false;
        };
        let pending_before = replica.pending_proposals();
        let term_before = replica.raft().term();
        let stepped = replica.step(now, input);
        let accepted_at =
            (replica.pending_proposals() > pending_before).then(|| replica.raft().last_index());
        let campaigned =
            replica.raft().term() > term_before && replica.raft().role() != Role::Follower;
        let mut effects: VecDeque<Effect> = replica.drain_effects().collect();
        if order == DriverOrder::QueueBeforePublish {
            queue_before_publish(&mut effects);
        }
        if let (Some(request), Some(index)) = (proposal_id, accepted_at) {
            if let Some(Request::Write { index: slot, .. }) = node.requests.get_mut(&request) {
                *slot = Some(index);
            }
        }
        if let Err(fatal) = stepped {
            fail!(self, "node {id}: the replica stopped: {fatal}");
        }
        if timeout_now && campaigned {
            self.stats.transfers += 1;
        }
        self.execute_effects(id, effects, then)
    }

    /// Carries out effects in order; the thread may be held up between two of them.
    fn execute_effects(
        &mut self,
        id: NodeId,
        mut effects: VecDeque<Effect>,
        then: Continuation,
    ) -> bool {
        while let Some(effect) = effects.pop_front() {
            let incarnation = self.nodes[&id].incarnation;
            if let Effect::SyncNow = effect {
                if self.rng.chance(self.scenario.sync_stall_per_mille) {
                    // The fsync blocks the thread; what follows waits for it.
                    self.node(id).disk.write(0);
                    let ms = self.rng.range(1, self.scenario.fsync_max_ms);
                    if self.healed_at.is_none()
                        && self.rng.chance(self.scenario.targeted_crash_per_mille)
                    {
                        // The machine dies while the thread waits for the disk: whatever the
                        // replica let out before this sync must not have depended on it.
                        let after = self.rng.range(0, ms - 1);
                        self.schedule(
                            after,
                            Event::Crash {
                                node: id,
                                incarnation,
                            },
                        );
                    }
                    self.node(id).stalled = Some(Stall {
                        effects,
                        sync_pending: true,
                        then,
                    });
                    self.schedule(
                        ms,
                        Event::Resume {
                            node: id,
                            incarnation,
                        },
                    );
                    return false;
                }
            }
            self.execute(id, effect);
            if !self.is_live(id, incarnation) {
                return false;
            }
            if !effects.is_empty() && self.rng.chance(self.scenario.preempt_per_mille) {
                self.stats.preemptions += 1;
                let ms = self.rng.range(1, 3);
                self.node(id).stalled = Some(Stall {
                    effects,
                    sync_pending: false,
                    then,
                });
                self.schedule(
                    ms,
                    Event::Resume {
                        node: id,
                        incarnation,
                    },
                );
                return false;
            }
        }
        true
    }

    fn resume(&mut self, id: NodeId) {
        let Some(stall) = self.node(id).stalled.take() else {
            return;
        };
        if stall.sync_pending && !self.sync_now(id) {
            return;
        }
        if !self.execute_effects(id, stall.effects, stall.then) {
            return;
        }
        match stall.then {
            Continuation::Inputs => self.continue_iteration(id),
            Continuation::Done => {
                if !self.nodes[&id].inbox.is_empty() {
                    let node = self.node(id);
                    node.iteration_pending = true;
                    let incarnation = node.incarnation;
                    self.schedule(
                        0,
                        Event::Iterate {
                            node: id,
                            incarnation,
                        },
                    );
                }
            }
        }
    }

    /// A sync on the raft thread; false when the fsync failed and the server stopped.
    fn sync_now(&mut self, id: NodeId) -> bool {
        if self.fsync_fails() {
            self.node(id).disk.write(0);
            self.stop_on_fsync_failure(id);
            return false;
        }
        self.node(id).disk.sync_all();
        true
    }

    /// Whether this fsync fails: only while faults are injected.
    fn fsync_fails(&mut self) -> bool {
        self.healed_at.is_none() && self.rng.chance(self.scenario.fsync_fail_per_mille)
    }

    /// A failed fsync stops the server, as the real one aborts; its supervisor restarts it.
    fn stop_on_fsync_failure(&mut self, id: NodeId) {
        self.stats.fsync_failures += 1;
        self.crash(id, "an fsync failed");
        let down_ms = self.rng.range(1, 500);
        self.schedule(down_ms, Event::Restart { node: id });
    }

    fn execute(&mut self, id: NodeId, effect: Effect) {
        match effect {
            Effect::Send { to, message } => {
                if self.nodes[&id].peers.contains(&to) {
                    self.send(id, to, message);
                }
            }
            Effect::Append {
                hard_state,
                truncate_from,
                entries,
            } => {
                let previous_term = |world: &World, index: LogIndex| {
                    world.nodes[&id]
                        .core()
                        .and_then(|core| core.log_term(index.saturating_sub(1)))
                };
                for entry in &entries {
                    let previous = previous_term(self, entry.index);
                    self.check_log_matching(id, entry, previous);
                }
                if let Some(hs) = hard_state {
                    let durable = self.nodes[&id].disk.hard_state;
                    let vote_moved =
                        hs.vote.is_some() && (hs.term, hs.vote) != (durable.term, durable.vote);
                    if vote_moved
                        && self.healed_at.is_none()
                        && self.rng.chance(self.scenario.targeted_crash_per_mille)
                    {
                        // Crash inside the window where this vote or term is not yet durable.
                        let within = self.scenario.fsync_max_ms + self.scenario.delay_max_ms;
                        let after = self.rng.range(0, within);
                        let incarnation = self.nodes[&id].incarnation;
                        self.schedule(
                            after,
                            Event::Crash {
                                node: id,
                                incarnation,
                            },
                        );
                    }
                }
                let node = self.node(id);
                if let Some(from) = truncate_from {
                    node.appended.split_off(&from);
                }
                for entry in &entries {
                    // An entry replaces everything from its index on, as the log's replay does.
                    node.appended.split_off(&entry.index);
                    node.appended.insert(entry.index, entry.clone());
                }
                node.disk.append(hard_state, truncate_from, &entries);
            }
            Effect::SyncNow => {
                self.sync_now(id);
            }
            Effect::SyncInBackground { sequence } => {
                let fsync_ms = self.rng.range(1, self.scenario.fsync_max_ms);
                let now = self.now;
                let node = self.node(id);
                node.disk.write(sequence);
                let done_at = (now + fsync_ms).max(node.last_sync_done_at);
                node.last_sync_done_at = done_at;
                let incarnation = node.incarnation;
                let after = done_at - now;
                self.schedule(
                    after,
                    Event::SyncDone {
                        node: id,
                        incarnation,
                        sequence,
                    },
                );
            }
            Effect::SnapshotChunk(chunk) => {
                let node = self.node(id);
                if let Some(meta) = chunk.meta {
                    node.incoming_snapshot = Some((meta, Vec::new()));
                }
                let Some((_, assembled)) = &mut node.incoming_snapshot else {
                    fail!(
                        self,
                        "node {id}: a snapshot piece before the snapshot's first"
                    );
                };
                if chunk.offset != assembled.len() as u64 {
                    let have = assembled.len();
                    fail!(
                        self,
                        "node {id}: a snapshot piece at {} after {have} bytes",
                        chunk.offset
                    );
                }
                assembled.extend_from_slice(&chunk.data);
            }
            Effect::InstallSnapshot { meta } => {
                let node = self.node(id);
                let Some((assembled_meta, assembled)) = node.incoming_snapshot.take() else {
                    fail!(
                        self,
                        "node {id}: a snapshot installed that was never received"
                    );
                };
                if assembled_meta != meta {
                    fail!(
                        self,
                        "node {id}: the snapshot installed is not the one received"
                    );
                }
                let data = bytes::Bytes::from(assembled);
                let node = self.node(id);
                if !node.disk.buffered.is_empty() || node.disk.unsynced() > 0 {
                    fail!(
                        self,
                        "node {id}: a snapshot from the leader is stored before earlier writes \
                         are durable"
                    );
                }
                let last_index = meta.last_index;
                node.appended.clear();
                node.disk.store_snapshot(meta.clone(), data.clone());
                let cut = self.rng.next_u64();
                self.node(id).disk.compact(last_index, cut);
                self.stats.snapshots_installed += 1;
                // Decoded in the background: other inputs may be handled first.
                let incarnation = self.nodes[&id].incarnation;
                let after = self.rng.range(0, 20);
                self.schedule(
                    after,
                    Event::SnapshotRestored {
                        node: id,
                        incarnation,
                        meta,
                        data,
                    },
                );
            }
            Effect::WriteSnapshot { meta, version } => {
                let after = self.rng.range(1, 30);
                let incarnation = self.nodes[&id].incarnation;
                self.schedule(
                    after,
                    Event::SnapshotDone {
                        node: id,
                        incarnation,
                        meta,
                        version,
                    },
                );
            }
            Effect::CompactLog { through } => {
                let durable_snapshot = self.nodes[&id]
                    .disk
                    .snapshot
                    .as_ref()
                    .map_or(0, |(meta, _)| meta.last_index);
                if through > durable_snapshot {
                    fail!(
                        self,
                        "node {id}: compacting through {through} beyond the durable snapshot at \
                         {durable_snapshot}"
                    );
                }
                let cut = self.rng.next_u64();
                self.node(id).disk.compact(through, cut);
            }
            Effect::ReadLog(read) => {
                // The file is read now; the answer reaches the thread a little later, maybe
                // after other inputs, as a stale answer can.
                let entries = self.nodes[&id].disk.read(read);
                let incarnation = self.nodes[&id].incarnation;
                let after = self.rng.range(0, 3);
                self.schedule(
                    after,
                    Event::LogRead {
                        node: id,
                        incarnation,
                        read,
                        entries,
                    },
                );
            }
            Effect::PublishIndex { index } => {
                let node = self.node(id);
                if index < node.published {
                    let published = node.published;
                    fail!(
                        self,
                        "node {id}: published index went back from {published} to {index}"
                    );
                }
                node.published = index;
            }
            Effect::Deliver {
                shard,
                batch,
                results,
            } => {
                let urgent = !results.is_empty();
                let node = self.node(id);
                node.shards[shard].queue.push_back((batch, results));
                if urgent {
                    let incarnation = node.incarnation;
                    let after = self.rng.range(0, 1);
                    self.schedule(
                        after,
                        Event::ShardWake {
                            node: id,
                            incarnation,
                            shard,
                        },
                    );
                }
            }
            Effect::RingWatchers => {}
            Effect::Status(status) => self.node(id).status = status,
            Effect::Lease { until_ms } => self.node(id).lease_until = until_ms,
            Effect::LeaderContact { .. } => {}
            Effect::Peers(peers) => {
                self.node(id).peers = peers.into_keys().filter(|peer| *peer != id).collect();
            }
            Effect::Log { text, .. } => {
                if self.trace {
                    println!("{:>6} node {id}: {text}", self.now);
                }
            }
        }
    }

    // ----- shards ------------------------------------------------------------------------

    /// The shard takes in everything queued for it: versions, then results.
    fn take_in(&mut self, id: NodeId, shard: usize) {
        let batches: Vec<_> = self.node(id).shards[shard].queue.drain(..).collect();
        for (batch, results) in batches {
            let node = self.node(id);
            let current = node.shards[shard].version.index;
            if batch.version.index < current {
                fail!(
                    self,
                    "node {id} shard {shard}: version went back from {current} to {}",
                    batch.version.index
                );
            }
            node.shards[shard].version = batch.version.clone();
            for (request, result) in results {
                if shard_of_request(request) != shard {
                    fail!(
                        self,
                        "node {id}: request {request:x} answered on shard {shard}"
                    );
                }
                self.answer(id, shard, request, result);
            }
        }
    }

    /// As `Shard::catch_up`: a shard behind the published index takes in its queue; true
    /// when it then holds the published version.
    fn catch_up(&mut self, id: NodeId, shard: usize) -> bool {
        let published = self.nodes[&id].published;
        if published <= self.nodes[&id].shards[shard].version.index {
            return true;
        }
        self.take_in(id, shard);
        self.nodes[&id].shards[shard].version.index >= published
    }

    fn answer(&mut self, id: NodeId, shard: usize, request: u64, result: ProposalResult) {
        let Some(waiting) = self.node(id).requests.remove(&request) else {
            fail!(
                self,
                "node {id}: request {request:x} answered twice or never asked"
            );
        };
        match (waiting, result) {
            (
                Request::Write {
                    key,
                    write_id,
                    index,
                    proposed_at,
                },
                ProposalResult::Applied(CommandResult::Kv(KvResult::Written)),
            ) => {
                let Some(index) = index else {
                    fail!(
                        self,
                        "node {id}: write {write_id} applied but never accepted"
                    );
                };
                let version = self.nodes[&id].shards[shard].version.index;
                if version < index {
                    fail!(
                        self,
                        "node {id} shard {shard}: write at {index} acknowledged with version \
                         {version}"
                    );
                }
                self.stats.acked_writes += 1;
                let slot = &mut self.acked_max[key as usize];
                *slot = (*slot).max(index);
                let here = &mut self.node(id).acked_here[key as usize];
                *here = (*here).max(index);
                if self
                    .healed_at
                    .is_some_and(|healed_at| proposed_at >= healed_at)
                    && self.liveness_index.is_none()
                {
                    self.liveness_index = Some(index);
                }
                // The client reads its write back at once, often on another shard: the read
                // must find it (publish before queue).
                if self.rng.chance(500) {
                    let other = self.rng.below(SHARDS as u64) as usize;
                    let incarnation = self.nodes[&id].incarnation;
                    self.schedule(
                        0,
                        Event::ShardRead {
                            node: id,
                            incarnation,
                            shard: other,
                            read: None,
                            key,
                        },
                    );
                }
            }
            (Request::Write { write_id, .. }, result) if result.certainly_not_applied() => {
                if self.committed_write_ids.contains(&write_id) {
                    fail!(
                        self,
                        "node {id}: write {write_id} answered {result:?} but it was committed"
                    );
                }
                self.refused_write_ids.insert(write_id);
                self.stats.refused_writes += 1;
            }
            (Request::Write { .. }, ProposalResult::LeadershipLost) => {}
            (Request::Read(read), ProposalResult::Applied(CommandResult::Bool(true))) => {
                self.shard_read(id, shard, read);
            }
            (Request::Read(_), result) if result.certainly_not_applied() => {}
            (Request::Operator, _) => {}
            (waiting, result) => {
                fail!(self, "node {id}: {waiting:?} answered {result:?}")
            }
        }
    }

    /// Serves a read on a shard once it caught up, and checks it.
    fn shard_read(&mut self, id: NodeId, shard: usize, read: Read) {
        if !self.catch_up(id, shard) {
            // The published batch is still on its way: the shard waits for it.
            if self.now - read.started_at > CATCH_UP_WAIT_MAX_MS {
                fail!(
                    self,
                    "node {id} shard {shard}: index {} published but never delivered",
                    self.nodes[&id].published
                );
            }
            self.stats.reads_waited_for_batch += 1;
            let incarnation = self.nodes[&id].incarnation;
            let key = read.key;
            self.schedule(
                1,
                Event::ShardRead {
                    node: id,
                    incarnation,
                    shard,
                    read: Some(read),
                    key,
                },
            );
            return;
        }
        let version = &self.nodes[&id].shards[shard].version;
        let seen = kv::get(version, read.key).map_or(0, |v| v.index);
        if seen < read.must_see {
            fail!(
                self,
                "node {id} shard {shard}: {:?} read of key {} saw the write at {seen} (version \
                 {}, published {}) but the write at {} was acknowledged before it started",
                read.kind,
                read.key,
                version.index,
                self.nodes[&id].published,
                read.must_see
            );
        }
        match read.kind {
            ReadKind::Consistent => self.stats.reads_checked += 1,
            ReadKind::Lease => self.stats.lease_reads += 1,
            ReadKind::Stale => self.stats.stale_reads += 1,
        }
    }

    // ----- crashes and restarts ----------------------------------------------------------

    fn crash(&mut self, id: NodeId, why: &str) {
        if self.nodes[&id].replica.is_none() {
            return;
        }
        let unsynced = self.nodes[&id].disk.unsynced() as u64;
        let survivors = if self.scenario.torn_writes {
            self.rng.below(unsynced + 1)
        } else {
            0
        };
        if self.trace {
            println!(
                "{:>6} crash node {id} ({why}); {survivors} of {unsynced} unsynced records kept",
                self.now
            );
        }
        self.stats.torn_records += survivors;
        let node = self.node(id);
        node.disk.crash(survivors as usize);
        let disk = std::mem::take(&mut node.disk);
        let incarnation = node.incarnation + 1;
        *node = Node::down();
        node.disk = disk;
        node.incarnation = incarnation;
        self.stats.crashes += 1;
        if self.gossip.contains_key(&id) {
            let after = self.rng.range(300, 1500);
            self.schedule(
                after,
                Event::MarkFailed {
                    node: id,
                    incarnation,
                },
            );
        }
    }

    fn restart(&mut self, id: NodeId) {
        if self.trace {
            println!("{:>6} restart node {id}", self.now);
        }
        let recovered = match self.nodes[&id].disk.recover() {
            Ok(recovered) => recovered,
            Err(error) => fail!(self, "node {id}: its log does not recover: {error}"),
        };
        let config = self.scenario.replica_config(id);
        let incarnation = self.nodes[&id].incarnation;
        let seed = self.seed ^ (incarnation << 20) ^ (id << 40);
        let summary = format!(
            "hard state {:?}, snapshot at {:?}, entries {:?}",
            recovered.hard_state,
            recovered
                .snapshot
                .as_ref()
                .map(|(meta, _)| (meta.last_index, meta.last_term)),
            recovered
                .entries
                .iter()
                .map(|e| (e.index, e.term))
                .take(8)
                .collect::<Vec<_>>()
        );
        let appended: BTreeMap<LogIndex, Entry> = recovered
            .entries
            .iter()
            .map(|entry| (entry.index, entry.clone()))
            .collect();
        let replica = match Replica::open(config, recovered, seed, self.clock()) {
            Ok(replica) => replica,
            Err(error) => fail!(
                self,
                "node {id}: restart from its own disk failed: {error}; recovered {summary}"
            ),
        };
        let version = replica.version().clone();
        let now = self.now;
        let node = self.node(id);
        node.last_commit = replica.raft().commit_index();
        node.appended = appended;
        node.published = version.index;
        node.shards = (0..SHARDS)
            .map(|_| SimShard {
                version: version.clone(),
                queue: VecDeque::new(),
            })
            .collect();
        node.replica = Some(replica);
        node.last_sync_done_at = now;
        self.step(id, Input::Start, Continuation::Done);
        let phase = self.rng.below(TICK_MS);
        self.schedule(
            phase,
            Event::Tick {
                node: id,
                incarnation,
            },
        );
        if let Some(info) = self.gossip.get_mut(&id) {
            info.alive = true;
            self.publish_gossip();
        } else {
            self.schedule(
                1,
                Event::Gossip {
                    node: id,
                    incarnation,
                },
            );
        }
    }

    // ----- clients and faults -------------------------------------------------------------

    fn live_nodes(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.replica.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    /// A client's choice of server: usually one that says it leads, sometimes any.
    fn pick_target(&mut self) -> Option<NodeId> {
        let live = self.live_nodes();
        if live.is_empty() {
            return None;
        }
        if self.rng.chance(850) {
            let leader = live
                .iter()
                .filter(|id| self.nodes[id].status.is_leader)
                .max_by_key(|id| self.nodes[id].status.term)
                .copied();
            if leader.is_some() {
                return leader;
            }
        }
        Some(self.rng.pick(&live))
    }

    fn act(&mut self) {
        // After healing, clients slow down so the liveness write is not stuck behind a
        // backlog that only measures throughput.
        let write_per_mille = if self.healed_at.is_some() { 100 } else { 400 };
        if self.rng.chance(write_per_mille) {
            self.client_write();
        }
        if self.rng.chance(150) {
            self.client_read();
        }
        if self.rng.chance(100) {
            self.lease_read();
        }
        if self.rng.chance(100) {
            self.stale_read();
        }
        if self.healed_at.is_some() {
            return;
        }
        if self.rng.chance(self.scenario.crash_per_mille) {
            let live = self.live_nodes();
            if !live.is_empty() {
                let id = self.rng.pick(&live);
                self.crash(id, "random");
                let down_ms = if self.rng.chance(500) {
                    self.rng.range(1, 100)
                } else {
                    self.rng.range(20, 1500)
                };
                self.schedule(down_ms, Event::Restart { node: id });
            }
        }
        if self.rng.chance(self.scenario.partition_per_mille) {
            self.partition();
        }
        if self.rng.chance(self.scenario.partition_per_mille * 2) {
            self.cut.clear();
        }
        if self.rng.chance(self.scenario.membership_per_mille) {
            self.change_membership();
        }
        if self.rng.chance(self.scenario.transfer_per_mille) {
            self.transfer();
        }
    }

    /// Sends a request through one of `id`'s shards: the shard numbers it.
    fn submit(&mut self, id: NodeId, request: Request, input: impl FnOnce(u64) -> Input) {
        let shard = self.rng.below(SHARDS as u64) as usize;
        let node = self.node(id);
        let request_id = request_id(shard, node.next_request);
        node.next_request += 1;
        node.requests.insert(request_id, request);
        self.deliver_input(id, input(request_id));
    }

    fn client_write(&mut self) {
        let Some(id) = self.pick_target() else {
            return;
        };
        let key = self.rng.below(KEYS) as u8;
        let write_id = self.next_write_id;
        self.next_write_id += 1;
        if !self.nodes[&id].status.is_leader {
            // The shard refuses at once (`Shard::propose`).
            self.refused_write_ids.insert(write_id);
            self.stats.refused_writes += 1;
            return;
        }
        let request = Request::Write {
            key,
            write_id,
            index: None,
            proposed_at: self.now,
        };
        self.submit(id, request, |request_id| Input::Propose {
            request_id,
            payload: kv::encode_put(key, write_id),
        });
    }

    fn client_read(&mut self) {
        let Some(id) = self.pick_target() else {
            return;
        };
        let key = self.rng.below(KEYS) as u8;
        let read = Read {
            kind: ReadKind::Consistent,
            key,
            must_see: self.acked_max[key as usize],
            started_at: self.now,
        };
        self.submit(id, Request::Read(read), |request_id| Input::ReadIndex {
            request_id,
        });
    }

    /// A default read served locally by a server whose status and lease say it may.
    fn lease_read(&mut self) {
        let Some(id) = self.pick_target() else {
            return;
        };
        let node = &self.nodes[&id];
        if !node.status.is_leader || node.lease_until <= self.now {
            return;
        }
        let key = self.rng.below(KEYS) as u8;
        let shard = self.rng.below(SHARDS as u64) as usize;
        let read = Read {
            kind: ReadKind::Lease,
            key,
            must_see: self.acked_max[key as usize],
            started_at: self.now,
        };
        self.shard_read(id, shard, read);
    }

    fn stale_read(&mut self) {
        let live = self.live_nodes();
        if live.is_empty() {
            return;
        }
        let id = self.rng.pick(&live);
        let key = self.rng.below(KEYS) as u8;
        let shard = self.rng.below(SHARDS as u64) as usize;
        let incarnation = self.nodes[&id].incarnation;
        self.schedule(
            0,
            Event::ShardRead {
                node: id,
                incarnation,
                shard,
                read: None,
                key,
            },
        );
    }

    fn partition(&mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let kind = self.rng.below(5);
        let victim = self.rng.pick(&ids);
        match kind {
            0 => {
                // Isolate one server both ways.
                for &other in &ids {
                    if other != victim {
                        self.cut.insert((victim, other));
                        self.cut.insert((other, victim));
                    }
                }
            }
            1 => {
                // Split in two random groups.
                let side: Vec<bool> = ids.iter().map(|_| self.rng.chance(500)).collect();
                for (i, &a) in ids.iter().enumerate() {
                    for (j, &b) in ids.iter().enumerate() {
                        if side[i] != side[j] {
                            self.cut.insert((a, b));
                        }
                    }
                }
            }
            4 => {
                // Cut one link both ways; everyone else still talks to both ends.
                let other = self.rng.pick(&ids);
                if other != victim {
                    self.cut.insert((victim, other));
                    self.cut.insert((other, victim));
                }
            }
            2 => {
                // One way: the victim can hear but not speak.
                for &other in &ids {
                    if other != victim {
                        self.cut.insert((victim, other));
                    }
                }
            }
            _ => {
                // One way: the victim can speak but not hear.
                for &other in &ids {
                    if other != victim {
                        self.cut.insert((other, victim));
                    }
                }
            }
        }
        if self.trace {
            println!(
                "{:>6} partition kind {kind} victim {victim}: {:?}",
                self.now, self.cut
            );
        }
        self.stats.partitions += 1;
    }

    fn current_leader(&self) -> Option<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.core().is_some_and(|c| c.role() == Role::Leader))
            .max_by_key(|(_, n)| n.core().expect("live").term())
            .map(|(id, _)| *id)
    }

    /// Membership moves the way it does in production: gossip learns that a server joined,
    /// left or came back, and the leader reconciles the configuration with it.
    fn change_membership(&mut self) {
        let id = self.rng.range(1, self.scenario.nodes);
        let change = match self.gossip.get(&id) {
            None => "joins",
            Some(info) if info.left => "comes back",
            Some(_) if self.rng.chance(500) => "leaves",
            Some(_) => return,
        };
        self.join(id);
        let info = self.gossip.get_mut(&id).expect("joined");
        info.left = change == "leaves";
        if self.trace {
            println!("{:>6} gossip: server {id} {change}", self.now);
        }
        self.publish_gossip();
    }

    fn transfer(&mut self) {
        let Some(leader) = self.current_leader() else {
            return;
        };
        let to = if self.rng.chance(500) {
            None
        } else {
            Some(name_of(self.rng.range(1, self.scenario.nodes)))
        };
        if self.trace {
            println!("{:>6} node {leader}: transfer to {to:?}", self.now);
        }
        self.submit(leader, Request::Operator, |request_id| Input::Operator {
            request_id,
            op: OperatorOp::TransferLeader { id: to },
        });
    }

    // ----- the checker ---------------------------------------------------------------------

    /// Records that `index` is committed with this entry; fails if another entry was.
    fn register_committed(
        &mut self,
        id: NodeId,
        index: LogIndex,
        entry: &Entry,
        observer_term: Term,
    ) {
        let slot = index as usize;
        if self.committed.len() <= slot {
            self.committed.resize_with(slot + 1, || None);
        }
        let entry_digest = digest(entry);
        match &mut self.committed[slot] {
            None => {
                self.committed[slot] = Some(CommittedEntry {
                    term: entry.term,
                    digest: entry_digest,
                    commit_term: observer_term,
                });
                if entry.kind == EntryKind::Membership && index > 1 {
                    self.stats.membership_changes += 1;
                }
                if let Some(write_id) = kv::write_id_of(&entry.data) {
                    if self.refused_write_ids.contains(&write_id) {
                        fail!(
                            self,
                            "write {write_id} was refused as never applied but is committed at \
                             {index}"
                        );
                    }
                    self.committed_write_ids.insert(write_id);
                }
            }
            Some(known) => {
                if known.term != entry.term || known.digest != entry_digest {
                    let known_term = known.term;
                    fail!(
                        self,
                        "state machine safety: node {id} has index {index} committed with term \
                         {}, but it was committed with term {known_term} (or other data)",
                        entry.term
                    );
                }
                known.commit_term = known.commit_term.min(observer_term);
            }
        }
    }

    /// Log matching, inductively: an (index, term) pair handed to any disk always names the
    /// same entry with the same predecessor term.
    fn check_log_matching(&mut self, id: NodeId, entry: &Entry, previous_term: Option<Term>) {
        let fingerprint = (digest(entry), previous_term);
        match self.appended.get(&(entry.index, entry.term)) {
            None => {
                self.appended.insert((entry.index, entry.term), fingerprint);
            }
            Some(&(known_digest, known_previous)) => {
                let previous_differs =
                    matches!((known_previous, previous_term), (Some(a), Some(b)) if a != b);
                if known_digest != fingerprint.0 || previous_differs {
                    fail!(
                        self,
                        "log matching: node {id} persists ({}, {}) differing from another \
                         server's entry with the same index and term",
                        entry.index,
                        entry.term
                    );
                }
            }
        }
    }

    fn check_invariants(&mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let mut leases = Vec::new();
        for id in ids {
            let node = &self.nodes[&id];
            let Some(core) = node.core() else {
                continue;
            };
            let term = core.term();
            let commit = core.commit_index();
            let applied = node.applied();
            let last_commit = node.last_commit;
            // A leadership counts once its term is durable: before that it can have no
            // effect outside the node (the core sends nothing in a term not yet durable, and
            // commits nothing), and a crash erases it.
            let is_leader = core.role() == Role::Leader && node.disk.hard_state.term == term;
            if core.messages_dropped() > 0 {
                // Among correct servers nothing is malformed or inconsistent: a drop means
                // e.g. a leader asked a follower to overwrite a committed entry.
                fail!(
                    self,
                    "node {id} dropped a message as inconsistent; {}",
                    self.describe()
                );
            }
            let new_leader = is_leader && node.led_term != Some(term);
            if let Some(until) = core.leader_lease_until().filter(|&t| t > self.now) {
                leases.push((id, term, until));
            }
            if is_leader {
                match self.leader_of_term.get(&term) {
                    Some(&other) if other != id => {
                        fail!(
                            self,
                            "election safety: nodes {other} and {id} both lead term {term}"
                        )
                    }
                    Some(_) => {}
                    None => {
                        if self.trace {
                            println!("{:>6} check: node {id} leads term {term}", self.now);
                        }
                        self.leader_of_term.insert(term, id);
                        self.max_leader_term = self.max_leader_term.max(term);
                    }
                }
            }
            if commit < last_commit {
                fail!(
                    self,
                    "node {id}: commit index went from {last_commit} back to {commit}"
                );
            }
            if applied > commit {
                fail!(self, "node {id}: applied {applied} beyond commit {commit}");
            }
            // A sync the thread has not carried out yet may already count in the core (the
            // replica emits `SyncNow` and goes on, as the effects after it wait for it):
            // such a commit is invisible outside until the sync is done.
            let sync_pending = node.stalled.as_ref().is_some_and(|stall| {
                stall.sync_pending
                    || stall
                        .effects
                        .iter()
                        .any(|effect| matches!(effect, Effect::SyncNow))
            });
            if commit > last_commit && !sync_pending {
                let newly: Vec<(LogIndex, Entry)> = (last_commit + 1..=commit)
                    .filter_map(|index| {
                        // An entry the core no longer holds is read as the file has it, but
                        // only while the core still stores it: a snapshot from the leader
                        // replaces the log before the file is cut (its effect may not have
                        // run yet), and an entry it covers is known only through it.
                        let on_file = || {
                            node.appended.get(&index).filter(|e| {
                                index > core.snapshot_index()
                                    && core.log_term(index) == Some(e.term)
                            })
                        };
                        let entry = core.log_entry(index).or_else(on_file);
                        entry.map(|e| (index, e.clone()))
                    })
                    .collect();
                // A leader's first commit advance in its term: losing the leader right then is
                // where a wrong commit rule (counting older-term entries, Raft figure 8)
                // would surface.
                let first_commit_of_term = core.role() == Role::Leader
                    && core.log_term(last_commit).is_some_and(|t| t < term);
                for (index, entry) in newly {
                    self.register_committed(id, index, &entry, term);
                }
                let node = self.node(id);
                node.last_commit = commit;
                node.appended = node.appended.split_off(&(commit + 1));
                if first_commit_of_term
                    && self.healed_at.is_none()
                    && self.rng.chance(self.scenario.targeted_crash_per_mille * 4)
                {
                    let incarnation = self.nodes[&id].incarnation;
                    let after = self.rng.range(0, 2);
                    self.schedule(
                        after,
                        Event::Crash {
                            node: id,
                            incarnation,
                        },
                    );
                }
            }
            if new_leader {
                self.node(id).led_term = Some(term);
                self.stats.elections += 1;
                self.check_leader_completeness(id, term);
            }
        }
        for &(id, term, until) in &leases {
            self.check_lease_premise(id, term, until);
        }
        for (id, term, until) in leases {
            if self.max_leader_term > term {
                let newer = self.max_leader_term;
                fail!(
                    self,
                    "lease: node {id} holds a lease of term {term} until {until} but term \
                     {newer} has elected a leader"
                );
            }
        }
        self.check_liveness_done();
    }

    /// A lease until `until` is sound only if a quorum of the leader's voters refuses ordinary
    /// candidates at least that long (a server that is down votes for nobody).
    fn check_lease_premise(&self, id: NodeId, term: Term, until: Millis) {
        let membership = self.nodes[&id].core().expect("live").membership();
        let mut guards: Vec<Millis> = membership
            .voters()
            .map(|voter| match self.nodes.get(&voter).and_then(Node::core) {
                None => Millis::MAX,
                Some(_) if voter == id => Millis::MAX,
                Some(core) => core.vote_guard_until().unwrap_or(0),
            })
            .collect();
        guards.sort_unstable_by(|a, b| b.cmp(a));
        let guaranteed = guards[membership.quorum() - 1];
        if until > guaranteed {
            let peers = self.nodes[&id].core().expect("live").status().peers;
            fail!(
                self,
                "lease: node {id} (term {term}) claims a lease until {until} but a quorum of its \
                 voters refuses other candidates only until {guaranteed} (guards {guards:?}; \
                 peers {peers:?}){}",
                self.describe()
            );
        }
    }

    fn check_leader_completeness(&self, id: NodeId, term: Term) {
        let core = self.nodes[&id].core().expect("live");
        let snapshot_index = core.snapshot_index();
        for (index, known) in self.committed.iter().enumerate() {
            let Some(known) = known else {
                continue;
            };
            let index = index as LogIndex;
            if known.commit_term >= term || index <= snapshot_index {
                continue;
            }
            if core.log_term(index) != Some(known.term) {
                fail!(
                    self,
                    "leader completeness: node {id} leads term {term} without the entry at \
                     {index} (term {}) committed in term {}",
                    known.term,
                    known.commit_term
                );
            }
        }
    }

    fn check_liveness_done(&mut self) {
        let Some(index) = self.liveness_index else {
            return;
        };
        let Some(leader) = self.current_leader() else {
            return;
        };
        let members: Vec<NodeId> = self.nodes[&leader]
            .core()
            .expect("live")
            .membership()
            .members
            .keys()
            .copied()
            .collect();
        let all_applied = members.iter().all(|id| {
            self.nodes
                .get(id)
                .is_some_and(|n| n.replica.is_some() && n.applied() >= index)
        });
        // Every server is back in the configuration too, so the run ends in the shape it
        // started.
        let all_members = (1..=self.scenario.nodes).all(|id| members.contains(&id));
        if all_applied && all_members {
            self.finished = true;
        }
    }

    fn final_checks(&mut self) {
        let leader = self
            .current_leader()
            .unwrap_or_else(|| fail!(self, "no leader at the end"));
        let tables = self.nodes[&leader]
            .replica
            .as_ref()
            .expect("live")
            .version()
            .clone();
        for key in 0..KEYS as u8 {
            let seen = kv::get(&tables, key).map_or(0, |v| v.index);
            let acked = self.acked_max[key as usize];
            if seen < acked {
                fail!(
                    self,
                    "acknowledged write lost: key {key} was acknowledged at index {acked} but \
                     the final state holds index {seen}"
                );
            }
        }
    }
}
