//! `/v1/internal/ui/*`: the summaries the web UI reads, shaped as Consul answers them.
//!
//! - `services`: one `ServiceListingSummary` per service name (tags, nodes, instance count,
//!   check counts over the unique checks of its instances and their nodes, external sources),
//!   sorted by name; `?filter` applies to each instance as a `CheckServiceNode` before the
//!   summary is built, as Consul's `Internal.ServiceDump` does. A sidecar proxy's checks
//!   also count for the service it fronts (`ConnectedWithProxy`); the proxies keep their
//!   own summaries with their `Kind`, as in Consul, whose UI leaves them out of its list.
//! - `service-topology/<s>?kind=`: the service's upstreams and downstreams
//!   (`ui_topology.rs`).
//! - `nodes` and `node/<n>`: Consul's `NodeInfo` (the node with its services and checks);
//!   an unknown node is a 404 with an empty body.
//! - `catalog-overview`: Consul's `CatalogSummary` (nodes, services and checks by health).
//! - `exported-services`: an empty list until peering exists (it still wants `?peer`, as
//!   Consul's does).
//! - `gateway-services-nodes/<g>`: a summary of each service the gateway links, with the
//!   addresses an ingress gateway exposes it at; the `services` summaries mark services a
//!   gateway links (`ConnectedWithGateway`) and count each gateway's links.
//! - `metrics-proxy/…`: 404 unless `ui_config.metrics_proxy.base_url` is set.
//!
//! Every list is a blocking-capable [`Query`] at Consul's index for it (the highest of the
//! nodes, services and checks tables), watching what it read. Answers are gzip-compressed
//! when the client accepts gzip and the body is large enough to gain from it, as Consul
//! compresses its HTTP answers; the 1,000-service summary a browser loads shrinks about
//! tenfold. The per-service summaries themselves are built in `ui_summary.rs`, which the
//! topology endpoint shares.
//!
//! A client agent (or a request naming another datacenter) reads the rows with a typed call
//! instead (`api::rpc::client_ui`: `Internal.ServiceDump`, `GatewayServiceDump`,
//! `ServiceTopology`; `client_internal` for the nodes) and renders them with the functions
//! below that render the server's own answer ([`services_body`],
//! [`gateway_services_nodes_body`]), so the two answers cannot drift apart.

use super::authz::RowFilter;
use super::ui_summary::{bucket, summarize, summarize_catalog, Summary};
use super::ui_topology::{TopologyKind, TopologyQuery};
use super::{
    query_options, run_query, ApiError, Context, Outcome, Query, QueryMeta, QueryOptions, Reply,
    Request,
};
use crate::consul::filter::{self, Field, Filter, Kind, Schema};
use crate::consul::json::JsonWriter;
use crate::consul::render;
use crate::consul::rpc::internal::{CatalogSummary, HealthSummary as WireHealthSummary};
use crate::shard::watch::WatchSet;
use crate::store::catalog::read;
use crate::store::catalog::rows::fold;
use crate::store::catalog::{NodeEntry, Status};
use crate::store::{StoreVersion, Table, Tables};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::Arc;

/// Bodies shorter than this go out uncompressed: gzip's own framing eats the gain.
pub const UI_GZIP_BODY_BYTES_MIN: usize = 1024;

const fn field(name: &'static str, kind: Kind) -> Field {
    Field { name, kind }
}

/// `NodeInfo` (`/v1/internal/ui/nodes`, `node/<n>`).
pub const NODE_INFO: Schema = &[
    field("ID", Kind::Str),
    field("Node", Kind::Str),
    field("Address", Kind::Str),
    field("TaggedAddresses", Kind::StrMap),
    field("Meta", Kind::StrMap),
    field("Services", Kind::StructList(filter::NODE_SERVICE)),
    field("Checks", Kind::StructList(filter::HEALTH_CHECK)),
];

/// Whether the request accepts a gzip-coded answer (`Accept-Encoding: gzip`, not `q=0`).
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    let Some(header) = accept_encoding else {
        return false;
    };
    header.split(',').any(|item| {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim();
        // `q=0` (in any spelling of zero) marks the coding as not acceptable.
        let refused = parts.any(|p| {
            let p = p.trim();
            p.strip_prefix("q=")
                .or_else(|| p.strip_prefix("Q="))
                .is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|v| v <= 0.0))
        });
        (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
    })
}

/// Sends a JSON body with the query's headers, gzip-coded when `gzip` and worth it.
fn send_json(reply: &mut Reply, meta: QueryMeta, body: &[u8], gzip: bool) {
    send_filtered_json(reply, meta, body, gzip, &RowFilter::default(), false);
}

/// [`send_json`] for an answer the token's row filter went over.
fn send_filtered_json(
    reply: &mut Reply,
    meta: QueryMeta,
    body: &[u8],
    gzip: bool,
    rows: &RowFilter,
    hidden: bool,
) {
    let mut headers = Vec::with_capacity(200);
    meta.write_headers(&mut headers);
    rows.write_header(hidden, &mut headers);
    send_with_headers(reply, headers, body, gzip);
}

/// Sends a UI answer's JSON `body` after `headers` (the query's), gzip-coded when `gzip`
/// and worth it: what a server's handler and a client agent's typed read both answer.
pub fn send_with_headers(reply: &mut Reply, mut headers: Vec<u8>, body: &[u8], gzip: bool) {
    headers.extend_from_slice(b"Vary: Accept-Encoding\r\n");
    if gzip && body.len() >= UI_GZIP_BODY_BYTES_MIN {
        // Fast compression: these bodies are rendered per request, and level 1 already
        // takes repetitive JSON to about a tenth.
        let mut encoder = flate2::write::GzEncoder::new(
            Vec::with_capacity(body.len() / 6),
            flate2::Compression::fast(),
        );
        encoder
            .write_all(body)
            .expect("compressing into memory cannot fail");
        let compressed = encoder
            .finish()
            .expect("compressing into memory cannot fail");
        headers.extend_from_slice(b"Content-Encoding: gzip\r\n");
        reply.send(200, Some("application/json"), &headers, &compressed);
    } else {
        reply.send(200, Some("application/json"), &headers, body);
    }
}

/// Consul's index for the UI's catalog summaries: the highest of the three catalog tables.
pub(crate) fn catalog_index(tables: &Tables) -> u64 {
    tables.max_table_index(&[Table::Nodes, Table::Services, Table::Checks])
}

pub(crate) fn catalog_tables_watch() -> WatchSet {
    WatchSet::new()
        .table(Table::Nodes)
        .table(Table::Services)
        .table(Table::Checks)
}

/// `GET /v1/internal/ui/services`.
struct ServicesQuery {
    /// Instances whose node or service the token may not read are left out.
    rows: RowFilter,
    filter: Option<Filter>,
    /// `?peer=`: no peering exists, so an imported view is always empty.
    peer: bool,
    gzip: bool,
}

impl Query for ServicesQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        // Gateways' links show as `ConnectedWithGateway` and `AssociatedServiceCount`.
        (
            catalog_index(tables).max(tables.table_index(Table::GatewayServices)),
            catalog_tables_watch().table(Table::GatewayServices),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let mut hidden = false;
        let (summaries, links) = if self.peer {
            (Vec::new(), Vec::new())
        } else {
            (
                summarize_catalog(tables, self.filter.as_ref(), &self.rows, &mut hidden),
                readable_links(tables.gateways.rows.values(), &self.rows, &mut hidden),
            )
        };
        let body = services_body(summaries, &links, reply.pretty);
        send_filtered_json(reply, meta, &body, self.gzip, &self.rows, hidden);
    }
}

/// The gateway-service rows a services list marks its summaries with: all but the
/// wildcard ones, and only those whose gateway and service the token may read (`hidden`
/// says whether some were left out), as Consul filters `IndexedNodesWithGateways`'
/// `Gateways`. What a server's `/v1/internal/ui/services` and `Internal.ServiceDump` share.
pub fn readable_links<'t>(
    rows: impl Iterator<Item = &'t Arc<crate::store::gateways::GatewayService>>,
    filter: &RowFilter,
    hidden: &mut bool,
) -> Vec<&'t crate::store::gateways::GatewayService> {
    rows.filter(|row| *fold(&row.service) != *crate::store::gateways::WILDCARD)
        .filter(|row| {
            let shown = filter.service(&row.gateway) && filter.service(&row.service);
            *hidden |= !shown;
            shown
        })
        .map(|row| &**row)
        .collect()
}

/// `/v1/internal/ui/services`' body: the summaries, marked with the gateway `links`, as
/// Consul's `ServiceListingSummary` list. A server's handler and a client agent's typed
/// read (`Internal.ServiceDump`) both render it here.
pub fn services_body(
    mut summaries: Vec<Summary<'_>>,
    links: &[&crate::store::gateways::GatewayService],
    pretty: bool,
) -> Vec<u8> {
    add_gateway_links(links, &mut summaries);
    let mut body = Vec::with_capacity(64 + summaries.len() * 320);
    let mut w = JsonWriter::new(&mut body, pretty);
    w.begin_array();
    for summary in &summaries {
        debug_assert!(summary.instances > 0 || summary.connected_with_proxy);
        summary.write(&mut w);
    }
    w.end_array();
    w.finish();
    body
}

/// Writes one `NodeInfo`: the node, its services and all its checks — those the token may
/// read (Consul's node dump filter).
fn node_info(w: &mut JsonWriter, entry: &NodeEntry, rows: &RowFilter) {
    write_node_info(
        w,
        entry.node(),
        entry
            .services
            .values()
            .filter(|service| rows.service(&service.name))
            .map(|service| &**service),
        entry
            .checks
            .values()
            .filter(|check| rows.service(&check.service_name))
            .map(|check| &**check),
    );
}

/// Writes one `NodeInfo` of the rows given (those the token may read): what the UI's node
/// answers show, whether read here or from a server's `Internal.NodeDump`.
pub fn write_node_info<'r>(
    w: &mut JsonWriter,
    node: &crate::store::catalog::Node,
    services: impl Iterator<Item = &'r crate::store::catalog::ServiceInstance>,
    checks: impl Iterator<Item = &'r crate::store::catalog::HealthCheck>,
) {
    w.begin_object();
    w.field_str("ID", &node.id);
    w.field_str("Node", &node.name);
    w.field_str("Address", &node.address);
    if node.tagged_addresses.is_empty() {
        w.field_null("TaggedAddresses");
    } else {
        w.field_object("TaggedAddresses");
        for (k, v) in node.tagged_addresses.iter() {
            w.field_str(k, v);
        }
        w.end_object();
    }
    w.field_object("Meta");
    for (k, v) in node.meta.iter() {
        w.field_str(k, v);
    }
    w.end_object();
    w.field_array("Services");
    for service in services {
        render::node_service(w, service);
    }
    w.end_array();
    w.field_array("Checks");
    for check in checks {
        render::health_check(w, check);
    }
    w.end_array();
    w.end_object();
}

fn node_info_matches(filter: Option<&Filter>, entry: &NodeEntry, rows: &RowFilter) -> bool {
    filter.is_none_or(|f| f.matches(&render::as_value(|w| node_info(w, entry, rows))))
}

/// Whether the token may read only part of a node's rows.
fn node_partly_hidden(entry: &NodeEntry, rows: &RowFilter) -> bool {
    entry.services.values().any(|s| !rows.service(&s.name))
        || entry
            .checks
            .values()
            .any(|c| !rows.service(&c.service_name))
}

/// `GET /v1/internal/ui/nodes`.
struct NodesQuery {
    rows: RowFilter,
    filter: Option<Filter>,
    gzip: bool,
}

impl Query for NodesQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (catalog_index(tables), catalog_tables_watch())
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let mut body = Vec::with_capacity(64 + tables.catalog.nodes.len() * 1024);
        let mut w = JsonWriter::new(&mut body, reply.pretty);
        let mut hidden = false;
        w.begin_array();
        for entry in tables.catalog.nodes.values() {
            if !self.rows.node(&entry.node().name) {
                hidden = true;
                continue;
            }
            hidden |= node_partly_hidden(entry, &self.rows);
            if node_info_matches(self.filter.as_ref(), entry, &self.rows) {
                node_info(&mut w, entry, &self.rows);
            }
        }
        w.end_array();
        w.finish();
        send_filtered_json(reply, meta, &body, self.gzip, &self.rows, hidden);
    }
}

/// `GET /v1/internal/ui/node/<n>`.
struct NodeQuery {
    node: Arc<str>,
    folded: Arc<str>,
    gzip: bool,
    /// A node the token may not read answers as an unknown one.
    rows: RowFilter,
}

impl Query for NodeQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            catalog_index(tables),
            WatchSet::new()
                .key(Table::Nodes, self.folded.clone())
                .key(Table::NodeServices, self.folded.clone())
                .key(Table::Checks, self.folded.clone()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let found = tables.catalog.node(&self.node);
        let Some(entry) = found.filter(|e| self.rows.node(&e.node().name)) else {
            // Consul answers an unknown node with a bare 404. The index still tells a
            // blocking client where to wait for the node to appear.
            let mut headers = Vec::with_capacity(160);
            meta.write_headers(&mut headers);
            reply.send(404, None, &headers, b"");
            return;
        };
        let mut body = Vec::with_capacity(2048);
        let mut w = JsonWriter::new(&mut body, reply.pretty);
        node_info(&mut w, entry, &self.rows);
        w.finish();
        let hidden = node_partly_hidden(entry, &self.rows);
        send_filtered_json(reply, meta, &body, self.gzip, &self.rows, hidden);
    }
}

/// Consul's `HealthSummary`: a total and its passing / warning / critical split.
#[derive(Default)]
struct HealthSummary {
    total: u64,
    counts: [u64; 3],
}

impl HealthSummary {
    fn add(&mut self, status: Status) {
        self.total += 1;
        self.counts[bucket(status)] += 1;
    }

    fn named(&self, name: &str) -> WireHealthSummary {
        WireHealthSummary {
            name: name.to_string(),
            total: self.total,
            passing: self.counts[0],
            warning: self.counts[1],
            critical: self.counts[2],
        }
    }
}

/// The worst of some statuses, passing when there are none (maintenance is critical).
fn worst(statuses: impl Iterator<Item = Status>) -> Status {
    statuses
        .max_by_key(|s| bucket(*s))
        .map(|s| match s {
            Status::Maintenance => Status::Critical,
            other => other,
        })
        .unwrap_or(Status::Passing)
}

/// `GET /v1/internal/ui/catalog-overview`: Consul's `CatalogSummary`. A node's health is its
/// worst node-level check; an instance's, its worst own check (node checks aside, as Consul
/// computes it); checks are summarized by name.
pub(crate) struct OverviewQuery;

impl Query for OverviewQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (catalog_index(tables), catalog_tables_watch())
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let body = overview_body(&catalog_summary(tables), reply.pretty);
        send_json(reply, meta, &body, false);
    }
}

/// The catalog's summary, as `Internal.CatalogOverview` carries it and the overview shows.
pub(crate) fn catalog_summary(tables: &StoreVersion) -> CatalogSummary {
    let mut nodes = HealthSummary::default();
    let mut services: BTreeMap<&str, HealthSummary> = BTreeMap::new();
    let mut checks: BTreeMap<&str, HealthSummary> = BTreeMap::new();
    for entry in tables.catalog.nodes.values() {
        nodes.add(worst(entry.node_checks().iter().map(|c| c.status)));
        for check in entry.checks.values() {
            checks.entry(&check.name).or_default().add(check.status);
        }
    }
    for group in tables.catalog.services.values() {
        for view in group.instances.values() {
            services
                .entry(&view.service.name)
                .or_default()
                .add(worst(view.checks().iter().map(|c| c.status)));
        }
    }
    let named = |list: BTreeMap<&str, HealthSummary>| -> Vec<WireHealthSummary> {
        list.into_iter()
            .map(|(name, summary)| summary.named(name))
            .collect()
    };
    CatalogSummary {
        // One summary of every node, none without nodes (Consul's nil list).
        nodes: (nodes.total > 0)
            .then(|| nodes.named(""))
            .into_iter()
            .collect(),
        services: named(services),
        checks: named(checks),
    }
}

/// The overview's JSON body: on a server from its store, on a client agent from the
/// `Internal.CatalogOverview` reply.
pub(crate) fn overview_body(summary: &CatalogSummary, pretty: bool) -> Vec<u8> {
    let mut body = Vec::with_capacity(256 + (summary.services.len() + summary.checks.len()) * 96);
    let mut w = JsonWriter::new(&mut body, pretty);
    w.begin_object();
    for (name, list) in [
        ("Nodes", &summary.nodes),
        ("Services", &summary.services),
        ("Checks", &summary.checks),
    ] {
        // Go's nil slices: a list with nothing in it is null.
        if list.is_empty() {
            w.field_null(name);
            continue;
        }
        w.field_array(name);
        for item in list {
            w.begin_object();
            if !item.name.is_empty() {
                w.field_str("Name", &item.name);
            }
            w.field_u64("Total", item.total);
            w.field_u64("Passing", item.passing);
            w.field_u64("Warning", item.warning);
            w.field_u64("Critical", item.critical);
            w.end_object();
        }
        w.end_array();
    }
    w.end_object();
    w.finish();
    body
}

/// Marks the services a gateway with an instance links (`ConnectedWithGateway`) and counts
/// each gateway's linked services (`AssociatedServiceCount`), from the gateway-services
/// rows (wildcard rows left out), as Consul's services summary does.
fn add_gateway_links(
    links: &[&crate::store::gateways::GatewayService],
    summaries: &mut [Summary<'_>],
) {
    if links.is_empty() {
        return;
    }
    let position: HashMap<String, usize> = summaries
        .iter()
        .enumerate()
        .map(|(i, s)| (fold(&s.name).into_owned(), i))
        .collect();
    for row in links {
        let (gateway, service) = (fold(&row.gateway), fold(&row.service));
        if *service == *crate::store::gateways::WILDCARD {
            continue;
        }
        let gateway_has_instances = position
            .get(&*gateway)
            .is_some_and(|&i| summaries[i].instances > 0);
        if let Some(&i) = position.get(&*gateway) {
            summaries[i].associated_service_count += 1;
        }
        if let Some(&i) = position.get(&*service) {
            summaries[i].connected_with_gateway |= gateway_has_instances;
        }
    }
}

/// `gateway-services-nodes/<g>`: one summary per service the gateway links (those the token
/// may read), with the instances and checks of each; for an ingress gateway each summary
/// carries the `host:port` addresses clients reach the service at — its `Hosts`, else
/// `<service>.ingress.<dc>.<domain>` for the DNS domain and the alternate one (Consul's
/// `GatewayServiceDump` summarized).
struct GatewayServicesNodesQuery {
    gateway: Arc<str>,
    datacenter: String,
    domains: Vec<String>,
    rows: RowFilter,
    gzip: bool,
}

impl Query for GatewayServicesNodesQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        gateway_services_nodes_read(tables, &self.gateway)
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let mut hidden = false;
        let (links, instances) = gateway_dump(tables, &self.gateway, &self.rows, &mut hidden);
        let instances = instances.into_iter().flat_map(|(_, rows)| rows);
        let body = gateway_services_nodes_body(
            &links,
            instances,
            &self.datacenter,
            &self.domains,
            reply.pretty,
        );
        send_filtered_json(reply, meta, &body, self.gzip, &self.rows, hidden);
    }
}

/// The index and watches of a gateway's linked services (`gateway-services-nodes/<g>`,
/// `Internal.GatewayServiceDump`): the gateway's rows and each linked service's instances.
pub fn gateway_services_nodes_read(tables: &Tables, gateway: &str) -> (u64, WatchSet) {
    use crate::store::gateways;
    let mut index = gateways::gateway_index(tables, gateway);
    let mut watch = WatchSet::new().key(Table::GatewayServices, gateways::gateway_key(gateway));
    for row in gateways::gateway_rows(tables, gateway) {
        index = index.max(read::service_index(tables, &row.service));
        watch = watch.key(Table::ServiceIndex, Arc::<str>::from(&*fold(&row.service)));
    }
    (index, watch)
}

/// The readable instances of one linked service (by its folded name).
pub type LinkedInstances<'t> = (String, Vec<read::CheckServiceNode<'t>>);

/// What a gateway's dump holds: the links the token may read (the gateway's rows, in
/// order) and the instances the token may read of each linked service, once per service
/// name; `hidden` says whether anything was left out. What a server's
/// `gateway-services-nodes/<g>` and `Internal.GatewayServiceDump` share.
pub fn gateway_dump<'t>(
    tables: &'t Tables,
    gateway: &str,
    rows: &RowFilter,
    hidden: &mut bool,
) -> (
    Vec<&'t crate::store::gateways::GatewayService>,
    Vec<LinkedInstances<'t>>,
) {
    let links: Vec<&crate::store::gateways::GatewayService> =
        crate::store::gateways::gateway_rows(tables, gateway)
            .into_iter()
            .filter(|row| {
                let shown = rows.service(&row.service);
                *hidden |= !shown;
                shown
            })
            .map(|row| &**row)
            .collect();
    let mut instances: Vec<LinkedInstances<'t>> = Vec::new();
    for link in &links {
        let name = fold(&link.service).into_owned();
        if instances.iter().any(|(seen, _)| *seen == name) {
            continue;
        }
        let shown = tables
            .catalog
            .services
            .get(name.as_str())
            .into_iter()
            .flat_map(read::check_service_nodes_of_group)
            .filter(|row| {
                let shown = rows.node_service(&row.node.name, &row.service.name);
                *hidden |= !shown;
                shown
            })
            .collect();
        instances.push((name, shown));
    }
    (links, instances)
}

/// `gateway-services-nodes/<g>`'s body: one summary per linked service over its
/// `instances` (already filtered by the token), with the addresses an ingress gateway's
/// `links` expose it at (`<service>.ingress.<datacenter>.<domain>` for each of `domains`
/// when a link names no hosts). A server's handler and a client agent's typed read
/// (`Internal.GatewayServiceDump`) both render it here.
pub fn gateway_services_nodes_body<'a>(
    links: &[&crate::store::gateways::GatewayService],
    instances: impl Iterator<Item = read::CheckServiceNode<'a>>,
    datacenter: &str,
    domains: &[String],
    pretty: bool,
) -> Vec<u8> {
    let mut hidden = false;
    let mut summaries = summarize(instances, None, &RowFilter::default(), &mut hidden);
    debug_assert!(!hidden, "the instances were filtered before");
    for row in links {
        let folded = fold(&row.service);
        let position = summaries.iter().position(|s| fold(&s.name) == folded);
        let summary = match position {
            Some(i) => &mut summaries[i],
            None => {
                summaries.push(Summary {
                    name: row.service.to_string(),
                    ..Summary::default()
                });
                summaries.last_mut().expect("just pushed")
            }
        };
        if row.port == 0 {
            continue;
        }
        let defaults: Vec<String> = domains
            .iter()
            .map(|domain| format!("{}.ingress.{datacenter}.{domain}", row.service))
            .collect();
        let hosts: Vec<&str> = if row.hosts.is_empty() {
            defaults.iter().map(|h| &**h).collect()
        } else {
            row.hosts.iter().map(|h| &**h).collect()
        };
        for host in hosts {
            let address = format!("{}:{}", host.trim_end_matches('.'), row.port);
            if !summary.gateway_addresses.contains(&address) {
                summary.gateway_addresses.push(address);
            }
        }
    }
    summaries.sort_by(|a, b| a.name.cmp(&b.name));
    let mut body = Vec::with_capacity(64 + summaries.len() * 320);
    let mut w = JsonWriter::new(&mut body, pretty);
    w.begin_array();
    for summary in &summaries {
        summary.write(&mut w);
    }
    w.end_array();
    w.finish();
    body
}

/// The DNS domains an ingress gateway's default addresses use: the domain and the
/// alternate one, without their dots.
pub fn ingress_domains(config: &crate::config::AgentConfig) -> Vec<String> {
    std::iter::once(&config.dns.domain)
        .chain(config.dns.alt_domain.as_ref())
        .filter(|d| !d.is_empty())
        .map(|d| d.trim_matches('.').to_string())
        .collect()
}

/// `exported-services`: empty until peering exists, at the services table's index so that
/// a blocking client waits rather than spins.
/// `exported-services`: nothing is exported to a peer's UI listing here, so the list is
/// empty, at the services table's index.
struct EmptyListQuery;

/// The read behind the exported-services list (here and `Internal.ExportedServicesForPeer`).
pub(crate) fn exported_services_read(tables: &Tables) -> (u64, WatchSet) {
    (
        read::services_index(tables),
        WatchSet::new().table(Table::Services),
    )
}

impl Query for EmptyListQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        exported_services_read(tables)
    }

    fn respond(&self, _tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        send_json(
            reply,
            meta,
            &exported_services_body(&[], reply.pretty),
            false,
        );
    }
}

/// `exported-services`' `?peer`, which Consul requires.
pub(crate) fn exported_services_peer<'r>(request: &'r Request) -> Result<&'r str, ApiError> {
    match request.query.get("peer") {
        Some(peer) if !peer.is_empty() => Ok(peer),
        _ => Err(ApiError::Internal("must provide PeerName".to_string())),
    }
}

/// The exported-services list: each service exported to the peer, by name.
pub(crate) fn exported_services_body(names: &[String], pretty: bool) -> Vec<u8> {
    let mut body = Vec::with_capacity(16 + names.len() * 32);
    let mut w = JsonWriter::new(&mut body, pretty);
    w.begin_array();
    for name in names {
        w.begin_object();
        w.field_str("Name", name);
        w.end_object();
    }
    w.end_array();
    w.finish();
    body
}

fn parse_filter(request: &Request, schema: Schema) -> Result<Option<Filter>, ApiError> {
    super::catalog::parse_filter(request, schema)
}

/// `/v1/internal/ui/metrics-proxy/…`: Consul's answers when no proxy is configured.
pub fn metrics_proxy(ctx: &Context) -> Result<Outcome, ApiError> {
    let ui = &ctx.config().ui;
    if !ui.serves() {
        return Err(ApiError::NotFound("UI is not enabled".to_string()));
    }
    if ui.metrics_proxy.base_url.is_empty() {
        return Err(ApiError::NotFound(
            "Metrics proxy is not enabled".to_string(),
        ));
    }
    // Configured but not implemented: the agent warned about it at startup.
    Err(ApiError::Status(
        501,
        "praetor does not proxy metrics yet: ui_config.metrics_proxy is not served".to_string(),
    ))
}

/// `GET /v1/internal/ui/<what>`; a `<what>` Consul does not serve is a 404.
pub fn handle(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let rest = request.rest;
    let known = matches!(
        rest,
        "services" | "nodes" | "catalog-overview" | "exported-services" | "metrics-proxy"
    ) || rest.starts_with("node/")
        || rest.starts_with("service-topology/")
        || rest.starts_with("gateway-services-nodes/")
        || rest.starts_with("metrics-proxy/");
    if !known {
        return Err(ApiError::NotFound(format!(
            "404 page not found: {}",
            request.path
        )));
    }
    if rest == "metrics-proxy" || rest.starts_with("metrics-proxy/") {
        return metrics_proxy(ctx);
    }
    let options = query_options(ctx, &request.query)?;
    let gzip = accepts_gzip(request.header("Accept-Encoding"));
    match rest {
        "services" if ctx.reads_by_call(&options) => {
            super::rpc::client_ui::services(ctx, request, options, "")
        }
        "services" => {
            let query = ServicesQuery {
                rows: RowFilter::of(request),
                filter: parse_filter(request, filter::CHECK_SERVICE_NODE)?,
                peer: request.query.get("peer").is_some_and(|p| !p.is_empty()),
                gzip,
            };
            run_query(ctx, query, options, reply)
        }
        "nodes" if ctx.reads_by_call(&options) => {
            parse_filter(request, NODE_INFO)?;
            Ok(super::rpc::client_internal::ui_nodes(
                ctx, request, None, options, "",
            ))
        }
        "nodes" => {
            let query = NodesQuery {
                rows: RowFilter::of(request),
                filter: parse_filter(request, NODE_INFO)?,
                gzip,
            };
            run_query(ctx, query, options, reply)
        }
        "catalog-overview" if ctx.reads_by_call(&options) => Ok(
            super::rpc::client_ui::catalog_overview(ctx, request, options, ""),
        ),
        "catalog-overview" => {
            // Consul's overview counts everything, so it needs `operator:read`.
            if let Some(authz) = request.acl.get() {
                authz.require(authz.authorizer.operator_read())?;
            }
            run_query(ctx, OverviewQuery, options, reply)
        }
        "exported-services" => {
            let peer = exported_services_peer(request)?;
            if ctx.reads_by_call(&options) {
                return Ok(super::rpc::client_ui::exported_services(
                    ctx, request, peer, options, "",
                ));
            }
            run_query(ctx, EmptyListQuery, options, reply)
        }
        _ => {
            if let Some(name) = rest.strip_prefix("service-topology/") {
                return service_topology(ctx, request, name, options, reply);
            }
            if let Some(name) = rest.strip_prefix("node/") {
                if name.is_empty() {
                    return Err(ApiError::bad_request("Missing node name"));
                }
                if ctx.reads_by_call(&options) {
                    return Ok(super::rpc::client_internal::ui_nodes(
                        ctx,
                        request,
                        Some(name),
                        options,
                        "",
                    ));
                }
                let query = NodeQuery {
                    node: Arc::from(name),
                    folded: Arc::from(&*fold(name)),
                    gzip,
                    rows: RowFilter::of(request),
                };
                return run_query(ctx, query, options, reply);
            }
            let gateway = rest
                .strip_prefix("gateway-services-nodes/")
                .expect("route admits only known paths");
            gateway_services_nodes(ctx, request, gateway, options, reply)
        }
    }
}

/// `GET /v1/internal/ui/service-topology/<name>`: Consul's topology needs service:read on
/// the service itself; the rows of its neighbours are filtered one by one.
fn service_topology(
    ctx: &Context,
    request: &Request,
    name: &str,
    options: QueryOptions,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if name.is_empty() {
        return Err(ApiError::bad_request("Missing service name"));
    }
    let kind = TopologyKind::parse(request.query.get("kind"))?;
    if let Some(authz) = request.acl.get() {
        authz.require(authz.authorizer.service_read(name))?;
    }
    if ctx.reads_by_call(&options) {
        return Ok(super::rpc::client_ui::service_topology(
            ctx, request, name, kind, options, "",
        ));
    }
    let query = TopologyQuery {
        service: Arc::from(name),
        kind,
        rows: RowFilter::of(request),
        default_allow: super::intentions::default_allow(ctx),
        datacenter: Arc::from(ctx.config().datacenter.as_str()),
    };
    run_query(ctx, query, options, reply)
}

/// `GET /v1/internal/ui/gateway-services-nodes/<gateway>`: Consul's `GatewayServiceDump`
/// needs `service:read` on the gateway.
fn gateway_services_nodes(
    ctx: &Context,
    request: &Request,
    gateway: &str,
    options: QueryOptions,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if gateway.is_empty() {
        return Err(ApiError::bad_request("Missing gateway name"));
    }
    if let Some(authz) = request.acl.get() {
        authz.require(authz.authorizer.service_read(gateway))?;
    }
    if ctx.reads_by_call(&options) {
        return Ok(super::rpc::client_ui::gateway_services_nodes(
            ctx, request, gateway, options, "",
        ));
    }
    let config = ctx.config();
    let domains = ingress_domains(config);
    let query = GatewayServicesNodesQuery {
        gateway: Arc::from(gateway),
        datacenter: config.datacenter.clone(),
        domains,
        rows: RowFilter::of(request),
        gzip: accepts_gzip(request.header("Accept-Encoding")),
    };
    run_query(ctx, query, options, reply)
}

/// What the unit tests of the UI's endpoints share: writing a registration into a store.
#[cfg(test)]
pub(super) mod test_support {
    use crate::store::catalog::{CatalogOp, Registration};
    use crate::store::{Command, Tables};

    /// Applies `registration` to `tables` at `index`, as the Raft apply would.
    pub fn apply_registration(tables: &mut Tables, index: u64, registration: Registration) {
        let mut changes = Vec::new();
        tables.apply(
            index,
            &Command::Catalog(CatalogOp::Register(Box::new(registration))),
            &mut changes,
        );
        assert!(!changes.is_empty(), "the registration changed the catalog");
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::apply_registration;
    use super::*;
    use crate::store::catalog::{CheckRegistration, Registration, ServiceRegistration};

    fn register(
        tables: &mut Tables,
        index: u64,
        node: &str,
        service: &str,
        id: &str,
        status: &str,
    ) {
        let reg = Registration {
            node: node.into(),
            address: "10.0.0.1".into(),
            datacenter: "dc1".into(),
            service: Some(ServiceRegistration {
                id: id.into(),
                name: service.into(),
                tags: vec![format!("t-{id}"), "shared".into()],
                meta: vec![(
                    crate::api::ui_summary::META_EXTERNAL_SOURCE.into(),
                    "kubernetes".into(),
                )],
                port: 80,
                ..Default::default()
            }),
            checks: vec![CheckRegistration {
                check_id: format!("check-{id}"),
                name: format!("{service} alive"),
                status: status.into(),
                service_id: id.into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        apply_registration(tables, index, reg);
    }

    fn node_check(tables: &mut Tables, index: u64, node: &str, status: &str) {
        let reg = Registration {
            node: node.into(),
            address: "10.0.0.1".into(),
            datacenter: "dc1".into(),
            checks: vec![CheckRegistration {
                check_id: "serfHealth".into(),
                name: "Serf Health Status".into(),
                status: status.into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        apply_registration(tables, index, reg);
    }

    fn summaries_json(tables: &Tables, filter: Option<&Filter>) -> serde_json::Value {
        let summaries = summarize_catalog(tables, filter, &RowFilter::default(), &mut false);
        let mut body = Vec::new();
        let mut w = JsonWriter::new(&mut body, false);
        w.begin_array();
        for s in &summaries {
            s.write(&mut w);
        }
        w.end_array();
        w.finish();
        serde_json::from_slice(&body).unwrap()
    }

    #[test]
    fn service_summaries_count_unique_checks_per_node_and_sort_by_name() {
        let mut tables = Tables::default();
        node_check(&mut tables, 1, "n1", "passing");
        node_check(&mut tables, 2, "n2", "warning");
        register(&mut tables, 3, "n1", "web", "web-1", "passing");
        register(&mut tables, 4, "n1", "web", "web-2", "critical");
        register(&mut tables, 5, "n2", "web", "web-3", "passing");
        register(&mut tables, 6, "n2", "api", "api-1", "passing");
        let json = summaries_json(&tables, None);
        let list = json.as_array().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0]["Name"], "api");
        let web = &list[1];
        assert_eq!(web["Name"], "web");
        assert_eq!(web["InstanceCount"], 3);
        assert_eq!(web["Nodes"], serde_json::json!(["n1", "n2"]));
        assert_eq!(
            web["Tags"],
            serde_json::json!(["shared", "t-web-1", "t-web-2", "t-web-3"])
        );
        assert_eq!(web["ExternalSources"], serde_json::json!(["kubernetes"]));
        // Three service checks plus each node's serfHealth once, however many instances
        // the node runs.
        assert_eq!(web["ChecksPassing"], 3, "{web}");
        assert_eq!(web["ChecksWarning"], 1);
        assert_eq!(web["ChecksCritical"], 1);
        assert_eq!(web["Datacenter"], "dc1");
        assert!(web.get("Kind").is_none(), "Kind is omitted when empty");
        assert_eq!(web["GatewayConfig"], serde_json::json!({}));
        assert_eq!(web["ConnectedWithProxy"], false);
    }

    #[test]
    fn service_filters_apply_to_instances_before_summarizing() {
        let mut tables = Tables::default();
        register(&mut tables, 1, "n1", "web", "web-1", "passing");
        register(&mut tables, 2, "n2", "web", "web-2", "critical");
        register(&mut tables, 3, "n2", "db", "db-1", "passing");
        let filter = Filter::parse("Node.Node == n2", filter::CHECK_SERVICE_NODE)
            .unwrap()
            .unwrap();
        let json = summaries_json(&tables, Some(&filter));
        let list = json.as_array().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[1]["Name"], "web");
        assert_eq!(list[1]["InstanceCount"], 1);
        assert_eq!(list[1]["ChecksCritical"], 1);
        assert_eq!(list[1]["ChecksPassing"], 0);
        let none = Filter::parse("Service.Service == nothing", filter::CHECK_SERVICE_NODE)
            .unwrap()
            .unwrap();
        assert_eq!(summaries_json(&tables, Some(&none)), serde_json::json!([]));
    }

    #[test]
    fn gzip_acceptance_follows_the_header_and_its_weights() {
        for (header, accepted) in [
            (None, false),
            (Some("gzip"), true),
            (Some("deflate, gzip;q=1.0, *;q=0.5"), true),
            (Some("br, GZIP"), true),
            (Some("*"), true),
            (Some("gzip;q=0"), false),
            (Some("gzip; q=0.000"), false),
            (Some("identity"), false),
            (Some("deflate, br"), false),
        ] {
            assert_eq!(accepts_gzip(header), accepted, "{header:?}");
        }
    }
}
