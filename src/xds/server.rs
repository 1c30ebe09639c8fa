//! The ADS service over gRPC: `envoy.service.discovery.v3.AggregatedDiscoveryService`,
//! delta and state-of-the-world, one task per stream on the xDS runtime.
//!
//! A stream learns its proxy from the first request's `node.id`, takes that proxy's watcher
//! and from then on reacts to two things: requests (subscriptions, ACKs, NACKs) and new
//! builds of its proxy. Before every response it checks the stream's token
//! (`x-consul-token`) for `service:write` on the proxy's destination against the store
//! version the build came from, again against every new store version while ACLs are on
//! (so a revoked token ends the stream at once), and every [`AUTH_CHECK_INTERVAL`] while
//! idle, as Consul does; a token that lost the permission ends the stream with Consul's
//! status.

use super::delta::{self, DeltaStream};
use super::proxies::{ProxyState, ProxyWatch, Watchers};
use super::sotw::{self, SotwStream};
use crate::store::acl::cache::CompileSettings;
use crate::store::acl::cache::{AuthorizerCache, ResolveError};
use crate::store::StoreVersion;
use envoy_types::pb::envoy::service::discovery::v3::{
    aggregated_discovery_service_server::AggregatedDiscoveryService, DeltaDiscoveryRequest,
    DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// How often an idle stream's token is checked again (Consul's `AuthCheckFrequency`).
pub const AUTH_CHECK_INTERVAL: Duration = Duration::from_secs(300);
/// Responses queued for one stream before its task waits for the client to read.
pub const STREAM_SEND_QUEUE: usize = 8;
/// The gRPC metadata key carrying the ACL token.
pub const TOKEN_METADATA: &str = "x-consul-token";
/// Largest request message the server decodes: Envoy's requests are small, but name lists
/// and initial versions grow with a proxy's resources.
pub const REQUEST_BYTES_MAX: usize = 4 << 20;
/// Most streams one server serves at once.
pub const STREAMS_MAX: u64 = 65_536;

/// The ADS service.
pub struct Ads {
    pub watchers: Arc<Watchers>,
    pub acl: Option<Arc<AclChecker>>,
    pub streams: Arc<AtomicU64>,
    /// Why every stream is refused, if this agent cannot serve xDS safely (a client agent
    /// with ACLs enabled).
    pub refusal: Option<&'static str>,
}

/// Token checks for streams when ACLs are on: one authorizer cache, emptied whenever the
/// store version it was filled from is replaced.
pub struct AclChecker {
    cache: Mutex<(Option<StoreVersion>, AuthorizerCache)>,
    settings: CompileSettings,
}

impl AclChecker {
    pub fn new(settings: CompileSettings) -> AclChecker {
        AclChecker {
            cache: Mutex::new((None, AuthorizerCache::new(settings.clone()))),
            settings,
        }
    }

    /// Consul's authorization of a proxy stream: `service:write` on its destination.
    pub fn check(
        &self,
        version: &StoreVersion,
        token: &str,
        destination: &str,
    ) -> Result<(), Status> {
        let mut guard = self.cache.lock().expect("acl cache lock");
        let (filled_from, cache) = &mut *guard;
        if !filled_from
            .as_ref()
            .is_some_and(|v| Arc::ptr_eq(v, version))
        {
            *cache = AuthorizerCache::new(self.settings.clone());
            *filled_from = Some(version.clone());
        }
        let now_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos().min(i64::MAX as u128) as i64);
        let resolved = cache.resolve(version, token, now_ns).map_err(|e| match e {
            ResolveError::NotFound => Status::unauthenticated("unauthenticated: ACL not found"),
            other => Status::internal(format!("error resolving acl token: {}", other.message())),
        })?;
        resolved
            .authorizer
            .service_write(destination)
            .map_err(|denial| {
                Status::permission_denied(denial.message(Some(&resolved.accessor_id)))
            })
    }
}

fn token_of<T>(request: &Request<T>) -> String {
    request
        .metadata()
        .get(TOKEN_METADATA)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// Counts a stream for as long as it lives.
struct StreamCount(Arc<AtomicU64>);

impl Drop for StreamCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Ads {
    fn admit(&self) -> Result<StreamCount, Status> {
        let before = self.streams.fetch_add(1, Ordering::Relaxed);
        let count = StreamCount(self.streams.clone());
        if before >= STREAMS_MAX {
            return Err(Status::resource_exhausted(format!(
                "this agent serves at most {STREAMS_MAX} xDS streams"
            )));
        }
        Ok(count)
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = ReceiverStream<Result<DiscoveryResponse, Status>>;
    type DeltaAggregatedResourcesStream = ReceiverStream<Result<DeltaDiscoveryResponse, Status>>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        self.open(SotwStream::new(), request)
    }

    async fn delta_aggregated_resources(
        &self,
        request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        self.open(DeltaStream::new(), request)
    }
}

/// What a stream of flavour `F` sends, as tonic takes it.
type Responses<F> = ReceiverStream<Result<<F as Flavour>::Response, Status>>;

impl Ads {
    /// Admits a stream of either flavour and drives it on a task of its own; a stream that
    /// ends in error sends its status last.
    fn open<F: Flavour>(
        &self,
        protocol: F,
        request: Request<Streaming<F::Request>>,
    ) -> Result<Response<Responses<F>>, Status> {
        if let Some(reason) = self.refusal {
            return Err(Status::failed_precondition(reason));
        }
        let count = self.admit()?;
        let token = token_of(&request);
        let (tx, rx) = mpsc::channel(STREAM_SEND_QUEUE);
        let watchers = self.watchers.clone();
        let acl = self.acl.clone();
        let inbound = request.into_inner();
        tokio::spawn(async move {
            let _count = count;
            if let Err(status) = drive(protocol, watchers, acl, token, inbound, tx.clone()).await {
                log::error!("xds: {} stream ended: {}", F::NAME, status.message());
                let _ = tx.send(Err(status)).await;
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// The next build of a watched proxy; never, while no proxy is known.
async fn next_state(rx: &mut Option<tokio::sync::watch::Receiver<ProxyState>>) -> bool {
    match rx.as_mut() {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// What woke a stream's task.
enum Event<R> {
    Request(Option<R>),
    StateChanged(bool),
    AuthCheck,
    /// A new store version while ACLs are on: the token is checked again at once, so a
    /// revoked token or a removed permission ends the stream without waiting.
    StoreChanged,
}

/// The next store version, when ACLs are on; never otherwise.
async fn next_version(
    store: &mut Option<tokio::sync::watch::Receiver<crate::store::StoreVersion>>,
) {
    match store.as_mut() {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// Checks the token against the newest store version (ACLs changed, not the proxy).
fn recheck(
    acl: &Option<Arc<AclChecker>>,
    store: &mut Option<tokio::sync::watch::Receiver<crate::store::StoreVersion>>,
    token: &str,
    state: &Option<tokio::sync::watch::Receiver<ProxyState>>,
) -> Result<(), Status> {
    let (Some(checker), Some(store)) = (acl, store.as_mut()) else {
        return Ok(());
    };
    let version = store.borrow_and_update().clone();
    if let Some(ProxyState::Ready(built)) = state.as_ref().map(|rx| rx.borrow().clone()) {
        checker.check(&version, token, &built.snapshot.destination)?;
    }
    Ok(())
}

fn authorize(
    acl: &Option<Arc<AclChecker>>,
    token: &str,
    built: &super::proxies::Built,
) -> Result<(), Status> {
    match acl {
        None => Ok(()),
        Some(checker) => checker.check(&built.version, token, &built.snapshot.destination),
    }
}

/// The proxy a first request names, or the error Consul answers.
fn proxy_of(node: Option<&envoy_types::pb::envoy::config::core::v3::Node>) -> Option<String> {
    node.map(|n| n.id.clone()).filter(|id| !id.is_empty())
}

/// What differs between the two ADS flavours for one stream: the message types, how a
/// request is taken in, and what a build of the proxy sends.
trait Flavour: Send + 'static {
    type Request: Send + 'static;
    type Response: Send + 'static;
    /// How the stream's end is logged.
    const NAME: &'static str;
    fn node(request: &Self::Request) -> Option<&envoy_types::pb::envoy::config::core::v3::Node>;
    /// Takes `request` in; whether a response may follow it (not after a NACK, a stale
    /// nonce or an unknown type, each logged here).
    fn receive(&mut self, request: &Self::Request, proxy: &str) -> Result<bool, String>;
    /// What to send for `resources` now.
    fn responses(&mut self, resources: &super::resources::Resources) -> Vec<Self::Response>;
}

impl Flavour for DeltaStream {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaDiscoveryResponse;
    const NAME: &'static str = "delta";

    fn node(
        request: &DeltaDiscoveryRequest,
    ) -> Option<&envoy_types::pb::envoy::config::core::v3::Node> {
        request.node.as_ref()
    }

    fn receive(&mut self, request: &DeltaDiscoveryRequest, proxy: &str) -> Result<bool, String> {
        Ok(match DeltaStream::receive(self, request)? {
            delta::Received::Nack { kind, nonce, error } => {
                log::error!("xds: proxy {proxy:?} rejected {kind:?} (nonce {nonce}): {error}");
                // Consul waits for a new snapshot or request instead of sending the same
                // resources again.
                false
            }
            delta::Received::UnknownType(url) => {
                log::debug!("xds: ignoring a request for unknown type {url:?}");
                false
            }
            delta::Received::NewSubscription(_) | delta::Received::Ack(_) => true,
        })
    }

    fn responses(
        &mut self,
        resources: &super::resources::Resources,
    ) -> Vec<DeltaDiscoveryResponse> {
        // One response in flight at a time: the next waits for this one's ACK or NACK.
        self.next_response(resources).into_iter().collect()
    }
}

impl Flavour for SotwStream {
    type Request = DiscoveryRequest;
    type Response = DiscoveryResponse;
    const NAME: &'static str = "state-of-the-world";

    fn node(request: &DiscoveryRequest) -> Option<&envoy_types::pb::envoy::config::core::v3::Node> {
        request.node.as_ref()
    }

    fn receive(&mut self, request: &DiscoveryRequest, proxy: &str) -> Result<bool, String> {
        Ok(match SotwStream::receive(self, request)? {
            sotw::Received::Nack {
                kind,
                version,
                error,
            } => {
                log::error!("xds: proxy {proxy:?} rejected {kind:?} version {version}: {error}");
                false
            }
            sotw::Received::UnknownType(url) => {
                log::debug!("xds: ignoring a request for unknown type {url:?}");
                false
            }
            sotw::Received::Stale(_) => false,
            sotw::Received::Request(_) => true,
        })
    }

    fn responses(&mut self, resources: &super::resources::Resources) -> Vec<DiscoveryResponse> {
        SotwStream::responses(self, resources)
    }
}

/// One stream of either flavour: requests in, builds of its proxy watched, the token checked
/// before every response, at every new store version and every [`AUTH_CHECK_INTERVAL`].
async fn drive<F: Flavour>(
    mut protocol: F,
    watchers: Arc<Watchers>,
    acl: Option<Arc<AclChecker>>,
    token: String,
    mut inbound: Streaming<F::Request>,
    tx: mpsc::Sender<Result<F::Response, Status>>,
) -> Result<(), Status> {
    let mut watch: Option<Arc<ProxyWatch>> = None;
    let mut state_rx = None;
    let mut auth_timer = Box::pin(tokio::time::sleep(AUTH_CHECK_INTERVAL));
    let mut store_rx = acl.as_ref().map(|_| watchers.store().subscribe());
    let mut grpc_client = false;
    loop {
        let event = tokio::select! {
            message = inbound.message() => Event::Request(match message {
                Ok(request) => request,
                Err(status) => {
                    log::debug!("xds: {} stream closed by the client: {}", F::NAME, status.message());
                    None
                }
            }),
            changed = next_state(&mut state_rx) => Event::StateChanged(changed),
            _ = &mut auth_timer => Event::AuthCheck,
            _ = next_version(&mut store_rx) => Event::StoreChanged,
        };
        match event {
            Event::Request(None) => return Ok(()),
            Event::Request(Some(request)) => {
                if watch.is_none() {
                    // A proxyless gRPC client announces itself in its first request and is
                    // served the gRPC flavour of its proxy's resources from then on.
                    grpc_client = F::node(&request).is_some_and(|node| {
                        super::resources::grpc::is_grpc_client(&node.user_agent_name)
                    });
                    if let Some(proxy_id) = proxy_of(F::node(&request)) {
                        let w = watchers
                            .watch(&proxy_id, &token)
                            .map_err(Status::resource_exhausted)?;
                        state_rx = Some(w.state.clone());
                        watch = Some(w);
                    }
                }
                let proxy = watch
                    .as_ref()
                    .map(|w| w.proxy_id.as_str())
                    .unwrap_or_default();
                if !protocol
                    .receive(&request, proxy)
                    .map_err(Status::invalid_argument)?
                {
                    continue;
                }
            }
            Event::StateChanged(changed) => {
                if !changed {
                    return Err(Status::unavailable("the proxy's watcher stopped"));
                }
            }
            Event::AuthCheck => {
                if let Some(ProxyState::Ready(built)) =
                    state_rx.as_ref().map(|rx| rx.borrow().clone())
                {
                    authorize(&acl, &token, &built)?;
                }
                auth_timer
                    .as_mut()
                    .reset(tokio::time::Instant::now() + AUTH_CHECK_INTERVAL);
                continue;
            }
            Event::StoreChanged => {
                recheck(&acl, &mut store_rx, &token, &state_rx)?;
                continue;
            }
        }
        let Some(rx) = state_rx.as_mut() else {
            continue;
        };
        let state = rx.borrow_and_update().clone();
        let ProxyState::Ready(built) = state else {
            continue;
        };
        authorize(&acl, &token, &built)?;
        auth_timer
            .as_mut()
            .reset(tokio::time::Instant::now() + AUTH_CHECK_INTERVAL);
        let resources = if grpc_client {
            match built.grpc_resources() {
                Ok(resources) => resources,
                // Logged once by the build; the stream waits for the next one.
                Err(_) => continue,
            }
        } else {
            &built.resources
        };
        for response in protocol.responses(resources) {
            if tx.send(Ok(response)).await.is_err() {
                return Ok(());
            }
        }
    }
}
