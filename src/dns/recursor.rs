//! Forwarding questions outside our domains to the configured recursors.
//!
//! A query is sent as received, under a fresh random ID, over UDP from an ephemeral socket;
//! a reply is accepted only from the recursor's address with that ID. A truncated reply (TC)
//! is retried over TCP to the same recursor. A reply whose rcode is neither NOERROR nor
//! NXDOMAIN, a timeout, or an I/O error moves on to the next recursor (`sequential` order, or
//! starting at a random one); when all fail the caller answers SERVFAIL, as Consul does.
//!
//! Bounded: each exchange is limited by `recursor_timeout`, replies by
//! [`MESSAGE_BYTES_MAX`], and the number of forwards in flight per shard by the server.

use crate::config::RecursorStrategy;
use crate::proto::dns::{flags, rcode, HEADER_BYTES, MESSAGE_BYTES_MAX};
use monoio::io::{AsyncReadRentExt, AsyncWriteRentExt};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Receive buffer for a UDP reply from a recursor (EDNS replies up to this size).
pub const UPSTREAM_UDP_BYTES_MAX: usize = 65_535;

/// Where and how to forward.
#[derive(Clone, Debug)]
pub struct Upstreams<'a> {
    pub recursors: &'a [SocketAddr],
    pub strategy: RecursorStrategy,
    pub timeout: Duration,
}

/// Why a forward failed (for the log).
#[derive(Debug)]
pub enum ForwardError {
    /// Every recursor timed out, failed or answered with an error rcode.
    AllFailed(String),
}

/// Forwards `query` (a complete DNS message) and returns the reply with the client's ID
/// restored.
pub async fn forward(
    query: &[u8],
    upstreams: &Upstreams<'_>,
    seed: u64,
) -> Result<Vec<u8>, ForwardError> {
    debug_assert!(query.len() >= HEADER_BYTES);
    let count = upstreams.recursors.len();
    let first = match upstreams.strategy {
        RecursorStrategy::Sequential => 0,
        RecursorStrategy::Random => (seed % count.max(1) as u64) as usize,
    };
    let client_id = [query[0], query[1]];
    let mut last_error = String::from("no recursors configured");
    for i in 0..count {
        let recursor = upstreams.recursors[(first + i) % count];
        let upstream_id = (seed >> 16) as u16 ^ (i as u16).wrapping_mul(0x9E37);
        let mut outgoing = query.to_vec();
        outgoing[..2].copy_from_slice(&upstream_id.to_be_bytes());
        let deadline = Instant::now() + upstreams.timeout;
        let reply = match exchange_udp(&outgoing, recursor, upstream_id, deadline).await {
            Ok(reply) if is_truncated(&reply) => {
                exchange_tcp(
                    &outgoing,
                    recursor,
                    upstream_id,
                    Instant::now() + upstreams.timeout,
                )
                .await
            }
            other => other,
        };
        match reply {
            Ok(mut reply) => {
                let code = reply[3] as u16 & 0xF;
                if code == rcode::NOERROR || code == rcode::NXDOMAIN {
                    reply[..2].copy_from_slice(&client_id);
                    return Ok(reply);
                }
                last_error = format!("{recursor} answered rcode {code}");
            }
            Err(e) => last_error = format!("{recursor}: {e}"),
        }
    }
    Err(ForwardError::AllFailed(last_error))
}

fn is_truncated(reply: &[u8]) -> bool {
    u16::from_be_bytes([reply[2], reply[3]]) & flags::TC != 0
}

fn remaining(deadline: Instant) -> std::io::Result<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"))
}

fn timed_out() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out")
}

/// A reply is ours if it is a response with the ID we sent.
fn matches(reply: &[u8], id: u16) -> bool {
    reply.len() >= HEADER_BYTES
        && u16::from_be_bytes([reply[0], reply[1]]) == id
        && u16::from_be_bytes([reply[2], reply[3]]) & flags::QR != 0
}

async fn exchange_udp(
    query: &[u8],
    recursor: SocketAddr,
    id: u16,
    deadline: Instant,
) -> std::io::Result<Vec<u8>> {
    let local = match recursor.ip() {
        IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    };
    let std_socket = std::net::UdpSocket::bind(local)?;
    std_socket.set_nonblocking(true)?;
    let socket = monoio::net::udp::UdpSocket::from_std(std_socket)?;
    let (sent, _) = monoio::time::timeout(
        remaining(deadline)?,
        socket.send_to(query.to_vec(), recursor),
    )
    .await
    .map_err(|_| timed_out())?;
    sent?;
    let mut buffer = Vec::with_capacity(UPSTREAM_UDP_BYTES_MAX);
    loop {
        let (received, returned) =
            monoio::time::timeout(remaining(deadline)?, socket.recv_from(buffer))
                .await
                .map_err(|_| timed_out())?;
        buffer = returned;
        let (_, from) = received?;
        // Anything not from the recursor or not carrying our ID is ignored (spoofing, stale
        // replies); keep waiting until the deadline.
        if from == recursor && matches(&buffer, id) {
            return Ok(buffer);
        }
        buffer.clear();
    }
}

async fn exchange_tcp(
    query: &[u8],
    recursor: SocketAddr,
    id: u16,
    deadline: Instant,
) -> std::io::Result<Vec<u8>> {
    let mut stream = monoio::time::timeout(
        remaining(deadline)?,
        monoio::net::TcpStream::connect_addr(recursor),
    )
    .await
    .map_err(|_| timed_out())??;
    let mut framed = Vec::with_capacity(query.len() + 2);
    framed.extend_from_slice(&(query.len() as u16).to_be_bytes());
    framed.extend_from_slice(query);
    let (written, _) = monoio::time::timeout(remaining(deadline)?, stream.write_all(framed))
        .await
        .map_err(|_| timed_out())?;
    written?;
    let (read, length) =
        monoio::time::timeout(remaining(deadline)?, stream.read_exact(vec![0u8; 2]))
            .await
            .map_err(|_| timed_out())?;
    read?;
    let length = u16::from_be_bytes([length[0], length[1]]) as usize;
    if !(HEADER_BYTES..=MESSAGE_BYTES_MAX).contains(&length) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "bad TCP reply length",
        ));
    }
    let (read, reply) =
        monoio::time::timeout(remaining(deadline)?, stream.read_exact(vec![0u8; length]))
            .await
            .map_err(|_| timed_out())?;
    read?;
    if !matches(&reply, id) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "TCP reply does not match the query",
        ));
    }
    Ok(reply)
}
