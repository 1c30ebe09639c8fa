//! The gossip I/O driver: runs the pure [`Gossip`] core on a monoio runtime (the agent
//! spawns it on shard 0). It owns the UDP socket and TCP listener on the gossip port,
//! feeds packets, streams, timers and commands into the core, and carries out its
//! outputs. The rest of the agent talks to it through [`GossipHandle`], which is
//! `Send + Sync + Clone`: member lists and coordinates are lock-free snapshots
//! (arc-swap), requests go over a channel and are answered asynchronously, and
//! membership/user events arrive on a bounded channel.
//!
//! A WAN pool federated through mesh gateways sends what goes to members of other
//! datacenters through [`GatewayRoutes`] instead of its own sockets.
//!
//! Invariants: the core is only touched from the driver's thread (it lives in a
//! `RefCell` borrowed for the duration of one synchronous call, never across an
//! await); every TCP exchange is bounded by `tcp_timeout` and by the stream size limit
//! of the wire format; no socket operation blocks the shard.

use super::gossip_gateways::{GatewayRoutes, GatewaySettings, Route};
use crate::consul::metrics::Counter;
use crate::telemetry;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::udp::UdpSocket;
use monoio::net::{TcpListener, TcpStream};
use rand::Rng;

use crate::gossip::coordinate::Coordinate;
use crate::gossip::{
    Gossip, GossipConfig, GossipEvent, KeyOp, KeyOpResult, MemberInfo, Output, UserEvent,
};

/// Largest UDP datagram read (the IP limit; memberlist packets are ~1400 bytes).
const UDP_DATAGRAM_BYTES_MAX: usize = 65_536;
/// TCP read chunk.
const STREAM_READ_CHUNK_BYTES: usize = 64 * 1024;
/// How often, at most, the coordinate snapshot is rebuilt.
const COORDINATE_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(1);

/// Why a request through the handle failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GossipError {
    /// The driver is not running (never started, shut down, or failed to bind).
    Stopped,
    /// The request was refused or failed; the text says why.
    Failed(String),
}

impl std::fmt::Display for GossipError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GossipError::Stopped => write!(f, "gossip driver is not running"),
            GossipError::Failed(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for GossipError {}

/// Local keyring changes (this node only; [`KeyOp`] goes cluster-wide).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalKeyOp {
    Install(Vec<u8>),
    Use(Vec<u8>),
    Remove(Vec<u8>),
}

enum Command {
    /// Addresses to join, the names some were given (`name/address`), whether to ignore
    /// old user events, and where the result goes.
    Join(
        Vec<SocketAddr>,
        Vec<(SocketAddr, String)>,
        bool,
        flume::Sender<Result<usize, GossipError>>,
    ),
    Leave(flume::Sender<()>),
    ForceLeave(String, bool, flume::Sender<()>),
    UserEvent(
        String,
        Vec<u8>,
        bool,
        flume::Sender<Result<(), GossipError>>,
    ),
    /// An operation, the relay factor of its answers, and where its result goes.
    KeyOp(KeyOp, u8, flume::Sender<KeyOpResult>),
    LocalKey(LocalKeyOp, flume::Sender<Result<(), GossipError>>),
    SetTags(
        std::collections::BTreeMap<String, String>,
        flume::Sender<Result<(), GossipError>>,
    ),
    Shutdown,
}

struct Shared {
    local_name: String,
    default_port: u16,
    members: ArcSwap<Vec<MemberInfo>>,
    coordinates: ArcSwap<HashMap<String, Coordinate>>,
    local_coordinate: ArcSwap<Coordinate>,
    keys: ArcSwap<Vec<Vec<u8>>>,
    local_addr: ArcSwap<Option<SocketAddr>>,
    commands: flume::Sender<Command>,
    events: flume::Receiver<GossipEvent>,
    /// User events only, so that a consumer of membership events cannot swallow them.
    user_events: flume::Receiver<UserEvent>,
    dropped_events: AtomicU64,
    /// A graceful leave finished: leaving again (SIGTERM after `/v1/agent/leave`) is done.
    left: AtomicBool,
}

/// The agent's handle on the gossip pool. Cheap to clone; usable from any thread.
#[derive(Clone)]
pub struct GossipHandle {
    shared: Arc<Shared>,
}

/// How to run one gossip pool (LAN or WAN).
#[derive(Debug, Clone)]
pub struct DriverConfig {
    pub gossip: GossipConfig,
    /// Address to bind UDP and TCP on. Port 0 picks a free port and advertises it.
    pub bind: SocketAddr,
    /// Capacity of the event channel; events beyond it are dropped and counted.
    pub event_capacity: usize,
}

impl DriverConfig {
    pub fn new(gossip: GossipConfig, bind: SocketAddr) -> Self {
        DriverConfig {
            gossip,
            bind,
            event_capacity: 4096,
        }
    }
}

/// The driver future's owner: call [`GossipDriver::run`] on a monoio runtime.
pub struct GossipDriver {
    config: DriverConfig,
    /// The pool's UDP socket and TCP listener when [`GossipDriver::bind`] bound them ahead
    /// of [`GossipDriver::run`].
    sockets: Option<(std::net::UdpSocket, std::net::TcpListener)>,
    shared: Arc<Shared>,
    commands: flume::Receiver<Command>,
    events: flume::Sender<GossipEvent>,
    user_events: flume::Sender<UserEvent>,
    /// How members of other datacenters are reached through mesh gateways, when they are.
    gateways: Option<GatewaySettings>,
}

/// Creates a handle and the driver that serves it.
pub fn gossip_pair(config: DriverConfig) -> (GossipHandle, GossipDriver) {
    let (cmd_tx, cmd_rx) = flume::unbounded();
    let (ev_tx, ev_rx) = flume::bounded(config.event_capacity.max(1));
    let (user_tx, user_rx) = flume::bounded(config.event_capacity.max(1));
    let shared = Arc::new(Shared {
        local_name: config.gossip.node_name.clone(),
        default_port: config.gossip.advertise_port,
        members: ArcSwap::from_pointee(Vec::new()),
        coordinates: ArcSwap::from_pointee(HashMap::new()),
        local_coordinate: ArcSwap::from_pointee(crate::gossip::coordinate::new_coordinate(
            &Default::default(),
        )),
        keys: ArcSwap::from_pointee(config.gossip.keys.clone()),
        local_addr: ArcSwap::from_pointee(None),
        commands: cmd_tx,
        events: ev_rx,
        user_events: user_rx,
        dropped_events: AtomicU64::new(0),
        left: AtomicBool::new(false),
    });
    let handle = GossipHandle {
        shared: shared.clone(),
    };
    (
        handle,
        GossipDriver {
            config,
            sockets: None,
            shared,
            commands: cmd_rx,
            events: ev_tx,
            user_events: user_tx,
            gateways: None,
        },
    )
}

/// A join address's name, if it gives one (memberlist's `name/address`), and the
/// addresses it resolves to.
type JoinAddress = (Option<String>, Vec<SocketAddr>);

fn parse_join_addr(s: &str, default_port: u16) -> Result<JoinAddress, GossipError> {
    // memberlist accepts "name/addr": the name says which node answers there, which a
    // pool federated through gateways needs to route the join.
    let (name, s) = match s.rsplit_once('/') {
        Some((name, address)) => (Some(name.to_string()).filter(|n| !n.is_empty()), address),
        None => (None, s),
    };
    parse_join_host(s, default_port).map(|addresses| (name, addresses))
}

fn parse_join_host(s: &str, default_port: u16) -> Result<Vec<SocketAddr>, GossipError> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(vec![a]);
    }
    if let Ok(ip) = s.trim_matches(|c| c == '[' || c == ']').parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, default_port)]);
    }
    let with_port = if s.contains(':') {
        s.to_owned()
    } else {
        format!("{s}:{default_port}")
    };
    with_port
        .to_socket_addrs()
        .map(|i| i.collect())
        .map_err(|e| GossipError::Failed(format!("failed to resolve {s}: {e}")))
}

impl GossipHandle {
    /// This node's name.
    pub fn local_name(&self) -> &str {
        &self.shared.local_name
    }

    /// The address the driver bound (once running).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        **self.shared.local_addr.load()
    }

    /// serf `Members()`: every member including this node, sorted by name.
    pub fn members(&self) -> Arc<Vec<MemberInfo>> {
        self.shared.members.load_full()
    }

    /// This node's Vivaldi coordinate.
    pub fn local_coordinate(&self) -> Arc<Coordinate> {
        self.shared.local_coordinate.load_full()
    }

    /// The latest coordinate heard from each node (and ours).
    pub fn coordinates(&self) -> Arc<HashMap<String, Coordinate>> {
        self.shared.coordinates.load_full()
    }

    /// Keys installed on this node, primary first.
    pub fn local_keys(&self) -> Arc<Vec<Vec<u8>>> {
        self.shared.keys.load_full()
    }

    /// Membership and user events. Every clone of the handle shares one receiver.
    pub fn events(&self) -> flume::Receiver<GossipEvent> {
        self.shared.events.clone()
    }

    /// User events alone, on a channel of their own (also delivered on [`Self::events`]).
    /// Every clone of the handle shares one receiver.
    pub fn user_events(&self) -> flume::Receiver<UserEvent> {
        self.shared.user_events.clone()
    }

    /// serf's estimated round-trip time between two nodes from their Vivaldi
    /// coordinates, if both are known (this node's own name included).
    pub fn rtt_between(&self, a: &str, b: &str) -> Option<Duration> {
        let coordinates = self.coordinates();
        let local = self.local_coordinate();
        let lookup = |name: &str| {
            if name == self.local_name() {
                Some((*local).clone())
            } else {
                coordinates.get(name).cloned()
            }
        };
        let seconds = crate::gossip::coordinate::distance_seconds(&lookup(a)?, &lookup(b)?);
        Duration::try_from_secs_f64(seconds).ok()
    }

    /// Events dropped because nobody drained the channel.
    pub fn dropped_events(&self) -> u64 {
        self.shared.dropped_events.load(Ordering::Relaxed)
    }

    fn send(&self, c: Command) -> Result<(), GossipError> {
        self.shared
            .commands
            .send(c)
            .map_err(|_| GossipError::Stopped)
    }

    /// Joins through the given addresses (`ip`, `ip:port`, `host:port`, `name/ip:port`);
    /// returns how many were contacted successfully.
    /// Like Consul (and `serf join` without `-replay`), user events fired in the pool
    /// before this join are not replayed; see [`GossipHandle::join_replay`].
    pub async fn join(&self, addrs: &[String]) -> Result<usize, GossipError> {
        self.join_inner(addrs, true).await
    }

    /// `serf join -replay`: also deliver the pool's recent user events.
    pub async fn join_replay(&self, addrs: &[String]) -> Result<usize, GossipError> {
        self.join_inner(addrs, false).await
    }

    async fn join_inner(&self, addrs: &[String], ignore_old: bool) -> Result<usize, GossipError> {
        let mut resolved = Vec::new();
        let mut named = Vec::new();
        for a in addrs {
            let (name, addresses) = parse_join_addr(a, self.shared.default_port)?;
            if let Some(name) = name {
                named.extend(addresses.iter().map(|address| (*address, name.clone())));
            }
            resolved.extend(addresses);
        }
        let (tx, rx) = flume::bounded(1);
        self.send(Command::Join(resolved, named, ignore_old, tx))?;
        rx.recv_async().await.map_err(|_| GossipError::Stopped)?
    }

    /// Graceful leave: announce the intent and our departure, keep answering while the
    /// news spreads (the leave propagation delay), then go silent.
    pub async fn leave(&self) -> Result<(), GossipError> {
        let (tx, rx) = flume::bounded(1);
        self.send(Command::Leave(tx))?;
        rx.recv_async().await.map_err(|_| GossipError::Stopped)
    }

    /// [`leave`](Self::leave) from a thread outside the runtime (the main thread at
    /// shutdown), waiting at most `timeout`. `Ok(false)`: the leave did not finish in time.
    pub fn leave_blocking(&self, timeout: Duration) -> Result<bool, GossipError> {
        if self.shared.left.load(Ordering::SeqCst) {
            return Ok(true);
        }
        let (tx, rx) = flume::bounded(1);
        self.send(Command::Leave(tx))?;
        match rx.recv_timeout(timeout) {
            Ok(()) => Ok(true),
            Err(flume::RecvTimeoutError::Timeout) => Ok(false),
            Err(flume::RecvTimeoutError::Disconnected) => Err(GossipError::Stopped),
        }
    }

    /// Consul force-leave: mark a failed node left (and forget it with `prune`).
    pub async fn force_leave(&self, node: &str, prune: bool) -> Result<(), GossipError> {
        let (tx, rx) = flume::bounded(1);
        self.send(Command::ForceLeave(node.to_owned(), prune, tx))?;
        rx.recv_async().await.map_err(|_| GossipError::Stopped)
    }

    /// Fires a serf user event to the whole pool.
    pub async fn fire_user_event(
        &self,
        name: &str,
        payload: &[u8],
        coalesce: bool,
    ) -> Result<(), GossipError> {
        let (tx, rx) = flume::bounded(1);
        self.send(Command::UserEvent(
            name.to_owned(),
            payload.to_vec(),
            coalesce,
            tx,
        ))?;
        rx.recv_async().await.map_err(|_| GossipError::Stopped)?
    }

    /// A cluster-wide keyring operation (serf's `_serf_*-key` queries), as Consul's
    /// `/v1/operator/keyring` and `consul keyring` use.
    pub async fn keyring(&self, op: KeyOp) -> Result<KeyOpResult, GossipError> {
        self.keyring_relayed(op, 0).await
    }

    /// [`GossipHandle::keyring`] whose answers `relay_factor` other members relay too
    /// (serf's relay factor, as `?relay-factor` asks).
    pub async fn keyring_relayed(
        &self,
        op: KeyOp,
        relay_factor: u8,
    ) -> Result<KeyOpResult, GossipError> {
        let (tx, rx) = flume::bounded(1);
        self.send(Command::KeyOp(op, relay_factor, tx))?;
        rx.recv_async().await.map_err(|_| GossipError::Stopped)
    }

    /// Changes this node's keyring only.
    pub async fn local_keyring(&self, op: LocalKeyOp) -> Result<(), GossipError> {
        let (tx, rx) = flume::bounded(1);
        self.send(Command::LocalKey(op, tx))?;
        rx.recv_async().await.map_err(|_| GossipError::Stopped)?
    }

    /// Replaces this node's tags and announces them.
    pub async fn set_tags(
        &self,
        tags: std::collections::BTreeMap<String, String>,
    ) -> Result<(), GossipError> {
        let (tx, rx) = flume::bounded(1);
        self.send(Command::SetTags(tags, tx))?;
        rx.recv_async().await.map_err(|_| GossipError::Stopped)?
    }

    /// Stops the driver without leaving (as a crash would look to others).
    pub fn shutdown(&self) {
        let _ = self.send(Command::Shutdown);
    }
}

struct State {
    core: RefCell<Gossip>,
    origin: Instant,
    udp: UdpSocket,
    shared: Arc<Shared>,
    events: flume::Sender<GossipEvent>,
    user_events: flume::Sender<UserEvent>,
    wake: flume::Sender<()>,
    tcp_timeout: Duration,
    /// The pool's bind address, which TCP exchanges leave from when it names one
    /// (`shard::dial`).
    bind_ip: IpAddr,
    members_version: Cell<u64>,
    coordinates_at: Cell<Option<Instant>>,
    joins: RefCell<HashMap<u64, flume::Sender<Result<usize, GossipError>>>>,
    leaves: RefCell<HashMap<u64, flume::Sender<()>>>,
    key_ops: RefCell<HashMap<u64, flume::Sender<KeyOpResult>>>,
    next_request: Cell<u64>,
    gateways: Option<Rc<GatewayRoutes>>,
}

impl State {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// The gateway route for a member of another datacenter at `to`, when this pool
    /// federates through gateways.
    fn gateway_route(&self, to: SocketAddr) -> Option<(Rc<GatewayRoutes>, Route)> {
        let gateways = self.gateways.as_ref()?;
        let core = self.core.borrow();
        let route = gateways.route(to, core.sender_name(to))?;
        Some((gateways.clone(), route))
    }

    fn request_id(&self) -> u64 {
        let id = self.next_request.get() + 1;
        self.next_request.set(id);
        id
    }

    fn publish(&self) {
        let core = self.core.borrow();
        if core.members_version() != self.members_version.get() {
            self.members_version.set(core.members_version());
            let members = core.members();
            if let Some(gateways) = &self.gateways {
                gateways.set_members(
                    members
                        .iter()
                        .map(|m| (SocketAddr::new(m.addr, m.port), m.name.as_str())),
                );
            }
            self.shared.members.store(Arc::new(members));
        }
        let stale = self
            .coordinates_at
            .get()
            .is_none_or(|t| t.elapsed() >= COORDINATE_SNAPSHOT_INTERVAL);
        if stale {
            self.coordinates_at.set(Some(Instant::now()));
            self.shared
                .coordinates
                .store(Arc::new(core.coordinates().clone()));
            self.shared
                .local_coordinate
                .store(Arc::new(core.local_coordinate()));
        }
        if **self.shared.keys.load() != core.keys() {
            self.shared.keys.store(Arc::new(core.keys().to_vec()));
        }
    }
}

/// Carries out everything the core produced, then refreshes the snapshots.
async fn flush(st: &Rc<State>) {
    loop {
        let outputs = st.core.borrow_mut().drain();
        if outputs.is_empty() {
            break;
        }
        for o in outputs {
            match o {
                Output::Packet { to, bytes } => {
                    telemetry::add(Counter::MemberlistUdpSent, bytes.len() as u64);
                    if let Some((gateways, route)) = st.gateway_route(to) {
                        gateways.send_packet(route, &bytes);
                        continue;
                    }
                    // UDP is best effort; a failed send is a lost packet to SWIM.
                    let _ = st.udp.send_to(bytes, to).await;
                }
                Output::Stream { id, to, bytes } => {
                    telemetry::incr(Counter::MemberlistTcpConnect);
                    telemetry::add(Counter::MemberlistTcpSent, bytes.len() as u64);
                    let st2 = st.clone();
                    let through = st.gateway_route(to);
                    monoio::spawn(async move {
                        let reply = match through {
                            Some((gateways, route)) => {
                                gateway_exchange(&gateways, &route, bytes, st2.tcp_timeout).await
                            }
                            None => {
                                let source = crate::shard::dial::source_for(st2.bind_ip, to);
                                stream_exchange(source, to, bytes, st2.tcp_timeout).await
                            }
                        };
                        let now = st2.now();
                        match &reply {
                            Ok(b) => st2.core.borrow_mut().handle_stream_reply(now, id, Ok(b)),
                            Err(e) => {
                                st2.core
                                    .borrow_mut()
                                    .handle_stream_reply(now, id, Err(e.clone()))
                            }
                        }
                        flush(&st2).await;
                    });
                }
                Output::Event(e) => {
                    telemetry::incr(match &e {
                        GossipEvent::MemberJoin(_) => Counter::SerfMemberJoin,
                        GossipEvent::MemberLeave(_) | GossipEvent::MemberReap(_) => {
                            Counter::SerfMemberLeft
                        }
                        GossipEvent::MemberFailed(_) => Counter::SerfMemberFailed,
                        GossipEvent::MemberUpdate(_) => Counter::SerfMemberUpdate,
                        GossipEvent::User(_) => Counter::SerfEvents,
                        GossipEvent::Query(_) => Counter::SerfQueries,
                    });
                    if let GossipEvent::User(user) = &e {
                        if st.user_events.try_send(user.clone()).is_err() {
                            st.shared.dropped_events.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if st.events.try_send(e).is_err() {
                        st.shared.dropped_events.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Output::JoinDone {
                    request,
                    joined,
                    errors,
                } => {
                    if let Some(tx) = st.joins.borrow_mut().remove(&request) {
                        let r = if joined > 0 || errors.is_empty() {
                            Ok(joined)
                        } else {
                            Err(GossipError::Failed(errors.join("; ")))
                        };
                        let _ = tx.send(r);
                    }
                }
                Output::LeaveDone { request } => {
                    st.shared.left.store(true, Ordering::SeqCst);
                    if let Some(tx) = st.leaves.borrow_mut().remove(&request) {
                        let _ = tx.send(());
                    }
                }
                Output::KeyOpDone { request, result } => {
                    if let Some(tx) = st.key_ops.borrow_mut().remove(&request) {
                        let _ = tx.send(result);
                    }
                }
            }
        }
    }
    st.publish();
    // The core may have a new, earlier deadline.
    let _ = st.wake.try_send(());
}

/// Reads one complete stream message; `accepting` is true on the listening side.
async fn read_frame<S: AsyncReadRent>(stream: &mut S, accepting: bool) -> Result<Vec<u8>, String> {
    let mut acc: Vec<u8> = Vec::new();
    let mut chunk = Vec::with_capacity(STREAM_READ_CHUNK_BYTES);
    loop {
        match Gossip::stream_frame_len(&acc, accepting) {
            Ok(Some(n)) => {
                acc.truncate(n);
                return Ok(acc);
            }
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        let (res, buf) = stream.read(chunk).await;
        chunk = buf;
        match res {
            Ok(0) => return Err("connection closed before a complete message".to_owned()),
            Ok(n) => {
                acc.extend_from_slice(&chunk[..n]);
                chunk.clear();
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

async fn stream_exchange(
    source: Option<IpAddr>,
    to: SocketAddr,
    bytes: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let work = async move {
        let mut s = crate::shard::dial::connect(source, to)
            .await
            .map_err(|e| e.to_string())?;
        let (res, _) = s.write_all(bytes).await;
        res.map_err(|e| e.to_string())?;
        read_frame(&mut s, false).await
    };
    match monoio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(format!("stream to {to} timed out")),
    }
}

/// A stream exchange with a member of another datacenter through a mesh gateway.
async fn gateway_exchange(
    gateways: &GatewayRoutes,
    route: &Route,
    bytes: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let work = async {
        let mut session = gateways.open_stream(route, bytes).await?;
        read_frame(&mut session, false).await
    };
    match monoio::time::timeout(timeout, work).await {
        Ok(reply) => reply,
        Err(_) => Err(format!("stream to {} timed out", route.name)),
    }
}

async fn serve_connection(st: Rc<State>, mut stream: TcpStream, from: SocketAddr) {
    let timeout = st.tcp_timeout;
    let work = async {
        let frame = read_frame(&mut stream, true).await?;
        let now = st.now();
        let reply = st.core.borrow_mut().handle_stream(now, from, &frame);
        flush(&st).await;
        if let Some(reply) = reply {
            let (res, _) = stream.write_all(reply).await;
            res.map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    };
    let _ = monoio::time::timeout(timeout, work).await;
}

/// Binds the pool's UDP socket and, on the port it got, its TCP listener.
fn bind_sockets(addr: SocketAddr) -> io::Result<(std::net::UdpSocket, std::net::TcpListener)> {
    let udp = std::net::UdpSocket::bind(addr)?;
    let tcp = std::net::TcpListener::bind(udp.local_addr()?)?;
    udp.set_nonblocking(true)?;
    tcp.set_nonblocking(true)?;
    Ok((udp, tcp))
}

impl GossipDriver {
    /// Binds the pool's port (UDP and TCP) now, before the agent starts anything, so that
    /// a port another process holds stops the agent at start with the holder named, as it
    /// stops Consul, instead of the agent running on without the pool. A port a killed
    /// agent's sockets still hold is waited for (`shard::exclusive::bind_alone`). Returns
    /// the bound address (the port chosen when the configured one is 0).
    pub fn bind(&mut self, what: &str) -> Result<SocketAddr, String> {
        let addr = self.config.bind;
        let failed = |e: String| format!("cannot listen for {what} on {addr}: {e}");
        let udp_free = |addr| {
            crate::shard::exclusive::bind_alone(
                addr,
                crate::shard::exclusive::Transport::Udp,
                || std::net::UdpSocket::bind(addr),
            )
        };
        let sockets = if addr.port() == 0 {
            bind_sockets(addr).map_err(|e| failed(e.to_string()))?
        } else {
            // Both protocols are checked first, so the error names the holder of either.
            drop(udp_free(addr).map_err(failed)?);
            crate::shard::exclusive::probe(addr, crate::shard::exclusive::Transport::Tcp)
                .map_err(failed)?;
            bind_sockets(addr).map_err(|e| failed(e.to_string()))?
        };
        let bound = sockets.0.local_addr().map_err(|e| failed(e.to_string()))?;
        self.sockets = Some(sockets);
        Ok(bound)
    }

    /// The address [`GossipDriver::bind`] bound, if it ran.
    pub fn bound_address(&self) -> Option<SocketAddr> {
        let (udp, _) = self.sockets.as_ref()?;
        udp.local_addr().ok()
    }

    /// Sends what goes to members of other datacenters through mesh gateways (a WAN pool
    /// with `connect.enable_mesh_gateway_wan_federation`).
    pub fn route_through_gateways(&mut self, settings: GatewaySettings) {
        debug_assert!(self.gateways.is_none(), "routed through gateways once");
        self.gateways = Some(settings);
    }

    /// Serves the pool until [`GossipHandle::shutdown`] (after a completed
    /// [`GossipHandle::leave`] the node stays bound but silent), on the sockets
    /// [`GossipDriver::bind`] bound or, without it, on sockets bound now. Must run on a
    /// monoio runtime with timers enabled.
    pub async fn run(self) -> io::Result<()> {
        let GossipDriver {
            mut config,
            sockets,
            shared,
            commands,
            events,
            user_events,
            gateways,
        } = self;
        let (udp, listener) = match sockets {
            Some(sockets) => sockets,
            None => bind_sockets(config.bind)?,
        };
        let udp = UdpSocket::from_std(udp)?;
        let listener = TcpListener::from_std(listener)?;
        let bound = udp.local_addr()?;
        if config.gossip.advertise_port == 0 {
            config.gossip.advertise_port = bound.port();
        }
        shared.local_addr.store(Arc::new(Some(bound)));
        let mut seed = [0u8; 32];
        rand::rng().fill_bytes(&mut seed);
        let origin = Instant::now();
        let core = Gossip::new(config.gossip.clone(), seed, Duration::ZERO)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let (wake_tx, wake_rx) = flume::bounded(1);
        let st = Rc::new(State {
            core: RefCell::new(core),
            origin,
            udp,
            shared,
            events,
            user_events,
            wake: wake_tx,
            tcp_timeout: config.gossip.tcp_timeout,
            bind_ip: config.bind.ip(),
            members_version: Cell::new(u64::MAX),
            coordinates_at: Cell::new(None),
            joins: RefCell::new(HashMap::new()),
            leaves: RefCell::new(HashMap::new()),
            key_ops: RefCell::new(HashMap::new()),
            next_request: Cell::new(0),
            gateways: gateways.map(|settings| Rc::new(GatewayRoutes::new(settings))),
        });
        st.publish();
        monoio::select! {
            _ = receive_packets(&st) => {},
            _ = accept_streams(&st, &listener) => {},
            _ = run_timers(&st, &wake_rx) => {},
            _ = serve_commands(&st, &commands) => {},
        }
        st.shared.local_addr.store(Arc::new(None));
        Ok(())
    }
}

/// Hands every datagram to the core, then sends what it answers.
async fn receive_packets(st: &Rc<State>) {
    let mut buf: Vec<u8> = Vec::with_capacity(UDP_DATAGRAM_BYTES_MAX);
    loop {
        let (res, b) = st.udp.recv_from(buf).await;
        buf = b;
        if let Ok((n, from)) = res {
            telemetry::add(Counter::MemberlistUdpReceived, n as u64);
            let now = st.now();
            st.core.borrow_mut().handle_packet(now, from, &buf[..n]);
            flush(st).await;
        }
        // monoio reads into the vector's capacity, so no reset is needed.
    }
}

/// Serves each accepted stream (push-pull, TCP pings) on its own task.
async fn accept_streams(st: &Rc<State>, listener: &TcpListener) {
    loop {
        if let Ok((stream, from)) = listener.accept().await {
            telemetry::incr(Counter::MemberlistTcpAccept);
            monoio::spawn(serve_connection(st.clone(), stream, from));
        }
    }
}

/// Ticks the core at its next deadline, waking early when a command may have moved it.
async fn run_timers(st: &Rc<State>, wake_rx: &flume::Receiver<()>) {
    loop {
        let deadline = st.core.borrow().next_deadline();
        let wait = deadline
            .map(|d| d.saturating_sub(st.now()))
            .unwrap_or(Duration::from_secs(1));
        monoio::select! {
            _ = monoio::time::sleep(wait) => {},
            _ = wake_rx.recv_async() => {},
        }
        let now = st.now();
        let due = st.core.borrow().next_deadline().is_some_and(|d| d <= now);
        if due {
            st.core.borrow_mut().tick(now);
            flush(st).await;
        }
    }
}

/// Applies the handle's commands in order until `Shutdown` (or every handle is gone).
async fn serve_commands(st: &Rc<State>, commands: &flume::Receiver<Command>) {
    while let Ok(cmd) = commands.recv_async().await {
        if matches!(cmd, Command::Shutdown) {
            break;
        }
        apply_command(st, cmd);
        flush(st).await;
    }
}

/// Starts one command on the core: requests that finish later park their reply channel under
/// a request ID; the rest reply now.
fn apply_command(st: &Rc<State>, cmd: Command) {
    let now = st.now();
    match cmd {
        Command::Shutdown => {}
        Command::Join(addrs, named, ignore_old, tx) => {
            if let Some(gateways) = &st.gateways {
                for (address, name) in named {
                    gateways.add_hint(address, name);
                }
            }
            let id = st.request_id();
            st.joins.borrow_mut().insert(id, tx);
            st.core.borrow_mut().join(now, id, &addrs, ignore_old);
        }
        Command::Leave(tx) => {
            let id = st.request_id();
            st.leaves.borrow_mut().insert(id, tx);
            st.core.borrow_mut().leave(now, id);
        }
        Command::ForceLeave(node, prune, tx) => {
            st.core.borrow_mut().force_leave(now, &node, prune);
            let _ = tx.send(());
        }
        Command::UserEvent(name, payload, coalesce, tx) => {
            let r = st
                .core
                .borrow_mut()
                .user_event(now, &name, &payload, coalesce);
            let _ = tx.send(r.map_err(GossipError::Failed));
        }
        Command::KeyOp(op, relay_factor, tx) => {
            let id = st.request_id();
            st.key_ops.borrow_mut().insert(id, tx);
            st.core
                .borrow_mut()
                .key_op_relayed(now, id, op, relay_factor);
        }
        Command::LocalKey(op, tx) => {
            let mut core = st.core.borrow_mut();
            let r = match op {
                LocalKeyOp::Install(k) => core.install_key(&k),
                LocalKeyOp::Use(k) => core.use_key(&k),
                LocalKeyOp::Remove(k) => core.remove_key(&k),
            };
            drop(core);
            let _ = tx.send(r.map_err(GossipError::Failed));
        }
        Command::SetTags(tags, tx) => {
            let r = st.core.borrow_mut().set_tags(now, tags);
            let _ = tx.send(r.map_err(GossipError::Failed));
        }
    }
}
