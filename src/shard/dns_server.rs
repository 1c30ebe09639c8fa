//! The DNS server loops of a shard: one UDP task per socket and one TCP accept loop per
//! listener, every shard binding the same addresses with `SO_REUSEPORT`.
//!
//! UDP: the task receives a datagram, answers it synchronously into a reused buffer
//! (`dns::handle_message`: cache hit or resolution against the shard's version) and sends the
//! reply; nothing on this path allocates on a cache hit. Questions for the recursors are
//! handed to their own task, so a slow upstream never stalls the socket; at most
//! [`RECURSIONS_IN_FLIGHT_MAX`] per shard, beyond which the query gets SERVFAIL at once.
//!
//! TCP: RFC 1035 §4.2.2 / RFC 7766 framing (two-byte length, then the message); queries on a
//! connection are answered in order. Bounded by [`TCP_CONNECTIONS_MAX`] per shard,
//! [`TCP_IDLE_TIMEOUT`] between queries, [`TCP_READ_TIMEOUT`] within one, and
//! [`TCP_WRITE_TIMEOUT`] for a client that stops reading.

use crate::api::{Consistency, QueryOptions};
use crate::dns::{self, recursor, DnsSettings, Handled, Transport, VersionSource};
use crate::proto::dns::{flags, rcode, Query, HEADER_BYTES};
use crate::shard::runtime::{ReadPlan, Shard};
use crate::store::StoreVersion;
use monoio::io::{AsyncReadRentExt, AsyncWriteRentExt};
use monoio::net::udp::UdpSocket;
use monoio::net::{TcpListener, TcpStream};
use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Receive buffer per UDP socket: the largest datagram, so an oversized query is read whole
/// (and answered FORMERR or served) rather than silently cut.
pub const UDP_RECEIVE_BYTES_MAX: usize = 65_535;
/// Forwards to recursors in flight per shard.
pub const RECURSIONS_IN_FLIGHT_MAX: usize = 256;
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

/// Reads resolve against the shard's current version.
struct ShardVersion<'a>(&'a Shard);

impl VersionSource for ShardVersion<'_> {
    type View = StoreVersion;
    fn version(&self) -> StoreVersion {
        self.0.current_version()
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
    let options = QueryOptions {
        min_index: 0,
        wait: Duration::ZERO,
        consistency: if settings.config.allow_stale {
            Consistency::Stale
        } else {
            Consistency::Leader
        },
        max_stale: Some(settings.config.max_stale),
        filter: None,
    };
    match shard.read_plan(&options) {
        ReadPlan::Local => {
            shard.catch_up();
            true
        }
        ReadPlan::Barrier | ReadPlan::Forward => false,
    }
}

/// Answers one message through the shard's DNS state.
fn answer(
    shard: &Shard,
    settings: &DnsSettings,
    message: &[u8],
    transport: Transport,
    out: &mut Vec<u8>,
) -> Handled {
    // Decided before borrowing the DNS state: catching up processes shard messages, which
    // invalidate the cache.
    let allowed = may_serve(shard, settings);
    let mut state = shard.dns.borrow_mut();
    dns::handle_message(
        settings,
        &mut state,
        allowed,
        &ShardVersion(shard),
        message,
        transport,
        out,
    )
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

/// Receive loops per UDP socket and shard. With io_uring each loop keeps one receive
/// outstanding, so while one query is being answered the next is already being received, and
/// completions that arrive together are reaped by one system call.
pub const UDP_RECEIVERS_PER_SOCKET: usize = 4;

/// Serves one UDP socket with [`UDP_RECEIVERS_PER_SOCKET`] receive loops until the shard
/// stops.
pub fn spawn_udp(shard: Rc<Shard>, settings: Arc<DnsSettings>, socket: UdpSocket) {
    let socket = Rc::new(socket);
    let in_flight = Rc::new(Cell::new(0usize));
    let receivers = std::env::var("PRAETOR_DNS_UDP_RECEIVERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(UDP_RECEIVERS_PER_SOCKET);
    for _ in 0..receivers {
        monoio::spawn(udp_loop(
            shard.clone(),
            settings.clone(),
            socket.clone(),
            in_flight.clone(),
        ));
    }
}

async fn udp_loop(
    shard: Rc<Shard>,
    settings: Arc<DnsSettings>,
    socket: Rc<UdpSocket>,
    in_flight: Rc<Cell<usize>>,
) {
    let mut input: Vec<u8> = Vec::with_capacity(UDP_RECEIVE_BYTES_MAX);
    let mut output: Vec<u8> = Vec::with_capacity(4096);
    loop {
        let (received, buffer) = socket.recv_from(input).await;
        input = buffer;
        let peer = match received {
            Ok((_, peer)) => peer,
            Err(e) => {
                if shard.shutting_down() {
                    return;
                }
                log::debug!("dns: udp receive failed: {e}");
                continue;
            }
        };
        match answer(&shard, &settings, &input, Transport::Udp, &mut output) {
            Handled::Reply => {
                let (_, buffer) = socket.send_to(output, peer).await;
                output = buffer;
            }
            Handled::Drop => {}
            Handled::Recurse(query) => {
                if in_flight.get() >= RECURSIONS_IN_FLIGHT_MAX {
                    server_failure(&query, &mut output);
                    let (_, buffer) = socket.send_to(output, peer).await;
                    output = buffer;
                } else {
                    in_flight.set(in_flight.get() + 1);
                    monoio::spawn(recurse_udp(
                        shard.clone(),
                        settings.clone(),
                        socket.clone(),
                        in_flight.clone(),
                        input.clone(),
                        query,
                        peer,
                    ));
                }
            }
        }
    }
}

async fn recurse_udp(
    shard: Rc<Shard>,
    settings: Arc<DnsSettings>,
    socket: Rc<UdpSocket>,
    in_flight: Rc<Cell<usize>>,
    message: Vec<u8>,
    query: Box<Query>,
    peer: SocketAddr,
) {
    let upstreams = recursor::Upstreams {
        recursors: &settings.config.recursors,
        strategy: settings.config.recursor_strategy,
        timeout: settings.config.recursor_timeout,
    };
    let reply = recursor::forward(&message, &upstreams, forward_seed(&shard, &query)).await;
    in_flight.set(in_flight.get() - 1);
    let response = forwarded_response(&settings, &query, reply, Transport::Udp);
    let _ = socket.send_to(response, peer).await;
}

/// Accepts DNS TCP connections until the shard stops.
pub async fn tcp_accept_loop(shard: Rc<Shard>, settings: Arc<DnsSettings>, listener: TcpListener) {
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
                let (shard, settings) = (shard.clone(), settings.clone());
                monoio::spawn(async move {
                    serve_tcp(&shard, &settings, stream).await;
                    open.set(open.get() - 1);
                });
            }
            Err(e) => {
                if shard.shutting_down() {
                    return;
                }
                log::warn!("dns: tcp accept failed: {e}");
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Serves queries on one TCP connection until the client closes, misbehaves or idles out.
async fn serve_tcp(shard: &Shard, settings: &Arc<DnsSettings>, mut stream: TcpStream) {
    let mut output = Vec::with_capacity(4096);
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
        let response = match answer(shard, settings, &message, Transport::Tcp, &mut output) {
            Handled::Reply => std::mem::take(&mut output),
            Handled::Drop => return,
            Handled::Recurse(query) => {
                let upstreams = recursor::Upstreams {
                    recursors: &settings.config.recursors,
                    strategy: settings.config.recursor_strategy,
                    timeout: settings.config.recursor_timeout,
                };
                let reply =
                    recursor::forward(&message, &upstreams, forward_seed(shard, &query)).await;
                forwarded_response(settings, &query, reply, Transport::Tcp)
            }
        };
        let mut framed = Vec::with_capacity(response.len() + 2);
        framed.extend_from_slice(&(response.len() as u16).to_be_bytes());
        framed.extend_from_slice(&response);
        output = response;
        match monoio::time::timeout(TCP_WRITE_TIMEOUT, stream.write_all(framed)).await {
            Ok((Ok(_), _)) => {}
            _ => return,
        }
    }
}
