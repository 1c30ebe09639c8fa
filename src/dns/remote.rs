//! What a client agent and a server say to each other so that the client can answer DNS: the
//! catalog lookups a resolution needs, and the feed of catalog changes that keeps the
//! client's caches exact. Pure: bytes and indexes in, bytes out.
//!
//! A client agent has no store. It resolves each question itself (its own `dns_config`:
//! domain, TTLs, `only_passing`, truncation), against a [`CatalogView`] whose rows it asks a
//! server for, one [`Lookup`] per view call, over the internal endpoint [`LOOKUP_PATH`]. The
//! server answers every lookup from one store version and says which ([`LookupReply::index`]).
//!
//! The client caches lookup results and encoded answers and drops them by the same rule as
//! a server does (`store::invalidates`), fed by [`CHANGES_PATH`]: a blocking read that returns
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
use crate::store::{Change, ChangeKey, Table};
use arcstr::ArcStr;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Arc;

/// The internal endpoint a client asks for lookups (PUT, body: the encoded lookups).
pub const LOOKUP_PATH: &str = "/v1/internal/praetor/dns-lookup";
/// The internal endpoint of the change feed (GET, `?index=N&wait=…`, blocking).
pub const CHANGES_PATH: &str = "/v1/internal/praetor/dns-changes";
/// Most lookups in one request. One resolution makes at most two view calls (PTR: a node,
/// then a service by address).
pub const LOOKUPS_PER_REQUEST_MAX: usize = 8;
/// Most change sets a server shard keeps for the feed.
pub const CHANGE_SETS_HELD_MAX: usize = 4096;
/// Most single changes a server shard keeps for the feed (over every held set).
pub const CHANGES_HELD_MAX: usize = 65_536;
/// The tables DNS resolution reads, and so the only ones the feed carries.
pub const FEED_TABLES: [Table; 3] = [Table::Nodes, Table::Services, Table::ServiceIndex];

/// One `CatalogView` call. Names are kept lowercased: the view matches them
/// case-insensitively, so a lowercased name is the cache key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Lookup {
    ServiceInstances(String),
    Node(String),
    NodeByAddress(IpAddr),
    ServiceByAddress(IpAddr),
    /// The Connect-capable instances of a service (`<service>.connect`).
    ConnectInstances(String),
}

/// The answer to one [`Lookup`], of the same variant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LookupResult {
    Instances(Vec<ServiceInstance>),
    Node(Option<Arc<NodeRecord>>),
    ServiceName(Option<ArcStr>),
}

impl Lookup {
    pub fn service_instances(name: &str) -> Lookup {
        Lookup::ServiceInstances(name.to_ascii_lowercase())
    }
    pub fn node(name: &str) -> Lookup {
        Lookup::Node(name.to_ascii_lowercase())
    }

    /// Records what the store's view records for this call.
    pub fn record_reads(&self, reads: &mut ReadSet) {
        match self {
            Lookup::ServiceInstances(name) => reads.add_key(Table::ServiceIndex, name),
            Lookup::Node(name) => reads.add_key(Table::Nodes, name),
            Lookup::NodeByAddress(_) => reads.add_table(Table::Nodes),
            Lookup::ServiceByAddress(_) => reads.add_table(Table::Services),
            // Proxies of any name front the service: any service's change may matter.
            Lookup::ConnectInstances(_) => {
                reads.add_table(Table::Services);
                reads.add_table(Table::ServiceIndex);
            }
        }
    }

    /// Runs this call against a view.
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
        }
    }

    /// Whether `result` is the variant this lookup answers with.
    pub fn answered_by(&self, result: &LookupResult) -> bool {
        matches!(
            (self, result),
            (
                Lookup::ServiceInstances(_) | Lookup::ConnectInstances(_),
                LookupResult::Instances(_)
            ) | (
                Lookup::Node(_) | Lookup::NodeByAddress(_),
                LookupResult::Node(_)
            ) | (Lookup::ServiceByAddress(_), LookupResult::ServiceName(_))
        )
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
    Ok(lookups)
}

/// The server side of [`LOOKUP_PATH`]: every lookup against `view` (the version at `index`).
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
}

impl RecentChanges {
    /// An empty ring for a shard whose version is at `index`.
    pub fn new(index: u64) -> RecentChanges {
        RecentChanges {
            base_index: index,
            sets: VecDeque::new(),
            changes_held: 0,
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
        let kept: Vec<Change> = changes
            .iter()
            .filter(|c| FEED_TABLES.contains(&c.table))
            .cloned()
            .collect();
        if kept.is_empty() {
            return;
        }
        assert!(
            index >= self.newest_index(),
            "change sets arrive in index order: {index} after {}",
            self.newest_index()
        );
        self.changes_held += kept.len();
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
        {
            let (dropped_index, dropped) = self.sets.pop_front().expect("over a bound, not empty");
            self.changes_held -= dropped.len();
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
}
