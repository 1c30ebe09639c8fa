//! Outgoing connections between agents leave from the agent's bind address.
//!
//! Consul sets `RPCSrcAddr` to the bind address whenever that names one address, and its
//! connection pool and Raft layer dial from it; praetor does the same for server RPC and
//! Raft, and also for the gossip pools' TCP exchanges (memberlist leaves those to the
//! kernel). Without it the kernel picks the source from the route — on loopback or a
//! multi-homed host, an address that is not the agent's — so a firewall rule, or a peer's
//! view of who connected, would not match the agent that did.
//!
//! Invariant: with no source (an unspecified bind address) a dial is exactly the plain
//! connect it replaces.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The address to dial from: `bind_addr` unless it is unspecified (`0.0.0.0`, `::`), or of
/// the other family than the destination.
pub fn source_for(bind_addr: IpAddr, destination: SocketAddr) -> Option<IpAddr> {
    let same_family = bind_addr.is_ipv4() == destination.is_ipv4();
    (!bind_addr.is_unspecified() && same_family).then_some(bind_addr)
}

fn socket_from(source: IpAddr, destination: SocketAddr) -> io::Result<socket2::Socket> {
    debug_assert_eq!(source.is_ipv4(), destination.is_ipv4());
    let domain = if destination.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
    socket.set_cloexec(true)?;
    // Port 0: the kernel picks a free port on the source address for every connection.
    socket.bind(&SocketAddr::new(source, 0).into())?;
    Ok(socket)
}

/// A blocking connect from `source` (when given) to `destination`, bounded by `timeout`.
pub fn connect_blocking(
    source: Option<IpAddr>,
    destination: SocketAddr,
    timeout: Duration,
) -> io::Result<std::net::TcpStream> {
    let Some(source) = source else {
        return std::net::TcpStream::connect_timeout(&destination, timeout);
    };
    let socket = socket_from(source, destination)?;
    socket.connect_timeout(&destination.into(), timeout)?;
    Ok(socket.into())
}

/// A connect on the shard's runtime from `source` (when given) to `destination`. The caller
/// bounds it in time, as it bounds a plain `connect_addr`.
pub async fn connect(
    source: Option<IpAddr>,
    destination: SocketAddr,
) -> io::Result<monoio::net::TcpStream> {
    let Some(source) = source else {
        return monoio::net::TcpStream::connect_addr(destination).await;
    };
    let socket = socket_from(source, destination)?;
    socket.set_nonblocking(true)?;
    match socket.connect(&destination.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    // The runtime takes a duplicate of the descriptor; `socket` stays to read the outcome
    // and then closes only its own.
    let std_stream: std::net::TcpStream = socket.try_clone()?.into();
    let stream = monoio::net::TcpStream::from_std(std_stream)?;
    // Writable once the handshake ended; whether it succeeded is the socket's error.
    stream.writable(false).await?;
    let outcome = socket.take_error()?;
    drop(socket);
    match outcome {
        None => Ok(stream),
        Some(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_is_the_bind_address_when_it_names_one() {
        let to: SocketAddr = "127.0.0.1:8300".parse().unwrap();
        assert_eq!(source_for("0.0.0.0".parse().unwrap(), to), None);
        assert_eq!(source_for("::1".parse().unwrap(), to), None);
        let bind: IpAddr = "127.0.0.9".parse().unwrap();
        assert_eq!(source_for(bind, to), Some(bind));
    }

    #[test]
    fn a_blocking_dial_leaves_from_the_source() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let source: IpAddr = "127.0.0.7".parse().unwrap();
        let stream = connect_blocking(
            Some(source),
            listener.local_addr().unwrap(),
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(stream.local_addr().unwrap().ip(), source);
        let (_, peer) = listener.accept().unwrap();
        assert_eq!(peer.ip(), source);
    }

    #[test]
    fn a_dial_on_the_runtime_leaves_from_the_source_and_reports_a_refusal() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = listener.local_addr().unwrap();
        // A port nothing listens on: bound and released again.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let source: IpAddr = "127.0.0.8".parse().unwrap();
        let mut runtime = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .unwrap();
        runtime.block_on(async {
            let stream = connect(Some(source), open).await.unwrap();
            assert_eq!(stream.local_addr().unwrap().ip(), source);
            let refused = connect(Some(source), closed).await.unwrap_err();
            assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
        });
        let (_, peer) = listener.accept().unwrap();
        assert_eq!(peer.ip(), source);
    }
}
