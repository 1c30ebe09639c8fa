//! `/v1/health/*`: checks by node, by service and by state, and the health view of a
//! service (`CheckServiceNode`s, `?passing`), all blocking-capable with precise wake-ups.

use super::agent_cache;
use super::authz::RowFilter;
use super::catalog::{node_meta_filters, parse_filter, ServiceQuery, ServiceView};
use super::peer::{self, Empty};
use super::rpc::client_catalog;
use super::{query_options, ApiError, Context, Outcome, Query, QueryMeta, Reply, Request};
use crate::consul::filter::{self, Filter};
use crate::consul::json::JsonWriter;
use crate::consul::render;
use crate::shard::watch::WatchSet;
use crate::store::catalog::read;
use crate::store::catalog::rows::fold;
use crate::store::catalog::{HealthCheck, RowArc, Status};
use crate::store::{StoreVersion, Table, Tables};
use std::sync::Arc;

/// Consul's `?passing`: present without a value means true; otherwise a Go boolean.
pub fn passing_param(request: &Request) -> Result<bool, ApiError> {
    match request.query.get("passing") {
        None => Ok(false),
        Some("") => Ok(true),
        Some(text) => match text {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
            _ => Err(ApiError::bad_request("Invalid value for ?passing")),
        },
    }
}

/// `GET /v1/health/service/<s>`.
pub fn service(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    service_health(ctx, request, ServiceView::Health, reply)
}

/// `GET /v1/health/connect/<s>`.
pub fn connect(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    service_health(ctx, request, ServiceView::HealthConnect, reply)
}

/// `GET /v1/health/ingress/<s>`: the instances of the ingress gateways linking `s`
/// (`service:read` on `s`, checked by the route, as Consul checks it).
pub fn ingress(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    service_health(ctx, request, ServiceView::HealthIngress, reply)
}

fn service_health(
    ctx: &Context,
    request: &Request,
    view: ServiceView,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let name = request.rest;
    let options = query_options(ctx, &request.query)?;
    if name.is_empty() {
        return Err(ApiError::bad_request("Missing service name"));
    }
    let passing = passing_param(request)?;
    if client_catalog::typed(ctx, request, &options, &[]) {
        parse_filter(request, filter::CHECK_SERVICE_NODE)?;
        return client_catalog::service_health(ctx, request, name, view, passing, options, "");
    }
    let query = ServiceQuery::new(
        view,
        request,
        name,
        passing,
        options.is_blocking(),
        filter::CHECK_SERVICE_NODE,
    )?
    .with_near(ctx, request);
    if peer::named(request).is_some() {
        return super::catalog::run_peer_service(ctx, request, query, options, reply);
    }
    agent_cache::run(ctx, request, query, options, reply)
}

/// `GET /v1/health/checks/<s>`.
pub fn service_checks(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let name = request.rest;
    let options = query_options(ctx, &request.query)?;
    if name.is_empty() {
        return Err(ApiError::bad_request("Missing service name"));
    }
    // praetor's HTTP answer also applies `?tag` here: the call carries it as `ServiceTags`.
    if client_catalog::typed(ctx, request, &options, &[]) {
        parse_filter(request, filter::HEALTH_CHECK)?;
        return Ok(client_catalog::service_checks(
            ctx, request, name, options, "",
        ));
    }
    let query = ServiceQuery::new(
        ServiceView::Checks,
        request,
        name,
        false,
        options.is_blocking(),
        filter::HEALTH_CHECK,
    )?;
    peer::run(ctx, request, query, options, Empty::List, reply)
}

/// Writes `checks` as a `HealthCheck` list, leaving out those the token may not read (their
/// node, and their service for a service check).
fn write_checks<'c>(
    checks: impl Iterator<Item = &'c RowArc<HealthCheck>>,
    filter: Option<&Filter>,
    rows: &RowFilter,
    meta: QueryMeta,
    reply: &mut Reply,
) {
    let mut body = Vec::with_capacity(1024);
    let mut w = JsonWriter::new(&mut body, reply.pretty);
    let mut hidden = false;
    w.begin_array();
    for check in checks {
        if !rows.node_service(&check.node, &check.service_name) {
            hidden = true;
            continue;
        }
        if let Some(filter) = filter {
            if !filter.matches(&render::as_value(|w| render::health_check(w, check))) {
                continue;
            }
        }
        render::health_check(&mut w, check);
    }
    w.end_array();
    w.finish();
    reply.json_bytes(200, &rows.list_headers(meta, hidden), &body);
}

struct NodeChecksQuery {
    node: Arc<str>,
    folded: Arc<str>,
    filter: Option<Filter>,
    rows: RowFilter,
}

impl Query for NodeChecksQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            read::checks_index(tables),
            WatchSet::new().key(Table::Checks, self.folded.clone()),
        )
    }
    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let checks = read::node_checks(tables, &self.node);
        write_checks(
            checks.into_iter(),
            self.filter.as_ref(),
            &self.rows,
            meta,
            reply,
        );
    }
}

/// `GET /v1/health/node/<n>`.
pub fn node(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let name = request.rest;
    let options = query_options(ctx, &request.query)?;
    if name.is_empty() {
        return Err(ApiError::bad_request("Missing node name"));
    }
    if client_catalog::typed(ctx, request, &options, &[]) {
        parse_filter(request, filter::HEALTH_CHECK)?;
        return Ok(client_catalog::node_checks(ctx, request, name, options, ""));
    }
    let query = NodeChecksQuery {
        node: Arc::from(name),
        folded: Arc::from(&*fold(name)),
        filter: parse_filter(request, filter::HEALTH_CHECK)?,
        rows: RowFilter::of(request),
    };
    peer::run(ctx, request, query, options, Empty::List, reply)
}

struct StateQuery {
    rows: RowFilter,
    state: Option<Status>,
    node_meta: Vec<(String, String)>,
    filter: Option<Filter>,
}

impl Query for StateQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            read::checks_index(tables),
            WatchSet::new().table(Table::Checks),
        )
    }
    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let checks = read::checks_in_state(tables, self.state);
        let kept = checks
            .into_iter()
            .filter(|(node, _)| node.meta.satisfies(&self.node_meta))
            .map(|(_, check)| check);
        write_checks(kept, self.filter.as_ref(), &self.rows, meta, reply);
    }
}

/// A check state of `/v1/health/state/<state>`: `any` (none) or a status.
pub fn check_state(state: &str) -> Result<Option<Status>, ApiError> {
    match state {
        "" => Err(ApiError::bad_request("Missing check state")),
        "any" => Ok(None),
        "passing" => Ok(Some(Status::Passing)),
        "warning" => Ok(Some(Status::Warning)),
        "critical" => Ok(Some(Status::Critical)),
        other => Err(ApiError::bad_request(format!(
            "Invalid check state: {other:?}"
        ))),
    }
}

/// `GET /v1/health/state/<state>`: `any`, `passing`, `warning` or `critical`.
pub fn state(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let options = query_options(ctx, &request.query)?;
    let state = check_state(request.rest)?;
    if client_catalog::typed(ctx, request, &options, &[]) {
        parse_filter(request, filter::HEALTH_CHECK)?;
        return Ok(client_catalog::checks_in_state(
            ctx,
            request,
            request.rest,
            options,
            "",
        ));
    }
    let query = StateQuery {
        rows: RowFilter::of(request),
        state,
        node_meta: node_meta_filters(request),
        filter: parse_filter(request, filter::HEALTH_CHECK)?,
    };
    peer::run(ctx, request, query, options, Empty::List, reply)
}
