//! Row types of the catalog tables: nodes, service instances and health checks.
//!
//! Rows are immutable once built and shared through `Arc`, so a new store version that
//! changes one check copies one small struct and a few map paths, never the rows around it.
//! They are laid out for size, as there are several per service instance: strings are
//! [`ArcStr`]s (one word; the length lives in the allocation, and the empty string needs
//! none) shared between rows wherever the value repeats (node names, service names, keys
//! that fold to themselves), lists are one-word [`SharedList`]s shared likewise (tag lists,
//! check lists), maps that are usually empty cost one null pointer, and everything a row
//! needs only sometimes (check definitions, proxy configuration) sits behind an
//! `Option<Box<…>>`.

use arcstr::ArcStr;
use equivalent::{Comparable, Equivalent};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::cmp::Ordering;
use triomphe::ThinArc;

/// An immutable list shared by every row or view that holds the same items, behind one thin
/// pointer (the length lives in the allocation); the empty list allocates nothing.
pub struct SharedList<T>(Option<ThinArc<(), T>>);

impl<T> SharedList<T> {
    pub fn new(items: Vec<T>) -> SharedList<T> {
        if items.is_empty() {
            SharedList(None)
        } else {
            SharedList(Some(ThinArc::from_header_and_iter((), items.into_iter())))
        }
    }
    pub const fn empty() -> SharedList<T> {
        SharedList(None)
    }
    /// Whether both are the same allocation (or both empty).
    pub fn ptr_eq(a: &SharedList<T>, b: &SharedList<T>) -> bool {
        match (&a.0, &b.0) {
            (Some(a), Some(b)) => a.ptr() == b.ptr(),
            (None, None) => true,
            _ => false,
        }
    }
}

impl<T> Clone for SharedList<T> {
    fn clone(&self) -> Self {
        SharedList(self.0.clone())
    }
}

impl<T> Default for SharedList<T> {
    fn default() -> Self {
        SharedList(None)
    }
}

impl<T> std::ops::Deref for SharedList<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.0.as_ref().map_or(&[], |list| &list.slice)
    }
}

impl<T> FromIterator<T> for SharedList<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        SharedList::new(items.into_iter().collect())
    }
}

impl<T: PartialEq> PartialEq for SharedList<T> {
    fn eq(&self, other: &Self) -> bool {
        SharedList::ptr_eq(self, other) || **self == **other
    }
}

impl<T: Eq> Eq for SharedList<T> {}

impl<T: std::hash::Hash> std::hash::Hash for SharedList<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for SharedList<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Serialized as the sequence of its items, like the `Vec` it was built from.
impl<T: Serialize> Serialize for SharedList<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for SharedList<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<T>::deserialize(deserializer).map(SharedList::new)
    }
}

/// A shared list of checks in check-ID order, as views and node heads hold them.
pub type CheckList = SharedList<RowArc<HealthCheck>>;

/// The shared pointer of instance and check rows, the catalog's most numerous allocations:
/// `triomphe`'s `Arc` has no weak count, one word less than `std`'s per row, which keeps
/// both rows in mimalloc's 96-byte class instead of the 112-byte one. Rows are never
/// referenced weakly.
pub use triomphe::Arc as RowArc;

/// A service's tags, shared by every row of an instance and by instances with equal tags.
pub type Tags = SharedList<ArcStr>;

/// An [`ArcStr`] for `text`; the empty string allocates nothing.
pub fn arc_str(text: &str) -> ArcStr {
    ArcStr::from(text)
}

/// Consul matches node names, service names, service IDs and check IDs case-insensitively
/// (its indexes lowercase them). The catalog keys rows by this folded form.
pub fn fold(text: &str) -> std::borrow::Cow<'_, str> {
    // One pass over the bytes: most keys are lowercase ASCII already (every change key is
    // folded again where it is matched).
    if text
        .bytes()
        .any(|b| b.is_ascii_uppercase() || !b.is_ascii())
    {
        std::borrow::Cow::Owned(text.to_lowercase())
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// The folded key for `original`, sharing its allocation when folding changes nothing.
pub fn fold_arc(original: &ArcStr) -> ArcStr {
    match fold(original) {
        std::borrow::Cow::Borrowed(_) => original.clone(),
        std::borrow::Cow::Owned(lower) => ArcStr::from(lower),
    }
}

/// A small string map (node meta, tagged addresses, service meta), sorted by key, behind
/// one thin pointer (a [`SharedList`]); empty maps allocate nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StrMap(SharedList<StrPair>);

/// How a [`StrMap`] is encoded in commands and snapshots: the form it had when it was an
/// `Option<Box<[StrPair]>>` newtype (nil when empty), kept byte for byte.
#[derive(Serialize)]
#[serde(rename = "StrMap")]
struct StrMapRef<'a>(Option<&'a [StrPair]>);

#[derive(Deserialize)]
#[serde(rename = "StrMap")]
struct StrMapForm(Option<Vec<StrPair>>);

impl Serialize for StrMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let pairs: &[StrPair] = &self.0;
        StrMapRef((!pairs.is_empty()).then_some(pairs)).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for StrMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Sorted and deduplicated again: an encoded map need not be (the old form took
        // what it was given).
        let StrMapForm(pairs) = StrMapForm::deserialize(deserializer)?;
        Ok(StrMap::from_pairs(pairs.unwrap_or_default()))
    }
}

/// One key/value pair of a [`StrMap`].
pub type StrPair = (ArcStr, ArcStr);

/// One tagged address of a service: the tag and where it points.
pub type TaggedServiceAddress = (ArcStr, ServiceAddress);

impl StrMap {
    pub fn from_pairs(mut pairs: Vec<StrPair>) -> StrMap {
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|later, earlier| later.0 == earlier.0);
        StrMap(SharedList::new(pairs))
    }
    pub fn iter(&self) -> impl Iterator<Item = (&ArcStr, &ArcStr)> {
        self.0.iter().map(|(k, v)| (k, v))
    }
    pub fn get(&self, key: &str) -> Option<&ArcStr> {
        let pairs: &[StrPair] = &self.0;
        pairs
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &pairs[i].1)
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
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
    pub address: ArcStr,
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
    pub id: ArcStr,
    pub name: ArcStr,
    pub address: ArcStr,
    pub datacenter: ArcStr,
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
    /// `ServiceKind`: `connect-proxy`, `mesh-gateway`, … (typical services have none).
    pub kind: ArcStr,
    /// `(tag, address)` sorted by tag.
    pub tagged_addresses: Box<[TaggedServiceAddress]>,
    pub socket_path: ArcStr,
    /// `Proxy` as the client sent it (JSON text), for connect proxies and gateways.
    pub proxy_json: Option<ArcStr>,
    pub connect_native: bool,
}

/// One service instance on one node: Consul's `ServiceNode` without the node columns, which
/// are joined in from the node row on the way out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceInstance {
    /// The node's name as registered (shared with the node row).
    pub node: ArcStr,
    pub id: ArcStr,
    pub name: ArcStr,
    pub tags: Tags,
    pub address: ArcStr,
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
            && self.id == other.id
            && self.name == other.name
            && self.tags == other.tags
            && self.address == other.address
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
    /// `ServiceTaggedAddresses`, sorted by tag.
    pub fn tagged_addresses(&self) -> &[TaggedServiceAddress] {
        self.extras.as_deref().map_or(&[], |e| &e.tagged_addresses)
    }
    /// `ServiceKind`: empty for typical services.
    pub fn kind(&self) -> &str {
        self.extras.as_deref().map_or("", |e| &e.kind)
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
    /// `H2PING`: the `host:port` an HTTP/2 PING is sent to. Appended with a default so
    /// entries and snapshots written before it still decode.
    #[serde(default)]
    pub h2ping: String,
    /// `H2PingUseTLS`: the PING goes over TLS (ALPN `h2`) rather than h2c.
    #[serde(default)]
    pub h2ping_use_tls: bool,
    /// `OSService`: the operating-system service whose state the check reports.
    #[serde(default)]
    pub os_service: String,
}

impl CheckDefinition {
    /// Whether every field holds its default. Field by field, without building a default
    /// definition to compare with (a check row asks this on every apply); the destructuring
    /// names every field, so a new one cannot be forgotten here.
    pub fn is_empty(&self) -> bool {
        let CheckDefinition {
            http,
            tls_server_name,
            tls_skip_verify,
            header,
            method,
            body,
            disable_redirects,
            tcp,
            udp,
            grpc,
            grpc_use_tls,
            interval_ns,
            timeout_ns,
            ttl_ns,
            deregister_critical_service_after_ns,
            script_args,
            alias_node,
            alias_service,
            output_max_size,
            h2ping,
            h2ping_use_tls,
            os_service,
        } = self;
        http.is_empty()
            && tls_server_name.is_empty()
            && !tls_skip_verify
            && header.is_empty()
            && method.is_empty()
            && body.is_empty()
            && !disable_redirects
            && tcp.is_empty()
            && udp.is_empty()
            && grpc.is_empty()
            && !grpc_use_tls
            && *interval_ns == 0
            && *timeout_ns == 0
            && *ttl_ns == 0
            && *deregister_critical_service_after_ns == 0
            && script_args.is_empty()
            && alias_node.is_empty()
            && alias_service.is_empty()
            && *output_max_size == 0
            && h2ping.is_empty()
            && !h2ping_use_tls
            && os_service.is_empty()
    }
}

/// Fields of a check that are often empty or only present for agent-run checks; out of line
/// so that a plain catalog check stays small.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckExtras {
    pub notes: ArcStr,
    pub interval: ArcStr,
    pub timeout: ArcStr,
    pub exposed_port: i32,
    pub definition: CheckDefinition,
    /// The check's `Type` when it is not one of [`CHECK_TYPES`].
    pub other_kind: Option<ArcStr>,
}

/// Check types Consul reports, stored as an index in [`HealthCheck::kind_code`].
pub const CHECK_TYPES: [&str; 12] = [
    "",
    "http",
    "tcp",
    "udp",
    "ttl",
    "grpc",
    "script",
    "alias",
    "maintenance",
    "docker",
    "h2ping",
    "os_service",
];

/// [`HealthCheck::kind_code`] of a type kept in [`CheckExtras::other_kind`].
pub const OTHER_CHECK_TYPE: u8 = u8::MAX;

/// The code of a check type: its index in [`CHECK_TYPES`], else [`OTHER_CHECK_TYPE`].
pub fn check_type_code(kind: &str) -> u8 {
    CHECK_TYPES
        .iter()
        .position(|k| *k == kind)
        .map_or(OTHER_CHECK_TYPE, |i| i as u8)
}

/// Consul's `HealthCheck`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheck {
    pub node: ArcStr,
    pub check_id: ArcStr,
    pub name: ArcStr,
    pub status: Status,
    /// `Type` (`http`, `tcp`, `ttl`, `script`, … or empty) as a [`CHECK_TYPES`] index; see
    /// [`HealthCheck::kind`].
    pub kind_code: u8,
    pub output: ArcStr,
    pub service_id: ArcStr,
    pub service_name: ArcStr,
    pub service_tags: Tags,
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
            && self.kind_code == other.kind_code
            && self.extras == other.extras
    }
    /// `Type`: `http`, `tcp`, `ttl`, `script`, … or empty.
    pub fn kind(&self) -> &str {
        match CHECK_TYPES.get(self.kind_code as usize) {
            Some(kind) => kind,
            None => self
                .extras
                .as_deref()
                .and_then(|e| e.other_kind.as_deref())
                .unwrap_or(""),
        }
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

/// A node's network coordinate as reported to the catalog (Consul's `coordinates` table row,
/// written by `/v1/coordinate/update`): serf's Vivaldi coordinate and the segment it is for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeCoordinate {
    pub node: ArcStr,
    pub segment: ArcStr,
    pub vec: Vec<f64>,
    pub error: f64,
    pub adjustment: f64,
    pub height: f64,
    pub modify_index: u64,
}

/// Key of a service instance within its service group: folded node name, folded service ID.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceKey {
    pub node: ArcStr,
    pub service_id: ArcStr,
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
        let lower = ArcStr::from("web");
        assert!(ArcStr::ptr_eq(&fold_arc(&lower), &lower));
        assert_eq!(&*fold_arc(&ArcStr::from("WeB")), "web");
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
    fn shared_lists_encode_like_vecs_and_share_the_empty_list() {
        let tags: Tags = ["a", "b"].into_iter().map(arc_str).collect();
        let as_vec = vec!["a", "b"];
        let encoded = rmp_serde::to_vec(&as_vec).unwrap();
        assert_eq!(rmp_serde::to_vec(&tags).unwrap(), encoded);
        let back: Tags = rmp_serde::from_slice(&encoded).unwrap();
        assert_eq!(back, tags);
        assert!(
            !Tags::ptr_eq(&back, &tags),
            "equal content, separate allocations"
        );
        assert!(Tags::ptr_eq(&tags.clone(), &tags));
        let empty = Tags::new(Vec::new());
        assert!(empty.is_empty() && Tags::ptr_eq(&empty, &Tags::empty()));
        assert_eq!(
            rmp_serde::to_vec(&empty).unwrap(),
            rmp_serde::to_vec(&Vec::<String>::new()).unwrap()
        );
        assert_ne!(empty, tags);
    }

    #[test]
    fn str_maps_encode_as_the_boxed_slice_form_did() {
        // The form StrMap had before it became thin; commands and snapshots hold it.
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct StrMap(Option<Box<[StrPair]>>);
        let pairs = vec![(arc_str("a"), arc_str("1")), (arc_str("b"), arc_str("2"))];
        let old_full = StrMap(Some(pairs.clone().into_boxed_slice()));
        let old_empty = StrMap(None);
        let full = super::StrMap::from_pairs(pairs);
        let empty = super::StrMap::default();
        for (new, old) in [(&full, &old_full), (&empty, &old_empty)] {
            let bytes = rmp_serde::to_vec(old).unwrap();
            assert_eq!(rmp_serde::to_vec(new).unwrap(), bytes);
            assert_eq!(
                rmp_serde::to_vec_named(new).unwrap(),
                rmp_serde::to_vec_named(old).unwrap()
            );
            assert_eq!(
                serde_json::to_string(new).unwrap(),
                serde_json::to_string(old).unwrap()
            );
            assert_eq!(
                &rmp_serde::from_slice::<super::StrMap>(&bytes).unwrap(),
                new
            );
        }
        // An old encoding that was unsorted or had a duplicate key decodes to a proper map.
        let unsorted = StrMap(Some(
            vec![
                (arc_str("b"), arc_str("2")),
                (arc_str("a"), arc_str("1")),
                (arc_str("b"), arc_str("3")),
            ]
            .into_boxed_slice(),
        ));
        let back: super::StrMap =
            rmp_serde::from_slice(&rmp_serde::to_vec(&unsorted).unwrap()).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back.get("a").map(|v| &**v), Some("1"));
    }

    #[test]
    fn a_check_definition_is_empty_only_with_every_field_at_its_default() {
        assert!(CheckDefinition::default().is_empty());
        let set: [fn(&mut CheckDefinition); 22] = [
            |d| d.http = "x".into(),
            |d| d.tls_server_name = "x".into(),
            |d| d.tls_skip_verify = true,
            |d| d.header = vec![("X".into(), vec![])],
            |d| d.method = "x".into(),
            |d| d.body = "x".into(),
            |d| d.disable_redirects = true,
            |d| d.tcp = "x".into(),
            |d| d.udp = "x".into(),
            |d| d.grpc = "x".into(),
            |d| d.grpc_use_tls = true,
            |d| d.interval_ns = 1,
            |d| d.timeout_ns = -1,
            |d| d.ttl_ns = 1,
            |d| d.deregister_critical_service_after_ns = 1,
            |d| d.script_args = vec![String::new()],
            |d| d.alias_node = "x".into(),
            |d| d.alias_service = "x".into(),
            |d| d.output_max_size = 1,
            |d| d.h2ping = "x".into(),
            |d| d.h2ping_use_tls = true,
            |d| d.os_service = "x".into(),
        ];
        for (field, set) in set.iter().enumerate() {
            let mut definition = CheckDefinition::default();
            set(&mut definition);
            assert_ne!(definition, CheckDefinition::default(), "field {field}");
            assert!(!definition.is_empty(), "field {field}");
        }
    }

    #[test]
    fn row_sizes_stay_small() {
        // The per-instance memory budget depends on these; a change that grows them should
        // be deliberate.
        assert_eq!(std::mem::size_of::<StrMap>(), 8);
        // Without a weak count, an instance or check row and its count fit mimalloc's
        // 96-byte class.
        assert!(std::mem::size_of::<ServiceInstance>() + 8 <= 96);
        assert!(std::mem::size_of::<HealthCheck>() + 8 <= 96);
        assert_eq!(std::mem::size_of::<ArcStr>(), 8);
        assert_eq!(std::mem::size_of::<CheckList>(), 8);
        assert_eq!(std::mem::size_of::<Tags>(), 8);
        // Views sit inline in their group's map, 16 to a leaf: at 32 bytes with the 16-byte
        // key, a leaf (two counts, two indexes, 16 entries: 800 bytes) fits mimalloc's
        // 896-byte class; at 40 it took the 1024-byte one.
        assert_eq!(std::mem::size_of::<InstanceKey>(), 16);
        assert!(std::mem::size_of::<super::super::InstanceView>() <= 32);
    }
}
