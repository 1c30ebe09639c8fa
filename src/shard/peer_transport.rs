//! Outbound Raft traffic: one TCP connection per peer to the peer's :8300 (first byte
//! [`PROTOCOL_RAFT`]), written by the raft core thread itself when it can and by the peer's
//! sender thread when it cannot.
//!
//! Why two writers: every thread hop on a message's path costs a wake-up, and on a busy box a
//! wake-up costs tens of microseconds — a one-connection write waits for four sends (the
//! leader's append, the follower's acknowledgement, each way). So the core thread encodes a
//! small message and, when nothing is queued ahead of it, writes it with a non-blocking
//! `send` straight away. Large messages (appends of big entries, snapshot chunks) and
//! whatever does not fit the socket go to the peer's outbox, which its sender thread encodes
//! and drains with blocking writes. One lock orders the two: the core writes directly only
//! while the outbox is empty and the sender is not writing, so frames leave in the order the
//! core sent them.
//!
//! The raft core thread never blocks on the network: a direct write never waits, and a full
//! outbox ([`OUTBOX_BYTES_MAX`]) drops the message — Raft tolerates loss and the core
//! retransmits on its heartbeat. The sender thread (re)connects with backoff; what was queued
//! for a broken connection is discarded (a frame may have been cut in half on it).
//!
//! With `verify_outgoing` the sender thread dials TLS instead (the TLS byte, a blocking
//! handshake under [`HANDSHAKE_TIMEOUT`], the Raft byte inside the session). A TLS session
//! has one writer at a time, so the session itself is what the lock hands over: while the
//! sender is idle it rests in the outbox, where the core may encrypt a small message into it
//! and push the records with a non-blocking send, exactly as it writes to a plain socket;
//! records the socket did not take stay buffered in the session and the sender is woken to
//! flush them. While the sender writes a batch it holds the session, and the core queues.
//!
//! Inbound Raft traffic arrives on the shards' RPC listeners (`rpc_server`).
//!
//! Fault injection for tests: [`Faults`] holds a set of blocked peer IPs, checked lock-free on
//! both the sending and the receiving side; it is only writable through the debug endpoint,
//! which exists only when `enable_debug_faults` is configured.

use crate::proto::rpc::{encode_frame, kind, PROTOCOL_RAFT};
use crate::proto::rpc_select::rpc_type;
use crate::raft::{Message, NodeId};
use crate::tls::TlsConfigurator;
use arc_swap::ArcSwap;
use bytes::BytesMut;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Encoded bytes queued per peer before new messages are dropped. The core's flow control
/// is what really bounds a peer's traffic (64 appends in flight of up to one 8 MiB entry
/// each, 16 snapshot chunks); this sits above that window so that a burst the core allowed,
/// such as a replicated restore, never costs the heartbeats queued behind it.
pub const OUTBOX_BYTES_MAX: usize = 768 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on a TLS handshake with a peer (Consul's `rpc_handshake_timeout` default).
const HANDSHAKE_TIMEOUT: Duration = crate::tls::stream::HANDSHAKE_TIMEOUT_DEFAULT;
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How often an idle sender thread looks at its stop flag.
const IDLE_CHECK_INTERVAL: Duration = Duration::from_millis(200);
/// Messages carrying at least this many payload bytes (appends of large entries, snapshot
/// chunks) are queued as they are and encoded by the sender thread: encoding and copying
/// megabytes on the core thread would delay the heartbeats and acknowledgements it owes,
/// and a 1 GiB replicated restore lost leadership that way.
const DIRECT_PAYLOAD_BYTES_MAX: usize = 64 * 1024;
/// What a queued, not yet encoded message is charged against the outbox bound, beyond its
/// payload.
const MESSAGE_OVERHEAD_BYTES: usize = 128;

/// The payload bytes a message carries (entries' data, a snapshot chunk).
fn payload_bytes(message: &Message) -> usize {
    match message {
        Message::AppendEntries { entries, .. } => entries.iter().map(|e| e.data.len()).sum(),
        Message::InstallSnapshot { chunk, .. } => chunk.len(),
        _ => 0,
    }
}

/// Something queued for a peer, in sending order.
enum Pending {
    /// Encoded bytes: whole frames, or the rest of a frame the core began writing.
    Bytes(Vec<u8>),
    /// A message for the sender thread to encode.
    Message(Message),
}

/// Test-only faults: peers whose traffic is dropped in both directions, and a stall the
/// raft core takes between handing one applied batch to successive shards (to widen the
/// window in which shards hold different versions).
#[derive(Default)]
pub struct Faults {
    blocked: ArcSwap<HashSet<IpAddr>>,
    publish_stall_ms: AtomicU64,
}

impl Faults {
    /// Longest publish stall a test may ask for, in milliseconds.
    pub const PUBLISH_STALL_MS_MAX: u64 = 1_000;

    pub fn publish_stall_ms(&self) -> u64 {
        self.publish_stall_ms.load(Ordering::Relaxed)
    }
    pub fn set_publish_stall_ms(&self, stall_ms: u64) {
        assert!(stall_ms <= Self::PUBLISH_STALL_MS_MAX);
        self.publish_stall_ms.store(stall_ms, Ordering::Relaxed);
    }
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

/// What the core thread and a peer's sender thread share.
#[derive(Default)]
struct Outbox {
    /// What waits for the sender thread, oldest first.
    queue: std::collections::VecDeque<Pending>,
    /// What `queue` is charged against [`OUTBOX_BYTES_MAX`].
    queued_bytes: usize,
    /// The sender thread is writing a batch it took from `bytes`.
    writing: bool,
    /// The current connection, once the sender thread has one, and the peer's IP (for
    /// [`Faults`]).
    stream: Option<(Arc<TcpStream>, IpAddr)>,
    /// The current TLS session and the peer's IP while the sender thread is not writing
    /// (never at the same time as `stream`).
    tls: Option<(Box<TlsSession>, IpAddr)>,
    /// The core left encrypted records in `tls` that the socket did not take: the sender
    /// thread must write them out even if nothing is queued.
    tls_flush_pending: bool,
}

/// A client TLS session over its socket.
type TlsSession = (rustls::ClientConnection, TcpStream);

struct PeerLink {
    outbox: Mutex<Outbox>,
    /// Signalled when bytes are queued or the link stops.
    queued: Condvar,
    stop: AtomicBool,
}

impl PeerLink {
    fn lock(&self) -> std::sync::MutexGuard<'_, Outbox> {
        // A panicking holder leaves consistent bytes behind (appends are whole frames or
        // remainders of one); keep going.
        self.outbox
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

struct PeerSender {
    address: String,
    link: Arc<PeerLink>,
}

pub struct PeerTransport {
    local_id: NodeId,
    peers: HashMap<NodeId, PeerSender>,
    faults: Arc<Faults>,
    tls: Arc<TlsConfigurator>,
    /// The agent's bind address, which connections leave from when it names one
    /// (`shard::dial`).
    bind_addr: IpAddr,
    dropped: u64,
    /// Reused for encoding each message.
    frame: BytesMut,
}

impl PeerTransport {
    pub fn new(
        local_id: NodeId,
        faults: Arc<Faults>,
        tls: Arc<TlsConfigurator>,
        bind_addr: IpAddr,
    ) -> Self {
        PeerTransport {
            local_id,
            peers: HashMap::new(),
            faults,
            tls,
            bind_addr,
            dropped: 0,
            frame: BytesMut::with_capacity(64 * 1024),
        }
    }

    /// Messages dropped because a peer's outbox was full.
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
                stop_link(&sender.link);
            }
            keep
        });
        for (id, address) in wanted {
            if self.peers.contains_key(&id) {
                continue;
            }
            let link = Arc::new(PeerLink {
                outbox: Mutex::new(Outbox::default()),
                queued: Condvar::new(),
                stop: AtomicBool::new(false),
            });
            let thread_link = link.clone();
            let thread_address = address.to_string();
            let faults = self.faults.clone();
            let tls = self.tls.clone();
            let local_id = self.local_id;
            let bind_addr = self.bind_addr;
            let spawned = std::thread::Builder::new()
                .name(format!("praetor-peer-{id:x}"))
                .spawn(move || {
                    sender_loop(
                        local_id,
                        thread_address,
                        thread_link,
                        faults,
                        &tls,
                        bind_addr,
                    )
                });
            if let Err(e) = spawned {
                log::error!("raft: cannot start sender thread for peer {address}: {e}");
                continue;
            }
            self.peers.insert(
                id,
                PeerSender {
                    address: address.to_string(),
                    link,
                },
            );
        }
    }

    pub fn send(&mut self, to: NodeId, message: Message) {
        let Some(peer) = self.peers.get(&to) else {
            return;
        };
        let payload_len = payload_bytes(&message);
        let mut outbox = peer.link.lock();
        let peer_ip = outbox
            .stream
            .as_ref()
            .map(|(_, ip)| *ip)
            .or(outbox.tls.as_ref().map(|(_, ip)| *ip));
        if peer_ip.is_some_and(|ip| self.faults.is_blocked(ip)) {
            return;
        }
        let idle = outbox.queue.is_empty() && !outbox.writing;
        if idle && payload_len < DIRECT_PAYLOAD_BYTES_MAX {
            let tls_ready = outbox
                .tls
                .as_ref()
                .is_some_and(|(session, _)| !session.0.wants_write());
            if tls_ready {
                debug_assert!(outbox.stream.is_none());
                let payload = rmp_serde::to_vec(&(self.local_id, &message))
                    .expect("raft messages always encode");
                self.frame.clear();
                encode_frame(&mut self.frame, kind::RAFT_MESSAGE, 0, &payload);
                let (session, _) = outbox.tls.as_mut().expect("checked above");
                let (connection, socket) = &mut **session;
                // The session's buffer is unlimited (set at the handshake) and empty, so it
                // takes the whole frame; the records go out as far as the socket takes them.
                let buffered = connection.writer().write_all(&self.frame).is_ok();
                debug_assert!(buffered, "an unlimited TLS buffer takes every frame");
                while connection.wants_write() {
                    match connection.write_tls(&mut NonBlocking(socket)) {
                        Ok(_) => {}
                        // The socket is full or broken: the sender flushes or meets the error.
                        Err(_) => break,
                    }
                }
                if connection.wants_write() {
                    outbox.tls_flush_pending = true;
                    drop(outbox);
                    peer.link.queued.notify_one();
                }
                return;
            }
            if let Some((stream, _)) = &outbox.stream {
                // Nothing is ahead of this small message: encode and write it now, without
                // waiting.
                let payload = rmp_serde::to_vec(&(self.local_id, &message))
                    .expect("raft messages always encode");
                self.frame.clear();
                encode_frame(&mut self.frame, kind::RAFT_MESSAGE, 0, &payload);
                // An error counts as nothing written: the bytes go to the outbox, whose
                // writer meets the same error and reconnects.
                let sent = crate::shard::nonblocking::send_now(stream, &self.frame).unwrap_or(0);
                if sent == self.frame.len() {
                    return;
                }
                // The rest of a begun frame must follow it, whatever the bound says.
                let rest = self.frame[sent..].to_vec();
                outbox.queued_bytes += rest.len();
                outbox.queue.push_back(Pending::Bytes(rest));
                drop(outbox);
                peer.link.queued.notify_one();
                return;
            }
        }
        let charge = payload_len + MESSAGE_OVERHEAD_BYTES;
        if outbox.queued_bytes + charge > OUTBOX_BYTES_MAX {
            self.dropped += 1;
            return;
        }
        outbox.queued_bytes += charge;
        outbox.queue.push_back(Pending::Message(message));
        drop(outbox);
        peer.link.queued.notify_one();
    }

    pub fn shutdown(&mut self) {
        for (_, peer) in self.peers.drain() {
            stop_link(&peer.link);
        }
    }
}

fn stop_link(link: &PeerLink) {
    link.stop.store(true, Ordering::SeqCst);
    link.queued.notify_all();
}

fn resolve(address: &str) -> Option<SocketAddr> {
    address.to_socket_addrs().ok()?.next()
}

/// Connects to a peer (again after errors) and writes whatever the core queued, encoding
/// queued messages on this thread.
fn sender_loop(
    local_id: NodeId,
    address: String,
    link: Arc<PeerLink>,
    faults: Arc<Faults>,
    tls: &TlsConfigurator,
    bind_addr: IpAddr,
) {
    let mut backoff = BACKOFF_MIN;
    // The last handshake failure logged: a peer that keeps failing the same way is logged once.
    let mut last_failure = String::new();
    let mut batch = BytesMut::new();
    let mut taken: VecDeque<Pending> = VecDeque::new();
    while !link.stop.load(Ordering::SeqCst) {
        let Some(addr) = resolve(&address) else {
            std::thread::sleep(backoff);
            continue;
        };
        let source = crate::shard::dial::source_for(bind_addr, addr);
        let stream = match crate::shard::dial::connect_blocking(source, addr, CONNECT_TIMEOUT) {
            Ok(stream) => stream,
            Err(e) => {
                log::debug!("raft: cannot reach peer {address}: {e}");
                back_off(&link, &mut backoff);
                continue;
            }
        };
        let mut writer = match open_writer(stream, addr, &link, tls, &mut last_failure) {
            Ok(writer) => writer,
            Err(Retry::Now) => continue,
            Err(Retry::AfterBackoff) => {
                back_off(&link, &mut backoff);
                continue;
            }
        };
        backoff = BACKOFF_MIN;
        loop {
            if !take_queued(&link, &mut taken, &mut writer) {
                return;
            }
            encode_batch(&mut batch, &mut taken, local_id);
            if write_batch(&link, &faults, addr, &mut writer, &batch).is_err() {
                break;
            }
            if batch.capacity() > OUTBOX_BYTES_MAX / 16 {
                // Give back a buffer grown by a burst (snapshot chunks).
                batch = BytesMut::new();
            }
        }
    }
    let mut outbox = link.lock();
    outbox.stream = None;
    outbox.tls = None;
}

/// Whatever was queued for an unreachable peer is stale (the core resends): dropped, then the
/// sender waits before dialing again, twice as long each time up to [`BACKOFF_MAX`].
fn back_off(link: &PeerLink, backoff: &mut Duration) {
    clear_queue(&mut link.lock());
    std::thread::sleep(*backoff);
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
}

/// Why a fresh connection did not become a writer.
enum Retry {
    /// The protocol byte did not go out: dial again at once.
    Now,
    /// The TLS handshake failed: back off first.
    AfterBackoff,
}

/// Makes a fresh connection the link's: the raft protocol byte on a plain one (the core may
/// then write to it directly), or a TLS session left in the outbox. A handshake failure is
/// logged once per distinct reason.
fn open_writer(
    stream: TcpStream,
    addr: SocketAddr,
    link: &PeerLink,
    tls: &TlsConfigurator,
    last_failure: &mut String,
) -> Result<PeerWriter, Retry> {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    match tls.rpc_client() {
        None => {
            let mut stream = stream;
            if stream.write_all(&[PROTOCOL_RAFT]).is_err() {
                return Err(Retry::Now);
            }
            let stream = Arc::new(stream);
            // Queued while unconnected: whole messages only (direct writes need a
            // connection).
            link.lock().stream = Some((stream.clone(), addr.ip()));
            Ok(PeerWriter::Plain(stream))
        }
        Some((config, server_name)) => match tls_handshake(stream, config, server_name) {
            Ok(session) => {
                last_failure.clear();
                let mut outbox = link.lock();
                outbox.tls = Some((Box::new(session), addr.ip()));
                outbox.tls_flush_pending = false;
                Ok(PeerWriter::Tls(None))
            }
            Err(reason) => {
                let line = format!("tls: internal_rpc handshake with {addr} failed: {reason}");
                if line != *last_failure {
                    log::warn!("{line}");
                    *last_failure = line;
                }
                Err(Retry::AfterBackoff)
            }
        },
    }
}

/// Waits for queued work and takes all of it into `taken`, marking the link `writing` (a TLS
/// writer takes the session along). Returns false once the link is stopped, leaving it
/// unconnected.
fn take_queued(link: &PeerLink, taken: &mut VecDeque<Pending>, writer: &mut PeerWriter) -> bool {
    let mut outbox = link.lock();
    while outbox.queue.is_empty() && !outbox.tls_flush_pending {
        if link.stop.load(Ordering::SeqCst) {
            outbox.stream = None;
            outbox.tls = None;
            return false;
        }
        outbox = link
            .queued
            .wait_timeout(outbox, IDLE_CHECK_INTERVAL)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .0;
    }
    std::mem::swap(taken, &mut outbox.queue);
    outbox.queued_bytes = 0;
    outbox.writing = true;
    outbox.tls_flush_pending = false;
    if let PeerWriter::Tls(held) = writer {
        // While `writing`, the core queues instead of touching the session.
        *held = outbox.tls.take().map(|(session, _)| session);
        debug_assert!(held.is_some(), "an idle TLS sender left its session");
    }
    true
}

/// Encodes the taken work into one batch: bytes as they are, messages framed.
fn encode_batch(batch: &mut BytesMut, taken: &mut VecDeque<Pending>, local_id: NodeId) {
    batch.clear();
    for pending in taken.drain(..) {
        match pending {
            Pending::Bytes(bytes) => batch.extend_from_slice(&bytes),
            Pending::Message(message) => {
                let payload =
                    rmp_serde::to_vec(&(local_id, &message)).expect("raft messages always encode");
                encode_frame(batch, kind::RAFT_MESSAGE, 0, &payload);
            }
        }
    }
}

/// Writes one batch and hands the link back to the core. A failed write drops the
/// connection and the queue.
fn write_batch(
    link: &PeerLink,
    faults: &Faults,
    addr: SocketAddr,
    writer: &mut PeerWriter,
    batch: &[u8],
) -> std::io::Result<()> {
    // Traffic to a blocked peer is dropped by closing the connection: the batch may begin
    // with the rest of a frame the core started, which must not be followed by anything else
    // on this connection.
    let result = if faults.is_blocked(addr.ip()) {
        Err(std::io::ErrorKind::ConnectionAborted.into())
    } else {
        writer.write_all(batch)
    };
    let mut outbox = link.lock();
    outbox.writing = false;
    if result.is_err() {
        // The connection may end in the middle of a frame: start the next one clean.
        outbox.stream = None;
        outbox.tls = None;
        clear_queue(&mut outbox);
        return result;
    }
    if let PeerWriter::Tls(held) = writer {
        outbox.tls = held.take().map(|session| (session, addr.ip()));
    }
    Ok(())
}

/// Where a sender thread writes: the socket the core also writes to directly, or the TLS
/// session it holds while writing a batch (`None` while the session rests in the outbox).
enum PeerWriter {
    Plain(Arc<TcpStream>),
    Tls(Option<Box<TlsSession>>),
}

impl PeerWriter {
    /// Writes `bytes`, and for TLS first whatever records the core left buffered.
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            PeerWriter::Plain(stream) => (&**stream).write_all(bytes),
            PeerWriter::Tls(Some(session)) => {
                let (connection, socket) = &mut **session;
                tls_write_all(connection, socket, bytes)
            }
            PeerWriter::Tls(None) => Err(std::io::ErrorKind::NotConnected.into()),
        }
    }
}

/// A socket seen as a writer that never blocks: a full socket is `WouldBlock`.
struct NonBlocking<'a>(&'a TcpStream);

impl Write for NonBlocking<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match crate::shard::nonblocking::send_now(self.0, bytes)? {
            0 if !bytes.is_empty() => Err(std::io::ErrorKind::WouldBlock.into()),
            sent => Ok(sent),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Encrypts `bytes` and writes the records with blocking writes. Never reads: the stream
/// carries Raft one way, and what the peer sends back (session tickets) is left unread.
fn tls_write_all(
    connection: &mut rustls::ClientConnection,
    socket: &mut TcpStream,
    bytes: &[u8],
) -> std::io::Result<()> {
    let mut rest = bytes;
    loop {
        // Records buffered earlier (by the core's non-blocking pushes) go first.
        while connection.wants_write() {
            connection.write_tls(socket)?;
        }
        if rest.is_empty() {
            return Ok(());
        }
        let taken = connection.writer().write(rest)?;
        rest = &rest[taken..];
    }
}

/// Dials TLS on a connected socket: the TLS byte, the handshake (bounded by the socket's
/// timeouts), then the Raft byte inside the session. The error is a readable reason.
fn tls_handshake(
    mut socket: TcpStream,
    config: Arc<rustls::ClientConfig>,
    server_name: rustls::pki_types::ServerName<'static>,
) -> Result<(rustls::ClientConnection, TcpStream), String> {
    let io_error = |e: std::io::Error| crate::tls::stream::describe_io_error(&e);
    socket
        .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(io_error)?;
    socket.write_all(&[rpc_type::TLS]).map_err(io_error)?;
    let mut connection = rustls::ClientConnection::new(config, server_name)
        .map_err(|e| crate::tls::verify::describe_error(&e))?;
    while connection.is_handshaking() {
        match connection.complete_io(&mut socket) {
            Ok((0, 0)) => return Err("the peer closed the connection during the handshake".into()),
            Ok(_) => {}
            Err(e) => return Err(io_error(e)),
        }
    }
    tls_write_all(&mut connection, &mut socket, &[PROTOCOL_RAFT]).map_err(io_error)?;
    // The core thread encrypts a whole frame at once into an idle session (see `send`).
    connection.set_buffer_limit(None);
    Ok((connection, socket))
}

fn clear_queue(outbox: &mut Outbox) {
    outbox.queue.clear();
    outbox.queued_bytes = 0;
}
