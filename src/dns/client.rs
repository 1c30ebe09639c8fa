//! DNS on a client agent: the catalog rows a resolution needs, asked of a server and cached,
//! and the change feed that keeps the caches exact.
//!
//! A client agent has no store, so its shards resolve questions against a [`ClientView`]:
//! rows a server sent ([`RemoteRows`], one entry per [`Lookup`]) plus, for the query being
//! completed, the rows just fetched. A resolution that lacked a row ends in
//! `Handled::Fetch`; the socket loop then calls [`ClientDns::fetch`] (one typed call,
//! [`remote::LOOKUP_METHOD`], on a yamux stream of the shard's connection to the server the
//! agent uses, `AllowStale` as `dns_config.allow_stale` says; another datacenter's lookups
//! the same call naming it, which the server hands on) and answers the message again. A hit
//! in the answer cache never leaves the shard, as on a server. Prepared queries still go as
//! forwarded HTTP (`GET /v1/query/<name>/execute`).
//!
//! Exactness: each shard polls the feed ([`remote::CHANGES_METHOD`]) and drops, by the store's
//! rule, the answers and rows every change touches; a reset drops everything. A row fetched
//! from a version older than the feed's position is used once and not cached (changes
//! between the two would never evict it). So a cached answer lags the servers by the feed's
//! delay only. With no server reachable the caches keep answering until the last feed
//! contact is `dns_config.max_stale` old, then are dropped, and misses answer SERVFAIL. With
//! `allow_stale = false` nothing is cached: every question asks the leader's state.
//!
//! Every request goes through the agent's server manager ([`servers::call_typed`]): to the server
//! in use, and on a transport failure to the next one at once (lookups and feed polls are
//! reads, safe to repeat). With no server known a lookup fails at once, as Consul's does.

use super::remote::{self, FeedReply, Lookup, LookupResult};
use super::view::{CatalogView, NodeRecord, ReadSet, ServiceInstance};
use super::{Completion, DnsSettings, ShardDns, VersionSource};
use crate::cluster::servers::{self, Retry, ServerManager};
use crate::shard::runtime::Shard;
use crate::store::{Change, DependencyIndex};
use arcstr::ArcStr;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a lookup request may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(2);
/// Rounds of fetching for one question (a PTR reads a node, then a service by address;
/// both usually come in the first round).
pub const FETCH_ROUNDS_MAX: usize = 3;
/// How long one feed poll blocks on the server.
pub const FEED_WAIT: Duration = Duration::from_secs(10);
/// How much longer than [`FEED_WAIT`] the client waits for the poll's answer.
pub const FEED_ANSWER_SLACK: Duration = Duration::from_secs(5);
/// Pause after a failed feed poll (no server, a refused connection, an error answer).
pub const FEED_RETRY_DELAY: Duration = Duration::from_millis(500);
/// How long the feed keeps its caches while its server is behind them (a reset to an older
/// index): long enough for a new leader to be elected and commit, after which the server
/// catches up; past it the older history is taken as the truth.
pub const FEED_LAG_TOLERANCE: Duration = Duration::from_secs(30);
/// Most cached lookups per shard; on overflow the rows are dropped (never wrong).
pub const REMOTE_ROWS_MAX: usize = 16_384;
/// Most dependency references of cached lookups per shard (see the answer cache's bound).
pub const REMOTE_ROW_REFERENCES_MAX: usize = 4 * REMOTE_ROWS_MAX;

/// Lookup results a server sent, each dropped by the changes to what it read.
#[derive(Default)]
pub struct RemoteRows {
    results: HashMap<Lookup, LookupResult, ahash::RandomState>,
    index: DependencyIndex<Lookup>,
    references: usize,
}

impl RemoteRows {
    pub fn len(&self) -> usize {
        self.results.len()
    }
    pub fn is_empty(&self) -> bool {
        self.results.is_empty()
    }
    pub fn get(&self, lookup: &Lookup) -> Option<&LookupResult> {
        self.results.get(lookup)
    }

    pub fn insert(&mut self, lookup: Lookup, result: LookupResult) {
        debug_assert!(lookup.answered_by(&result));
        let mut reads = ReadSet::new();
        lookup.record_reads(&mut reads);
        if self.results.len() >= REMOTE_ROWS_MAX
            || self.references + reads.len() > REMOTE_ROW_REFERENCES_MAX
        {
            self.clear();
        }
        for dependency in reads.as_slice() {
            self.index.insert(dependency, lookup.clone());
        }
        self.references += reads.len();
        self.results.insert(lookup, result);
    }

    pub fn invalidate(&mut self, changes: &[Change]) {
        if self.results.is_empty() {
            return;
        }
        let mut doomed = Vec::new();
        for change in changes {
            self.index
                .take_invalidated(change, |lookup| doomed.push(lookup));
        }
        self.references = self.references.saturating_sub(doomed.len());
        for lookup in doomed {
            self.results.remove(&lookup);
        }
    }

    pub fn clear(&mut self) {
        self.results.clear();
        self.index.clear();
        self.references = 0;
    }
}

/// One client shard's remote DNS state.
pub struct ClientDns {
    shard: Rc<Shard>,
    /// The agent's server list: which server a lookup or feed poll goes to.
    servers: Arc<ServerManager>,
    settings: Arc<DnsSettings>,
    /// The shard's answer cache, dropped by the feed together with the rows.
    answers: Rc<RefCell<ShardDns>>,
    rows: RefCell<RemoteRows>,
    /// Every change up to this index has been applied to the caches.
    feed_index: Cell<u64>,
    /// When the feed last answered; `None` before its first answer and after the caches
    /// expired.
    feed_contact: Cell<Option<Instant>>,
    /// Rung when a lookup reached a server while the feed has no contact yet, so the feed
    /// retries at once instead of after its pause: until it answers, nothing is cached.
    feed_wake: (flume::Sender<()>, flume::Receiver<()>),
}

impl ClientDns {
    pub fn new(
        shard: Rc<Shard>,
        settings: Arc<DnsSettings>,
        answers: Rc<RefCell<ShardDns>>,
        servers: Arc<ServerManager>,
    ) -> ClientDns {
        assert!(
            shard.is_client(),
            "only a client agent asks servers for DNS"
        );
        ClientDns {
            shard,
            servers,
            settings,
            answers,
            rows: RefCell::new(RemoteRows::default()),
            feed_index: Cell::new(0),
            feed_contact: Cell::new(None),
            feed_wake: flume::bounded(1),
        }
    }

    /// Whether answers may be cached at all: stale reads allowed.
    fn caching(&self) -> bool {
        self.settings.config.allow_stale
    }

    /// The version source of one resolution: the cached rows, then `fetched`.
    pub fn source<'a>(&'a self, fetched: &'a [(Lookup, LookupResult)]) -> ClientSource<'a> {
        ClientSource {
            rows: &self.rows,
            fetched,
            caching: self.caching(),
        }
    }

    /// Asks the servers for `lookups`: this datacenter's rows in one lookup request, and
    /// each other datacenter's rows and each prepared query in one more (which the server
    /// forwards or executes). Local rows read from a version at least as new as the feed's
    /// position are cached; nothing else is. All are returned for the question being
    /// completed.
    pub async fn fetch(&self, lookups: &[Lookup]) -> Result<Vec<(Lookup, LookupResult)>, String> {
        let config = &self.settings.config;
        let token = default_token(&self.shard);
        let options = remote::FetchOptions {
            stale_within: config.allow_stale.then_some(config.max_stale),
            agent_node: &self.settings.local.node_name,
            token: &token,
        };
        let mut rows = Vec::with_capacity(lookups.len());
        for fetch in remote::plan_fetches(lookups) {
            let local = fetch.target == (remote::FetchTarget::Rows { datacenter: None });
            let timeout = if local {
                FETCH_TIMEOUT
            } else {
                super::elsewhere::ELSEWHERE_FETCH_TIMEOUT
            };
            if let remote::FetchTarget::Query { .. } = fetch.target {
                let answer = self
                    .call_typed(remote::QUERY_METHOD, &fetch.query_call(&options), timeout)
                    .await;
                self.wake_feed();
                rows.extend(fetch.query_results(answer.as_deref().map_err(String::as_str))?);
                continue;
            }
            let answer = self
                .call_typed(remote::LOOKUP_METHOD, &fetch.lookup_call(&options), timeout)
                .await;
            self.wake_feed();
            if !local {
                rows.extend(fetch.call_results(answer.as_deref().map_err(String::as_str))?);
                continue;
            }
            let body = answer?;
            let payload = remote::reply_payload(&body, remote::LOOKUP_REPLY_FIELD)?;
            let reply = remote::decode_lookup_reply(payload, &fetch.lookups)?;
            let cache = self.caching()
                && self.feed_contact.get().is_some()
                && reply.index >= self.feed_index.get();
            let fetched: Vec<(Lookup, LookupResult)> =
                fetch.lookups.iter().cloned().zip(reply.results).collect();
            if cache {
                let mut cached = self.rows.borrow_mut();
                for (lookup, result) in &fetched {
                    cached.insert(lookup.clone(), result.clone());
                }
            }
            rows.extend(fetched);
        }
        Ok(rows)
    }

    /// A lookup reached a server: while the feed has no contact yet, it retries at once.
    fn wake_feed(&self) {
        if self.feed_contact.get().is_none() {
            let _ = self.feed_wake.0.try_send(());
        }
    }

    /// One typed call to the server in use (failing over as the server manager does): the
    /// reply's body, or the server's error text (or the transport's).
    async fn call_typed(
        &self,
        method: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<bytes::Bytes, String> {
        if self.servers.pick().is_none() {
            return Err(servers::NO_SERVERS.to_string());
        }
        servers::call_typed(
            &self.servers,
            &self.shard.rpc,
            method,
            body,
            timeout,
            Retry::Always,
        )
        .await
        .map_err(|error| error.to_string())
    }

    /// Applies one feed answer to the caches.
    fn apply_feed(&self, reply: FeedReply) {
        match reply {
            FeedReply::Changes { index, changes } => {
                if !changes.is_empty() {
                    self.answers.borrow_mut().cache.invalidate(&changes);
                    self.rows.borrow_mut().invalidate(&changes);
                }
                self.feed_index.set(index);
            }
            FeedReply::Reset { index } => {
                log::debug!(
                    "dns: change feed reset at index {index} (caches were at {})",
                    self.feed_index.get()
                );
                self.drop_cached();
                self.feed_index.set(index);
            }
        }
        self.feed_contact.set(Some(Instant::now()));
    }

    fn drop_cached(&self) {
        self.answers.borrow_mut().cache.clear();
        self.rows.borrow_mut().clear();
    }

    /// Polls the change feed until the agent shuts down.
    pub async fn run_feed(self: Rc<Self>) {
        let mut failing = false;
        let mut lagging_since: Option<Instant> = None;
        while !self.shard.shutting_down() {
            let outcome = self.poll_feed().await;
            match outcome {
                Ok(FeedReply::Reset { index })
                    if index < self.feed_index.get()
                        && lagging_since
                            .is_none_or(|since| since.elapsed() < FEED_LAG_TOLERANCE) =>
                {
                    // The server is behind the changes the caches already took in (after a
                    // failover, typically a follower that had not heard the commit of its
                    // dead leader's last write): its reset would trade them for an older
                    // view. Keep them, as while no server answers, and ask again until it
                    // catches up — or, past the tolerance, accept that the cluster's
                    // history really went back (a restore, a rebuilt cluster).
                    if lagging_since.is_none() {
                        log::debug!(
                            "dns: the server is at index {index}, behind the caches at {}",
                            self.feed_index.get()
                        );
                    }
                    lagging_since.get_or_insert_with(Instant::now);
                    self.expire_if_stale();
                    monoio::time::sleep(FEED_RETRY_DELAY).await;
                }
                Ok(reply) => {
                    lagging_since = None;
                    if failing {
                        log::info!("dns: change feed from the servers resumed");
                        failing = false;
                    }
                    self.apply_feed(reply);
                }
                Err(reason) => {
                    if !failing {
                        log::warn!("dns: change feed from the servers failed: {reason}");
                        failing = true;
                    }
                    self.expire_if_stale();
                    monoio::select! {
                        _ = monoio::time::sleep(FEED_RETRY_DELAY) => {},
                        _ = self.feed_wake.1.recv_async() => {},
                    }
                }
            }
        }
    }

    async fn poll_feed(&self) -> Result<FeedReply, String> {
        let body = remote::changes_call_body(
            self.feed_index.get(),
            FEED_WAIT,
            &default_token(&self.shard),
        );
        let answer = self
            .call_typed(remote::CHANGES_METHOD, &body, FEED_WAIT + FEED_ANSWER_SLACK)
            .await?;
        FeedReply::decode(remote::reply_payload(&answer, remote::CHANGES_REPLY_FIELD)?)
    }

    /// Drops the caches once the feed has been silent for `max_stale`: past that, nothing
    /// vouches for them.
    fn expire_if_stale(&self) {
        let Some(contact) = self.feed_contact.get() else {
            return;
        };
        if contact.elapsed() > self.settings.config.max_stale {
            log::warn!(
                "dns: no server answered for {:?} (dns_config.max_stale); dropping cached answers",
                self.settings.config.max_stale
            );
            self.drop_cached();
            self.feed_contact.set(None);
        }
    }
}

/// The rows one resolution on a client reads.
pub struct ClientSource<'a> {
    pub rows: &'a RefCell<RemoteRows>,
    pub fetched: &'a [(Lookup, LookupResult)],
    /// Whether answers may be cached (`allow_stale`).
    pub caching: bool,
}

impl<'a> VersionSource for ClientSource<'a> {
    type View = ClientView<'a>;
    fn version(&self) -> ClientView<'a> {
        ClientView {
            rows: self.rows,
            fetched: self.fetched,
            missing: RefCell::new(Vec::new()),
            used_uncached: Cell::new(!self.caching),
        }
    }
    fn completion(&self, view: &ClientView<'a>) -> Completion {
        let missing = view.missing.take();
        if !missing.is_empty() {
            Completion::Missing(missing)
        } else if view.used_uncached.get() {
            Completion::Uncacheable
        } else {
            Completion::Cacheable
        }
    }
}

/// A [`CatalogView`] over rows from a server. A call it cannot answer records the lookup
/// as missing and answers empty; the resolution's answer is then discarded.
pub struct ClientView<'a> {
    rows: &'a RefCell<RemoteRows>,
    fetched: &'a [(Lookup, LookupResult)],
    missing: RefCell<Vec<Lookup>>,
    /// The resolution read a fetched row that was not cached.
    used_uncached: Cell<bool>,
}

impl ClientView<'_> {
    fn read(&self, lookup: Lookup, reads: &mut ReadSet) -> Option<LookupResult> {
        lookup.record_reads(reads);
        if let Some(result) = self.rows.borrow().get(&lookup) {
            return Some(result.clone());
        }
        if let Some((_, result)) = self.fetched.iter().find(|(l, _)| *l == lookup) {
            self.used_uncached.set(true);
            return Some(result.clone());
        }
        let mut missing = self.missing.borrow_mut();
        if missing.len() < remote::LOOKUPS_PER_REQUEST_MAX && !missing.contains(&lookup) {
            missing.push(lookup);
        }
        None
    }
}

impl CatalogView for ClientView<'_> {
    fn service_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        match self.read(Lookup::service_instances(name), reads) {
            Some(LookupResult::Instances(instances)) => instances,
            _ => Vec::new(),
        }
    }
    fn node(&self, name: &str, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        match self.read(Lookup::node(name), reads) {
            Some(LookupResult::Node(node)) => node,
            _ => None,
        }
    }
    fn node_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        match self.read(Lookup::NodeByAddress(ip), reads) {
            Some(LookupResult::Node(node)) => node,
            _ => None,
        }
    }
    fn service_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<ArcStr> {
        match self.read(Lookup::ServiceByAddress(ip), reads) {
            Some(LookupResult::ServiceName(name)) => name,
            _ => None,
        }
    }
    fn connect_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        match self.read(Lookup::connect_instances(name), reads) {
            Some(LookupResult::Instances(instances)) => instances,
            _ => Vec::new(),
        }
    }
    fn ingress_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        match self.read(Lookup::ingress_instances(name), reads) {
            Some(LookupResult::Instances(instances)) => instances,
            _ => Vec::new(),
        }
    }
    fn elsewhere(&self, lookup: &Lookup) -> Option<LookupResult> {
        debug_assert!(!lookup.is_local(), "local lookups read the cached rows");
        // Never among the cached rows: found only among the fetched ones, which makes the
        // answer uncacheable.
        self.read(lookup.clone(), &mut ReadSet::new())
    }
}

/// With ACLs on, the agent's `default` token, which the servers filter rows with, as
/// Consul's DNS reads with it; empty (the anonymous token) otherwise.
pub fn default_token(shard: &Shard) -> String {
    if !shard.config().acl.enabled {
        return String::new();
    }
    let tokens = shard.shared().acl_tokens.read();
    tokens
        .ok()
        .and_then(|t| t.default.clone())
        .unwrap_or_default()
}
