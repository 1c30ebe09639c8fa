//! Sockets and process facts: target addresses, connects bound to a chosen source address,
//! the open-files limit, and a process's resident memory.
//!
//! Connects here are blocking with a bound (`connect_timeout`) and happen before the measured
//! window; the async paths reconnect through monoio. Binding a source address uses
//! `IP_BIND_ADDRESS_NO_PORT`, so the port is picked at connect time per destination and one
//! source address serves ~28k connections to each destination, not ~28k in total.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

/// Where a run sends its load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub addr: SocketAddr,
    /// `Host` header value: the authority as written on the command line.
    pub authority: String,
}

/// Parses `http://host:port[/…]`, `dns://host:port`, `udp://…`, `tcp://…` or `host:port`.
pub fn parse_target(text: &str) -> Result<Target, String> {
    let without_scheme = if let Some((scheme, rest)) = text.split_once("://") {
        match scheme {
            "http" | "dns" | "udp" | "tcp" => rest,
            "https" => return Err("https targets are not supported (no TLS in loadgen)".into()),
            other => return Err(format!("unknown scheme {other:?} in target {text:?}")),
        }
    } else {
        text
    };
    let authority = without_scheme.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(format!("target {text:?} has no host"));
    }
    if !authority.contains(':') {
        return Err(format!("target {text:?} needs an explicit port"));
    }
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {authority:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{authority:?} resolves to nothing"))?;
    Ok(Target {
        addr,
        authority: authority.to_string(),
    })
}

/// `IP_BIND_ADDRESS_NO_PORT` (linux/in.h): defer the ephemeral port choice to connect().
const IP_BIND_ADDRESS_NO_PORT: libc::c_int = 24;

fn bind_source(socket: &Socket, source: Ipv4Addr) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: a valid socket fd and a pointer to an int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            IP_BIND_ADDRESS_NO_PORT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    socket.bind(&SocketAddr::new(IpAddr::V4(source), 0).into())
}

/// A TCP connection with `TCP_NODELAY`, optionally from `source`, within `timeout`; returned
/// non-blocking, ready for a monoio runtime.
/// A listening socket with `SO_REUSEPORT`, so several threads can each accept on one port.
pub fn reuseport_listener(addr: SocketAddr) -> Result<std::net::TcpListener, String> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .map_err(|e| format!("socket: {e}"))?;
    socket
        .set_reuse_address(true)
        .and_then(|_| socket.set_reuse_port(true))
        .and_then(|_| socket.bind(&addr.into()))
        .and_then(|_| socket.listen(4096))
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    Ok(socket.into())
}

pub fn connect_tcp(
    dest: SocketAddr,
    source: Option<Ipv4Addr>,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let socket = Socket::new(Domain::for_address(dest), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_tcp_nodelay(true)?;
    if let Some(source) = source {
        bind_source(&socket, source)?;
    }
    socket.connect_timeout(&dest.into(), timeout)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// A UDP socket connected to `dest` (so it only hears `dest`), optionally from `source`,
/// with larger buffers so bursts of answers are not dropped by loadgen's own socket.
pub fn connect_udp(dest: SocketAddr, source: Option<Ipv4Addr>) -> io::Result<UdpSocket> {
    /// Receive and send buffer requested per UDP socket.
    const UDP_BUFFER_BYTES: usize = 4 * 1024 * 1024;
    let socket = Socket::new(Domain::for_address(dest), Type::DGRAM, Some(Protocol::UDP))?;
    let local = match (source, dest) {
        (Some(ip), _) => SocketAddr::new(IpAddr::V4(ip), 0),
        (None, SocketAddr::V4(_)) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        (None, SocketAddr::V6(_)) => "[::]:0".parse().expect("constant address"),
    };
    socket.bind(&local.into())?;
    // The kernel caps these at net.core.*mem_max; a smaller buffer is not an error.
    let _ = socket.set_recv_buffer_size(UDP_BUFFER_BYTES);
    let _ = socket.set_send_buffer_size(UDP_BUFFER_BYTES);
    socket.connect(&dest.into())?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Raises the soft open-files limit to the hard limit and returns the resulting soft limit.
pub fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    lim.rlim_cur
}

/// File descriptors loadgen keeps for itself beyond its sockets (stdio, runtimes, files).
pub const FDS_RESERVED: u64 = 64;

/// Errors clearly when `sockets` would not fit under the open-files limit.
pub fn check_fd_budget(sockets: usize) -> Result<(), String> {
    let limit = raise_fd_limit();
    if sockets as u64 + FDS_RESERVED > limit {
        return Err(format!(
            "{sockets} sockets + {FDS_RESERVED} reserved exceed the open-files limit {limit} \
             (ulimit -n); split the load over several loadgen processes"
        ));
    }
    Ok(())
}

/// `VmRSS` of `pid` in KiB, from /proc/<pid>/status.
pub fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss_kib(&status)
}

fn parse_vm_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_forms() {
        let t = parse_target("http://127.0.0.1:8500").unwrap();
        assert_eq!(t.addr, "127.0.0.1:8500".parse().unwrap());
        assert_eq!(t.authority, "127.0.0.1:8500");
        assert_eq!(
            parse_target("http://127.0.0.1:8500/v1/").unwrap().authority,
            "127.0.0.1:8500"
        );
        assert_eq!(parse_target("127.0.0.1:53").unwrap().addr.port(), 53);
        assert_eq!(
            parse_target("dns://127.0.0.1:8600").unwrap().addr.port(),
            8600
        );
        assert!(parse_target("https://127.0.0.1:1")
            .unwrap_err()
            .contains("TLS"));
        assert!(parse_target("http://127.0.0.1")
            .unwrap_err()
            .contains("port"));
        assert!(parse_target("ftp://x:1").unwrap_err().contains("scheme"));
        assert!(parse_target("http://").is_err());
    }

    #[test]
    fn vm_rss_parsing() {
        let status = "Name:\tx\nVmPeak:\t  9999 kB\nVmRSS:\t   1234 kB\nThreads:\t2\n";
        assert_eq!(parse_vm_rss_kib(status), Some(1234));
        assert_eq!(parse_vm_rss_kib("Name: x\n"), None);
        assert!(vm_rss_kib(std::process::id()).unwrap() > 0);
    }

    #[test]
    fn connect_from_a_chosen_source_address() {
        // A port of loadgen's own range (18400-18699), kept for this test only.
        let listener = std::net::TcpListener::bind("127.0.0.1:18698").unwrap();
        let dest = listener.local_addr().unwrap();
        let source = Ipv4Addr::new(127, 0, 0, 41);
        let stream = connect_tcp(dest, Some(source), Duration::from_secs(2)).unwrap();
        assert_eq!(stream.local_addr().unwrap().ip(), IpAddr::V4(source));
        let (_, peer) = listener.accept().unwrap();
        assert_eq!(peer.ip(), IpAddr::V4(source));
    }
}
