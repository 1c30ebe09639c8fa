//! `h2ping` checks (Consul's `H2PING`): open an HTTP/2 connection to `host:port` — over TLS
//! with ALPN `h2` unless `H2PingUseTLS` is false, then h2c with prior knowledge — send one
//! PING and wait for its acknowledgement. Passing when the ACK carrying the same eight bytes
//! arrives within the timeout; critical otherwise, with Consul's wording: `Failed to dial to
//! <target>: …` when the connection (or the TLS handshake, part of Go's dial) fails, `HTTP2
//! ping failed: …` when the PING is not answered.
//!
//! TLS verifies the server against the system's roots and the name `TLSServerName` (else
//! the target's host), or nothing with `TLSSkipVerify`, as Consul's checks do when
//! `enable_agent_tls_for_checks` is off. The frames are the gRPC probe's (`super::grpc`).

use super::grpc::{
    frame, take_frame, Frame, FLAG_ACK, FRAME_GOAWAY, FRAME_PING, FRAME_SETTINGS, PREFACE,
};
use super::{connect, resolve, split_host_port, ProbeResult};
use crate::store::catalog::{CheckDefinition, Status};
use crate::tls::files::crypto_provider;
use crate::tls::verify::ChainVerifier;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use rustls::pki_types::ServerName;
use std::sync::Arc;
use std::time::Duration;

/// Most bytes read from the server while waiting for the PING's acknowledgement.
const EXCHANGE_BYTES_MAX: usize = 1 << 20;
/// The opaque data of the PING (any eight bytes; the ACK must echo them).
const PING_DATA: [u8; 8] = *b"praetor!";

/// Runs one H2PING check.
pub async fn probe(def: &CheckDefinition, timeout: Duration) -> ProbeResult {
    let target = def.h2ping.as_str();
    match monoio::time::timeout(timeout, check(def, timeout)).await {
        Ok(Ok(())) => (Status::Passing, "HTTP2 ping was successful".to_string()),
        Ok(Err(Failure::Dial(e))) => (Status::Critical, format!("Failed to dial to {target}: {e}")),
        Ok(Err(Failure::Ping(e))) => (Status::Critical, format!("HTTP2 ping failed: {e}")),
        Err(_) => (
            Status::Critical,
            "HTTP2 ping failed: context deadline exceeded".to_string(),
        ),
    }
}

/// Where a check failed: Consul words the two cases differently.
enum Failure {
    Dial(String),
    Ping(String),
}

async fn check(def: &CheckDefinition, timeout: Duration) -> Result<(), Failure> {
    let addr = resolve(&def.h2ping, timeout).await.map_err(Failure::Dial)?;
    let tcp = connect(addr, timeout).await.map_err(Failure::Dial)?;
    if !def.h2ping_use_tls {
        return ping(tcp).await.map_err(Failure::Ping);
    }
    let (config, server_name) = tls_client(def).map_err(Failure::Dial)?;
    let tls = crate::tls::stream::connect(config, server_name, tcp, timeout)
        .await
        .map_err(|e| Failure::Dial(e.to_string()))?;
    ping(tls).await.map_err(Failure::Ping)
}

thread_local! {
    /// The verifying configuration, built once per thread: loading the system's roots reads
    /// a directory of certificates, too much to repeat on every run of every check.
    static SYSTEM_ROOTS_CONFIG: Result<Arc<rustls::ClientConfig>, String> = client_config(true);
    static SKIP_VERIFY_CONFIG: Result<Arc<rustls::ClientConfig>, String> = client_config(false);
}

fn client_config(verify: bool) -> Result<Arc<rustls::ClientConfig>, String> {
    let builder = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?;
    let mut config = if verify {
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainVerifier::accept_any()))
            .with_no_client_auth()
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// The TLS configuration and the name the server's certificate must carry.
fn tls_client(
    def: &CheckDefinition,
) -> Result<(Arc<rustls::ClientConfig>, ServerName<'static>), String> {
    let name = if def.tls_server_name.is_empty() {
        split_host_port(&def.h2ping)?.0.to_string()
    } else {
        def.tls_server_name.clone()
    };
    let server_name =
        ServerName::try_from(name).map_err(|e| format!("invalid TLS server name: {e}"))?;
    let slot = if def.tls_skip_verify {
        &SKIP_VERIFY_CONFIG
    } else {
        &SYSTEM_ROOTS_CONFIG
    };
    let config = slot.with(|config| config.clone())?;
    Ok((config, server_name))
}

/// The client's side of a connection up to the PING's acknowledgement: the preface, empty
/// SETTINGS, the PING; then frames are read, SETTINGS acknowledged, until the ACK arrives.
async fn ping<S: AsyncReadRent + AsyncWriteRent>(mut stream: S) -> Result<(), String> {
    let mut out = PREFACE.to_vec();
    out.extend(frame(FRAME_SETTINGS, 0, 0, &[]));
    out.extend(frame(FRAME_PING, 0, 0, &PING_DATA));
    let (result, _) = stream.write_all(out).await;
    result.map_err(|e| e.to_string())?;
    let mut buffer: Vec<u8> = Vec::with_capacity(4096);
    let mut total_bytes = 0usize;
    loop {
        while let Some(Frame {
            kind,
            flags,
            payload,
            ..
        }) = take_frame(&mut buffer)?
        {
            match kind {
                FRAME_PING if flags & FLAG_ACK != 0 => {
                    if payload == PING_DATA {
                        return Ok(());
                    }
                    return Err("PING acknowledged with other data".to_string());
                }
                FRAME_PING => {
                    let (result, _) = stream
                        .write_all(frame(FRAME_PING, FLAG_ACK, 0, &payload))
                        .await;
                    result.map_err(|e| e.to_string())?;
                }
                FRAME_SETTINGS if flags & FLAG_ACK == 0 => {
                    let (result, _) = stream
                        .write_all(frame(FRAME_SETTINGS, FLAG_ACK, 0, &[]))
                        .await;
                    result.map_err(|e| e.to_string())?;
                }
                FRAME_GOAWAY => {
                    return Err("server sent GOAWAY and closed the connection".to_string())
                }
                // Window updates, settings acknowledgements and the rest change nothing here.
                _ => {}
            }
        }
        let (result, chunk) = stream.read(Vec::with_capacity(4096)).await;
        let n = result.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("http2: client connection lost".to_string());
        }
        total_bytes += n;
        if total_bytes > EXCHANGE_BYTES_MAX {
            return Err(format!(
                "no PING acknowledgement within {EXCHANGE_BYTES_MAX} bytes"
            ));
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}
