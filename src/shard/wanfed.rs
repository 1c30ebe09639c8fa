//! WAN gossip through mesh gateways (Consul's `wanfed` transport), the parts that touch
//! TLS and the server port.
//!
//! With `connect.enable_mesh_gateway_wan_federation` a server never sends WAN gossip
//! straight to a server of another datacenter. Its WAN pool
//! ([`crate::cluster::gossip`]) hands each packet or stream for such a member to this
//! module, which dials a mesh gateway with native TLS, ALPN `consul/wan-gossip/packet` or
//! `consul/wan-gossip/stream` and SNI `<node>.server.<dc>.<domain>`
//! ([`dial_through_gateway`]); the gateways splice the session through to that server's
//! RPC port. On the receiving server the RPC listener hands such sessions here:
//!
//! - packets ([`relay_packets`]): each a big-endian `u32` length and that many bytes, as
//!   Consul frames them, sent on as one UDP datagram to this server's own WAN pool;
//! - a stream ([`relay_stream`]): spliced both ways to a TCP connection to the WAN pool's
//!   own listener.
//!
//! So the pool reads relayed gossip exactly as it reads gossip that came straight: nothing
//! crosses threads but datagrams and bytes, as the Raft relay does. The pool's replies go
//! to the sender's advertised address (memberlist's ping carries it), which the sending
//! side again routes through the gateways by the member's name.
//!
//! Bounds: a packet is at most [`PACKET_BYTES_MAX`] (what one datagram carries); a
//! packet connection idles at most [`PACKET_IDLE_MAX`]; relays read in chunks of
//! [`RELAY_CHUNK_BYTES`].

use crate::tls::stream::{ClientTlsStream, ServerTlsStream};
use crate::tls::TlsConfigurator;
use monoio::io::{AsyncReadRent, AsyncReadRentExt, AsyncWriteRent, AsyncWriteRentExt, Splitable};
use monoio::net::udp::UdpSocket;
use monoio::net::TcpStream;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// The largest gossip packet relayed, in bytes: one UDP datagram's payload over IPv4, since
/// the receiving server hands each packet to its pool as a datagram (Consul allows 4 MiB,
/// but memberlist never sends a packet larger than a datagram).
pub const PACKET_BYTES_MAX: usize = 65_507;
/// The length prefix of a relayed packet, in bytes.
pub const PACKET_PREFIX_BYTES: usize = 4;
/// How long a packet connection stays open without a packet (Consul's
/// `GossipPacketMaxIdleTime`), on either side.
pub const PACKET_IDLE_MAX: Duration = Duration::from_secs(120);
/// Bytes read at once from either side of a relayed stream.
pub const RELAY_CHUNK_BYTES: usize = 64 * 1024;
/// A session with a server of another datacenter, through a mesh gateway.
pub type GatewayStream = ClientTlsStream<TcpStream>;

/// How long connecting to a gateway may take.
const GATEWAY_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One packet framed as Consul's wanfed transport sends it: its length as a big-endian
/// `u32`, then the packet. `None` for a packet larger than [`PACKET_BYTES_MAX`].
pub fn frame_packet(packet: &[u8]) -> Option<Vec<u8>> {
    if packet.len() > PACKET_BYTES_MAX {
        return None;
    }
    let mut framed = Vec::with_capacity(PACKET_PREFIX_BYTES + packet.len());
    framed.extend_from_slice(&(packet.len() as u32).to_be_bytes());
    framed.extend_from_slice(packet);
    debug_assert_eq!(framed.len(), PACKET_PREFIX_BYTES + packet.len());
    Some(framed)
}

/// The length a packet's prefix announces, refused when over [`PACKET_BYTES_MAX`].
pub fn packet_length(prefix: [u8; PACKET_PREFIX_BYTES]) -> Result<usize, String> {
    let length = u32::from_be_bytes(prefix) as usize;
    if length > PACKET_BYTES_MAX {
        return Err(format!(
            "a WAN gossip packet of {length} bytes is over the limit of {PACKET_BYTES_MAX}"
        ));
    }
    Ok(length)
}

/// Where this server's WAN pool reads datagrams and accepts streams, as seen from this
/// host: the pool's bound address, with a wildcard bind replaced by the loopback address.
pub fn local_pool_address(bound: SocketAddr) -> SocketAddr {
    let ip = match bound.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, bound.port())
}

/// Dials server `node` of `datacenter` through the mesh gateway at `gateway`: native TLS
/// with `alpn` and SNI `<node>.server.<datacenter>.<domain>` (`server.<datacenter>.…` for
/// the node `*`, any server), from the agent's bind address, as Consul's
/// `DialRPCViaMeshGateway` does.
pub async fn dial_through_gateway(
    tls: &TlsConfigurator,
    bind_addr: IpAddr,
    gateway: SocketAddr,
    node: &str,
    datacenter: &str,
    alpn: &str,
) -> Result<GatewayStream, String> {
    let (config, server_name) = tls.native_rpc_client(node, datacenter, alpn)?;
    let source = super::dial::source_for(bind_addr, gateway);
    let stream = match monoio::time::timeout(
        GATEWAY_CONNECT_TIMEOUT,
        super::dial::connect(source, gateway),
    )
    .await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err(format!("cannot connect to mesh gateway {gateway}: {e}")),
        Err(_) => return Err(format!("timed out connecting to mesh gateway {gateway}")),
    };
    let _ = stream.set_nodelay(true);
    super::forward::dial_native_tls(stream, config, server_name, gateway).await
}

/// Serves a `consul/wan-gossip/packet` session from `peer`: reads framed packets until the
/// sender closes, idles out or breaks the framing, and sends each to the WAN pool at
/// `pool` as one datagram. A datagram that cannot be sent is a lost packet, which gossip
/// tolerates.
pub async fn relay_packets<R: AsyncReadRent>(mut session: R, pool: SocketAddr, peer: SocketAddr) {
    let local = SocketAddr::new(pool.ip(), 0);
    let socket = match UdpSocket::bind(local) {
        Ok(socket) => socket,
        Err(e) => {
            log::warn!("wanfed: cannot relay gossip packets from {peer}: binding {local}: {e}");
            return;
        }
    };
    loop {
        let prefix = vec![0u8; PACKET_PREFIX_BYTES];
        let read = monoio::time::timeout(PACKET_IDLE_MAX, session.read_exact(prefix)).await;
        let (result, prefix) = match read {
            Ok(read) => read,
            Err(_) => return,
        };
        if result.is_err() {
            return;
        }
        let announced = [prefix[0], prefix[1], prefix[2], prefix[3]];
        let length = match packet_length(announced) {
            Ok(length) => length,
            Err(why) => {
                log::warn!("wanfed: closed the gossip packets from {peer}: {why}");
                return;
            }
        };
        let (result, packet) = session.read_exact(vec![0u8; length]).await;
        if result.is_err() {
            return;
        }
        let (_, _) = socket.send_to(packet, pool).await;
    }
}

/// Serves a `consul/wan-gossip/stream` session from `peer`: connects to the WAN pool's own
/// listener at `pool` and splices the two until either side ends.
pub async fn relay_stream(session: ServerTlsStream<TcpStream>, pool: SocketAddr, peer: SocketAddr) {
    let local = match super::dial::connect(Some(pool.ip()), pool).await {
        Ok(local) => local,
        Err(e) => {
            log::warn!(
                "wanfed: cannot relay a gossip stream from {peer}: connecting to {pool}: {e}"
            );
            return;
        }
    };
    let (session_read, session_write) = session.into_split();
    let (local_read, local_write) = local.into_split();
    monoio::join!(
        pump(session_read, local_write),
        pump(local_read, session_write)
    );
}

/// Copies `from` to `to` until `from` ends or either fails, then shuts `to` down so the
/// other side sees the end.
async fn pump<R: AsyncReadRent, W: AsyncWriteRent>(mut from: R, mut to: W) {
    let mut chunk = Vec::with_capacity(RELAY_CHUNK_BYTES);
    loop {
        let (result, returned) = from.read(chunk).await;
        chunk = returned;
        match result {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let (result, returned) = to.write_all(chunk).await;
                chunk = returned;
                if result.is_err() {
                    break;
                }
                chunk.clear();
            }
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_framed_with_a_big_endian_length_and_bounded() {
        let framed = frame_packet(b"ping").unwrap();
        assert_eq!(framed, [0, 0, 0, 4, b'p', b'i', b'n', b'g']);
        assert_eq!(packet_length([0, 0, 0, 4]), Ok(4));
        let largest = vec![7u8; PACKET_BYTES_MAX];
        assert_eq!(frame_packet(&largest).unwrap().len(), PACKET_BYTES_MAX + 4);
        assert!(frame_packet(&vec![7u8; PACKET_BYTES_MAX + 1]).is_none());
        let over = ((PACKET_BYTES_MAX + 1) as u32).to_be_bytes();
        assert!(packet_length(over).unwrap_err().contains("over the limit"));
        assert!(packet_length([0xff; 4]).is_err());
    }

    #[test]
    fn a_wildcard_pool_is_reached_on_loopback() {
        let any: SocketAddr = "0.0.0.0:8302".parse().unwrap();
        assert_eq!(local_pool_address(any), "127.0.0.1:8302".parse().unwrap());
        let any6: SocketAddr = "[::]:8302".parse().unwrap();
        assert_eq!(local_pool_address(any6), "[::1]:8302".parse().unwrap());
        let bound: SocketAddr = "127.0.0.9:8302".parse().unwrap();
        assert_eq!(local_pool_address(bound), bound);
    }
}
