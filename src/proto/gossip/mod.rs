//! Gossip wire formats: HashiCorp memberlist packets and streams, and serf's messages
//! inside them, byte-compatible with serf 0.9.4 / memberlist 0.2.x (what Debian's `serf`
//! and Consul agents speak) and accepting what newer memberlist versions add (label
//! header, go-msgpack v2 encodings).
//!
//! Layout: [`msgpack`] (now [`crate::proto::msgpack`], shared with Consul's RPC) is the
//! codec with go-msgpack 0.5.5's exact encoding choices;
//! [`memberlist`] the SWIM messages and their containers (compound, compress, CRC,
//! label, encryption); [`lzw`] Go's LZW; [`security`] the AES-GCM keyring framing;
//! [`serf`] serf's messages, tags and coordinates. Nothing here does I/O or keeps state.

pub mod lzw;
pub mod memberlist;
pub mod security;

/// The codec moved to [`crate::proto::msgpack`] when Consul's RPC came to share it; the old
/// path stays for the gossip modules.
pub use super::msgpack;
pub mod serf;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use msgpack::WireError;

/// A Go `net.IP` as memberlist sends it: 4 bytes for IPv4 (its transport converts with
/// `To4`), 16 for IPv6.
pub fn ip_to_wire(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// Parses a Go `net.IP`: 4 bytes, or 16 (IPv4-mapped addresses become IPv4).
pub fn ip_from_wire(b: &[u8]) -> Result<IpAddr, WireError> {
    match b.len() {
        4 => Ok(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
        16 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(b);
            let v6 = Ipv6Addr::from(a);
            Ok(match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            })
        }
        _ => Err(WireError::Invalid("IP address must be 4 or 16 bytes")),
    }
}
