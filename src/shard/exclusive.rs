//! Keeping a listening port to this process.
//!
//! Every shard binds its own socket on the HTTP, HTTPS, RPC and DNS ports with
//! `SO_REUSEPORT`, and the kernel spreads connections across them. But `SO_REUSEPORT` admits
//! any socket of the same user: a second agent started on the same port would join the group
//! and silently take part of the traffic. Consul fails to start instead ("bind: address
//! already in use"), and so does praetor, in two steps:
//!
//! 1. [`probe`] binds the address with a socket *without* `SO_REUSEPORT` before the shards
//!    bind theirs. The kernel refuses it while any socket holds the address — another
//!    agent's group included — and the agent stops with the process that holds it, when it
//!    can be found. A socket no process holds is one a killed process left to the kernel's
//!    deferred io_uring teardown: the probe waits for it, within [`RELEASE_WAIT`].
//! 2. The probe closes before the group binds, so two agents starting at the same instant
//!    could both pass it. [`verify`] closes that window: once the group is bound, the
//!    kernel's socket table (`/proc/net/{tcp,tcp6,udp,udp6}`) must show no socket on the
//!    port but ours. Both racing agents see each other then, so at worst both stop; neither
//!    ever serves half the traffic.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// How long a port held by no process (a killed agent's sockets awaiting the kernel's
/// io_uring teardown) is waited for.
pub const RELEASE_WAIT: Duration = Duration::from_secs(10);
/// Pause between probes while waiting: short, since a killed agent's sockets are usually
/// released within tens of milliseconds and a restart should not wait much longer.
const RELEASE_RETRY_STEP: Duration = Duration::from_millis(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

fn socket_for(addr: SocketAddr, transport: Transport) -> io::Result<socket2::Socket> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let kind = match transport {
        Transport::Tcp => socket2::Type::STREAM,
        Transport::Udp => socket2::Type::DGRAM,
    };
    let socket = socket2::Socket::new(domain, kind, None)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    Ok(socket)
}

/// Checks that nothing holds `addr`: binds it without `SO_REUSEPORT` and closes it again.
/// The error names the holder when `/proc` shows it.
pub fn probe(addr: SocketAddr, transport: Transport) -> Result<(), String> {
    if addr.port() == 0 {
        return Ok(());
    }
    bind_alone(addr, transport, || {
        let socket = socket_for(addr, transport)?;
        // Like the shards' sockets: a port whose last connections linger in TIME_WAIT
        // is free.
        if transport == Transport::Tcp {
            socket.set_reuse_address(true)?;
        }
        socket.bind(&addr.into())
    })
}

/// Binds `addr` with `bind`, a bind that must be the only socket on the address (no
/// `SO_REUSEPORT`). While the address is in use: when a process holds it, the error names
/// it; when none does, the sockets are a killed process's awaiting the kernel's release
/// (its io_uring teardown, tens of milliseconds) and the bind is retried every
/// [`RELEASE_RETRY_STEP`] for up to [`RELEASE_WAIT`].
pub fn bind_alone<T>(
    addr: SocketAddr,
    transport: Transport,
    mut bind: impl FnMut() -> io::Result<T>,
) -> Result<T, String> {
    let deadline = Instant::now() + RELEASE_WAIT;
    let mut waited = false;
    loop {
        let error = match bind() {
            Ok(bound) => return Ok(bound),
            Err(error) if error.kind() == io::ErrorKind::AddrInUse => error,
            Err(error) => return Err(error.to_string()),
        };
        let holders = sockets_on(addr, transport).unwrap_or_default();
        let owner = holders.iter().find_map(|inode| owner_of(*inode));
        if let Some((pid, name)) = owner {
            return Err(format!("{error} (process {pid}, {name}, holds it)"));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{error} (still held {} s later, by no process this user can see)",
                RELEASE_WAIT.as_secs()
            ));
        }
        if !waited {
            log::info!(
                "agent: {addr} is held by no process (a stopped agent's sockets awaiting release); waiting"
            );
            waited = true;
        }
        std::thread::sleep(RELEASE_RETRY_STEP);
    }
}

/// Checks that the only sockets on `addr`'s port (and an overlapping address) are `ours`.
pub fn verify(addr: SocketAddr, transport: Transport, ours: &[RawFd]) -> Result<(), String> {
    if addr.port() == 0 {
        return Ok(());
    }
    let own: HashSet<u64> = ours.iter().filter_map(|fd| inode_of(*fd)).collect();
    debug_assert_eq!(own.len(), ours.len(), "every socket has its own inode");
    let found = sockets_on(addr, transport)
        .map_err(|e| format!("cannot read the kernel's socket table: {e}"))?;
    debug_assert!(
        own.iter().all(|inode| found.contains(inode)),
        "our own sockets are in the table"
    );
    match found.iter().find(|inode| !own.contains(inode)) {
        None => Ok(()),
        Some(inode) => Err(match owner_of(*inode) {
            Some((pid, name)) => {
                format!("address already in use (process {pid}, {name}, bound it at the same time)")
            }
            None => "address already in use (another socket bound it at the same time)".to_string(),
        }),
    }
}

fn inode_of(fd: RawFd) -> Option<u64> {
    // SAFETY: fstat fills the zeroed struct we own for a descriptor we own.
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut stat) == 0).then_some(stat.st_ino)
    }
}

/// Inodes of the sockets bound to `addr`'s port on an overlapping address (equal, or either
/// one unspecified), listening for TCP.
fn sockets_on(addr: SocketAddr, transport: Transport) -> io::Result<Vec<u64>> {
    let table = match (transport, addr.is_ipv4()) {
        (Transport::Tcp, true) => "/proc/net/tcp",
        (Transport::Tcp, false) => "/proc/net/tcp6",
        (Transport::Udp, true) => "/proc/net/udp",
        (Transport::Udp, false) => "/proc/net/udp6",
    };
    let text = std::fs::read_to_string(table)?;
    Ok(parse_socket_table(&text, addr, transport))
}

/// TCP's LISTEN state in the kernel's tables.
const TCP_LISTEN: &str = "0A";

fn parse_socket_table(text: &str, addr: SocketAddr, transport: Transport) -> Vec<u64> {
    let mut inodes = Vec::new();
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode …
        if fields.len() < 10 {
            continue;
        }
        if transport == Transport::Tcp && fields[3] != TCP_LISTEN {
            continue;
        }
        let Some(local) = parse_address(fields[1]) else {
            continue;
        };
        let overlaps =
            local.ip() == addr.ip() || local.ip().is_unspecified() || addr.ip().is_unspecified();
        if local.port() != addr.port() || !overlaps {
            continue;
        }
        if let Ok(inode) = fields[9].parse::<u64>() {
            if inode != 0 {
                inodes.push(inode);
            }
        }
    }
    inodes
}

/// `0100007F:1F90` → 127.0.0.1:8080: the address as the kernel's words in native byte order,
/// the port in hex.
fn parse_address(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        Some(
            u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16)
                .ok()?
                .to_ne_bytes(),
        )
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The process holding socket `inode`, among those whose descriptors this user may read.
fn owner_of(inode: u64) -> Option<(u32, String)> {
    let wanted = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path())
                .is_ok_and(|target| target.as_os_str() == wanted.as_str())
            {
                let name = std::fs::read_to_string(entry.path().join("comm"))
                    .map(|n| n.trim().to_string())
                    .unwrap_or_default();
                return Some((pid, name));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn kernel_addresses_parse() {
        if cfg!(target_endian = "little") {
            assert_eq!(
                parse_address("0100007F:1F90"),
                Some("127.0.0.1:8080".parse().unwrap())
            );
            assert_eq!(
                parse_address("00000000000000000000000001000000:2134"),
                Some("[::1]:8500".parse().unwrap())
            );
        }
        assert_eq!(parse_address("zz:1"), None);
    }

    #[test]
    fn a_second_group_on_the_same_port_is_seen() {
        // Two reuseport sockets on a fresh loopback port: with only the first counted as
        // ours, the second is another process's.
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let first = crate::shard::reuseport_listener(addr).unwrap();
        let bound = first.local_addr().unwrap();
        verify(bound, Transport::Tcp, &[first.as_raw_fd()]).unwrap();
        assert!(probe(bound, Transport::Tcp)
            .unwrap_err()
            .contains(&std::process::id().to_string()));
        let second = crate::shard::reuseport_listener(bound).unwrap();
        let error = verify(bound, Transport::Tcp, &[first.as_raw_fd()]).unwrap_err();
        assert!(error.contains("address already in use"), "{error}");
        verify(
            bound,
            Transport::Tcp,
            &[first.as_raw_fd(), second.as_raw_fd()],
        )
        .unwrap();
        drop((first, second));
        probe(bound, Transport::Tcp).unwrap();
    }
}
