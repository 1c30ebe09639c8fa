//! What a client agent and a server say to each other so that the client can answer DNS: the
//! catalog lookups a resolution needs, and the feed of catalog changes that keeps the
//! client's caches exact. Pure: bytes and indexes in, bytes out.
//!
//! A client agent has no store. It resolves each question itself (its own `dns_config`:
//! domain, TTLs, `only_passing`, truncation), against a [`CatalogView`] whose rows it asks a
//! server for, one [`Lookup`] per view call, with the typed call [`LOOKUP_METHOD`] on the
//! server's RPC port. The server answers every lookup from one store version and says which
//! ([`LookupReply::index`]).
//!
//! The client caches lookup results and encoded answers and drops them by the same rule as
//! a server does (`store::invalidates`), fed by [`CHANGES_METHOD`]: a blocking read that returns
//! the changes to the DNS tables ([`FEED_TABLES`]) after the client's index, kept per server
//! shard in a bounded ring ([`RecentChanges`]), or [`FeedReply::Reset`] when the ring no longer
//! reaches back that far (the client then drops every cached entry).
//!
//! Invariants:
//! - [`Lookup::record_reads`] records exactly what the store's `CatalogView` records for the
//!   same call (a test holds them together), and every such read is in a [`FEED_TABLES`]
//!   table, so the feed carries every change that can invalidate a cached lookup.
//! - The ring holds every DNS-table change after [`RecentChanges::base_index`], in index
//!   order; a reader behind that base, or ahead of the server's version, gets a reset.

use super::view::{CatalogView, NodeRecord, ReadSet, ServiceInstance};
use crate::consul::rpc::prepared_query::{read_execute_response, ExecuteRequest, QuerySource};
use crate::store::{Change, ChangeKey, Table};
use arcstr::ArcStr;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Arc;

/// The typed call on a server's RPC port that answers a batch of lookups (praetor's own
/// method: see [`LookupCall`]).
pub const LOOKUP_METHOD: &str = "Praetor.DNSLookup";
/// The typed call that answers the change feed (praetor's own method: see
/// [`changes_call_body`]).
pub const CHANGES_METHOD: &str = "Praetor.DNSChanges";
/// Most lookups in one request. One resolution makes at most two view calls (PTR: a node,
/// then a service by address).
pub const LOOKUPS_PER_REQUEST_MAX: usize = 8;
/// Most change sets a server shard keeps for the feed.
pub const CHANGE_SETS_HELD_MAX: usize = 4096;
/// Most single changes a server shard keeps for the feed (over every held set).
pub const CHANGES_HELD_MAX: usize = 65_536;
/// Most bytes a server shard's ring keeps (as [`held_bytes`] counts them): every server
/// keeps the ring whether or not a client agent reads it, and 65,536 changes of catalog
/// registrations came to ~5 MB per shard.
pub const CHANGES_HELD_BYTES_MAX: usize = 1 << 20;

/// What one held change costs: its slot, its key's shared allocation, and its share of the
/// set's bookkeeping.
fn held_bytes(change: &Change) -> usize {
    const SHARED_STR_HEADER_BYTES: usize = 16;
    let key = match &change.key {
        ChangeKey::Key(key) | ChangeKey::Prefix(key) => SHARED_STR_HEADER_BYTES + key.len(),
        ChangeKey::All => 0,
    };
    std::mem::size_of::<Change>() + key + std::mem::size_of::<(u64, Vec<Change>)>()
}
/// The tables DNS resolution reads, and so the only ones the feed carries.
pub const FEED_TABLES: [Table; 4] = [
    Table::Nodes,
    Table::Services,
    Table::ServiceIndex,
    Table::GatewayServices,
];

/// One `CatalogView` call. Names are kept lowercased: the view matches them
/// case-insensitively, so a lowercased name is the cache key.
///
/// The first four read this datacenter's catalog, and are what travels to a server in a
/// lookup request. The last two are answered elsewhere and never cached (no change feed
/// tells when they go stale): [`Lookup::InDatacenter`] by another datacenter's servers
/// (the same lookup request, forwarded there with `?dc=`), [`Lookup::PreparedQuery`] by a
/// prepared query's execution (`/v1/query/<name>/execute`, which may fail over).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Lookup {
    ServiceInstances(String),
    Node(String),
    NodeByAddress(IpAddr),
    ServiceByAddress(IpAddr),
    /// A local-form lookup answered by the servers of another datacenter (lowercased).
    InDatacenter(String, Box<Lookup>),
    /// A prepared query's results, executed in `datacenter` (this one when `None`).
    PreparedQuery {
        name: String,
        datacenter: Option<String>,
    },
    /// The Connect-capable instances of a service (`<service>.connect`).
    ConnectInstances(String),
    /// The instances of the ingress gateways exposing a service (`<service>.ingress`).
    IngressInstances(String),
}

/// The answer to one [`Lookup`], of the same variant ([`Lookup::InDatacenter`] is answered
/// as its inner lookup is).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LookupResult {
    Instances(Vec<ServiceInstance>),
    Node(Option<Arc<NodeRecord>>),
    ServiceName(Option<ArcStr>),
    Query(QueryAnswer),
}

/// A prepared query's execution as DNS serves it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryAnswer {
    /// Whether the query exists (else NXDOMAIN).
    pub found: bool,
    /// The service the query looked for (its TTL is the default of the answer's).
    pub service: String,
    pub instances: Vec<ServiceInstance>,
    /// `DNS.TTL` of the query, in seconds, when it sets one.
    pub ttl_seconds: Option<u32>,
}

impl Lookup {
    pub fn service_instances(name: &str) -> Lookup {
        Lookup::ServiceInstances(name.to_ascii_lowercase())
    }
    pub fn connect_instances(name: &str) -> Lookup {
        Lookup::ConnectInstances(name.to_ascii_lowercase())
    }
    pub fn ingress_instances(name: &str) -> Lookup {
        Lookup::IngressInstances(name.to_ascii_lowercase())
    }
    pub fn node(name: &str) -> Lookup {
        Lookup::Node(name.to_ascii_lowercase())
    }
    /// `lookup` (a local form) answered by the servers of `datacenter`.
    pub fn in_datacenter(datacenter: &str, lookup: Lookup) -> Lookup {
        debug_assert!(lookup.is_local(), "one hop to one datacenter");
        Lookup::InDatacenter(datacenter.to_ascii_lowercase(), Box::new(lookup))
    }
    pub fn prepared_query(name: &str, datacenter: Option<&str>) -> Lookup {
        Lookup::PreparedQuery {
            name: name.to_ascii_lowercase(),
            datacenter: datacenter.map(str::to_ascii_lowercase),
        }
    }

    /// Whether this lookup reads this datacenter's catalog (and may be cached).
    pub fn is_local(&self) -> bool {
        !matches!(
            self,
            Lookup::InDatacenter(..) | Lookup::PreparedQuery { .. }
        )
    }

    /// Records what the store's view records for this call. Lookups answered elsewhere
    /// read nothing here: the answers that use them are never cached.
    pub fn record_reads(&self, reads: &mut ReadSet) {
        match self {
            Lookup::ServiceInstances(name) => reads.add_key(Table::ServiceIndex, name),
            Lookup::Node(name) => reads.add_key(Table::Nodes, name),
            Lookup::NodeByAddress(_) => reads.add_table(Table::Nodes),
            Lookup::ServiceByAddress(_) => reads.add_table(Table::Services),
            Lookup::InDatacenter(..) | Lookup::PreparedQuery { .. } => {}
            // Proxies of any name front the service: any service's change may matter.
            Lookup::ConnectInstances(_) => {
                reads.add_table(Table::Services);
                reads.add_table(Table::ServiceIndex);
            }
            // The rows linking the service, and gateways of any name.
            Lookup::IngressInstances(name) => {
                reads.add_key(
                    Table::GatewayServices,
                    &crate::store::gateways::service_key(name),
                );
                reads.add_table(Table::ServiceIndex);
            }
        }
    }

    /// Runs this call against a view (local forms; the others are answered by fetching).
    pub fn run(&self, view: &dyn CatalogView, reads: &mut ReadSet) -> LookupResult {
        match self {
            Lookup::ServiceInstances(name) => {
                LookupResult::Instances(view.service_instances(name, reads))
            }
            Lookup::Node(name) => LookupResult::Node(view.node(name, reads)),
            Lookup::NodeByAddress(ip) => LookupResult::Node(view.node_by_address(*ip, reads)),
            Lookup::ServiceByAddress(ip) => {
                LookupResult::ServiceName(view.service_by_address(*ip, reads))
            }
            Lookup::ConnectInstances(name) => {
                LookupResult::Instances(view.connect_instances(name, reads))
            }
            Lookup::IngressInstances(name) => {
                LookupResult::Instances(view.ingress_instances(name, reads))
            }
            Lookup::InDatacenter(_, inner) => inner.not_found(),
            Lookup::PreparedQuery { .. } => LookupResult::Query(QueryAnswer::default()),
        }
    }

    /// The empty answer of this lookup's variant: what a datacenter nobody can reach
    /// answers (NXDOMAIN, as Consul answers "No path to datacenter").
    pub fn not_found(&self) -> LookupResult {
        match self {
            Lookup::ServiceInstances(_)
            | Lookup::ConnectInstances(_)
            | Lookup::IngressInstances(_) => LookupResult::Instances(Vec::new()),
            Lookup::Node(_) | Lookup::NodeByAddress(_) => LookupResult::Node(None),
            Lookup::ServiceByAddress(_) => LookupResult::ServiceName(None),
            Lookup::InDatacenter(_, inner) => inner.not_found(),
            Lookup::PreparedQuery { .. } => LookupResult::Query(QueryAnswer::default()),
        }
    }

    /// Whether `result` is the variant this lookup answers with.
    pub fn answered_by(&self, result: &LookupResult) -> bool {
        match (self, result) {
            (Lookup::InDatacenter(_, inner), result) => inner.answered_by(result),
            (
                Lookup::ServiceInstances(_)
                | Lookup::ConnectInstances(_)
                | Lookup::IngressInstances(_),
                LookupResult::Instances(_),
            )
            | (Lookup::Node(_) | Lookup::NodeByAddress(_), LookupResult::Node(_))
            | (Lookup::ServiceByAddress(_), LookupResult::ServiceName(_))
            | (Lookup::PreparedQuery { .. }, LookupResult::Query(_)) => true,
            _ => false,
        }
    }
}

/// A server's answer to a lookup request: one result per lookup, in order, all read from
/// the store version at `index`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LookupReply {
    pub index: u64,
    pub results: Vec<LookupResult>,
}

pub fn encode_lookups(lookups: &[Lookup]) -> Vec<u8> {
    assert!(
        !lookups.is_empty() && lookups.len() <= LOOKUPS_PER_REQUEST_MAX,
        "a lookup request carries 1..={LOOKUPS_PER_REQUEST_MAX} lookups"
    );
    rmp_serde::to_vec(lookups).expect("encoding into a Vec cannot fail")
}

pub fn decode_lookups(bytes: &[u8]) -> Result<Vec<Lookup>, String> {
    let lookups: Vec<Lookup> =
        rmp_serde::from_slice(bytes).map_err(|e| format!("corrupt DNS lookup request: {e}"))?;
    if lookups.is_empty() || lookups.len() > LOOKUPS_PER_REQUEST_MAX {
        return Err(format!(
            "a DNS lookup request carries 1 to {LOOKUPS_PER_REQUEST_MAX} lookups, not {}",
            lookups.len()
        ));
    }
    if !lookups.iter().all(Lookup::is_local) {
        return Err("a DNS lookup request carries this datacenter's lookups only".to_string());
    }
    Ok(lookups)
}

/// The server side of [`LOOKUP_METHOD`]: every lookup against `view` (the version at `index`).
pub fn answer_lookups(view: &dyn CatalogView, index: u64, lookups: &[Lookup]) -> Vec<u8> {
    let mut reads = ReadSet::new();
    let reply = LookupReply {
        index,
        results: lookups.iter().map(|l| l.run(view, &mut reads)).collect(),
    };
    rmp_serde::to_vec(&reply).expect("encoding into a Vec cannot fail")
}

/// Decodes a server's lookup reply and checks it answers `lookups`, one for one.
pub fn decode_lookup_reply(bytes: &[u8], lookups: &[Lookup]) -> Result<LookupReply, String> {
    let reply: LookupReply =
        rmp_serde::from_slice(bytes).map_err(|e| format!("corrupt DNS lookup reply: {e}"))?;
    let matches = reply.results.len() == lookups.len()
        && lookups
            .iter()
            .zip(&reply.results)
            .all(|(lookup, result)| lookup.answered_by(result));
    if !matches {
        return Err("DNS lookup reply does not match the request".to_string());
    }
    Ok(reply)
}

/// Consul's words when no server of a datacenter can be reached: its names are NXDOMAIN.
const NO_PATH_TO_DATACENTER: &str = "No path to datacenter";
/// The call that executes a prepared query for DNS, as Consul's DNS server makes it.
pub const QUERY_METHOD: &str = "PreparedQuery.Execute";

/// Where a [`Fetch`] gets its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchTarget {
    /// Catalog rows: this datacenter's (`None`, a client agent's lookups) or another's.
    Rows { datacenter: Option<String> },
    /// One prepared query's execution.
    Query {
        name: String,
        datacenter: Option<String>,
    },
}

/// One HTTP request for rows a resolution lacked, and the lookups its answer serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetch {
    pub target: FetchTarget,
    /// The lookups as the resolution named them.
    pub lookups: Vec<Lookup>,
}

/// How fetches ask.
#[derive(Clone, Copy, Debug)]
pub struct FetchOptions<'a> {
    /// `dns_config.allow_stale`: any server may answer, within `max_stale`.
    pub stale_within: Option<std::time::Duration>,
    /// This agent's node, for a query's `_agent`.
    pub agent_node: &'a str,
    /// The token the servers filter rows with (empty: the anonymous token).
    pub token: &'a str,
}

/// The body of a [`LOOKUP_METHOD`] call, shaped as Consul's requests are (a msgpack map
/// keyed by Go-style field names in sorted order, `QueryOptions`' fields flattened in) so
/// that a server routes it as it routes Consul's calls: `Datacenter` naming another
/// datacenter hands it there, `AllowStale` lets any server answer. `Lookups` carries the
/// encoded lookups ([`encode_lookups`]), which only praetor reads.
///
/// Praetor's own method rather than Consul's `Health.ServiceNodes`, `Catalog.NodeServices`
/// and kin: a client agent caches rows and keeps them exact with the change feed, which
/// needs every row of a resolution read from one store version whose raft index it knows
/// (a row read before the feed's position is used once and never cached). Consul's calls
/// answer from a version each, with a table's index as `QueryMeta.Index`.
pub struct LookupCall<'a> {
    pub datacenter: &'a str,
    pub lookups: &'a [Lookup],
    pub stale_within: Option<std::time::Duration>,
    pub token: &'a str,
}

/// Nanoseconds as Go's `time.Duration`, saturating.
fn duration_ns(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

impl LookupCall<'_> {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = crate::proto::msgpack::Writer::new();
        w.map_len(5);
        w.str("AllowStale");
        w.bool(self.stale_within.is_some());
        w.str("Datacenter");
        w.str(self.datacenter);
        w.str("Lookups");
        w.bytes(&encode_lookups(self.lookups));
        w.str("MaxStaleDuration");
        w.int(self.stale_within.map_or(0, duration_ns));
        w.str("Token");
        w.str(self.token);
        w.into_inner()
    }
}

/// The body of a [`CHANGES_METHOD`] call: the changes after `after`, waiting up to `wait`
/// for one (`MinQueryIndex`, `MaxQueryTime`), from any server (`AllowStale`).
pub fn changes_call_body(after: u64, wait: std::time::Duration, token: &str) -> Vec<u8> {
    let mut w = crate::proto::msgpack::Writer::new();
    w.map_len(4);
    w.str("AllowStale");
    w.bool(true);
    w.str("MaxQueryTime");
    w.int(duration_ns(wait));
    w.str("MinQueryIndex");
    w.uint(after);
    w.str("Token");
    w.str(token);
    w.into_inner()
}

/// The field a lookup or change-feed reply carries its payload in (next to `QueryMeta`'s).
pub const LOOKUP_REPLY_FIELD: &str = "Results";
/// See [`LOOKUP_REPLY_FIELD`].
pub const CHANGES_REPLY_FIELD: &str = "Changes";

/// The payload of a [`LOOKUP_METHOD`] or [`CHANGES_METHOD`] reply: the bytes of its
/// `field`, `QueryMeta`'s fields skipped.
pub fn reply_payload<'b>(body: &'b [u8], field: &str) -> Result<&'b [u8], String> {
    let corrupt = |e: crate::proto::msgpack::WireError| format!("corrupt DNS reply: {e}");
    let mut r = crate::proto::msgpack::Reader::new(body);
    let mut payload = None;
    for _ in 0..r.map_len().map_err(corrupt)? {
        if r.str().map_err(corrupt)? == field {
            payload = Some(r.bytes().map_err(corrupt)?);
        } else {
            r.skip().map_err(corrupt)?;
        }
    }
    payload.ok_or_else(|| format!("DNS reply without {field}"))
}

/// Groups the lookups a resolution lacked into requests: one per datacenter for rows, one
/// per prepared query.
pub fn plan_fetches(lookups: &[Lookup]) -> Vec<Fetch> {
    let mut fetches: Vec<Fetch> = Vec::new();
    for lookup in lookups {
        let target = match lookup {
            Lookup::InDatacenter(dc, _) => FetchTarget::Rows {
                datacenter: Some(dc.clone()),
            },
            Lookup::PreparedQuery { name, datacenter } => FetchTarget::Query {
                name: name.clone(),
                datacenter: datacenter.clone(),
            },
            _ => FetchTarget::Rows { datacenter: None },
        };
        let joins = matches!(target, FetchTarget::Rows { .. });
        match fetches
            .iter_mut()
            .find(|f| joins && f.target == target && f.lookups.len() < LOOKUPS_PER_REQUEST_MAX)
        {
            Some(fetch) => {
                if !fetch.lookups.contains(lookup) {
                    fetch.lookups.push(lookup.clone())
                }
            }
            None => fetches.push(Fetch {
                target,
                lookups: vec![lookup.clone()],
            }),
        }
    }
    debug_assert!(fetches.iter().all(|f| !f.lookups.is_empty()));
    fetches
}

impl Fetch {
    /// The local forms sent for rows (another datacenter's lookups unwrapped).
    fn sent_lookups(&self) -> Vec<Lookup> {
        self.lookups
            .iter()
            .map(|lookup| match lookup {
                Lookup::InDatacenter(_, inner) => (**inner).clone(),
                other => other.clone(),
            })
            .collect()
    }

    /// The `PreparedQuery.Execute` call that runs a prepared query (a
    /// [`FetchTarget::Query`] fetch), as Consul's DNS asks its servers: this agent as
    /// `Agent` (what `_agent` names), the datacenter the name gave, DNS's staleness.
    pub fn query_call(&self, options: &FetchOptions) -> Vec<u8> {
        let FetchTarget::Query { name, datacenter } = &self.target else {
            unreachable!("rows are fetched with the lookup call");
        };
        ExecuteRequest {
            datacenter: datacenter.as_deref().unwrap_or(""),
            query_id_or_name: name,
            agent: QuerySource {
                node: options.agent_node,
                ..QuerySource::default()
            },
            options: crate::consul::rpc::QueryOptions {
                token: options.token,
                allow_stale: options.stale_within.is_some(),
                max_stale_duration_ns: options
                    .stale_within
                    .map_or(0, |d| d.as_nanos().min(i64::MAX as u128) as i64),
                ..Default::default()
            },
            ..ExecuteRequest::default()
        }
        .encode()
    }

    /// The [`LOOKUP_METHOD`] call that fetches rows (a [`FetchTarget::Rows`] fetch): the
    /// local forms of its lookups, naming their datacenter.
    pub fn lookup_call(&self, options: &FetchOptions) -> Vec<u8> {
        let FetchTarget::Rows { datacenter } = &self.target else {
            unreachable!("a prepared query is fetched with its own call");
        };
        LookupCall {
            datacenter: datacenter.as_deref().unwrap_or(""),
            lookups: &self.sent_lookups(),
            stale_within: options.stale_within,
            token: options.token,
        }
        .encode()
    }

    /// Each lookup's result from the answer to [`Fetch::lookup_call`]: the reply's body, or
    /// the server's error. A datacenter with no reachable server answers empty (NXDOMAIN);
    /// any other failure is an error (SERVFAIL).
    pub fn call_results(
        &self,
        answer: Result<&[u8], &str>,
    ) -> Result<Vec<(Lookup, LookupResult)>, String> {
        let body = match answer {
            Ok(body) => body,
            Err(error) if error.trim() == NO_PATH_TO_DATACENTER => {
                return Ok(self
                    .lookups
                    .iter()
                    .map(|l| (l.clone(), l.not_found()))
                    .collect());
            }
            Err(error) => return Err(error.to_string()),
        };
        let payload = reply_payload(body, LOOKUP_REPLY_FIELD)?;
        let reply = decode_lookup_reply(payload, &self.sent_lookups())?;
        Ok(self.lookups.iter().cloned().zip(reply.results).collect())
    }

    /// The query's result from the answer to [`Fetch::query_call`]. A datacenter with no
    /// reachable server, or a query that does not exist, answers empty (NXDOMAIN); any other
    /// failure is an error (SERVFAIL).
    pub fn query_results(
        &self,
        answer: Result<&[u8], &str>,
    ) -> Result<Vec<(Lookup, LookupResult)>, String> {
        debug_assert!(matches!(self.target, FetchTarget::Query { .. }));
        let answer = match answer {
            Ok(body) => query_answer(body)?,
            Err(error)
                if error.trim() == NO_PATH_TO_DATACENTER
                    || error.trim() == crate::store::query::QUERY_NOT_FOUND =>
            {
                QueryAnswer::default()
            }
            Err(error) => return Err(error.to_string()),
        };
        debug_assert_eq!(self.lookups.len(), 1, "one query per fetch");
        Ok(self
            .lookups
            .iter()
            .map(|l| (l.clone(), LookupResult::Query(answer.clone())))
            .collect())
    }
}

/// What the change feed answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FeedReply {
    /// Every DNS-table change after the reader's index up to `index`.
    Changes { index: u64, changes: Vec<Change> },
    /// The server cannot list the changes since the reader's index: drop everything cached
    /// and continue from `index`.
    Reset { index: u64 },
}

/// A change on the wire: the table's number, the key's kind (0 key, 1 prefix, 2 all) and
/// the key text.
#[derive(Serialize, Deserialize)]
struct WireChange(u8, u8, String);

#[derive(Serialize, Deserialize)]
struct WireFeed {
    reset: bool,
    index: u64,
    changes: Vec<WireChange>,
}

impl FeedReply {
    pub fn index(&self) -> u64 {
        match self {
            FeedReply::Changes { index, .. } | FeedReply::Reset { index } => *index,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let wire = match self {
            FeedReply::Reset { index } => WireFeed {
                reset: true,
                index: *index,
                changes: Vec::new(),
            },
            FeedReply::Changes { index, changes } => WireFeed {
                reset: false,
                index: *index,
                changes: changes
                    .iter()
                    .map(|change| {
                        let (kind, key) = match &change.key {
                            ChangeKey::Key(key) => (0, key.to_string()),
                            ChangeKey::Prefix(prefix) => (1, prefix.to_string()),
                            ChangeKey::All => (2, String::new()),
                        };
                        WireChange(change.table as u8, kind, key)
                    })
                    .collect(),
            },
        };
        rmp_serde::to_vec(&wire).expect("encoding into a Vec cannot fail")
    }

    pub fn decode(bytes: &[u8]) -> Result<FeedReply, String> {
        let wire: WireFeed =
            rmp_serde::from_slice(bytes).map_err(|e| format!("corrupt DNS change feed: {e}"))?;
        if wire.reset {
            return Ok(FeedReply::Reset { index: wire.index });
        }
        let mut changes = Vec::with_capacity(wire.changes.len().min(CHANGES_HELD_MAX));
        for WireChange(table, kind, key) in wire.changes {
            let table = Table::ALL
                .into_iter()
                .find(|t| *t as u8 == table)
                .ok_or_else(|| format!("DNS change feed names unknown table {table}"))?;
            let key = match kind {
                0 => ChangeKey::Key(Arc::from(key)),
                1 => ChangeKey::Prefix(Arc::from(key)),
                2 => ChangeKey::All,
                other => return Err(format!("DNS change feed has unknown key kind {other}")),
            };
            changes.push(Change { table, key });
        }
        Ok(FeedReply::Changes {
            index: wire.index,
            changes,
        })
    }
}

/// One server shard's recent DNS-table changes, for the feed.
#[derive(Debug)]
pub struct RecentChanges {
    /// Every DNS-table change after this index is held.
    base_index: u64,
    sets: VecDeque<(u64, Vec<Change>)>,
    changes_held: usize,
    /// [`held_bytes`] summed over the held changes.
    bytes_held: usize,
}

impl RecentChanges {
    /// An empty ring for a shard whose version is at `index`.
    pub fn new(index: u64) -> RecentChanges {
        RecentChanges {
            base_index: index,
            sets: VecDeque::new(),
            changes_held: 0,
            bytes_held: 0,
        }
    }

    pub fn base_index(&self) -> u64 {
        self.base_index
    }

    /// The index of the newest held change set, or the base.
    pub fn newest_index(&self) -> u64 {
        self.sets
            .back()
            .map_or(self.base_index, |(index, _)| *index)
    }

    /// Takes in the change set of the version at `index`, keeping its DNS-table changes.
    pub fn record(&mut self, index: u64, changes: &[Change]) {
        let fed = |c: &&Change| FEED_TABLES.contains(&c.table);
        // Counted first, so the kept list is one allocation of its size (collecting a
        // filter grows it from 4 and reallocates), on every shard for every change set.
        let kept_count = changes.iter().filter(fed).count();
        if kept_count == 0 {
            return;
        }
        let mut kept = Vec::with_capacity(kept_count);
        kept.extend(changes.iter().filter(fed).cloned());
        assert!(
            index >= self.newest_index(),
            "change sets arrive in index order: {index} after {}",
            self.newest_index()
        );
        self.changes_held += kept.len();
        self.bytes_held += kept.iter().map(held_bytes).sum::<usize>();
        match self.sets.back_mut() {
            // Two batches of one index (never expected): one set, so no reader can hold
            // the index while missing half of its changes.
            Some((newest, held)) if *newest == index => held.extend(kept),
            _ => {
                if index == self.base_index {
                    self.base_index = index.saturating_sub(1);
                }
                self.sets.push_back((index, kept));
            }
        }
        while self.sets.len() > CHANGE_SETS_HELD_MAX
            || (self.changes_held > CHANGES_HELD_MAX && self.sets.len() > 1)
            || (self.bytes_held > CHANGES_HELD_BYTES_MAX && self.sets.len() > 1)
        {
            let (dropped_index, dropped) = self.sets.pop_front().expect("over a bound, not empty");
            self.changes_held -= dropped.len();
            self.bytes_held -= dropped.iter().map(held_bytes).sum::<usize>();
            self.base_index = dropped_index;
        }
        assert!(self.sets.len() <= CHANGE_SETS_HELD_MAX);
    }

    /// Whether a reader at `after` must be reset, the server's version being at `current`:
    /// it is behind what the ring holds, or ahead of this server (a restarted cluster, or a
    /// server that lags the one the reader followed before; either way its cache cannot be
    /// trusted against this server's changes).
    fn must_reset(&self, after: u64, current: u64) -> bool {
        after < self.base_index || after > current
    }

    /// The index a blocking reader at `after` waits to move past: the newest held change
    /// set, or past `after` at once when the reader must be reset.
    pub fn wake_index(&self, after: u64, current: u64) -> u64 {
        if self.must_reset(after, current) {
            after.saturating_add(1)
        } else {
            self.newest_index()
        }
    }

    /// The feed's answer to a reader at `after`, the server's version being at `current`.
    pub fn since(&self, after: u64, current: u64) -> FeedReply {
        if self.must_reset(after, current) {
            return FeedReply::Reset { index: current };
        }
        let changes = self
            .sets
            .iter()
            .filter(|(index, _)| *index > after)
            .flat_map(|(_, changes)| changes.iter().cloned())
            .collect();
        FeedReply::Changes {
            index: current,
            changes,
        }
    }
}

/// A `PreparedQueryExecuteResponse` as DNS needs it: the service, its instances (each
/// with its worst check's health) and the query's TTL.
pub fn query_answer(body: &[u8]) -> Result<QueryAnswer, String> {
    let reply = read_execute_response(body).map_err(|e| format!("corrupt query execution: {e}"))?;
    let ttl_seconds = match reply.dns_ttl.as_str() {
        "" => None,
        text => Some(
            crate::proto::duration::parse_go_duration(text)
                .map_err(|e| format!("bad DNS TTL {text:?}: {e}"))?
                .as_secs()
                .min(u32::MAX as u64) as u32,
        ),
    };
    Ok(QueryAnswer {
        found: true,
        instances: super::store_view::query_instances(&reply.nodes),
        service: reply.service,
        ttl_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::catalog::{CatalogOp, Registration, ServiceRegistration};
    use crate::store::{Command, Tables};

    fn registered(tables: &mut Tables, index: u64, node: &str, service: &str) -> Vec<Change> {
        let mut changes = Vec::new();
        let registration = Registration {
            node: node.into(),
            address: "10.0.0.1".into(),
            service: Some(ServiceRegistration {
                name: service.into(),
                port: 80,
                ..Default::default()
            }),
            ..Default::default()
        };
        tables.apply(
            index,
            &Command::Catalog(CatalogOp::Register(Box::new(registration))),
            &mut changes,
        );
        changes
    }

    #[test]
    fn a_lookup_records_what_the_store_view_records_and_only_feed_tables() {
        let mut tables = Tables::default();
        registered(&mut tables, 1, "Node-1", "Web");
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        for lookup in [
            Lookup::service_instances("WEB"),
            Lookup::node("NODE-1"),
            Lookup::NodeByAddress(ip),
            Lookup::ServiceByAddress(ip),
        ] {
            let mut by_store = ReadSet::new();
            lookup.run(&tables, &mut by_store);
            let mut by_lookup = ReadSet::new();
            lookup.record_reads(&mut by_lookup);
            assert_eq!(by_store, by_lookup, "{lookup:?}");
            assert!(by_lookup
                .as_slice()
                .iter()
                .all(|d| FEED_TABLES.contains(&d.table())));
        }
    }

    #[test]
    fn lookups_and_replies_round_trip_and_mismatches_are_refused() {
        let mut tables = Tables::default();
        registered(&mut tables, 7, "n1", "web");
        let lookups = vec![Lookup::service_instances("web"), Lookup::node("n1")];
        let decoded = decode_lookups(&encode_lookups(&lookups)).unwrap();
        assert_eq!(decoded, lookups);
        let bytes = answer_lookups(&tables, 7, &decoded);
        let reply = decode_lookup_reply(&bytes, &lookups).unwrap();
        assert_eq!(reply.index, 7);
        match &reply.results[0] {
            LookupResult::Instances(instances) => {
                assert_eq!(instances.len(), 1);
                assert_eq!(&*instances[0].service_name, "web");
            }
            other => panic!("expected instances, got {other:?}"),
        }
        assert!(matches!(&reply.results[1], LookupResult::Node(Some(n)) if &*n.name == "n1"));
        // A reply for other lookups, an empty request and garbage are refused.
        assert!(decode_lookup_reply(&bytes, &lookups[..1]).is_err());
        assert!(decode_lookup_reply(&bytes, &[Lookup::node("n1"), Lookup::node("n1")]).is_err());
        assert!(decode_lookups(&rmp_serde::to_vec(&Vec::<Lookup>::new()).unwrap()).is_err());
        let too_many = vec![Lookup::node("n"); LOOKUPS_PER_REQUEST_MAX + 1];
        assert!(decode_lookups(&rmp_serde::to_vec(&too_many).unwrap()).is_err());
        assert!(decode_lookups(b"\xc1garbage").is_err());
    }

    #[test]
    fn the_ring_lists_dns_changes_after_an_index_and_resets_readers_it_cannot_serve() {
        let mut tables = Tables::default();
        let mut ring = RecentChanges::new(0);
        let web = registered(&mut tables, 1, "n1", "web");
        ring.record(1, &web);
        // A KV write is not a DNS change: nothing held, the newest index stays.
        ring.record(
            2,
            &[Change {
                table: Table::Kvs,
                key: ChangeKey::Key(Arc::from("k")),
            }],
        );
        assert_eq!(ring.newest_index(), 1);
        let db = registered(&mut tables, 3, "n2", "db");
        ring.record(3, &db);
        let FeedReply::Changes { index, changes } = ring.since(1, 3) else {
            panic!("a reader inside the ring gets changes");
        };
        assert_eq!(index, 3);
        assert!(!changes.is_empty());
        assert!(changes.iter().all(|c| FEED_TABLES.contains(&c.table)));
        assert!(changes.iter().all(|c| db.contains(c)));
        assert!(changes.iter().all(|c| !web.contains(c) || db.contains(c)));
        // Blocking: a reader at the newest index waits; one behind it does not.
        assert_eq!(ring.wake_index(3, 3), 3);
        assert_eq!(ring.wake_index(1, 3), 3);
        // A reader ahead of this server is reset, and woken at once.
        assert_eq!(ring.since(9, 3), FeedReply::Reset { index: 3 });
        assert_eq!(ring.wake_index(9, 3), 10);
        // The round trip keeps every change.
        let reply = ring.since(0, 3);
        assert_eq!(FeedReply::decode(&reply.encode()).unwrap(), reply);
        assert_eq!(
            FeedReply::decode(&FeedReply::Reset { index: 4 }.encode()).unwrap(),
            FeedReply::Reset { index: 4 }
        );
    }

    /// The lookups of one answer, some local, some in dc2 and dc3, one a prepared query,
    /// and the fetches they plan: local rows, dc2's rows, the query, dc3's rows.
    struct Planned {
        here: Lookup,
        dc2_web: Lookup,
        dc2_node: Lookup,
        dc3_web: Lookup,
        query: Lookup,
        fetches: Vec<Fetch>,
    }

    fn planned() -> Planned {
        let here = Lookup::service_instances("web");
        let dc2_web = Lookup::in_datacenter("DC2", Lookup::service_instances("web"));
        let dc2_node = Lookup::in_datacenter("dc2", Lookup::node("n1"));
        let dc3_web = Lookup::in_datacenter("dc3", Lookup::service_instances("web"));
        let query = Lookup::prepared_query("Geo-Web", None);
        let fetches = plan_fetches(&[
            here.clone(),
            dc2_web.clone(),
            query.clone(),
            dc2_node.clone(),
            dc3_web.clone(),
            dc2_web.clone(),
        ]);
        Planned {
            here,
            dc2_web,
            dc2_node,
            dc3_web,
            query,
            fetches,
        }
    }

    fn options() -> FetchOptions<'static> {
        FetchOptions {
            stale_within: Some(std::time::Duration::from_secs(5)),
            agent_node: "agent-1",
            token: "secret",
        }
    }

    /// The fields of an encoded call, each as its encoded value.
    fn call_fields(call: &[u8]) -> std::collections::BTreeMap<String, Vec<u8>> {
        let mut fields = std::collections::BTreeMap::new();
        let mut r = crate::proto::msgpack::Reader::new(call);
        for _ in 0..r.map_len().unwrap() {
            let name = r.str().unwrap().to_string();
            let start = r.position();
            r.skip().unwrap();
            fields.insert(name, call[start..r.position()].to_vec());
        }
        fields
    }

    #[test]
    fn lookups_answered_elsewhere_group_by_where_they_are_answered() {
        let p = planned();
        let targets: Vec<&FetchTarget> = p.fetches.iter().map(|f| &f.target).collect();
        assert_eq!(
            targets,
            [
                &FetchTarget::Rows { datacenter: None },
                &FetchTarget::Rows {
                    datacenter: Some("dc2".into())
                },
                &FetchTarget::Query {
                    name: "geo-web".into(),
                    datacenter: None
                },
                &FetchTarget::Rows {
                    datacenter: Some("dc3".into())
                },
            ]
        );
        assert_eq!(
            p.fetches[1].lookups,
            [p.dc2_web.clone(), p.dc2_node.clone()]
        );
        assert!(!p.dc2_web.is_local() && !p.query.is_local() && p.here.is_local());
        // Lookups answered elsewhere never travel in a lookup request.
        assert!(decode_lookups(&rmp_serde::to_vec(&vec![p.dc2_web]).unwrap()).is_err());
    }

    #[test]
    fn rows_elsewhere_go_as_a_typed_call_naming_the_datacenter_with_the_options() {
        let p = planned();
        let call = p.fetches[1].lookup_call(&options());
        let fields = call_fields(&call);
        let names: Vec<&str> = fields.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "AllowStale",
                "Datacenter",
                "Lookups",
                "MaxStaleDuration",
                "Token"
            ]
        );
        let text = |bytes: &[u8]| {
            crate::proto::msgpack::Reader::new(bytes)
                .str()
                .unwrap()
                .to_string()
        };
        assert_eq!(text(&fields["Datacenter"]), "dc2");
        assert_eq!(text(&fields["Token"]), "secret");
        assert_eq!(
            crate::proto::msgpack::Reader::new(&fields["MaxStaleDuration"])
                .i64("MaxStaleDuration")
                .unwrap(),
            5_000_000_000
        );
        let call = p.fetches[2].query_call(&options());
        let request = ExecuteRequest::decode(&call).unwrap();
        assert_eq!(request.query_id_or_name, "geo-web");
        assert_eq!(request.datacenter, "");
        assert_eq!(request.agent.node, "agent-1", "what _agent names");
        assert_eq!(request.options.token, "secret");
        assert!(request.options.allow_stale);
        assert_eq!(request.options.max_stale_duration_ns, 5_000_000_000);
    }

    #[test]
    fn answers_from_elsewhere_come_back_under_the_names_the_resolution_used() {
        let p = planned();
        let fields = call_fields(&p.fetches[1].lookup_call(&options()));
        // dc2 answers its lookups as a server answers a client's.
        let mut tables = Tables::default();
        registered(&mut tables, 4, "n1", "web");
        let sent = decode_lookups(
            crate::proto::msgpack::Reader::new(&fields["Lookups"])
                .bytes()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(sent, [Lookup::service_instances("web"), Lookup::node("n1")]);
        let answer = answer_lookups(&tables, 4, &sent);
        let mut reply = crate::proto::msgpack::Writer::new();
        reply.map_len(2);
        reply.str("Index");
        reply.uint(4);
        reply.str(LOOKUP_REPLY_FIELD);
        reply.bytes(&answer);
        let reply = reply.into_inner();
        let rows = p.fetches[1].call_results(Ok(&reply)).unwrap();
        assert_eq!(rows[0].0, p.dc2_web);
        assert!(matches!(&rows[0].1, LookupResult::Instances(i) if i.len() == 1));
        assert!(matches!(&rows[1].1, LookupResult::Node(Some(_))));
        assert!(p.fetches[1].call_results(Ok(b"\x80")).is_err());
        // No path to dc3: empty answers (NXDOMAIN); any other failure is an error.
        let rows = p.fetches[3]
            .call_results(Err("No path to datacenter"))
            .unwrap();
        assert_eq!(
            rows,
            [(p.dc3_web.clone(), LookupResult::Instances(Vec::new()))]
        );
        assert!(p.fetches[3].call_results(Err("No cluster leader")).is_err());
    }

    #[test]
    fn a_prepared_query_answer_carries_its_rows_and_ttl_or_is_not_found() {
        use crate::consul::rpc::prepared_query::{write_execute_response, Execution};
        let p = planned();
        for missing in ["Query not found", "No path to datacenter"] {
            let rows = p.fetches[2].query_results(Err(missing)).unwrap();
            assert_eq!(
                rows,
                [(p.query.clone(), LookupResult::Query(QueryAnswer::default()))]
            );
        }
        assert!(p.fetches[2]
            .query_results(Err("No cluster leader"))
            .is_err());
        // dc2's server answers the execution with its rows.
        let mut tables = Tables::default();
        registered(&mut tables, 4, "n9", "web");
        let rows = crate::store::catalog::read::check_service_nodes(&tables, "web");
        let execution = Execution {
            service: "web",
            dns_ttl: "15s",
            datacenter: "dc2",
            failovers: 1,
        };
        let body =
            write_execute_response(&crate::consul::rpc::QueryMeta::default(), &execution, &rows);
        let rows = p.fetches[2].query_results(Ok(&body)).unwrap();
        let LookupResult::Query(answer) = &rows[0].1 else {
            panic!("a query answer");
        };
        assert!(answer.found);
        assert_eq!(answer.service, "web");
        assert_eq!(answer.ttl_seconds, Some(15));
        assert_eq!(answer.instances.len(), 1);
        let instance = &answer.instances[0];
        assert_eq!(&*instance.node.name, "n9");
        assert_eq!((instance.port, instance.weight_passing), (80, 1));
        assert_eq!(instance.health, crate::dns::view::Health::Passing);
        assert!(p.fetches[2].query_results(Ok(b"\x91")).is_err());
    }

    #[test]
    fn the_ring_stays_within_its_bounds_and_moves_its_base() {
        let mut ring = RecentChanges::new(10);
        for index in 11..11 + CHANGE_SETS_HELD_MAX as u64 + 5 {
            ring.record(
                index,
                &[Change {
                    table: Table::Nodes,
                    key: ChangeKey::Key(Arc::from("n")),
                }],
            );
        }
        assert_eq!(ring.sets.len(), CHANGE_SETS_HELD_MAX);
        assert_eq!(ring.base_index(), 15);
        let newest = ring.newest_index();
        assert_eq!(ring.since(14, newest), FeedReply::Reset { index: newest });
        assert!(matches!(ring.since(15, newest), FeedReply::Changes { .. }));
        // One huge set is kept whole; the sets before it go.
        let huge: Vec<Change> = (0..CHANGES_HELD_MAX + 1)
            .map(|i| Change {
                table: Table::Services,
                key: ChangeKey::Key(Arc::from(i.to_string())),
            })
            .collect();
        ring.record(newest + 1, &huge);
        assert_eq!(ring.sets.len(), 1);
        assert_eq!(ring.base_index(), newest);
    }

    #[test]
    fn the_ring_keeps_at_most_its_bytes() {
        let mut ring = RecentChanges::new(0);
        let key = "n".repeat(200);
        for index in 1..=2000u64 {
            let set: Vec<Change> = (0..3)
                .map(|i| Change {
                    table: Table::Services,
                    key: ChangeKey::Key(Arc::from(format!("{key}{index}-{i}"))),
                })
                .collect();
            ring.record(index, &set);
        }
        assert!(
            ring.bytes_held <= CHANGES_HELD_BYTES_MAX,
            "{}",
            ring.bytes_held
        );
        assert!(ring.bytes_held > CHANGES_HELD_BYTES_MAX / 2);
        let counted: usize = ring
            .sets
            .iter()
            .flat_map(|(_, set)| set)
            .map(held_bytes)
            .sum();
        assert_eq!(counted, ring.bytes_held);
        assert!(ring.base_index() > 0 && ring.sets.len() < 2000);
        assert!(matches!(
            ring.since(ring.base_index(), 2000),
            FeedReply::Changes { .. }
        ));
    }
}
