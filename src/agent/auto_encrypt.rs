//! Auto-encrypt, the client agents' side (`auto_encrypt { tls = true }`): the agent asks
//! its servers for its TLS certificate with Consul's `AutoEncrypt.Sign` call, as a Consul
//! client agent does, so praetor's agents and Consul's servers (and the other way round)
//! understand each other. The servers' side is `shard::auto_encrypt`.
//!
//! - [`bootstrap`] runs before the agent binds any listener: it makes a key and a request
//!   naming the agent's SPIFFE ID, dials the servers named by `start_join`/`retry_join` on
//!   the server port with byte 7 and TLS without a client certificate (checking the server
//!   against `ca_file` when one is configured), makes the call on the msgpack net/rpc codec
//!   that follows the handshake at once (no second byte, as Consul's pool dials it), and
//!   retries with a bounded backoff until a server signs. The agent then serves with that
//!   certificate.
//! - [`spawn_renewal`] starts the thread that asks again, over mutual TLS with the current
//!   certificate (byte 3, then byte 0 inside), when half (plus up to a fifth, at random) of
//!   the remaining validity has passed, and installs the new certificate for the next
//!   connections.
//!
//! Bounds: connect, read and handshake timeouts ([`SIGN_TIMEOUT`]), the answer's size
//! ([`ANSWER_BYTES_MAX`]), the retry backoff ([`RETRY_BACKOFF_MAX`]).

use crate::config::AgentConfig;
use crate::consul::rpc::auto_encrypt::{read_signed_response, SignedAgent};
use crate::consul::rpc::connect_ca::CaSignRequest;
use crate::proto::msgpack_rpc::{decode_response_header, encode_request, MessageReader};
use crate::proto::rpc_select::rpc_type;
use crate::tls::agent_ca::{agent_csr, UNKNOWN_TRUST_DOMAIN};
use crate::tls::TlsConfigurator;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

/// Connect, handshake and answer, each.
pub const SIGN_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait between two attempts to get a certificate.
pub const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(30);
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(500);
/// Largest answer read, in bytes: a certificate chain, the roots and the servers' CA.
pub const ANSWER_BYTES_MAX: usize = 256 * 1024;
/// The call's name on the wire.
const METHOD: &str = "AutoEncrypt.Sign";

/// The server-port addresses of the servers a client agent was told to join: each
/// `start_join`/`retry_join` host with this agent's `ports.server` (Consul's rule; cloud
/// auto-join entries are skipped).
pub fn server_addresses(config: &AgentConfig) -> Vec<SocketAddr> {
    let port = config.ports.server.max(0) as u16;
    let mut out = Vec::new();
    for entry in config.start_join.iter().chain(&config.retry_join) {
        if entry.contains("provider=") {
            continue;
        }
        let host = if let Ok(addr) = entry.parse::<SocketAddr>() {
            addr.ip().to_string()
        } else if let Ok(ip) = entry.trim_matches(['[', ']']).parse::<IpAddr>() {
            ip.to_string()
        } else {
            entry
                .rsplit_once(':')
                .map_or(entry.as_str(), |(host, _)| host)
                .to_string()
        };
        match (host.as_str(), port).to_socket_addrs() {
            Ok(resolved) => {
                for addr in resolved {
                    if !out.contains(&addr) {
                        out.push(addr);
                    }
                }
            }
            Err(e) => log::warn!("auto_encrypt: cannot resolve {entry:?}: {e}"),
        }
    }
    out
}

/// Which session a request travels in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Session {
    /// Byte 7: TLS without a client certificate, the codec right after the handshake.
    Insecure,
    /// Byte 3, then byte 0 inside: the ordinary mutual-TLS RPC session.
    Verified,
}

/// The request of one `AutoEncrypt.Sign` call, as the agent sends it.
pub struct SignCall<'a> {
    pub datacenter: &'a str,
    pub csr_pem: &'a str,
    pub token: &'a str,
}

/// One `AutoEncrypt.Sign` call on `addr`, blocking, each step bounded by [`SIGN_TIMEOUT`];
/// the server's answer, or its error text, or why there was none.
pub fn request_certificate(
    tls: &TlsConfigurator,
    addr: SocketAddr,
    session: Session,
    call: &SignCall,
) -> Result<SignedAgent, String> {
    let (client_config, name) = tls
        .rpc_client()
        .ok_or("auto-encrypt dials with TLS, but no TLS client configuration exists")?;
    let connection = rustls::ClientConnection::new(client_config, name)
        .map_err(|e| format!("TLS setup failed: {e}"))?;
    let mut socket = TcpStream::connect_timeout(&addr, SIGN_TIMEOUT)
        .map_err(|e| format!("cannot connect: {e}"))?;
    socket
        .set_read_timeout(Some(SIGN_TIMEOUT))
        .and_then(|()| socket.set_write_timeout(Some(SIGN_TIMEOUT)))
        .and_then(|()| socket.set_nodelay(true))
        .map_err(|e| format!("cannot configure the socket: {e}"))?;
    let first = match session {
        Session::Insecure => rpc_type::TLS_INSECURE,
        Session::Verified => rpc_type::TLS,
    };
    socket
        .write_all(&[first])
        .map_err(|e| format!("cannot write: {e}"))?;
    let mut stream = rustls::StreamOwned::new(connection, socket);
    let mut out = Vec::with_capacity(call.csr_pem.len() + 128);
    if session == Session::Verified {
        // Inside the ordinary TLS session a second byte says what follows; the insecure
        // session carries the codec at once.
        out.push(rpc_type::CONSUL);
    }
    let body = CaSignRequest {
        datacenter: call.datacenter,
        csr: call.csr_pem,
        token: call.token,
    }
    .encode();
    encode_request(&mut out, METHOD, 1, &body);
    stream
        .write_all(&out)
        .and_then(|()| stream.flush())
        .map_err(|e| format!("request not sent: {}", describe_io(&e)))?;
    let mut buffer = Vec::with_capacity(16 * 1024);
    let mut reader = MessageReader::new();
    let mut chunk = [0u8; 16 * 1024];
    let extent = loop {
        if let Some(extent) = reader
            .advance(&buffer)
            .map_err(|e| format!("bad answer: {e}"))?
        {
            break extent;
        }
        if buffer.len() > ANSWER_BYTES_MAX {
            return Err(format!("answer larger than {ANSWER_BYTES_MAX} bytes"));
        }
        let n = stream
            .read(&mut chunk)
            .map_err(|e| format!("no answer: {}", describe_io(&e)))?;
        if n == 0 {
            return Err("the server closed the connection without answering".to_string());
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let header = decode_response_header(&buffer[..extent.header_length])
        .map_err(|e| format!("bad answer: {e}"))?;
    if !header.error.is_empty() {
        return Err(header.error.to_string());
    }
    read_signed_response(&buffer[extent.header_length..extent.total()])
        .map_err(|e| format!("malformed answer: {e}"))
}

/// A handshake failure surfaces from rustls as an I/O error wrapping the TLS error.
fn describe_io(error: &std::io::Error) -> String {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => crate::tls::verify::describe_error(tls),
        None => error.to_string(),
    }
}

/// Makes a key and a request, asks `servers` in turn until one signs, installs the
/// certificate; returns its end of validity (Unix seconds).
fn obtain(
    config: &AgentConfig,
    tls: &TlsConfigurator,
    servers: &[SocketAddr],
    session: Session,
) -> Result<i64, String> {
    let auto = &config.tls.auto_encrypt;
    let (csr_pem, key_pem) = agent_csr(
        UNKNOWN_TRUST_DOMAIN,
        &config.datacenter,
        &config.node_name,
        &auto.dns_san,
        &auto.ip_san,
    )?;
    let token = config.acl.tokens.agent.clone().unwrap_or_default();
    let call = SignCall {
        datacenter: &config.datacenter,
        csr_pem: &csr_pem,
        token: &token,
    };
    let mut errors = Vec::new();
    for addr in servers {
        match request_certificate(tls, *addr, session, &call) {
            Ok(response) => {
                let mut roots = response.manual_ca_roots.clone();
                roots.extend(
                    response
                        .connect_ca_roots
                        .roots
                        .iter()
                        .map(|root| root.root_cert_pem.to_string()),
                );
                tls.install_auto_certificate(
                    &response.certificate_pem,
                    &key_pem,
                    &roots,
                    response.verify_server_hostname,
                )
                .map_err(|e| format!("{addr} signed a certificate this agent cannot use: {e}"))?;
                let not_after = response.valid_before_unix_s;
                log::info!(
                    "auto_encrypt: received the certificate of {} from {addr}, valid until {}",
                    config.node_name,
                    time::OffsetDateTime::from_unix_timestamp(not_after)
                        .map_or_else(|_| not_after.to_string(), |t| t.to_string())
                );
                return Ok(not_after);
            }
            Err(e) => errors.push(format!("{addr}: {e}")),
        }
    }
    Err(errors.join("; "))
}

/// Client agents: gets the first certificate before anything is served. `wait` sleeps
/// between attempts and says whether the agent was asked to stop meanwhile.
pub fn bootstrap(
    config: &AgentConfig,
    tls: &TlsConfigurator,
    wait: &dyn Fn(Duration) -> bool,
) -> Result<i64, String> {
    let mut backoff = RETRY_BACKOFF_MIN;
    loop {
        let servers = server_addresses(config);
        if servers.is_empty() {
            return Err(
                "auto_encrypt.tls needs servers to ask: set start_join or retry_join".to_string(),
            );
        }
        match obtain(config, tls, &servers, Session::Insecure) {
            Ok(not_after) => return Ok(not_after),
            Err(e) => log::warn!(
                "auto_encrypt: no certificate yet ({e}); trying again in {} ms",
                backoff.as_millis()
            ),
        }
        if wait(backoff) {
            return Err("stopped while waiting for an auto-encrypt certificate".to_string());
        }
        backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
    }
}

/// Seconds to wait before renewing a certificate valid `remaining_secs` more: half of it,
/// plus `jitter` (0 to 1) of a fifth, so a fleet started together does not renew together.
pub fn renewal_delay_secs(remaining_secs: i64, jitter: f64) -> u64 {
    assert!((0.0..=1.0).contains(&jitter));
    let remaining = remaining_secs.max(0) as f64;
    (remaining / 2.0 + remaining / 5.0 * jitter) as u64
}

/// Client agents: renews the certificate before it expires, for as long as the process runs.
pub fn spawn_renewal(
    config: Arc<AgentConfig>,
    tls: Arc<TlsConfigurator>,
    mut not_after_unix: i64,
) -> Result<(), String> {
    std::thread::Builder::new()
        .name("praetor-auto-encrypt".into())
        .spawn(move || loop {
            let now = time::OffsetDateTime::now_utc().unix_timestamp();
            let delay = renewal_delay_secs(not_after_unix - now, rand::random_range(0.0..1.0));
            std::thread::sleep(Duration::from_secs(delay.max(1)));
            let servers = server_addresses(&config);
            match obtain(&config, &tls, &servers, Session::Verified) {
                Ok(renewed) => not_after_unix = renewed,
                Err(e) => log::warn!("auto_encrypt: renewing the certificate failed: {e}"),
            }
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start the auto-encrypt renewal thread: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_comes_after_half_and_before_seven_tenths_of_the_validity() {
        let day = 24 * 3600;
        assert_eq!(renewal_delay_secs(3 * day, 0.0), 36 * 3600);
        assert_eq!(
            renewal_delay_secs(3 * day, 1.0),
            36 * 3600 + 3 * day as u64 / 5
        );
        assert_eq!(renewal_delay_secs(-5, 0.5), 0);
    }

    #[test]
    fn join_entries_become_server_port_addresses() {
        let mut config = crate::config::build(&crate::config::ConfigSources {
            dev: true,
            ..Default::default()
        })
        .unwrap();
        config.ports.server = 8300;
        config.retry_join = vec![
            "127.0.0.9".into(),
            "127.0.0.10:8301".into(),
            "[::1]".into(),
            "provider=aws tag_key=x".into(),
            "localhost:8301".into(),
        ];
        config.start_join = vec!["127.0.0.9".into()];
        let addresses = server_addresses(&config);
        for expected in ["127.0.0.9:8300", "127.0.0.10:8300", "[::1]:8300"] {
            let expected: SocketAddr = expected.parse().unwrap();
            assert!(addresses.contains(&expected), "{expected} in {addresses:?}");
        }
        assert_eq!(
            addresses
                .iter()
                .filter(|a| a.to_string() == "127.0.0.9:8300")
                .count(),
            1
        );
        assert!(addresses.iter().all(|a| a.port() == 8300));
    }
}
