//! One watcher per connected proxy ID (Consul's `proxycfg.Manager`): it follows the
//! proxy's registration and leaf certificate through the agent, and the store versions the
//! feed publishes, rebuilds the snapshot when any of them changes, and publishes the
//! encoded resources every stream of that proxy shares.
//!
//! A watcher lives as long as a stream holds it: the registry keeps only weak references,
//! and dropping the last [`ProxyWatch`] aborts its tasks. A snapshot equal to the previous
//! one publishes nothing, so a store change that does not concern a proxy costs its
//! watcher one comparison and its streams nothing.

use super::feed::{AgentSource, StoreFeed};
use super::mirror::{local_needs, Mirror};
use super::registration::{LeafCert, ProxyKind, ProxyRegistration};
use super::remote::{self, RemoteFollowers, RemoteQuery, RemoteView};
use super::resources::{self, Resources};
use super::snapshot::{self, Snapshot, XdsSettings};
use crate::store::StoreVersion;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// How long one blocking read of a registration or leaf waits at the agent.
pub const AGENT_WAIT: Duration = Duration::from_secs(300);
/// How long a watcher waits before asking again after the agent answered with an error
/// (an unregistered proxy, a leaf not signed yet).
pub const RETRY_PAUSE: Duration = Duration::from_millis(500);
/// Most proxies one server watches at once.
pub const PROXIES_MAX: usize = 16_384;

/// What a watcher has for its streams.
#[derive(Clone, Debug)]
pub enum ProxyState {
    /// Not ready yet, and why (shown in debug logs while a stream waits).
    Pending(String),
    Ready(Arc<Built>),
}

/// A built snapshot and its resources.
#[derive(Debug)]
pub struct Built {
    pub snapshot: Snapshot,
    pub resources: Resources,
    /// The store version it was built from (ACL checks read the same one).
    pub version: StoreVersion,
    /// When its inputs changed: the moment the change that led to it was seen.
    pub seen_at: Instant,
    /// The gRPC flavour of the resources ([`resources::grpc`]), built on the first ask of
    /// a proxyless gRPC client's stream, so Envoy-only proxies never pay for it.
    grpc: std::sync::OnceLock<Result<Resources, String>>,
}

impl Built {
    /// The resources for a proxyless gRPC client, built once per build.
    pub fn grpc_resources(&self) -> &Result<Resources, String> {
        self.grpc.get_or_init(|| {
            let built = resources::grpc::build(&self.snapshot);
            if let Err(reason) = &built {
                log::error!(
                    "xds: cannot build the gRPC resources of proxy {:?}: {reason}",
                    self.snapshot.proxy_id
                );
            }
            built
        })
    }
}

/// A stream's handle on its proxy's watcher.
pub struct ProxyWatch {
    pub proxy_id: String,
    pub state: watch::Receiver<ProxyState>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for ProxyWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The watchers of one server, by proxy ID.
pub struct Watchers {
    agent: AgentSource,
    store: StoreFeed,
    settings: XdsSettings,
    /// On a client agent, the mirror that feeds `store`: told what each proxy needs.
    mirror: Option<Arc<Mirror>>,
    live: Mutex<HashMap<String, Weak<ProxyWatch>>>,
    /// Snapshot rebuilds that produced new resources, and those that did not (counted for
    /// the figures: CPU per streamed update).
    pub rebuilds: std::sync::atomic::AtomicU64,
    pub unchanged: std::sync::atomic::AtomicU64,
}

impl Watchers {
    pub fn new(
        agent: AgentSource,
        store: StoreFeed,
        settings: XdsSettings,
        mirror: Option<Arc<Mirror>>,
    ) -> Arc<Watchers> {
        Arc::new(Watchers {
            agent,
            store,
            settings,
            mirror,
            live: Mutex::new(HashMap::new()),
            rebuilds: Default::default(),
            unchanged: Default::default(),
        })
    }

    pub fn settings(&self) -> &XdsSettings {
        &self.settings
    }

    pub fn store(&self) -> &StoreFeed {
        &self.store
    }

    /// The watcher of `proxy_id`, started on first use (must run inside the runtime).
    pub fn watch(self: &Arc<Self>, proxy_id: &str, token: &str) -> Result<Arc<ProxyWatch>, String> {
        let mut live = self.live.lock().expect("watchers lock");
        if let Some(existing) = live.get(proxy_id).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        live.retain(|_, w| w.strong_count() > 0);
        if live.len() >= PROXIES_MAX {
            return Err(format!("this agent serves at most {PROXIES_MAX} proxies"));
        }
        let (state_tx, state_rx) = watch::channel(ProxyState::Pending(
            "waiting for the proxy's registration".to_string(),
        ));
        let (registration_tx, registration_rx) = watch::channel(None);
        let follow = tokio::spawn(follow_registration(
            self.agent.clone(),
            proxy_id.to_string(),
            registration_tx,
        ));
        let build = tokio::spawn(run(
            self.clone(),
            (proxy_id.to_string(), token.to_string()),
            registration_rx,
            state_tx,
        ));
        let handle = Arc::new(ProxyWatch {
            proxy_id: proxy_id.to_string(),
            state: state_rx,
            tasks: vec![follow, build],
        });
        live.insert(proxy_id.to_string(), Arc::downgrade(&handle));
        Ok(handle)
    }
}

type RegistrationSlot = Option<Result<ProxyRegistration, String>>;

/// Follows one registration through hash-blocking reads of the agent.
async fn follow_registration(
    agent: AgentSource,
    proxy_id: String,
    tx: watch::Sender<RegistrationSlot>,
) {
    let mut hash: Option<String> = None;
    loop {
        let answer = agent.service(&proxy_id, hash.clone(), AGENT_WAIT).await;
        let failed = answer.is_err();
        match answer {
            Ok(registration) => {
                hash = Some(registration.content_hash.clone());
                tx.send_if_modified(|slot| {
                    let changed = !matches!(slot, Some(Ok(r)) if *r == registration);
                    *slot = Some(Ok(registration));
                    changed
                });
            }
            Err(reason) => {
                hash = None;
                tx.send_if_modified(|slot| {
                    let changed = !matches!(slot, Some(Err(r)) if *r == reason);
                    *slot = Some(Err(reason));
                    changed
                });
            }
        }
        if tx.is_closed() {
            return;
        }
        if failed {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}

/// Follows one service's leaf certificate (with `dns_sans` beyond Consul's own names)
/// through index-blocking reads of the agent.
async fn follow_leaf(
    agent: AgentSource,
    service: String,
    dns_sans: Vec<String>,
    token: String,
    tx: watch::Sender<Option<LeafCert>>,
    changed: Option<Arc<Notify>>,
) {
    let mut index = 0;
    loop {
        match agent
            .leaf(&service, &dns_sans, index, AGENT_WAIT, &token)
            .await
        {
            Ok(leaf) => {
                index = leaf.index;
                let modified = tx.send_if_modified(|slot| {
                    let changed = slot.as_ref() != Some(&leaf);
                    *slot = Some(leaf);
                    changed
                });
                if modified {
                    if let Some(notify) = &changed {
                        notify.notify_one();
                    }
                }
            }
            Err(reason) => {
                log::debug!("xds: leaf certificate of {service:?}: {reason}");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}

struct LeafFollower {
    service: String,
    dns_sans: Vec<String>,
    rx: watch::Receiver<Option<LeafCert>>,
    task: JoinHandle<()>,
}

impl LeafFollower {
    fn start(
        agent: &AgentSource,
        (service, dns_sans): (&str, &[String]),
        token: &str,
        changed: Option<Arc<Notify>>,
    ) -> LeafFollower {
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(follow_leaf(
            agent.clone(),
            service.to_string(),
            dns_sans.to_vec(),
            token.to_string(),
            tx,
            changed,
        ));
        LeafFollower {
            service: service.to_string(),
            dns_sans: dns_sans.to_vec(),
            rx,
            task,
        }
    }
}

/// The leaves of the services a terminating gateway links (Consul's `ServiceLeaves`): one
/// follower per linked service, started and stopped as the gateway's rows change, all
/// waking the watcher through one [`Notify`].
struct ServiceLeaves {
    followers: BTreeMap<String, LeafFollower>,
    changed: Arc<Notify>,
}

impl ServiceLeaves {
    fn new() -> ServiceLeaves {
        ServiceLeaves {
            followers: BTreeMap::new(),
            changed: Arc::new(Notify::new()),
        }
    }

    /// Follows exactly `services`' leaves and returns those signed so far.
    fn follow(
        &mut self,
        services: &[String],
        agent: &AgentSource,
        token: &str,
    ) -> BTreeMap<String, LeafCert> {
        self.followers.retain(|name, _| services.contains(name));
        for name in services {
            if !self.followers.contains_key(name) {
                let follower =
                    LeafFollower::start(agent, (name, &[]), token, Some(self.changed.clone()));
                self.followers.insert(name.clone(), follower);
            }
        }
        self.followers
            .iter()
            .filter_map(|(name, f)| f.rx.borrow().clone().map(|leaf| (name.clone(), leaf)))
            .collect()
    }
}

impl Drop for LeafFollower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Drop for ProxyLoop {
    /// A proxy no longer watched needs nothing of the mirror.
    fn drop(&mut self) {
        if let Some(mirror) = &self.watchers.mirror {
            mirror.release(&self.mirror_key);
        }
    }
}

/// Numbers the watchers started, for their keys in the mirror.
static WATCHER_SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Rebuilds the proxy's snapshot whenever its registration, leaf or store version changes.
async fn run(
    watchers: Arc<Watchers>,
    (proxy_id, token): (String, String),
    mut registration_rx: watch::Receiver<RegistrationSlot>,
    state_tx: watch::Sender<ProxyState>,
) {
    // A watcher replaced by a newer one of the same proxy may be dropped after the new
    // one told the mirror its needs: each watcher's needs are its own.
    let serial = WATCHER_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut proxy = ProxyLoop {
        store_rx: watchers.store.subscribe(),
        watchers,
        mirror_key: format!("{proxy_id}#{serial}"),
        token,
        leaf: None,
        service_leaves: ServiceLeaves::new(),
        remote_followers: RemoteFollowers::default(),
        last: None,
        seen_at: Instant::now(),
        warned_hash: String::new(),
        warned_unapplied: Vec::new(),
    };
    loop {
        let registration = registration_rx.borrow_and_update().clone();
        let state = proxy.state_of(registration);
        proxy.publish(state, &state_tx);
        // The async block borrows only the leaf, so the other arms can borrow the rest.
        let leaf = &mut proxy.leaf;
        let leaf_changed = async {
            match leaf.as_mut() {
                Some(f) => f.rx.changed().await,
                None => std::future::pending().await,
            }
        };
        let result = tokio::select! {
            r = registration_rx.changed() => r.is_ok(),
            r = leaf_changed => r.is_ok(),
            r = proxy.store_rx.changed() => r.is_ok(),
            _ = proxy.service_leaves.changed.notified() => true,
            _ = proxy.remote_followers.changed.notified() => true,
            _ = state_tx.closed() => false,
        };
        if !result {
            return;
        }
        proxy.seen_at = Instant::now();
    }
}

/// What one proxy's rebuild loop keeps between rounds.
struct ProxyLoop {
    watchers: Arc<Watchers>,
    /// The key of this watcher's needs in the mirror (client agents).
    mirror_key: String,
    token: String,
    store_rx: watch::Receiver<StoreVersion>,
    /// The proxy's own leaf, restarted when its service or DNS SANs change.
    leaf: Option<LeafFollower>,
    service_leaves: ServiceLeaves,
    remote_followers: RemoteFollowers,
    /// The last snapshot sent, so an identical rebuild is counted and not sent again.
    last: Option<Arc<Built>>,
    seen_at: Instant,
    /// The registration hash and unapplied entries last warned about, so each warning is
    /// logged once.
    warned_hash: String,
    warned_unapplied: Vec<String>,
}

impl ProxyLoop {
    /// The proxy's state for this round's registration.
    fn state_of(&mut self, registration: RegistrationSlot) -> ProxyState {
        if let Some(Ok(r)) = &registration {
            if r.content_hash != self.warned_hash {
                self.warned_hash = r.content_hash.clone();
                warn_escape_hatches(r);
            }
        }
        match registration {
            None => ProxyState::Pending("waiting for the proxy's registration".to_string()),
            Some(Err(reason)) => ProxyState::Pending(reason),
            Some(Ok(registration)) => self.state_with_leaf(&registration),
        }
    }

    /// Follows the registration's leaf (an ingress gateway serving TLS asks it for the
    /// names its clients reach it at, Consul's `DNSSAN`; a change of them follows a new
    /// leaf) and builds once the leaf is signed.
    fn state_with_leaf(&mut self, registration: &ProxyRegistration) -> ProxyState {
        let dns_sans = if registration.kind == ProxyKind::IngressGateway {
            snapshot::ingress_dns_sans(
                &self.store_rx.borrow(),
                &registration.service,
                &self.watchers.settings,
            )
        } else {
            Vec::new()
        };
        if self
            .leaf
            .as_ref()
            .map(|l| (l.service.as_str(), &l.dns_sans))
            != Some((&registration.destination_name, &dns_sans))
        {
            self.leaf = Some(LeafFollower::start(
                &self.watchers.agent,
                (&registration.destination_name, &dns_sans),
                &self.token,
                None,
            ));
        }
        let follower = self.leaf.as_mut().expect("just set");
        let cert = follower.rx.borrow_and_update().clone();
        match cert {
            None => ProxyState::Pending("waiting for the leaf certificate".to_string()),
            Some(cert) => self.build(registration, &cert),
        }
    }

    /// Builds the snapshot from the current store version, the linked services' leaves and
    /// what is known of other datacenters.
    fn build(&mut self, registration: &ProxyRegistration, cert: &LeafCert) -> ProxyState {
        let watchers = &self.watchers;
        let version = self.store_rx.borrow_and_update().clone();
        let linked = if registration.kind == ProxyKind::TerminatingGateway {
            snapshot::terminating_services(&version, &registration.service).unwrap_or_default()
        } else {
            Vec::new()
        };
        let leaves = self
            .service_leaves
            .follow(&linked, &watchers.agent, &self.token);
        self.remote_followers
            .follow_datacenters(registration.kind == ProxyKind::MeshGateway, &watchers.agent);
        let view = self.remote_followers.view();
        let state = rebuild(
            watchers,
            registration,
            (cert, &leaves),
            (version, &view),
            self.last.as_ref(),
            self.seen_at,
        );
        // What the snapshot needs of other datacenters follows from what it was built
        // from; a newly needed read is followed from now on and its first answer wakes
        // this loop.
        if let ProxyState::Ready(built) = &state {
            let needs = remote_needs(&built.snapshot, &view, &watchers.settings);
            self.remote_followers
                .follow(&needs, &watchers.agent, &self.token);
            // On a client agent, this datacenter's instances come the same way.
            if let Some(mirror) = &watchers.mirror {
                mirror.need(
                    &self.mirror_key,
                    local_needs(&built.snapshot, &watchers.settings),
                );
            }
        }
        state
    }

    /// Sends a new state to the proxy's streams: a snapshot unless it is the one last sent,
    /// a pending reason unless it is the same reason.
    fn publish(&mut self, state: ProxyState, state_tx: &watch::Sender<ProxyState>) {
        match state {
            ProxyState::Ready(built) => {
                self.warn_unapplied(&built);
                if self.last.as_ref().is_some_and(|l| Arc::ptr_eq(l, &built)) {
                    self.watchers
                        .unchanged
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                } else {
                    self.watchers
                        .rebuilds
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    self.last = Some(built.clone());
                    state_tx.send_replace(ProxyState::Ready(built));
                }
            }
            pending => {
                self.last = None;
                state_tx.send_if_modified(|current| {
                    let same = matches!(
                        (&*current, &pending),
                        (ProxyState::Pending(a), ProxyState::Pending(b)) if a == b
                    );
                    *current = pending;
                    !same
                });
            }
        }
    }

    /// Says once per change which of a gateway's config entries are accepted but not
    /// applied, or for a sidecar which prepared-query upstreams select nothing here and
    /// which escape hatches are ignored or fell back.
    fn warn_unapplied(&mut self, built: &Built) {
        let snapshot = &built.snapshot;
        let unapplied: Vec<String> = snapshot
            .unapplied
            .iter()
            .chain(&built.resources.warnings)
            .cloned()
            .collect();
        if unapplied == self.warned_unapplied {
            return;
        }
        self.warned_unapplied = unapplied;
        if self.warned_unapplied.is_empty() {
            return;
        }
        if snapshot.kind == ProxyKind::ConnectProxy {
            // A sidecar's are its prepared-query upstreams that select nothing here.
            log::warn!(
                "xds: proxy {:?}: {}",
                snapshot.proxy_id,
                self.warned_unapplied.join("; ")
            );
        } else {
            log::warn!(
                "xds: gateway {:?}: config entry {} accepted but not applied: praetor's ingress listeners take no certificates from SDS yet",
                snapshot.proxy_id,
                self.warned_unapplied.join(", ")
            );
        }
    }
}

/// Says once per registration which `envoy_*` keys praetor does not apply: a sidecar's
/// escape hatches act (the resource builders decode them; JSON that does not decode is the
/// build's error, logged when it fails), but a gateway takes none of them, a
/// prepared-query upstream none of its own, and a hatch that is not a string is not read.
fn warn_escape_hatches(registration: &ProxyRegistration) {
    use super::resources::escape_hatch::{
        LISTENER_TRACING_KEY, LOCAL_CLUSTER_KEY, PUBLIC_LISTENER_KEY, UPSTREAM_CLUSTER_KEY,
        UPSTREAM_LISTENER_KEY,
    };
    let sidecar = registration.kind == ProxyKind::ConnectProxy;
    let applied = |key: &str| {
        sidecar && [PUBLIC_LISTENER_KEY, LOCAL_CLUSTER_KEY, LISTENER_TRACING_KEY].contains(&key)
    };
    let mut keys: Vec<String> = Vec::new();
    for (key, value) in &registration.config {
        // A gateway's bind rules (`envoy_gateway_bind_addresses`, …, which
        // `connect envoy -register -bind-address` writes) are not applied: its listeners
        // bind the registration's address. The bootstrap's keys are `connect envoy`'s,
        // which applies them.
        let known = key.starts_with("envoy_")
            && (key.ends_with("_json") || key.starts_with("envoy_gateway_"))
            && !super::bootstrap_config::is_bootstrap_key(key);
        if known && !(applied(key) && value.is_string()) {
            keys.push(format!("Proxy.Config.{key}"));
        }
    }
    for upstream in &registration.upstreams {
        let service = sidecar && upstream.destination_type == "service";
        for (key, value) in &upstream.config {
            let hatch = [UPSTREAM_LISTENER_KEY, UPSTREAM_CLUSTER_KEY].contains(&key.as_str());
            if key.starts_with("envoy_") && !(service && hatch && value.is_string()) {
                keys.push(format!(
                    "Upstreams[{}].Config.{key}",
                    upstream.destination_name
                ));
            }
        }
    }
    if !keys.is_empty() {
        log::warn!(
            "xds: proxy {:?}: {} accepted but not applied: praetor applies the Envoy escape hatches of a sidecar and its service upstreams only, given as strings",
            registration.id,
            keys.join(", ")
        );
    }
}

/// The state for one set of inputs: the previous build when nothing it shows changed.
fn rebuild(
    watchers: &Watchers,
    registration: &ProxyRegistration,
    (leaf, service_leaves): (&LeafCert, &BTreeMap<String, LeafCert>),
    (version, remote): (StoreVersion, &RemoteView),
    last: Option<&Arc<Built>>,
    seen_at: Instant,
) -> ProxyState {
    let snapshot = match snapshot::build(
        registration,
        leaf,
        service_leaves,
        &version,
        &watchers.settings,
        remote,
    ) {
        Ok(s) => s,
        Err(reason) => return ProxyState::Pending(reason),
    };
    if let Some(last) = last {
        if last.snapshot == snapshot {
            return ProxyState::Ready(last.clone());
        }
    }
    match resources::build(&snapshot) {
        Ok(resources) => ProxyState::Ready(Arc::new(Built {
            snapshot,
            resources,
            version,
            seen_at,
            grpc: std::sync::OnceLock::new(),
        })),
        Err(reason) => {
            log::error!(
                "xds: cannot build the resources of proxy {:?}: {reason}",
                registration.id
            );
            ProxyState::Pending(reason)
        }
    }
}

/// The reads of other datacenters a snapshot needs: a mesh gateway every other
/// datacenter's gateways; a sidecar, per upstream target in another datacenter, that
/// datacenter's gateways (`remote` mode) or the target service's proxies there (no
/// gateway); a target in `local` mode is reached through this datacenter's gateways, which
/// the store holds.
fn remote_needs(
    snapshot: &Snapshot,
    view: &RemoteView,
    settings: &XdsSettings,
) -> std::collections::BTreeSet<RemoteQuery> {
    if snapshot.kind == ProxyKind::MeshGateway {
        return remote::mesh_gateway_needs(view, &settings.datacenter);
    }
    let mut needs = std::collections::BTreeSet::new();
    for upstream in &snapshot.upstreams {
        for target in upstream.targets.values() {
            if target.datacenter == settings.datacenter {
                continue;
            }
            match target.mesh_gateway_mode.as_str() {
                "local" => {}
                "remote" => remote::gateway_needs(view, &target.datacenter, &mut needs),
                _ => {
                    needs.insert(RemoteQuery::Connect {
                        datacenter: target.datacenter.clone(),
                        service: target.service.clone(),
                    });
                }
            }
        }
    }
    needs
}
