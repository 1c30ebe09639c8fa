//! The certificate a peer sees on this server's peering endpoint: when a TLS client asks by
//! SNI for `server.<dc>.peering.<trust domain>` (the name this cluster's peering tokens
//! carry), it gets a certificate for that name signed by the active Connect CA root, which
//! is what the token's `CA` lets the peer verify. Made on first use, cached per root and
//! name, and made again once less than [`RENEW_BEFORE`] of its [`CERT_TTL`] is left.

use super::super::feed::StoreFeed;
use super::super::tls::PeeringConfigSource;
use crate::tls::connect_ca;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a peering endpoint certificate is valid.
pub const CERT_TTL: Duration = Duration::from_secs(72 * 3600);
/// A certificate with less than this left is replaced at the next handshake.
pub const RENEW_BEFORE: Duration = Duration::from_secs(3600);

struct Cached {
    root_id: String,
    server_name: String,
    valid_before_unix_s: i64,
    config: Arc<rustls::ServerConfig>,
}

fn now_unix_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The SNI-selected configuration source for the gRPC TLS listeners.
pub fn source(store: StoreFeed, datacenter: String) -> PeeringConfigSource {
    let cache: Mutex<Option<Cached>> = Mutex::new(None);
    Arc::new(move |sni: &str| {
        let tables = store.current();
        let ca = &tables.mesh.ca;
        let trust_domain = ca.trust_domain()?;
        let root = ca.active_root()?;
        let server_name = crate::consul::peering::server_name(&datacenter, &trust_domain);
        if !sni.eq_ignore_ascii_case(&server_name) {
            return None;
        }
        let now = now_unix_s();
        let mut cached = cache.lock().expect("peering certificate cache lock");
        if let Some(c) = cached.as_ref() {
            if c.root_id == *root.id
                && c.server_name == server_name
                && now + (RENEW_BEFORE.as_secs() as i64) < c.valid_before_unix_s
            {
                return Some(c.config.clone());
            }
        }
        let made = connect_ca::sign_peering_server(
            root.signer_cert_pem(),
            &root.signing_key_pem,
            &server_name,
            CERT_TTL,
            now,
        )
        .and_then(|cert| {
            let mut chain_pem = cert.cert_pem.clone();
            for intermediate in &root.intermediate_certs {
                chain_pem.push_str(intermediate);
                chain_pem.push('\n');
            }
            let config = server_config(&chain_pem, &cert.key_pem)?;
            Ok((cert.valid_before_unix_s, config))
        });
        match made {
            Ok((valid_before_unix_s, config)) => {
                *cached = Some(Cached {
                    root_id: root.id.to_string(),
                    server_name,
                    valid_before_unix_s,
                    config: config.clone(),
                });
                Some(config)
            }
            Err(e) => {
                log::error!("peering: cannot make the peering endpoint's certificate: {e}");
                None
            }
        }
    })
}

fn server_config(chain_pem: &str, key_pem: &str) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    let chain =
        crate::tls::files::pem_slice_certificates(chain_pem.as_bytes(), "the peering certificate")?;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| format!("the peering certificate's key: {e}"))?;
    let mut config =
        rustls::ServerConfig::builder_with_provider(crate::tls::files::crypto_provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup failed: {e}"))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("the peering certificate: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}
