//! The built-in mTLS proxy (`praetor connect proxy`): a data plane for one service, fed by
//! its local agent.
//!
//! Control: one thread follows, with blocking queries to the agent, the service's leaf
//! certificate, the CA roots, the intentions that apply to the service, and the healthy
//! proxies of each upstream; every change swaps an immutable snapshot (`ArcSwap`) that new
//! connections read. Established connections keep what they started with, so a rotation
//! never cuts a connection.
//!
//! Data: one monoio runtime per core, each with its own `SO_REUSEPORT` listeners.
//! - Inbound (the service's public listener): accept TCP, terminate mTLS with the leaf,
//!   require a client certificate chaining to the roots and carrying a service SPIFFE ID,
//!   authorize the source, dial the local service, copy both ways.
//! - Upstreams (one local listener each): accept TCP, dial a healthy proxy of the upstream,
//!   mTLS with the leaf as the client certificate and Consul's SNI for the upstream
//!   (`<service>.default.<dc>.internal.<trust domain>`, what an Envoy sidecar's filter
//!   chain and cluster names use), check the server's SPIFFE ID is the upstream's, copy
//!   both ways. The inbound side accepts whatever SNI a client sends (an Envoy sidecar
//!   sends Consul's), so Envoy and the built-in proxy interoperate both ways.
//!
//! Authorization: the first connection from a source service asks the agent
//! (`POST /v1/agent/connect/authorize`, whose decision is a pure function of the servers'
//! state); the answer is cached per source until the intentions that apply to this service
//! change, which the control thread learns within one blocking-query round trip — so a new
//! `deny` refuses the next connection at once, without one agent call per connection.

pub mod data;
pub mod gateway;
pub mod hello;
pub mod http;

use crate::proto::spiffe::{percent_encode, ServiceId};
use arc_swap::ArcSwap;
use http::AgentClient;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a blocking query to the agent waits.
pub const WATCH_WAIT: Duration = Duration::from_secs(60);
/// Extra time a blocking query's request may take past its wait.
pub const WATCH_SLACK: Duration = Duration::from_secs(15);
/// Pause after a failed watch before asking again, doubling to [`RETRY_MAX`].
pub const RETRY_MIN: Duration = Duration::from_millis(100);
pub const RETRY_MAX: Duration = Duration::from_secs(10);
/// How long the proxy waits for its first leaf certificate and roots.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Most upstreams one proxy serves.
pub const UPSTREAMS_MAX: usize = 256;
/// Most source services whose authorization is cached.
pub const AUTHZ_CACHE_ENTRIES_MAX: usize = 65_536;

/// How long a blocking query for a cross-datacenter upstream's endpoints waits: short, as
/// the same round also rereads the upstream's mesh gateway mode from its discovery chain.
pub const CROSS_DC_WATCH_WAIT: Duration = Duration::from_secs(10);

/// One upstream: the service it reaches and the local address it listens on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamSpec {
    pub destination: String,
    pub bind: SocketAddr,
    /// The datacenter the destination is in; none: the proxy's own.
    pub datacenter: Option<String>,
    /// The registration's `MeshGateway.Mode` for this upstream (the upstream's own, else the
    /// proxy's), sent as the discovery chain's override.
    pub mesh_gateway_mode: Option<String>,
}

/// How a cross-datacenter upstream is reached (Consul's `MeshGateway.Mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MeshGatewayMode {
    /// The remote datacenter's sidecars directly (Consul's default, `""` or `none`).
    None,
    /// This datacenter's mesh gateways, at their LAN address.
    Local,
    /// The remote datacenter's mesh gateways, at their WAN address.
    Remote,
}

impl MeshGatewayMode {
    /// Consul's mode names; an unknown one is none, with a warning.
    pub fn parse(text: &str) -> MeshGatewayMode {
        match text {
            "local" => MeshGatewayMode::Local,
            "remote" => MeshGatewayMode::Remote,
            "" | "none" => MeshGatewayMode::None,
            other => {
                log::warn!("proxy: unknown mesh gateway mode {other:?}; connecting directly");
                MeshGatewayMode::None
            }
        }
    }
}

/// What the proxy serves, from flags or from a sidecar registration.
#[derive(Clone, Debug)]
pub struct ProxySettings {
    pub agent: AgentClient,
    /// Take everything else from the sidecar proxy registered for this service ID.
    pub sidecar_for: Option<String>,
    pub service: Option<String>,
    pub upstreams: Vec<UpstreamSpec>,
    /// The public mTLS listener; none for a proxy with upstreams only.
    pub listen: Option<SocketAddr>,
    /// Where the local service listens.
    pub service_addr: Option<SocketAddr>,
    /// Data-plane threads (0: one per core).
    pub threads: usize,
    /// Run as the mesh gateway registered with the agent under this service ID instead.
    pub gateway: Option<String>,
}

/// The TLS material every new connection uses; swapped whole on a leaf or roots change.
pub struct TlsSet {
    pub server: Arc<rustls::ServerConfig>,
    pub client: Arc<rustls::ClientConfig>,
    pub trust_domain: String,
    /// The datacenter in the leaf's SPIFFE ID: this proxy's, and its upstreams'.
    pub datacenter: String,
}

/// One upstream's state.
pub struct Upstream {
    pub spec: UpstreamSpec,
    /// Healthy proxies of the destination.
    pub endpoints: ArcSwap<Vec<SocketAddr>>,
    pub next: AtomicUsize,
}

/// Cached authorization decisions, valid for one intentions generation.
#[derive(Default)]
pub struct AuthzCache {
    pub generation: u64,
    pub decisions: HashMap<String, bool>,
}

/// Everything the data plane shares with the control thread.
pub struct ProxyState {
    pub service: String,
    pub agent: AgentClient,
    pub listen: Option<SocketAddr>,
    pub service_addr: Option<SocketAddr>,
    pub tls: ArcSwap<TlsSet>,
    pub upstreams: Vec<Upstream>,
    /// Bumped whenever the intentions that apply to the service change.
    pub intentions_generation: AtomicU64,
    /// Off while the intentions cannot be watched (every connection then asks the agent).
    pub cache_enabled: AtomicBool,
    pub authz: Mutex<AuthzCache>,
}

/// Runs the proxy until the process is stopped.
pub fn run(settings: ProxySettings) -> Result<i32, String> {
    let mut runtime = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()
        .map_err(|e| format!("cannot start the proxy's runtime: {e}"))?;
    runtime.block_on(async move {
        if let Some(id) = settings.gateway.clone() {
            return gateway::run(&settings, &id).await;
        }
        let settings = resolve(settings).await?;
        let state = Arc::new(start_state(&settings).await?);
        let threads = match settings.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        data::start(state.clone(), threads)?;
        log::info!(
            "proxy: serving {:?}: public listener {}, {} upstream(s), {threads} thread(s)",
            state.service,
            state.listen.map_or("none".to_string(), |a| a.to_string()),
            state.upstreams.len()
        );
        watch_all(state).await;
        Ok(0)
    })
}

/// Fills the settings from the sidecar registration when `-sidecar-for` names one.
async fn resolve(mut settings: ProxySettings) -> Result<ProxySettings, String> {
    let Some(target) = settings.sidecar_for.clone() else {
        if settings.service.as_deref().is_none_or(str::is_empty) {
            return Err("Service name must be specified with -service or -sidecar-for".to_string());
        }
        return Ok(settings);
    };
    let answer = settings
        .agent
        .get("/v1/agent/services", WATCH_SLACK)
        .await?;
    if answer.status != 200 {
        return Err(format!(
            "Failed looking up sidecar proxy info for {target}: {}",
            answer.text()
        ));
    }
    let services = answer.json()?;
    let proxy = services
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .find(|s| {
            s["Kind"] == "connect-proxy"
                && s["Proxy"]["DestinationServiceID"].as_str() == Some(target.as_str())
        })
        .cloned()
        .ok_or_else(|| format!("No sidecar proxy registered for {target}"))?;
    let proxy_config = &proxy["Proxy"];
    let service = proxy_config["DestinationServiceName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let address = proxy["Address"]
        .as_str()
        .filter(|a| !a.is_empty())
        .unwrap_or("0.0.0.0");
    let port = proxy["Port"].as_u64().unwrap_or(0);
    let local_address = proxy_config["LocalServiceAddress"]
        .as_str()
        .filter(|a| !a.is_empty())
        .unwrap_or("127.0.0.1");
    let local_port = proxy_config["LocalServicePort"].as_u64().unwrap_or(0);
    settings.service = Some(service);
    settings.listen = Some(
        format!("{address}:{port}")
            .parse()
            .map_err(|e| format!("sidecar address {address}:{port}: {e}"))?,
    );
    if local_port > 0 {
        settings.service_addr = Some(
            format!("{local_address}:{local_port}")
                .parse()
                .map_err(|e| format!("local service address {local_address}:{local_port}: {e}"))?,
        );
    }
    let proxy_mode = proxy_config["MeshGateway"]["Mode"]
        .as_str()
        .filter(|m| !m.is_empty());
    for upstream in proxy_config["Upstreams"].as_array().into_iter().flatten() {
        let destination = upstream["DestinationName"].as_str().unwrap_or_default();
        let datacenter = upstream["Datacenter"]
            .as_str()
            .filter(|dc| !dc.is_empty())
            .map(str::to_string);
        // The upstream's own mode wins over the proxy's, as in Consul.
        let mesh_gateway_mode = upstream["MeshGateway"]["Mode"]
            .as_str()
            .filter(|m| !m.is_empty())
            .or(proxy_mode)
            .map(str::to_string);
        let bind_address = upstream["LocalBindAddress"]
            .as_str()
            .filter(|a| !a.is_empty())
            .unwrap_or("127.0.0.1");
        let bind_port = upstream["LocalBindPort"].as_u64().unwrap_or(0);
        let bind: SocketAddr = format!("{bind_address}:{bind_port}")
            .parse()
            .map_err(|e| format!("upstream {destination}: {e}"))?;
        settings.upstreams.push(UpstreamSpec {
            destination: destination.to_string(),
            bind,
            datacenter,
            mesh_gateway_mode,
        });
    }
    Ok(settings)
}

fn parse_chain(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("bad certificate PEM: {e}"))?;
    if chain.is_empty() {
        return Err("no certificate in the leaf".to_string());
    }
    Ok(chain)
}

/// The proxy's crypto: ring, AES-128-GCM first (both ends are ours, and it is the cheapest
/// suite on CPUs with AES instructions).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|suite| match suite.suite() {
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256 => 0,
            rustls::CipherSuite::TLS13_AES_256_GCM_SHA384 => 1,
            _ => 2,
        });
    Arc::new(provider)
}

/// TLS configurations for a leaf (chain + key PEM) and the roots (PEMs).
pub fn tls_set(
    leaf_chain_pem: &str,
    key_pem: &str,
    roots_pem: &[String],
    trust_domain: &str,
) -> Result<TlsSet, String> {
    use rustls::pki_types::pem::PemObject;
    let chain = parse_chain(leaf_chain_pem)?;
    let datacenter = crate::tls::connect_ca::service_id_of(&chain[0])
        .map(|id| id.datacenter)
        .ok_or("the leaf certificate carries no service SPIFFE ID")?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| format!("bad leaf key: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for pem in roots_pem {
        for cert in parse_chain(pem)? {
            roots.add(cert).map_err(|e| format!("bad CA root: {e}"))?;
        }
    }
    let roots = Arc::new(roots);
    let provider = provider();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots.clone(),
        provider.clone(),
    )
    .build()
    .map_err(|e| format!("client verifier: {e}"))?;
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(|e| format!("server certificate: {e}"))?;
    server.session_storage = rustls::server::ServerSessionMemoryCache::new(4096);
    let client = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(crate::tls::verify::ChainVerifier::chain_only(
            roots,
        )))
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("client certificate: {e}"))?;
    Ok(TlsSet {
        server: Arc::new(server),
        client: Arc::new(client),
        trust_domain: trust_domain.to_string(),
        datacenter,
    })
}

/// The leaf and roots as last read, to rebuild the TLS set when either changes.
struct Material {
    leaf_chain: String,
    key: String,
    roots: Vec<String>,
    trust_domain: String,
}

impl Material {
    fn tls(&self) -> Result<TlsSet, String> {
        tls_set(&self.leaf_chain, &self.key, &self.roots, &self.trust_domain)
    }
}

async fn read_leaf(
    agent: &AgentClient,
    service: &str,
    index: u64,
) -> Result<(u64, String, String), String> {
    let path = format!(
        "/v1/agent/connect/ca/leaf/{}?index={index}&wait={}s",
        percent_encode(service),
        WATCH_WAIT.as_secs()
    );
    let answer = agent.get(&path, WATCH_WAIT + WATCH_SLACK).await?;
    if answer.status != 200 {
        return Err(format!(
            "leaf certificate: {} {}",
            answer.status,
            answer.text()
        ));
    }
    let value = answer.json()?;
    let chain = value["CertPEM"].as_str().unwrap_or_default().to_string();
    let key = value["PrivateKeyPEM"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Ok((answer.index, chain, key))
}

async fn read_roots(agent: &AgentClient, index: u64) -> Result<(u64, Vec<String>, String), String> {
    let path = format!(
        "/v1/agent/connect/ca/roots?index={index}&wait={}s",
        WATCH_WAIT.as_secs()
    );
    let answer = agent.get(&path, WATCH_WAIT + WATCH_SLACK).await?;
    if answer.status != 200 {
        return Err(format!("CA roots: {} {}", answer.status, answer.text()));
    }
    let value = answer.json()?;
    let mut roots = Vec::new();
    for root in value["Roots"].as_array().into_iter().flatten() {
        if let Some(pem) = root["RootCert"].as_str() {
            roots.push(pem.to_string());
        }
    }
    if roots.is_empty() {
        return Err("the CA has no roots yet".to_string());
    }
    Ok((
        answer.index,
        roots,
        value["TrustDomain"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    ))
}

/// Reads the first leaf and roots (retrying until [`STARTUP_TIMEOUT`]) and builds the state.
async fn start_state(settings: &ProxySettings) -> Result<ProxyState, String> {
    let service = settings.service.clone().unwrap_or_default();
    if settings.upstreams.len() > UPSTREAMS_MAX {
        return Err(format!("at most {UPSTREAMS_MAX} upstreams"));
    }
    if settings.listen.is_some() && settings.service_addr.is_none() {
        return Err("-service-addr must be given with -listen".to_string());
    }
    let deadline = std::time::Instant::now() + STARTUP_TIMEOUT;
    let mut retry = RETRY_MIN;
    let (leaf, roots) = loop {
        let leaf = read_leaf(&settings.agent, &service, 0).await;
        let roots = read_roots(&settings.agent, 0).await;
        match (leaf, roots) {
            (Ok(leaf), Ok(roots)) => break (leaf, roots),
            (Err(e), _) | (_, Err(e)) => {
                if std::time::Instant::now() > deadline {
                    return Err(format!("cannot start: {e}"));
                }
                log::warn!("proxy: waiting for the agent: {e}");
                monoio::time::sleep(retry).await;
                retry = (retry * 2).min(RETRY_MAX);
            }
        }
    };
    let material = Material {
        leaf_chain: leaf.1,
        key: leaf.2,
        roots: roots.1,
        trust_domain: roots.2,
    };
    let tls = material.tls()?;
    let upstreams = settings
        .upstreams
        .iter()
        .map(|spec| Upstream {
            spec: spec.clone(),
            endpoints: ArcSwap::from_pointee(Vec::new()),
            next: AtomicUsize::new(0),
        })
        .collect();
    MATERIAL.with(|m| {
        *m.borrow_mut() = Some((leaf.0, roots.0, material));
    });
    Ok(ProxyState {
        service,
        agent: settings.agent.clone(),
        listen: settings.listen,
        service_addr: settings.service_addr,
        tls: ArcSwap::from_pointee(tls),
        upstreams,
        intentions_generation: AtomicU64::new(1),
        cache_enabled: AtomicBool::new(true),
        authz: Mutex::new(AuthzCache::default()),
    })
}

thread_local! {
    /// The control thread's leaf and roots with their indexes.
    static MATERIAL: std::cell::RefCell<Option<(u64, u64, Material)>> = const { std::cell::RefCell::new(None) };
}

/// Rebuilds the TLS set after the leaf or roots changed.
fn refresh_tls(state: &ProxyState, update: impl FnOnce(&mut u64, &mut u64, &mut Material)) {
    MATERIAL.with(|m| {
        let mut slot = m.borrow_mut();
        let (leaf_index, roots_index, material) = slot.as_mut().expect("set at start");
        update(leaf_index, roots_index, material);
        match material.tls() {
            Ok(tls) => state.tls.store(Arc::new(tls)),
            Err(e) => log::warn!("proxy: keeping the previous TLS configuration: {e}"),
        }
    });
}

/// Runs every watcher on the control thread, forever.
async fn watch_all(state: Arc<ProxyState>) {
    let leaf = monoio::spawn(watch_leaf(state.clone()));
    let roots = monoio::spawn(watch_roots(state.clone()));
    let intentions = monoio::spawn(watch_intentions(state.clone()));
    for i in 0..state.upstreams.len() {
        monoio::spawn(watch_upstream(state.clone(), i));
    }
    leaf.await;
    roots.await;
    intentions.await;
}

async fn backoff(retry: &mut Duration) {
    monoio::time::sleep(*retry).await;
    *retry = (*retry * 2).min(RETRY_MAX);
}

async fn watch_leaf(state: Arc<ProxyState>) {
    let mut retry = RETRY_MIN;
    loop {
        let index = MATERIAL.with(|m| m.borrow().as_ref().map_or(0, |(l, _, _)| *l));
        match read_leaf(&state.agent, &state.service, index).await {
            Ok((new_index, chain, key)) if new_index != index => {
                retry = RETRY_MIN;
                refresh_tls(&state, |leaf_index, _, material| {
                    *leaf_index = new_index;
                    material.leaf_chain = chain;
                    material.key = key;
                });
                log::info!("proxy: new leaf certificate (index {new_index})");
            }
            Ok(_) => retry = RETRY_MIN,
            Err(e) => {
                log::warn!("proxy: {e}");
                backoff(&mut retry).await;
            }
        }
    }
}

async fn watch_roots(state: Arc<ProxyState>) {
    let mut retry = RETRY_MIN;
    loop {
        let index = MATERIAL.with(|m| m.borrow().as_ref().map_or(0, |(_, r, _)| *r));
        match read_roots(&state.agent, index).await {
            Ok((new_index, roots, trust_domain)) if new_index != index => {
                retry = RETRY_MIN;
                refresh_tls(&state, |_, roots_index, material| {
                    *roots_index = new_index;
                    material.roots = roots;
                    material.trust_domain = trust_domain;
                });
                log::info!("proxy: new CA roots (index {new_index})");
            }
            Ok(_) => retry = RETRY_MIN,
            Err(e) => {
                log::warn!("proxy: {e}");
                backoff(&mut retry).await;
            }
        }
    }
}

/// Follows the intentions that apply to the service; each change invalidates the cached
/// decisions.
async fn watch_intentions(state: Arc<ProxyState>) {
    let mut retry = RETRY_MIN;
    let mut index = 0;
    loop {
        let path = format!(
            "/v1/connect/intentions/match?by=destination&name={}&index={index}&wait={}s",
            percent_encode(&state.service),
            WATCH_WAIT.as_secs()
        );
        match state.agent.get(&path, WATCH_WAIT + WATCH_SLACK).await {
            Ok(answer) if answer.status == 200 => {
                retry = RETRY_MIN;
                state.cache_enabled.store(true, Ordering::Release);
                if answer.index != index {
                    index = answer.index;
                    state.intentions_generation.fetch_add(1, Ordering::AcqRel);
                }
            }
            Ok(answer) => {
                // Without the intentions (a token without intention:read), no decision can
                // be kept: every connection asks the agent.
                state.cache_enabled.store(false, Ordering::Release);
                state.intentions_generation.fetch_add(1, Ordering::AcqRel);
                log::warn!(
                    "proxy: cannot follow intentions ({} {}); authorizing every connection",
                    answer.status,
                    answer.text()
                );
                backoff(&mut retry).await;
            }
            Err(e) => {
                state.cache_enabled.store(false, Ordering::Release);
                state.intentions_generation.fetch_add(1, Ordering::AcqRel);
                log::warn!("proxy: {e}");
                backoff(&mut retry).await;
            }
        }
    }
}

/// The `Service.Address:Service.Port` (the node's address when the service has none) of
/// each row of a health answer.
pub fn service_endpoints(rows: &serde_json::Value) -> Vec<SocketAddr> {
    let mut endpoints = Vec::new();
    for row in rows.as_array().into_iter().flatten() {
        let address = row["Service"]["Address"]
            .as_str()
            .filter(|a| !a.is_empty())
            .or_else(|| row["Node"]["Address"].as_str())
            .unwrap_or_default();
        let port = row["Service"]["Port"].as_u64().unwrap_or(0);
        if let Ok(addr) = format!("{address}:{port}").parse::<SocketAddr>() {
            endpoints.push(addr);
        } else if let Ok(ip) = address.parse::<std::net::IpAddr>() {
            endpoints.push(SocketAddr::new(ip, port as u16));
        }
    }
    endpoints
}

/// Follows the healthy proxies (and native instances) of upstream `i`.
async fn watch_upstream(state: Arc<ProxyState>, i: usize) {
    let upstream = &state.upstreams[i];
    let local = state.tls.load().datacenter.clone();
    if let Some(datacenter) = upstream.spec.datacenter.clone().filter(|dc| *dc != local) {
        return gateway::watch_remote_upstream(state, i, datacenter).await;
    }
    let mut retry = RETRY_MIN;
    let mut index = 0;
    loop {
        let path = format!(
            "/v1/health/connect/{}?passing&index={index}&wait={}s",
            percent_encode(&upstream.spec.destination),
            WATCH_WAIT.as_secs()
        );
        match state.agent.get(&path, WATCH_WAIT + WATCH_SLACK).await {
            Ok(answer) if answer.status == 200 => {
                retry = RETRY_MIN;
                index = answer.index;
                let Ok(rows) = answer.json() else { continue };
                let endpoints = service_endpoints(&rows);
                upstream.endpoints.store(Arc::new(endpoints));
            }
            Ok(answer) => {
                log::warn!(
                    "proxy: upstream {}: {} {}",
                    upstream.spec.destination,
                    answer.status,
                    answer.text()
                );
                backoff(&mut retry).await;
            }
            Err(e) => {
                log::warn!("proxy: upstream {}: {e}", upstream.spec.destination);
                backoff(&mut retry).await;
            }
        }
    }
}

/// Whether `id` may be the peer of a connection to or from this proxy: its trust domain is
/// the cluster's (the chain was already verified against the roots).
pub fn trusted(state: &ProxyState, id: &ServiceId) -> bool {
    let tls = state.tls.load();
    tls.trust_domain.is_empty() || tls.trust_domain.eq_ignore_ascii_case(&id.trust_domain)
}
