//! Outbound Raft traffic: one sender thread per peer, each with its own TCP connection to
//! the peer's :8300 (first byte [`PROTOCOL_RAFT`]) and a bounded queue.
//!
//! The raft core thread never blocks on the network: it drops a message into the peer's
//! queue with `try_send`, and a full queue drops the message — Raft tolerates loss and the core
//! retransmits on its heartbeat. A sender batches everything queued into one write, reconnects
//! with backoff after an error, and discards what was queued while the peer was unreachable.
//!
//! Inbound Raft traffic arrives on the shards' RPC listeners (`rpc_server`).
//!
//! Fault injection for tests: [`Faults`] holds a set of blocked peer IPs, checked lock-free on
//! both the sending and the receiving side; it is only writable through the debug endpoint,
//! which exists only when `enable_debug_faults` is configured.

use crate::proto::rpc::{encode_frame, kind, PROTOCOL_RAFT};
use crate::raft::{Message, NodeId};
use arc_swap::ArcSwap;
use bytes::BytesMut;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Messages queued per peer before new ones are dropped.
pub const PEER_QUEUE_CAPACITY: usize = 4096;
/// Messages written per batch.
const BATCH_MESSAGES_MAX: usize = 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Test-only network faults: peers whose traffic is dropped in both directions.
#[derive(Default)]
pub struct Faults {
    blocked: ArcSwap<HashSet<IpAddr>>,
}

impl Faults {
    pub fn is_blocked(&self, ip: IpAddr) -> bool {
        let blocked = self.blocked.load();
        !blocked.is_empty() && blocked.contains(&ip)
    }
    pub fn set_blocked(&self, ips: HashSet<IpAddr>) {
        self.blocked.store(Arc::new(ips));
    }
    pub fn blocked(&self) -> Vec<IpAddr> {
        let mut ips: Vec<IpAddr> = self.blocked.load().iter().copied().collect();
        ips.sort();
        ips
    }
}

struct PeerSender {
    address: String,
    queue: flume::Sender<Message>,
    stop: Arc<AtomicBool>,
}

pub struct PeerTransport {
    local_id: NodeId,
    peers: HashMap<NodeId, PeerSender>,
    faults: Arc<Faults>,
    dropped: u64,
}

impl PeerTransport {
    pub fn new(local_id: NodeId, faults: Arc<Faults>) -> Self {
        PeerTransport {
            local_id,
            peers: HashMap::new(),
            faults,
            dropped: 0,
        }
    }

    /// Messages dropped because a peer's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Starts senders for new peers, stops them for removed ones, follows address changes.
    /// `peers` maps raft ids to RPC addresses: the configuration's members plus servers
    /// known from gossip, so that a server not yet in any configuration can still answer
    /// the leader that is adding it.
    pub fn update_peers(&mut self, peers: &BTreeMap<NodeId, String>) {
        let wanted: HashMap<NodeId, &str> = peers
            .iter()
            .filter(|(id, _)| **id != self.local_id)
            .map(|(id, address)| (*id, address.as_str()))
            .collect();
        self.peers.retain(|id, sender| {
            let keep = wanted.get(id).is_some_and(|addr| *addr == sender.address);
            if !keep {
                sender.stop.store(true, Ordering::SeqCst);
            }
            keep
        });
        for (id, address) in wanted {
            if self.peers.contains_key(&id) {
                continue;
            }
            let (tx, rx) = flume::bounded(PEER_QUEUE_CAPACITY);
            let stop = Arc::new(AtomicBool::new(false));
            let thread_stop = stop.clone();
            let thread_address = address.to_string();
            let local_id = self.local_id;
            let faults = self.faults.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("praetor-peer-{id:x}"))
                .spawn(move || sender_loop(local_id, thread_address, rx, thread_stop, faults));
            if let Err(e) = spawned {
                log::error!("raft: cannot start sender thread for peer {address}: {e}");
                continue;
            }
            self.peers.insert(
                id,
                PeerSender {
                    address: address.to_string(),
                    queue: tx,
                    stop,
                },
            );
        }
    }

    pub fn send(&mut self, to: NodeId, message: Message) {
        if let Some(peer) = self.peers.get(&to) {
            if peer.queue.try_send(message).is_err() {
                self.dropped += 1;
            }
        }
    }

    pub fn shutdown(&mut self) {
        for (_, peer) in self.peers.drain() {
            peer.stop.store(true, Ordering::SeqCst);
        }
    }
}

fn resolve(address: &str) -> Option<SocketAddr> {
    address.to_socket_addrs().ok()?.next()
}

fn sender_loop(
    local_id: NodeId,
    address: String,
    queue: flume::Receiver<Message>,
    stop: Arc<AtomicBool>,
    faults: Arc<Faults>,
) {
    let mut backoff = BACKOFF_MIN;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    while !stop.load(Ordering::SeqCst) {
        let Some(addr) = resolve(&address) else {
            std::thread::sleep(backoff);
            continue;
        };
        let mut stream = match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(stream) => stream,
            Err(e) => {
                log::debug!("raft: cannot reach peer {address}: {e}");
                // Whatever was queued for an unreachable peer is stale; the core resends.
                while queue.try_recv().is_ok() {}
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        if stream.write_all(&[PROTOCOL_RAFT]).is_err() {
            continue;
        }
        backoff = BACKOFF_MIN;
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let first = match queue.recv_timeout(Duration::from_millis(200)) {
                Ok(m) => m,
                Err(flume::RecvTimeoutError::Timeout) => continue,
                Err(flume::RecvTimeoutError::Disconnected) => return,
            };
            buf.clear();
            let mut batch = 0;
            let mut next = Some(first);
            while let Some(message) = next.take() {
                let payload =
                    rmp_serde::to_vec(&(local_id, &message)).expect("raft messages always encode");
                encode_frame(&mut buf, kind::RAFT_MESSAGE, 0, &payload);
                batch += 1;
                if batch < BATCH_MESSAGES_MAX {
                    next = queue.try_recv().ok();
                }
            }
            if faults.is_blocked(addr.ip()) {
                continue;
            }
            if stream.write_all(&buf).is_err() {
                break;
            }
        }
    }
}
