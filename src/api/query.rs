//! `/v1/query`: prepared queries — create, list, read, update, delete, and the two ways to
//! use one: `/v1/query/<id|name>/execute` and `/explain`.
//!
//! An execution resolves the query (by ID, name, or the longest template prefix, rendered
//! for the name), selects this datacenter's instances (`store::query::select`), shuffles
//! them, sorts them by round trip from `?near` (or the query's `Near`; `_agent` is the agent
//! the request first reached) with that node first, and keeps `?limit`. With no instance
//! here and a failover policy, the query goes to other datacenters in order — the
//! `NearestN` nearest by WAN coordinates, then `Datacenters` (or `Targets`) not tried yet,
//! unknown ones skipped — and the first that has instances answers, with `Failovers` set
//! to the number of datacenters asked (Consul's `queryFailover`). Each remote datacenter
//! runs the query it is sent through [`EXECUTE_REMOTE_PATH`] (Consul's
//! `PreparedQuery.ExecuteRemote`: the whole definition travels, since the remote store does
//! not have it, and it fails over no further).
//!
//! The failover waits for other datacenters, so it runs as [`Outcome::Async`] work on the
//! shard; an execution answered here is written at once.
//!
//! ACLs: the route's rule (`Acl::Query`) checks `query:write` on a written query's name
//! (old and new), `query:read` on a read or explained one; anonymous queries are guarded
//! by their unguessable ID only, as in Consul. The list's rows are `Filtered`: the hook
//! where a token's unreadable queries leave the list is [`visible_to`]. Tokens stored in
//! queries are shown only to tokens with `acl:write`.

use super::authz::RowFilter;
use super::{
    check_datacenter, query_options, run_query, ApiError, AsyncResponder, Context, Outcome, Query,
    QueryMeta, QueryOptions, Reply, Request, WriteOp,
};
use crate::api::context::Deferred;
use crate::consul::json::JsonWriter;
use crate::consul::query::{self as consul_query, QueryJson, REDACTED_TOKEN};
use crate::consul::render;
use crate::proto::http::Method;
use crate::shard::runtime::{Consistency, ReadPlan};
use crate::shard::watch::WatchSet;
use crate::store::catalog::read::CheckServiceNode;
use crate::store::query::{self, select::select, PreparedQuery, QueryOp};
use crate::store::{QueryResult, StoreVersion, Table, Tables};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The internal endpoint a datacenter runs another's query on (GET with the query's JSON
/// as the body, `?limit`, `?connect`, `?failovers`).
pub const EXECUTE_REMOTE_PATH: &str = "/v1/internal/praetor/query-execute-remote";
/// How long one remote datacenter may take to answer a failover execution.
pub const FAILOVER_TIMEOUT: Duration = Duration::from_secs(15);
/// How deep into the sorted results the node named by `near` is looked for to move it
/// first (Consul's cap: the local agent is never further in once sorted by distance).
const NEAR_NODE_SEARCH_DEPTH: usize = 10;

/// `GET /v1/query` (list) and `POST /v1/query` (create).
pub fn general(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    match request.method {
        Method::Get => list(ctx, request, reply),
        _ => create(ctx, request),
    }
}

/// `/v1/query/<id>` (GET, PUT, DELETE), `/v1/query/<id|name>/execute` and `/explain` (GET).
pub fn specific(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let rest = request.rest;
    let only_get = |request: &Request| -> Result<(), ApiError> {
        if request.method == Method::Get {
            return Ok(());
        }
        Err(ApiError::MethodNotAllowed {
            method: request.method.as_str().to_string(),
            allow: &[Method::Get],
        })
    };
    if let Some(id_or_name) = rest.strip_suffix("/execute") {
        only_get(request)?;
        return execute(ctx, request, id_or_name, reply);
    }
    if let Some(id_or_name) = rest.strip_suffix("/explain") {
        only_get(request)?;
        return explain(ctx, request, id_or_name, reply);
    }
    match request.method {
        Method::Get => get(ctx, request, rest, reply),
        Method::Put => update(ctx, request, rest),
        _ => delete(ctx, request, rest),
    }
}

/// Whether stored tokens may be shown to this request: with ACLs off, or to a token with
/// `acl:write` (Consul redacts them for everyone else).
fn shows_tokens(ctx: &Context, request: &Request) -> bool {
    if !ctx.acl_enabled() {
        return true;
    }
    request
        .acl
        .get()
        .is_some_and(|authz| authz.authorizer.acl_write().is_ok())
}

fn create(ctx: &Context, request: &Request) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    let mut query = decode_body(request.body)?;
    if !query.id.is_empty() {
        return Err(ApiError::Internal(
            "ID must be empty when creating a new prepared query".to_string(),
        ));
    }
    validate(&query)?;
    let version = ctx.current_version();
    query.id = loop {
        let id = uuid::Uuid::new_v4().to_string();
        if query::get(&version, &id).is_none() {
            break id;
        }
    };
    let id = query.id.clone();
    let create = QueryOp::Set {
        query: Box::new(query),
        create: true,
    };
    Ok(Outcome::Write(WriteOp::query(
        create,
        move |result, reply| match result {
            QueryResult::Written => reply.json(200, b"", &serde_json::json!({ "ID": id })),
            QueryResult::Refused(reason) => reply.error(&ApiError::Internal(reason)),
        },
    )))
}

fn update(ctx: &Context, request: &Request, id: &str) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    let mut query = if request.body.iter().all(u8::is_ascii_whitespace) {
        PreparedQuery::default()
    } else {
        decode_body(request.body)?
    };
    // The ID comes from the path, not the body.
    query.id = id.to_string();
    validate(&query)?;
    let update = QueryOp::Set {
        query: Box::new(query),
        create: false,
    };
    Ok(Outcome::Write(WriteOp::query(update, answer_empty)))
}

fn delete(ctx: &Context, request: &Request, id: &str) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    let delete = QueryOp::Delete { id: id.to_string() };
    Ok(Outcome::Write(WriteOp::query(delete, answer_empty)))
}

/// An update's and a delete's answer: an empty 200, or the store's refusal (500 with the
/// store's words, as Consul's RPC errors are).
fn answer_empty(result: QueryResult, reply: &mut Reply) {
    match result {
        QueryResult::Written => reply.send(200, None, b"", b""),
        QueryResult::Refused(reason) => reply.error(&ApiError::Internal(reason)),
    }
}

fn decode_body(body: &[u8]) -> Result<PreparedQuery, ApiError> {
    consul_query::decode(body)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))
}

fn validate(query: &PreparedQuery) -> Result<(), ApiError> {
    consul_query::validate(query)
        .map_err(|e| ApiError::Internal(format!("Invalid prepared query: {e}")))
}

/// Answers `queries`; `filter` adds Consul's header when the token's ACLs `hidden` some.
fn write_queries<'q>(
    queries: impl Iterator<Item = &'q PreparedQuery>,
    show_tokens: bool,
    (filter, hidden): (&RowFilter, bool),
    reply: &mut Reply,
    meta: QueryMeta,
) {
    let rows: Vec<QueryJson> = queries
        .map(|query| QueryJson {
            query,
            token: token_shown(query, show_tokens),
        })
        .collect();
    let mut headers = Vec::with_capacity(160);
    meta.write_headers(&mut headers);
    filter.write_header(hidden, &mut headers);
    reply.json(200, &headers, &rows);
}

fn token_shown(query: &PreparedQuery, show_tokens: bool) -> &str {
    if show_tokens || query.token.is_empty() {
        &query.token
    } else {
        REDACTED_TOKEN
    }
}

/// `GET /v1/query`.
fn list(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let options = query_options(ctx, &request.query)?;
    let list = ListQuery {
        show_tokens: shows_tokens(ctx, request),
        rows: RowFilter::of(request),
    };
    run_query(ctx, list, options, reply)
}

struct ListQuery {
    show_tokens: bool,
    /// The request's token, which each row is filtered by.
    rows: RowFilter,
}

impl Query for ListQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            query::queries_index(tables),
            WatchSet::new().table(Table::PreparedQueries),
        )
    }
    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let mut rows: Vec<&PreparedQuery> = query::list(tables).map(|q| &**q).collect();
        let hidden = self
            .rows
            .retain(&mut rows, |filter, q| filter.prepared_query(q.acl_prefix()));
        let filter = (&self.rows, hidden);
        write_queries(rows.into_iter(), self.show_tokens, filter, reply, meta);
    }
}

/// `GET /v1/query/<id>`: by ID only, as Consul's `PreparedQuery.Get`.
fn get(ctx: &Context, request: &Request, id: &str, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let options = query_options(ctx, &request.query)?;
    let one = GetQuery {
        id: Arc::from(id),
        show_tokens: shows_tokens(ctx, request),
    };
    run_query(ctx, one, options, reply)
}

struct GetQuery {
    id: Arc<str>,
    show_tokens: bool,
}

impl Query for GetQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            query::queries_index(tables),
            WatchSet::new().key(Table::PreparedQueries, self.id.clone()),
        )
    }
    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        match query::get(tables, &self.id) {
            Some(found) => write_queries(
                std::iter::once(&**found),
                self.show_tokens,
                (&RowFilter::default(), false),
                reply,
                meta,
            ),
            None => not_found(reply, meta),
        }
    }
}

fn not_found(reply: &mut Reply, meta: QueryMeta) {
    let mut headers = Vec::with_capacity(160);
    meta.write_headers(&mut headers);
    reply.send(
        404,
        Some("text/plain; charset=utf-8"),
        &headers,
        query::QUERY_NOT_FOUND.as_bytes(),
    );
}

/// `GET /v1/query/<id|name>/explain`: the query a name resolves to, rendered.
fn explain(
    ctx: &Context,
    request: &Request,
    id_or_name: &str,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if ctx.is_client() {
        return Ok(Outcome::Forward);
    }
    let options = query_options(ctx, &request.query)?;
    let explained = ExplainQuery {
        id_or_name: id_or_name.to_string(),
        show_tokens: shows_tokens(ctx, request),
    };
    run_query(ctx, explained, options, reply)
}

struct ExplainQuery {
    id_or_name: String,
    show_tokens: bool,
}

impl Query for ExplainQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            query::queries_index(tables),
            WatchSet::new().table(Table::PreparedQueries),
        )
    }
    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let resolved = match query::resolve(tables, &self.id_or_name, "") {
            Ok(Some(resolved)) => resolved,
            Ok(None) => return not_found(reply, meta),
            Err(reason) => return reply.error(&ApiError::Internal(reason)),
        };
        let mut body = Vec::with_capacity(512);
        write_explanation(&mut body, reply.pretty, &resolved, self.show_tokens, meta);
        let mut headers = Vec::with_capacity(160);
        meta.write_headers(&mut headers);
        reply.json_bytes(200, &headers, &body);
    }
}

/// `{"Query": …, <query meta>}` in Consul's field order.
fn write_explanation(
    out: &mut Vec<u8>,
    pretty: bool,
    resolved: &PreparedQuery,
    show_tokens: bool,
    meta: QueryMeta,
) {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "PascalCase")]
    struct Explanation<'a> {
        query: QueryJson<'a>,
        #[serde(flatten)]
        meta: MetaJson,
    }
    let explanation = Explanation {
        query: QueryJson {
            query: resolved,
            token: token_shown(resolved, show_tokens),
        },
        meta: MetaJson::from(meta),
    };
    crate::consul::json::write_serde(out, &explanation, pretty);
}

/// Consul's `QueryMeta` as the fields of an execute or explain answer.
#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct MetaJson {
    index: u64,
    /// A Go `time.Duration`: nanoseconds.
    last_contact: u64,
    known_leader: bool,
    consistency_level: &'static str,
    not_modified: bool,
    backend: u8,
    #[serde(rename = "ResultsFilteredByACLs")]
    results_filtered_by_acls: bool,
}

impl From<QueryMeta> for MetaJson {
    fn from(meta: QueryMeta) -> MetaJson {
        MetaJson {
            index: meta.index,
            last_contact: meta.last_contact_ms.saturating_mul(1_000_000),
            known_leader: meta.known_leader,
            consistency_level: meta.consistency.as_str(),
            not_modified: false,
            backend: 0,
            results_filtered_by_acls: false,
        }
    }
}

impl MetaJson {
    fn filtered(mut self, hidden: bool) -> MetaJson {
        self.results_filtered_by_acls = hidden;
        self
    }
}

/// What an execution was asked, taken from the request before any waiting.
#[derive(Clone)]
struct ExecuteRequest {
    id_or_name: String,
    limit: usize,
    connect: bool,
    /// `?near=`: a node name, `_agent`, or empty.
    near: String,
    /// The agent the request first reached (`_agent`).
    agent_node: String,
    /// The token to run the failover with (the request's or the agent's default).
    token: Option<String>,
    /// What the instances are filtered by (see [`results_filter`]).
    filter: RowFilter,
    consistency: Consistency,
    pretty: bool,
}

/// `?limit=`: a count, 0 (or negative, as Consul ignores it) for no limit.
fn parse_limit(request: &Request) -> Result<usize, ApiError> {
    match request.query.get("limit") {
        None | Some("") => Ok(0),
        Some(text) => text
            .parse::<i64>()
            .map(|n| n.max(0) as usize)
            .map_err(|e| ApiError::bad_request(format!("Bad limit: {e}"))),
    }
}

/// `GET /v1/query/<id|name>/execute`.
fn execute(
    ctx: &Context,
    request: &Request,
    id_or_name: &str,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if ctx.is_client() {
        return Ok(Outcome::Forward);
    }
    let options = query_options(ctx, &request.query)?;
    // The query's own token, read now: the filter is resolved on the shard, before any
    // wait for a barrier.
    let stored_token = match query::resolve(&ctx.current_version(), id_or_name, "") {
        Ok(Some(found)) => found.token,
        _ => String::new(),
    };
    let asked = ExecuteRequest {
        filter: results_filter(ctx, request, &stored_token)?,
        id_or_name: id_or_name.to_string(),
        limit: parse_limit(request)?,
        connect: request.query.has("connect"),
        near: request.query.get("near").unwrap_or("").to_string(),
        agent_node: request
            .header(super::ORIGIN_NODE_HEADER)
            .filter(|n| !n.is_empty())
            .unwrap_or(&ctx.config().node_name)
            .to_string(),
        token: request
            .token()
            .map(str::to_string)
            .or_else(|| ctx.agent_default_token()),
        consistency: options.consistency,
        pretty: reply.pretty,
    };
    let lan = ctx.lan().cloned();
    let deferred = ctx.deferred();
    match ctx.read_plan(&options) {
        ReadPlan::Forward => Ok(Outcome::Forward),
        ReadPlan::Barrier => Ok(Outcome::Async(Box::pin(async move {
            if let Err(error) = deferred.read_barrier().await {
                return Box::new(move |reply: &mut Reply| reply.error(&error)) as AsyncResponder;
            }
            let version = deferred.current_version();
            match run_locally(&deferred, &version, lan.as_ref(), &asked) {
                Step::Answered(respond) => respond,
                Step::FailOver(plan) => plan.run(deferred).await,
            }
        }))),
        ReadPlan::Local => {
            let version = ctx.current_version();
            match run_locally(&deferred, &version, lan.as_ref(), &asked) {
                Step::Answered(respond) => {
                    respond(reply);
                    Ok(Outcome::Done)
                }
                Step::FailOver(plan) => Ok(Outcome::Async(Box::pin(plan.run(deferred)))),
            }
        }
    }
}

/// Where an execution stands after the local half.
enum Step {
    /// The answer is known.
    Answered(AsyncResponder),
    /// No instance here: ask other datacenters.
    FailOver(Box<FailoverPlan>),
}

/// Resolves and runs the query against this datacenter's `version`.
fn run_locally(
    deferred: &Deferred,
    version: &StoreVersion,
    lan: Option<&crate::cluster::gossip::GossipHandle>,
    asked: &ExecuteRequest,
) -> Step {
    let resolved = match query::resolve(version, &asked.id_or_name, "") {
        Ok(Some(resolved)) => resolved,
        Ok(None) => {
            let meta = deferred.query_meta(query::queries_index(version), asked.consistency);
            return Step::Answered(Box::new(move |reply: &mut Reply| not_found(reply, meta)));
        }
        Err(reason) => {
            return Step::Answered(Box::new(move |reply: &mut Reply| {
                reply.error(&ApiError::Internal(reason))
            }))
        }
    };
    let local = &deferred.config().datacenter;
    let mut rows = select(version, &resolved.service, asked.connect);
    let hidden = hide_unreadable(&asked.filter, &mut rows);
    let near = if asked.near.is_empty() {
        resolved.service.near.as_str()
    } else {
        asked.near.as_str()
    };
    let near = if near == "_agent" {
        asked.agent_node.as_str()
    } else {
        near
    };
    order(&mut rows, version, lan, near, asked.limit);
    let index = if asked.connect || resolved.service.connect {
        crate::store::catalog::read::connect_rows(version, &resolved.service.service).index
    } else {
        crate::store::catalog::read::service_index(version, &resolved.service.service)
    };
    let meta = deferred.query_meta(index, asked.consistency);
    let targets = failover_targets(deferred.router(), &resolved);
    if !rows.is_empty() || targets.is_empty() {
        let body = execution_body(
            asked.pretty,
            &resolved,
            &rows,
            local,
            0,
            MetaJson::from(meta).filtered(hidden),
        );
        let filter = asked.filter.clone();
        return Step::Answered(Box::new(move |reply: &mut Reply| {
            answer_execution(reply, meta, (&filter, hidden), &body)
        }));
    }
    let mut sent = resolved;
    // The remote side runs it as a plain query: it is already rendered.
    sent.template = Default::default();
    Step::FailOver(Box::new(FailoverPlan {
        query: sent,
        datacenters: targets,
        asked: asked.clone(),
        meta,
    }))
}

/// Which instances an execution may show, as Consul's `PreparedQuery.Execute` decides: a
/// query saved with a token runs with that token's rules, else with the caller's (the
/// request's token, else the agent's default). Without it, a caller who may not read a
/// service could list its instances through a query. Every instance needs `node:read` on
/// its node and `service:read` on its service.
fn results_filter(
    ctx: &Context,
    request: &Request,
    stored_token: &str,
) -> Result<RowFilter, ApiError> {
    let filter = RowFilter::of(request);
    if !ctx.acl_enabled() || stored_token.is_empty() {
        return Ok(filter);
    }
    let authz = super::authz::resolve(ctx, stored_token)?;
    Ok(filter.judged_by(&authz))
}

/// Leaves out the instances `filter` may not read; whether any was left out.
fn hide_unreadable(filter: &RowFilter, rows: &mut Vec<CheckServiceNode>) -> bool {
    filter.retain(rows, |filter, row| {
        filter.node_service(&row.node.name, &row.service.name)
    })
}

fn answer_execution(
    reply: &mut Reply,
    meta: QueryMeta,
    (filter, hidden): (&RowFilter, bool),
    body: &[u8],
) {
    let mut headers = Vec::with_capacity(160);
    meta.write_headers(&mut headers);
    filter.write_header(hidden, &mut headers);
    reply.json_bytes(200, &headers, body);
}

/// Shuffles, sorts by distance from `near` with that node first, and keeps `limit`, as
/// Consul's execution does.
fn order(
    rows: &mut Vec<CheckServiceNode>,
    version: &StoreVersion,
    lan: Option<&crate::cluster::gossip::GossipHandle>,
    near: &str,
    limit: usize,
) {
    shuffle(rows);
    if !near.is_empty() {
        if let Some(distances) =
            lan.and_then(|handle| super::coordinate::distances_from_handle(handle, version, near))
        {
            sort_by_distance(rows, &distances);
        }
        let depth = rows.len().min(NEAR_NODE_SEARCH_DEPTH);
        if let Some(at) = rows[..depth]
            .iter()
            .position(|r| r.node.name.eq_ignore_ascii_case(near))
        {
            rows.swap(0, at);
        }
    }
    if limit > 0 {
        rows.truncate(limit);
    }
}

fn shuffle<T>(items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = rand::random_range(0..=i);
        items.swap(i, j);
    }
}

/// Stable: equal distances keep the shuffled order; nodes without a coordinate go last.
fn sort_by_distance(rows: &mut [CheckServiceNode], distances: &HashMap<String, f64>) {
    rows.sort_by(|a, b| {
        let da = distances.get(&*a.node.name);
        let db = distances.get(&*b.node.name);
        match (da, db) {
            (Some(x), Some(y)) => x.total_cmp(y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        }
    });
}

/// The datacenters a failover tries, in order: the `NearestN` nearest other ones, then
/// the listed ones (`Datacenters`, or `Targets`) not tried yet; unknown ones are skipped.
fn failover_targets(router: &crate::cluster::router::Router, query: &PreparedQuery) -> Vec<String> {
    let failover = &query.service.failover;
    if failover.is_empty() {
        return Vec::new();
    }
    let nearest = router.other_datacenters_by_distance();
    let mut chosen: Vec<String> = nearest
        .iter()
        .take(failover.nearest_n.max(0) as usize)
        .cloned()
        .collect();
    for target in failover.as_targets() {
        let dc = target.datacenter.to_lowercase();
        if dc.is_empty() || !nearest.contains(&dc) {
            log::debug!("prepared query: skipping unknown datacenter {dc:?}");
            continue;
        }
        if !chosen.contains(&dc) {
            chosen.push(dc);
        }
    }
    chosen
}

/// A failover to run: the rendered query and where to send it.
struct FailoverPlan {
    query: PreparedQuery,
    datacenters: Vec<String>,
    asked: ExecuteRequest,
    /// The local execution's metadata, for an answer no other datacenter gave.
    meta: QueryMeta,
}

impl FailoverPlan {
    /// The request that runs the query in `datacenter`, the `failovers`-th tried.
    fn remote_request(&self, datacenter: &str, failovers: usize) -> Vec<u8> {
        let body = consul_query::to_json(&self.query);
        let mut target = format!(
            "{EXECUTE_REMOTE_PATH}?dc={datacenter}&failovers={failovers}&limit={}",
            self.asked.limit
        );
        if self.asked.connect {
            target.push_str("&connect");
        }
        if self.asked.consistency == Consistency::Stale {
            target.push_str("&stale");
        }
        if self.asked.pretty {
            target.push_str("&pretty");
        }
        let mut request = format!("GET {target} HTTP/1.1\r\nHost: praetor\r\n").into_bytes();
        if let Some(token) = self
            .asked
            .token
            .as_deref()
            .filter(|t| !t.contains(['\r', '\n']))
        {
            request.extend_from_slice(format!("X-Consul-Token: {token}\r\n").as_bytes());
        }
        request.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        request.extend_from_slice(&body);
        request
    }

    /// Asks each datacenter in turn; the first that has instances answers (its raw
    /// answer is passed on). When none has any, the answer is empty, from the last
    /// datacenter that answered, with `Failovers` counting every one asked.
    async fn run(self, deferred: Deferred) -> AsyncResponder {
        let mut answered_by = deferred.config().datacenter.clone();
        for (i, datacenter) in self.datacenters.iter().enumerate() {
            let failovers = i + 1;
            let request = self.remote_request(datacenter, failovers);
            let raw = match deferred
                .request_datacenter(datacenter, &request, FAILOVER_TIMEOUT)
                .await
            {
                Ok(raw) => raw,
                Err(reason) => {
                    log::warn!(
                        "prepared query: failed querying for service {:?} in datacenter {datacenter}: {reason}",
                        self.query.service.service
                    );
                    continue;
                }
            };
            match remote_node_count(&raw) {
                Ok(0) => answered_by = datacenter.clone(),
                Ok(_) => {
                    return Box::new(move |reply: &mut Reply| reply.out.extend_from_slice(&raw));
                }
                Err(reason) => log::warn!(
                    "prepared query: datacenter {datacenter} answered the failover oddly: {reason}"
                ),
            }
        }
        let body = execution_body(
            self.asked.pretty,
            &self.query,
            &[],
            &answered_by,
            self.datacenters.len(),
            MetaJson::from(self.meta),
        );
        let meta = self.meta;
        let filter = self.asked.filter.clone();
        Box::new(move |reply: &mut Reply| answer_execution(reply, meta, (&filter, false), &body))
    }
}

/// How many instances a remote execution's raw HTTP answer carries; an error for an
/// answer that is not a 200 execution.
fn remote_node_count(raw: &[u8]) -> Result<usize, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return Err("a malformed HTTP answer".to_string()),
    };
    let body = &raw[head_len..];
    if response.code != Some(200) {
        return Err(format!(
            "status {:?}: {}",
            response.code,
            String::from_utf8_lossy(body)
        ));
    }
    #[derive(serde::Deserialize)]
    struct Nodes {
        #[serde(rename = "Nodes")]
        nodes: Option<Vec<serde::de::IgnoredAny>>,
    }
    let parsed: Nodes = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    Ok(parsed.nodes.map_or(0, |n| n.len()))
}

/// An execution's answer: `{Service, Nodes, DNS, Datacenter, PeerName, Failovers, <meta>}`.
fn execution_body(
    pretty: bool,
    query: &PreparedQuery,
    rows: &[CheckServiceNode],
    datacenter: &str,
    failovers: usize,
    meta: MetaJson,
) -> Vec<u8> {
    let mut body = Vec::with_capacity(512 + rows.len() * 512);
    let mut w = JsonWriter::new(&mut body, pretty);
    w.begin_object();
    w.field_str("Service", &query.service.service);
    w.field_array("Nodes");
    for row in rows {
        render::check_service_node(&mut w, row);
    }
    w.end_array();
    w.field_object("DNS");
    w.field_str("TTL", &query.dns_ttl);
    w.end_object();
    w.field_str("Datacenter", datacenter);
    w.field_str("PeerName", "");
    w.field_u64("Failovers", failovers as u64);
    w.field_u64("Index", meta.index);
    w.field_u64("LastContact", meta.last_contact);
    w.field_bool("KnownLeader", meta.known_leader);
    w.field_str("ConsistencyLevel", meta.consistency_level);
    w.field_bool("NotModified", meta.not_modified);
    w.field_u64("Backend", meta.backend as u64);
    w.field_bool("ResultsFilteredByACLs", meta.results_filtered_by_acls);
    w.end_object();
    w.finish();
    body
}

/// `GET /v1/internal/praetor/query-execute-remote` (body: the query): runs another
/// datacenter's query here, without failover (Consul's `ExecuteRemote`).
pub fn execute_remote(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if ctx.is_client() {
        return Ok(Outcome::Forward);
    }
    let options: QueryOptions = query_options(ctx, &request.query)?;
    let query = decode_body(request.body)?;
    let failovers = match request.query.get("failovers") {
        None | Some("") => 0,
        Some(text) => text
            .parse::<usize>()
            .map_err(|_| ApiError::bad_request("Bad failovers count"))?,
    };
    let remote = RemoteExecution {
        filter: results_filter(ctx, request, &query.token)?,
        query,
        limit: parse_limit(request)?,
        connect: request.query.has("connect"),
        failovers,
        datacenter: ctx.config().datacenter.clone(),
    };
    run_query(ctx, remote, options, reply)
}

struct RemoteExecution {
    query: PreparedQuery,
    filter: RowFilter,
    limit: usize,
    connect: bool,
    failovers: usize,
    datacenter: String,
}

impl Query for RemoteExecution {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        let service = &self.query.service.service;
        (
            crate::store::catalog::read::service_index(tables, service),
            WatchSet::new().key(
                Table::ServiceIndex,
                Arc::from(&*crate::store::catalog::rows::fold(service)),
            ),
        )
    }
    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let mut rows = select(tables, &self.query.service, self.connect);
        let hidden = hide_unreadable(&self.filter, &mut rows);
        // No distance sort in another datacenter: a shuffle spreads the load.
        order(&mut rows, tables, None, "", self.limit);
        let body = execution_body(
            reply.pretty,
            &self.query,
            &rows,
            &self.datacenter,
            self.failovers,
            MetaJson::from(meta).filtered(hidden),
        );
        answer_execution(reply, meta, (&self.filter, hidden), &body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_answers_are_counted_and_bad_ones_refused() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 34\r\n\r\n{\"Nodes\":[{\"a\":1},{}],\"Service\":1}";
        assert_eq!(remote_node_count(ok), Ok(2));
        let empty = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n{\"Nodes\":[]}";
        assert_eq!(remote_node_count(empty), Ok(0));
        let failed = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nnope";
        assert!(remote_node_count(failed).unwrap_err().contains("nope"));
        assert!(remote_node_count(b"garbage").is_err());
    }

    #[test]
    fn execution_bodies_have_consuls_fields_in_order() {
        let query = PreparedQuery {
            service: crate::store::query::ServiceQuery {
                service: "web".into(),
                ..Default::default()
            },
            dns_ttl: "10s".into(),
            ..Default::default()
        };
        let meta = QueryMeta {
            index: 7,
            known_leader: true,
            last_contact_ms: 2,
            consistency: Consistency::Leader,
            cache: None,
        };
        let body = execution_body(false, &query, &[], "dc2", 1, MetaJson::from(meta));
        let text = String::from_utf8(body).unwrap();
        assert_eq!(
            text,
            r#"{"Service":"web","Nodes":[],"DNS":{"TTL":"10s"},"Datacenter":"dc2","PeerName":"","Failovers":1,"Index":7,"LastContact":2000000,"KnownLeader":true,"ConsistencyLevel":"leader","NotModified":false,"Backend":0,"ResultsFilteredByACLs":false}"#
        );
        let pretty = execution_body(true, &query, &[], "dc2", 1, MetaJson::from(meta));
        let value: serde_json::Value = serde_json::from_slice(&pretty).unwrap();
        assert_eq!(value["Failovers"], 1);
    }
}
