//! Auto-encrypt: servers hand client agents their TLS certificates over the server port, as
//! Consul's `AutoEncrypt.Sign` does.
//!
//! Servers (`auto_encrypt { allow_tls = true }`):
//! - The signing root is the Connect CA's active root when the mesh is on (Consul's rule: one
//!   root and trust domain for agents and services); with the mesh off, [`agent_ca_keeper`]
//!   (shard 0), when this server leads and the replicated state has no agent CA yet,
//!   generates one (`tls::agent_ca`) and proposes it (`store::agent_ca`); a racing second
//!   leader's proposal is refused by the store, so the cluster keeps one root. On every
//!   server the keeper installs every replicated root an agent certificate may chain to into
//!   the TLS configurations, so certificates it signed pass `verify_incoming`.
//! - [`sign`] answers [`kind::AUTO_ENCRYPT_SIGN`] frames: on the insecure TLS session (byte 7,
//!   no client certificate yet: the first request) and on ordinary RPC sessions (renewals,
//!   with the certificate being renewed). Any server holding the root signs; the root and its
//!   key are replicated, so no forwarding to the leader is needed. With ACLs on, the
//!   request's token needs `node:write` on the agent's node, as Consul's CA demands.
//!
//! Client agents (`auto_encrypt { tls = true }`):
//! - [`bootstrap`] runs before the agent binds any listener: it makes a key and a request,
//!   dials the servers named by `start_join`/`retry_join` on the server port with byte 7 and
//!   TLS (checking the server against `ca_file` when one is configured), and retries with a
//!   bounded backoff until a server signs. The agent then serves with that certificate.
//! - [`spawn_renewal`] starts the thread that asks again, over mutual TLS with the current
//!   certificate, when half (plus up to a fifth, at random) of the remaining validity has
//!   passed, and installs the new certificate for the next connections.
//!
//! Bounds: connect, read and handshake timeouts ([`SIGN_TIMEOUT`]), the answer's size
//! ([`SIGN_PAYLOAD_BYTES_MAX`]), the retry backoff ([`RETRY_BACKOFF_MAX`]).

use crate::config::AgentConfig;
use crate::proto::auto_encrypt::{SignRequest, SignResponse, SIGN_PAYLOAD_BYTES_MAX};
use crate::proto::rpc::{decode_frame, encode_frame, kind, PROTOCOL_RPC};
use crate::proto::rpc_select::rpc_type;
use crate::shard::runtime::Shard;
use crate::store::acl::cache::{AuthorizerCache, CompileSettings};
use crate::store::agent_ca::{AgentCaOp, AgentCaRow};
use crate::store::Command;
use crate::tls::agent_ca::{
    agent_csr, generate_root, AgentCaRoot, AgentSignRequest, AgentSigner, SignError,
    UNKNOWN_TRUST_DOMAIN,
};
use crate::tls::TlsConfigurator;
use bytes::BytesMut;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// How often the keeper looks at the replicated root and the leadership.
const KEEPER_INTERVAL: Duration = Duration::from_millis(500);
/// Connect, handshake and answer, each.
pub const SIGN_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait between two attempts to get a certificate.
pub const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(30);
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(500);
/// Consul's answer when the server does not allow auto-encrypt.
pub const NOT_ALLOWED: &str = "AutoEncrypt.AllowTLS must be enabled in order to use this endpoint";

// ---------------------------------------------------------------------------------------
// Servers

/// Shard 0 of a server with `allow_tls`: keeps the TLS configurations trusting every root an
/// agent certificate may chain to (the Connect CA's roots, rotated-out ones included, and
/// the agent CA's), and, with the mesh off, creates the agent CA when leading and none
/// exists. With the mesh on, the Connect CA's leader duty creates the root that signs.
pub async fn agent_ca_keeper(shard: Rc<Shard>) {
    let tls = shard.shared().tls.clone();
    let connect_enabled = shard.config().connect.enabled;
    let mut trusted_pem = String::new();
    loop {
        if shard.shutting_down() {
            return;
        }
        let version = shard.current_version();
        let roots_pem = agent_roots_pem(&version);
        if !roots_pem.is_empty() && roots_pem != trusted_pem {
            match tls.trust_agent_ca(&roots_pem) {
                Ok(_) => {
                    log::info!(
                        "auto_encrypt: trusting the agent certificate roots of {} ({} Connect CA root(s), agent CA: {})",
                        signing_trust_domain(&version).unwrap_or_default(),
                        version.mesh.ca.roots.len(),
                        if version.agent_ca.is_some() { "yes" } else { "no" },
                    );
                    trusted_pem = roots_pem;
                }
                Err(e) => log::error!("auto_encrypt: cannot use the agent CA: {e}"),
            }
        }
        // One proposal at a time: the keeper waits for its outcome.
        if !connect_enabled && version.agent_ca.is_none() && shard.is_leader() {
            create_agent_ca(&shard).await;
        }
        monoio::time::sleep(KEEPER_INTERVAL).await;
    }
}

/// Every root an agent certificate signed in this cluster may chain to, PEM, concatenated:
/// each Connect CA root (rotated-out roots stay trusted while they are kept), in a
/// secondary datacenter also the intermediate that signs there, and the agent CA's root.
fn agent_roots_pem(version: &crate::store::Tables) -> String {
    let mut pem = String::new();
    let connect_roots = version.mesh.ca.roots.iter().flat_map(|r| {
        let intermediate = (!r.signing_cert_pem.is_empty()).then_some(&*r.signing_cert_pem);
        std::iter::once(&*r.root_cert_pem).chain(intermediate)
    });
    let agent_root = version.agent_ca.as_ref().map(|row| &*row.certificate_pem);
    for root in connect_roots.chain(agent_root) {
        pem.push_str(root.trim_end());
        pem.push('\n');
    }
    pem
}

/// The root that signs agent certificates: the Connect CA's active root once the mesh has
/// one (as Consul's auto-encrypt signs with its Connect CA, so agents and services share a
/// root and a trust domain) — in a secondary datacenter its intermediate, whose key is the
/// one held here — else the agent CA.
fn agent_signer(version: &crate::store::Tables) -> Option<AgentCaRoot> {
    let connect = &version.mesh.ca;
    if let (Some(root), Some(trust_domain)) = (connect.active_root(), connect.trust_domain()) {
        return Some(AgentCaRoot {
            trust_domain,
            certificate_pem: root.signer_cert_pem().to_string(),
            private_key_pem: root.signing_key_pem.to_string(),
        });
    }
    version.agent_ca.as_ref().map(|row| AgentCaRoot {
        trust_domain: row.trust_domain.clone(),
        certificate_pem: row.certificate_pem.clone(),
        private_key_pem: row.private_key_pem.clone(),
    })
}

fn signing_trust_domain(version: &crate::store::Tables) -> Option<String> {
    agent_signer(version).map(|root| root.trust_domain)
}

async fn create_agent_ca(shard: &Shard) {
    let trust_domain = format!("{}.consul", uuid::Uuid::new_v4());
    let root = match generate_root(&trust_domain, time::OffsetDateTime::now_utc()) {
        Ok(root) => root,
        Err(e) => {
            log::error!("auto_encrypt: cannot create the agent CA: {e}");
            return;
        }
    };
    let command = Command::AgentCa(AgentCaOp::Initialize(AgentCaRow {
        trust_domain: root.trust_domain,
        certificate_pem: root.certificate_pem,
        private_key_pem: root.private_key_pem,
        created_index: 0,
    }));
    let result = shard.propose(command.encode()).await;
    log::info!("auto_encrypt: proposed a new agent CA for {trust_domain}: {result:?}");
}

/// Answers one `AutoEncrypt.Sign` request: the response payload, or the error text.
pub fn sign(shard: &Shard, payload: &[u8]) -> Result<Vec<u8>, String> {
    let config = shard.config();
    if !(config.server && config.tls.auto_encrypt.allow_tls) {
        return Err(NOT_ALLOWED.to_string());
    }
    let request = SignRequest::decode(payload)?;
    if request.datacenter != config.datacenter {
        // Consul's text: a certificate of another datacenter would not be valid here.
        return Err(format!(
            "mismatched datacenter (client_dc='{}' server_dc='{}'); check client has same datacenter set as servers",
            request.datacenter, config.datacenter
        ));
    }
    let version = shard.current_version();
    if config.acl.enabled {
        // Consul's CA signs an agent's certificate for a token with node:write on it.
        let mut authorizers = AuthorizerCache::new(CompileSettings {
            datacenter: config.datacenter.clone(),
            default_policy: config.acl.default_policy,
        });
        let now_unix_ns = time::OffsetDateTime::now_utc().unix_timestamp_nanos() as i64;
        let resolved = authorizers
            .resolve(&version, &request.token, now_unix_ns)
            .map_err(|e| e.message())?;
        if let Err(denial) = resolved.authorizer.node_write(&request.node) {
            return Err(format!(
                "Permission denied: token with AccessorID '{}' lacks permission '{}' on {:?}",
                resolved.accessor_id,
                denial.permission(),
                request.node
            ));
        }
    }
    let Some(root) = agent_signer(&version) else {
        return Err("the CA is not initialized yet (the leader creates it); try again".to_string());
    };
    let signed = root
        .sign_agent(
            &AgentSignRequest {
                csr_pem: &request.csr_pem,
                node: &request.node,
                datacenter: &request.datacenter,
                domain: &config.dns.domain,
            },
            time::OffsetDateTime::now_utc(),
        )
        .map_err(|e| match e {
            SignError::Refused(why) | SignError::Failed(why) => why,
        })?;
    let tls = &shard.shared().tls;
    Ok(SignResponse {
        certificate_pem: signed.certificate_pem,
        agent_ca_roots_pem: vec![signed.root_pem],
        server_ca_roots_pem: tls.internal_rpc_ca_pem(),
        not_after_unix: signed.not_after_unix,
        verify_server_hostname: config.tls.internal_rpc.verify_server_hostname,
    }
    .encode())
}

// ---------------------------------------------------------------------------------------
// Client agents

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
    /// Byte 7: TLS without a client certificate, the frame right after the handshake.
    Insecure,
    /// Byte 3, then byte 4 inside: the ordinary mutual-TLS RPC session.
    Verified,
}

/// One `AutoEncrypt.Sign` exchange with `addr`, blocking, each step bounded by
/// [`SIGN_TIMEOUT`].
pub fn request_certificate(
    tls: &TlsConfigurator,
    addr: SocketAddr,
    session: Session,
    request: &SignRequest,
) -> Result<SignResponse, String> {
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
    let mut out = BytesMut::new();
    if session == Session::Verified {
        out.extend_from_slice(&[PROTOCOL_RPC]);
    }
    encode_frame(&mut out, kind::AUTO_ENCRYPT_SIGN, 1, &request.encode());
    stream
        .write_all(&out)
        .and_then(|()| stream.flush())
        .map_err(|e| format!("request not sent: {}", describe_io(&e)))?;
    let mut buffer = BytesMut::with_capacity(8 * 1024);
    let mut chunk = [0u8; 8 * 1024];
    loop {
        match decode_frame(&mut buffer).map_err(|e| format!("bad answer: {e}"))? {
            Some(frame) if frame.kind == kind::AUTO_ENCRYPT_SIGNED => {
                return SignResponse::decode(&frame.payload);
            }
            Some(frame) if frame.kind == kind::ERROR => {
                return Err(String::from_utf8_lossy(&frame.payload).into_owned());
            }
            Some(frame) => return Err(format!("unexpected answer of kind {}", frame.kind)),
            None => {}
        }
        if buffer.len() > SIGN_PAYLOAD_BYTES_MAX + 64 {
            return Err(format!("answer larger than {SIGN_PAYLOAD_BYTES_MAX} bytes"));
        }
        let n = stream
            .read(&mut chunk)
            .map_err(|e| format!("no answer: {}", describe_io(&e)))?;
        if n == 0 {
            return Err("the server closed the connection without answering".to_string());
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
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
    let request = SignRequest {
        datacenter: config.datacenter.clone(),
        node: config.node_name.clone(),
        csr_pem,
        token: config.acl.tokens.agent.clone().unwrap_or_default(),
    };
    let mut errors = Vec::new();
    for addr in servers {
        match request_certificate(tls, *addr, session, &request) {
            Ok(response) => {
                let mut roots = response.server_ca_roots_pem.clone();
                roots.extend(response.agent_ca_roots_pem.iter().cloned());
                tls.install_auto_certificate(
                    &response.certificate_pem,
                    &key_pem,
                    &roots,
                    response.verify_server_hostname,
                )
                .map_err(|e| format!("{addr} signed a certificate this agent cannot use: {e}"))?;
                log::info!(
                    "auto_encrypt: received the certificate of {} from {addr}, valid until {}",
                    config.node_name,
                    time::OffsetDateTime::from_unix_timestamp(response.not_after_unix)
                        .map_or_else(|_| response.not_after_unix.to_string(), |t| t.to_string())
                );
                return Ok(response.not_after_unix);
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
