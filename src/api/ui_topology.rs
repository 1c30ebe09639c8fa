//! `/v1/internal/ui/service-topology/<service>?kind=`: what a service talks to and what talks
//! to it, for the web UI's service page, shaped as Consul's `ServiceTopology`.
//!
//! - Upstreams: the services the service's sidecar proxies name as upstreams in their
//!   registrations (source `proxy-registration`); when some proxy of the service is
//!   transparent or an instance is Connect-native, also every service the intentions let
//!   it reach (`specific-intention`, `wildcard-intention`, `default-allow`); an upstream
//!   with no instance but a resolver, splitter or router is listed by name
//!   (`routing-config`).
//! - Downstreams: the services whose proxies name this one as an upstream, and those the
//!   intentions let in when they run transparent proxies or are Connect-native.
//! - Each one is a `ServiceSummary` over its instances and its proxies (the proxies' checks
//!   count for it), with the intention decision for that connection: allowed or not, by an
//!   exact intention or not, whether L7 permissions decide it (then an L4 connection is
//!   refused, as the proxies refuse it), and the ACL default that applies when nothing
//!   matches.
//!
//! Invariants: the answer is a pure function of one store version, the token and the ACL
//! default; rows the token may not read are left out and `FilteredByACLs` says so; the
//! query blocks on the catalog tables and the config entries (intentions are config
//! entries), whose highest index it reports. Not computed, as praetor has no such state:
//! routes a discovery chain adds toward the service (Consul adds those services as
//! downstreams), and gateways.

use super::authz::RowFilter;
use super::ui_summary::{proxy_facts, summarize, ProxyFacts, Summary, META_EXTERNAL_SOURCE};
use super::{ApiError, Query, QueryMeta, Reply};
use crate::consul::json::JsonWriter;
use crate::consul::rpc::internal::{
    write_service_topology, IntentionDecision, ServiceTopology, ServiceTopologyReply, TopologySide,
};
use crate::consul::rpc::QueryMeta as RpcQueryMeta;
use crate::proto::msgpack::Writer;
use crate::shard::watch::WatchSet;
use crate::store::catalog::read::{self, CheckServiceNode};
use crate::store::catalog::rows::fold;
use crate::store::mesh::config_entry::{self, ConfigKind};
use crate::store::mesh::intentions::{self, Decision, WILDCARD};
use crate::store::{StoreVersion, Table, Tables};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// Consul's labels for where an upstream or downstream comes from.
const SOURCE_REGISTRATION: &str = "proxy-registration";
const SOURCE_SPECIFIC_INTENTION: &str = "specific-intention";
const SOURCE_WILDCARD_INTENTION: &str = "wildcard-intention";
const SOURCE_DEFAULT_ALLOW: &str = "default-allow";
const SOURCE_ROUTING_CONFIG: &str = "routing-config";

/// The config entry kinds that make a name an upstream without instances (Consul's
/// `serviceGraphKinds`).
const ROUTING_KINDS: [ConfigKind; 3] = [
    ConfigKind::ServiceRouter,
    ConfigKind::ServiceSplitter,
    ConfigKind::ServiceResolver,
];

/// The kinds of service a topology is asked for (`?kind=`), as Consul allows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopologyKind {
    Typical,
    IngressGateway,
}

impl TopologyKind {
    /// The kind as `?kind=` and `ServiceKind` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            TopologyKind::Typical => "",
            TopologyKind::IngressGateway => "ingress-gateway",
        }
    }

    /// `?kind=`: Consul's 400s for a missing or unsupported kind.
    pub fn parse(kind: Option<&str>) -> Result<TopologyKind, ApiError> {
        match kind {
            None => Err(ApiError::bad_request("Missing service kind")),
            Some("") => Ok(TopologyKind::Typical),
            Some("ingress-gateway") => Ok(TopologyKind::IngressGateway),
            Some(other) => Err(ApiError::bad_request(format!(
                "Unsupported service kind {other:?}"
            ))),
        }
    }
}

/// Consul's `IntentionDecisionSummary` for one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecisionSummary<'t> {
    pub default_allow: bool,
    pub allowed: bool,
    pub has_permissions: bool,
    pub external_source: &'t str,
    pub has_exact: bool,
}

impl<'t> DecisionSummary<'t> {
    /// The decision for a connection from `source` to `destination`. With
    /// `allow_permissions`, an intention with L7 permissions counts as allowing (Consul asks
    /// so when it looks for candidates, not when it reports the connection).
    fn of(
        tables: &'t Tables,
        source: &str,
        destination: &str,
        default_allow: bool,
        allow_permissions: bool,
    ) -> DecisionSummary<'t> {
        let mut summary = DecisionSummary {
            default_allow,
            ..DecisionSummary::default()
        };
        match intentions::decide(tables, source, destination) {
            Decision::Default => summary.allowed = default_allow,
            Decision::Matched {
                destination: matched_destination,
                source: matched,
            } => {
                summary.allowed = matched.action == Some(intentions::Action::Allow);
                if matched.is_l7() {
                    summary.has_permissions = true;
                    summary.allowed = allow_permissions;
                }
                summary.external_source = external_source(tables, matched_destination, matched);
                summary.has_exact = matched.name != WILDCARD && matched_destination != WILDCARD;
            }
        }
        summary
    }

    /// Consul's label for a service found through the intentions.
    fn source_label(&self) -> &'static str {
        if self.has_exact {
            SOURCE_SPECIFIC_INTENTION
        } else if self.default_allow {
            SOURCE_DEFAULT_ALLOW
        } else {
            SOURCE_WILDCARD_INTENTION
        }
    }

    fn write(&self, w: &mut JsonWriter) {
        w.field_object("Intention");
        w.field_bool("DefaultAllow", self.default_allow);
        w.field_bool("Allowed", self.allowed);
        w.field_bool("HasPermissions", self.has_permissions);
        w.field_str("ExternalSource", self.external_source);
        w.field_bool("HasExact", self.has_exact);
        w.end_object();
    }
}

/// The `external-source` meta of a matched intention: its legacy `Meta`, else its entry's.
fn external_source<'t>(
    tables: &'t Tables,
    destination: &str,
    source: &'t intentions::SourceIntention,
) -> &'t str {
    if let Some(meta) = &source.legacy_meta {
        return meta
            .iter()
            .find(|(k, _)| k == META_EXTERNAL_SOURCE)
            .map_or("", |(_, v)| v.as_str());
    }
    config_entry::get(tables, ConfigKind::ServiceIntentions, destination)
        .and_then(|entry| entry.intentions())
        .and_then(|body| body.meta.iter().find(|(k, _)| k == META_EXTERNAL_SOURCE))
        .map_or("", |(_, v)| v.as_str())
}

/// One side of the topology (upstreams or downstreams) while it is gathered: names in the
/// order found, keyed by folded name, each with where it came from and its decision.
#[derive(Default)]
pub struct Side<'t> {
    pub names: Vec<String>,
    /// Where each name came from, keyed by folded name.
    pub sources: BTreeMap<String, &'t str>,
    /// The intention decision of each name's connection, keyed by folded name.
    pub decisions: BTreeMap<String, DecisionSummary<'t>>,
}

impl<'t> Side<'t> {
    /// Adds `name` unless it is there; whether it was new.
    fn add(&mut self, name: &str, source: &'t str) -> bool {
        let key = fold(name).into_owned();
        if self.sources.contains_key(&key) {
            return false;
        }
        self.sources.insert(key, source);
        self.names.push(name.to_string());
        true
    }

    fn source_of(&self, name: &str) -> Option<&'t str> {
        self.sources.get(&*fold(name)).copied()
    }

    /// A side as `Internal.ServiceTopology` carries it: each name's source and decision
    /// (names in no particular order; the answer is rendered from the maps alone).
    pub fn from_maps(
        sources: impl Iterator<Item = (&'t str, &'t str)>,
        decisions: impl Iterator<Item = (&'t str, DecisionSummary<'t>)>,
    ) -> Side<'t> {
        let mut side = Side::default();
        for (name, source) in sources {
            side.add(name, source);
        }
        for (name, decision) in decisions {
            side.decisions.insert(fold(name).into_owned(), decision);
        }
        side
    }
}

/// Every proxy row of the catalog with its facts, read once per answer.
fn all_proxies(tables: &Tables) -> Vec<(ProxyFacts, CheckServiceNode<'_>)> {
    tables
        .catalog
        .services
        .values()
        .flat_map(read::check_service_nodes_of_group)
        .filter_map(|row| proxy_facts(&row).map(|facts| (facts, row)))
        .collect()
}

fn is_native(row: &CheckServiceNode) -> bool {
    row.service
        .extras
        .as_ref()
        .is_some_and(|extras| extras.connect_native)
}

/// The instances of `names` and the proxies fronting them, once each (Consul's
/// `combinedServiceNodesTxn`).
fn combined_rows<'t>(
    tables: &'t Tables,
    proxies: &[(ProxyFacts, CheckServiceNode<'t>)],
    names: &[String],
) -> Vec<CheckServiceNode<'t>> {
    let wanted: HashSet<String> = names.iter().map(|n| fold(n).into_owned()).collect();
    let mut seen: HashSet<(&str, &str)> = HashSet::new();
    let mut rows = Vec::new();
    for name in names {
        for row in read::check_service_nodes(tables, name) {
            if seen.insert((&row.node.name, &row.service.id)) {
                rows.push(row);
            }
        }
    }
    for (facts, row) in proxies {
        if wanted.contains(&*fold(&facts.destination))
            && seen.insert((&row.node.name, &row.service.id))
        {
            rows.push(*row);
        }
    }
    rows
}

/// The service a row stands for: a proxy's destination, else its own name.
fn represented<'r>(
    row: &'r CheckServiceNode,
    proxies: &'r [(ProxyFacts, CheckServiceNode)],
) -> &'r str {
    proxies
        .iter()
        .find(|(_, p)| p.node.name == row.node.name && p.service.id == row.service.id)
        .map_or(&row.service.name, |(facts, _)| facts.destination.as_str())
}

/// The names of services with an instance of no kind (Consul's typical services), the
/// candidates the intentions may connect; `consul` itself is never one.
fn typical_names(tables: &Tables) -> Vec<String> {
    tables
        .catalog
        .services
        .values()
        .filter_map(|group| {
            let view = group
                .instances
                .values()
                .find(|v| v.service.kind().is_empty())?;
            Some(view.service.name.to_string())
        })
        .filter(|name| name != "consul")
        .collect()
}

/// The protocol Consul reports for metrics: the service's, or for an ingress gateway `http`
/// when every listener speaks an HTTP-like protocol and `tcp` otherwise (nothing without an
/// entry).
fn protocol(tables: &Tables, service: &str, kind: TopologyKind) -> String {
    match kind {
        TopologyKind::Typical => config_entry::service_protocol(tables, service).to_string(),
        TopologyKind::IngressGateway => {
            let Some(entry) = config_entry::get(tables, ConfigKind::IngressGateway, service) else {
                return String::new();
            };
            let body: serde_json::Value = entry
                .json()
                .and_then(|text| serde_json::from_str(text).ok())
                .unwrap_or_default();
            let listeners = body["Listeners"].as_array().cloned().unwrap_or_default();
            let http_like = |l: &serde_json::Value| {
                let protocol = l["Protocol"].as_str().unwrap_or("tcp").to_ascii_lowercase();
                config_entry::is_http_family(&protocol)
            };
            if !listeners.is_empty() && listeners.iter().all(http_like) {
                "http".to_string()
            } else {
                "tcp".to_string()
            }
        }
    }
}

/// `GET /v1/internal/ui/service-topology/<service>?kind=`.
pub struct TopologyQuery {
    pub service: Arc<str>,
    pub kind: TopologyKind,
    pub rows: RowFilter,
    /// The decision when no intention matches (the ACL default policy).
    pub default_allow: bool,
    /// The datacenter a summary known by name only reports.
    pub datacenter: Arc<str>,
}

/// A topology's index and watches (`service-topology/<s>`, `Internal.ServiceTopology`):
/// the catalog tables and the config entries (intentions are config entries).
pub fn topology_read(tables: &Tables) -> (u64, WatchSet) {
    let watched = [
        Table::Nodes,
        Table::Services,
        Table::Checks,
        Table::ConfigEntries,
    ];
    let mut watch = WatchSet::new();
    for table in watched {
        watch = watch.table(table);
    }
    (tables.max_table_index(&watched), watch)
}

impl Query for TopologyQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        topology_read(tables)
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let view = self.gather(tables);
        let body = topology_body(&view, &self.datacenter, reply.pretty);
        let mut headers = Vec::with_capacity(200);
        meta.write_headers(&mut headers);
        self.rows.write_header(view.hidden, &mut headers);
        reply.json_bytes(200, &headers, &body);
    }
}

/// A topology as it was gathered (Consul's `ServiceTopology`): the neighbours' rows the
/// token may read, each side's sources and decisions, and the upstreams only routing
/// configuration names. What a server's handler renders, and what
/// `Internal.ServiceTopology` carries to a client agent, which renders the same.
pub struct TopologyView<'t> {
    pub protocol: String,
    /// Every proxy of the service is transparent.
    pub transparent: bool,
    pub upstreams: Vec<CheckServiceNode<'t>>,
    pub downstreams: Vec<CheckServiceNode<'t>>,
    pub up: Side<'t>,
    pub down: Side<'t>,
    /// Upstreams with no listed instance that a router, splitter or resolver names, sorted.
    pub routed: Vec<String>,
    /// The token's filter left rows out.
    pub hidden: bool,
}

/// The service-topology answer's body from a gathered topology; a name known only from
/// routing configuration reports `datacenter`.
pub fn topology_body(view: &TopologyView, datacenter: &str, pretty: bool) -> Vec<u8> {
    let mut body = Vec::with_capacity(2048);
    let mut w = JsonWriter::new(&mut body, pretty);
    write_view(view, datacenter, &mut w);
    w.finish();
    body
}

/// Summaries of rows already filtered by the token.
fn summaries<'t>(rows: &[CheckServiceNode<'t>]) -> Vec<Summary<'t>> {
    let mut hidden = false;
    let summaries = summarize(
        rows.iter().copied(),
        None,
        &RowFilter::default(),
        &mut hidden,
    );
    debug_assert!(!hidden, "the rows were filtered before");
    summaries
}

fn write_view(view: &TopologyView, datacenter: &str, w: &mut JsonWriter) {
    let upstreams = summaries(&view.upstreams);
    let downstreams = summaries(&view.downstreams);
    w.begin_object();
    w.field_str("Protocol", &view.protocol);
    w.field_bool("TransparentProxy", view.transparent);
    w.field_array("Upstreams");
    for summary in upstreams.iter().filter(|s| shown_kind(s)) {
        write_summary(w, summary, &view.up);
    }
    for name in &view.routed {
        let summary = Summary::named(name, datacenter);
        let decision = view
            .up
            .decisions
            .get(&*fold(name))
            .copied()
            .unwrap_or_default();
        w.begin_object();
        summary.write_fields(w);
        w.field_str("Source", SOURCE_ROUTING_CONFIG);
        decision.write(w);
        w.end_object();
    }
    w.end_array();
    w.field_array("Downstreams");
    for summary in downstreams.iter().filter(|s| shown_kind(s)) {
        write_summary(w, summary, &view.down);
    }
    w.end_array();
    w.field_bool("FilteredByACLs", view.hidden);
    w.end_object();
}

/// The maps of one side as `Internal.ServiceTopology` carries them: every name's decision
/// and label, names in `routed` labelled `routing-config` (how a client agent tells them).
fn side_maps<'v>(side: &'v Side<'v>, routed: &[String]) -> TopologySide<'v> {
    let key = |name: &str| fold(name).into_owned();
    TopologySide {
        decisions: side
            .names
            .iter()
            .map(|name| {
                let d = side.decisions.get(&key(name)).copied().unwrap_or_default();
                (
                    name.as_str(),
                    IntentionDecision {
                        allowed: d.allowed,
                        default_allow: d.default_allow,
                        external_source: d.external_source,
                        has_exact: d.has_exact,
                        has_permissions: d.has_permissions,
                    },
                )
            })
            .collect(),
        sources: side
            .names
            .iter()
            .map(|name| {
                let label = if routed.contains(name) {
                    SOURCE_ROUTING_CONFIG
                } else {
                    side.sources.get(&key(name)).copied().unwrap_or("")
                };
                (name.as_str(), label)
            })
            .collect(),
    }
}

/// Writes a gathered topology as `IndexedServiceTopology` (`Internal.ServiceTopology`).
pub fn write_topology_reply(w: &mut Writer, meta: &RpcQueryMeta, view: &TopologyView) {
    let topology = ServiceTopology {
        upstreams: &view.upstreams,
        downstreams: &view.downstreams,
        up: side_maps(&view.up, &view.routed),
        down: side_maps(&view.down, &[]),
        metrics_protocol: &view.protocol,
        transparent_proxy: view.transparent,
        filtered_by_acls: view.hidden,
    };
    write_service_topology(w, &meta.filtered(view.hidden), &topology);
}

/// A topology read back from `Internal.ServiceTopology`'s reply, to render as the server's
/// handler does: the upstreams labelled `routing-config` are the routed ones.
pub fn view_of<'r>(reply: &'r ServiceTopologyReply<'r>) -> TopologyView<'r> {
    let side = |maps: &'r TopologySide<'r>| {
        Side::from_maps(
            maps.sources.iter().copied(),
            maps.decisions.iter().map(|(name, d)| {
                (
                    *name,
                    DecisionSummary {
                        default_allow: d.default_allow,
                        allowed: d.allowed,
                        has_permissions: d.has_permissions,
                        external_source: d.external_source,
                        has_exact: d.has_exact,
                    },
                )
            }),
        )
    };
    let mut routed: Vec<String> = reply
        .up
        .sources
        .iter()
        .filter(|(_, label)| *label == SOURCE_ROUTING_CONFIG)
        .map(|(name, _)| name.to_string())
        .collect();
    routed.sort();
    TopologyView {
        protocol: reply.metrics_protocol.to_string(),
        transparent: reply.transparent_proxy,
        upstreams: reply.upstreams.iter().map(|row| row.as_row()).collect(),
        downstreams: reply.downstreams.iter().map(|row| row.as_row()).collect(),
        up: side(&reply.up),
        down: side(&reply.down),
        routed,
        hidden: reply.filtered_by_acls || reply.meta.results_filtered_by_acls,
    }
}

/// Which way a connection goes between the service and a neighbour.
#[derive(Clone, Copy)]
enum Direction {
    /// The service connects to the neighbour.
    Upstream,
    /// The neighbour connects to the service.
    Downstream,
}

impl TopologyQuery {
    /// The decision for the connection between the service and `neighbour`.
    fn decision<'t>(
        &self,
        tables: &'t Tables,
        neighbour: &str,
        direction: Direction,
        allow_permissions: bool,
    ) -> DecisionSummary<'t> {
        let (source, destination) = match direction {
            Direction::Upstream => (&*self.service, neighbour),
            Direction::Downstream => (neighbour, &*self.service),
        };
        DecisionSummary::of(
            tables,
            source,
            destination,
            self.default_allow,
            allow_permissions,
        )
    }

    /// Adds to `side` every candidate the intentions let connect (L7 permissions counting
    /// as a yes, as Consul's candidate search does), labelled by what allowed it.
    fn add_allowed(
        &self,
        tables: &Tables,
        side: &mut Side,
        candidates: &[String],
        direction: Direction,
    ) {
        for candidate in candidates {
            let decision = self.decision(tables, candidate, direction, true);
            if decision.allowed && !candidate.eq_ignore_ascii_case(&self.service) {
                side.add(candidate, decision.source_label());
            }
        }
    }

    /// Records the decision reported for each name of `side`: L7 permissions refuse the
    /// connection, as the proxies refuse a plain TCP one.
    fn decide_all<'t>(&self, tables: &'t Tables, side: &mut Side<'t>, direction: Direction) {
        for name in side.names.clone() {
            let decision = self.decision(tables, &name, direction, false);
            side.decisions.insert(fold(&name).into_owned(), decision);
        }
    }

    /// Writes the topology; whether the token's filter left something out.
    #[cfg(test)]
    fn write_topology(&self, tables: &Tables, w: &mut JsonWriter) -> bool {
        let view = self.gather(tables);
        write_view(&view, &self.datacenter, w);
        view.hidden
    }

    /// Gathers the topology from one store version, as the token may see it.
    pub fn gather<'t>(&self, tables: &'t Tables) -> TopologyView<'t> {
        let service = &*self.service;
        let proxies = all_proxies(tables);
        let own_proxies: Vec<&ProxyFacts> = proxies
            .iter()
            .map(|(facts, _)| facts)
            .filter(|facts| facts.destination.eq_ignore_ascii_case(service))
            .collect();
        let typical = self.kind == TopologyKind::Typical;
        let fully_transparent =
            typical && !own_proxies.is_empty() && own_proxies.iter().all(|f| f.transparent);
        let has_transparent = typical && own_proxies.iter().any(|f| f.transparent);
        let connect_native = typical
            && read::check_service_nodes(tables, service)
                .iter()
                .any(is_native);
        let by_intentions = has_transparent || connect_native;
        let candidates = typical_names(tables);
        let (up, up_rows) =
            self.upstreams(tables, &proxies, &own_proxies, &candidates, by_intentions);
        let (down, down_rows) = self.downstreams(tables, &proxies, &candidates);

        // The rows the token may not read are left out (as `summarize` leaves them out).
        let mut hidden = false;
        let mut readable = |rows: Vec<CheckServiceNode<'t>>| -> Vec<CheckServiceNode<'t>> {
            rows.into_iter()
                .filter(|row| {
                    let shown = self.rows.node_service(&row.node.name, &row.service.name);
                    hidden |= !shown;
                    shown
                })
                .collect()
        };
        let upstreams = readable(up_rows);
        let downstreams = readable(down_rows);
        let listed: HashSet<String> = summaries(&upstreams)
            .iter()
            .filter(|s| shown_kind(s))
            .map(|s| fold(&s.name).into_owned())
            .collect();
        let routed = self.routed_upstreams(tables, &up, &listed);
        TopologyView {
            protocol: protocol(tables, service, self.kind),
            transparent: fully_transparent,
            upstreams,
            downstreams,
            up,
            down,
            routed,
            hidden,
        }
    }

    /// Upstreams: what this service's proxies are registered to reach, then (for a
    /// transparent or native service) what the intentions let it reach; with their rows.
    fn upstreams<'t>(
        &self,
        tables: &'t Tables,
        proxies: &[(ProxyFacts, CheckServiceNode<'t>)],
        own_proxies: &[&ProxyFacts],
        candidates: &[String],
        by_intentions: bool,
    ) -> (Side<'t>, Vec<CheckServiceNode<'t>>) {
        let mut up = Side::default();
        for facts in own_proxies {
            for name in &facts.upstreams {
                up.add(name, SOURCE_REGISTRATION);
            }
        }
        if by_intentions {
            self.add_allowed(tables, &mut up, candidates, Direction::Upstream);
        }
        self.decide_all(tables, &mut up, Direction::Upstream);
        let up_rows: Vec<CheckServiceNode> = combined_rows(tables, proxies, &up.names)
            .into_iter()
            .filter(|row| {
                by_intentions
                    || up.source_of(represented(row, proxies)) == Some(SOURCE_REGISTRATION)
            })
            .collect();
        (up, up_rows)
    }

    /// Downstreams: the services whose proxies are registered to reach this one, then those
    /// the intentions let in; with their rows.
    fn downstreams<'t>(
        &self,
        tables: &'t Tables,
        proxies: &[(ProxyFacts, CheckServiceNode<'t>)],
        candidates: &[String],
    ) -> (Side<'t>, Vec<CheckServiceNode<'t>>) {
        let service = &*self.service;
        let mut down = Side::default();
        for (facts, _) in proxies {
            if facts
                .upstreams
                .iter()
                .any(|u| u.eq_ignore_ascii_case(service))
            {
                down.add(&facts.destination, SOURCE_REGISTRATION);
            }
        }
        self.add_allowed(tables, &mut down, candidates, Direction::Downstream);
        self.decide_all(tables, &mut down, Direction::Downstream);
        let down_candidates = combined_rows(tables, proxies, &down.names);
        // A downstream found only through the intentions counts when one of its proxies is
        // transparent or an instance is native: only those dial without a registration.
        let mut dialing: HashSet<String> = HashSet::new();
        for row in &down_candidates {
            if is_native(row) {
                dialing.insert(fold(&row.service.name).into_owned());
            }
        }
        for (facts, row) in proxies {
            if facts.transparent
                && down_candidates
                    .iter()
                    .any(|r| r.service.id == row.service.id && r.node.name == row.node.name)
            {
                dialing.insert(fold(&facts.destination).into_owned());
            }
        }
        let down_rows: Vec<CheckServiceNode> = down_candidates
            .into_iter()
            .filter(|row| {
                let name = represented(row, proxies);
                dialing.contains(&*fold(name)) || down.source_of(name) == Some(SOURCE_REGISTRATION)
            })
            .collect();
        (down, down_rows)
    }

    /// Upstreams no listed instance stands for, but routing configuration does: by
    /// name, sorted.
    fn routed_upstreams(
        &self,
        tables: &Tables,
        up: &Side,
        listed: &HashSet<String>,
    ) -> Vec<String> {
        let mut routed: Vec<String> = up
            .names
            .iter()
            .filter(|name| !listed.contains(&*fold(name)))
            .filter(|name| {
                ROUTING_KINDS
                    .iter()
                    .any(|kind| config_entry::get(tables, *kind, name).is_some())
            })
            .cloned()
            .collect();
        routed.sort();
        routed
    }
}

/// Consul lists typical services and ingress gateways, not the proxies themselves.
fn shown_kind(summary: &Summary) -> bool {
    matches!(summary.kind, "" | "ingress-gateway")
}

/// One `ServiceTopologySummary`: the summary, where it came from, its decision.
fn write_summary(w: &mut JsonWriter, summary: &Summary, side: &Side) {
    let key = fold(&summary.name);
    w.begin_object();
    summary.write_fields(w);
    w.field_str("Source", side.sources.get(&*key).copied().unwrap_or(""));
    side.decisions
        .get(&*key)
        .copied()
        .unwrap_or_default()
        .write(w);
    w.end_object();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ui::test_support::apply_registration;
    use crate::store::catalog::{Registration, ServiceRegistration};

    fn register(tables: &mut Tables, index: u64, id: &str, name: &str, proxy: Option<&str>) {
        let reg = Registration {
            node: "n1".into(),
            address: "10.0.0.1".into(),
            datacenter: "dc1".into(),
            service: Some(ServiceRegistration {
                kind: if proxy.is_some() {
                    "connect-proxy".into()
                } else {
                    String::new()
                },
                id: id.into(),
                name: name.into(),
                port: 80,
                proxy_json: proxy.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        };
        apply_registration(tables, index, reg);
    }

    fn topology(tables: &Tables, service: &str, default_allow: bool) -> serde_json::Value {
        let query = TopologyQuery {
            service: Arc::from(service),
            kind: TopologyKind::Typical,
            rows: RowFilter::default(),
            default_allow,
            datacenter: Arc::from("dc1"),
        };
        let mut body = Vec::new();
        let mut w = JsonWriter::new(&mut body, false);
        assert!(
            !query.write_topology(tables, &mut w),
            "nothing is hidden without ACLs"
        );
        w.finish();
        serde_json::from_slice(&body).unwrap()
    }

    fn names(list: &serde_json::Value) -> Vec<(String, String)> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["Name"].as_str().unwrap().into(),
                    s["Source"].as_str().unwrap().into(),
                )
            })
            .collect()
    }

    /// A transparent proxy dials what the intentions allow, so with an allowing default
    /// every other typical service is an upstream (`default-allow`), next to the one its
    /// registration names; a proxy that is not transparent gets only its registration's.
    #[test]
    fn transparent_proxies_reach_what_the_intentions_allow() {
        let mut tables = Tables::default();
        register(&mut tables, 1, "web-1", "web", None);
        register(&mut tables, 2, "api-1", "api", None);
        register(&mut tables, 3, "db-1", "db", None);
        register(&mut tables, 4, "consul", "consul", None);
        register(
            &mut tables,
            5,
            "web-1-sidecar-proxy",
            "web-sidecar-proxy",
            Some(
                r#"{"DestinationServiceName":"web","Mode":"transparent","Upstreams":[{"DestinationName":"db"},{"DestinationType":"prepared_query","DestinationName":"q"}]}"#,
            ),
        );
        let web = topology(&tables, "web", true);
        assert_eq!(web["TransparentProxy"], true, "{web}");
        assert_eq!(
            names(&web["Upstreams"]),
            [
                ("api".into(), "default-allow".into()),
                ("db".into(), "proxy-registration".into())
            ],
            "{web}"
        );
        // Denied by default: only the registration's upstream, and its decision says so.
        let web = topology(&tables, "web", false);
        assert_eq!(
            names(&web["Upstreams"]),
            [("db".into(), "proxy-registration".into())]
        );
        assert_eq!(web["Upstreams"][0]["Intention"]["Allowed"], false);
        // db sees web as a downstream through web's registration; api is no downstream of
        // anything (it has no proxy, so it cannot dial through the intentions).
        let db = topology(&tables, "db", true);
        assert_eq!(
            names(&db["Downstreams"]),
            [("web".into(), "proxy-registration".into())]
        );
        let api = topology(&tables, "api", true);
        assert_eq!(
            names(&api["Downstreams"]),
            [("web".into(), "default-allow".into())],
            "web's transparent proxy may dial api: {api}"
        );

        // The listing says web is transparent until one of its proxies is not.
        let listing = |tables: &Tables| {
            let mut hidden = false;
            crate::api::ui_summary::summarize_catalog(
                tables,
                None,
                &RowFilter::default(),
                &mut hidden,
            )
            .into_iter()
            .find(|s| s.name == "web")
            .map(|s| s.transparent_proxy_for_tests())
            .unwrap()
        };
        assert!(listing(&tables));
        register(
            &mut tables,
            6,
            "web-2-sidecar-proxy",
            "web-sidecar-proxy",
            Some(r#"{"destination_service_name":"web"}"#),
        );
        assert!(!listing(&tables));
    }
}
