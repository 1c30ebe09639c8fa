//! Check probes: one function per check type, each answering `(status, output)` within the
//! check's timeout. They run as monoio tasks on the agent's shard, except script checks and
//! host-name resolution, which block and so run on short-lived helper threads.
//!
//! Output follows Consul's wording where clients or operators read it (`HTTP GET <url>: 200
//! OK Output: …`, `TCP connect <addr>: Success`) and is capped at the check's
//! `output_max_size` (4 KiB by default).

pub mod grpc;
pub mod h2ping;
pub mod http;
pub mod script;

use crate::store::catalog::Status;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The answer of one probe.
pub type ProbeResult = (Status, String);

/// Truncates `text` to `max` bytes on a character boundary.
pub fn cap_output(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// Resolves `host:port` (IP literals at once, names on a helper thread so the shard never
/// blocks on DNS).
pub async fn resolve(target: &str, timeout: Duration) -> Result<SocketAddr, String> {
    if let Ok(addr) = target.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let (host, port) = split_host_port(target)?;
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::new(IpAddr::from([127, 0, 0, 1]), port));
    }
    let (tx, rx) = flume::bounded(1);
    let name = format!("{host}:{port}");
    std::thread::Builder::new()
        .name("praetor-resolve".into())
        .spawn(move || {
            let result = std::net::ToSocketAddrs::to_socket_addrs(&name)
                .map_err(|e| e.to_string())
                .and_then(|mut addrs| addrs.next().ok_or_else(|| "no addresses".to_string()));
            let _ = tx.send(result);
        })
        .map_err(|e| format!("cannot resolve {target}: {e}"))?;
    match monoio::time::timeout(timeout, rx.recv_async()).await {
        Ok(Ok(result)) => result.map_err(|e| format!("lookup {host}: {e}")),
        Ok(Err(_)) => Err(format!("lookup {host}: resolver failed")),
        Err(_) => Err(format!("lookup {host}: i/o timeout")),
    }
}

/// Splits `host:port`, accepting `[v6]:port`.
pub fn split_host_port(target: &str) -> Result<(&str, u16), String> {
    let (host, port) = if let Some(rest) = target.strip_prefix('[') {
        let end = rest
            .find(']')
            .ok_or_else(|| format!("address {target}: missing ']'"))?;
        let port = rest[end + 1..]
            .strip_prefix(':')
            .ok_or_else(|| format!("address {target}: missing port in address"))?;
        (&rest[..end], port)
    } else {
        target
            .rsplit_once(':')
            .ok_or_else(|| format!("address {target}: missing port in address"))?
    };
    let port = port
        .parse::<u16>()
        .map_err(|_| format!("address {target}: invalid port"))?;
    Ok((host, port))
}

/// `target` (an HTTP check's URL or a gRPC check's `host:port[/service]`) with its host
/// and port replaced by a sidecar's exposed listener: `host` (empty: this host, which Go's
/// dialer takes an empty host for) and `port`; the scheme, path, query and gRPC service
/// stay. Consul's agent rewrites its `ProxyHTTP`/`ProxyGRPC` targets the same way.
pub fn via_listener(target: &str, host: &str, port: u16) -> String {
    let host = match host {
        "" => "127.0.0.1".to_string(),
        v6 if v6.contains(':') && !v6.starts_with('[') => format!("[{v6}]"),
        other => other.to_string(),
    };
    let (scheme, rest) = match target.find("://") {
        Some(at) => target.split_at(at + 3),
        None => ("", target),
    };
    // The authority ends where the path, query or fragment starts (a gRPC target's
    // `/service` included).
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    format!("{scheme}{host}:{port}{}", &rest[end..])
}

/// Connects to `addr` within `timeout`.
pub async fn connect(
    addr: SocketAddr,
    timeout: Duration,
) -> Result<monoio::net::TcpStream, String> {
    match monoio::time::timeout(timeout, monoio::net::TcpStream::connect_addr(addr)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(format!("dial tcp {addr}: {}", describe_io_error(&e))),
        Err(_) => Err(format!("dial tcp {addr}: i/o timeout")),
    }
}

/// Go's wording for common socket errors.
pub fn describe_io_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connect: connection refused".to_string(),
        std::io::ErrorKind::ConnectionReset => "read: connection reset by peer".to_string(),
        _ => e.to_string(),
    }
}

/// `tcp`: passing when a connection opens within the timeout.
pub async fn tcp(target: &str, timeout: Duration) -> ProbeResult {
    let addr = match resolve(target, timeout).await {
        Ok(addr) => addr,
        Err(e) => return (Status::Critical, e),
    };
    match connect(addr, timeout).await {
        Ok(_) => (Status::Passing, format!("TCP connect {target}: Success")),
        Err(e) => (Status::Critical, e),
    }
}

/// `udp`: sends a datagram; an ICMP error (connection refused) is critical, an answer or
/// silence until the timeout is passing, as in Consul.
pub async fn udp(target: &str, timeout: Duration) -> ProbeResult {
    let addr = match resolve(target, timeout).await {
        Ok(addr) => addr,
        Err(e) => return (Status::Critical, e),
    };
    let local: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let socket = match monoio::net::udp::UdpSocket::bind(local) {
        Ok(s) => s,
        Err(e) => return (Status::Critical, format!("dial udp {target}: {e}")),
    };
    if let Err(e) = socket.connect(addr).await {
        return (Status::Critical, format!("dial udp {target}: {e}"));
    }
    let (sent, _) = socket.send(vec![0u8]).await;
    if let Err(e) = sent {
        return (Status::Critical, format!("write udp {target}: {e}"));
    }
    match monoio::time::timeout(timeout, socket.recv(vec![0u8; 512])).await {
        Ok((Ok(_), _)) | Err(_) => (Status::Passing, format!("UDP connect {target}: Success")),
        Ok((Err(e), _)) => (
            Status::Critical,
            format!("read udp {target}: {}", describe_io_error(&e)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ports_split_like_go() {
        assert_eq!(split_host_port("localhost:80").unwrap(), ("localhost", 80));
        assert_eq!(split_host_port("[::1]:9000").unwrap(), ("::1", 9000));
        assert!(split_host_port("nohost").is_err());
        assert!(split_host_port("h:99999").is_err());
    }

    #[test]
    fn exposed_checks_are_probed_through_the_sidecars_listener() {
        assert_eq!(
            via_listener("http://10.0.0.5:8080/health?full=1", "127.0.0.9", 21500),
            "http://127.0.0.9:21500/health?full=1"
        );
        assert_eq!(
            via_listener("https://app.local/ready", "", 21501),
            "https://127.0.0.1:21501/ready"
        );
        assert_eq!(
            via_listener("http://[::1]:9000", "::1", 21502),
            "http://[::1]:21502"
        );
        assert_eq!(
            via_listener("10.0.0.5:9090/grpc.health.v1.Health", "10.0.0.6", 21503),
            "10.0.0.6:21503/grpc.health.v1.Health"
        );
        assert_eq!(via_listener("10.0.0.5:9090", "", 21504), "127.0.0.1:21504");
    }

    #[test]
    fn output_is_capped_on_char_boundaries() {
        assert_eq!(cap_output("héllo".into(), 2), "h");
        assert_eq!(cap_output("abc".into(), 10), "abc");
    }
}
