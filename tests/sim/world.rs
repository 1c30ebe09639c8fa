//! One simulated world: nodes (a `RaftCore`, a simulated disk, a KV state machine and a
//! driver loop modelled on the real one), a network, clients, a fault injector and the
//! checker that runs after every event.
//!
//! The driver follows the `Ready` contract: `messages` leave at once, the disk write
//! (snapshot, truncation, entries, hard state) becomes durable only after a simulated fsync
//! delay, `messages_after_persist` leave and `advance` is called only then. With
//! `pipelined`, the driver takes the next Ready while earlier writes are still in flight.
//! A crash loses every write not yet durable (optionally leaving a torn prefix of the oldest).
//!
//! Checked after every event: election safety, log matching (inductively, on every entry a
//! node hands to its disk), leader completeness (on every new leader), state-machine safety
//! (one entry per committed index, everywhere), commit never decreasing on a live node,
//! applied <= commit, no acknowledged write lost, ReadIndex and lease reads linearizable, no
//! leader lease outliving the election of a newer leader; and at the end, liveness.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use bytes::Bytes;
use praetor::raft::{
    Entry, EntryKind, HardState, LogIndex, Member, Membership, MembershipChange, Message, Millis,
    NodeId, RaftConfig, RaftCore, Ready, ReadyDone, Restored, Role, SnapshotMeta, Term,
};

use super::kv::{encode_put, KvStore, StateMachine};
use super::rng::SimRng;

/// Totals over one or more runs, to show the runs exercised what they claim.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    pub seeds: u64,
    pub events: u64,
    pub virtual_ms: u64,
    pub acked_writes: u64,
    pub reads_checked: u64,
    pub lease_reads: u64,
    pub elections: u64,
    pub crashes: u64,
    pub partitions: u64,
    pub snapshots_installed: u64,
    pub membership_changes: u64,
    pub transfers: u64,
}

impl RunStats {
    pub fn add(&mut self, other: &RunStats) {
        self.seeds += other.seeds;
        self.events += other.events;
        self.virtual_ms += other.virtual_ms;
        self.acked_writes += other.acked_writes;
        self.reads_checked += other.reads_checked;
        self.lease_reads += other.lease_reads;
        self.elections += other.elections;
        self.crashes += other.crashes;
        self.partitions += other.partitions;
        self.snapshots_installed += other.snapshots_installed;
        self.membership_changes += other.membership_changes;
        self.transfers += other.transfers;
    }
}

impl fmt::Display for RunStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} seeds, {} events, {:.0} virtual s, {} acked writes, {} ReadIndex reads, {} lease \
             reads, {} elections, {} crashes, {} partitions, {} snapshots installed, {} \
             membership changes, {} transfers",
            self.seeds,
            self.events,
            self.virtual_ms as f64 / 1000.0,
            self.acked_writes,
            self.reads_checked,
            self.lease_reads,
            self.elections,
            self.crashes,
            self.partitions,
            self.snapshots_installed,
            self.membership_changes,
            self.transfers
        )
    }
}

/// Runs one seed; panics (after naming the seed and the replay command) on any violation.
pub fn run_seed(seed: u64, trace: bool) -> RunStats {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut world = World::new(seed, trace);
        world.run();
        world.stats
    }));
    match outcome {
        Ok(stats) => stats,
        Err(panic) => {
            eprintln!(
                "\nsim: seed {seed} FAILED. Replay with:\n  SIM_SEED={seed} cargo test --profile ci \
                 --test sim -- replay --nocapture\n(add SIM_TRACE=1 for an event trace)\n"
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
const TICK_MS: Millis = 10;
const ACTION_MS: Millis = 5;
/// After every fault heals, a leader must be elected and a new write committed and applied
/// on every member within this much virtual time.
const LIVENESS_BOUND_MS: Millis = 20 * ELECTION_TIMEOUT_MS;
const KEYS: u64 = 8;
/// Watchdogs: a run or a driver loop exceeding these is stuck, which is a failure too.
const EVENTS_PER_RUN_MAX: u64 = 20_000_000;
const READYS_PER_PUMP_MAX: u64 = 100_000;

/// Everything a seed decides about a run.
#[derive(Debug)]
struct Scenario {
    nodes: u64,
    initial_voters: u64,
    pipelined: bool,
    torn_writes: bool,
    chaos_ms: Millis,
    loss_per_mille: u64,
    dup_per_mille: u64,
    /// Chance that a message ignores its link's FIFO order (links are otherwise ordered,
    /// like the TCP transport).
    reorder_per_mille: u64,
    delay_max_ms: Millis,
    fsync_max_ms: Millis,
    append_entries_max: usize,
    inflight_appends_max: usize,
    snapshot_chunk_bytes: u64,
    snapshot_inflight_chunks_max: u64,
    trailing_entries: u64,
    crash_per_mille: u64,
    partition_per_mille: u64,
    membership_per_mille: u64,
    transfer_per_mille: u64,
    snapshot_per_mille: u64,
    lease_ms: Millis,
    /// Chance of crashing a server inside the fsync window right after it wins an election
    /// or grants a vote: the moments where durability rules matter most.
    targeted_crash_per_mille: u64,
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
            pipelined: rng.chance(500),
            torn_writes: rng.chance(500),
            chaos_ms: rng.range(5000, 25000),
            loss_per_mille: rng.pick(&[0, 10, 50, 100]),
            dup_per_mille: rng.pick(&[0, 0, 20, 50]),
            reorder_per_mille: rng.pick(&[0, 20, 200, 1000]),
            delay_max_ms: rng.pick(&[2, 10, 30, 60]),
            fsync_max_ms: rng.pick(&[1, 5, 15]),
            append_entries_max: rng.pick(&[2, 8, 64]),
            inflight_appends_max: rng.pick(&[1, 3, 16]),
            snapshot_chunk_bytes: rng.pick(&[16, 64, 512]),
            snapshot_inflight_chunks_max: rng.pick(&[1, 2, 4]),
            trailing_entries: rng.pick(&[0, 5, 50]),
            crash_per_mille: rng.pick(&[0, 2, 5, 10]),
            partition_per_mille: rng.pick(&[0, 2, 5, 10]),
            membership_per_mille: rng.pick(&[0, 3, 8]),
            transfer_per_mille: rng.pick(&[0, 2, 5]),
            snapshot_per_mille: rng.pick(&[2, 10, 30]),
            lease_ms: rng.pick(&LEASE_CHOICES_MS),
            targeted_crash_per_mille: rng.pick(&[0, 30, 150]),
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
        config.uncommitted_entries_max = 64;
        config.read_requests_pending_max = 64;
        config
    }
}

#[derive(Debug)]
enum Event {
    Deliver {
        from: NodeId,
        to: NodeId,
        message: Message,
    },
    FsyncDone {
        node: NodeId,
        incarnation: u64,
    },
    Tick {
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

/// What survives a crash.
#[derive(Default)]
struct Disk {
    hard_state: HardState,
    snapshot: Option<(SnapshotMeta, Bytes)>,
    entries: Vec<Entry>,
}

impl Disk {
    fn last_index(&self) -> LogIndex {
        self.entries
            .last()
            .map(|e| e.index)
            .or(self.snapshot.as_ref().map(|(m, _)| m.last_index))
            .unwrap_or(0)
    }
}

/// A Ready's disk write in flight, with what waits for it.
struct PendingWrite {
    hard_state: Option<HardState>,
    snapshot: Option<(SnapshotMeta, Bytes)>,
    truncate_from: Option<LogIndex>,
    entries: Vec<Entry>,
    after_persist: Vec<(NodeId, Message)>,
    done: ReadyDone,
}

struct Proposal {
    term: Term,
    key: u8,
    proposed_at: Millis,
}

struct ReadRequest {
    key: u8,
    /// The largest index of a write to `key` acknowledged before the read started.
    must_see_index: LogIndex,
}

struct Node {
    core: Option<RaftCore>,
    incarnation: u64,
    disk: Disk,
    kv: KvStore,
    writes: VecDeque<PendingWrite>,
    last_write_done_at: Millis,
    /// The commit index last seen on this incarnation.
    last_commit: LogIndex,
    /// The last term in which this node was seen leading.
    led_term: Option<Term>,
    proposals: BTreeMap<LogIndex, Proposal>,
    reads: BTreeMap<u64, ReadRequest>,
    confirmed_reads: Vec<(u64, LogIndex)>,
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
    scenario: Scenario,
    rng: SimRng,
    now: Millis,
    seq: u64,
    queue: BinaryHeap<Scheduled>,
    nodes: BTreeMap<NodeId, Node>,
    cut: BTreeSet<(NodeId, NodeId)>,
    /// The latest delivery time scheduled on each directed link (FIFO order).
    link_busy_until: HashMap<(NodeId, NodeId), Millis>,
    healed_at: Option<Millis>,
    loss_per_mille: u64,
    dup_per_mille: u64,
    leader_of_term: BTreeMap<Term, NodeId>,
    max_leader_term: Term,
    committed: Vec<Option<CommittedEntry>>,
    appended: HashMap<(LogIndex, Term), (u64, Option<Term>)>,
    acked_max: [LogIndex; KEYS as usize],
    next_write_id: u64,
    next_read_context: u64,
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

fn membership_of(ids: impl Iterator<Item = NodeId>) -> Membership {
    let members = ids
        .map(|id| {
            (
                id,
                Member {
                    voter: true,
                    name: format!("server-{id}"),
                    address: format!("10.0.0.{id}:8300"),
                },
            )
        })
        .collect();
    Membership { members }
}

macro_rules! fail {
    ($world:expr, $($arg:tt)*) => {{
        let message = format!($($arg)*);
        panic!(
            "sim: seed {} at {} ms: {}\n  replay: SIM_SEED={} cargo test --profile ci --test sim -- replay --nocapture",
            $world.seed, $world.now, message, $world.seed
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
            loss_per_mille: scenario.loss_per_mille,
            dup_per_mille: scenario.dup_per_mille,
            scenario,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            nodes: BTreeMap::new(),
            cut: BTreeSet::new(),
            link_busy_until: HashMap::new(),
            healed_at: None,
            leader_of_term: BTreeMap::new(),
            max_leader_term: 0,
            committed: Vec::new(),
            appended: HashMap::new(),
            acked_max: [0; KEYS as usize],
            next_write_id: 1,
            next_read_context: 1,
            liveness_index: None,
            finished: false,
            stats: RunStats {
                seeds: 1,
                ..RunStats::default()
            },
        };
        let initial = membership_of(1..=world.scenario.initial_voters);
        for id in 1..=world.scenario.nodes {
            let config = world.scenario.raft_config(id);
            let mut core = RaftCore::new(config, Restored::default(), seed ^ (id << 40), 0);
            if id <= world.scenario.initial_voters {
                core.bootstrap(initial.clone())
                    .unwrap_or_else(|e| fail!(world, "bootstrap: {e}"));
            }
            world.nodes.insert(
                id,
                Node {
                    core: Some(core),
                    incarnation: 0,
                    disk: Disk::default(),
                    kv: KvStore::default(),
                    writes: VecDeque::new(),
                    last_write_done_at: 0,
                    last_commit: 0,
                    led_term: None,
                    proposals: BTreeMap::new(),
                    reads: BTreeMap::new(),
                    confirmed_reads: Vec::new(),
                },
            );
            let phase = world.rng.below(TICK_MS);
            world.schedule(
                phase,
                Event::Tick {
                    node: id,
                    incarnation: 0,
                },
            );
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

    fn core(&mut self, id: NodeId) -> Option<&mut RaftCore> {
        self.nodes.get_mut(&id).and_then(|n| n.core.as_mut())
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
            match &node.core {
                None => out.push_str(&format!("\n  node {id}: down")),
                Some(core) => {
                    let status = core.status();
                    out.push_str(&format!(
                        "\n  node {id}: {:?} term {} leader {:?} commit {} applied {} kv {} last {} \
                         snapshot {} voters {:?} members {:?} transfer {:?}",
                        status.role,
                        status.term,
                        status.leader,
                        status.commit,
                        status.applied,
                        node.kv.applied(),
                        status.last_index,
                        status.snapshot_index,
                        status.membership.voters().collect::<Vec<_>>(),
                        status.membership.members.keys().collect::<Vec<_>>(),
                        status.leadership_transfer_to,
                    ));
                }
            }
        }
        out
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver { from, to, message } => {
                if self.cut.contains(&(from, to)) {
                    return;
                }
                let is_timeout_now = matches!(message, Message::TimeoutNow { .. });
                let now = self.now;
                let trace = self.trace;
                let Some(core) = self.core(to) else {
                    return;
                };
                if trace {
                    println!("{now:>6} {from}->{to} {message:?}");
                }
                let term_before = core.term();
                core.step(now, from, message);
                if is_timeout_now && core.term() > term_before && core.role() != Role::Follower {
                    self.stats.transfers += 1;
                }
                self.pump(to);
            }
            Event::FsyncDone { node, incarnation } => {
                if self.nodes[&node].incarnation == incarnation && self.nodes[&node].core.is_some()
                {
                    self.complete_write(node);
                    self.pump(node);
                }
            }
            Event::Tick { node, incarnation } => {
                if self.nodes[&node].incarnation != incarnation {
                    return;
                }
                let now = self.now;
                if let Some(core) = self.core(node) {
                    core.tick(now);
                    self.pump(node);
                    self.schedule(TICK_MS, Event::Tick { node, incarnation });
                }
            }
            Event::Crash { node, incarnation } => {
                if self.nodes[&node].incarnation == incarnation && self.healed_at.is_none() {
                    self.crash(node);
                    let down_ms = self.rng.range(1, 300);
                    self.schedule(down_ms, Event::Restart { node });
                }
            }
            Event::Restart { node } => {
                if self.nodes[&node].core.is_none() {
                    self.restart(node);
                }
            }
            Event::Action => {
                self.act();
                self.schedule(ACTION_MS, Event::Action);
            }
            Event::HealAll => {
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
                    .filter(|(_, n)| n.core.is_none())
                    .map(|(id, _)| *id)
                    .collect();
                for id in down {
                    self.restart(id);
                }
            }
        }
    }

    // ----- network ---------------------------------------------------------------------

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

    // ----- the driver --------------------------------------------------------------------

    /// Handles Readys as the real driver would, as long as the node has some.
    fn pump(&mut self, id: NodeId) {
        for _ in 0..READYS_PER_PUMP_MAX {
            let pipelined = self.scenario.pipelined;
            let node = self.nodes.get_mut(&id).expect("node exists");
            let Some(core) = node.core.as_mut() else {
                return;
            };
            if !core.has_ready() || (!pipelined && !node.writes.is_empty()) {
                return;
            }
            let ready = core.ready();
            self.handle_ready(id, ready);
        }
        fail!(
            self,
            "node {id}: more than {READYS_PER_PUMP_MAX} Readys in a row"
        );
    }

    fn handle_ready(&mut self, id: NodeId, ready: Ready) {
        let done = ready.done();
        if self.trace {
            if let Some(change) = ready.role_changed {
                println!("{:>6} node {id}: {change:?}", self.now);
            }
        }
        let elected = ready
            .role_changed
            .is_some_and(|change| change.role == Role::Leader);
        let voted = ready
            .messages_after_persist
            .iter()
            .any(|(_, m)| matches!(m, Message::VoteResponse { granted: true, .. }));
        if (elected || voted)
            && self.healed_at.is_none()
            && self.rng.chance(self.scenario.targeted_crash_per_mille)
        {
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
        for (to, message) in ready.messages {
            self.send(id, to, message);
        }
        for entry in &ready.committed {
            self.apply(id, entry);
        }
        let node = self.nodes.get_mut(&id).expect("node exists");
        node.confirmed_reads
            .extend(ready.read_states.iter().map(|r| (r.context, r.index)));
        for context in &ready.dropped_reads {
            node.reads.remove(context);
        }
        if let Some(through) = ready.compact_through {
            node.disk.entries.retain(|e| e.index > through);
        }
        self.serve_reads(id);
        if ready.snapshot_wanted {
            self.take_snapshot(id);
        }
        let io = ready.hard_state.is_some()
            || ready.snapshot.is_some()
            || ready.truncate_from.is_some()
            || !ready.entries.is_empty();
        let node = self.nodes.get_mut(&id).expect("node exists");
        if !io && node.writes.is_empty() {
            for (to, message) in ready.messages_after_persist {
                self.send(id, to, message);
            }
            let now = self.now;
            if let Some(core) = self.core(id) {
                core.advance(now, done);
            }
            return;
        }
        let fsync_ms = if io {
            self.rng.range(1, self.scenario.fsync_max_ms)
        } else {
            0
        };
        let node = self.nodes.get_mut(&id).expect("node exists");
        let done_at = (self.now + fsync_ms).max(node.last_write_done_at);
        node.last_write_done_at = done_at;
        node.writes.push_back(PendingWrite {
            hard_state: ready.hard_state,
            snapshot: ready.snapshot,
            truncate_from: ready.truncate_from,
            entries: ready.entries,
            after_persist: ready.messages_after_persist,
            done,
        });
        let incarnation = node.incarnation;
        let after = done_at - self.now;
        self.schedule(
            after,
            Event::FsyncDone {
                node: id,
                incarnation,
            },
        );
    }

    /// The oldest disk write of `id` became durable.
    fn complete_write(&mut self, id: NodeId) {
        let now = self.now;
        let node = self.nodes.get_mut(&id).expect("node exists");
        let Some(write) = node.writes.pop_front() else {
            fail!(self, "node {id}: fsync completion without a pending write");
        };
        if let Some((meta, data)) = &write.snapshot {
            node.disk.snapshot = Some((meta.clone(), data.clone()));
            node.disk.entries.clear();
            node.kv.restore(data);
            let restored = node.kv.applied();
            node.proposals.retain(|&index, _| index > meta.last_index);
            self.stats.snapshots_installed += 1;
            if restored != meta.last_index {
                fail!(
                    self,
                    "node {id}: snapshot at {} restored a store at {restored}",
                    meta.last_index
                );
            }
        }
        let node = self.nodes.get_mut(&id).expect("node exists");
        if let Some(from) = write.truncate_from {
            node.disk.entries.retain(|e| e.index < from);
        }
        self.append_durable(id, write.entries.iter().cloned());
        let node = self.nodes.get_mut(&id).expect("node exists");
        if let Some(hard_state) = write.hard_state {
            node.disk.hard_state = hard_state;
        }
        for (to, message) in write.after_persist {
            self.send(id, to, message);
        }
        if let Some(core) = self.core(id) {
            core.advance(now, write.done);
        }
    }

    /// Appends entries to `id`'s durable log, checking they follow it and log matching.
    fn append_durable(&mut self, id: NodeId, entries: impl Iterator<Item = Entry>) {
        for entry in entries {
            let disk = &self.nodes[&id].disk;
            let expected = disk.last_index() + 1;
            if entry.index != expected {
                let got = entry.index;
                fail!(
                    self,
                    "node {id}: Ready entry {got} does not follow the durable log (expected \
                     {expected})"
                );
            }
            let previous_term = match disk.entries.last() {
                Some(last) => Some(last.term),
                None => disk.snapshot.as_ref().map(|(meta, _)| meta.last_term),
            };
            self.check_log_matching(id, &entry, previous_term);
            let node = self.nodes.get_mut(&id).expect("node exists");
            node.disk.entries.push(entry);
        }
    }

    fn apply(&mut self, id: NodeId, entry: &Entry) {
        let node = &self.nodes[&id];
        let expected = node.kv.applied() + 1;
        if entry.index != expected {
            fail!(
                self,
                "node {id}: applying {} but expected {expected}",
                entry.index
            );
        }
        let term = node.core.as_ref().map_or(0, |c| c.term());
        let newly = self.register_committed(id, entry.index, entry.term, digest(entry), term);
        if newly && entry.kind == EntryKind::Membership && entry.index > 1 {
            self.stats.membership_changes += 1;
        }
        let node = self.nodes.get_mut(&id).expect("node exists");
        match entry.kind {
            EntryKind::Normal => node.kv.apply(entry.index, &entry.data),
            _ => node.kv.skip(entry.index),
        }
        if let Some(proposal) = node.proposals.remove(&entry.index) {
            if proposal.term == entry.term {
                // Applied on the leader that accepted it: acknowledged to the client.
                let slot = &mut self.acked_max[proposal.key as usize];
                *slot = (*slot).max(entry.index);
                self.stats.acked_writes += 1;
                if self
                    .healed_at
                    .is_some_and(|healed_at| proposal.proposed_at >= healed_at)
                    && self.liveness_index.is_none()
                {
                    self.liveness_index = Some(entry.index);
                }
            }
        }
    }

    fn serve_reads(&mut self, id: NodeId) {
        let node = self.nodes.get_mut(&id).expect("node exists");
        let applied = node.kv.applied();
        let mut served = Vec::new();
        node.confirmed_reads.retain(|&(context, index)| {
            if applied >= index {
                served.push(context);
                false
            } else {
                true
            }
        });
        for context in served {
            let node = self.nodes.get_mut(&id).expect("node exists");
            let Some(request) = node.reads.remove(&context) else {
                continue;
            };
            let seen = node.kv.get(request.key).map_or(0, |v| v.index);
            if seen < request.must_see_index {
                fail!(
                    self,
                    "node {id}: ReadIndex read of key {} saw the write at {seen} but the write at \
                     {} was acknowledged before the read started",
                    request.key,
                    request.must_see_index
                );
            }
            self.stats.reads_checked += 1;
        }
    }

    fn take_snapshot(&mut self, id: NodeId) {
        let node = self.nodes.get_mut(&id).expect("node exists");
        let Some(core) = node.core.as_mut() else {
            return;
        };
        let applied = node.kv.applied();
        if core.applied_index() != applied || applied <= core.snapshot_index() {
            return;
        }
        let Some(meta) = core.snapshot_meta(applied) else {
            return;
        };
        let data = node.kv.snapshot();
        // The driver makes the snapshot durable before telling the core.
        node.disk.snapshot = Some((meta.clone(), data.clone()));
        core.snapshot_taken(meta, data);
        self.pump(id);
    }

    fn crash(&mut self, id: NodeId) {
        let torn = self.scenario.torn_writes && self.rng.chance(500);
        let keep_snapshot = self.rng.chance(500);
        let prefix_draw = self.rng.next_u64();
        if self.nodes[&id].core.is_none() {
            return;
        }
        if self.trace {
            println!("{:>6} crash node {id}", self.now);
        }
        let node = self.nodes.get_mut(&id).expect("node exists");
        node.core = None;
        node.incarnation += 1;
        let oldest_write = node.writes.pop_front();
        node.writes.clear();
        if let Some(write) = oldest_write.filter(|_| torn) {
            // The oldest write was cut short: the snapshot (if any) is all or nothing, then
            // the truncation, the hard state and a prefix of the entries.
            if write.snapshot.is_none() || keep_snapshot {
                if let Some((meta, data)) = write.snapshot {
                    node.disk.snapshot = Some((meta, data));
                    node.disk.entries.clear();
                }
                if let Some(from) = write.truncate_from {
                    node.disk.entries.retain(|e| e.index < from);
                }
                if let Some(hard_state) = write.hard_state {
                    node.disk.hard_state = hard_state;
                }
                let keep = (prefix_draw % (write.entries.len() as u64 + 1)) as usize;
                self.append_durable(id, write.entries.into_iter().take(keep));
            }
        }
        let node = self.nodes.get_mut(&id).expect("node exists");
        node.kv = KvStore::default();
        node.proposals.clear();
        node.reads.clear();
        node.confirmed_reads.clear();
        node.last_commit = 0;
        node.led_term = None;
        self.stats.crashes += 1;
    }

    fn restart(&mut self, id: NodeId) {
        if self.trace {
            println!("{:>6} restart node {id}", self.now);
        }
        let config = self.scenario.raft_config(id);
        let seed = self.seed;
        let now = self.now;
        let node = self.nodes.get_mut(&id).expect("node exists");
        let restored = Restored {
            hard_state: node.disk.hard_state,
            snapshot: node.disk.snapshot.as_ref().map(|(meta, _)| meta.clone()),
            entries: node.disk.entries.clone(),
        };
        let incarnation = node.incarnation;
        let mut core =
            match RaftCore::try_new(config, restored, seed ^ (incarnation << 20) ^ id, now) {
                Ok(core) => core,
                Err(error) => fail!(self, "node {id}: restart from its own disk failed: {error}"),
            };
        let node = self.nodes.get_mut(&id).expect("node exists");
        let pristine = node.disk.entries.is_empty() && node.disk.snapshot.is_none();
        if pristine && id <= self.scenario.initial_voters {
            // Like the agent: a bootstrap server whose data dir is still empty bootstraps
            // again (the entry is identical on every server, so this is safe).
            let initial = membership_of(1..=self.scenario.initial_voters);
            if let Err(error) = core.bootstrap(initial) {
                fail!(self, "node {id}: re-bootstrap failed: {error}");
            }
        }
        let node = self.nodes.get_mut(&id).expect("node exists");
        node.kv = KvStore::default();
        if let Some((meta, data)) = &node.disk.snapshot {
            node.kv.restore(data);
            core.snapshot_taken(meta.clone(), data.clone());
        }
        node.last_commit = core.commit_index();
        node.last_write_done_at = now;
        node.core = Some(core);
        self.schedule(
            TICK_MS,
            Event::Tick {
                node: id,
                incarnation,
            },
        );
        self.pump(id);
    }

    // ----- clients and faults -------------------------------------------------------------

    fn live_nodes(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.core.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    /// A client's choice of server: usually the leader with the highest term, sometimes any.
    fn pick_target(&mut self) -> Option<NodeId> {
        let live = self.live_nodes();
        if live.is_empty() {
            return None;
        }
        if self.rng.chance(850) {
            let leader = live
                .iter()
                .filter(|id| self.nodes[id].core.as_ref().unwrap().role() == Role::Leader)
                .max_by_key(|id| self.nodes[id].core.as_ref().unwrap().term())
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
        if self.rng.chance(self.scenario.snapshot_per_mille) {
            let live = self.live_nodes();
            if !live.is_empty() {
                let id = self.rng.pick(&live);
                self.take_snapshot(id);
            }
        }
        if self.healed_at.is_some() {
            return;
        }
        if self.rng.chance(self.scenario.crash_per_mille) {
            let live = self.live_nodes();
            if !live.is_empty() {
                let id = self.rng.pick(&live);
                self.crash(id);
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

    fn client_write(&mut self) {
        let Some(id) = self.pick_target() else {
            return;
        };
        let key = self.rng.below(KEYS) as u8;
        let write_id = self.next_write_id;
        self.next_write_id += 1;
        let now = self.now;
        let core = self.core(id).expect("live");
        if let Ok((index, term)) = core.propose(now, encode_put(key, write_id)) {
            let node = self.nodes.get_mut(&id).expect("node exists");
            node.proposals.insert(
                index,
                Proposal {
                    term,
                    key,
                    proposed_at: now,
                },
            );
            self.pump(id);
        }
    }

    fn client_read(&mut self) {
        let Some(id) = self.pick_target() else {
            return;
        };
        let key = self.rng.below(KEYS) as u8;
        let context = self.next_read_context;
        self.next_read_context += 1;
        let must_see_index = self.acked_max[key as usize];
        let now = self.now;
        let core = self.core(id).expect("live");
        if core.read_index(now, context).is_ok() {
            let node = self.nodes.get_mut(&id).expect("node exists");
            node.reads.insert(
                context,
                ReadRequest {
                    key,
                    must_see_index,
                },
            );
            self.pump(id);
        }
    }

    fn lease_read(&mut self) {
        let Some(id) = self.pick_target() else {
            return;
        };
        let now = self.now;
        let node = &self.nodes[&id];
        let core = node.core.as_ref().expect("live");
        if core.leader_lease_until().is_none_or(|until| until <= now) {
            return;
        }
        let key = self.rng.below(KEYS) as u8;
        let seen = node.kv.get(key).map_or(0, |v| v.index);
        let must_see = self.acked_max[key as usize];
        if seen < must_see {
            fail!(
                self,
                "node {id}: lease read of key {key} saw the write at {seen} but the write at \
                 {must_see} was acknowledged before"
            );
        }
        self.stats.lease_reads += 1;
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
            .filter(|(_, n)| n.core.as_ref().is_some_and(|c| c.role() == Role::Leader))
            .max_by_key(|(_, n)| n.core.as_ref().unwrap().term())
            .map(|(id, _)| *id)
    }

    fn change_membership(&mut self) {
        let Some(leader) = self.current_leader() else {
            return;
        };
        let target = self.rng.range(1, self.scenario.nodes);
        let membership = self.nodes[&leader]
            .core
            .as_ref()
            .unwrap()
            .membership()
            .clone();
        let change = match membership.members.get(&target) {
            None if self.rng.chance(500) => MembershipChange::AddNonvoter {
                id: target,
                name: format!("server-{target}"),
                address: format!("10.0.0.{target}:8300"),
            },
            None => MembershipChange::AddVoter {
                id: target,
                name: format!("server-{target}"),
                address: format!("10.0.0.{target}:8300"),
            },
            Some(member) if !member.voter && self.rng.chance(700) => {
                // Like autopilot: promote only a non-voter that has caught up, or the
                // cluster's commit waits on its catch-up.
                let core = self.nodes[&leader].core.as_ref().unwrap();
                let last = core.last_index();
                let caught_up = core
                    .status()
                    .peers
                    .iter()
                    .any(|p| p.id == target && p.match_index + 64 >= last);
                if !caught_up {
                    return;
                }
                MembershipChange::Promote { id: target }
            }
            Some(_) => MembershipChange::Remove { id: target },
        };
        let now = self.now;
        let result = self
            .core(leader)
            .expect("live")
            .propose_membership_change(now, change.clone());
        if self.trace {
            println!("{now:>6} node {leader}: {change:?} -> {result:?}");
        }
        if result.is_ok() {
            self.pump(leader);
        }
    }

    fn transfer(&mut self) {
        let Some(leader) = self.current_leader() else {
            return;
        };
        let to = if self.rng.chance(500) {
            None
        } else {
            Some(self.rng.range(1, self.scenario.nodes))
        };
        let now = self.now;
        let result = self
            .core(leader)
            .expect("live")
            .transfer_leadership(now, to);
        if self.trace {
            println!("{now:>6} node {leader}: transfer to {to:?} -> {result:?}");
        }
        self.pump(leader);
    }

    // ----- the checker ---------------------------------------------------------------------

    /// Records that `index` is committed with this entry; fails if another entry was.
    /// Returns whether this is the first time the index is seen committed.
    fn register_committed(
        &mut self,
        id: NodeId,
        index: LogIndex,
        term: Term,
        digest: u64,
        observer_term: Term,
    ) -> bool {
        let slot = index as usize;
        if self.committed.len() <= slot {
            self.committed.resize_with(slot + 1, || None);
        }
        match &mut self.committed[slot] {
            None => {
                self.committed[slot] = Some(CommittedEntry {
                    term,
                    digest,
                    commit_term: observer_term,
                });
                true
            }
            Some(known) => {
                if known.term != term || known.digest != digest {
                    let known_term = known.term;
                    fail!(
                        self,
                        "state machine safety: node {id} has index {index} committed with term \
                         {term}, but it was committed with term {known_term} (or other data)"
                    );
                }
                known.commit_term = known.commit_term.min(observer_term);
                false
            }
        }
    }

    /// Log matching, inductively: an (index, term) pair that reached any disk always names
    /// the same entry with the same predecessor term.
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
            let Some(core) = node.core.as_ref() else {
                continue;
            };
            let term = core.term();
            let commit = core.commit_index();
            let applied = core.applied_index();
            let kv_applied = node.kv.applied();
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
            if applied > commit || kv_applied > commit {
                fail!(
                    self,
                    "node {id}: applied {applied} (store {kv_applied}) beyond commit {commit}"
                );
            }
            if commit > last_commit {
                let mut newly = Vec::new();
                for index in last_commit + 1..=commit {
                    if let Some(entry) = core.log_entry(index) {
                        newly.push((index, entry.term, digest(entry)));
                    }
                }
                // A leader's first commit advance in its term: losing the leader right then is
                // where a wrong commit rule (counting older-term entries, Raft figure 8)
                // would surface.
                let first_commit_of_term = core.role() == Role::Leader
                    && core.log_term(last_commit).is_some_and(|t| t < term);
                for (index, entry_term, entry_digest) in newly {
                    self.register_committed(id, index, entry_term, entry_digest, term);
                }
                self.nodes.get_mut(&id).expect("node exists").last_commit = commit;
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
                self.nodes.get_mut(&id).expect("node exists").led_term = Some(term);
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
        let membership = self.nodes[&id].core.as_ref().expect("live").membership();
        let mut guards: Vec<Millis> = membership
            .voters()
            .map(
                |voter| match self.nodes.get(&voter).and_then(|n| n.core.as_ref()) {
                    None => Millis::MAX,
                    Some(_) if voter == id => Millis::MAX,
                    Some(core) => core.vote_guard_until().unwrap_or(0),
                },
            )
            .collect();
        guards.sort_unstable_by(|a, b| b.cmp(a));
        let guaranteed = guards[membership.quorum() - 1];
        if until > guaranteed {
            let peers = self.nodes[&id].core.as_ref().expect("live").status().peers;
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
        let core = self.nodes[&id].core.as_ref().expect("live");
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
            .core
            .as_ref()
            .unwrap()
            .membership()
            .members
            .keys()
            .copied()
            .collect();
        let all_applied = members.iter().all(|id| {
            self.nodes
                .get(id)
                .is_some_and(|n| n.core.is_some() && n.kv.applied() >= index)
        });
        if all_applied {
            self.finished = true;
        }
    }

    fn final_checks(&mut self) {
        let leader = self
            .current_leader()
            .unwrap_or_else(|| fail!(self, "no leader at the end"));
        let kv = &self.nodes[&leader].kv;
        for key in 0..KEYS as u8 {
            let seen = kv.get(key).map_or(0, |v| v.index);
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
