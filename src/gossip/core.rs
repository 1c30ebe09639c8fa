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

    /// Takes the effects produced so far.
    pub fn drain(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.out)
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
    }

    fn unseal(&self) -> Unseal<'_> {
        Unseal {
            keys: &self.keys,
            verify_incoming: self.config.gossip_verify_incoming,
            label: &self.config.label,
            skip_inbound_label_check: self.config.skip_inbound_label_check,
        }
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

    // -----------------------------------------------------------------------------------
    // Probing (memberlist probe / probeNode)

    fn probe_next(&mut self) {
        let mut checked = 0;
        loop {
            if checked >= self.nodes.len() {
                self.schedule(self.now + self.config.probe_interval, Timer::Probe);
                return;
            }
            if self.probe_index >= self.nodes.len() {
                self.reset_nodes();
                self.probe_index = 0;
                checked += 1;
                continue;
            }
            let node = &self.nodes[self.probe_index];
            let skip = node.name == self.config.node_name || node.dead_or_left();
            self.probe_index += 1;
            if skip {
                checked += 1;
                continue;
            }
            let name = node.name.clone();
            self.probe_node(&name);
            return;
        }
    }

    /// memberlist `resetNodes`: drop nodes dead longer than GossipToTheDeadTime and
    /// shuffle the probe order.
    fn reset_nodes(&mut self) {
        let now = self.now;
        let keep_for = self.config.gossip_to_the_dead_time;
        let local = self.config.node_name.clone();
        self.nodes.retain(|n| {
            !(n.dead_or_left() && now.saturating_sub(n.state_change) > keep_for && n.name != local)
        });
        for i in (1..self.nodes.len()).rev() {
            let j = self.rng.random_range(0..=i);
            self.nodes.swap(i, j);
        }
        self.reindex();
    }

    fn reindex(&mut self) {
        self.index.clear();
        for (i, n) in self.nodes.iter().enumerate() {
            self.index.insert(n.name.clone(), i);
        }
    }

    fn self_ping(&mut self, target: &str) -> Ping {
        Ping {
            seq_no: self.next_seq(),
            node: target.to_owned(),
            source_addr: ip_to_wire(self.config.advertise_addr),
            source_port: self.config.advertise_port,
            source_node: self.config.node_name.clone(),
        }
    }

    fn probe_node(&mut self, name: &str) {
        let Some(&i) = self.index.get(name) else {
            return;
        };
        let node = self.nodes[i].clone();
        let ping = self.self_ping(name);
        let seq = ping.seq_no;
        let interval = self.scale_timeout(self.config.probe_interval);
        self.stats.probes += 1;
        self.ack_handlers.insert(seq, AckHandler::Probe);
        self.probe = Some(Probe {
            seq,
            node: name.to_owned(),
            sent: self.now,
            acked: false,
            expected_nacks: 0,
            nacks: 0,
            tcp_stream: None,
            awareness_delta: -1,
        });
        let ping_bytes = Message::Ping(ping).encode();
        if node.state == NodeStateKind::Alive {
            self.send_msg(node.socket(), ping_bytes);
        } else {
            // Buddy system: tell a suspect node it is suspected so it can refute.
            let s = Message::Suspect(Suspect {
                incarnation: node.incarnation,
                node: node.name.clone(),
                from: self.config.node_name.clone(),
            })
            .encode();
            let compound = ml::make_compound(&[&ping_bytes, &s]);
            self.send_raw(node.socket(), node.vsn[1] >= 5, compound);
        }
        self.schedule(
            self.now + self.config.probe_timeout,
            Timer::ProbeTimeout(seq),
        );
        self.schedule(self.now + interval, Timer::ProbeDeadline(seq));
    }

    fn probe_timeout(&mut self, seq: u32) {
        let Some(probe) = self.probe.as_ref() else {
            return;
        };
        if probe.seq != seq || probe.acked {
            return;
        }
        let target = probe.node.clone();
        let Some(&ti) = self.index.get(&target) else {
            return;
        };
        let target_node = self.nodes[ti].clone();
        // Indirect probes through up to IndirectChecks other alive nodes.
        let local = self.config.node_name.clone();
        let peers = self.k_random_nodes(self.config.indirect_checks, |n| {
            n.name == local || n.name == target || n.state != NodeStateKind::Alive
        });
        let mut expected_nacks = 0;
        for peer in peers {
            let nack = self.nodes[peer].vsn[1] >= 4;
            if nack {
                expected_nacks += 1;
            }
            let ind = IndirectPingReq {
                seq_no: seq,
                target: ip_to_wire(target_node.addr),
                port: target_node.port,
                node: target_node.name.clone(),
                nack,
                source_addr: ip_to_wire(self.config.advertise_addr),
                source_port: self.config.advertise_port,
                source_node: local.clone(),
            };
            let to = self.nodes[peer].socket();
            self.send_msg(to, Message::IndirectPing(ind).encode());
        }
        // TCP fallback ping for peers that understand it.
        let mut tcp_stream = None;
        if !self.config.disable_tcp_pings && target_node.vsn[1] >= 3 {
            let ping = Ping {
                seq_no: seq,
                node: target.clone(),
                source_addr: ip_to_wire(self.config.advertise_addr),
                source_port: self.config.advertise_port,
                source_node: local.clone(),
            };
            let id = self.open_stream(
                target_node.socket(),
                Message::Ping(ping).encode(),
                StreamKind::TcpPing { seq },
            );
            tcp_stream = Some(id);
        }
        if let Some(p) = self.probe.as_mut() {
            p.expected_nacks = expected_nacks;
            p.tcp_stream = tcp_stream;
        }
    }

    fn probe_deadline(&mut self, seq: u32) {
        let Some(probe) = self.probe.take() else {
            return;
        };
        if probe.seq != seq {
            self.probe = Some(probe);
            return;
        }
        self.ack_handlers.remove(&seq);
        if let Some(id) = probe.tcp_stream {
            self.streams.remove(&id);
        }
        self.finish_probe(probe, false);
    }

    fn finish_probe(&mut self, probe: Probe, ok: bool) {
        if ok {
            self.apply_awareness(probe.awareness_delta);
        } else {
            self.stats.probe_failures += 1;
            let delta = if probe.expected_nacks > 0 {
                probe.expected_nacks.saturating_sub(probe.nacks) as i32
            } else {
                1
            };
            self.apply_awareness(delta);
            if let Some(&i) = self.index.get(&probe.node) {
                let s = Suspect {
                    incarnation: self.nodes[i].incarnation,
                    node: probe.node.clone(),
                    from: self.config.node_name.clone(),
                };
                self.suspect_node(s);
            }
        }
        // The next probe starts one interval after this one started (memberlist's
        // ticker), or right away if the probe ran longer than that.
        let next = (probe.sent + self.config.probe_interval).max(self.now);
        self.schedule(next, Timer::Probe);
    }

    fn probe_acked(&mut self, payload: Option<Vec<u8>>) {
        let Some(probe) = self.probe.take() else {
            return;
        };
        let rtt = self.now.saturating_sub(probe.sent);
        if let Some(id) = probe.tcp_stream {
            self.streams.remove(&id);
        }
        if let Some(payload) = payload {
            self.coordinate_sample(&probe.node, &payload, rtt);
        }
        self.finish_probe(probe, true);
    }

    /// serf `pingDelegate.NotifyPingComplete`.
    fn coordinate_sample(&mut self, node: &str, payload: &[u8], rtt: Duration) {
        if self.config.disable_coordinates || payload.is_empty() {
            return;
        }
        let Ok(coord) = Coordinate::decode_ack_payload(payload) else {
            self.stats.decode_errors += 1;
            return;
        };
        if self
            .vivaldi
            .update(node, &coord, rtt, &mut self.rng)
            .is_ok()
        {
            self.coordinates.insert(node.to_owned(), coord);
            let own = self.vivaldi.coordinate().clone();
            self.coordinates.insert(self.config.node_name.clone(), own);
        }
    }

    fn relay_expire(&mut self, seq: u32) {
        if let Some(AckHandler::Relay {
            orig_seq,
            reply_to,
            nack,
            acked,
        }) = self.ack_handlers.remove(&seq)
        {
            if nack && !acked {
                self.send_msg(
                    reply_to,
                    Message::Nack(NackResp { seq_no: orig_seq }).encode(),
                );
            }
        }
    }

    /// Sends `messages` as one packet straight to every member we can reach (up to
    /// [`ANNOUNCE_FANOUT_MEMBERS_MAX`], a random sample beyond), besides gossiping them.
    /// Used for our own leave and (re)join only. Gossip reaches each member with high
    /// probability but not certainty (a broadcast is sent `retransmit_mult * log10(n)`
    /// times by each member that relays it, so a given member misses it with probability
    /// about e^-8 at Consul's settings): over many leaves and restarts some view
    /// went on showing a member that left as leaving, or a restarted member as left,
    /// until the next push/pull up to a minute later. One packet per member per leave or
    /// join makes that wait a lost packet's, and peers see nothing but ordinary messages.
    fn announce(&mut self, messages: &[Vec<u8>]) {
        let local = &self.config.node_name;
        let mut targets: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].name != *local && !self.nodes[i].dead_or_left())
            .collect();
        if targets.len() > ANNOUNCE_FANOUT_MEMBERS_MAX {
            for k in 0..ANNOUNCE_FANOUT_MEMBERS_MAX {
                let j = self.rng.random_range(k..targets.len());
                targets.swap(k, j);
            }
            targets.truncate(ANNOUNCE_FANOUT_MEMBERS_MAX);
        }
        let parts: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
        let packet = ml::make_compound(&parts);
        for i in targets {
            let (to, crc) = (self.nodes[i].socket(), self.nodes[i].vsn[1] >= 5);
            self.send_raw(to, crc, packet.clone());
        }
    }

    /// memberlist `kRandomNodes`: up to `k` distinct random nodes not excluded.
    fn k_random_nodes(&mut self, k: usize, exclude: impl Fn(&Node) -> bool) -> Vec<usize> {
        let n = self.nodes.len();
        let mut picked: Vec<usize> = Vec::with_capacity(k);
        let mut tries = 0;
        while tries < 3 * n && picked.len() < k {
            tries += 1;
            let i = self.random_index(n);
            if exclude(&self.nodes[i]) || picked.contains(&i) {
                continue;
            }
            picked.push(i);
        }
        picked
    }

    // -----------------------------------------------------------------------------------
    // Gossip and push/pull

    fn gossip(&mut self) {
        let local = self.config.node_name.clone();
        let now = self.now;
        let dead_time = self.config.gossip_to_the_dead_time;
        let targets = self.k_random_nodes(self.config.gossip_nodes, |n| {
            if n.name == local {
                return true;
            }
            match n.state {
                NodeStateKind::Alive | NodeStateKind::Suspect => false,
                NodeStateKind::Dead => now.saturating_sub(n.state_change) > dead_time,
                NodeStateKind::Left => true,
            }
        });
        let mut avail = self
            .config
            .udp_buffer_size
            .saturating_sub(COMPOUND_HEADER_OVERHEAD + self.label_overhead());
        if self.encryption_enabled() {
            avail = avail.saturating_sub(security::encrypt_overhead(1));
        }
        for t in targets {
            let msgs = self.get_broadcasts(COMPOUND_PART_OVERHEAD, avail);
            if msgs.is_empty() {
                return;
            }
            let (to, crc) = (self.nodes[t].socket(), self.nodes[t].vsn[1] >= 5);
            if msgs.len() == 1 {
                let m = msgs.into_iter().next().unwrap_or_default();
                self.send_raw(to, crc, m);
            } else {
                let parts: Vec<&[u8]> = msgs.iter().map(|m| m.as_slice()).collect();
                let c = ml::make_compound(&parts);
                self.send_raw(to, crc, c);
            }
        }
    }

    fn periodic_push_pull(&mut self) {
        let local = self.config.node_name.clone();
        let picked = self.k_random_nodes(1, |n| n.name == local || n.state != NodeStateKind::Alive);
        if let Some(&i) = picked.first() {
            let to = self.nodes[i].socket();
            self.push_pull(to, None);
        }
    }

    fn open_stream(&mut self, to: SocketAddr, payload: Vec<u8>, kind: StreamKind) -> u64 {
        self.next_stream += 1;
        let id = self.next_stream;
        let bytes = self.seal_stream(payload, true);
        self.stats.streams_opened += 1;
        self.stats.stream_bytes_sent += bytes.len() as u64;
        self.streams.insert(id, kind);
        self.out.push(Output::Stream { id, to, bytes });
        id
    }

    fn seal_stream(&mut self, payload: Vec<u8>, dialing: bool) -> Vec<u8> {
        let nonce = self.nonce();
        let key = if self.encryption_enabled() && self.config.gossip_verify_outgoing {
            self.keys.first().cloned()
        } else {
            None
        };
        let seal = StreamSeal {
            compress: self.config.enable_compression,
            key: key.as_deref(),
            encryption_version: 1,
            label: &self.config.label,
            write_label_header: dialing,
        };
        ml::seal_stream(payload, &seal, nonce)
    }

    fn push_pull(&mut self, to: SocketAddr, join_request: Option<u64>) {
        let state = self.local_state(join_request.is_some());
        self.open_stream(to, state, StreamKind::PushPull { join_request });
    }

    /// memberlist `sendLocalState` payload with serf's user state.
    fn local_state(&mut self, join: bool) -> Vec<u8> {
        let nodes: Vec<PushNodeState> = self
            .nodes
            .iter()
            .map(|n| PushNodeState {
                name: n.name.clone(),
                addr: ip_to_wire(n.addr),
                port: n.port,
                meta: n.meta.clone(),
                incarnation: n.incarnation,
                state: n.state,
                vsn: n.vsn.to_vec(),
            })
            .collect();
        let user = self.serf_local_state();
        ml::encode_push_pull(join, &nodes, &user)
    }

    /// The number of bytes of stream framing a driver should read for a reply: see
    /// [`ml::stream_frame_len`]. Exposed so drivers need not know the format.
    pub fn stream_frame_len(buf: &[u8], accepting: bool) -> Result<Option<usize>, WireError> {
        ml::stream_frame_len(buf, accepting)
    }

    /// A stream another node opened to us delivered one message; returns the bytes to
    /// write back (if any). memberlist `handleConn`.
    pub fn handle_stream(
        &mut self,
        now: Duration,
        from: SocketAddr,
        bytes: &[u8],
    ) -> Option<Vec<u8>> {
        self.now = self.now.max(now);
        if self.silent() {
            return None;
        }
        let msg = match ml::open_stream(bytes, &self.unseal(), true) {
            Ok(m) => m,
            Err(e) => {
                self.stats.decode_errors += 1;
                let err = ml::encode_err(&e.to_string());
                return Some(self.seal_stream(err, false));
            }
        };
        let _ = from;
        match msg {
            StreamMessage::PushPull {
                join,
                nodes,
                user_state,
            } => {
                let reply = self.local_state(join);
                let sealed = self.seal_stream(reply, false);
                self.merge_remote_state(join, false, nodes, &user_state);
                Some(sealed)
            }
            StreamMessage::Ping(p) => {
                if !p.node.is_empty() && p.node != self.config.node_name {
                    return None;
                }
                let ack = Message::Ack(AckResp {
                    seq_no: p.seq_no,
                    payload: None,
                })
                .encode();
                Some(self.seal_stream(ack, false))
            }
            StreamMessage::User(payload) => {
                self.serf_notify_msg(&payload);
                None
            }
            StreamMessage::Ack(_) | StreamMessage::Err(_) => None,
        }
    }

    /// The reply (or failure) of a stream we opened with [`Output::Stream`].
    pub fn handle_stream_reply(&mut self, now: Duration, id: u64, reply: Result<&[u8], String>) {
        self.now = self.now.max(now);
        let Some(kind) = self.streams.remove(&id) else {
            return;
        };
        match kind {
            StreamKind::PushPull { join_request } => {
                let result = reply.and_then(|b| {
                    ml::open_stream(b, &self.unseal(), false).map_err(|e| e.to_string())
                });
                let ok = match result {
                    Ok(StreamMessage::PushPull {
                        nodes, user_state, ..
                    }) => {
                        let ignore_old = join_request
                            .and_then(|r| self.joins.get(&r))
                            .is_some_and(|j| j.ignore_old);
                        self.merge_remote_state(
                            join_request.is_some(),
                            ignore_old,
                            nodes,
                            &user_state,
                        );
                        Ok(())
                    }
                    Ok(StreamMessage::Err(e)) => Err(format!("remote error: {}", e.error)),
                    Ok(_) => Err("received invalid message type, expected push/pull".to_owned()),
                    Err(e) => Err(e),
                };
                if let Some(req) = join_request {
                    self.join_progress(req, ok);
                }
            }
            StreamKind::TcpPing { seq } => {
                let acked = matches!(
                    reply.map(|b| ml::open_stream(b, &self.unseal(), false)),
                    Ok(Ok(StreamMessage::Ack(AckResp { seq_no, .. }))) if seq_no == seq
                );
                if acked && self.probe.as_ref().is_some_and(|p| p.seq == seq) {
                    self.ack_handlers.remove(&seq);
                    self.probe_acked(None);
                }
            }
        }
    }

    fn merge_remote_state(
        &mut self,
        join: bool,
        ignore_old: bool,
        nodes: Vec<PushNodeState>,
        user_state: &[u8],
    ) {
        for r in nodes {
            let Ok(addr) = ip_from_wire(&r.addr) else {
                self.stats.decode_errors += 1;
                continue;
            };
            match r.state {
                NodeStateKind::Alive => {
                    let a = Alive {
                        incarnation: r.incarnation,
                        node: r.name,
                        addr: ip_to_wire(addr),
                        port: r.port,
                        meta: r.meta,
                        vsn: r.vsn,
                    };
                    self.alive_node(a, None, false);
                }
                NodeStateKind::Left if !self.index.contains_key(&r.name) => {
                    // memberlist ignores news of the death of a node it has never heard
                    // of. We record it: a member that joins while another leaves would
                    // otherwise take an older alive message for the leaver, still being
                    // relayed, as news of a new node, and then refuse the leaver's real
                    // return from another address as a name conflict (for
                    // `dead_node_reclaim_time`, or for good where that is zero).
                    let mut vsn = [0u8; 6];
                    if r.vsn.len() >= 6 {
                        vsn.copy_from_slice(&r.vsn[..6]);
                    }
                    self.insert_node(Node {
                        name: r.name,
                        addr,
                        port: r.port,
                        meta: r.meta,
                        incarnation: r.incarnation,
                        state: NodeStateKind::Left,
                        state_change: self.now,
                        vsn,
                    });
                }
                NodeStateKind::Left => {
                    let d = Suspect {
                        incarnation: r.incarnation,
                        node: r.name.clone(),
                        from: r.name,
                    };
                    self.dead_node(d);
                }
                NodeStateKind::Dead | NodeStateKind::Suspect => {
                    let s = Suspect {
                        incarnation: r.incarnation,
                        node: r.name,
                        from: self.config.node_name.clone(),
                    };
                    self.suspect_node(s);
                }
            }
        }
        if !user_state.is_empty() {
            self.serf_merge_remote_state(user_state, join, ignore_old);
        }
    }

    // -----------------------------------------------------------------------------------
    // Packets

    /// One UDP datagram arrived from `from` at `now`.
    pub fn handle_packet(&mut self, now: Duration, from: SocketAddr, bytes: &[u8]) {
        self.now = self.now.max(now);
        self.stats.packets_received += 1;
        self.stats.packet_bytes_received += bytes.len() as u64;
        if self.silent() {
            return;
        }
        let contents = match ml::open_packet(bytes, &self.unseal()) {
            Ok(c) => c,
            Err(_) => {
                self.stats.decode_errors += 1;
                return;
            }
        };
        self.stats.decode_errors += contents.errors.len() as u64;
        // memberlist handles alive messages at high priority; order otherwise kept.
        for m in contents.messages {
            self.handle_message(from, m);
        }
    }

    fn handle_message(&mut self, from: SocketAddr, m: Message) {
        match m {
            Message::Ping(p) => self.handle_ping(from, p),
            Message::IndirectPing(ind) => self.handle_indirect_ping(from, ind),
            Message::Ack(a) => self.handle_ack(a),
            Message::Nack(n) => {
                if let Some(p) = self.probe.as_mut() {
                    if p.seq == n.seq_no {
                        p.nacks += 1;
                    }
                }
            }
            Message::Suspect(s) => self.suspect_node(s),
            Message::Alive(mut a) => {
                if a.port == 0 {
                    a.port = self.config.advertise_port;
                }
                self.alive_node(a, None, false);
            }
            Message::Dead(d) => self.dead_node(d),
            Message::User(payload) => self.serf_notify_msg(&payload),
        }
    }

    fn reply_addr(from: SocketAddr, addr: &[u8], port: u16) -> SocketAddr {
        if !addr.is_empty() && port > 0 {
            if let Ok(ip) = ip_from_wire(addr) {
                return SocketAddr::new(ip, port);
            }
        }
        from
    }

    fn handle_ping(&mut self, from: SocketAddr, p: Ping) {
        if !p.node.is_empty() && p.node != self.config.node_name {
            return;
        }
        let payload = if self.config.disable_coordinates {
            None
        } else {
            Some(self.vivaldi.coordinate().encode_ack_payload())
        };
        let to = Self::reply_addr(from, &p.source_addr, p.source_port);
        self.send_msg(
            to,
            Message::Ack(AckResp {
                seq_no: p.seq_no,
                payload,
            })
            .encode(),
        );
    }

    fn handle_indirect_ping(&mut self, from: SocketAddr, ind: IndirectPingReq) {
        let port = if ind.port == 0 {
            self.config.advertise_port
        } else {
            ind.port
        };
        let Ok(target_ip) = ip_from_wire(&ind.target) else {
            self.stats.decode_errors += 1;
            return;
        };
        let ping = self.self_ping(&ind.node);
        let local_seq = ping.seq_no;
        let reply_to = Self::reply_addr(from, &ind.source_addr, ind.source_port);
        self.ack_handlers.insert(
            local_seq,
            AckHandler::Relay {
                orig_seq: ind.seq_no,
                reply_to,
                nack: ind.nack,
                acked: false,
            },
        );
        self.schedule(
            self.now + self.config.probe_timeout,
            Timer::RelayExpire(local_seq),
        );
        self.send_msg(
            SocketAddr::new(target_ip, port),
            Message::Ping(ping).encode(),
        );
    }

    fn handle_ack(&mut self, a: AckResp) {
        match self.ack_handlers.get_mut(&a.seq_no) {
            Some(AckHandler::Probe) => {
                self.ack_handlers.remove(&a.seq_no);
                if self.probe.as_ref().is_some_and(|p| p.seq == a.seq_no) {
                    self.probe_acked(a.payload);
                }
            }
            Some(AckHandler::Relay {
                orig_seq,
                reply_to,
                acked,
                ..
            }) if !*acked => {
                *acked = true;
                let (orig, to) = (*orig_seq, *reply_to);
                self.send_msg(
                    to,
                    Message::Ack(AckResp {
                        seq_no: orig,
                        payload: None,
                    })
                    .encode(),
                );
            }
            Some(AckHandler::Relay { .. }) | None => {}
        }
    }

    // -----------------------------------------------------------------------------------
    // Node state changes (memberlist aliveNode / suspectNode / deadNode / refute)

    fn refute(&mut self, i: usize, accused: u32) {
        let mut inc = self.next_incarnation();
        if accused >= inc {
            self.incarnation = accused.wrapping_add(1);
            inc = self.incarnation;
        }
        self.nodes[i].incarnation = inc;
        self.apply_awareness(1);
        let me = &self.nodes[i];
        let a = Alive {
            incarnation: inc,
            node: me.name.clone(),
            addr: ip_to_wire(me.addr),
            port: me.port,
            meta: me.meta.clone(),
            vsn: me.vsn.to_vec(),
        };
        let name = me.name.clone();
        self.ml_broadcast(&name, &Message::Alive(a), None);
    }

    /// Adds a node we had never heard of to the table; returns its slot.
    fn insert_node(&mut self, node: Node) -> usize {
        debug_assert!(!self.index.contains_key(&node.name));
        // Insert at a random position so probe order stays random.
        let n = self.nodes.len();
        let offset = self.random_index(n + 1);
        let name = node.name.clone();
        self.nodes.push(node);
        self.nodes.swap(offset, n);
        if offset != n {
            let moved = self.nodes[n].name.clone();
            self.index.insert(moved, n);
        }
        self.index.insert(name, offset);
        offset
    }

    fn alive_node(&mut self, a: Alive, notify: Option<u64>, bootstrap: bool) {
        let is_local = a.node == self.config.node_name;
        if self.left && is_local {
            return;
        }
        if a.vsn.len() >= 3 && (a.vsn[0] == 0 || a.vsn[1] == 0 || a.vsn[0] > a.vsn[1]) {
            return;
        }
        let Ok(addr) = ip_from_wire(&a.addr) else {
            self.stats.decode_errors += 1;
            return;
        };
        let mut vsn = [0u8; 6];
        if a.vsn.len() >= 6 {
            vsn.copy_from_slice(&a.vsn[..6]);
        }
        let mut updates_node = false;
        let i = match self.index.get(&a.node) {
            Some(&i) => {
                let n = &self.nodes[i];
                if n.addr != addr || n.port != a.port {
                    let reclaim = self.config.dead_node_reclaim_time > Duration::ZERO
                        && self.now.saturating_sub(n.state_change)
                            > self.config.dead_node_reclaim_time;
                    if n.state == NodeStateKind::Left || (n.state == NodeStateKind::Dead && reclaim)
                    {
                        updates_node = true;
                    } else {
                        // Name conflict: another node claims this name. memberlist only logs.
                        return;
                    }
                }
                i
            }
            None => {
                let node = Node {
                    name: a.node.clone(),
                    addr,
                    port: a.port,
                    meta: a.meta.clone(),
                    incarnation: 0,
                    state: NodeStateKind::Dead,
                    state_change: self.now,
                    vsn,
                };
                self.insert_node(node)
            }
        };
        let state = &self.nodes[i];
        if a.incarnation <= state.incarnation && !is_local && !updates_node {
            return;
        }
        if a.incarnation < state.incarnation && is_local {
            return;
        }
        self.suspicions.remove(&a.node);
        let old_state = state.state;
        let old_meta = state.meta.clone();
        if !bootstrap && is_local {
            let same = a.incarnation == state.incarnation
                && a.meta == state.meta
                && a.vsn[..] == state.vsn[..];
            if same {
                return;
            }
            self.refute(i, a.incarnation);
        } else {
            self.ml_broadcast(&a.node, &Message::Alive(a.clone()), notify);
            let now = self.now;
            let n = &mut self.nodes[i];
            if a.vsn.len() >= 6 {
                n.vsn = vsn;
            }
            n.incarnation = a.incarnation;
            n.meta = a.meta;
            n.addr = addr;
            n.port = a.port;
            if n.state != NodeStateKind::Alive {
                n.state = NodeStateKind::Alive;
                n.state_change = now;
            }
        }
        if matches!(old_state, NodeStateKind::Dead | NodeStateKind::Left) {
            self.serf_node_join(i);
        } else if old_meta != self.nodes[i].meta {
            self.serf_node_update(i);
        }
    }

    fn suspect_node(&mut self, s: Suspect) {
        let Some(&i) = self.index.get(&s.node) else {
            return;
        };
        if s.incarnation < self.nodes[i].incarnation {
            return;
        }
        if let Some(susp) = self.suspicions.get_mut(&s.node) {
            // Lifeguard: an independent confirmation shortens the timeout.
            if susp.n < susp.k && !susp.confirmations.contains(&s.from) {
                susp.confirmations.insert(s.from.clone());
                susp.n += 1;
                let total = suspicion_total(susp.n, susp.k, susp.min, susp.max);
                let deadline = susp.start + total;
                self.suspicion_generation += 1;
                susp.generation = self.suspicion_generation;
                let generation = susp.generation;
                self.schedule(
                    deadline.max(self.now),
                    Timer::Suspicion(s.node.clone(), generation),
                );
                let node = s.node.clone();
                self.ml_broadcast(&node, &Message::Suspect(s), None);
            }
            return;
        }
        if self.nodes[i].state != NodeStateKind::Alive {
            return;
        }
        if s.node == self.config.node_name {
            self.refute(i, s.incarnation);
            return;
        }
        let node = s.node.clone();
        self.ml_broadcast(&node, &Message::Suspect(s.clone()), None);
        let now = self.now;
        let n = &mut self.nodes[i];
        n.incarnation = s.incarnation;
        n.state = NodeStateKind::Suspect;
        n.state_change = now;
        let mut k = self.config.suspicion_mult.saturating_sub(2);
        let count = self.nodes.len();
        if (count as i64 - 2) < k as i64 {
            k = 0;
        }
        let min = suspicion_timeout(
            self.config.suspicion_mult,
            count,
            self.config.probe_interval,
        );
        let max = min * self.config.suspicion_max_timeout_mult;
        let timeout = if k < 1 { min } else { max };
        self.suspicion_generation += 1;
        let generation = self.suspicion_generation;
        let mut confirmations = HashSet::new();
        confirmations.insert(s.from);
        self.suspicions.insert(
            node.clone(),
            Suspicion {
                k,
                n: 0,
                min,
                max,
                start: now,
                confirmations,
                generation,
                state_change: now,
            },
        );
        self.schedule(now + timeout, Timer::Suspicion(node, generation));
    }

    fn suspicion_fired(&mut self, node: &str, generation: u64) {
        let Some(s) = self.suspicions.get(node) else {
            return;
        };
        if s.generation != generation {
            return;
        }
        let Some(&i) = self.index.get(node) else {
            return;
        };
        let n = &self.nodes[i];
        if n.state != NodeStateKind::Suspect || n.state_change != s.state_change {
            return;
        }
        let d = Suspect {
            incarnation: n.incarnation,
            node: n.name.clone(),
            from: self.config.node_name.clone(),
        };
        self.dead_node(d);
    }

    fn dead_node(&mut self, d: Suspect) {
        let Some(&i) = self.index.get(&d.node) else {
            return;
        };
        if d.incarnation < self.nodes[i].incarnation {
            return;
        }
        self.suspicions.remove(&d.node);
        if self.nodes[i].dead_or_left() {
            return;
        }
        if d.node == self.config.node_name {
            if !self.left {
                self.refute(i, d.incarnation);
                return;
            }
            let notify = self.new_notify();
            let node = d.node.clone();
            self.ml_broadcast(&node, &Message::Dead(d.clone()), Some(notify));
            if let LeavePhase::Dead { request, step, .. } = self.leave_phase {
                self.leave_phase = LeavePhase::Dead {
                    request,
                    notify,
                    step,
                };
            }
        } else {
            let node = d.node.clone();
            self.ml_broadcast(&node, &Message::Dead(d.clone()), None);
        }
        let now = self.now;
        let n = &mut self.nodes[i];
        n.incarnation = d.incarnation;
        n.state = if d.node == d.from {
            NodeStateKind::Left
        } else {
            NodeStateKind::Dead
        };
        n.state_change = now;
        self.serf_node_leave(i);
    }

    // -----------------------------------------------------------------------------------
    // Join / leave / user requests

    /// memberlist `Join` + serf `Join`: push/pull with every address; reports
    /// [`Output::JoinDone`] under `request`.
    ///
    /// `ignore_old` is serf's `ignoreOld` (Consul always joins with it, `serf join`
    /// unless `-replay`): user events the pool fired before we joined are not replayed.
    pub fn join(&mut self, now: Duration, request: u64, addrs: &[SocketAddr], ignore_old: bool) {
        self.now = self.now.max(now);
        if self.serf_state != SerfState::Alive || self.left {
            self.out.push(Output::JoinDone {
                request,
                joined: 0,
                errors: vec!["serf can't join after leave or shutdown".to_owned()],
            });
            return;
        }
        if addrs.is_empty() {
            self.out.push(Output::JoinDone {
                request,
                joined: 0,
                errors: Vec::new(),
            });
            return;
        }
        self.joins.insert(
            request,
            JoinState {
                pending: addrs.len(),
                ignore_old,
                ..Default::default()
            },
        );
        for &a in addrs {
            self.push_pull(a, Some(request));
        }
    }

    fn join_progress(&mut self, request: u64, result: Result<(), String>) {
        let Some(j) = self.joins.get_mut(&request) else {
            return;
        };
        j.pending -= 1;
        match result {
            Ok(()) => j.joined += 1,
            Err(e) => j.errors.push(e),
        }
        if j.pending > 0 {
            return;
        }
        let Some(j) = self.joins.remove(&request) else {
            return;
        };
        if j.joined > 0 {
            let ltime = self.clock;
            self.broadcast_join(ltime);
            if let Some(&i) = self.index.get(&self.config.node_name) {
                let me = &self.nodes[i];
                let alive = Message::Alive(Alive {
                    incarnation: me.incarnation,
                    node: me.name.clone(),
                    addr: ip_to_wire(me.addr),
                    port: me.port,
                    meta: me.meta.clone(),
                    vsn: me.vsn.to_vec(),
                });
                let intent = SerfMessage::Join(JoinIntent {
                    ltime,
                    node: self.config.node_name.clone(),
                });
                self.announce(&[alive.encode(), user_message(&intent.encode())]);
            }
        }
        let errors = if j.joined > 0 { Vec::new() } else { j.errors };
        self.out.push(Output::JoinDone {
            request,
            joined: j.joined,
            errors,
        });
    }

    /// serf `Leave` then memberlist `Leave`: reports [`Output::LeaveDone`].
    ///
    /// serf broadcasts its leave intent and waits until the intent has been sent enough
    /// times (or `broadcast_timeout`) before memberlist announces our death as "left",
    /// so that members see us leaving before they see us gone. Here the intent also goes
    /// straight to every member ([`Gossip::announce`]) in the same packet as the "left"
    /// message and ahead of it, which gives that order without the wait; the wait made
    /// a member that had just (re)joined take the whole broadcast timeout to leave, its
    /// queue holding an alive message for every member, all sent before any serf
    /// message.
    pub fn leave(&mut self, now: Duration, request: u64) {
        self.now = self.now.max(now);
        if self.serf_state != SerfState::Alive || self.left {
            self.out.push(Output::LeaveDone { request });
            return;
        }
        self.serf_state = SerfState::Leaving;
        let msg = LeaveIntent {
            ltime: self.clock,
            node: self.config.node_name.clone(),
            prune: false,
        };
        self.clock += 1;
        self.handle_leave_intent(&msg);
        let intent = SerfMessage::Leave(msg).encode();
        if self.has_alive_members() {
            self.serf_broadcast(SerfQueue::Intents, intent.clone(), None);
        }
        // memberlist Leave: broadcast our own death as "left".
        self.left = true;
        self.leave_step += 1;
        let step = self.leave_step;
        self.leave_phase = LeavePhase::Dead {
            request,
            notify: 0,
            step,
        };
        if let Some(&i) = self.index.get(&self.config.node_name) {
            let d = Suspect {
                incarnation: self.nodes[i].incarnation,
                node: self.config.node_name.clone(),
                from: self.config.node_name.clone(),
            };
            let dead = Message::Dead(d.clone()).encode();
            self.dead_node(d);
            self.announce(&[user_message(&intent), dead]);
        }
        let anyone = self
            .nodes
            .iter()
            .any(|n| n.name != self.config.node_name && n.state == NodeStateKind::Alive);
        let wait = if anyone {
            self.config.broadcast_timeout
        } else {
            Duration::ZERO
        };
        self.schedule(self.now + wait, Timer::Leave(step));
    }

    fn leave_advance(&mut self, step: u64) {
        match self.leave_phase {
            LeavePhase::Dead {
                request, step: s, ..
            } if s == step => {
                self.leave_step += 1;
                let step = self.leave_step;
                self.leave_phase = LeavePhase::Propagate { request, step };
                self.schedule(
                    self.now + self.config.leave_propagate_delay,
                    Timer::Leave(step),
                );
            }
            LeavePhase::Propagate { request, step: s } if s == step => {
                self.serf_state = SerfState::Left;
                self.leave_phase = LeavePhase::Done;
                self.out.push(Output::LeaveDone { request });
            }
            _ => {}
        }
    }

    /// serf `RemoveFailedNode` / `RemoveFailedNodePrune` (Consul force-leave).
    pub fn force_leave(&mut self, now: Duration, node: &str, prune: bool) {
        self.now = self.now.max(now);
        // serf stamps this with the current clock; peers that merged a push/pull hold
        // the target's status at (its leave time + 1), which can equal our clock and
        // make them drop the force-leave. Stamping one tick later avoids that.
        self.clock += 1;
        let msg = LeaveIntent {
            ltime: self.clock,
            node: node.to_owned(),
            prune,
        };
        self.clock += 1;
        self.handle_leave_intent(&msg);
        if self.has_alive_members() {
            self.serf_broadcast(SerfQueue::Intents, SerfMessage::Leave(msg).encode(), None);
        }
    }

    /// serf `UserEvent`.
    pub fn user_event(
        &mut self,
        now: Duration,
        name: &str,
        payload: &[u8],
        coalesce: bool,
    ) -> Result<(), String> {
        self.now = self.now.max(now);
        let size = name.len() + payload.len();
        if size > self.config.user_event_size_limit {
            return Err(format!(
                "user event exceeds configured limit of {} bytes before encoding",
                self.config.user_event_size_limit
            ));
        }
        if size > sm::USER_EVENT_BYTES_MAX {
            return Err(format!(
                "user event exceeds sane limit of {} bytes before encoding",
                sm::USER_EVENT_BYTES_MAX
            ));
        }
        let msg = UserEventMsg {
            ltime: self.event_clock,
            name: name.to_owned(),
            payload: payload.to_vec(),
            cc: coalesce,
        };
        let raw = SerfMessage::UserEvent(msg.clone()).encode();
        if raw.len() > self.config.user_event_size_limit {
            return Err(format!(
                "encoded user event exceeds configured limit of {} bytes after encoding",
                self.config.user_event_size_limit
            ));
        }
        self.event_clock += 1;
        self.handle_user_event(&msg);
        self.serf_broadcast(SerfQueue::Events, raw, None);
        Ok(())
    }

    /// serf `SetTags`: new metadata, announced with a fresh incarnation.
    pub fn set_tags(
        &mut self,
        now: Duration,
        tags: BTreeMap<String, String>,
    ) -> Result<(), String> {
        self.now = self.now.max(now);
        let meta = sm::encode_tags(&tags);
        if meta.len() > META_BYTES_MAX {
            return Err(format!(
                "encoded length of tags exceeds limit of {META_BYTES_MAX} bytes"
            ));
        }
        self.config.tags = tags;
        self.meta = meta.clone();
        let inc = self.next_incarnation();
        let a = Alive {
            incarnation: inc,
            node: self.config.node_name.clone(),
            addr: ip_to_wire(self.config.advertise_addr),
            port: self.config.advertise_port,
            meta: Some(meta),
            vsn: self.config.vsn().to_vec(),
        };
        self.alive_node(a, None, true);
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // Keyring

    /// memberlist `Keyring.AddKey`.
    pub fn install_key(&mut self, key: &[u8]) -> Result<(), String> {
        security::validate_key(key).map_err(|e| e.to_string())?;
        if !self.keys.iter().any(|k| k == key) {
            self.keys.push(key.to_vec());
        }
        Ok(())
    }

    /// memberlist `Keyring.UseKey`.
    pub fn use_key(&mut self, key: &[u8]) -> Result<(), String> {
        let Some(pos) = self.keys.iter().position(|k| k == key) else {
            return Err("Requested key is not in the keyring".to_owned());
        };
        let k = self.keys.remove(pos);
        self.keys.insert(0, k);
        Ok(())
    }

    /// memberlist `Keyring.RemoveKey`.
    pub fn remove_key(&mut self, key: &[u8]) -> Result<(), String> {
        if self.keys.first().is_some_and(|k| k == key) {
            return Err("Removing the primary key is not allowed".to_owned());
        }
        self.keys.retain(|k| k != key);
        Ok(())
    }

    /// serf `KeyManager` operations: a query to every member, aggregated into
    /// [`Output::KeyOpDone`].
    pub fn key_op(&mut self, now: Duration, request: u64, op: KeyOp) {
        self.now = self.now.max(now);
        let key = match &op {
            KeyOp::Install(k) | KeyOp::Use(k) | KeyOp::Remove(k) => k.clone(),
            KeyOp::List => Vec::new(),
        };
        let payload = KeyRequest { key }.encode();
        self.start_query(op.query_name(), payload, request, true);
    }

    // -----------------------------------------------------------------------------------
    // serf layer

    fn has_alive_members(&self) -> bool {
        self.members
            .values()
            .any(|m| m.info.name != self.config.node_name && m.info.status == MemberStatus::Alive)
    }

    fn member_info_from(&self, i: usize, status: MemberStatus) -> MemberInfo {
        let n = &self.nodes[i];
        let tags = sm::decode_tags(n.meta.as_deref().unwrap_or(&[])).unwrap_or_default();
        MemberInfo {
            name: n.name.clone(),
            addr: n.addr,
            port: n.port,
            tags,
            status,
            protocol_min: n.vsn[0],
            protocol_max: n.vsn[1],
            protocol_cur: n.vsn[2],
            delegate_min: n.vsn[3],
            delegate_max: n.vsn[4],
            delegate_cur: n.vsn[5],
        }
    }

    fn emit(&mut self, e: GossipEvent) {
        self.members_version += 1;
        self.out.push(Output::Event(e));
    }

    /// serf `handleNodeJoin`.
    fn serf_node_join(&mut self, i: usize) {
        let name = self.nodes[i].name.clone();
        let mut info = self.member_info_from(i, MemberStatus::Alive);
        match self.members.get_mut(&name) {
            None => {
                let mut status_ltime = 0;
                if let Some(intent) = self.intents.get(&name) {
                    status_ltime = intent.ltime;
                    if !intent.join {
                        info.status = MemberStatus::Leaving;
                    }
                }
                self.members.insert(
                    name.clone(),
                    SerfMember {
                        info: info.clone(),
                        status_ltime,
                        leave_time: Duration::ZERO,
                        rejoining: false,
                    },
                );
            }
            Some(m) => {
                let old = m.info.status;
                let keep_ltime = m.status_ltime;
                m.info = info.clone();
                m.status_ltime = keep_ltime;
                m.leave_time = Duration::ZERO;
                m.rejoining = false;
                if matches!(old, MemberStatus::Failed | MemberStatus::Left) {
                    self.failed_members.retain(|n| n != &name);
                    self.left_members.retain(|n| n != &name);
                }
            }
        }
        self.emit(GossipEvent::MemberJoin(info));
    }

    /// serf `handleNodeLeave`, with one rule serf lacks: a member memberlist saw announce
    /// its own departure (a dead message from the node itself, state `Left`) has left,
    /// whether or not its serf leave intent got here first. serf decides from the intent
    /// alone, so a member that missed the intent (gossip reaches each member with high
    /// probability, not certainty), or dropped it because a push/pull had already carried
    /// the leaver's status time as a join, showed a graceful leave as `failed`.
    fn serf_node_leave(&mut self, i: usize) {
        let name = self.nodes[i].name.clone();
        let announced_leave = self.nodes[i].state == NodeStateKind::Left;
        let now = self.now;
        let Some(m) = self.members.get_mut(&name) else {
            return;
        };
        m.rejoining = false;
        let event = match m.info.status {
            MemberStatus::Leaving => {
                m.info.status = MemberStatus::Left;
                m.leave_time = now;
                self.left_members.push(name);
                GossipEvent::MemberLeave(m.info.clone())
            }
            MemberStatus::Alive if announced_leave => {
                m.info.status = MemberStatus::Left;
                m.leave_time = now;
                self.left_members.push(name);
                GossipEvent::MemberLeave(m.info.clone())
            }
            MemberStatus::Alive => {
                m.info.status = MemberStatus::Failed;
                m.leave_time = now;
                self.failed_members.push(name);
                GossipEvent::MemberFailed(m.info.clone())
            }
            _ => return,
        };
        self.emit(event);
    }

    /// serf `handleNodeUpdate`.
    fn serf_node_update(&mut self, i: usize) {
        let name = self.nodes[i].name.clone();
        let Some(status) = self.members.get(&name).map(|m| m.info.status) else {
            return;
        };
        let info = self.member_info_from(i, status);
        if let Some(m) = self.members.get_mut(&name) {
            m.info = info.clone();
        }
        self.emit(GossipEvent::MemberUpdate(info));
    }

    fn broadcast_join(&mut self, ltime: u64) {
        let msg = JoinIntent {
            ltime,
            node: self.config.node_name.clone(),
        };
        self.witness_clock(ltime);
        self.handle_join_intent(&msg);
        self.serf_broadcast(SerfQueue::Intents, SerfMessage::Join(msg).encode(), None);
    }

    fn witness_clock(&mut self, t: u64) {
        if t >= self.clock {
            self.clock = t + 1;
        }
    }

    fn upsert_intent(&mut self, node: &str, join: bool, ltime: u64) -> bool {
        match self.intents.get(node) {
            Some(i) if ltime <= i.ltime => false,
            _ => {
                self.intents.insert(
                    node.to_owned(),
                    Intent {
                        join,
                        wall: self.now,
                        ltime,
                    },
                );
                true
            }
        }
    }

    /// serf `handleNodeLeaveIntent`. Returns whether to rebroadcast.
    fn handle_leave_intent(&mut self, msg: &LeaveIntent) -> bool {
        self.witness_clock(msg.ltime);
        let Some(m) = self.members.get_mut(&msg.node) else {
            return self.upsert_intent(&msg.node.clone(), false, msg.ltime);
        };
        if msg.ltime <= m.status_ltime {
            return false;
        }
        if msg.node == self.config.node_name && self.serf_state == SerfState::Alive {
            // Someone says we left; we did not. Re-assert with a join intent.
            let t = self.clock;
            self.broadcast_join(t);
            return false;
        }
        m.status_ltime = msg.ltime;
        m.rejoining = false;
        match m.info.status {
            MemberStatus::Alive => {
                m.info.status = MemberStatus::Leaving;
                self.members_version += 1;
                if msg.prune {
                    self.prune_member(&msg.node.clone());
                }
                true
            }
            MemberStatus::Failed => {
                m.info.status = MemberStatus::Left;
                let info = m.info.clone();
                self.failed_members.retain(|n| n != &msg.node);
                self.left_members.push(msg.node.clone());
                self.emit(GossipEvent::MemberLeave(info));
                if msg.prune {
                    self.prune_member(&msg.node.clone());
                }
                true
            }
            MemberStatus::Leaving | MemberStatus::Left => {
                if msg.prune {
                    self.prune_member(&msg.node.clone());
                }
                true
            }
        }
    }

    /// serf `handlePrune` (without its sleep: the member is erased at once).
    fn prune_member(&mut self, name: &str) {
        self.left_members.retain(|n| n != name);
        self.failed_members.retain(|n| n != name);
        self.erase_member(name);
    }

    fn erase_member(&mut self, name: &str) {
        if let Some(m) = self.members.remove(name) {
            self.vivaldi.forget(name);
            self.coordinates.remove(name);
            self.emit(GossipEvent::MemberReap(m.info));
        }
    }

    /// serf `handleNodeJoinIntent`.
    fn handle_join_intent(&mut self, msg: &JoinIntent) -> bool {
        self.witness_clock(msg.ltime);
        let Some(m) = self.members.get_mut(&msg.node) else {
            return self.upsert_intent(&msg.node.clone(), true, msg.ltime);
        };
        if msg.ltime <= m.status_ltime {
            return false;
        }
        m.status_ltime = msg.ltime;
        match m.info.status {
            MemberStatus::Leaving => {
                m.info.status = MemberStatus::Alive;
                self.members_version += 1;
            }
            // It stays left until memberlist hears it alive, but its status time is now a
            // join's: see `serf_local_state`.
            MemberStatus::Left => m.rejoining = true,
            MemberStatus::Alive | MemberStatus::Failed => {}
        }
        true
    }

    fn witness_event_clock(&mut self, t: u64) {
        if t >= self.event_clock {
            self.event_clock = t + 1;
        }
    }

    /// serf `handleUserEvent`.
    fn handle_user_event(&mut self, msg: &UserEventMsg) -> bool {
        self.witness_event_clock(msg.ltime);
        if msg.ltime < self.event_min_time {
            return false;
        }
        let len = self.event_buffer.len() as u64;
        let cur = self.event_clock;
        if cur > len && msg.ltime < cur - len {
            return false;
        }
        let idx = (msg.ltime % len) as usize;
        let item = UserEventItem {
            name: msg.name.clone(),
            payload: msg.payload.clone(),
        };
        match &mut self.event_buffer[idx] {
            Some(seen) if seen.ltime == msg.ltime => {
                if seen.events.contains(&item) {
                    return false;
                }
                seen.events.push(item);
            }
            slot => {
                *slot = Some(UserEventsAt {
                    ltime: msg.ltime,
                    events: vec![item],
                });
            }
        }
        self.out.push(Output::Event(GossipEvent::User(UserEvent {
            ltime: msg.ltime,
            name: msg.name.clone(),
            payload: msg.payload.clone(),
            coalesce: msg.cc,
        })));
        true
    }

    /// serf `delegate.NotifyMsg`.
    fn serf_notify_msg(&mut self, buf: &[u8]) {
        if buf.is_empty() {
            return;
        }
        let msg = match SerfMessage::decode(buf) {
            Ok(m) => m,
            Err(_) => {
                self.stats.decode_errors += 1;
                return;
            }
        };
        let (rebroadcast, queue) = match &msg {
            SerfMessage::Leave(l) => (self.handle_leave_intent(l), SerfQueue::Intents),
            SerfMessage::Join(j) => (self.handle_join_intent(j), SerfQueue::Intents),
            SerfMessage::UserEvent(e) => (self.handle_user_event(e), SerfQueue::Events),
            SerfMessage::Query(q) => (self.handle_query(q), SerfQueue::Queries),
            SerfMessage::QueryResponse(r) => {
                self.handle_query_response(r);
                (false, SerfQueue::Intents)
            }
            SerfMessage::Relay {
                dest_ip,
                dest_port,
                inner,
                ..
            } => {
                if let Ok(ip) = ip_from_wire(dest_ip) {
                    self.send_to_address(SocketAddr::new(ip, *dest_port), inner.clone());
                }
                (false, SerfQueue::Intents)
            }
        };
        if rebroadcast {
            self.serf_broadcast(queue, buf.to_vec(), None);
        }
    }

    /// memberlist `SendToAddress`: a user message straight to an address.
    fn send_to_address(&mut self, to: SocketAddr, msg: Vec<u8>) {
        let mut b = Vec::with_capacity(msg.len() + 1);
        b.push(msg_type::USER);
        b.extend_from_slice(&msg);
        self.send_raw(to, false, b);
    }

    /// serf `delegate.LocalState`, except that a left member known to be rejoining is
    /// not listed as left. The receiver of a push/pull turns every listed left member
    /// into a leave intent one tick after its status time; when that time is the
    /// member's newer join, the made-up leave would outrank the join and mark a member
    /// that is back `leaving` in every view it reaches, for good (the member refutes only
    /// leave intents that reach it). Its status time still goes out, as a join.
    fn serf_local_state(&self) -> Vec<u8> {
        let mut status_ltimes: Vec<(String, u64)> = self
            .members
            .iter()
            .map(|(k, m)| (k.clone(), m.status_ltime))
            .collect();
        status_ltimes.sort();
        SerfPushPull {
            ltime: self.clock,
            status_ltimes,
            left_members: self
                .left_members
                .iter()
                .filter(|name| self.members.get(*name).is_some_and(|m| !m.rejoining))
                .cloned()
                .collect(),
            event_ltime: self.event_clock,
            events: self.event_buffer.clone(),
            query_ltime: self.query_clock,
        }
        .encode()
    }

    /// serf `delegate.MergeRemoteState`.
    fn serf_merge_remote_state(&mut self, buf: &[u8], is_join: bool, ignore_old: bool) {
        let pp = match SerfPushPull::decode(buf) {
            Ok(pp) => pp,
            Err(_) => {
                self.stats.decode_errors += 1;
                return;
            }
        };
        if pp.ltime > 0 {
            self.witness_clock(pp.ltime - 1);
        }
        if pp.event_ltime > 0 {
            self.witness_event_clock(pp.event_ltime - 1);
        }
        if pp.query_ltime > self.query_clock {
            self.query_clock = pp.query_ltime;
        }
        let status: HashMap<&str, u64> = pp
            .status_ltimes
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        let left: HashSet<&str> = pp.left_members.iter().map(String::as_str).collect();
        for name in &pp.left_members {
            let status_ltime = status.get(name.as_str()).copied().unwrap_or(0);
            // serf applies every listed left member as a leave intent one tick after its
            // status time. For a member we already know to be leaving or left that tick is
            // all it brings, and two members that both hold it left add one tick per
            // push/pull between them: its status time climbed past the clock of a member
            // that later force-left it, whose intent everyone then dropped as old.
            let known_gone = self.members.get(name).is_some_and(|m| {
                matches!(m.info.status, MemberStatus::Leaving | MemberStatus::Left)
            });
            if known_gone {
                self.witness_clock(status_ltime);
                continue;
            }
            let ltime = status_ltime + 1;
            self.handle_leave_intent(&LeaveIntent {
                ltime,
                node: name.clone(),
                prune: false,
            });
        }
        for (name, ltime) in &pp.status_ltimes {
            if left.contains(name.as_str()) {
                continue;
            }
            self.handle_join_intent(&JoinIntent {
                ltime: *ltime,
                node: name.clone(),
            });
        }
        // serf `eventJoinIgnore`: events the pool fired before we joined stay unplayed.
        if is_join && ignore_old && pp.event_ltime > self.event_min_time {
            self.event_min_time = pp.event_ltime;
        }
        for e in pp.events.iter().flatten() {
            for item in &e.events {
                let m = UserEventMsg {
                    ltime: e.ltime,
                    name: item.name.clone(),
                    payload: item.payload.clone(),
                    cc: false,
                };
                self.handle_user_event(&m);
            }
        }
    }

    // -- queries

    fn default_query_timeout(&self) -> Duration {
        let n = self.nodes.len();
        let scale = ((n + 1) as f64).log10().ceil().max(1.0) as u32;
        self.config.gossip_interval * self.config.query_timeout_mult * scale
    }

    fn start_query(&mut self, name: &str, payload: Vec<u8>, request: u64, key_op: bool) {
        let timeout = self.default_query_timeout();
        let q = QueryMsg {
            ltime: self.query_clock,
            id: self.rng.random::<u32>() & 0x7fff_ffff,
            addr: ip_to_wire(self.config.advertise_addr),
            port: self.config.advertise_port,
            source_node: self.config.node_name.clone(),
            filters: Vec::new(),
            flags: 0,
            relay_factor: 0,
            timeout_ns: timeout.as_nanos() as i64,
            name: name.to_owned(),
            payload,
        };
        let raw = SerfMessage::Query(q.clone()).encode();
        // memberlist NumMembers: nodes that are neither dead nor left.
        let expected = self.nodes.iter().filter(|n| !n.dead_or_left()).count();
        self.pending_queries.insert(
            q.ltime,
            PendingQuery {
                id: q.id,
                request,
                key_op,
                expected,
                responses: BTreeMap::new(),
            },
        );
        self.schedule(self.now + timeout, Timer::Query(q.ltime));
        self.handle_query(&q);
        self.serf_broadcast(SerfQueue::Queries, raw, None);
    }

    fn witness_query_clock(&mut self, t: u64) {
        if t >= self.query_clock {
            self.query_clock = t + 1;
        }
    }

    /// serf `handleQuery`.
    fn handle_query(&mut self, q: &QueryMsg) -> bool {
        self.witness_query_clock(q.ltime);
        if q.ltime < self.query_min_time {
            return false;
        }
        let len = self.query_buffer.len() as u64;
        let cur = self.query_clock;
        if cur > len && q.ltime < cur - len {
            return false;
        }
        let idx = (q.ltime % len) as usize;
        match &mut self.query_buffer[idx] {
            Some((ltime, ids)) if *ltime == q.ltime => {
                if ids.contains(&q.id) {
                    return false;
                }
                ids.push(q.id);
            }
            slot => *slot = Some((q.ltime, vec![q.id])),
        }
        let rebroadcast = q.flags & sm::QUERY_FLAG_NO_BROADCAST == 0;
        if !self.should_process_query(&q.filters) {
            return rebroadcast;
        }
        if q.flags & sm::QUERY_FLAG_ACK != 0 {
            let ack = QueryResponseMsg {
                ltime: q.ltime,
                id: q.id,
                from: self.config.node_name.clone(),
                flags: sm::QUERY_FLAG_ACK,
                payload: Vec::new(),
            };
            self.send_query_response(q, ack);
        }
        if let Some(op) = q.name.strip_prefix(INTERNAL_QUERY_PREFIX) {
            self.handle_internal_query(op, q);
        } else {
            self.out.push(Output::Event(GossipEvent::Query(QueryEvent {
                ltime: q.ltime,
                id: q.id,
                name: q.name.clone(),
                payload: q.payload.clone(),
                source_node: q.source_node.clone(),
            })));
        }
        rebroadcast
    }

    fn should_process_query(&self, filters: &[Vec<u8>]) -> bool {
        for f in filters {
            match sm::decode_filter(f) {
                Ok(QueryFilter::Nodes(nodes)) => {
                    if !nodes.iter().any(|n| n == &self.config.node_name) {
                        return false;
                    }
                }
                Ok(QueryFilter::Tag(t)) => {
                    // serf matches a Go regexp; we support the common exact/".*" forms
                    // and treat anything else as a literal match on the whole value.
                    let value = self
                        .config
                        .tags
                        .get(&t.tag)
                        .map(String::as_str)
                        .unwrap_or("");
                    let ok = match t.expr.as_str() {
                        ".*" | "" => true,
                        e => {
                            let e = e.trim_start_matches('^').trim_end_matches('$');
                            value == e
                        }
                    };
                    if !ok {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
        true
    }

    fn send_query_response(&mut self, q: &QueryMsg, resp: QueryResponseMsg) {
        if q.source_node == self.config.node_name {
            self.handle_query_response(&resp);
            return;
        }
        let raw = SerfMessage::QueryResponse(resp).encode();
        if raw.len() > self.config.query_response_size_limit {
            return;
        }
        let Ok(ip) = ip_from_wire(&q.addr) else {
            return;
        };
        let to = SocketAddr::new(ip, q.port);
        self.send_to_address(to, raw.clone());
        if q.relay_factor > 0 {
            let relay = SerfMessage::Relay {
                dest_ip: q.addr.clone(),
                dest_port: q.port,
                dest_name: q.source_node.clone(),
                inner: raw,
            }
            .encode();
            let local = self.config.node_name.clone();
            let peers = self.k_random_nodes(q.relay_factor as usize, |n| {
                n.state != NodeStateKind::Alive || n.vsn[1] < 5 || n.name == local
            });
            for p in peers {
                let to = self.nodes[p].socket();
                self.send_to_address(to, relay.clone());
            }
        }
    }

    fn handle_internal_query(&mut self, op: &str, q: &QueryMsg) {
        let respond = |g: &mut Gossip, payload: Vec<u8>| {
            let resp = QueryResponseMsg {
                ltime: q.ltime,
                id: q.id,
                from: g.config.node_name.clone(),
                flags: 0,
                payload,
            };
            g.send_query_response(q, resp);
        };
        let b64 = base64::engine::general_purpose::STANDARD;
        match op {
            "ping" => {}
            "conflict" => {
                let node = String::from_utf8_lossy(&q.payload).into_owned();
                if node == self.config.node_name {
                    return;
                }
                if let Some(m) = self.members.get(&node) {
                    let i = &m.info;
                    let payload = ConflictMember {
                        name: i.name.clone(),
                        addr: i.addr,
                        port: i.port,
                        tags: i.tags.clone(),
                        status: i.status as i64,
                        vsn: [
                            i.protocol_min,
                            i.protocol_max,
                            i.protocol_cur,
                            i.delegate_min,
                            i.delegate_max,
                            i.delegate_cur,
                        ],
                    }
                    .encode();
                    respond(self, payload);
                }
            }
            "install-key" | "use-key" | "remove-key" => {
                let mut resp = KeyResponse::default();
                match KeyRequest::decode(&q.payload) {
                    Err(e) => resp.message = e.to_string(),
                    Ok(_) if !self.encryption_enabled() => {
                        resp.message = "No keyring to modify (encryption not enabled)".to_owned();
                    }
                    Ok(req) => {
                        let r = match op {
                            "install-key" => self.install_key(&req.key),
                            "use-key" => self.use_key(&req.key),
                            _ => self.remove_key(&req.key),
                        };
                        match r {
                            Ok(()) => resp.result = true,
                            Err(e) => resp.message = e,
                        }
                    }
                }
                respond(self, resp.encode());
            }
            "list-keys" => {
                let mut resp = KeyResponse::default();
                if !self.encryption_enabled() {
                    resp.message = "Keyring is empty (encryption not enabled)".to_owned();
                } else {
                    resp.keys = self.keys.iter().map(|k| b64.encode(k)).collect();
                    resp.primary_key = self.keys.first().map(|k| b64.encode(k)).unwrap_or_default();
                    resp.result = true;
                }
                // serf trims the key list until the response fits the size limit.
                let max_keys = self.config.query_response_size_limit / MIN_ENCODED_KEY_LENGTH;
                let actual = resp.keys.len();
                let mut i = max_keys.min(actual);
                loop {
                    let payload = resp.encode();
                    let probe = QueryResponseMsg {
                        ltime: q.ltime,
                        id: q.id,
                        from: self.config.node_name.clone(),
                        flags: 0,
                        payload: payload.clone(),
                    };
                    if SerfMessage::QueryResponse(probe).encode().len()
                        <= self.config.query_response_size_limit
                        || i == 0
                    {
                        respond(self, payload);
                        break;
                    }
                    i -= 1;
                    resp.keys.truncate(i);
                    resp.message =
                        format!("truncated key list response, showing first {i} of {actual} keys");
                }
            }
            _ => {}
        }
    }

    /// serf `handleQueryResponse`.
    fn handle_query_response(&mut self, r: &QueryResponseMsg) {
        let Some(pq) = self.pending_queries.get_mut(&r.ltime) else {
            return;
        };
        if pq.id != r.id || r.flags & sm::QUERY_FLAG_ACK != 0 {
            return;
        }
        if pq.responses.contains_key(&r.from) {
            return;
        }
        pq.responses.insert(r.from.clone(), r.payload.clone());
        if pq.key_op && pq.responses.len() >= pq.expected {
            let ltime = r.ltime;
            self.query_finished(ltime);
        }
    }

    fn query_finished(&mut self, ltime: u64) {
        let Some(pq) = self.pending_queries.remove(&ltime) else {
            return;
        };
        if !pq.key_op {
            return;
        }
        let mut result = KeyOpResult {
            num_nodes: pq.expected,
            ..Default::default()
        };
        for (from, payload) in pq.responses {
            result.num_resp += 1;
            match KeyResponse::decode(&payload) {
                Err(_) => {
                    result
                        .messages
                        .insert(from, "Failed to decode key query response".to_owned());
                    result.num_err += 1;
                }
                Ok(kr) => {
                    if !kr.result {
                        result.messages.insert(from.clone(), kr.message.clone());
                        result.num_err += 1;
                    } else if !kr.message.is_empty() {
                        result.messages.insert(from.clone(), kr.message.clone());
                    }
                    for k in kr.keys {
                        *result.keys.entry(k).or_default() += 1;
                    }
                    *result.primary_keys.entry(kr.primary_key).or_default() += 1;
                }
            }
        }
        self.out.push(Output::KeyOpDone {
            request: pq.request,
            result,
        });
    }

    // -- periodic serf maintenance

    fn reap(&mut self) {
        let now = self.now;
        let reconnect = self.config.reconnect_timeout;
        let tombstone = self.config.tombstone_timeout;
        let expired = |list: &Vec<String>,
                       members: &HashMap<String, SerfMember>,
                       timeout: Duration|
         -> Vec<String> {
            list.iter()
                .filter(|n| {
                    members
                        .get(*n)
                        .is_some_and(|m| now.saturating_sub(m.leave_time) > timeout)
                })
                .cloned()
                .collect()
        };
        let failed = expired(&self.failed_members, &self.members, reconnect);
        let left = expired(&self.left_members, &self.members, tombstone);
        for n in failed.iter().chain(&left) {
            self.failed_members.retain(|x| x != n);
            self.left_members.retain(|x| x != n);
            self.erase_member(n);
        }
        let intent_timeout = self.config.recent_intent_timeout;
        self.intents
            .retain(|_, i| now.saturating_sub(i.wall) <= intent_timeout);
    }

    fn reconnect(&mut self) {
        let n = self.failed_members.len();
        if n == 0 {
            return;
        }
        let alive = (self.members.len() - n - self.left_members.len()).max(1);
        let prob = n as f32 / alive as f32;
        if self.rng.random::<f32>() > prob {
            return;
        }
        let i = self.random_index(n);
        let name = self.failed_members[i].clone();
        if let Some(m) = self.members.get(&name) {
            let to = SocketAddr::new(m.info.addr, m.info.port);
            self.push_pull(to, None);
        }
    }

    fn check_queue_depth(&mut self) {
        let max = if self.config.min_queue_depth > 0 {
            (2 * self.members.len()).max(self.config.min_queue_depth)
        } else {
            self.config.max_queue_depth
        };
        let mut finished = std::mem::take(&mut self.finished_broadcasts);
        self.intent_queue.prune(max, &mut finished);
        self.event_queue.prune(max, &mut finished);
        self.query_queue.prune(max, &mut finished);
        self.finished_broadcasts = finished;
        self.process_finished_broadcasts();
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
