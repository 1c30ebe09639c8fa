//! Row types of the catalog tables: nodes, service instances and health checks.
//!
//! Rows are immutable once built and shared through `Arc`, so a new store version that
//! changes one check copies one small struct and a few map paths, never the rows around it.
//! They are laid out for size: strings are `Arc<str>` shared between rows wherever the
//! value repeats (node names, service names, tag lists, the empty string), maps that are
//! usually empty cost one null pointer, and everything a row needs only sometimes (check
//! definitions, proxy configuration) sits behind an `Option<Box<…>>`.

use equivalent::{Comparable, Equivalent};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::sync::{Arc, LazyLock};

/// The empty string, shared by every row field that is empty.
pub static EMPTY: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(""));
/// The empty tag list, shared likewise.
pub static NO_TAGS: LazyLock<Arc<[Arc<str>]>> = LazyLock::new(|| Arc::from(Vec::new()));

/// An `Arc<str>` for `text`, reusing the shared empty string.
pub fn arc_str(text: &str) -> Arc<str> {
    if text.is_empty() {
        EMPTY.clone()
    } else {
        Arc::from(text)
    }
}

/// Consul matches node names, service names, service IDs and check IDs case-insensitively
/// (its indexes lowercase them). The catalog keys rows by this folded form.
pub fn fold(text: &str) -> std::borrow::Cow<'_, str> {
    if text.bytes().any(|b| b.is_ascii_uppercase()) || !text.is_ascii() {
        std::borrow::Cow::Owned(text.to_lowercase())
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// The folded key for `original`, sharing its allocation when folding changes nothing.
pub fn fold_arc(original: &Arc<str>) -> Arc<str> {
    match fold(original) {
        std::borrow::Cow::Borrowed(_) => original.clone(),
        std::borrow::Cow::Owned(lower) => Arc::from(lower),
    }
}

/// A small string map (node meta, tagged addresses, service meta), sorted by key. Empty maps
/// cost one pointer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StrMap(Option<Box<[StrPair]>>);

/// One key/value pair of a [`StrMap`].
pub type StrPair = (Arc<str>, Arc<str>);

/// One tagged address of a service: the tag and where it points.
pub type TaggedServiceAddress = (Arc<str>, ServiceAddress);

impl StrMap {
    pub fn from_pairs(mut pairs: Vec<StrPair>) -> StrMap {
        if pairs.is_empty() {
            return StrMap(None);
        }
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|later, earlier| later.0 == earlier.0);
        StrMap(Some(pairs.into_boxed_slice()))
    }
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<str>)> {
        self.0.iter().flat_map(|p| p.iter()).map(|(k, v)| (k, v))
    }
    pub fn get(&self, key: &str) -> Option<&Arc<str>> {
        let pairs = self.0.as_deref()?;
        pairs
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &pairs[i].1)
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
    pub fn len(&self) -> usize {
        self.0.as_deref().map_or(0, <[_]>::len)
    }
    /// Whether every `(key, value)` filter pair is present (Consul's `node-meta` filter).
    pub fn satisfies(&self, filters: &[(String, String)]) -> bool {
        filters
            .iter()
            .all(|(k, v)| self.get(k).is_some_and(|have| **have == **v))
    }
}

/// One entry of a service's `TaggedAddresses`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceAddress {
    pub address: Arc<str>,
    pub port: i32,
}

/// A health status, stored as one byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Status {
    Passing,
    Warning,
    Critical,
    /// Consul's `maintenance` status, which counts as critical everywhere it matters.
    Maintenance,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passing => "passing",
            Status::Warning => "warning",
            Status::Critical => "critical",
            Status::Maintenance => "maintenance",
        }
    }
    /// Parses a status a client may register; `maintenance` is set by the agent only.
    pub fn parse(text: &str) -> Option<Status> {
        match text {
            "passing" => Some(Status::Passing),
            "warning" => Some(Status::Warning),
            "critical" => Some(Status::Critical),
            "maintenance" => Some(Status::Maintenance),
            _ => None,
        }
    }
    /// Rank for "worst status wins" aggregation.
    pub fn severity(self) -> u8 {
        match self {
            Status::Passing => 0,
            Status::Warning => 1,
            Status::Critical => 2,
            Status::Maintenance => 3,
        }
    }
}

/// Consul's `Node`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// The node's UUID, or empty for nodes registered without one.
    pub id: Arc<str>,
    pub name: Arc<str>,
    pub address: Arc<str>,
    pub datacenter: Arc<str>,
    pub tagged_addresses: StrMap,
    pub meta: StrMap,
    pub create_index: u64,
    pub modify_index: u64,
}

impl Node {
    /// Same content, ignoring Raft indexes (Consul's `IsSame`).
    pub fn same_as(&self, other: &Node) -> bool {
        self.id == other.id
            && self.name == other.name
            && self.address == other.address
            && self.datacenter == other.datacenter
            && self.tagged_addresses == other.tagged_addresses
            && self.meta == other.meta
    }
}

/// DNS weights of a service instance; Consul defaults to `{Passing: 1, Warning: 1}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Weights {
    pub passing: u32,
    pub warning: u32,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            passing: 1,
            warning: 1,
        }
    }
}

/// Fields of a service instance that are rare (Connect proxies, gateways, sockets); kept
/// out of line so that plain services do not pay for them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceExtras {
    pub socket_path: Arc<str>,
    /// `Proxy` as the client sent it (JSON text), for connect proxies and gateways.
    pub proxy_json: Option<Arc<str>>,
    pub connect_native: bool,
}

/// One service instance on one node: Consul's `ServiceNode` without the node columns, which
/// are joined in from the node row on the way out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceInstance {
    /// The node's name as registered (shared with the node row).
    pub node: Arc<str>,
    /// `ServiceKind`: empty for typical services, else `connect-proxy`, `mesh-gateway`, …
    pub kind: Arc<str>,
    pub id: Arc<str>,
    pub name: Arc<str>,
    pub tags: Arc<[Arc<str>]>,
    pub address: Arc<str>,
    pub tagged_addresses: Option<Box<[TaggedServiceAddress]>>,
    pub meta: StrMap,
    pub port: i32,
    pub weights: Weights,
    pub enable_tag_override: bool,
    pub extras: Option<Box<ServiceExtras>>,
    pub create_index: u64,
    pub modify_index: u64,
}

impl ServiceInstance {
    /// Same content, ignoring Raft indexes (Consul's `IsSameService`).
    pub fn same_as(&self, other: &ServiceInstance) -> bool {
        self.node == other.node
            && self.kind == other.kind
            && self.id == other.id
            && self.name == other.name
            && self.tags == other.tags
            && self.address == other.address
            && self.tagged_addresses == other.tagged_addresses
            && self.meta == other.meta
            && self.port == other.port
            && self.weights == other.weights
            && self.enable_tag_override == other.enable_tag_override
            && self.extras == other.extras
    }
    pub fn has_tag(&self, tag: &str) -> bool {
        // Consul compares tags case-insensitively for filtering.
        self.tags.iter().any(|t| t.eq_ignore_ascii_case(tag))
    }
    pub fn socket_path(&self) -> &str {
        self.extras.as_deref().map_or("", |e| &e.socket_path)
    }
}

/// How a check is run, as the agent that owns it described it (Consul's
/// `HealthCheckDefinition`); durations in nanoseconds, 0 when unset.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckDefinition {
    pub http: String,
    pub tls_server_name: String,
    pub tls_skip_verify: bool,
    pub header: Vec<(String, Vec<String>)>,
    pub method: String,
    pub body: String,
    pub disable_redirects: bool,
    pub tcp: String,
    pub udp: String,
    pub grpc: String,
    pub grpc_use_tls: bool,
    pub interval_ns: i64,
    pub timeout_ns: i64,
    pub ttl_ns: i64,
    pub deregister_critical_service_after_ns: i64,
    pub script_args: Vec<String>,
    pub alias_node: String,
    pub alias_service: String,
    pub output_max_size: u64,
}

impl CheckDefinition {
    pub fn is_empty(&self) -> bool {
        *self == CheckDefinition::default()
    }
}

/// Fields of a check that are often empty or only present for agent-run checks; out of line
/// so that a plain catalog check stays small.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckExtras {
    pub notes: Arc<str>,
    pub interval: Arc<str>,
    pub timeout: Arc<str>,
    pub exposed_port: i32,
    pub definition: CheckDefinition,
}

/// Consul's `HealthCheck`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheck {
    pub node: Arc<str>,
    pub check_id: Arc<str>,
    pub name: Arc<str>,
    pub status: Status,
    pub output: Arc<str>,
    pub service_id: Arc<str>,
    pub service_name: Arc<str>,
    pub service_tags: Arc<[Arc<str>]>,
    /// `Type`: `http`, `tcp`, `ttl`, `script`, … or empty.
    pub kind: Arc<str>,
    pub extras: Option<Box<CheckExtras>>,
    pub create_index: u64,
    pub modify_index: u64,
}

impl HealthCheck {
    /// Same content, ignoring Raft indexes (Consul's `IsSame`).
    pub fn same_as(&self, other: &HealthCheck) -> bool {
        self.node == other.node
            && self.check_id == other.check_id
            && self.name == other.name
            && self.status == other.status
            && self.output == other.output
            && self.service_id == other.service_id
            && self.service_name == other.service_name
            && self.service_tags == other.service_tags
            && self.kind == other.kind
            && self.extras == other.extras
    }
    pub fn notes(&self) -> &str {
        self.extras.as_deref().map_or("", |e| &e.notes)
    }
    pub fn interval(&self) -> &str {
        self.extras.as_deref().map_or("", |e| &e.interval)
    }
    pub fn timeout(&self) -> &str {
        self.extras.as_deref().map_or("", |e| &e.timeout)
    }
    pub fn exposed_port(&self) -> i32 {
        self.extras.as_deref().map_or(0, |e| e.exposed_port)
    }
    pub fn definition(&self) -> Option<&CheckDefinition> {
        self.extras.as_deref().map(|e| &e.definition)
    }
}

/// Key of a check within its node: the folded service ID (empty for node checks) first, so
/// that a service's checks are one contiguous range, then the folded check ID.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CheckKey {
    pub service: Arc<str>,
    pub check: Arc<str>,
}

/// A borrowed [`CheckKey`] for lookups without allocating.
#[derive(Clone, Copy, Debug)]
pub struct CheckKeyRef<'a> {
    pub service: &'a str,
    pub check: &'a str,
}

impl Equivalent<CheckKey> for CheckKeyRef<'_> {
    fn equivalent(&self, key: &CheckKey) -> bool {
        *self.service == *key.service && *self.check == *key.check
    }
}

impl Comparable<CheckKey> for CheckKeyRef<'_> {
    fn compare(&self, key: &CheckKey) -> Ordering {
        (self.service, self.check).cmp(&(&*key.service, &*key.check))
    }
}

/// Key of a service instance within its service group: folded node name, folded service ID.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceKey {
    pub node: Arc<str>,
    pub service_id: Arc<str>,
}

/// A borrowed [`InstanceKey`].
#[derive(Clone, Copy, Debug)]
pub struct InstanceKeyRef<'a> {
    pub node: &'a str,
    pub service_id: &'a str,
}

impl Equivalent<InstanceKey> for InstanceKeyRef<'_> {
    fn equivalent(&self, key: &InstanceKey) -> bool {
        *self.node == *key.node && *self.service_id == *key.service_id
    }
}

impl Comparable<InstanceKey> for InstanceKeyRef<'_> {
    fn compare(&self, key: &InstanceKey) -> Ordering {
        (self.node, self.service_id).cmp(&(&*key.node, &*key.service_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_shares_lowercase_strings() {
        let lower: Arc<str> = Arc::from("web");
        assert!(Arc::ptr_eq(&fold_arc(&lower), &lower));
        assert_eq!(&*fold_arc(&Arc::from("WeB")), "web");
        assert_eq!(fold("Ünïcode"), "ünïcode");
    }

    #[test]
    fn str_map_sorts_dedups_and_filters() {
        let map = StrMap::from_pairs(vec![
            (arc_str("b"), arc_str("2")),
            (arc_str("a"), arc_str("1")),
            (arc_str("b"), arc_str("3")),
        ]);
        assert_eq!(map.len(), 2);
        assert_eq!(map.get("a").map(|v| &**v), Some("1"));
        assert!(map.satisfies(&[("a".into(), "1".into())]));
        assert!(!map.satisfies(&[("a".into(), "2".into())]));
        assert!(!map.satisfies(&[("c".into(), "".into())]));
        assert!(StrMap::from_pairs(vec![]).is_empty());
    }

    #[test]
    fn row_sizes_stay_small() {
        // The per-instance memory budget depends on these; a change that grows them should
        // be deliberate.
        assert!(std::mem::size_of::<ServiceInstance>() <= 176);
        assert!(std::mem::size_of::<HealthCheck>() <= 176);
        assert!(std::mem::size_of::<StrMap>() == 16);
    }
}
