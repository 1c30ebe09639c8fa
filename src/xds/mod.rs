//! The agent's gRPC server and what it serves: Envoy's xDS (ADS, delta and
//! state-of-the-world) for the `connect-proxy` services registered with this agent, with
//! Consul's resource names and shapes.
//!
//! gRPC runs on one thread of its own with a tokio runtime (tonic, prost, envoy-types), so
//! the thread-per-core shards never see tokio. What it serves is built from two sources
//! behind one seam ([`feed`]): the store versions a shard publishes (on a client agent,
//! the [`mirror`] of its servers' answers), and the agent's own
//! answers about its registrations and leaf certificates, asked over the agent channel.
//!
//! The path of a change: a write is applied, shard 0 installs the version and publishes it
//! to the [`feed::StoreFeed`]; each proxy's watcher ([`proxies`]) rebuilds its snapshot
//! ([`snapshot`], pure), and if it changed, encodes its resources once ([`resources`],
//! pure); every stream of that proxy ([`server`]) diffs the new versions against what its
//! Envoy confirmed ([`delta`], [`sotw`], pure) and sends the difference.
//!
//! Invariants: nothing here blocks a shard (publishing is a non-blocking swap); a stream
//! sends only resources whose content hash Envoy has not confirmed; a resource is encoded
//! once per build, whatever the number of streams; the stream's token is checked against
//! the store version each build came from before anything of it is sent.

pub mod bootstrap;
pub mod bootstrap_config;
pub mod delta;
pub mod expose;
pub mod feed;
pub mod mirror;
pub mod peerstream;
pub mod prepared_query;
pub mod proxies;
pub mod registration;
pub mod remote;
pub mod resources;
pub mod server;
pub mod snapshot;
pub mod sotw;
pub mod tls;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryServiceServer;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tonic::codegen::http;

pub use crate::api::agent::ENVOY_VERSIONS;

/// What the server needs to start.
pub struct XdsConfig {
    pub settings: snapshot::XdsSettings,
    /// Plain-text gRPC listeners (`ports.grpc`), bound before any thread starts.
    pub listeners: Vec<std::net::TcpListener>,
    /// gRPC over TLS (`ports.grpc_tls`): its listeners and the `tls.grpc` configuration.
    pub tls_listeners: Vec<std::net::TcpListener>,
    pub tls: Option<tls::ConfigSource>,
    pub agent: feed::AgentSource,
    pub store: feed::StoreFeed,
    /// Token checks when ACLs are on.
    pub acl: Option<crate::store::acl::cache::CompileSettings>,
    /// Whether this server serves and dials cluster peering's stream (a server with
    /// `ports.grpc_tls`).
    pub peering: bool,
    /// Whether this is a client agent: its store versions come from a [`mirror::Mirror`]
    /// of its servers' answers, not from a shard.
    pub client: bool,
}

/// Why a client agent with ACLs enabled refuses xDS streams: the mirror holds no ACL
/// tables to check a stream's token against, and a stream is never served unchecked.
pub const CLIENT_ACL_REFUSAL: &str = "this client agent has ACLs enabled and cannot check xDS tokens yet: connect the proxy to a server agent's gRPC port";

/// The running server's thread.
pub struct XdsThread {
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub streams: Arc<AtomicU64>,
    pub watchers: Arc<proxies::Watchers>,
}

impl XdsThread {
    /// Stops accepting, ends every stream and joins the thread.
    pub fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Starts the gRPC thread serving ADS on `config.listeners`.
pub fn spawn(config: XdsConfig) -> Result<XdsThread, String> {
    let peering = config.peering.then(|| {
        peerstream::Shared::new(
            config.store.clone(),
            config.agent.clone(),
            config.settings.datacenter.clone(),
        )
    });
    let refusal = (config.client && config.acl.is_some()).then(|| {
        log::warn!("xds: {CLIENT_ACL_REFUSAL}");
        CLIENT_ACL_REFUSAL
    });
    let mirror = (config.client && refusal.is_none()).then(|| {
        mirror::Mirror::new(
            config.agent.clone(),
            config.settings.datacenter.clone(),
            config.store.clone(),
        )
    });
    let watchers =
        proxies::Watchers::new(config.agent, config.store, config.settings, mirror.clone());
    let streams = Arc::new(AtomicU64::new(0));
    let ads = server::Ads {
        watchers: watchers.clone(),
        acl: config.acl.map(|s| Arc::new(server::AclChecker::new(s))),
        streams: streams.clone(),
        refusal,
    };
    let mut listeners = Vec::with_capacity(config.listeners.len() + config.tls_listeners.len());
    for (listener, secure) in config
        .listeners
        .into_iter()
        .map(|l| (l, false))
        .chain(config.tls_listeners.into_iter().map(|l| (l, true)))
    {
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("cannot use the gRPC listener: {e}"))?;
        listeners.push((listener, secure));
    }
    if listeners.iter().any(|(_, secure)| *secure) && config.tls.is_none() {
        return Err("gRPC over TLS needs the tls.grpc configuration".to_string());
    }
    let tls_config = config.tls;
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("praetor-grpc".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    log::error!("grpc: cannot start the runtime: {e}");
                    return;
                }
            };
            runtime.block_on(async move {
                if let Some(mirror) = &mirror {
                    mirror.start();
                }
                serve(ads, peering, listeners, tls_config, shutdown_rx).await
            });
        })
        .map_err(|e| format!("cannot start the gRPC thread: {e}"))?;
    Ok(XdsThread {
        shutdown: Some(shutdown_tx),
        thread: Some(thread),
        streams,
        watchers,
    })
}

async fn serve(
    ads: server::Ads,
    peering: Option<Arc<peerstream::Shared>>,
    listeners: Vec<(std::net::TcpListener, bool)>,
    tls_config: Option<tls::ConfigSource>,
    shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    let ads = AggregatedDiscoveryServiceServer::new(ads)
        .max_decoding_message_size(server::REQUEST_BYTES_MAX);
    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let peering_certs = peering
        .as_ref()
        .map(|shared| peerstream::certs::source(shared.store.clone(), shared.datacenter.clone()));
    let dialers = peering
        .as_ref()
        .map(|shared| tokio::spawn(peerstream::dialer::run(shared.clone(), stop_tx.subscribe())));
    let mut servers = Vec::with_capacity(listeners.len());
    for (listener, secure) in listeners {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                log::error!("grpc: cannot use a listener: {e}");
                continue;
            }
        };
        let mut stop = stop_tx.subscribe();
        let builder = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(std::time::Duration::from_secs(30)));
        let service = Services {
            ads: ads.clone(),
            // The peer stream is served on the TLS port only, as Consul serves it.
            peering: peering
                .clone()
                .filter(|_| secure)
                .map(peerstream::service::PeerStreamServer::new),
        };
        let signal = async move {
            let _ = stop.recv().await;
        };
        let served = match (secure, &tls_config) {
            (true, Some(config)) => {
                let incoming = tls::incoming(listener, config.clone(), peering_certs.clone());
                tokio::spawn(async move {
                    builder
                        .serve_with_incoming_shutdown(service, incoming, signal)
                        .await
                })
            }
            _ => {
                let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                tokio::spawn(async move {
                    builder
                        .serve_with_incoming_shutdown(service, incoming, signal)
                        .await
                })
            }
        };
        servers.push(tokio::spawn(async move {
            if let Ok(Err(e)) = served.await {
                log::error!("grpc: the server stopped: {e}");
            }
        }));
    }
    let _ = shutdown.await;
    let _ = stop_tx.send(());
    if let Some(dialers) = dialers {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), dialers).await;
    }
    for server in servers {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), server).await;
    }
}

/// What one listener serves: ADS, and on the TLS port of a server the peer stream, chosen
/// by the gRPC method's path.
#[derive(Clone)]
struct Services {
    ads: AggregatedDiscoveryServiceServer<server::Ads>,
    peering: Option<peerstream::service::PeerStreamServer>,
}

impl<B> tower_service::Service<http::Request<B>> for Services
where
    B: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let path = request.uri().path();
        match &mut self.peering {
            Some(peering) if path.starts_with(peerstream::messages::SERVICE_PREFIX) => {
                peering.call(request)
            }
            _ => self.ads.call(request),
        }
    }
}
