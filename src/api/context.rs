//! What an endpoint handler may use, and nothing more.
//!
//! A handler reads the shard's current store version, decides where a read runs, fills in
//! Consul's query metadata, and looks at the agent's configuration, identity and cluster
//! status; the gossip surface reaches the pools and the event ring, the agent surface the
//! agent channel. It does not propose, park, forward or touch the shard's pending requests:
//! it returns an [`Outcome`](super::Outcome) and the server loop (`api::server`) carries it
//! out with the runtime itself.
//!
//! A context belongs to one shard thread and lives as long as its HTTP server; every method
//! is a field read or a call the shard would make anyway, so handing it to handlers instead
//! of the shard costs nothing per request.

use super::agent_channel::AgentChannel;
use super::client_tokens::ClientTokens;
use super::{QueryMeta, QueryOptions};
use crate::cluster::gossip::GossipHandle;
use crate::cluster::servers::ServerManager;
use crate::cluster::user_events::EventLog;
use crate::cluster::Pools;
use crate::config::acl::AclTokens;
use crate::config::AgentConfig;
use crate::dns::remote::RecentChanges;
use crate::proto::http::HttpLimits;
use crate::shard::peer_transport::Faults;
use crate::shard::runtime::{ClusterStatus, Consistency, Identity, ReadPlan};
use crate::shard::Shard;
use crate::store::acl::cache::{AuthorizerCache, CompileSettings, ResolveError, Resolved};
use crate::store::StoreVersion;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// How often a follower looks for a leader while it holds a call for one.
const LEADER_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);
/// Attempts of one call on the leader before its transport failure is the answer.
const LEADER_CALL_ATTEMPTS_MAX: u32 = 3;

/// What a handler's deferred work (an [`Outcome::Async`](super::Outcome) future, which
/// outlives the handler) may use: the shard's versions and read barrier, and requests to
/// other datacenters' servers through the WAN router over the shard's own connections.
#[derive(Clone)]
pub struct Deferred {
    shard: Rc<Shard>,
    router: Arc<crate::cluster::router::Router>,
    servers: Arc<ServerManager>,
}

impl Deferred {
    pub fn config(&self) -> &AgentConfig {
        self.shard.config()
    }

    // A snapshot travels on a connection of its own, which `api::rpc::snapshot` picks a
    // server for and dials itself, as Consul's `SnapshotRPC` does; these are what it needs.

    /// Whether this agent is a client agent.
    pub fn is_client(&self) -> bool {
        self.shard.is_client()
    }

    /// On a client agent, the servers its requests go to.
    pub fn servers(&self) -> &ServerManager {
        &self.servers
    }

    /// The cluster's status as this shard last saw it (the leader and its RPC address).
    pub fn cluster_status(&self) -> Arc<ClusterStatus> {
        self.shard.cluster_status()
    }

    /// This server's own RPC address.
    pub fn rpc_address(&self) -> std::net::SocketAddr {
        self.shard.shared().rpc_address
    }

    /// The shard's RPC client: the TLS settings and bind address connections dial with.
    pub fn rpc_client(&self) -> &crate::shard::rpc_client::RpcClient {
        &self.shard.rpc
    }

    /// The WAN router: which datacenters exist and how near they are.
    pub fn router(&self) -> &crate::cluster::router::Router {
        &self.router
    }

    /// See [`Context::current_version`].
    pub fn current_version(&self) -> StoreVersion {
        self.shard.current_version()
    }

    /// See [`Context::query_meta`].
    pub fn query_meta(&self, index: u64, consistency: Consistency) -> QueryMeta {
        query_meta_of(&self.shard, index, consistency)
    }

    /// Proposes `command` on this server (which must lead) and waits until it is applied:
    /// for requests that write more than once (a peering's deletion marks it, then
    /// removes it).
    pub async fn propose(&self, command: &crate::store::Command) -> crate::replica::ProposalResult {
        self.shard.propose(command.encode()).await
    }

    /// Confirms leadership with a quorum round (a `?consistent` read's barrier); the
    /// error is the answer when it fails.
    pub async fn read_barrier(&self) -> Result<(), super::ApiError> {
        let result = self.shard.read_barrier().await;
        match super::ApiError::from_proposal(&result) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Makes one of Consul's typed calls on a server of this datacenter: on a client agent,
    /// one of its servers (failing over among them as `retry` allows); on a follower
    /// server, the leader ([`Deferred::call_leader`]). The reply's msgpack body, or why not.
    pub async fn call_server(
        &self,
        method: &str,
        body: &[u8],
        timeout: std::time::Duration,
        retry: crate::cluster::servers::Retry,
    ) -> Result<bytes::Bytes, crate::shard::rpc_client::CallError> {
        if !self.shard.is_client() {
            return self.call_leader(method, body, timeout, retry).await;
        }
        crate::cluster::servers::call_typed(
            &self.servers,
            &self.shard.rpc,
            method,
            body,
            timeout,
            retry,
        )
        .await
    }

    /// On a server: makes a typed call on the leader, as Consul's `ForwardRPC` hands a
    /// follower's write or leader read to it — on a yamux stream of this shard's connection
    /// to the leader's RPC port. Without a known leader the call waits up to
    /// `RPC_HOLD_TIMEOUT` for one, then fails with "No cluster leader"; a transport failure
    /// is tried again (on whichever server leads by then) only as `retry` allows. When this
    /// server has just become the leader, the call goes to its own port, whose typed-call
    /// endpoint waits for the leadership to be usable and serves it.
    pub async fn call_leader(
        &self,
        method: &str,
        body: &[u8],
        timeout: std::time::Duration,
        retry: crate::cluster::servers::Retry,
    ) -> Result<bytes::Bytes, crate::shard::rpc_client::CallError> {
        use crate::cluster::servers::Retry;
        use crate::shard::rpc_client::CallError;
        debug_assert!(!self.shard.is_client(), "only servers know a leader");
        let started = Instant::now();
        let mut attempts: u32 = 0;
        loop {
            let leader = self
                .shard
                .cluster_status()
                .leader_rpc_address
                .parse::<std::net::SocketAddr>();
            let held_too_long = started.elapsed() >= crate::cluster::servers::RPC_HOLD_TIMEOUT;
            let Ok(leader) = leader else {
                if held_too_long {
                    let no_leader = crate::replica::ProposalResult::NotLeader;
                    return Err(CallError::Remote(no_leader.to_string()));
                }
                monoio::time::sleep(LEADER_POLL_INTERVAL).await;
                continue;
            };
            attempts += 1;
            match self
                .shard
                .rpc
                .call(leader, None, method, body, timeout)
                .await
            {
                Err(CallError::Transport { reason, sent })
                    if (retry == Retry::Always || !sent)
                        && attempts < LEADER_CALL_ATTEMPTS_MAX
                        && !held_too_long =>
                {
                    log::debug!("rpc: call {method} on leader {leader} failed: {reason}");
                    monoio::time::sleep(LEADER_POLL_INTERVAL).await;
                }
                answer => return answer,
            }
        }
    }

    /// On a server: makes one of Consul's typed calls on a server of `datacenter` through
    /// the WAN router (a yamux stream of the shard's connection to it, as a client agent
    /// calls its own servers); the reply's msgpack body, or the error of the call or of its
    /// way there ("No path to datacenter" as the server's answer).
    pub async fn call_datacenter(
        &self,
        datacenter: &str,
        method: &str,
        body: &[u8],
        timeout: std::time::Duration,
        retry: crate::cluster::servers::Retry,
    ) -> Result<bytes::Bytes, crate::shard::rpc_client::CallError> {
        self.router
            .call_typed(&self.shard.rpc, datacenter, method, body, timeout, retry)
            .await
    }
}

fn query_meta_of(shard: &Shard, index: u64, consistency: Consistency) -> QueryMeta {
    let leader = shard.leader_contact();
    QueryMeta {
        index,
        known_leader: leader.known,
        last_contact_ms: leader.last_contact_ms,
        consistency,
        cache: None,
    }
}

/// A handler's view of its shard and of the agent around it.
pub struct Context {
    shard: Rc<Shard>,
    pools: Arc<Pools>,
    agent: AgentChannel,
    /// On a server: the recent DNS-table changes client agents' DNS caches poll for.
    dns_changes: Rc<RefCell<RecentChanges>>,
    /// This shard's compiled authorizers by SecretID, emptied precisely by every version
    /// the shard takes in (the observer registered in [`Context::new`]).
    acl_cache: Rc<RefCell<AuthorizerCache>>,
    /// On a client agent: the tokens its servers resolved (see `client_tokens`).
    client_tokens: Rc<RefCell<ClientTokens>>,
}

/// The current Unix time in nanoseconds: what ACL writes stamp and token expiry compares.
pub fn now_unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(i64::MAX as u128) as i64)
}

/// Reads the shard's newest version later, from a write's answer (which runs once the
/// write is applied and its version installed).
#[derive(Clone)]
pub struct VersionReader(Rc<Shard>);

impl VersionReader {
    pub fn current(&self) -> StoreVersion {
        self.0.current_version()
    }
}

impl Context {
    pub fn new(shard: Rc<Shard>, pools: Arc<Pools>, agent: AgentChannel) -> Context {
        let dns_changes = Rc::new(RefCell::new(RecentChanges::new(shard.local_index())));
        if !shard.is_client() {
            // Recorded in the step that installs each version, so a reader woken by a
            // change finds it here.
            let ring = dns_changes.clone();
            shard.on_new_version(move |batch| {
                ring.borrow_mut()
                    .record(batch.version.index, &batch.changes);
            });
        }
        let acl = &shard.config().acl;
        let acl_cache = Rc::new(RefCell::new(AuthorizerCache::new(CompileSettings {
            datacenter: shard.config().datacenter.clone(),
            default_policy: acl.default_policy,
        })));
        if acl.enabled {
            let invalidated = acl_cache.clone();
            shard.on_new_version(move |batch| invalidated.borrow_mut().invalidate(&batch.changes));
        }
        let client_tokens = Rc::new(RefCell::new(ClientTokens::new(&shard.config().acl)));
        Context {
            shard,
            pools,
            agent,
            dns_changes,
            acl_cache,
            client_tokens,
        }
    }

    /// The recent DNS-table changes of this shard (empty on a client agent).
    pub fn dns_changes(&self) -> &Rc<RefCell<RecentChanges>> {
        &self.dns_changes
    }

    /// `acl.enabled`: requests are checked against tokens.
    pub fn acl_enabled(&self) -> bool {
        self.shard.config().acl.enabled
    }

    /// Resolves a SecretID (empty: anonymous) against the newest version; on a client
    /// agent, from what its servers answered (fetched before the request was dispatched).
    pub fn resolve_token(&self, secret_id: &str) -> Result<Resolved, ResolveError> {
        use crate::consul::metrics::{Counter, Sample};
        use crate::telemetry;
        if self.is_client() {
            return self.client_tokens.borrow().resolve(secret_id);
        }
        let version = self.current_version();
        let started = telemetry::timing(Sample::AclResolveToken).then(std::time::Instant::now);
        let mut cache = self.acl_cache.borrow_mut();
        let hits_before = cache.stats().hits;
        let resolved = cache.resolve(&version, secret_id, now_unix_ns());
        telemetry::incr(if cache.stats().hits > hits_before {
            Counter::AclTokenCacheHit
        } else {
            Counter::AclTokenCacheMiss
        });
        if let Some(started) = started {
            telemetry::observe_since(Sample::AclResolveToken, started);
        }
        resolved
    }

    /// A client agent's tokens as its servers resolved them.
    pub fn client_tokens(&self) -> &Rc<RefCell<ClientTokens>> {
        &self.client_tokens
    }

    /// The shard's connections to servers, for requests a client agent makes itself.
    pub fn forward_client(&self) -> &crate::shard::forward::ForwardPool {
        &self.shard.forward
    }

    /// The agent's ACL tokens as configured or last set at runtime.
    pub fn agent_tokens(&self) -> AclTokens {
        self.shard
            .shared()
            .acl_tokens
            .read()
            .map(|tokens| tokens.clone())
            .unwrap_or_default()
    }

    /// The agent's `default` token, used by requests that carry none.
    pub fn agent_default_token(&self) -> Option<String> {
        self.shard
            .shared()
            .acl_tokens
            .read()
            .ok()
            .and_then(|tokens| tokens.default.clone())
    }

    /// The tokens file, when `acl.enable_token_persistence` is on.
    pub fn agent_token_file(&self) -> Option<&std::sync::Mutex<crate::config::acl::TokenFile>> {
        self.shard.shared().acl_token_file.as_ref()
    }

    /// Replaces the agent's ACL tokens (`/v1/agent/token/<type>`).
    pub fn set_agent_tokens(&self, update: impl FnOnce(&mut AclTokens)) {
        if let Ok(mut tokens) = self.shard.shared().acl_tokens.write() {
            update(&mut tokens);
        }
    }

    /// A handle that reads the shard's newest version after a write is applied.
    pub fn version_reader(&self) -> VersionReader {
        VersionReader(self.shard.clone())
    }

    pub fn config(&self) -> &AgentConfig {
        self.shard.config()
    }

    /// `node_meta` as configured, or as the last reload changed it.
    pub fn node_meta(&self) -> Arc<Vec<(String, String)>> {
        self.shard.shared().node_meta.load_full()
    }

    pub fn identity(&self) -> &Identity {
        self.shard.identity()
    }

    /// This server leads and has applied its term's first entry, so it may serve reads.
    pub fn is_leader(&self) -> bool {
        self.shard.is_leader()
    }

    /// Signs a client agent's certificate (`AutoEncrypt.Sign`) with this server's
    /// replicated root, or says why not in Consul's words.
    pub fn sign_agent_certificate(
        &self,
        request: &crate::shard::auto_encrypt::AgentCertificateRequest,
    ) -> Result<crate::shard::auto_encrypt::AgentCertificate, String> {
        crate::shard::auto_encrypt::sign(&self.shard, request)
    }

    /// A client agent: no Raft, no store; everything store-bound goes to a server.
    pub fn is_client(&self) -> bool {
        self.shard.is_client()
    }

    /// Whether a read with `options` is one of Consul's typed calls to a server rather
    /// than run here: always on a client agent; on a follower, when its consistency needs
    /// the leader (which then serves the same call, as Consul's `ForwardRPC` sends it).
    pub fn reads_by_call(&self, options: &QueryOptions) -> bool {
        self.is_client() || self.read_plan(options) == ReadPlan::Forward
    }

    /// Whether a write is one of Consul's typed calls to a server: on a client agent, and
    /// on a follower (the call goes to the leader, which proposes it).
    pub fn writes_by_call(&self) -> bool {
        self.is_client() || !self.is_leader()
    }

    pub fn cluster_status(&self) -> Arc<ClusterStatus> {
        self.shard.cluster_status()
    }

    /// The newest version this server published, taken in first if it is still queued, so
    /// that a write acknowledged on any shard is visible.
    pub fn current_version(&self) -> StoreVersion {
        self.shard.current_version()
    }

    /// Index of the version this shard holds, without taking in queued ones.
    pub fn local_index(&self) -> u64 {
        self.shard.local_index()
    }

    /// Limits on request heads and bodies.
    pub fn http_limits(&self) -> &HttpLimits {
        self.shard.http_limits()
    }

    pub fn shard_count(&self) -> usize {
        self.shard.shard_count()
    }

    /// When the agent started.
    pub fn started_at(&self) -> Instant {
        self.shard.shared().started_at
    }

    /// The test-only faults `/v1/agent/debug/faults` sets.
    pub fn faults(&self) -> &Faults {
        &self.shard.shared().faults
    }

    /// Where a read with these options runs: here, after a quorum round, or on the leader.
    pub fn read_plan(&self, options: &QueryOptions) -> ReadPlan {
        self.shard.read_plan(options.consistency, options.max_stale)
    }

    /// Consul's metadata for an answer at `index`, read with `consistency`.
    pub fn query_meta(&self, index: u64, consistency: Consistency) -> QueryMeta {
        query_meta_of(&self.shard, index, consistency)
    }

    /// The LAN gossip pool, when serf_lan is enabled.
    pub fn lan(&self) -> Option<&GossipHandle> {
        self.pools.lan.as_ref()
    }

    /// The WAN gossip pool, on servers with serf_wan enabled.
    pub fn wan(&self) -> Option<&GossipHandle> {
        self.pools.wan.as_ref()
    }

    /// On a client agent, the servers its requests go to.
    pub fn servers(&self) -> &Arc<ServerManager> {
        &self.pools.servers
    }

    /// On a server, the other datacenters' servers (the WAN router).
    pub fn router(&self) -> &Arc<crate::cluster::router::Router> {
        &self.pools.router
    }

    /// What work that outlives the handler may use (a prepared query's failover).
    pub fn deferred(&self) -> Deferred {
        Deferred {
            shard: self.shard.clone(),
            router: self.pools.router.clone(),
            servers: self.pools.servers.clone(),
        }
    }

    /// Recent Consul user events heard on the LAN pool.
    pub fn events(&self) -> &Arc<EventLog> {
        &self.pools.events
    }

    /// How agent endpoints reach the agent on shard 0.
    pub fn agent(&self) -> &AgentChannel {
        &self.agent
    }
}
