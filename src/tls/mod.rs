//! TLS for the agent's listeners and dialers: rustls configurations built from the `tls`
//! settings, per protocol, swapped whole on reload; and the monoio TLS stream.
//!
//! This module sits beside the runtime and below the HTTP and RPC layers: it reads certificate
//! files (so it is not pure), but holds no socket and starts no thread. The layers above ask it
//! for a configuration per connection:
//!
//! - [`TlsConfigurator::server_config`]: what an HTTPS, gRPC or server-RPC listener hands to
//!   [`stream::accept`]. `verify_incoming` turns into "client certificate required and
//!   verified against the CA".
//! - [`TlsConfigurator::rpc_client`]: what an agent or server dials :8300 with when
//!   `verify_outgoing` (or auto-encrypt) asks for TLS: the chain is verified against the CA,
//!   and with `verify_server_hostname` the certificate must also carry
//!   `server.<datacenter>.<domain>`.
//! - [`TlsConfigurator::listener_policy`]: what the server port's first byte may select
//!   ([`crate::proto::rpc_select`]).
//! - [`TlsConfigurator::authorize_server_peer`]: the server-role check for a peer that speaks
//!   Raft, with `verify_incoming` and `verify_server_hostname` on.
//! - [`TlsConfigurator::native_rpc_server_config`]: native TLS on the server port (a
//!   ClientHello as the first byte, the protocol chosen by ALPN): built only with a CA and a
//!   certificate, and always requiring a verified client certificate, as Consul's
//!   `IncomingALPNRPCConfig` does, because mesh gateways expose that port to other
//!   datacenters.
//!
//! Invariants:
//! - Each switch acts on its own: `verify_incoming` only changes what is accepted,
//!   `verify_outgoing` only how we dial, `verify_server_hostname` adds the name on both sides
//!   (and implies `verify_outgoing`, resolved in `config::tls`).
//! - Reload builds a complete new set of configurations from the files and swaps it in with
//!   one atomic store, or changes nothing and reports why. A connection keeps the
//!   configuration it started with, so open connections are untouched and the next handshake
//!   uses the new certificate. Session caches are per configuration: a session resumed across
//!   a reload could skip a check the new CA would fail.
//! - With `verify_server_hostname`, a server whose own certificate lacks the server name
//!   refuses to start: its peers would refuse it as a server anyway.
//!
//! Auto-encrypt adds material that does not come from files ([`AutoMaterial`]): on servers,
//! the agent CA's root, trusted beside the configured CA for `verify_incoming` (never for the
//! server-role check); on client agents, the certificate the servers signed (used where no
//! `cert_file` is configured) and the servers' CA (used where no `ca_file` is). Installing it
//! rebuilds the configurations exactly as a reload does, under the same lock.

pub mod agent_ca;
pub mod connect_ca;
pub mod files;
pub mod generate;
pub mod stream;
pub mod verify;

use crate::config::tls::{CipherSuite, ProtocolTls, TlsConfig, TlsVersion};
use crate::proto::rpc_select::{alpn, ListenerPolicy};
use arc_swap::ArcSwap;
use files::{crypto_provider, load_ca_certificates, pem_certificates, pem_private_key, root_store};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The protocols TLS is configured for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    InternalRpc,
    Https,
    Grpc,
}

impl Protocol {
    /// The `tls` block that configures it.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::InternalRpc => "internal_rpc",
            Protocol::Https => "https",
            Protocol::Grpc => "grpc",
        }
    }

    /// What the listener offers in ALPN.
    fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            Protocol::InternalRpc => Vec::new(),
            // praetor speaks HTTP/1.1 only; offering h2 would break clients that take it.
            Protocol::Https => vec![b"http/1.1".to_vec()],
            Protocol::Grpc => vec![b"h2".to_vec()],
        }
    }
}

/// Who this agent is, for the names certificates must carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub datacenter: String,
    /// The DNS domain (`consul`).
    pub domain: String,
    pub node_name: String,
    /// Server mode: its own certificate must be a server certificate under
    /// `verify_server_hostname`.
    pub server: bool,
}

impl Identity {
    /// The agent `config` describes: its datacenter, DNS domain, node name and mode.
    pub fn of(config: &crate::config::AgentConfig) -> Identity {
        Identity {
            datacenter: config.datacenter.clone(),
            domain: config.dns.domain.clone(),
            node_name: config.node_name.clone(),
            server: config.server,
        }
    }

    /// `server.<datacenter>.<domain>`.
    pub fn server_name(&self) -> String {
        verify::server_name_for(&self.datacenter, &self.domain)
    }
}

/// One protocol's configurations.
struct Side {
    /// `None`: no certificate, so this protocol cannot be served over TLS.
    server: Option<Arc<ServerConfig>>,
    /// Outgoing connections; `None` when they are plain TCP.
    client: Option<Arc<ClientConfig>>,
    /// The manually configured CA, for the server-role check.
    roots: Option<Arc<RootCertStore>>,
    /// The same CA's certificates, to hand to auto-encrypt clients.
    ca_certificates: Vec<CertificateDer<'static>>,
    /// Internal RPC only: native TLS with ALPN, client certificates required; `None` without
    /// a certificate or a CA.
    native_server: Option<Arc<ServerConfig>>,
}

/// Every configuration built from the files at one moment.
pub struct Loaded {
    /// Counts successful loads, from 1.
    pub generation: u64,
    /// The settings these configurations were built from.
    pub config: TlsConfig,
    internal_rpc: Side,
    https: Side,
    grpc: Side,
    /// Internal RPC without client verification, for auto-encrypt's first request.
    insecure_rpc_server: Option<Arc<ServerConfig>>,
    /// Things worth a log line at load (a certificate expired or not valid yet).
    pub warnings: Vec<String>,
}

impl Loaded {
    fn side(&self, protocol: Protocol) -> &Side {
        match protocol {
            Protocol::InternalRpc => &self.internal_rpc,
            Protocol::Https => &self.https,
            Protocol::Grpc => &self.grpc,
        }
    }
}

/// What auto-encrypt provides beside the files.
#[derive(Debug, Default)]
pub struct AutoMaterial {
    /// Servers: the agent CA's roots, trusted for incoming certificates.
    pub trusted_roots: Vec<CertificateDer<'static>>,
    /// Client agents: the certificate chain the servers signed, and its key.
    pub certificate: Option<KeyPair>,
    /// Client agents: the CA the servers' own certificates chain to (Consul's
    /// `ManualCARoots`), used where no CA is configured.
    pub server_roots: Vec<CertificateDer<'static>>,
    /// Client agents: the servers' answer asked for their name to be checked (Consul's
    /// `autoTLS.verifyServerHostname`). It can only turn the check on: a client configured
    /// with `verify_server_hostname` keeps it whatever the servers say.
    pub verify_server_hostname: bool,
}

impl AutoMaterial {
    fn key_pair(&self) -> Option<KeyPair> {
        self.certificate
            .as_ref()
            .map(|(chain, key)| (chain.clone(), key.clone_key()))
    }
}

/// The node name that asks a mesh gateway for any server of a datacenter (Consul's `*`, as
/// in the WAN join address `*.<primary>/…` of a secondary federated through gateways).
pub const ANY_SERVER_NODE: &str = "*";

/// The agent's TLS state: the current [`Loaded`] configurations, replaced whole on reload.
pub struct TlsConfigurator {
    identity: Identity,
    current: ArcSwap<Loaded>,
    /// Held while configurations are built and swapped in, so reloads and auto-encrypt
    /// updates never interleave.
    auto: Mutex<AutoMaterial>,
}

impl TlsConfigurator {
    /// Reads every certificate, key and CA the settings name and builds the configurations.
    pub fn new(config: &TlsConfig, identity: Identity) -> Result<TlsConfigurator, String> {
        let auto = AutoMaterial::default();
        let loaded = load(config, &identity, 1, &auto)?;
        Ok(TlsConfigurator {
            identity,
            current: ArcSwap::from_pointee(loaded),
            auto: Mutex::new(auto),
        })
    }

    /// Reads the files again under `config` (the settings may have changed too) and swaps the
    /// new configurations in; on any error the current ones stay and the error says why.
    /// Returns the new generation.
    pub fn reload(&self, config: &TlsConfig) -> Result<u64, String> {
        let auto = self
            .auto
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.rebuild(config, &auto)
    }

    /// Builds and swaps in the configurations of `config` and `auto`; the caller holds the
    /// `auto` lock, which serializes every swap.
    fn rebuild(&self, config: &TlsConfig, auto: &AutoMaterial) -> Result<u64, String> {
        let generation = self.current.load().generation + 1;
        let loaded = load(config, &self.identity, generation, auto)?;
        let previous = self.current.swap(Arc::new(loaded));
        debug_assert!(previous.generation < generation);
        Ok(generation)
    }

    /// Servers: trusts the agent CA's root (PEM) for incoming certificates from now on.
    /// Returns whether anything changed (the same root again changes nothing).
    pub fn trust_agent_ca(&self, root_pem: &str) -> Result<bool, String> {
        let roots = files::pem_slice_certificates(root_pem.as_bytes(), "agent CA root")?;
        let mut auto = self
            .auto
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if auto.trusted_roots == roots {
            return Ok(false);
        }
        let previous = std::mem::replace(&mut auto.trusted_roots, roots);
        let config = self.current.load().config.clone();
        if let Err(e) = self.rebuild(&config, &auto) {
            auto.trusted_roots = previous;
            return Err(e);
        }
        Ok(true)
    }

    /// Client agents: uses a certificate the servers signed (PEM chain and key) and, where no
    /// CA is configured, the servers' CA; the next handshake presents it. Returns the new
    /// generation; on error nothing changed.
    pub fn install_auto_certificate(
        &self,
        certificate_pem: &str,
        key_pem: &str,
        server_roots_pem: &[String],
        verify_server_hostname: bool,
    ) -> Result<u64, String> {
        let chain = files::pem_slice_certificates(certificate_pem.as_bytes(), "certificate")?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| format!("auto-encrypt key: {e}"))?;
        let mut server_roots = Vec::new();
        for pem in server_roots_pem {
            server_roots.extend(files::pem_slice_certificates(pem.as_bytes(), "server CA")?);
        }
        let mut auto = self
            .auto
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let previous = (
            auto.certificate.replace((chain, key)),
            std::mem::replace(&mut auto.server_roots, server_roots),
            std::mem::replace(&mut auto.verify_server_hostname, verify_server_hostname),
        );
        let config = self.current.load().config.clone();
        match self.rebuild(&config, &auto) {
            Ok(generation) => Ok(generation),
            Err(e) => {
                (
                    auto.certificate,
                    auto.server_roots,
                    auto.verify_server_hostname,
                ) = previous;
                Err(e)
            }
        }
    }

    /// The configured internal-RPC CA as PEM texts: what auto-encrypt clients verify servers
    /// with (Consul's `ManualCARoots`).
    pub fn internal_rpc_ca_pem(&self) -> Vec<String> {
        self.current
            .load()
            .internal_rpc
            .ca_certificates
            .iter()
            .map(|der| generate::pem_encode("CERTIFICATE", der))
            .collect()
    }

    /// Whether auto-encrypt has given this client agent a certificate.
    pub fn has_auto_certificate(&self) -> bool {
        let auto = self
            .auto
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        auto.certificate.is_some()
    }

    /// Reads the files again under the current settings.
    pub fn reload_files(&self) -> Result<u64, String> {
        let config = self.current.load().config.clone();
        self.reload(&config)
    }

    /// The configurations in force now.
    pub fn current(&self) -> Arc<Loaded> {
        self.current.load_full()
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The configuration a listener of `protocol` accepts TLS with, if it has a certificate.
    pub fn server_config(&self, protocol: Protocol) -> Option<Arc<ServerConfig>> {
        self.current.load().side(protocol).server.clone()
    }

    /// Internal RPC without client verification (the insecure TLS byte), if auto-encrypt lets
    /// this server hand out certificates.
    pub fn insecure_rpc_server_config(&self) -> Option<Arc<ServerConfig>> {
        self.current.load().insecure_rpc_server.clone()
    }

    /// Native TLS on the server port: Consul's ALPN names offered, a verified client
    /// certificate required; `None` unless a CA and a certificate are configured.
    pub fn native_rpc_server_config(&self) -> Option<Arc<ServerConfig>> {
        self.current.load().internal_rpc.native_server.clone()
    }

    /// How to dial a server's RPC port: `None` for plain TCP, else the configuration and the
    /// name to ask for.
    pub fn rpc_client(&self) -> Option<(Arc<ClientConfig>, ServerName<'static>)> {
        let loaded = self.current.load();
        let config = loaded.internal_rpc.client.clone()?;
        let name = ServerName::try_from(self.identity.server_name())
            .expect("datacenter and domain were validated as DNS labels");
        Some((config, name))
    }

    /// [`TlsConfigurator::rpc_client`] for a server of `datacenter` (WAN forwarding): the
    /// name asked for is `server.<datacenter>.<domain>`. `Err` when the datacenter name (as
    /// another datacenter's gossip tags spell it) cannot be a TLS server name.
    pub fn rpc_client_for(
        &self,
        datacenter: &str,
    ) -> Result<Option<(Arc<ClientConfig>, ServerName<'static>)>, String> {
        if datacenter == self.identity.datacenter {
            return Ok(self.rpc_client());
        }
        let loaded = self.current.load();
        let Some(config) = loaded.internal_rpc.client.clone() else {
            return Ok(None);
        };
        if datacenter.is_empty() {
            return Err("a server without a datacenter cannot be dialed over TLS".to_string());
        }
        let text = verify::server_name_for(datacenter, &self.identity.domain);
        let name = ServerName::try_from(text.clone())
            .map_err(|_| format!("{text:?} is not a valid TLS server name"))?;
        Ok(Some((config, name)))
    }

    /// How a server dials another datacenter's server `node` through a mesh gateway
    /// (Consul's `DialRPCViaMeshGateway`): native TLS with internal RPC's configuration, the
    /// ALPN protocol `alpn` offered, and the server's own name
    /// `<node>.server.<datacenter>.<domain>` asked for, which is what the gateway routes by;
    /// for the node [`ANY_SERVER_NODE`], `server.<datacenter>.<domain>` (any of its servers).
    /// `Err` without outgoing TLS (a gateway only passes TLS through) or when the names
    /// cannot make a TLS server name.
    pub fn native_rpc_client(
        &self,
        node: &str,
        datacenter: &str,
        alpn: &str,
    ) -> Result<(Arc<ClientConfig>, ServerName<'static>), String> {
        let loaded = self.current.load();
        let Some(base) = loaded.internal_rpc.client.clone() else {
            return Err(
                "dialing through mesh gateways needs TLS on internal RPC (verify_outgoing with a CA and a certificate)"
                    .to_string(),
            );
        };
        if datacenter.is_empty() || node.is_empty() {
            return Err(
                "a server without a name or datacenter cannot be dialed through a gateway"
                    .to_string(),
            );
        }
        // The node `*` stands for any server of the datacenter (Consul's `ServerSNI`), which
        // a gateway exposing its servers picks.
        let any_server = verify::server_name_for(datacenter, &self.identity.domain);
        let text = match node {
            ANY_SERVER_NODE => any_server,
            node => format!("{node}.{any_server}"),
        };
        let name = ServerName::try_from(text.clone())
            .map_err(|_| format!("{text:?} is not a valid TLS server name"))?;
        let mut config = (*base).clone();
        config.alpn_protocols = vec![alpn.as_bytes().to_vec()];
        Ok((Arc::new(config), name))
    }

    /// What the server port's first byte may select.
    pub fn listener_policy(&self) -> ListenerPolicy {
        let loaded = self.current.load();
        let rpc = &loaded.config.internal_rpc;
        let tls_available = loaded.internal_rpc.server.is_some();
        let policy = ListenerPolicy {
            verify_incoming: rpc.verify_incoming,
            tls_available,
            allow_insecure_tls: loaded.insecure_rpc_server.is_some(),
            native_tls_available: loaded.internal_rpc.native_server.is_some(),
        };
        debug_assert!(!policy.allow_insecure_tls || policy.tls_available);
        debug_assert!(!policy.native_tls_available || policy.tls_available);
        policy
    }

    /// Checks a peer that wants to act as a server (Raft) on a TLS connection: with
    /// `verify_incoming` and `verify_server_hostname` on, its certificate must be a server
    /// certificate of the agent CA; otherwise anyone who passed the handshake may.
    pub fn authorize_server_peer(
        &self,
        chain: Option<&[CertificateDer<'_>]>,
    ) -> Result<(), String> {
        let loaded = self.current.load();
        let rpc = &loaded.config.internal_rpc;
        if !(rpc.verify_incoming && rpc.verify_server_hostname) {
            return Ok(());
        }
        let roots = loaded
            .internal_rpc
            .roots
            .as_ref()
            .expect("verify_incoming was validated to come with a CA");
        verify::authorize_server_peer(chain, roots, &self.identity.server_name(), UnixTime::now())
    }
}

/// The log line for a failed handshake: protocol, peer, reason.
pub fn handshake_failure_line(
    protocol: Protocol,
    peer: SocketAddr,
    error: &stream::HandshakeError,
) -> String {
    format!(
        "tls: {} handshake with {peer} failed: {error}",
        protocol.name()
    )
}

fn load(
    config: &TlsConfig,
    identity: &Identity,
    generation: u64,
    auto: &AutoMaterial,
) -> Result<Loaded, String> {
    assert!(generation >= 1);
    let mut warnings = Vec::new();
    let mut side = |protocol: Protocol, settings: &ProtocolTls| -> Result<Side, String> {
        load_side(protocol, settings, config, identity, auto, &mut warnings)
            .map_err(|e| format!("tls.{}: {e}", protocol.name()))
    };
    let internal_rpc = side(Protocol::InternalRpc, &config.internal_rpc)?;
    let https = side(Protocol::Https, &config.https)?;
    let grpc = side(Protocol::Grpc, &config.grpc)?;
    let insecure_rpc_server = if identity.server && config.auto_encrypt.allow_tls {
        match certified_key(&config.internal_rpc)? {
            Some((chain, key)) => Some(server_config(
                Protocol::InternalRpc.alpn(),
                &config.internal_rpc,
                chain,
                key,
                None,
            )?),
            None => None,
        }
    } else {
        None
    };
    Ok(Loaded {
        generation,
        config: config.clone(),
        internal_rpc,
        https,
        grpc,
        insecure_rpc_server,
        warnings,
    })
}

fn load_side(
    protocol: Protocol,
    settings: &ProtocolTls,
    config: &TlsConfig,
    identity: &Identity,
    auto: &AutoMaterial,
    warnings: &mut Vec<String>,
) -> Result<Side, String> {
    let configured_ca = load_ca_certificates(&settings.ca)?;
    let roots = match &configured_ca {
        Some(certificates) => Some(Arc::new(root_store(certificates)?)),
        None => None,
    };
    // Auto-encrypt's material serves the two protocols a client agent talks to servers and
    // users with, where the files leave a gap.
    let auto_applies = protocol != Protocol::Grpc;
    let key_pair = match certified_key(settings)? {
        Some(pair) => Some(pair),
        None if auto_applies => auto.key_pair(),
        None => None,
    };
    // What certificates are checked against: the configured CA, else the servers' CA that
    // auto-encrypt brought; for incoming certificates, the agent CA's roots too.
    let dialing_roots = match &roots {
        Some(roots) => Some(roots.clone()),
        None if auto_applies && !auto.server_roots.is_empty() => {
            Some(Arc::new(root_store(&auto.server_roots)?))
        }
        None => None,
    };
    let incoming_roots = if auto_applies && !auto.trusted_roots.is_empty() {
        let mut all = configured_ca.clone().unwrap_or_default();
        all.extend(auto.trusted_roots.iter().cloned());
        Some(Arc::new(root_store(&all)?))
    } else {
        dialing_roots.clone()
    };
    if let Some((chain, _)) = &key_pair {
        check_own_certificate(protocol, settings, identity, &chain[0], warnings)?;
    }
    let client = if protocol == Protocol::InternalRpc {
        let key_pair = key_pair
            .as_ref()
            .map(|(chain, key)| (chain.clone(), key.clone_key()));
        rpc_dialing_config(settings, auto, key_pair, dialing_roots, config.auto_tls())?
    } else {
        None
    };
    // Native TLS: only the server port, only with a CA to verify clients against.
    let native_server = match (&key_pair, &incoming_roots) {
        (Some((chain, key)), Some(roots)) if protocol == Protocol::InternalRpc => {
            let offered = alpn::OFFERED.iter().map(|name| name.as_bytes().to_vec());
            Some(server_config(
                offered.collect(),
                settings,
                chain.clone(),
                key.clone_key(),
                Some(roots.clone()),
            )?)
        }
        _ => None,
    };
    let server = match key_pair {
        Some((chain, key)) => {
            let verifying_roots = settings.verify_incoming.then(|| {
                incoming_roots
                    .clone()
                    .expect("verify_incoming was validated to come with a CA")
            });
            Some(server_config(
                protocol.alpn(),
                settings,
                chain,
                key,
                verifying_roots,
            )?)
        }
        None => None,
    };
    Ok(Side {
        server,
        client,
        roots,
        ca_certificates: configured_ca.unwrap_or_default(),
        native_server,
    })
}

/// Looks at this agent's own certificate for `protocol`: a warning when it is near or past
/// its validity, and on a server checking names, a refusal when peers would not take it as
/// a server's.
fn check_own_certificate(
    protocol: Protocol,
    settings: &ProtocolTls,
    identity: &Identity,
    certificate: &CertificateDer<'static>,
    warnings: &mut Vec<String>,
) -> Result<(), String> {
    // gRPC is never served (no listener), so its copy of a certificate is not warned about.
    if protocol != Protocol::Grpc {
        warnings.extend(validity_warning(protocol, settings, certificate));
    }
    if protocol == Protocol::InternalRpc && identity.server && settings.verify_server_hostname {
        let name = identity.server_name();
        verify::certificate_names(certificate, &name).map_err(|names| {
            format!(
                "this server's certificate {} is not valid for {name}{names}; with verify_server_hostname its peers would refuse it as a server (create one with `praetor tls cert create -server`)",
                settings.cert_file.as_deref().unwrap_or(Path::new("")).display()
            )
        })?;
    }
    Ok(())
}

/// How this agent dials servers' RPC port; the servers' auto-encrypt answer may turn the
/// name check on.
fn rpc_dialing_config(
    settings: &ProtocolTls,
    auto: &AutoMaterial,
    key_pair: Option<KeyPair>,
    roots: Option<Arc<RootCertStore>>,
    auto_tls: bool,
) -> Result<Option<Arc<ClientConfig>>, String> {
    if auto.verify_server_hostname && !settings.verify_server_hostname {
        let adopted = ProtocolTls {
            verify_server_hostname: true,
            ..settings.clone()
        };
        return rpc_client_config(&adopted, key_pair, roots, auto_tls);
    }
    rpc_client_config(settings, key_pair, roots, auto_tls)
}

/// A certificate chain and its private key.
pub type KeyPair = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn certified_key(settings: &ProtocolTls) -> Result<Option<KeyPair>, String> {
    let (Some(cert), Some(key)) = (&settings.cert_file, &settings.key_file) else {
        return Ok(None);
    };
    let chain = pem_certificates(cert, "Failed to load cert/key pair: certificate")?;
    let key = pem_private_key(key, "Failed to load cert/key pair: key")?;
    Ok(Some((chain, key)))
}

/// A warning when our own certificate is outside its validity period.
fn validity_warning(
    protocol: Protocol,
    settings: &ProtocolTls,
    certificate: &CertificateDer<'_>,
) -> Option<String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, parsed) = X509Certificate::from_der(certificate).ok()?;
    let now = UnixTime::now().as_secs() as i64;
    let validity = parsed.validity();
    let path = settings.cert_file.as_deref()?.display();
    if validity.not_after.timestamp() < now {
        return Some(format!(
            "tls: the {} certificate {path} expired at {}; peers will refuse it",
            protocol.name(),
            validity.not_after
        ));
    }
    if validity.not_before.timestamp() > now {
        return Some(format!(
            "tls: the {} certificate {path} is not valid before {}; peers will refuse it until then",
            protocol.name(),
            validity.not_before
        ));
    }
    None
}

/// The crypto provider for a protocol: every TLS 1.3 suite, and the configured TLS 1.2 suites
/// in their configured order (all of them when none is configured).
fn provider_for(settings: &ProtocolTls) -> Arc<rustls::crypto::CryptoProvider> {
    if settings.cipher_suites.is_empty() {
        return crypto_provider();
    }
    let mut provider = rustls::crypto::ring::default_provider();
    let mut suites: Vec<rustls::SupportedCipherSuite> = provider
        .cipher_suites
        .iter()
        .filter(|suite| suite.version() == &rustls::version::TLS13)
        .copied()
        .collect();
    suites.extend(
        settings
            .cipher_suites
            .iter()
            .map(|suite| rustls_suite(*suite)),
    );
    provider.cipher_suites = suites;
    Arc::new(provider)
}

fn rustls_suite(suite: CipherSuite) -> rustls::SupportedCipherSuite {
    use rustls::crypto::ring::cipher_suite as ring;
    match suite {
        CipherSuite::EcdheEcdsaWithAes128GcmSha256 => ring::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        CipherSuite::EcdheEcdsaWithAes256GcmSha384 => ring::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        CipherSuite::EcdheEcdsaWithChacha20Poly1305Sha256 => {
            ring::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        CipherSuite::EcdheRsaWithAes128GcmSha256 => ring::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        CipherSuite::EcdheRsaWithAes256GcmSha384 => ring::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        CipherSuite::EcdheRsaWithChacha20Poly1305Sha256 => {
            ring::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
    }
}

fn versions(settings: &ProtocolTls) -> &'static [&'static rustls::SupportedProtocolVersion] {
    static TLS12_AND_UP: [&rustls::SupportedProtocolVersion; 2] =
        [&rustls::version::TLS13, &rustls::version::TLS12];
    static TLS13_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    match settings.min_version {
        TlsVersion::Tls12 => &TLS12_AND_UP,
        TlsVersion::Tls13 => &TLS13_ONLY,
    }
}

fn server_config(
    alpn: Vec<Vec<u8>>,
    settings: &ProtocolTls,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    verifying_roots: Option<Arc<RootCertStore>>,
) -> Result<Arc<ServerConfig>, String> {
    let provider = provider_for(settings);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions(settings))
        .map_err(|e| format!("TLS setup failed: {e}"))?;
    let builder = match verifying_roots {
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| format!("client certificate verification: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("Failed to load cert/key pair: {e}"))?;
    config.alpn_protocols = alpn;
    Ok(Arc::new(config))
}

/// How an agent dials internal RPC, Consul's way: TLS when `verify_outgoing` or auto-encrypt
/// asks for it; the chain checked against the CA when there is one; the name only with
/// `verify_server_hostname`.
fn rpc_client_config(
    settings: &ProtocolTls,
    key_pair: Option<KeyPair>,
    roots: Option<Arc<RootCertStore>>,
    auto_tls: bool,
) -> Result<Option<Arc<ClientConfig>>, String> {
    if !(settings.verify_outgoing || auto_tls) {
        return Ok(None);
    }
    let builder = ClientConfig::builder_with_provider(provider_for(settings))
        .with_protocol_versions(versions(settings))
        .map_err(|e| format!("TLS setup failed: {e}"))?;
    let builder = match roots {
        Some(roots) if settings.verify_server_hostname => builder.with_root_certificates(roots),
        Some(roots) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verify::ChainVerifier::chain_only(roots))),
        None => {
            // Only auto-encrypt without a CA gets here (verify_outgoing needs one): Consul
            // then dials TLS without checking the server, until the CA arrives.
            assert!(auto_tls && !settings.verify_outgoing);
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verify::ChainVerifier::accept_any()))
        }
    };
    let config = match key_pair {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("Failed to load cert/key pair: {e}"))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Some(Arc::new(config)))
}

#[cfg(test)]
mod tests;
