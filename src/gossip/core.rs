//! The gossip state machine: memberlist's SWIM with Lifeguard underneath serf's member
//! status, Lamport clocks, intents, user events and queries, and serf's Vivaldi client.
//!
//! Inputs are method calls carrying the current time (`now`, a `Duration` since an
//! origin the driver picks) and bytes; effects are [`Output`] values collected until the
//! driver calls [`Gossip::drain`]. There is no I/O, no clock read and no hidden
//! randomness: the RNG is seeded by the caller (the driver seeds it from the OS; the
//! simulator from a replayable seed). Timers are kept in a heap; the driver calls
//! [`Gossip::tick`] at [`Gossip::next_deadline`].
//!
//! Invariants: the local node is always present in the memberlist node table and in the
//! serf member table; every node name maps to exactly one table slot; Lamport clocks
//! only move forward; a broadcast's notification id is reported exactly once.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use base64::Engine;
use rand::rngs::StdRng;
use rand::{Rng, RngExt, SeedableRng};

use super::config::GossipConfig;
use super::coordinate::{Coordinate, VivaldiClient, VivaldiConfig};
use super::queue::BroadcastQueue;
use super::types::*;
use crate::proto::gossip::memberlist::{
    self as ml, msg_type, AckResp, Alive, IndirectPingReq, Message, NackResp, NodeStateKind,
    PacketSeal, Ping, PushNodeState, StreamMessage, StreamSeal, Suspect, Unseal,
    COMPOUND_HEADER_OVERHEAD, COMPOUND_PART_OVERHEAD, META_BYTES_MAX,
};
use crate::proto::gossip::security;
use crate::proto::gossip::serf::{
    self as sm, ConflictMember, JoinIntent, KeyRequest, KeyResponse, LeaveIntent, QueryFilter,
    QueryMsg, QueryResponseMsg, SerfMessage, SerfPushPull, UserEventItem, UserEventMsg,
    UserEventsAt,
};
use crate::proto::gossip::{ip_from_wire, ip_to_wire, WireError};

mod exchange;
mod nodes;
mod probe;
mod queries;
mod requests;
mod serf;

/// Pools up to this many nodes get the whole-table invariant scan at every drain; larger
/// ones (the 500-node simulation) only the constant-time checks, which keeps the scan from
/// making every packet O(n) in debug builds.
const INVARIANT_SCAN_NODES_MAX: usize = 64;

/// memberlist `pushPullScaleThreshold`: above this many nodes push/pull slows down.
const PUSH_PULL_SCALE_THRESHOLD: usize = 32;
/// Per-message overhead of wrapping a serf broadcast as a memberlist user message.
const USER_MSG_OVERHEAD: usize = 1;
/// serf internal query prefix.
const INTERNAL_QUERY_PREFIX: &str = "_serf_";
/// serf `minEncodedKeyLength`, used to size list-keys responses.
const MIN_ENCODED_KEY_LENGTH: usize = 25;
/// A member that leaves or (re)joins also sends the news straight to at most this many
/// members (all of them in pools up to this size, a random sample beyond), on top of
/// gossiping it: see [`Gossip::announce`].
const ANNOUNCE_FANOUT_MEMBERS_MAX: usize = 1024;
/// Senders of recent pings remembered by address, for [`Gossip::sender_name`].
const SENDER_NAMES_MAX: usize = 64;

/// memberlist `suspicionTimeout`.
pub fn suspicion_timeout(suspicion_mult: u32, n: usize, interval: Duration) -> Duration {
    let node_scale = (n.max(1) as f64).log10().max(1.0);
    let millis = (node_scale * 1000.0) as u64;
    interval * suspicion_mult * millis as u32 / 1000
}

/// memberlist `pushPullScale`.
pub fn push_pull_scale(interval: Duration, n: usize) -> Duration {
    if n <= PUSH_PULL_SCALE_THRESHOLD {
        return interval;
    }
    let mult = ((n as f64).log2() - (PUSH_PULL_SCALE_THRESHOLD as f64).log2()).ceil() + 1.0;
    interval * mult as u32
}

/// memberlist `remainingSuspicionTime` (before subtracting elapsed time).
fn suspicion_total(n: u32, k: u32, min: Duration, max: Duration) -> Duration {
    let frac = ((n as f64) + 1.0).ln() / ((k as f64) + 1.0).ln();
    let raw = max.as_secs_f64() - frac * (max.as_secs_f64() - min.as_secs_f64());
    let timeout = Duration::from_millis((1000.0 * raw).floor().max(0.0) as u64);
    timeout.max(min)
}

/// A serf message wrapped as a memberlist user message.
fn user_message(serf: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(serf.len() + USER_MSG_OVERHEAD);
    b.push(msg_type::USER);
    b.extend_from_slice(serf);
    b
}

#[derive(Debug, Clone)]
struct Node {
    name: String,
    addr: IpAddr,
    port: u16,
    meta: Option<Vec<u8>>,
    incarnation: u32,
    state: NodeStateKind,
    state_change: Duration,
    vsn: [u8; 6],
}

impl Node {
    fn socket(&self) -> SocketAddr {
        SocketAddr::new(self.addr, self.port)
    }
    fn dead_or_left(&self) -> bool {
        matches!(self.state, NodeStateKind::Dead | NodeStateKind::Left)
    }
}

#[derive(Debug)]
struct Suspicion {
    k: u32,
    n: u32,
    min: Duration,
    max: Duration,
    start: Duration,
    confirmations: HashSet<String>,
    generation: u64,
    state_change: Duration,
}

#[derive(Debug)]
struct Probe {
    seq: u32,
    node: String,
    sent: Duration,
    acked: bool,
    expected_nacks: u32,
    nacks: u32,
    tcp_stream: Option<u64>,
    awareness_delta: i32,
}

#[derive(Debug)]
enum AckHandler {
    Probe,
    Relay {
        orig_seq: u32,
        reply_to: SocketAddr,
        nack: bool,
        acked: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Probe,
    ProbeTimeout(u32),
    ProbeDeadline(u32),
    RelayExpire(u32),
    Suspicion(String, u64),
    Gossip,
    PushPull,
    Reap,
    Reconnect,
    QueueCheck,
    Leave(u64),
    Query(u64),
}

#[derive(Debug)]
enum StreamKind {
    PushPull { join_request: Option<u64> },
    TcpPing { seq: u32 },
}

#[derive(Debug, Default)]
struct JoinState {
    pending: usize,
    joined: usize,
    errors: Vec<String>,
    /// serf `Join(ignoreOld)`: do not replay user events older than the pool's.
    ignore_old: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SerfState {
    Alive,
    Leaving,
    Left,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeavePhase {
    Idle,
    /// Waiting for our own dead (left) broadcast to go out.
    Dead {
        request: u64,
        notify: u64,
        step: u64,
    },
    /// serf `LeavePropagateDelay`.
    Propagate {
        request: u64,
        step: u64,
    },
    Done,
}

#[derive(Debug)]
struct SerfMember {
    info: MemberInfo,
    /// The Lamport time of the newest join or leave intent applied to this member.
    status_ltime: u64,
    leave_time: Duration,
    /// A join intent newer than the member's departure arrived while it was `Left`: it is
    /// coming back, and `status_ltime` is that join's time, not its leave's.
    rejoining: bool,
}

#[derive(Debug, Clone, Copy)]
struct Intent {
    join: bool,
    wall: Duration,
    ltime: u64,
}

#[derive(Debug)]
struct PendingQuery {
    id: u32,
    request: u64,
    key_op: bool,
    expected: usize,
    responses: BTreeMap<String, Vec<u8>>,
}

/// Which serf queue a broadcast goes to (serf keeps three, drained in this order).
#[derive(Debug, Clone, Copy)]
enum SerfQueue {
    Intents,
    Queries,
    Events,
}

/// Counters for tests, benches and `/v1/agent/self`-style stats.
#[derive(Debug, Clone, Default)]
pub struct GossipStats {
    pub packets_sent: u64,
    pub packet_bytes_sent: u64,
    pub packets_received: u64,
    pub packet_bytes_received: u64,
    pub streams_opened: u64,
    pub stream_bytes_sent: u64,
    pub decode_errors: u64,
    pub probes: u64,
    pub probe_failures: u64,
}

pub struct Gossip {
    config: GossipConfig,
    rng: StdRng,
    now: Duration,
    out: Vec<Output>,
    timers: BinaryHeap<Reverse<(Duration, u64, Timer)>>,
    timer_seq: u64,
    stats: GossipStats,

    // memberlist
    nodes: Vec<Node>,
    index: HashMap<String, usize>,
    /// The names pings and indirect ping requests gave for the addresses their answers go
    /// to; at most [`SENDER_NAMES_MAX`].
    sender_names: BTreeMap<SocketAddr, String>,
    incarnation: u32,
    seq: u32,
    probe_index: usize,
    probe: Option<Probe>,
    ack_handlers: HashMap<u32, AckHandler>,
    suspicions: HashMap<String, Suspicion>,
    suspicion_generation: u64,
    awareness: u32,
    ml_queue: BroadcastQueue,
    keys: Vec<Vec<u8>>,
    left: bool,
    next_stream: u64,
    streams: HashMap<u64, StreamKind>,
    joins: HashMap<u64, JoinState>,
    meta: Vec<u8>,

    // serf
    serf_state: SerfState,
    leave_phase: LeavePhase,
    leave_step: u64,
    members: HashMap<String, SerfMember>,
    failed_members: Vec<String>,
    left_members: Vec<String>,
    intents: HashMap<String, Intent>,
    clock: u64,
    event_clock: u64,
    query_clock: u64,
    event_buffer: Vec<Option<UserEventsAt>>,
    event_min_time: u64,
    query_buffer: Vec<Option<(u64, Vec<u32>)>>,
    query_min_time: u64,
    pending_queries: HashMap<u64, PendingQuery>,
    intent_queue: BroadcastQueue,
    event_queue: BroadcastQueue,
    query_queue: BroadcastQueue,
    finished_broadcasts: Vec<u64>,
    next_notify: u64,
    members_version: u64,

    // What the last invariant check saw, so the next one can assert that time and the
    // Lamport clocks only moved forward.
    checked_now: Duration,
    checked_clocks: (u64, u64, u64),

    // coordinates
    vivaldi: VivaldiClient,
    coordinates: HashMap<String, Coordinate>,
}

impl Gossip {
    /// Creates the core and marks the local node alive. `seed` seeds the RNG used for
    /// target selection, query ids and AES-GCM nonces: pass OS entropy in production.
    pub fn new(config: GossipConfig, seed: [u8; 32], now: Duration) -> Result<Self, String> {
        let meta = sm::encode_tags(&config.tags);
        if meta.len() > META_BYTES_MAX {
            return Err(format!(
                "encoded length of tags exceeds limit of {META_BYTES_MAX} bytes"
            ));
        }
        for k in &config.keys {
            security::validate_key(k).map_err(|e| e.to_string())?;
        }
        if config.label.len() > ml::LABEL_BYTES_MAX {
            return Err(format!(
                "label is longer than {} bytes",
                ml::LABEL_BYTES_MAX
            ));
        }
        let mut g = Gossip {
            rng: StdRng::from_seed(seed),
            now,
            out: Vec::new(),
            sender_names: BTreeMap::new(),
            timers: BinaryHeap::new(),
            timer_seq: 0,
            stats: GossipStats::default(),
            nodes: Vec::new(),
            index: HashMap::new(),
            incarnation: 0,
            seq: 0,
            probe_index: 0,
            probe: None,
            ack_handlers: HashMap::new(),
            suspicions: HashMap::new(),
            suspicion_generation: 0,
            awareness: 0,
            ml_queue: BroadcastQueue::default(),
            keys: config.keys.clone(),
            left: false,
            next_stream: 0,
            streams: HashMap::new(),
            joins: HashMap::new(),
            meta,
            serf_state: SerfState::Alive,
            leave_phase: LeavePhase::Idle,
            leave_step: 0,
            members: HashMap::new(),
            failed_members: Vec::new(),
            left_members: Vec::new(),
            intents: HashMap::new(),
            clock: 1,
            event_clock: 1,
            query_clock: 1,
            event_buffer: vec![None; config.event_buffer.max(1)],
            event_min_time: 0,
            query_buffer: vec![None; config.query_buffer.max(1)],
            query_min_time: 0,
            pending_queries: HashMap::new(),
            intent_queue: BroadcastQueue::default(),
            event_queue: BroadcastQueue::default(),
            query_queue: BroadcastQueue::default(),
            finished_broadcasts: Vec::new(),
            next_notify: 0,
            members_version: 0,
            checked_now: now,
            checked_clocks: (1, 1, 1),
            vivaldi: VivaldiClient::new(VivaldiConfig::default()),
            coordinates: HashMap::new(),
            config,
        };
        // memberlist setAlive: our own alive message, bootstrapping the node table.
        let inc = g.next_incarnation();
        let alive = Alive {
            incarnation: inc,
            node: g.config.node_name.clone(),
            addr: ip_to_wire(g.config.advertise_addr),
            port: g.config.advertise_port,
            meta: Some(g.meta.clone()),
            vsn: g.config.vsn().to_vec(),
        };
        g.alive_node(alive, None, true);
        // memberlist schedule(): each loop starts after a random stagger.
        let stagger = g.random_duration(g.config.probe_interval);
        g.schedule(now + stagger, Timer::Probe);
        let stagger = g.random_duration(g.config.gossip_interval);
        g.schedule(now + stagger, Timer::Gossip);
        let stagger = g.random_duration(g.config.push_pull_interval);
        g.schedule(now + stagger, Timer::PushPull);
        g.schedule(now + g.config.reap_interval, Timer::Reap);
        g.schedule(now + g.config.reconnect_interval, Timer::Reconnect);
        g.schedule(now + g.config.queue_check_interval, Timer::QueueCheck);
        let own = g.vivaldi.coordinate().clone();
        g.coordinates.insert(g.config.node_name.clone(), own);
        assert!(
            g.index.contains_key(&g.config.node_name)
                && g.members.contains_key(&g.config.node_name),
            "the local node bootstraps both tables"
        );
        g.check_invariants();
        Ok(g)
    }

    // -----------------------------------------------------------------------------------
    // Accessors

    pub fn config(&self) -> &GossipConfig {
        &self.config
    }

    pub fn stats(&self) -> &GossipStats {
        &self.stats
    }

    /// Takes the effects produced so far. The driver drains after every input, so this is
    /// the seam where the state each input left behind is checked.
    pub fn drain(&mut self) -> Vec<Output> {
        self.check_invariants();
        std::mem::take(&mut self.out)
    }

    /// The invariants of the module doc, asserted in debug builds (the `ci` profile keeps
    /// them): the local node is in both tables; the node index and the node table name the
    /// same nodes, one slot each; every suspicion is of a known, suspect node; the failed and
    /// left lists hold exactly the members with those statuses; awareness stays below its
    /// ceiling; time and the Lamport clocks never move back.
    fn check_invariants(&mut self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let local = &self.config.node_name;
        debug_assert_eq!(
            self.index.len(),
            self.nodes.len(),
            "one index entry per node"
        );
        debug_assert!(
            self.index
                .get(local)
                .is_some_and(|&i| self.nodes[i].name == *local),
            "the local node is in the node table under its own name"
        );
        debug_assert!(
            self.members.contains_key(local),
            "the local node is a serf member"
        );
        debug_assert!(
            self.probe_index <= self.nodes.len(),
            "the probe cursor is within the table"
        );
        debug_assert!(
            self.awareness < self.config.awareness_max_multiplier.max(1),
            "awareness {} reached its ceiling",
            self.awareness
        );
        debug_assert!(self.now >= self.checked_now, "time went back");
        let clocks = (self.clock, self.event_clock, self.query_clock);
        debug_assert!(
            clocks.0 >= self.checked_clocks.0
                && clocks.1 >= self.checked_clocks.1
                && clocks.2 >= self.checked_clocks.2,
            "a Lamport clock went back: {:?} after {:?}",
            clocks,
            self.checked_clocks
        );
        debug_assert!(
            self.event_buffer.len() == self.config.event_buffer.max(1)
                && self.query_buffer.len() == self.config.query_buffer.max(1),
            "the recent-event and recent-query buffers keep their configured sizes"
        );
        self.checked_now = self.now;
        self.checked_clocks = clocks;
        if self.nodes.len() > INVARIANT_SCAN_NODES_MAX {
            return;
        }
        for (name, &slot) in &self.index {
            debug_assert_eq!(
                &self.nodes[slot].name, name,
                "index entry {name} points at another node"
            );
        }
        for (name, suspicion) in &self.suspicions {
            debug_assert!(
                self.index
                    .get(name)
                    .is_some_and(|&i| self.nodes[i].state == NodeStateKind::Suspect),
                "a suspicion of {name}, which is not a suspect node"
            );
            debug_assert!(
                suspicion.n <= suspicion.k,
                "more confirmations than Lifeguard asks for"
            );
        }
        for (list, status) in [
            (&self.failed_members, MemberStatus::Failed),
            (&self.left_members, MemberStatus::Left),
        ] {
            let unique: HashSet<&String> = list.iter().collect();
            debug_assert_eq!(
                unique.len(),
                list.len(),
                "a member listed twice as {status:?}"
            );
            for name in list {
                debug_assert!(
                    self.members
                        .get(name)
                        .is_some_and(|m| m.info.status == status),
                    "{name} is listed as {status:?} but its status differs"
                );
            }
        }
        for member in self.members.values() {
            let listed = match member.info.status {
                MemberStatus::Failed => self.failed_members.contains(&member.info.name),
                MemberStatus::Left => self.left_members.contains(&member.info.name),
                MemberStatus::Alive | MemberStatus::Leaving => true,
            };
            debug_assert!(
                listed,
                "{} is {:?} but not in that list, so it would never be reaped",
                member.info.name, member.info.status
            );
        }
    }

    /// When [`Gossip::tick`] next has work.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.timers.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Bumped whenever the serf member table changes (drivers rebuild snapshots on it).
    pub fn members_version(&self) -> u64 {
        self.members_version
    }

    /// serf `Members()`: every known member including ourselves, sorted by name.
    pub fn members(&self) -> Vec<MemberInfo> {
        let mut v: Vec<MemberInfo> = self.members.values().map(|m| m.info.clone()).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// One member as serf reports it, without copying the whole table.
    pub fn member(&self, name: &str) -> Option<&MemberInfo> {
        self.members.get(name).map(|m| &m.info)
    }

    pub fn local_name(&self) -> &str {
        &self.config.node_name
    }

    /// Our Vivaldi coordinate.
    pub fn local_coordinate(&self) -> Coordinate {
        self.vivaldi.coordinate().clone()
    }

    /// serf `GetCachedCoordinate` for every node we have a sample from (and ourselves).
    pub fn coordinates(&self) -> &HashMap<String, Coordinate> {
        &self.coordinates
    }

    /// Lifeguard health score (0 is healthy).
    pub fn health_score(&self) -> u32 {
        self.awareness
    }

    /// The memberlist view of a node: (state, incarnation). For tests and diagnostics.
    pub fn node_state(&self, name: &str) -> Option<(NodeStateKind, u32)> {
        self.index
            .get(name)
            .map(|&i| (self.nodes[i].state, self.nodes[i].incarnation))
    }

    /// Number of nodes in the memberlist table (memberlist `estNumNodes`).
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Installed keys, primary first.
    pub fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    pub fn lamport_times(&self) -> (u64, u64, u64) {
        (self.clock, self.event_clock, self.query_clock)
    }

    pub fn has_left(&self) -> bool {
        self.left
    }

    /// Whether a graceful leave has finished: from then on the node ignores every packet
    /// and stream, as the agent is about to exit. Until then a leaving node keeps
    /// answering probes (memberlist goes on serving after `Leave` until `Shutdown`, and
    /// serf's leave propagation delay exists for exactly that): a node that has not yet
    /// heard of the leave would otherwise suspect the leaver and, missing the "left"
    /// broadcast, declare it failed.
    fn silent(&self) -> bool {
        self.leave_phase == LeavePhase::Done
    }

    // -----------------------------------------------------------------------------------
    // Helpers

    fn schedule(&mut self, at: Duration, timer: Timer) {
        debug_assert!(at >= self.now, "{timer:?} scheduled in the past");
        self.timer_seq += 1;
        self.timers.push(Reverse((at, self.timer_seq, timer)));
    }

    fn random_duration(&mut self, max: Duration) -> Duration {
        let n = max.as_nanos() as u64;
        if n == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.rng.random_range(0..n))
    }

    fn random_index(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.rng.random_range(0..n)
        }
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn next_incarnation(&mut self) -> u32 {
        self.incarnation = self.incarnation.wrapping_add(1);
        self.incarnation
    }

    fn nonce(&mut self) -> [u8; 12] {
        let mut n = [0u8; 12];
        self.rng.fill_bytes(&mut n);
        n
    }

    fn encryption_enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    fn scale_timeout(&self, d: Duration) -> Duration {
        d * (self.awareness + 1)
    }

    fn apply_awareness(&mut self, delta: i32) {
        let max = self.config.awareness_max_multiplier.saturating_sub(1) as i64;
        self.awareness = (self.awareness as i64 + delta as i64).clamp(0, max) as u32;
        debug_assert!(i64::from(self.awareness) <= max);
    }

    fn unseal(&self) -> Unseal<'_> {
        Unseal {
            keys: &self.keys,
            verify_incoming: self.config.gossip_verify_incoming,
            label: &self.config.label,
            skip_inbound_label_check: self.config.skip_inbound_label_check,
        }
    }

    /// The node name the last ping or indirect ping request from a sender answered at
    /// `address` gave, if one did (see `remember_sender`).
    pub fn sender_name(&self, address: SocketAddr) -> Option<&str> {
        self.sender_names.get(&address).map(String::as_str)
    }

    /// memberlist `rawSendMsgPacket`.
    fn send_raw(&mut self, to: SocketAddr, crc: bool, msg: Vec<u8>) {
        let nonce = self.nonce();
        let key = if self.encryption_enabled() && self.config.gossip_verify_outgoing {
            self.keys.first()
        } else {
            None
        };
        let seal = PacketSeal {
            compress: self.config.enable_compression,
            crc,
            key: key.map(|k| k.as_slice()),
            encryption_version: 1,
            label: &self.config.label,
        };
        let bytes = ml::seal_packet(msg, &seal, nonce);
        self.stats.packets_sent += 1;
        self.stats.packet_bytes_sent += bytes.len() as u64;
        self.out.push(Output::Packet { to, bytes });
    }

    /// memberlist `sendMsg`: piggyback queued broadcasts on `msg`.
    fn send_msg(&mut self, to: SocketAddr, msg: Vec<u8>) {
        let mut avail = self
            .config
            .udp_buffer_size
            .saturating_sub(msg.len() + COMPOUND_HEADER_OVERHEAD);
        if self.encryption_enabled() && self.config.gossip_verify_outgoing {
            avail = avail.saturating_sub(security::encrypt_overhead(1));
        }
        let avail = avail.saturating_sub(self.label_overhead());
        let extra = self.get_broadcasts(COMPOUND_PART_OVERHEAD, avail);
        if extra.is_empty() {
            self.send_raw(to, false, msg);
            return;
        }
        let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + extra.len());
        parts.push(&msg);
        parts.extend(extra.iter().map(|m| m.as_slice()));
        let compound = ml::make_compound(&parts);
        self.send_raw(to, false, compound);
    }

    fn label_overhead(&self) -> usize {
        if self.config.label.is_empty() {
            0
        } else {
            2 + self.config.label.len()
        }
    }

    /// memberlist `getBroadcasts`: our queue first, then serf's three queues as user
    /// messages.
    fn get_broadcasts(&mut self, overhead: usize, limit: usize) -> Vec<Vec<u8>> {
        let n = self.nodes.len();
        let mult = self.config.retransmit_mult;
        let mut finished = std::mem::take(&mut self.finished_broadcasts);
        let mut out = self.ml_queue.take(overhead, limit, n, mult, &mut finished);
        let used: usize = out.iter().map(|m| m.len() + overhead).sum();
        let avail = limit.saturating_sub(used);
        if avail > overhead + USER_MSG_OVERHEAD {
            let serf_n = self.members.len();
            let o = overhead + USER_MSG_OVERHEAD;
            let mut serf_msgs = self
                .intent_queue
                .take(o, avail, serf_n, mult, &mut finished);
            let used: usize = serf_msgs.iter().map(|m| m.len() + o).sum();
            serf_msgs.extend(self.query_queue.take(
                o,
                avail.saturating_sub(used),
                serf_n,
                mult,
                &mut finished,
            ));
            let used: usize = serf_msgs.iter().map(|m| m.len() + o).sum();
            serf_msgs.extend(self.event_queue.take(
                o,
                avail.saturating_sub(used),
                serf_n,
                mult,
                &mut finished,
            ));
            for m in serf_msgs {
                let mut b = Vec::with_capacity(m.len() + 1);
                b.push(msg_type::USER);
                b.extend_from_slice(&m);
                out.push(b);
            }
        }
        self.finished_broadcasts = finished;
        self.process_finished_broadcasts();
        let used: usize = out.iter().map(|m| m.len() + overhead).sum();
        debug_assert!(
            used <= limit,
            "{used} bytes of broadcasts for a {limit}-byte budget"
        );
        out
    }

    fn process_finished_broadcasts(&mut self) {
        if self.finished_broadcasts.is_empty() {
            return;
        }
        let done = std::mem::take(&mut self.finished_broadcasts);
        for id in done {
            match self.leave_phase {
                LeavePhase::Dead { notify, .. } if notify == id => {
                    self.leave_step += 1;
                    let step = self.leave_step;
                    // Continue on the next tick so this happens outside packet assembly.
                    self.schedule(self.now, Timer::Leave(step));
                    self.leave_phase = match self.leave_phase {
                        LeavePhase::Dead { request, .. } => LeavePhase::Dead {
                            request,
                            notify: 0,
                            step,
                        },
                        other => other,
                    };
                }
                _ => {}
            }
        }
    }

    fn ml_broadcast(&mut self, node: &str, msg: &Message, notify: Option<u64>) {
        let mut finished = std::mem::take(&mut self.finished_broadcasts);
        self.ml_queue
            .push(Some(node.to_owned()), msg.encode(), notify, &mut finished);
        self.finished_broadcasts = finished;
        self.process_finished_broadcasts();
    }

    fn serf_broadcast(&mut self, queue: SerfQueue, msg: Vec<u8>, notify: Option<u64>) {
        let mut finished = std::mem::take(&mut self.finished_broadcasts);
        let q = match queue {
            SerfQueue::Intents => &mut self.intent_queue,
            SerfQueue::Queries => &mut self.query_queue,
            SerfQueue::Events => &mut self.event_queue,
        };
        q.push(None, msg, notify, &mut finished);
        self.finished_broadcasts = finished;
        self.process_finished_broadcasts();
    }

    fn new_notify(&mut self) -> u64 {
        self.next_notify += 1;
        self.next_notify
    }

    // -----------------------------------------------------------------------------------
    // Time

    /// Runs every timer due at or before `now`.
    pub fn tick(&mut self, now: Duration) {
        self.now = self.now.max(now);
        while let Some(Reverse((at, _, _))) = self.timers.peek() {
            if *at > self.now {
                break;
            }
            let Some(Reverse((_, _, timer))) = self.timers.pop() else {
                break;
            };
            self.fire(timer);
        }
        debug_assert!(
            self.next_deadline().is_none_or(|at| at > self.now),
            "a timer due now was left for later"
        );
    }

    fn fire(&mut self, timer: Timer) {
        // After a graceful leave memberlist stops probing; gossip keeps running until the
        // leave completes so that our "left" broadcast gets out.
        let running = !self.left;
        let gossiping = self.leave_phase != LeavePhase::Done;
        match timer {
            Timer::Probe if running => self.probe_next(),
            Timer::ProbeTimeout(seq) => self.probe_timeout(seq),
            Timer::ProbeDeadline(seq) => self.probe_deadline(seq),
            Timer::RelayExpire(seq) => self.relay_expire(seq),
            Timer::Suspicion(node, generation) => self.suspicion_fired(&node, generation),
            Timer::Gossip if gossiping => {
                self.gossip();
                self.schedule(self.now + self.config.gossip_interval, Timer::Gossip);
            }
            Timer::PushPull if running => {
                self.periodic_push_pull();
                let every = push_pull_scale(self.config.push_pull_interval, self.nodes.len());
                self.schedule(self.now + every, Timer::PushPull);
            }
            Timer::Reap => {
                self.reap();
                self.schedule(self.now + self.config.reap_interval, Timer::Reap);
            }
            Timer::Reconnect if running => {
                self.reconnect();
                self.schedule(self.now + self.config.reconnect_interval, Timer::Reconnect);
            }
            Timer::QueueCheck => {
                self.check_queue_depth();
                self.schedule(
                    self.now + self.config.queue_check_interval,
                    Timer::QueueCheck,
                );
            }
            Timer::Leave(step) => self.leave_advance(step),
            Timer::Query(ltime) => self.query_finished(ltime),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// memberlist util_test.go TestSuspicionTimeout.
    #[test]
    fn suspicion_timeout_matches_memberlist() {
        for (n, ms) in [
            (5, 1000),
            (10, 1000),
            (50, 1698),
            (100, 2000),
            (500, 2698),
            (1000, 3000),
        ] {
            assert_eq!(
                suspicion_timeout(3, n, Duration::from_secs(1)) / 3,
                Duration::from_millis(ms),
                "n={n}"
            );
        }
    }

    /// memberlist suspicion_test.go TestSuspicion_remainingSuspicionTime (total =
    /// remaining + elapsed; negative remainders clamp at the minimum here).
    #[test]
    fn lifeguard_confirmations_shrink_the_timeout() {
        let (min, max) = (Duration::from_secs(2), Duration::from_secs(30));
        assert_eq!(suspicion_total(0, 3, min, max), Duration::from_secs(30));
        assert_eq!(suspicion_total(1, 3, min, max), Duration::from_secs(16));
        assert_eq!(suspicion_total(2, 3, min, max), Duration::from_millis(7810));
        assert_eq!(suspicion_total(3, 3, min, max), min);
        assert_eq!(suspicion_total(5, 3, min, max), min);
    }

    /// memberlist util_test.go TestPushPullScale.
    #[test]
    fn push_pull_interval_scales_with_cluster_size() {
        let s = Duration::from_secs(1);
        for n in 0..=32 {
            assert_eq!(push_pull_scale(s, n), s);
        }
        for n in 33..=64 {
            assert_eq!(push_pull_scale(s, n), 2 * s);
        }
        for n in 65..=128 {
            assert_eq!(push_pull_scale(s, n), 3 * s);
        }
    }

    fn node(name: &str, port: u16) -> Gossip {
        let cfg = GossipConfig::lan(name, "127.0.0.20".parse().unwrap(), port);
        Gossip::new(cfg, [1; 32], Duration::ZERO).unwrap()
    }

    #[test]
    fn a_suspected_node_refutes_with_a_higher_incarnation() {
        let mut g = node("me", 1);
        let (_, inc) = g.node_state("me").unwrap();
        let from = "127.0.0.21:2".parse().unwrap();
        let s = Message::Suspect(Suspect {
            incarnation: inc + 5,
            node: "me".into(),
            from: "other".into(),
        });
        g.handle_packet(Duration::from_millis(1), from, &s.encode());
        let (state, new_inc) = g.node_state("me").unwrap();
        assert_eq!(state, NodeStateKind::Alive);
        assert!(new_inc > inc + 5, "refuted with {new_inc}");
        assert_eq!(
            g.health_score(),
            1,
            "refuting raises the Lifeguard health score"
        );
    }

    #[test]
    fn pings_for_another_node_are_ignored_and_ours_are_acked_with_a_coordinate() {
        let mut g = node("me", 1);
        let from: SocketAddr = "127.0.0.21:2".parse().unwrap();
        let ping = |node: &str| {
            Message::Ping(Ping {
                seq_no: 7,
                node: node.into(),
                ..Default::default()
            })
            .encode()
        };
        g.handle_packet(Duration::from_millis(1), from, &ping("someone-else"));
        assert!(g
            .drain()
            .iter()
            .all(|o| !matches!(o, Output::Packet { .. })));
        g.handle_packet(Duration::from_millis(2), from, &ping("me"));
        let out = g.drain();
        let Some(Output::Packet { to, bytes }) =
            out.iter().find(|o| matches!(o, Output::Packet { .. }))
        else {
            panic!("no ack sent: {out:?}");
        };
        assert_eq!(*to, from);
        let opened = ml::open_packet(
            bytes,
            &Unseal {
                keys: &[],
                verify_incoming: true,
                label: "",
                skip_inbound_label_check: false,
            },
        )
        .unwrap();
        let ack = opened.messages.iter().find_map(|m| match m {
            Message::Ack(a) => Some(a.clone()),
            _ => None,
        });
        let ack = ack.expect("ack in packet");
        assert_eq!(ack.seq_no, 7);
        assert!(Coordinate::decode_ack_payload(&ack.payload.unwrap()).is_ok());
    }

    #[test]
    fn tags_over_the_meta_limit_are_refused() {
        let mut cfg = GossipConfig::lan("me", "127.0.0.20".parse().unwrap(), 1);
        cfg.tags.insert("big".into(), "x".repeat(600));
        assert!(Gossip::new(cfg, [0; 32], Duration::ZERO).is_err());
    }
}
