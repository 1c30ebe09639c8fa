//! `/v1/catalog/*`: register and deregister, and the blocking-capable reads of nodes and
//! services, with Consul's parameters (`tag` repeatable, `node-meta`, `filter`, `near`
//! accepted) and answers.
//!
//! Every read is a [`Query`] whose `WatchSet` names exactly what it depends on: one service's
//! index key for service queries, one node's keys for node queries, the table for lists.

use super::agent_cache;
use super::authz::RowFilter;
use super::peer::{self, Empty};
use super::rpc::client_catalog;
use super::{query_options, ApiError, Context, Outcome, Query, QueryMeta, Reply, Request, WriteOp};
use crate::consul::bodies;
use crate::consul::body::{parse_strict, Obj};
use crate::consul::filter::{self, Filter};
use crate::consul::json::JsonWriter;
use crate::consul::registration::{parse_registration, PEER_REGISTRATION_REFUSED};
use crate::consul::render;
use crate::shard::watch::WatchSet;
use crate::store::catalog::read;
use crate::store::catalog::rows::fold;
use crate::store::catalog::{CatalogOp, InstanceView};
use crate::store::gateways::GatewayKind;
use crate::store::{CatalogResult, StoreVersion, Table, Tables};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;
use std::sync::Arc;

/// `true` or the store's refusal, as Consul answers catalog writes.
fn write_result(op: CatalogOp) -> WriteOp {
    WriteOp::catalog(op, |result, reply| match result {
        CatalogResult::Written => reply.json_bool(true),
        CatalogResult::Refused(reason) => reply.error(&ApiError::Internal(reason)),
    })
}

/// The other datacenter a catalog write goes to: `?dc=` (`query`, already known to be
/// another one), else the body's `Datacenter` when it names another, as Consul forwards
/// the write there.
fn target_datacenter(ctx: &Context, query: Option<&str>, body: &str) -> Option<String> {
    if let Some(datacenter) = query {
        return Some(datacenter.to_string());
    }
    (!body.is_empty() && !body.eq_ignore_ascii_case(&ctx.config().datacenter))
        .then(|| body.to_ascii_lowercase())
}

/// A catalog write's outcome: here, or as `Catalog.Register` / `Deregister` naming the
/// other datacenter (a client agent's server, or this server, hands it there).
fn write_in(
    ctx: &Context,
    request: &Request,
    op: CatalogOp,
    datacenter: Option<String>,
) -> Outcome {
    match datacenter {
        None => Outcome::Write(write_result(op)),
        Some(datacenter) => {
            super::rpc::client::catalog_write_in(ctx, request, write_result(op), &datacenter)
        }
    }
}

/// `PUT /v1/catalog/register`.
pub fn register(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    crate::telemetry::incr(crate::consul::metrics::Counter::CatalogRegisterRequests);
    super::check_datacenter(ctx, &request.query)?;
    register_in(ctx, request, None)
}

/// A registration, in `datacenter` when the request names another one (`?dc=`): the body
/// parsed and checked as here, the write made there.
pub fn register_in(
    ctx: &Context,
    request: &Request,
    datacenter: Option<&str>,
) -> Result<Outcome, ApiError> {
    let mut registration =
        parse_registration(request.body, &ctx.config().datacenter).map_err(|e| {
            if e == PEER_REGISTRATION_REFUSED {
                ApiError::Internal(e)
            } else {
                ApiError::bad_request(format!("Request decode failed: {e}"))
            }
        })?;
    let target = target_datacenter(ctx, datacenter, &registration.datacenter);
    if let Some(target) = &target {
        // The request names the datacenter that serves it, as Consul's agent fills it.
        registration.datacenter = target.clone();
    }
    Ok(write_in(
        ctx,
        request,
        CatalogOp::Register(Box::new(registration)),
        target,
    ))
}

/// `PUT /v1/catalog/deregister`.
pub fn deregister(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    crate::telemetry::incr(crate::consul::metrics::Counter::CatalogDeregisterRequests);
    super::check_datacenter(ctx, &request.query)?;
    deregister_in(ctx, request, None)
}

/// A deregistration, in `datacenter` when the request names another one (`?dc=`).
pub fn deregister_in(
    ctx: &Context,
    request: &Request,
    datacenter: Option<&str>,
) -> Result<Outcome, ApiError> {
    let decode = || -> Result<(CatalogOp, String), String> {
        let value = parse_strict(request.body, &bodies::DEREGISTER_REQUEST)?;
        let obj = Obj::new(&value)?;
        let op = CatalogOp::Deregister {
            node: obj.string(&["node"])?,
            service_id: obj.string(&["serviceid"])?,
            check_id: obj.string(&["checkid"])?,
        };
        Ok((op, obj.string(&["datacenter"])?))
    };
    let (op, body_datacenter) =
        decode().map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    // The body's `Datacenter` routes the write, as a registration's does (an unknown one is
    // Consul's "No path to datacenter").
    let target = target_datacenter(ctx, datacenter, &body_datacenter);
    if let CatalogOp::Deregister { node, .. } = &op {
        if node.is_empty() {
            return Err(ApiError::bad_request("Must provide node"));
        }
    }
    Ok(write_in(ctx, request, op, target))
}

/// `node-meta=key:value`, repeatable.
pub fn node_meta_filters(request: &Request) -> Vec<(String, String)> {
    request
        .query
        .get_all("node-meta")
        .map(|pair| match pair.split_once(':') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (pair.to_string(), String::new()),
        })
        .collect()
}

/// Parses `?filter` against the endpoint's schema; a bad expression is a 400.
pub fn parse_filter(request: &Request, schema: filter::Schema) -> Result<Option<Filter>, ApiError> {
    match request.query.get("filter") {
        None => Ok(None),
        Some(text) => Filter::parse(text, schema).map_err(|e| {
            ApiError::bad_request(format!(
                "Failed to create boolean expression evaluator: {e}"
            ))
        }),
    }
}

/// `GET /v1/catalog/nodes`.
pub fn nodes(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let options = query_options(ctx, &request.query)?;
    // `?near` travels as the `DCSpecificRequest`'s `Source`.
    if client_catalog::typed(ctx, request, &options, &[]) {
        parse_filter(request, filter::NODE)?;
        return Ok(client_catalog::nodes(ctx, request, options, ""));
    }
    let near = request.query.get("near").unwrap_or("");
    let query = NodesQuery {
        node_meta: node_meta_filters(request),
        filter: parse_filter(request, filter::NODE)?,
        // As for services: distances taken when the query starts; a node without a known
        // coordinate (or an unknown `near`) leaves the order alone, as Consul does.
        near: (!near.is_empty())
            .then(|| super::coordinate::distances_from(ctx, near))
            .flatten(),
        rows: RowFilter::of(request),
    };
    peer::run(ctx, request, query, options, Empty::List, reply)
}

struct NodesQuery {
    /// Nodes the token may not read are left out.
    rows: RowFilter,
    node_meta: Vec<(String, String)>,
    filter: Option<Filter>,
    /// `?near=`: estimated seconds from the named node to each node; nodes are answered
    /// nearest first, those without a coordinate last in name order.
    near: Option<HashMap<String, f64>>,
}

impl Query for NodesQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            read::nodes_index(tables),
            WatchSet::new().table(Table::Nodes),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let mut body = Vec::with_capacity(256 + tables.catalog.nodes.len() * 256);
        let mut w = JsonWriter::new(&mut body, reply.pretty);
        w.begin_array();
        let mut hidden = false;
        let mut selected: Vec<_> = tables
            .catalog
            .nodes
            .values()
            .filter(|entry| {
                let readable = self.rows.node(&entry.node().name);
                hidden |= !readable;
                readable
            })
            .filter(|entry| entry.node().meta.satisfies(&self.node_meta))
            .filter(|entry| {
                self.filter.as_ref().is_none_or(|filter| {
                    filter.matches(&render::as_value(|w| render::node(w, entry.node())))
                })
            })
            .collect();
        if let Some(near) = &self.near {
            let distances: Vec<Option<f64>> = selected
                .iter()
                .map(|entry| near.get(&*entry.node().name).copied())
                .collect();
            let order = nearest_first(&distances);
            debug_assert_eq!(order.len(), selected.len(), "a permutation of the nodes");
            selected = order.into_iter().map(|i| selected[i]).collect();
        }
        for entry in selected {
            render::node(&mut w, entry.node());
        }
        w.end_array();
        w.finish();
        reply.json_bytes(200, &self.rows.list_headers(meta, hidden), &body);
    }
}

/// `GET /v1/catalog/services`.
pub fn services(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let options = query_options(ctx, &request.query)?;
    if peer::named(request).is_some() {
        // Consul's `Catalog.ListServices`: the answer's service names carry no peer, so
        // their ACL filtering could not tell imported names from local ones.
        return Err(ApiError::Internal(
            "listing service names imported from a peer is not supported".to_string(),
        ));
    }
    if client_catalog::typed(ctx, request, &options, &[]) {
        parse_filter(request, filter::SERVICE_NODE)?;
        return client_catalog::services(ctx, request, options, "");
    }
    let query = ServicesQuery {
        node_meta: node_meta_filters(request),
        filter: parse_filter(request, filter::SERVICE_NODE)?,
        rows: RowFilter::of(request),
    };
    agent_cache::run(ctx, request, query, options, reply)
}

struct ServicesQuery {
    /// Services the token may not read are left out (Consul checks only `service:read`
    /// here, not the nodes).
    rows: RowFilter,
    node_meta: Vec<(String, String)>,
    filter: Option<Filter>,
}

impl Query for ServicesQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        services_read(tables, !self.node_meta.is_empty())
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let (services, hidden) = service_tags(tables, &self.rows, |view| {
            view.node().meta.satisfies(&self.node_meta)
                && self.filter.as_ref().is_none_or(|filter| {
                    filter.matches(&render::as_value(|w| {
                        render::service_node(w, view.node(), &view.service)
                    }))
                })
        });
        let mut body = Vec::with_capacity(64 + services.len() * 48);
        let mut w = JsonWriter::new(&mut body, reply.pretty);
        w.begin_object();
        for (name, tags) in &services {
            w.field_str_array(name, tags.iter().copied());
        }
        w.end_object();
        w.finish();
        reply.json_bytes(200, &self.rows.list_headers(meta, hidden), &body);
    }
}

/// The read behind a list of services: its index and what it depends on (the nodes too
/// when a node-meta filter applies).
pub fn services_read(tables: &Tables, by_node_meta: bool) -> (u64, WatchSet) {
    if by_node_meta {
        (
            read::node_services_index(tables),
            WatchSet::new().table(Table::Services).table(Table::Nodes),
        )
    } else {
        (
            read::services_index(tables),
            WatchSet::new().table(Table::Services),
        )
    }
}

/// Each service's tags (sorted, each once: Go prints map keys sorted) over the instances
/// `keep` lets through, leaving out the services `rows` may not read (Consul checks only
/// `service:read` here, not the nodes); and whether any was left out.
pub fn service_tags<'t>(
    tables: &'t Tables,
    rows: &RowFilter,
    keep: impl Fn(&InstanceView) -> bool,
) -> (BTreeMap<&'t str, BTreeSet<&'t str>>, bool) {
    let mut services: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut hidden = false;
    for group in tables.catalog.services.values() {
        for view in group.instances.values() {
            if !rows.service(&view.service.name) {
                hidden = true;
                continue;
            }
            if keep(view) {
                services
                    .entry(&view.service.name)
                    .or_default()
                    .extend(view.service.tags.iter().map(|t| &**t));
            }
        }
    }
    (services, hidden)
}

/// Render-cache slots of an instance view: its `CheckServiceNode` and `ServiceNode` JSON,
/// compact and as `?pretty` lays them out. A slot is filled on first use only, so views that
/// are never read pretty cost nothing for it.
pub const SLOT_HEALTH: usize = 0;
pub const SLOT_CATALOG: usize = 1;
pub const SLOT_HEALTH_PRETTY: usize = 2;
pub const SLOT_CATALOG_PRETTY: usize = 3;
const _: () = assert!(SLOT_CATALOG_PRETTY < crate::store::catalog::render_cache::RENDER_SLOTS);

/// Which answer a single-service query gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceView {
    /// `/v1/catalog/service/<s>`: `ServiceNode`s.
    Catalog,
    /// `/v1/catalog/connect/<s>`: Connect-native instances and the proxies fronting `s`.
    Connect,
    /// `/v1/health/service/<s>`: `CheckServiceNode`s.
    Health,
    /// `/v1/health/connect/<s>`.
    HealthConnect,
    /// `/v1/health/ingress/<s>`: the instances of the ingress gateways linking `s`.
    HealthIngress,
    /// `/v1/health/checks/<s>`: the service's `HealthCheck`s.
    Checks,
}

/// Positions of `distances` nearest first; unknown distances last. Stable, so equal
/// distances and unknown nodes keep the catalog's order (Consul sorts the same way).
pub fn nearest_first(distances: &[Option<f64>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..distances.len()).collect();
    order.sort_by(|&a, &b| match (distances[a], distances[b]) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    order
}

/// The bare elements of [`ServiceQuery::fragments`]' separated ones.
fn elements<'t>(pretty: bool, separated: &[&'t [u8]]) -> Vec<&'t [u8]> {
    separated
        .iter()
        .map(|part| render::separated_element(pretty, part))
        .collect()
}

/// A query about one service. Watches only that service's index key, so a change to any
/// other service never wakes it.
pub struct ServiceQuery {
    pub view: ServiceView,
    pub service: Arc<str>,
    pub folded: Arc<str>,
    pub tags: Vec<String>,
    pub node_meta: Vec<(String, String)>,
    pub passing: bool,
    pub filter: Option<Filter>,
    /// Whether this is a blocking query (its wake-ups may share a rendered body).
    pub blocking: bool,
    pub cache_key: Rc<str>,
    /// `?near=`: estimated seconds from the named node to each node, taken when the query
    /// starts (coordinates drift slowly); instances are answered nearest first.
    pub near: Option<Rc<HashMap<String, f64>>>,
    /// Instances (and checks) whose node or service the token may not read are left out.
    pub rows: RowFilter,
}

impl ServiceQuery {
    pub fn new(
        view: ServiceView,
        request: &Request,
        service: &str,
        passing: bool,
        blocking: bool,
        schema: filter::Schema,
    ) -> Result<ServiceQuery, ApiError> {
        let tags: Vec<String> = request.query.get_all("tag").map(str::to_string).collect();
        let node_meta = node_meta_filters(request);
        let filter_text = request.query.get("filter").unwrap_or("");
        let filter = parse_filter(request, schema)?;
        // A filtered answer is the token's own: its accessor is part of the shared body's key.
        let accessor = request.acl.get().map_or("", |a| &*a.accessor_id);
        let cache_key: Rc<str> = Rc::from(format!(
            "{view:?}\u{0}{service}\u{0}{passing}\u{0}{tags:?}\u{0}{node_meta:?}\u{0}{filter_text}\u{0}{accessor}"
        ));
        Ok(ServiceQuery {
            view,
            service: Arc::from(service),
            folded: Arc::from(&*fold(service)),
            tags,
            node_meta,
            passing,
            filter,
            blocking,
            cache_key,
            near: None,
            rows: RowFilter::of(request),
        })
    }

    /// Applies `?near=<node>` (or `_agent`) from the request, as Consul's catalog and health
    /// service endpoints do: nearest first by network coordinates, nodes without one last.
    pub fn with_near(mut self, ctx: &Context, request: &Request) -> ServiceQuery {
        let near = request.query.get("near").unwrap_or("");
        if near.is_empty() {
            return self;
        }
        if let Some(distances) = super::coordinate::distances_from(ctx, near) {
            self.cache_key = Rc::from(format!("{}\u{0}near={near}", self.cache_key));
            self.near = Some(Rc::new(distances));
        }
        self
    }

    /// The rendered elements of a catalog or health answer, one per matching instance,
    /// straight from the views' render caches, each preceded by its separator
    /// ([`render::separated_fragment`]). `None` for the views rendered row by row.
    fn fragments<'t>(&self, tables: &'t Tables, pretty: bool) -> Option<Vec<&'t [u8]>> {
        let (compact_slot, pretty_slot) = match self.view {
            ServiceView::Catalog | ServiceView::Connect => (SLOT_CATALOG, SLOT_CATALOG_PRETTY),
            ServiceView::Health | ServiceView::HealthConnect | ServiceView::HealthIngress => {
                (SLOT_HEALTH, SLOT_HEALTH_PRETTY)
            }
            ServiceView::Checks => return None,
        };
        let views = self.views(tables);
        let mut parts = Vec::with_capacity(views.len());
        let mut distances: Vec<Option<f64>> = Vec::new();
        // Decided once, not per instance: a query without tag or meta filters keeps every
        // instance, and without ACLs every instance is readable (the common large answer).
        let filtered = !self.tags.is_empty() || !self.node_meta.is_empty();
        let acl_filtered = self.rows.is_active();
        for view in views {
            if (filtered && !self.keep(view.node(), &view.service))
                || (acl_filtered && !self.readable(view))
            {
                continue;
            }
            let health = matches!(
                self.view,
                ServiceView::Health | ServiceView::HealthConnect | ServiceView::HealthIngress
            );
            if health && self.passing && !view.all_passing() {
                continue;
            }
            if let Some(near) = &self.near {
                distances.push(near.get(&*view.node().name).copied());
            }
            let row = read::CheckServiceNode {
                node: view.node(),
                service: &view.service,
                node_checks: view.node_checks(),
                service_checks: view.checks(),
            };
            let render_row = |w: &mut JsonWriter| match self.view {
                ServiceView::Catalog | ServiceView::Connect => {
                    render::service_node(w, view.node(), &view.service)
                }
                _ => render::check_service_node(w, &row),
            };
            if let Some(filter) = &self.filter {
                let compact = view.rendered.get_or_render(compact_slot, || {
                    render::separated_fragment(false, render_row)
                });
                let compact = render::separated_element(false, compact);
                if !filter.matches(&serde_json::from_slice(compact).unwrap_or_default()) {
                    continue;
                }
            }
            let slot = if pretty { pretty_slot } else { compact_slot };
            parts.push(
                view.rendered
                    .get_or_render(slot, || render::separated_fragment(pretty, render_row)),
            );
        }
        if self.near.is_some() {
            debug_assert_eq!(distances.len(), parts.len());
            parts = nearest_first(&distances)
                .into_iter()
                .map(|i| parts[i])
                .collect();
        }
        Some(parts)
    }

    /// The instances the query reads ([`service_views`]).
    fn views<'t>(&self, tables: &'t Tables) -> Vec<&'t crate::store::catalog::InstanceView> {
        service_views(tables, &self.service, self.view)
    }

    fn render(&self, tables: &Tables, pretty: bool, body: &mut Vec<u8>) {
        if let Some(parts) = self.fragments(tables, pretty) {
            render::write_array(body, pretty, &elements(pretty, &parts));
            return;
        }
        let mut w = JsonWriter::new(body, pretty);
        w.begin_array();
        if let Some(group) = tables.catalog.group(&self.service) {
            for view in group.instances.values() {
                if !self.keep(view.node(), &view.service) || !self.readable(view) {
                    continue;
                }
                for check in view.checks().iter() {
                    if let Some(filter) = &self.filter {
                        if !filter.matches(&render::as_value(|w| render::health_check(w, check))) {
                            continue;
                        }
                    }
                    render::health_check(&mut w, check);
                }
            }
        }
        w.end_array();
        w.finish();
    }

    /// Whether the token may read the instance: its node and its service.
    fn readable(&self, view: &crate::store::catalog::InstanceView) -> bool {
        self.rows
            .node_service(&view.node().name, &view.service.name)
    }

    /// Whether the token hid an instance the other filters would have kept.
    fn hidden(&self, tables: &Tables) -> bool {
        if !self.rows.is_active() {
            return false;
        }
        self.views(tables)
            .into_iter()
            .any(|view| self.keep(view.node(), &view.service) && !self.readable(view))
    }

    /// The `tag` and `node-meta` filters.
    fn keep(
        &self,
        node: &crate::store::catalog::Node,
        instance: &crate::store::catalog::ServiceInstance,
    ) -> bool {
        self.tags.iter().all(|t| instance.has_tag(t)) && node.meta.satisfies(&self.node_meta)
    }
}

impl Query for ServiceQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        service_read(tables, &self.service, &self.folded, self.view)
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let headers = self.rows.list_headers(meta, self.hidden(tables));
        if self.blocking {
            let body = super::body_cache::cached_body(
                &self.cache_key,
                tables.index,
                reply.pretty,
                |body| self.render(tables, reply.pretty, body),
            );
            reply.json_bytes(200, &headers, &body);
        } else if let Some(parts) = self.fragments(tables, reply.pretty) {
            // Each instance's JSON is copied once, from its cache into the response.
            let pretty = reply.pretty;
            let body_len = render::separated_array_len(pretty, &parts);
            if body_len >= render::STREAM_BODY_BYTES_MIN {
                let body = render::StreamedArray::separated(tables, pretty, parts);
                reply.send_streamed(200, &headers, body);
                return;
            }
            let parts = elements(pretty, &parts);
            reply.send_with(200, Some("application/json"), &headers, body_len, |out| {
                render::write_array(out, pretty, &parts)
            });
        } else {
            let mut body = Vec::with_capacity(1024);
            self.render(tables, reply.pretty, &mut body);
            reply.json_bytes(200, &headers, &body);
        }
    }
}

/// The instances a query of `view` about `service` reads: the service's group; for the
/// Connect views its native instances, the proxies fronting it and the terminating
/// gateways linking it (as Consul appends them); for the ingress view the ingress gateways
/// linking it. Shared with the typed calls (`api::rpc::catalog`), which answer the same.
pub fn service_views<'t>(
    tables: &'t Tables,
    service: &str,
    view: ServiceView,
) -> Vec<&'t crate::store::catalog::InstanceView> {
    match view {
        ServiceView::Connect | ServiceView::HealthConnect => {
            let mut views = read::connect_rows(tables, service).views;
            views.extend(super::gateways::linked_instances(
                tables,
                service,
                GatewayKind::Terminating,
            ));
            views
        }
        ServiceView::HealthIngress => {
            super::gateways::linked_instances(tables, service, GatewayKind::Ingress)
        }
        _ => tables
            .catalog
            .group(service)
            .map(|g| g.instances.values().collect())
            .unwrap_or_default(),
    }
}

/// The index of a query of `view` about `service` and what it depends on (`folded` is the
/// service's folded name): the service's index key; for the Connect views also the services
/// table (a new proxy may appear under any name; re-evaluating keeps the query parked unless
/// one of its groups moved), the proxies' groups and the linked terminating gateways; for
/// the ingress view the linked ingress gateways.
pub fn service_read(
    tables: &Tables,
    service: &str,
    folded: &Arc<str>,
    view: ServiceView,
) -> (u64, WatchSet) {
    if matches!(view, ServiceView::Connect | ServiceView::HealthConnect) {
        let rows = read::connect_rows(tables, service);
        let mut watch = WatchSet::new()
            .key(Table::ServiceIndex, folded.clone())
            .table(Table::Services);
        for group in rows.proxy_groups {
            watch = watch.key(Table::ServiceIndex, Arc::<str>::from(group.as_str()));
        }
        let (gateway_index, watch) =
            super::gateways::watch_linked(tables, service, GatewayKind::Terminating, watch);
        return (rows.index.max(gateway_index), watch);
    }
    if view == ServiceView::HealthIngress {
        return super::gateways::watch_linked(
            tables,
            service,
            GatewayKind::Ingress,
            WatchSet::new(),
        );
    }
    (
        read::service_index(tables, service),
        WatchSet::new().key(Table::ServiceIndex, folded.clone()),
    )
}

/// `GET /v1/catalog/service/<s>`.
pub fn service(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    service_nodes(ctx, request, false, reply)
}

/// `GET /v1/catalog/connect/<s>`.
pub fn connect(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    service_nodes(ctx, request, true, reply)
}

fn service_nodes(
    ctx: &Context,
    request: &Request,
    connect: bool,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let name = request.rest;
    let options = query_options(ctx, &request.query)?;
    if name.is_empty() {
        return Err(ApiError::bad_request("Missing service name"));
    }
    let view = if connect {
        ServiceView::Connect
    } else {
        ServiceView::Catalog
    };
    if client_catalog::typed(ctx, request, &options, &[]) {
        parse_filter(request, filter::SERVICE_NODE)?;
        return client_catalog::service_nodes(ctx, request, name, view, options, "");
    }
    let query = ServiceQuery::new(
        view,
        request,
        name,
        false,
        options.is_blocking(),
        filter::SERVICE_NODE,
    )?
    .with_near(ctx, request);
    if peer::named(request).is_some() {
        return run_peer_service(ctx, request, query, options, reply);
    }
    agent_cache::run(ctx, request, query, options, reply)
}

/// Runs a service read that names a peer (`?peer=`): the instances imported from it for the
/// health and catalog views ([`peer::ImportedServiceQuery`]), the local read's empty answer
/// for the others.
pub fn run_peer_service(
    ctx: &Context,
    request: &Request,
    query: ServiceQuery,
    options: super::QueryOptions,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let peer_name = peer::named(request).unwrap_or_default();
    let health = match query.view {
        ServiceView::Health => true,
        ServiceView::Catalog => false,
        _ => return peer::run(ctx, request, query, options, Empty::List, reply),
    };
    let imported = peer::ImportedServiceQuery {
        peer: peer_name.to_string(),
        folded_peer: Arc::from(&*fold(peer_name)),
        service: query.service,
        health,
        passing: query.passing,
        tags: query.tags,
        node_meta: query.node_meta,
        filter: query.filter,
        rows: query.rows,
    };
    super::run_query(ctx, imported, options, reply)
}

/// `/v1/catalog/node/<n>` (a map of services) or `/v1/catalog/node-services/<n>` (a list).
struct NodeQuery {
    node: Arc<str>,
    folded: Arc<str>,
    as_list: bool,
    filter: Option<Filter>,
    /// A node the token may not read answers as a missing one; services it may not read
    /// are left out.
    rows: RowFilter,
}

impl Query for NodeQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            read::node_services_index(tables),
            WatchSet::new()
                .key(Table::Nodes, self.folded.clone())
                .key(Table::NodeServices, self.folded.clone()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let found = tables.catalog.node(&self.node);
        let hidden_node = found.is_some_and(|e| !self.rows.node(&e.node().name));
        let entry = found.filter(|_| !hidden_node);
        let hidden_service =
            entry.is_some_and(|e| e.services.values().any(|s| !self.rows.service(&s.name)));
        let headers = self.rows.list_headers(meta, hidden_node || hidden_service);
        let mut body = Vec::with_capacity(1024);
        let mut w = JsonWriter::new(&mut body, reply.pretty);
        match entry {
            None if !self.as_list => {
                body.extend_from_slice(if reply.pretty { b"null\n" } else { b"null" });
                reply.json_bytes(200, &headers, &body);
                return;
            }
            None => {
                w.begin_object();
                w.field_null("Node");
                w.field_array("Services");
                w.end_array();
                w.end_object();
            }
            Some(entry) => {
                let services = entry.services.values().filter(|s| {
                    self.rows.service(&s.name)
                        && match &self.filter {
                            None => true,
                            Some(filter) => {
                                filter.matches(&render::as_value(|w| render::node_service(w, s)))
                            }
                        }
                });
                w.begin_object();
                w.field_object("Node");
                render::node_fields(&mut w, entry.node());
                w.end_object();
                if self.as_list {
                    w.field_array("Services");
                    for service in services {
                        render::node_service(&mut w, service);
                    }
                    w.end_array();
                } else {
                    // Keyed by service ID, in Go's sorted-key order.
                    let mut sorted: Vec<_> = services.collect();
                    sorted.sort_by(|a, b| a.id.cmp(&b.id));
                    w.field_object("Services");
                    for service in sorted {
                        w.field_object(&service.id);
                        render::node_service_fields(&mut w, service);
                        w.end_object();
                    }
                    w.end_object();
                }
                w.end_object();
            }
        }
        w.finish();
        reply.json_bytes(200, &headers, &body);
    }
}

/// `GET /v1/catalog/node/<n>`.
pub fn node(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    node_services_of(ctx, request, false, reply)
}

/// `GET /v1/catalog/node-services/<n>`.
pub fn node_services(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    node_services_of(ctx, request, true, reply)
}

fn node_services_of(
    ctx: &Context,
    request: &Request,
    as_list: bool,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let name = request.rest;
    let options = query_options(ctx, &request.query)?;
    if name.is_empty() {
        return Err(ApiError::bad_request("Missing node name"));
    }
    if client_catalog::typed(ctx, request, &options, &[]) {
        parse_filter(request, filter::NODE_SERVICE)?;
        return Ok(client_catalog::node_services(
            ctx, request, name, as_list, options, "",
        ));
    }
    let query = NodeQuery {
        node: Arc::from(name),
        folded: Arc::from(&*fold(name)),
        as_list,
        filter: parse_filter(request, filter::NODE_SERVICE)?,
        rows: RowFilter::of(request),
    };
    let empty = if as_list {
        Empty::NodeServices
    } else {
        Empty::Null
    };
    peer::run(ctx, request, query, options, empty, reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_answers_come_from_the_render_cache_compact_and_pretty() {
        use crate::store::catalog::{
            CatalogOp, CheckRegistration, Registration, ServiceRegistration,
        };
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        for i in 0..3u64 {
            let reg = Registration {
                node: format!("n{i}"),
                address: "10.0.0.1".into(),
                datacenter: "dc1".into(),
                service: Some(ServiceRegistration {
                    id: format!("web-{i}"),
                    name: "web".into(),
                    tags: vec!["t".into()],
                    port: 80,
                    ..Default::default()
                }),
                checks: vec![CheckRegistration {
                    check_id: format!("c{i}"),
                    name: "check".into(),
                    status: "passing".into(),
                    service_id: format!("web-{i}"),
                    ..Default::default()
                }],
                ..Default::default()
            };
            tables.apply(
                i + 1,
                &crate::store::Command::Catalog(CatalogOp::Register(Box::new(reg))),
                &mut changes,
            );
        }
        for (view, slots) in [
            (ServiceView::Health, [SLOT_HEALTH, SLOT_HEALTH_PRETTY]),
            (ServiceView::Catalog, [SLOT_CATALOG, SLOT_CATALOG_PRETTY]),
        ] {
            let query = ServiceQuery {
                view,
                service: Arc::from("web"),
                folded: Arc::from("web"),
                tags: Vec::new(),
                node_meta: Vec::new(),
                passing: false,
                filter: None,
                blocking: false,
                cache_key: Rc::from(""),
                near: None,
                rows: RowFilter::default(),
            };
            let answer = |pretty: bool| {
                let mut body = Vec::new();
                query.render(&tables, pretty, &mut body);
                body
            };
            let compact = answer(false);
            let pretty = answer(true);
            for (slot, pretty_slot) in [(slots[0], false), (slots[1], true)] {
                assert!(
                    tables
                        .catalog
                        .group("web")
                        .unwrap()
                        .instances
                        .values()
                        .all(|v| v.rendered.get(slot).is_some()),
                    "{view:?} pretty={pretty_slot}: every view filled its slot"
                );
            }
            // Answers from the filled caches are the same bytes, and both layouts say the
            // same thing.
            assert_eq!(answer(false), compact);
            assert_eq!(answer(true), pretty);
            assert!(!compact.contains(&b'\n') && pretty.contains(&b'\n'));
            let parse = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
            assert_eq!(parse(&compact), parse(&pretty));
            assert_eq!(parse(&compact).as_array().map(Vec::len), Some(3));
        }
    }

    #[test]
    fn nearest_first_orders_known_distances_and_keeps_unknowns_last_in_place() {
        let distances = [None, Some(0.3), Some(0.1), None, Some(0.3), Some(0.0)];
        assert_eq!(nearest_first(&distances), vec![5, 2, 1, 4, 0, 3]);
        assert_eq!(nearest_first(&[]), Vec::<usize>::new());
    }
}
