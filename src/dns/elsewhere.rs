//! DNS answers a server takes from elsewhere than its store: another datacenter's rows
//! (`<svc>.service.<dc>`, `<node>.node.<dc>`) and prepared queries (`<query>.query[.<dc>]`).
//!
//! A resolution on a server reads its store version through a [`ServerView`], which also
//! holds the rows fetched for the question being completed; a lookup answered elsewhere
//! that it does not hold is noted missing, and the resolution ends in `Handled::Fetch`,
//! exactly as a client agent's misses do (`dns::client`). The socket loop then fetches them
//! ([`Elsewhere::fetch`]) and answers the message again with the rows at hand: another
//! datacenter's rows with the typed call a client agent makes of its server
//! (`dns::remote::LOOKUP_METHOD`, naming that datacenter), sent to one of its servers
//! through the WAN router as any call for another datacenter; a prepared query as the
//! `PreparedQuery.Execute` call served by this server in-process ([`LocalApi`]), so that
//! the query's failover serves DNS too.
//!
//! Answers that used fetched rows are not cached: no change feed tells when another
//! datacenter's rows or a query's results change.

use super::remote::{self, plan_fetches, FetchOptions, FetchTarget, Lookup, LookupResult};
use super::view::{AclFiltered, CatalogView, NodeRecord, ReadSet, ServiceInstance};
use super::{Completion, VersionSource};
use crate::cluster::router::Router;
use crate::cluster::servers::Retry;
use crate::shard::rpc_client::RpcClient;
use crate::shard::runtime::Shard;
use crate::store::acl::authorizer::Authorizer;
use crate::store::StoreVersion;
use arcstr::ArcStr;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

/// Serves one of Consul's typed calls (method, body) on this server, as if a client agent
/// had made it on the server port: the reply's body, or the call's error. `node` wires it to
/// the shard's typed-call endpoints (DNS sits below the API and never names it).
pub type LocalApi = std::rc::Rc<
    dyn Fn(&'static str, Vec<u8>) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, String>>>>,
>;

/// How long a question may wait for what it fetched from elsewhere (another datacenter,
/// or a query that fails over through several).
pub const ELSEWHERE_FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A server's resolution source: its shard's version as `may_serve` caught it up, plus the
/// rows fetched for this question.
pub struct ServerSource<'a> {
    pub shard: &'a Shard,
    pub fetched: &'a [(Lookup, LookupResult)],
    /// What the DNS token may read (`None`: ACLs off). Rows fetched from elsewhere were
    /// fetched with the same token, so the other side filtered them already.
    pub authorizer: Option<Arc<Authorizer>>,
}

impl<'a> VersionSource for ServerSource<'a> {
    type View = AclFiltered<ServerView<'a>>;
    fn version(&self) -> AclFiltered<ServerView<'a>> {
        // Not `current_version`: catching up here would process shard messages, which
        // invalidate the DNS cache while the resolver holds it borrowed.
        AclFiltered {
            inner: ServerView {
                version: self.shard.version_as_is(),
                fetched: self.fetched,
                missing: RefCell::new(Vec::new()),
                used_fetched: Cell::new(false),
            },
            authorizer: self.authorizer.clone(),
        }
    }
    fn completion(&self, view: &AclFiltered<ServerView<'a>>) -> Completion {
        let view = &view.inner;
        let missing = view.missing.take();
        if !missing.is_empty() {
            Completion::Missing(missing)
        } else if view.used_fetched.get() {
            Completion::Uncacheable
        } else {
            Completion::Cacheable
        }
    }
}

/// A store version plus the rows fetched from elsewhere for one question.
pub struct ServerView<'a> {
    version: StoreVersion,
    fetched: &'a [(Lookup, LookupResult)],
    missing: RefCell<Vec<Lookup>>,
    used_fetched: Cell<bool>,
}

impl CatalogView for ServerView<'_> {
    fn service_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        self.version.service_instances(name, reads)
    }
    fn node(&self, name: &str, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        self.version.node(name, reads)
    }
    fn node_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        self.version.node_by_address(ip, reads)
    }
    fn service_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<ArcStr> {
        self.version.service_by_address(ip, reads)
    }
    fn connect_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        self.version.connect_instances(name, reads)
    }
    fn ingress_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        self.version.ingress_instances(name, reads)
    }
    fn elsewhere(&self, lookup: &Lookup) -> Option<LookupResult> {
        debug_assert!(!lookup.is_local(), "local lookups read the store");
        if let Some((_, result)) = self.fetched.iter().find(|(l, _)| l == lookup) {
            self.used_fetched.set(true);
            return Some(result.clone());
        }
        let mut missing = self.missing.borrow_mut();
        if missing.len() < super::remote::LOOKUPS_PER_REQUEST_MAX && !missing.contains(lookup) {
            missing.push(lookup.clone());
        }
        None
    }
}

/// What a server's DNS fetches lookups answered elsewhere through.
pub struct Elsewhere<'a> {
    /// This server's own typed calls: prepared queries.
    pub api: &'a LocalApi,
    /// The WAN router: another datacenter's rows, asked of its servers as the typed call a
    /// client agent makes of its own ([`remote::LOOKUP_METHOD`] naming that datacenter).
    pub router: &'a Router,
    /// This shard's connections to other servers.
    pub rpc: &'a RpcClient,
}

impl Elsewhere<'_> {
    /// Fetches `lookups` (all answered elsewhere).
    pub async fn fetch(
        &self,
        lookups: &[Lookup],
        options: &FetchOptions<'_>,
    ) -> Result<Vec<(Lookup, LookupResult)>, String> {
        let mut rows = Vec::with_capacity(lookups.len());
        for fetch in plan_fetches(lookups) {
            match &fetch.target {
                FetchTarget::Query { .. } => {
                    let answer = monoio::time::timeout(
                        ELSEWHERE_FETCH_TIMEOUT,
                        (self.api)(remote::QUERY_METHOD, fetch.query_call(options)),
                    )
                    .await
                    .map_err(|_| format!("no answer within {ELSEWHERE_FETCH_TIMEOUT:?}"))?;
                    rows.extend(fetch.query_results(answer.as_deref().map_err(String::as_str))?);
                }
                FetchTarget::Rows { datacenter } => {
                    let datacenter = datacenter
                        .as_deref()
                        .expect("a server's own rows are in its store");
                    let answer = self
                        .router
                        .call_typed(
                            self.rpc,
                            datacenter,
                            remote::LOOKUP_METHOD,
                            &fetch.lookup_call(options),
                            ELSEWHERE_FETCH_TIMEOUT,
                            Retry::Always,
                        )
                        .await
                        .map_err(|error| error.to_string());
                    rows.extend(fetch.call_results(answer.as_deref().map_err(String::as_str))?);
                }
            }
        }
        Ok(rows)
    }
}
