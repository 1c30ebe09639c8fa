//! A seeded, replayable network simulator for the gossip core: a virtual clock, one
//! [`Gossip`] per node, UDP packets that are lost, delayed and reordered, TCP streams
//! that are delayed but reliable, and crashes. Used by `tests/it/gossip/gossip_sim.rs` and the
//! gossip bench; pure like the core (no sockets, no clock), so a failing run is replayed
//! exactly from its seed.
//!
//! Node addresses are virtual labels (127.0.0.20 with port 10000 + index); nothing is
//! ever bound or sent on a real network.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::{Gossip, GossipConfig, GossipEvent, Output};

/// Network behaviour.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// Probability that a UDP datagram is dropped.
    pub loss: f64,
    /// One-way base latency.
    pub latency: Duration,
    /// Uniform extra delay in [0, jitter) per message (reorders packets).
    pub jitter: Duration,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            loss: 0.0,
            latency: Duration::from_micros(500),
            jitter: Duration::ZERO,
        }
    }
}

#[derive(Debug)]
enum Delivery {
    Packet {
        to: usize,
        from: SocketAddr,
        bytes: Vec<u8>,
    },
    StreamRequest {
        to: usize,
        from: usize,
        id: u64,
        bytes: Vec<u8>,
    },
    StreamReply {
        to: usize,
        id: u64,
        reply: Result<Vec<u8>, String>,
    },
}

/// An event observed at a node, with the virtual time it was emitted.
#[derive(Debug, Clone)]
pub struct Observed {
    pub at: Duration,
    pub node: usize,
    pub event: GossipEvent,
}

pub struct Sim {
    pub now: Duration,
    pub nodes: Vec<Option<Gossip>>,
    pub addrs: Vec<SocketAddr>,
    by_addr: HashMap<SocketAddr, usize>,
    net: NetConfig,
    rng: StdRng,
    seed: u64,
    queue: BinaryHeap<Reverse<(Duration, u64)>>,
    deliveries: HashMap<u64, Delivery>,
    timers: BinaryHeap<Reverse<(Duration, usize)>>,
    next_seq: u64,
    /// Every event every node emitted, in order (when recording is on).
    pub events: Vec<Observed>,
    pub record_events: bool,
    /// Join results: (node, request, joined).
    pub joins: Vec<(usize, u64, usize)>,
    /// Finished graceful leaves: (node, request, virtual time).
    pub leaves: Vec<(usize, u64, Duration)>,
    pub packets_delivered: u64,
    pub packets_dropped: u64,
    pub bytes_sent: u64,
}

pub fn sim_addr(i: usize) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 20)), 10000 + i as u16)
}

impl Sim {
    pub fn new(seed: u64, net: NetConfig) -> Self {
        Sim {
            now: Duration::ZERO,
            nodes: Vec::new(),
            addrs: Vec::new(),
            by_addr: HashMap::new(),
            net,
            rng: StdRng::seed_from_u64(seed),
            seed,
            queue: BinaryHeap::new(),
            deliveries: HashMap::new(),
            timers: BinaryHeap::new(),
            next_seq: 0,
            events: Vec::new(),
            record_events: true,
            joins: Vec::new(),
            leaves: Vec::new(),
            packets_delivered: 0,
            packets_dropped: 0,
            bytes_sent: 0,
        }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Adds a node built from `make(name, addr, port)`; returns its index.
    pub fn add_node(&mut self, make: impl FnOnce(String, IpAddr, u16) -> GossipConfig) -> usize {
        let i = self.nodes.len();
        let addr = sim_addr(i);
        let config = make(format!("node-{i}"), addr.ip(), addr.port());
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&self.seed.to_le_bytes());
        seed[8..16].copy_from_slice(&(i as u64).to_le_bytes());
        let g = Gossip::new(config, seed, self.now).expect("valid sim config");
        self.nodes.push(Some(g));
        self.addrs.push(addr);
        self.by_addr.insert(addr, i);
        self.after_input(i);
        i
    }

    /// Replaces a crashed node with a fresh process at the same address (a restart).
    pub fn restart_node(
        &mut self,
        i: usize,
        make: impl FnOnce(String, IpAddr, u16) -> GossipConfig,
    ) {
        let addr = self.addrs[i];
        let config = make(format!("node-{i}"), addr.ip(), addr.port());
        // Each restart draws fresh randomness (a new process), still replayable from the seed.
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&self.seed.to_le_bytes());
        seed[8..16].copy_from_slice(&(i as u64 + 1_000_000).to_le_bytes());
        seed[16..24].copy_from_slice(&(self.now.as_nanos() as u64).to_le_bytes());
        self.nodes[i] = Some(Gossip::new(config, seed, self.now).expect("valid sim config"));
        self.after_input(i);
    }

    /// Like [`Sim::restart_node`], on a new address (127.0.0.21 and up, same port): a
    /// member that comes back under its old name from another host.
    pub fn restart_node_moved(
        &mut self,
        i: usize,
        make: impl FnOnce(String, IpAddr, u16) -> GossipConfig,
    ) {
        let old = self.addrs[i];
        self.by_addr.remove(&old);
        let IpAddr::V4(ip) = old.ip() else {
            unreachable!("sim addresses are IPv4")
        };
        let [a, b, c, d] = ip.octets();
        let moved = SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(a, b, c, d.wrapping_add(1).max(21))),
            old.port(),
        );
        assert!(
            !self.by_addr.contains_key(&moved),
            "moved address {moved} already in use"
        );
        self.addrs[i] = moved;
        self.by_addr.insert(moved, i);
        self.restart_node(i, make);
    }

    pub fn crash(&mut self, i: usize) {
        self.nodes[i] = None;
    }

    pub fn node(&mut self, i: usize) -> &mut Gossip {
        self.nodes[i].as_mut().expect("node is running")
    }

    /// Joins node `i` through `targets` the way Consul does (old events not replayed).
    pub fn join(&mut self, i: usize, request: u64, targets: &[usize]) {
        self.join_with(i, request, targets, true);
    }

    pub fn join_with(&mut self, i: usize, request: u64, targets: &[usize], ignore_old: bool) {
        let addrs: Vec<SocketAddr> = targets.iter().map(|&t| self.addrs[t]).collect();
        let now = self.now;
        if let Some(g) = self.nodes[i].as_mut() {
            g.join(now, request, &addrs, ignore_old);
        }
        self.after_input(i);
    }

    /// Runs an input closure against node `i` and processes its outputs.
    pub fn with_node(&mut self, i: usize, f: impl FnOnce(&mut Gossip, Duration)) {
        let now = self.now;
        if let Some(g) = self.nodes[i].as_mut() {
            f(g, now);
        }
        self.after_input(i);
    }

    fn push(&mut self, at: Duration, d: Delivery) {
        self.next_seq += 1;
        self.deliveries.insert(self.next_seq, d);
        self.queue.push(Reverse((at, self.next_seq)));
    }

    fn delay(&mut self) -> Duration {
        let j = self.net.jitter.as_nanos() as u64;
        let extra = if j == 0 {
            0
        } else {
            self.rng.random_range(0..j)
        };
        self.net.latency + Duration::from_nanos(extra)
    }

    fn after_input(&mut self, i: usize) {
        let Some(g) = self.nodes[i].as_mut() else {
            return;
        };
        let outputs = g.drain();
        let deadline = g.next_deadline();
        if let Some(d) = deadline {
            self.timers.push(Reverse((d, i)));
        }
        for o in outputs {
            match o {
                Output::Packet { to, bytes } => {
                    self.bytes_sent += bytes.len() as u64;
                    let Some(&t) = self.by_addr.get(&to) else {
                        continue;
                    };
                    if self.rng.random::<f64>() < self.net.loss {
                        self.packets_dropped += 1;
                        continue;
                    }
                    let at = self.now + self.delay();
                    let from = self.addrs[i];
                    self.push(at, Delivery::Packet { to: t, from, bytes });
                }
                Output::Stream { id, to, bytes } => {
                    self.bytes_sent += bytes.len() as u64;
                    let at = self.now + self.delay();
                    match self.by_addr.get(&to) {
                        Some(&t) => self.push(
                            at,
                            Delivery::StreamRequest {
                                to: t,
                                from: i,
                                id,
                                bytes,
                            },
                        ),
                        None => self.push(
                            at,
                            Delivery::StreamReply {
                                to: i,
                                id,
                                reply: Err("no route".into()),
                            },
                        ),
                    }
                }
                Output::Event(event) => {
                    if self.record_events {
                        self.events.push(Observed {
                            at: self.now,
                            node: i,
                            event,
                        });
                    }
                }
                Output::JoinDone {
                    request, joined, ..
                } => self.joins.push((i, request, joined)),
                Output::LeaveDone { request } => self.leaves.push((i, request, self.now)),
                Output::KeyOpDone { .. } => {}
            }
        }
    }

    /// Advances virtual time to `until`, delivering everything due.
    pub fn run_until(&mut self, until: Duration) {
        loop {
            let next_delivery = self.queue.peek().map(|Reverse((t, _))| *t);
            let next_timer = self.timers.peek().map(|Reverse((t, _))| *t);
            let next = match (next_delivery, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if next > until {
                break;
            }
            self.now = next;
            if next_delivery == Some(next) {
                let Some(Reverse((_, seq))) = self.queue.pop() else {
                    break;
                };
                let Some(d) = self.deliveries.remove(&seq) else {
                    continue;
                };
                self.deliver(d);
            } else {
                let Some(Reverse((t, i))) = self.timers.pop() else {
                    break;
                };
                let now = self.now;
                let Some(g) = self.nodes[i].as_mut() else {
                    continue;
                };
                // Stale heap entries are fine: tick is a no-op when nothing is due.
                if g.next_deadline().is_some_and(|d| d <= t) {
                    g.tick(now);
                    self.after_input(i);
                }
            }
        }
        self.now = self.now.max(until);
    }

    fn deliver(&mut self, d: Delivery) {
        let now = self.now;
        match d {
            Delivery::Packet { to, from, bytes } => {
                let Some(g) = self.nodes[to].as_mut() else {
                    self.packets_dropped += 1;
                    return;
                };
                self.packets_delivered += 1;
                g.handle_packet(now, from, &bytes);
                self.after_input(to);
            }
            Delivery::StreamRequest {
                to,
                from,
                id,
                bytes,
            } => {
                let reply = match self.nodes[to].as_mut() {
                    None => Err("connection refused".to_owned()),
                    Some(g) => {
                        let r = g.handle_stream(now, self.addrs[from], &bytes);
                        Ok(r)
                    }
                };
                self.after_input(to);
                let at = self.now + self.delay();
                let reply = match reply {
                    Ok(Some(b)) => {
                        self.bytes_sent += b.len() as u64;
                        Ok(b)
                    }
                    Ok(None) => Err("no reply".to_owned()),
                    Err(e) => Err(e),
                };
                self.push(
                    at,
                    Delivery::StreamReply {
                        to: from,
                        id,
                        reply,
                    },
                );
            }
            Delivery::StreamReply { to, id, reply } => {
                let Some(g) = self.nodes[to].as_mut() else {
                    return;
                };
                match &reply {
                    Ok(b) => g.handle_stream_reply(now, id, Ok(b)),
                    Err(e) => g.handle_stream_reply(now, id, Err(e.clone())),
                }
                self.after_input(to);
            }
        }
    }
}
