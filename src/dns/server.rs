//! The DNS server loops of a shard: one UDP task per socket and one TCP accept loop per
//! listener, every shard binding the same addresses with `SO_REUSEPORT`.
//!
//! UDP: one task per socket drains it in batches (`recvmmsg`), answers each datagram
//! synchronously into a reused buffer (`dns::handle_message`: cache hit or resolution against
//! the shard's version) and sends the batch's replies with one `sendmmsg`; nothing on this
//! path allocates on a cache hit. Questions for the recursors are
//! handed to their own task, so a slow upstream never stalls the socket; at most
//! [`RECURSIONS_IN_FLIGHT_MAX`] per shard, beyond which the query gets SERVFAIL at once.
//!
//! On a client agent a miss needs rows from a server, and on any agent a question about
//! another datacenter or a prepared query needs rows from elsewhere (`dns::elsewhere`): the
//! UDP loop hands it to its own task (at most [`FETCHES_IN_FLIGHT_MAX`] per shard), TCP
//! waits for it in order, and either answers the message again once they arrived.
//!
//! TCP: RFC 1035 §4.2.2 / RFC 7766 framing (two-byte length, then the message); queries on a
//! connection are answered in order. Bounded by [`TCP_CONNECTIONS_MAX`] per shard,
//! [`TCP_IDLE_TIMEOUT`] between queries, [`TCP_READ_TIMEOUT`] within one, and
//! [`TCP_WRITE_TIMEOUT`] for a client that stops reading.

use crate::cluster::router::Router;
use crate::cluster::servers::ServerManager;
use crate::dns::client::{ClientDns, FETCH_ROUNDS_MAX};
use crate::dns::elsewhere::{self, LocalApi, ServerSource};
use crate::dns::remote::{FetchOptions, Lookup, LookupResult};
use crate::dns::{self, recursor, DnsSettings, Handled, ShardDns, Transport};
use crate::proto::dns::{flags, rcode, Query, HEADER_BYTES};
use crate::shard::runtime::{Consistency, ReadPlan, Shard};
use crate::store::acl::authorizer::{Authorizer, DefaultPolicy};
use crate::store::acl::cache::{AuthorizerCache, CompileSettings};
use crate::store::Table;
use crate::telemetry::{self, Counter, Sample};
use monoio::io::{AsyncReadRentExt, AsyncWriteRentExt};
use monoio::net::udp::UdpSocket;
use monoio::net::{TcpListener, TcpStream};
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Forwards to recursors in flight per shard.
pub const RECURSIONS_IN_FLIGHT_MAX: usize = 256;
/// Questions waiting for rows from a server per shard (a client agent's misses); beyond
/// this a miss gets SERVFAIL at once.
pub const FETCHES_IN_FLIGHT_MAX: usize = 1024;
/// Open DNS TCP connections per shard; further connections are closed at once.
pub const TCP_CONNECTIONS_MAX: usize = 1024;
/// How long a TCP connection may sit idle between queries.
pub const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the rest of a query may take once its length arrived.
pub const TCP_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a response write may take.
pub const TCP_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// `SO_ATTACH_REUSEPORT_CBPF` (asm-generic/socket.h); not exported by the libc crate.
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Makes the kernel pick the socket of a `SO_REUSEPORT` group for each datagram at random
/// instead of by hashing the flow. DNS over UDP is stateless, and a few busy clients (a
/// resolver, a load generator) are a few flows: hashed, they can all land on one shard while
/// the others idle. A classic BPF program returning `random() % sockets` spreads every packet.
/// Applies to the whole group of the given socket; on failure the kernel keeps hashing.
pub fn spread_datagrams_randomly(
    socket: &std::net::UdpSocket,
    sockets: usize,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SKF_AD_OFF + SKF_AD_RANDOM: the "load a random u32" ancillary operation.
    const LOAD_RANDOM: u32 = (-0x1000i32 + 56) as u32;
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_ALU_MOD_K: u16 = 0x94;
    const BPF_RET_A: u16 = 0x16;
    let mut program = [
        libc::sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: LOAD_RANDOM,
        },
        libc::sock_filter {
            code: BPF_ALU_MOD_K,
            jt: 0,
            jf: 0,
            k: sockets.max(1) as u32,
        },
        libc::sock_filter {
            code: BPF_RET_A,
            jt: 0,
            jf: 0,
            k: 0,
        },
    ];
    let fprog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: setsockopt reads `fprog` (and the program it points to) during the call only.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const libc::sock_fprog as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// One shard's DNS server: the runtime it reads versions from, the settings every shard
/// shares, and this shard's DNS state (answer cache and scratch space).
pub struct DnsServer {
    shard: Rc<Shard>,
    settings: Arc<DnsSettings>,
    state: Rc<RefCell<ShardDns>>,
    /// On a client agent: the rows asked of the servers, and the feed that keeps them.
    client: Option<Rc<ClientDns>>,
    /// With ACLs on (on a server): the token DNS answers with.
    acl: Option<Rc<RefCell<DnsToken>>>,
    /// On a server: its own typed-call endpoints, which execute prepared queries, and the WAN router,
    /// through which another datacenter's servers answer lookups of their rows.
    api: Option<(LocalApi, Arc<Router>)>,
}

/// The token a server's DNS answers with, as Consul's: the agent's `default` token (as
/// configured or set with `/v1/agent/token/default`), else the anonymous token. Its
/// authorizer comes from an authorizer cache of DNS's own, emptied precisely by change sets
/// like the HTTP server's. A new default token, or any change to the ACL tables, empties the
/// answer cache: what an answer shows depends on the token.
pub struct DnsToken {
    secret: String,
    authorizers: AuthorizerCache,
}

impl DnsServer {
    /// The authorizer this query answers with (`None` with ACLs off); drops cached answers
    /// first when the agent's default token changed.
    fn authorizer(&self) -> Option<Arc<Authorizer>> {
        let acl = self.acl.as_ref()?;
        let mut acl = acl.borrow_mut();
        let changed = {
            let tokens = self.shard.shared().acl_tokens.read().ok()?;
            let secret = tokens.default.as_deref().unwrap_or("");
            (secret != acl.secret).then(|| secret.to_string())
        };
        if let Some(secret) = changed {
            acl.secret = secret;
            self.state.borrow_mut().cache.clear();
        }
        let now_unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos().min(i64::MAX as u128) as i64);
        let version = self.shard.version_as_is();
        let DnsToken {
            secret,
            authorizers,
        } = &mut *acl;
        Some(match authorizers.resolve(&version, secret, now_unix_ns) {
            Ok(resolved) => resolved.authorizer,
            // An unknown default token answers nothing, as Consul's DNS answers nothing then.
            Err(_) => Arc::new(Authorizer::default_only(DefaultPolicy::Deny)),
        })
    }
}

impl DnsServer {
    /// The DNS server of `shard`. Its answer cache is invalidated by each change set in the
    /// same synchronous step that installs the version (`Shard::on_new_version`), so no
    /// answer computed from version N survives a change after N that it depended on.
    /// On a client agent, `servers` is the server manager its lookups go through.
    pub fn new(
        shard: Rc<Shard>,
        settings: Arc<DnsSettings>,
        servers: Arc<ServerManager>,
        api: LocalApi,
        router: Arc<Router>,
    ) -> Rc<DnsServer> {
        let seed = rand::random::<u64>() ^ shard.id as u64;
        let state = Rc::new(RefCell::new(ShardDns::new(seed)));
        if shard.is_client() {
            // No store, no versions: the change feed invalidates instead.
            let client = ClientDns::new(shard.clone(), settings.clone(), state.clone(), servers);
            return Rc::new(DnsServer {
                shard,
                settings,
                state,
                client: Some(Rc::new(client)),
                acl: None,
                api: None,
            });
        }
        let acl_config = &shard.config().acl;
        let acl = acl_config.enabled.then(|| {
            Rc::new(RefCell::new(DnsToken {
                secret: String::new(),
                authorizers: AuthorizerCache::new(CompileSettings {
                    datacenter: shard.config().datacenter.clone(),
                    default_policy: acl_config.default_policy,
                }),
            }))
        });
        let invalidated = state.clone();
        let tokens = acl.clone();
        shard.on_new_version(move |batch| {
            if batch.changes.is_empty() {
                return;
            }
            let mut state = invalidated.borrow_mut();
            state.cache.invalidate(&batch.changes);
            if let Some(tokens) = &tokens {
                if batch.changes.iter().any(|c| c.table == Table::Acl) {
                    tokens.borrow_mut().authorizers.invalidate(&batch.changes);
                    state.cache.clear();
                }
            }
        });
        Rc::new(DnsServer {
            shard,
            settings,
            state,
            client: None,
            acl,
            api: Some((api, router)),
        })
    }

    /// Fetches the rows a resolution lacked: a client agent from its servers, a server
    /// through its own API (another datacenter's rows, prepared queries).
    async fn fetch(&self, lookups: &[Lookup]) -> Result<Vec<(Lookup, LookupResult)>, String> {
        if let Some(client) = &self.client {
            return client.fetch(lookups).await;
        }
        let (api, router) = self.api.as_ref().expect("a server answers through its API");
        let config = &self.settings.config;
        let token = super::client::default_token(&self.shard);
        let options = FetchOptions {
            stale_within: config.allow_stale.then_some(config.max_stale),
            agent_node: &self.settings.local.node_name,
            token: &token,
        };
        let elsewhere = elsewhere::Elsewhere {
            api,
            router,
            rpc: &self.shard.rpc,
        };
        elsewhere.fetch(lookups, &options).await
    }

    /// On a client agent, starts the change feed from the servers; call once, when the
    /// agent serves DNS.
    pub fn start_client_feed(&self) {
        if let Some(client) = &self.client {
            monoio::spawn(client.clone().run_feed());
        }
    }
}

/// Whether this shard may answer from its version now, as Consul's DNS reads decide:
/// `allow_stale` reads this server's version unless it has been out of touch with the leader
/// for longer than `max_stale`; otherwise only a leader holding its lease answers. DNS does
/// not forward reads to the leader or wait for a ReadIndex round (that would stall the
/// socket), so those cases answer SERVFAIL. Either way the shard first catches up with every
/// published version (one atomic load when it is current), so a write acknowledged on any
/// shard shows in the next answer.
fn may_serve(shard: &Shard, settings: &DnsSettings) -> bool {
    let consistency = if settings.config.allow_stale {
        Consistency::Stale
    } else {
        Consistency::Leader
    };
    match shard.read_plan(consistency, Some(settings.config.max_stale)) {
        ReadPlan::Local => {
            shard.catch_up();
            true
        }
        ReadPlan::Barrier | ReadPlan::Forward => false,
    }
}

/// The staleness above which Consul counts a DNS answer as a stale query.
const STALE_QUERY_THRESHOLD_MS: u64 = 5_000;

/// The query type of a message's first question, read without decoding the message (for
/// telling reverse lookups apart in the metrics).
fn question_type(message: &[u8]) -> Option<u16> {
    let mut at = HEADER_BYTES;
    loop {
        let length = *message.get(at)? as usize;
        if length == 0 {
            break;
        }
        if length & 0xC0 != 0 {
            return None;
        }
        at += 1 + length;
    }
    let qtype = message.get(at + 1..at + 3)?;
    Some(u16::from_be_bytes([qtype[0], qtype[1]]))
}

/// Answers one message through the shard's DNS state, timed as Consul's
/// `dns.domain_query` (or `dns.ptr_query` for a reverse lookup).
fn answer(dns: &DnsServer, message: &[u8], transport: Transport, out: &mut Vec<u8>) -> Handled {
    let started = (telemetry::timing(Sample::DnsDomainQuery)
        || telemetry::timing(Sample::DnsPtrQuery))
    .then(Instant::now);
    let handled = answer_untimed(dns, message, transport, out);
    if let Some(started) = started {
        let sample = if question_type(message) == Some(crate::proto::dns::rtype::PTR) {
            Sample::DnsPtrQuery
        } else {
            Sample::DnsDomainQuery
        };
        telemetry::observe_since(sample, started);
    }
    handled
}

fn answer_untimed(
    dns: &DnsServer,
    message: &[u8],
    transport: Transport,
    out: &mut Vec<u8>,
) -> Handled {
    if let Some(client) = &dns.client {
        // A client may always try: what it cached is exact, and a miss asks a server.
        let mut state = dns.state.borrow_mut();
        return dns::handle_message(
            &dns.settings,
            &mut state,
            true,
            &client.source(&[]),
            message,
            transport,
            out,
        );
    }
    answer_server(dns, message, transport, &[], out)
}

/// A server's answer, with `fetched` rows from elsewhere at hand.
fn answer_server(
    dns: &DnsServer,
    message: &[u8],
    transport: Transport,
    fetched: &[(Lookup, LookupResult)],
    out: &mut Vec<u8>,
) -> Handled {
    // Decided before borrowing the DNS state: catching up processes shard messages, which
    // invalidate the cache.
    let allowed = may_serve(&dns.shard, &dns.settings);
    let authorizer = dns.authorizer();
    if !dns.shard.is_leader()
        && dns.shard.shared().last_contact_ms(false) > STALE_QUERY_THRESHOLD_MS
    {
        telemetry::incr(Counter::DnsStaleQueries);
    }
    let mut state = dns.state.borrow_mut();
    dns::handle_message(
        &dns.settings,
        &mut state,
        allowed,
        &ServerSource {
            shard: &dns.shard,
            fetched,
            authorizer,
        },
        message,
        transport,
        out,
    )
}

/// Completes a miss: fetches the rows the resolution lacked (a client agent's from its
/// servers; anyone's from another datacenter or a prepared query) and answers the message
/// again, up to [`FETCH_ROUNDS_MAX`] times; SERVFAIL when nobody answers.
async fn answer_fetched(
    dns: &DnsServer,
    message: &[u8],
    transport: Transport,
    query: &Query,
    mut lookups: Vec<Lookup>,
    out: &mut Vec<u8>,
) -> Handled {
    let mut fetched = Vec::new();
    for _ in 0..FETCH_ROUNDS_MAX {
        match dns.fetch(&lookups).await {
            Ok(rows) => fetched.extend(rows),
            Err(reason) => {
                log::debug!(
                    "dns: asking about {} failed: {reason}",
                    query.name.to_dotted()
                );
                break;
            }
        }
        out.clear();
        let handled = match &dns.client {
            Some(client) => {
                let mut state = dns.state.borrow_mut();
                dns::handle_message(
                    &dns.settings,
                    &mut state,
                    true,
                    &client.source(&fetched),
                    message,
                    transport,
                    out,
                )
            }
            None => answer_server(dns, message, transport, &fetched, out),
        };
        match handled {
            Handled::Fetch(_, more) => lookups = more,
            handled => return handled,
        }
    }
    out.clear();
    server_failure(query, out);
    Handled::Reply
}

/// The whole answer to a client agent's miss, recursion included: the bytes to send.
async fn complete_fetch(
    dns: &DnsServer,
    message: &[u8],
    transport: Transport,
    query: Box<Query>,
    lookups: Vec<Lookup>,
) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match answer_fetched(dns, message, transport, &query, lookups, &mut out).await {
        Handled::Reply => Some(out),
        Handled::Drop => None,
        Handled::Recurse(query) => {
            let settings = &dns.settings;
            let upstreams = recursor::Upstreams {
                recursors: &settings.config.recursors,
                strategy: settings.config.recursor_strategy,
                timeout: settings.config.recursor_timeout,
            };
            let reply =
                recursor::forward(message, &upstreams, forward_seed(&dns.shard, &query)).await;
            Some(forwarded_response(settings, &query, reply, transport))
        }
        Handled::Fetch(..) => unreachable!("answer_fetched turns a further miss into SERVFAIL"),
    }
}

/// A SERVFAIL (all recursors failed, or too many forwards in flight).
fn server_failure(query: &Query, out: &mut Vec<u8>) {
    dns::answer::write_bare_response(query, rcode::SERVFAIL, false, true, out);
}

/// The response to a forwarded query, fitted to the client's transport.
fn forwarded_response(
    settings: &DnsSettings,
    query: &Query,
    reply: Result<Vec<u8>, recursor::ForwardError>,
    transport: Transport,
) -> Vec<u8> {
    let mut out = Vec::new();
    match reply {
        Ok(reply) => {
            let limit = dns::response_limits(settings, query, transport).message_bytes_max;
            if reply.len() <= limit {
                return reply;
            }
            // Too big for this client's UDP size (we fetched it over TCP): tell it to retry
            // over TCP.
            dns::answer::write_bare_response(query, rcode::NOERROR, false, true, &mut out);
            let header_flags = u16::from_be_bytes([out[2], out[3]]) | flags::TC;
            out[2..4].copy_from_slice(&header_flags.to_be_bytes());
        }
        Err(recursor::ForwardError::AllFailed(reason)) => {
            log::debug!(
                "dns: recursion for {} failed: {reason}",
                query.name.to_dotted()
            );
            server_failure(query, &mut out);
        }
    }
    out
}

fn forward_seed(shard: &Shard, query: &Query) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ ((shard.id as u64) << 56) ^ ((query.id as u64) << 24) ^ rand::random::<u64>()
}

/// Datagrams received (and replies sent) per system call.
pub const UDP_BATCH_DATAGRAMS: usize = 32;
/// Largest UDP query read; a longer datagram arrives cut (`MSG_TRUNC`) and is answered
/// FORMERR from its header. Real queries are well under 512 bytes.
pub const UDP_QUERY_BYTES_MAX: usize = 4096;

/// Serves one UDP socket until the shard stops.
pub fn spawn_udp(dns: Rc<DnsServer>, socket: UdpSocket) {
    monoio::spawn(udp_loop(dns, Rc::new(socket)));
}

/// Receive and send buffers for one batch, allocated once per socket. The `mmsghdr`s point
/// into the other vectors, which are never resized after construction.
struct DatagramBatch {
    inputs: Vec<Box<[u8]>>,
    peers: Vec<libc::sockaddr_storage>,
    receive_iovecs: Vec<libc::iovec>,
    receive_headers: Vec<libc::mmsghdr>,
    outputs: Vec<Vec<u8>>,
    send_iovecs: Vec<libc::iovec>,
    send_headers: Vec<libc::mmsghdr>,
}

impl DatagramBatch {
    fn new() -> Box<DatagramBatch> {
        // SAFETY: all-zero bytes are valid values of these plain C structs.
        let zeroed_header: libc::mmsghdr = unsafe { std::mem::zeroed() };
        let zeroed_peer: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let empty_iovec = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut batch = Box::new(DatagramBatch {
            inputs: (0..UDP_BATCH_DATAGRAMS)
                .map(|_| vec![0u8; UDP_QUERY_BYTES_MAX].into_boxed_slice())
                .collect(),
            peers: vec![zeroed_peer; UDP_BATCH_DATAGRAMS],
            receive_iovecs: vec![empty_iovec; UDP_BATCH_DATAGRAMS],
            receive_headers: vec![zeroed_header; UDP_BATCH_DATAGRAMS],
            outputs: (0..UDP_BATCH_DATAGRAMS)
                .map(|_| Vec::with_capacity(1024))
                .collect(),
            send_iovecs: vec![empty_iovec; UDP_BATCH_DATAGRAMS],
            send_headers: vec![zeroed_header; UDP_BATCH_DATAGRAMS],
        });
        let batch_ref = &mut *batch;
        for i in 0..UDP_BATCH_DATAGRAMS {
            batch_ref.receive_iovecs[i] = libc::iovec {
                iov_base: batch_ref.inputs[i].as_mut_ptr() as *mut libc::c_void,
                iov_len: UDP_QUERY_BYTES_MAX,
            };
        }
        batch
    }

    /// Re-arms the receive headers (the kernel overwrites lengths and flags).
    fn arm_receive(&mut self) {
        for i in 0..UDP_BATCH_DATAGRAMS {
            let header = &mut self.receive_headers[i].msg_hdr;
            header.msg_name =
                &mut self.peers[i] as *mut libc::sockaddr_storage as *mut libc::c_void;
            header.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            header.msg_iov = &mut self.receive_iovecs[i];
            header.msg_iovlen = 1;
            header.msg_control = std::ptr::null_mut();
            header.msg_controllen = 0;
            header.msg_flags = 0;
            self.receive_headers[i].msg_len = 0;
        }
    }

    fn peer(&self, i: usize) -> Option<SocketAddr> {
        let storage = &self.peers[i];
        match storage.ss_family as libc::c_int {
            libc::AF_INET => {
                // SAFETY: the family says the storage holds a sockaddr_in.
                let v4 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
                Some(SocketAddr::from((
                    std::net::Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr)),
                    u16::from_be(v4.sin_port),
                )))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the storage holds a sockaddr_in6.
                let v6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
                Some(SocketAddr::from((
                    std::net::Ipv6Addr::from(v6.sin6_addr.s6_addr),
                    u16::from_be(v6.sin6_port),
                )))
            }
            _ => None,
        }
    }
}

/// Receives, without blocking, more datagrams into slots `1..` of the batch (slot 0 holds
/// the datagram the runtime delivered). Returns how many arrived; none when the socket is
/// drained.
fn drain_more(fd: i32, batch: &mut DatagramBatch) -> usize {
    batch.arm_receive();
    // SAFETY: the headers point at buffers owned by `batch` that outlive the call.
    let count = unsafe {
        libc::recvmmsg(
            fd,
            batch.receive_headers[1..].as_mut_ptr(),
            (UDP_BATCH_DATAGRAMS - 1) as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    // EAGAIN (drained) or a queued ICMP error: nothing more this round.
    count.max(0) as usize
}

/// Writes `address` into a `sockaddr_storage`; returns its length.
fn store_address(storage: &mut libc::sockaddr_storage, address: SocketAddr) -> libc::socklen_t {
    match address {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large enough and suitably aligned for sockaddr_in.
            let target = unsafe { &mut *(storage as *mut _ as *mut libc::sockaddr_in) };
            target.sin_family = libc::AF_INET as libc::sa_family_t;
            target.sin_port = v4.port().to_be();
            target.sin_addr = libc::in_addr {
                s_addr: u32::from(*v4.ip()).to_be(),
            };
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is large enough and suitably aligned for sockaddr_in6.
            let target = unsafe { &mut *(storage as *mut _ as *mut libc::sockaddr_in6) };
            target.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            target.sin6_port = v6.port().to_be();
            target.sin6_flowinfo = v6.flowinfo();
            target.sin6_addr = libc::in6_addr {
                s6_addr: v6.ip().octets(),
            };
            target.sin6_scope_id = v6.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// The UDP loop: the runtime delivers one datagram (an io_uring receive, or epoll readiness
/// and a receive), then non-blocking `recvmmsg` drains up to a batch more; each is answered
/// and the batch's replies leave with one `sendmmsg`. Under load a system call moves up to
/// [`UDP_BATCH_DATAGRAMS`] datagrams; idle, the task waits on one receive. (Waiting for
/// readiness with an io_uring poll instead lost an occasional wake-up.)
async fn udp_loop(dns: Rc<DnsServer>, socket: Rc<UdpSocket>) {
    use std::os::fd::AsRawFd;
    let task = UdpTask {
        fd: socket.as_raw_fd(),
        dns,
        socket,
        in_flight: Rc::new(Cell::new(0usize)),
        fetches: Rc::new(Cell::new(0usize)),
    };
    let mut batch = DatagramBatch::new();
    while let Some(received) = task.receive_batch(&mut batch).await {
        debug_assert!((1..=UDP_BATCH_DATAGRAMS).contains(&received));
        let mut replies = 0usize;
        for i in 0..received {
            let mut output = std::mem::take(&mut batch.outputs[replies]);
            match task.answer_datagram(&batch, i, &mut output) {
                Handled::Reply => {
                    queue_reply(&mut batch, i, replies, output);
                    replies += 1;
                }
                Handled::Drop => batch.outputs[replies] = output,
                Handled::Fetch(query, lookups) => {
                    batch.outputs[replies] = output;
                    task.hand_off_fetch(&batch, i, query, lookups).await;
                }
                Handled::Recurse(query) => {
                    batch.outputs[replies] = output;
                    task.hand_off_recursion(&batch, i, query).await;
                }
            }
            debug_assert!(replies <= i + 1, "at most one reply per datagram");
        }
        task.send_replies(&mut batch, replies).await;
    }
}

/// What one UDP socket's loop shares with the tasks it spawns.
struct UdpTask {
    dns: Rc<DnsServer>,
    socket: Rc<UdpSocket>,
    fd: i32,
    /// Recursions in flight, bounded by [`RECURSIONS_IN_FLIGHT_MAX`].
    in_flight: Rc<Cell<usize>>,
    /// Fetches from a server in flight, bounded by [`FETCHES_IN_FLIGHT_MAX`].
    fetches: Rc<Cell<usize>>,
}

impl UdpTask {
    /// Waits for one datagram in slot 0 and drains up to a batch more; returns how many
    /// slots hold datagrams, or `None` once the shard shuts down.
    async fn receive_batch(&self, batch: &mut DatagramBatch) -> Option<usize> {
        loop {
            let first = std::mem::take(&mut batch.inputs[0]);
            let (result, first) = self.socket.recv_from(first).await;
            // The heap buffer did not move, so the slot's iovec still points at it.
            batch.inputs[0] = first;
            let (length, peer) = match result {
                Ok(received) => received,
                Err(e) => {
                    if self.dns.shard.shutting_down() {
                        return None;
                    }
                    // ICMP errors from earlier replies surface here (ECONNREFUSED); skip them.
                    log::debug!("dns: udp receive failed: {e}");
                    continue;
                }
            };
            let received = 1 + drain_more(self.fd, batch);
            let first = &mut batch.receive_headers[0];
            first.msg_len = length as u32;
            first.msg_hdr.msg_namelen = store_address(&mut batch.peers[0], peer);
            // A datagram that filled the buffer may have been cut; real queries are far
            // shorter.
            first.msg_hdr.msg_flags = if length >= UDP_QUERY_BYTES_MAX {
                libc::MSG_TRUNC
            } else {
                0
            };
            return Some(received);
        }
    }

    /// Answers slot `i`'s datagram into `output`; a cut query gets FORMERR, a cut
    /// response nothing.
    fn answer_datagram(&self, batch: &DatagramBatch, i: usize, output: &mut Vec<u8>) -> Handled {
        let length = batch.receive_headers[i].msg_len as usize;
        let cut = batch.receive_headers[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let message = &batch.inputs[i][..length.min(UDP_QUERY_BYTES_MAX)];
        if !cut {
            return answer(&self.dns, message, Transport::Udp, output);
        }
        match crate::proto::dns::RequestHeader::read(message) {
            Some(header) if header.flags & flags::QR == 0 => {
                dns::answer::write_header_only_response(
                    header.id,
                    header.flags,
                    rcode::FORMERR,
                    output,
                );
                Handled::Reply
            }
            _ => Handled::Drop,
        }
    }

    /// Slot `i`'s datagram, copied for a task that outlives the batch.
    fn message(batch: &DatagramBatch, i: usize) -> Vec<u8> {
        let length = batch.receive_headers[i].msg_len as usize;
        batch.inputs[i][..length].to_vec()
    }

    /// Fetches the rows a client agent lacks on a task of its own and answers from them;
    /// beyond [`FETCHES_IN_FLIGHT_MAX`] the query gets SERVFAIL at once.
    async fn hand_off_fetch(
        &self,
        batch: &DatagramBatch,
        i: usize,
        query: Box<Query>,
        lookups: Vec<Lookup>,
    ) {
        let Some(peer) = batch.peer(i) else { return };
        if self.fetches.get() >= FETCHES_IN_FLIGHT_MAX {
            let mut failure = Vec::new();
            server_failure(&query, &mut failure);
            let _ = self.socket.send_to(failure, peer).await;
            return;
        }
        self.fetches.set(self.fetches.get() + 1);
        let message = Self::message(batch, i);
        let (dns, socket, fetches) = (self.dns.clone(), self.socket.clone(), self.fetches.clone());
        monoio::spawn(async move {
            let response = complete_fetch(&dns, &message, Transport::Udp, query, lookups).await;
            fetches.set(fetches.get() - 1);
            if let Some(response) = response {
                let _ = socket.send_to(response, peer).await;
            }
        });
    }

    /// Forwards the query to the recursors on a task of its own; beyond
    /// [`RECURSIONS_IN_FLIGHT_MAX`] the query gets SERVFAIL at once.
    async fn hand_off_recursion(&self, batch: &DatagramBatch, i: usize, query: Box<Query>) {
        let Some(peer) = batch.peer(i) else { return };
        if self.in_flight.get() >= RECURSIONS_IN_FLIGHT_MAX {
            let mut failure = Vec::new();
            server_failure(&query, &mut failure);
            let _ = self.socket.send_to(failure, peer).await;
            return;
        }
        self.in_flight.set(self.in_flight.get() + 1);
        monoio::spawn(recurse_udp(
            self.dns.clone(),
            self.socket.clone(),
            self.in_flight.clone(),
            Self::message(batch, i),
            query,
            peer,
        ));
    }

    /// Sends the first `replies` queued replies with `sendmmsg`, resuming after a partial
    /// send; a reply that cannot be sent is dropped, as UDP allows.
    async fn send_replies(&self, batch: &mut DatagramBatch, replies: usize) {
        let mut sent = 0;
        while sent < replies {
            // Offset the headers so that a partial send resumes where it stopped.
            let headers = &mut batch.send_headers[sent..replies];
            // SAFETY: the headers point at buffers owned by `batch` that outlive the call.
            let count = unsafe {
                libc::sendmmsg(
                    self.fd,
                    headers.as_mut_ptr(),
                    headers.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if count >= 0 {
                sent += (count as usize).max(1);
                continue;
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock => {
                    if self.socket.writable(false).await.is_err() {
                        break;
                    }
                }
                std::io::ErrorKind::Interrupted => {}
                // A reply that cannot be sent (e.g. an unreachable peer) is dropped; the
                // rest of the batch still goes out.
                _ => sent += 1,
            }
        }
    }
}

/// Queues `output` as reply slot `replies`, addressed to where slot `i`'s query came from.
fn queue_reply(batch: &mut DatagramBatch, i: usize, replies: usize, mut output: Vec<u8>) {
    debug_assert!(replies <= i, "a reply slot per answered datagram, in order");
    batch.send_iovecs[replies] = libc::iovec {
        iov_base: output.as_mut_ptr() as *mut libc::c_void,
        iov_len: output.len(),
    };
    let header = &mut batch.send_headers[replies].msg_hdr;
    header.msg_name = &mut batch.peers[i] as *mut libc::sockaddr_storage as *mut libc::c_void;
    header.msg_namelen = batch.receive_headers[i].msg_hdr.msg_namelen;
    header.msg_iov = &mut batch.send_iovecs[replies];
    header.msg_iovlen = 1;
    header.msg_control = std::ptr::null_mut();
    header.msg_controllen = 0;
    header.msg_flags = 0;
    // The heap buffer moves into the slot without moving its bytes: the iovec stays valid.
    batch.outputs[replies] = output;
}

async fn recurse_udp(
    dns: Rc<DnsServer>,
    socket: Rc<UdpSocket>,
    in_flight: Rc<Cell<usize>>,
    message: Vec<u8>,
    query: Box<Query>,
    peer: SocketAddr,
) {
    let settings = &dns.settings;
    let upstreams = recursor::Upstreams {
        recursors: &settings.config.recursors,
        strategy: settings.config.recursor_strategy,
        timeout: settings.config.recursor_timeout,
    };
    let reply = recursor::forward(&message, &upstreams, forward_seed(&dns.shard, &query)).await;
    in_flight.set(in_flight.get() - 1);
    let response = forwarded_response(settings, &query, reply, Transport::Udp);
    let _ = socket.send_to(response, peer).await;
}

/// Accepts DNS TCP connections until the shard stops.
pub async fn tcp_accept_loop(dns: Rc<DnsServer>, listener: TcpListener) {
    let open = Rc::new(Cell::new(0usize));
    loop {
        match listener.accept().await {
            Ok((stream, _peer)) => {
                if open.get() >= TCP_CONNECTIONS_MAX {
                    drop(stream);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                open.set(open.get() + 1);
                let open = open.clone();
                let dns = dns.clone();
                monoio::spawn(async move {
                    serve_tcp(&dns, stream).await;
                    open.set(open.get() - 1);
                });
            }
            Err(e) => {
                if dns.shard.shutting_down() {
                    return;
                }
                log::warn!("dns: tcp accept failed: {e}");
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Serves queries on one TCP connection until the client closes, misbehaves or idles out.
/// The response buffer and the framed write buffer are reused across queries, so a
/// connection asking for 64 KB answers allocates them once.
async fn serve_tcp(dns: &DnsServer, mut stream: TcpStream) {
    let settings = &dns.settings;
    let mut output = Vec::with_capacity(4096);
    let mut framed: Vec<u8> = Vec::with_capacity(4096);
    let mut length = vec![0u8; 2];
    loop {
        let Ok((read, buffer)) =
            monoio::time::timeout(TCP_IDLE_TIMEOUT, stream.read_exact(length)).await
        else {
            return;
        };
        length = buffer;
        if read.is_err() {
            return;
        }
        let size = u16::from_be_bytes([length[0], length[1]]) as usize;
        if size < HEADER_BYTES {
            // Too short to be a message (or a zero-length frame): nothing sensible to answer.
            return;
        }
        let Ok((read, message)) =
            monoio::time::timeout(TCP_READ_TIMEOUT, stream.read_exact(vec![0u8; size])).await
        else {
            return;
        };
        if read.is_err() {
            return;
        }
        let forwarded;
        let response: &[u8] = match answer(dns, &message, Transport::Tcp, &mut output) {
            Handled::Reply => &output,
            Handled::Drop => return,
            Handled::Fetch(query, lookups) => {
                match complete_fetch(dns, &message, Transport::Tcp, query, lookups).await {
                    Some(response) => {
                        forwarded = response;
                        &forwarded
                    }
                    None => return,
                }
            }
            Handled::Recurse(query) => {
                let upstreams = recursor::Upstreams {
                    recursors: &settings.config.recursors,
                    strategy: settings.config.recursor_strategy,
                    timeout: settings.config.recursor_timeout,
                };
                let reply =
                    recursor::forward(&message, &upstreams, forward_seed(&dns.shard, &query)).await;
                forwarded = forwarded_response(settings, &query, reply, Transport::Tcp);
                &forwarded
            }
        };
        framed.clear();
        framed.extend_from_slice(&(response.len() as u16).to_be_bytes());
        framed.extend_from_slice(response);
        match monoio::time::timeout(TCP_WRITE_TIMEOUT, stream.write_all(framed)).await {
            Ok((Ok(_), buffer)) => framed = buffer,
            _ => return,
        }
    }
}
