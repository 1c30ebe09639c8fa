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
//! runs the query it is sent as Consul's `PreparedQuery.ExecuteRemote` call (the whole
//! definition travels, since the remote store does not have it, and it fails over no
//! further; `api::rpc::prepared_query` serves it).
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
use super::rpc::client_query::{self, Apply};
use super::{
    check_datacenter, query_options, run_query, ApiError, AsyncResponder, Context, Outcome, Query,
    QueryMeta, Reply, Request, WriteOp,
};
use crate::api::context::Deferred;
use crate::cluster::servers::Retry;
use crate::consul::json::JsonWriter;
use crate::consul::query::{self as consul_query, QueryJson, REDACTED_TOKEN};
use crate::consul::render;
use crate::consul::rpc::prepared_query::{self, ExecuteRemoteRequest};
use crate::consul::rpc::rows::CheckServiceNodeRow;
use crate::proto::http::Method;
use crate::shard::runtime::{Consistency, ReadPlan};
use crate::shard::watch::WatchSet;
use crate::store::catalog::read::CheckServiceNode;
use crate::store::query::{self, select::select, PreparedQuery, QueryOp};
use crate::store::{QueryResult, StoreVersion, Table, Tables};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

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

/// What a `/v1/query/<…>` request asks for, from its path and method.
enum Specific<'r> {
    Execute(&'r str),
    Explain(&'r str),
    Get(&'r str),
    Update(&'r str),
    Delete(&'r str),
}

/// Reads `/v1/query/<id>` (GET, PUT, DELETE), `/v1/query/<id|name>/execute` and `/explain`
/// (GET only).
fn specific_of<'r>(request: &Request<'r>) -> Result<Specific<'r>, ApiError> {
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
        return Ok(Specific::Execute(id_or_name));
    }
    if let Some(id_or_name) = rest.strip_suffix("/explain") {
        only_get(request)?;
        return Ok(Specific::Explain(id_or_name));
    }
    Ok(match request.method {
        Method::Get => Specific::Get(rest),
        Method::Put => Specific::Update(rest),
        _ => Specific::Delete(rest),
    })
}

/// `/v1/query/<id>` (GET, PUT, DELETE), `/v1/query/<id|name>/execute` and `/explain` (GET).
pub fn specific(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    match specific_of(request)? {
        Specific::Execute(id_or_name) => execute(ctx, request, id_or_name, reply),
        Specific::Explain(id_or_name) => explain(ctx, request, id_or_name, reply),
        Specific::Get(id) => get(ctx, request, id, reply),
        Specific::Update(id) => update(ctx, request, id),
        Specific::Delete(id) => delete(ctx, request, id),
    }
}

/// A `/v1/query` request naming another datacenter (`?dc=`): parsed, decoded and validated
/// as for this one, then its typed call (`PreparedQuery.*`) naming `datacenter`, whose
/// servers answer it.
pub(crate) fn across(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let options = || super::query_options_in(ctx, &request.query);
    if request.path == "/v1/query" {
        return Ok(match request.method {
            Method::Get => client_query::list(ctx, request, options()?, datacenter),
            _ => {
                let query = decode_create(request)?;
                client_query::apply(ctx, request, Apply::Create, &query, datacenter)
            }
        });
    }
    Ok(match specific_of(request)? {
        Specific::Execute(id_or_name) => {
            let options = options()?;
            let limit = parse_limit(request)?;
            client_query::execute(ctx, request, id_or_name, limit, options, datacenter)
        }
        Specific::Explain(id_or_name) => {
            client_query::explain(ctx, request, id_or_name, options()?, datacenter)
        }
        Specific::Get(id) => client_query::get(ctx, request, id, options()?, datacenter),
        Specific::Update(id) => {
            let query = decode_update(request, id)?;
            client_query::apply(ctx, request, Apply::Update, &query, datacenter)
        }
        Specific::Delete(id) => {
            let query = PreparedQuery {
                id: id.to_string(),
                ..PreparedQuery::default()
            };
            client_query::apply(ctx, request, Apply::Delete, &query, datacenter)
        }
    })
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

/// A create's query, decoded and validated as Consul's endpoint does.
fn decode_create(request: &Request) -> Result<PreparedQuery, ApiError> {
    let query = decode_body(request.body)?;
    if !query.id.is_empty() {
        return Err(ApiError::Internal(
            "ID must be empty when creating a new prepared query".to_string(),
        ));
    }
    validate(&query)?;
    Ok(query)
}

fn create(ctx: &Context, request: &Request) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    let mut query = decode_create(request)?;
    if ctx.writes_by_call() {
        return Ok(client_query::apply(ctx, request, Apply::Create, &query, ""));
    }
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

/// An update's query, decoded and validated as Consul's endpoint does; the ID comes from
/// the path, not the body.
fn decode_update(request: &Request, id: &str) -> Result<PreparedQuery, ApiError> {
    let mut query = if request.body.iter().all(u8::is_ascii_whitespace) {
        PreparedQuery::default()
    } else {
        decode_body(request.body)?
    };
    query.id = id.to_string();
    validate(&query)?;
    Ok(query)
}

fn update(ctx: &Context, request: &Request, id: &str) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    let query = decode_update(request, id)?;
    if ctx.writes_by_call() {
        return Ok(client_query::apply(ctx, request, Apply::Update, &query, ""));
    }
    let update = QueryOp::Set {
        query: Box::new(query),
        create: false,
    };
    Ok(Outcome::Write(WriteOp::query(update, answer_empty)))
}

fn delete(ctx: &Context, request: &Request, id: &str) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    if ctx.writes_by_call() {
        let query = PreparedQuery {
            id: id.to_string(),
            ..PreparedQuery::default()
        };
        return Ok(client_query::apply(ctx, request, Apply::Delete, &query, ""));
    }
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
pub(crate) fn write_queries<'q>(
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
    if ctx.reads_by_call(&options) {
        return Ok(client_query::list(ctx, request, options, ""));
    }
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
    if ctx.reads_by_call(&options) {
        return Ok(client_query::get(ctx, request, id, options, ""));
    }
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

pub(crate) fn not_found(reply: &mut Reply, meta: QueryMeta) {
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
    let options = query_options(ctx, &request.query)?;
    if ctx.reads_by_call(&options) {
        return Ok(client_query::explain(ctx, request, id_or_name, options, ""));
    }
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
pub(crate) fn write_explanation(
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
pub(crate) struct ExecuteRequest {
    pub id_or_name: String,
    pub limit: usize,
    pub connect: bool,
    /// `?near=` (Consul's `Source.Node`): a node name, `_agent`, or empty.
    pub near: String,
    /// The agent the request first reached (`_agent`; Consul's `Agent.Node`).
    pub agent_node: String,
    /// The token to run the failover with (the request's or the agent's default).
    pub token: Option<String>,
    /// What the instances are filtered by (see [`results_filter`]).
    pub filter: RowFilter,
    pub consistency: Consistency,
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
    let options = query_options(ctx, &request.query)?;
    if ctx.reads_by_call(&options) {
        let limit = parse_limit(request)?;
        return Ok(client_query::execute(
            ctx, request, id_or_name, limit, options, "",
        ));
    }
    // The query's own token, read now: the filter is resolved on the shard, before any
    // wait for a barrier.
    let stored_token = stored_token(&ctx.current_version(), id_or_name);
    let asked = ExecuteRequest {
        filter: results_filter(ctx, request, &stored_token)?,
        id_or_name: id_or_name.to_string(),
        limit: parse_limit(request)?,
        connect: request.query.has("connect"),
        near: request.query.get("near").unwrap_or("").to_string(),
        agent_node: ctx.config().node_name.clone(),
        token: request
            .token()
            .map(str::to_string)
            .or_else(|| ctx.agent_default_token()),
        consistency: options.consistency,
    };
    let lan = ctx.lan().cloned();
    let deferred = ctx.deferred();
    match ctx.read_plan(&options) {
        // `reads_by_call` above sent this read as `PreparedQuery.Execute`.
        ReadPlan::Forward => Err(super::no_typed_call()),
        ReadPlan::Barrier => Ok(Outcome::Async(Box::pin(async move {
            if let Err(error) = deferred.read_barrier().await {
                return Box::new(move |reply: &mut Reply| reply.error(&error)) as AsyncResponder;
            }
            let version = deferred.current_version();
            let local = run_locally(&deferred, &version, lan.as_ref(), &asked);
            drop(version);
            let filter = asked.filter;
            match local {
                Ok(step) => {
                    let executed = step.finish(&deferred).await;
                    Box::new(move |reply: &mut Reply| executed.respond(reply, filter.reveals()))
                }
                Err(ended) => Box::new(move |reply: &mut Reply| ended.respond(reply)),
            }
        }))),
        ReadPlan::Local => {
            let version = ctx.current_version();
            match run_locally(&deferred, &version, lan.as_ref(), &asked) {
                Ok(Step::Executed(executed)) => executed.respond(reply, asked.filter.reveals()),
                Ok(Step::FailOver(plan)) => {
                    let filter = asked.filter;
                    return Ok(Outcome::Async(Box::pin(async move {
                        let executed = plan.run(&deferred).await;
                        Box::new(move |reply: &mut Reply| executed.respond(reply, filter.reveals()))
                            as AsyncResponder
                    })));
                }
                Err(ended) => ended.respond(reply),
            }
            Ok(Outcome::Done)
        }
    }
}

/// The token a query was saved with (empty: none, or no such query), which its
/// executions run with.
pub(crate) fn stored_token(version: &StoreVersion, id_or_name: &str) -> String {
    match query::resolve(version, id_or_name, "") {
        Ok(Some(found)) => found.token,
        _ => String::new(),
    }
}

/// An execution's answer before it is written, as JSON for HTTP ([`Executed::respond`]) or
/// as Consul's `PreparedQueryExecuteResponse` for a typed call ([`Executed::encode`]).
pub(crate) struct Executed {
    pub service: String,
    pub dns_ttl: String,
    /// The datacenter whose instances these are.
    pub datacenter: String,
    /// How many other datacenters were asked.
    pub failovers: u64,
    pub rows: Vec<CheckServiceNodeRow>,
    pub meta: QueryMeta,
    /// Whether the token's rules left some instance out.
    pub hidden: bool,
}

impl Executed {
    /// The HTTP answer; `reveal`: the caller sent a token, so it is told when its rules
    /// left instances out.
    pub fn respond(&self, reply: &mut Reply, reveal: bool) {
        let rows: Vec<CheckServiceNode> =
            self.rows.iter().map(CheckServiceNodeRow::as_row).collect();
        let body = execution_body(
            reply.pretty,
            &self.execution(),
            &rows,
            MetaJson::from(self.meta).filtered(self.hidden),
        );
        let mut headers = Vec::with_capacity(160);
        self.meta.write_headers(&mut headers);
        if self.hidden && reveal {
            headers.extend_from_slice(super::FILTERED_BY_ACLS_HEADER);
        }
        reply.json_bytes(200, &headers, &body);
    }

    pub fn encode(&self) -> Vec<u8> {
        let rows: Vec<CheckServiceNode> =
            self.rows.iter().map(CheckServiceNodeRow::as_row).collect();
        let meta = crate::api::rpc::rpc_meta_of(&self.meta, self.hidden);
        prepared_query::write_execute_response(&meta, &self.execution(), &rows)
    }

    fn execution(&self) -> prepared_query::Execution<'_> {
        prepared_query::Execution {
            service: &self.service,
            dns_ttl: &self.dns_ttl,
            datacenter: &self.datacenter,
            failovers: self.failovers,
        }
    }
}

/// An execution that ended before any instance was selected.
pub(crate) enum Ended {
    /// No query has that ID or name (404 over HTTP, Consul's error text over RPC).
    NotFound(QueryMeta),
    /// The query could not be resolved (a template's rendering failed).
    Refused(String),
}

impl Ended {
    fn respond(&self, reply: &mut Reply) {
        match self {
            Ended::NotFound(meta) => not_found(reply, *meta),
            Ended::Refused(reason) => reply.error(&ApiError::Internal(reason.clone())),
        }
    }

    /// The error a typed call answers.
    pub fn text(&self) -> String {
        match self {
            Ended::NotFound(_) => query::QUERY_NOT_FOUND.to_string(),
            Ended::Refused(reason) => reason.clone(),
        }
    }
}

/// Where an execution stands after the local half.
pub(crate) enum Step {
    /// The answer is known.
    Executed(Executed),
    /// No instance here: ask other datacenters.
    FailOver(Box<FailoverPlan>),
}

impl Step {
    /// The answer, after the failover if one is needed.
    pub async fn finish(self, deferred: &Deferred) -> Executed {
        match self {
            Step::Executed(executed) => executed,
            Step::FailOver(plan) => plan.run(deferred).await,
        }
    }
}

/// Resolves and runs the query against this datacenter's `version`.
pub(crate) fn run_locally(
    deferred: &Deferred,
    version: &StoreVersion,
    lan: Option<&crate::cluster::gossip::GossipHandle>,
    asked: &ExecuteRequest,
) -> Result<Step, Ended> {
    let resolved = match query::resolve(version, &asked.id_or_name, "") {
        Ok(Some(resolved)) => resolved,
        Ok(None) => {
            let meta = deferred.query_meta(query::queries_index(version), asked.consistency);
            return Err(Ended::NotFound(meta));
        }
        Err(reason) => return Err(Ended::Refused(reason)),
    };
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
        return Ok(Step::Executed(Executed {
            service: resolved.service.service.clone(),
            dns_ttl: resolved.dns_ttl.clone(),
            datacenter: deferred.config().datacenter.clone(),
            failovers: 0,
            rows: rows.iter().map(owned_row).collect(),
            meta,
            hidden,
        }));
    }
    let mut sent = resolved;
    // The remote side runs it as a plain query: it is already rendered.
    sent.template = Default::default();
    Ok(Step::FailOver(Box::new(FailoverPlan {
        query: sent,
        datacenters: targets,
        asked: asked.clone(),
        meta,
    })))
}

/// A selected instance as an owned row (shared pointers into the version's rows), so the
/// answer may outlive the version, wait for a failover, or come from another datacenter.
fn owned_row(row: &CheckServiceNode) -> CheckServiceNodeRow {
    CheckServiceNodeRow {
        node: row.node.clone(),
        service: row.service.clone(),
        checks: row.checks().cloned().collect(),
    }
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
pub(crate) fn hide_unreadable(filter: &RowFilter, rows: &mut Vec<CheckServiceNode>) -> bool {
    filter.retain(rows, |filter, row| {
        filter.node_service(&row.node.name, &row.service.name)
    })
}

/// Shuffles, sorts by distance from `near` with that node first, and keeps `limit`, as
/// Consul's execution does.
pub(crate) fn order(
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
pub(crate) struct FailoverPlan {
    query: PreparedQuery,
    datacenters: Vec<String>,
    asked: ExecuteRequest,
    /// The local execution's metadata, for an answer no other datacenter gave.
    meta: QueryMeta,
}

impl FailoverPlan {
    /// The `PreparedQuery.ExecuteRemote` call that runs the query in `datacenter`.
    fn remote_request(&self, datacenter: &str) -> Vec<u8> {
        ExecuteRemoteRequest {
            datacenter,
            query: self.query.clone(),
            limit: self.asked.limit as i64,
            connect: self.asked.connect,
            options: crate::consul::rpc::QueryOptions {
                token: self.asked.token.as_deref().unwrap_or(""),
                allow_stale: self.asked.consistency == Consistency::Stale,
                require_consistent: self.asked.consistency == Consistency::Consistent,
                ..Default::default()
            },
        }
        .encode()
    }

    /// Asks each datacenter in turn (Consul's `PreparedQuery.ExecuteRemote`, through the
    /// WAN router); the first that has instances answers, its own metadata with it. When
    /// none has any, the answer is empty, from the last datacenter that answered, with
    /// `Failovers` counting every one asked.
    async fn run(self, deferred: &Deferred) -> Executed {
        let mut answered_by = deferred.config().datacenter.clone();
        for (i, datacenter) in self.datacenters.iter().enumerate() {
            let failovers = (i + 1) as u64;
            let body = self.remote_request(datacenter);
            let raw = match deferred
                .call_datacenter(
                    datacenter,
                    "PreparedQuery.ExecuteRemote",
                    &body,
                    FAILOVER_TIMEOUT,
                    Retry::Always,
                )
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
            match prepared_query::read_execute_response(&raw) {
                Ok(remote) if remote.nodes.is_empty() => answered_by = datacenter.clone(),
                Ok(remote) => {
                    return Executed {
                        meta: super::rpc::client::meta_of(&remote.meta),
                        hidden: remote.meta.results_filtered_by_acls,
                        service: remote.service,
                        dns_ttl: remote.dns_ttl,
                        datacenter: remote.datacenter,
                        failovers,
                        rows: remote.nodes,
                    };
                }
                Err(reason) => log::warn!(
                    "prepared query: datacenter {datacenter} answered the failover oddly: {reason}"
                ),
            }
        }
        Executed {
            service: self.query.service.service.clone(),
            dns_ttl: self.query.dns_ttl.clone(),
            datacenter: answered_by,
            failovers: self.datacenters.len() as u64,
            rows: Vec::new(),
            meta: self.meta,
            hidden: false,
        }
    }
}

/// An execution's answer: `{Service, Nodes, DNS, Datacenter, PeerName, Failovers, <meta>}`.
fn execution_body(
    pretty: bool,
    execution: &prepared_query::Execution,
    rows: &[CheckServiceNode],
    meta: MetaJson,
) -> Vec<u8> {
    let mut body = Vec::with_capacity(512 + rows.len() * 512);
    let mut w = JsonWriter::new(&mut body, pretty);
    w.begin_object();
    w.field_str("Service", execution.service);
    w.field_array("Nodes");
    for row in rows {
        render::check_service_node(&mut w, row);
    }
    w.end_array();
    w.field_object("DNS");
    w.field_str("TTL", execution.dns_ttl);
    w.end_object();
    w.field_str("Datacenter", execution.datacenter);
    w.field_str("PeerName", "");
    w.field_u64("Failovers", execution.failovers);
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let execution = prepared_query::Execution {
            service: &query.service.service,
            dns_ttl: &query.dns_ttl,
            datacenter: "dc2",
            failovers: 1,
        };
        let body = execution_body(false, &execution, &[], MetaJson::from(meta));
        let text = String::from_utf8(body).unwrap();
        assert_eq!(
            text,
            r#"{"Service":"web","Nodes":[],"DNS":{"TTL":"10s"},"Datacenter":"dc2","PeerName":"","Failovers":1,"Index":7,"LastContact":2000000,"KnownLeader":true,"ConsistencyLevel":"leader","NotModified":false,"Backend":0,"ResultsFilteredByACLs":false}"#
        );
        let pretty = execution_body(true, &execution, &[], MetaJson::from(meta));
        let value: serde_json::Value = serde_json::from_slice(&pretty).unwrap();
        assert_eq!(value["Failovers"], 1);
    }
}
