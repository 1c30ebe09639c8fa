//! The HTTP API (`/v1/...`): routing, Consul's query options and response metadata, error
//! mapping, and the endpoint handlers.
//!
//! Handlers are synchronous functions over the shard's current store version. Anything that
//! must wait is returned as an [`Outcome`] holding only owned data — a command to replicate
//! ([`WriteOp`]) or a blocking query to park ([`BlockOp`]) — and the connection loop in
//! `api::server` performs the wait. That keeps a parked request down to its query
//! object and watch registration: it holds no borrowed request buffer.
//!
//! Errors follow Consul's wrapper: a plain-text body with the reason and the status Consul
//! would use (400 bad input, 404, 405 with `Allow`, 413, 500 for server-side failures such as
//! "No cluster leader").

pub mod acl;
pub mod agent;
pub mod agent_cache;
pub mod agent_channel;
pub mod agent_local;
pub mod authz;
pub mod body_cache;
pub mod catalog;
pub mod client_tokens;
pub mod config;
pub mod connect;
pub mod context;
pub mod coordinate;
pub mod debug;
pub mod event;
pub mod federation_state;
pub mod gateways;
#[cfg(test)]
mod handler_tests;
pub mod health;
pub mod host;
pub mod intentions;
pub mod keyring;
pub mod kv;
pub mod members;
pub mod monitor;
pub mod operator;
pub mod peer;
pub mod peering;
pub mod query;
pub mod routes;
pub mod rpc;
pub mod server;
pub mod session;
pub mod shared_answers;
pub mod snapshot;
pub mod status;
pub mod translate;
pub mod txn;
pub mod ui;
pub mod ui_assets;
pub mod ui_summary;
pub mod ui_topology;

pub use context::Context;

use crate::consul::{json, render};
use crate::proto::duration::parse_go_duration;
use crate::proto::http::{self, Method, QueryParams, RequestHead};
use crate::shard::runtime::{Consistency, ReadPlan};
use crate::shard::watch::WatchSet;
use crate::store::autopilot::AutopilotOp;
use crate::store::catalog::CatalogOp;
use crate::store::kv::KvOp;
use crate::store::query::QueryOp;
use crate::store::session::SessionOp;
use crate::store::txn::TxnOp;
use crate::store::{
    AutopilotResult, CatalogResult, Command, CommandResult, FamilyResult, KvResult, QueryResult,
    SessionResult, StoreVersion, Tables, TxnAnswer,
};
use std::time::Duration;

/// Default blocking-query wait when `?wait` is absent (Consul's `default_query_time`).
pub const BLOCKING_WAIT_DEFAULT: Duration = crate::config::process::DEFAULT_QUERY_TIME_DEFAULT;
/// Longest blocking-query wait honoured (Consul's `max_query_time`).
pub const BLOCKING_WAIT_MAX: Duration = crate::config::process::MAX_QUERY_TIME_DEFAULT;

/// A blocking request's wait: `?wait` capped at the agent's `max_query_time`, and its
/// `default_query_time` without one.
pub fn blocking_wait(
    config: &crate::config::AgentConfig,
    wait: Option<&str>,
) -> Result<Duration, ApiError> {
    let process = &config.process;
    match wait {
        None | Some("") => Ok(process.default_query_time.min(process.max_query_time)),
        Some(text) => Ok(parse_go_duration(text)
            .map_err(|_| ApiError::bad_request("Invalid wait time"))?
            .min(process.max_query_time)),
    }
}
/// Consul adds up to wait/16 of random jitter so that many watchers don't return together.
pub const BLOCKING_JITTER_FRACTION: u32 = 16;

/// Sent on a list answer from which the request's token hid rows (Consul's header).
pub const FILTERED_BY_ACLS_HEADER: &[u8] = b"X-Consul-Results-Filtered-By-ACLs: true\r\n";

/// A parsed request, borrowing the connection's receive buffer.
pub struct Request<'a> {
    pub method: Method,
    /// Percent-decoded path (`%2F` is `/`).
    pub path: &'a str,
    pub query: QueryParams<'a>,
    /// What follows the route's prefix in `path` (a KV key, a service name, an ID); empty
    /// for a route with an exact path.
    pub rest: &'a str,
    pub head: &'a RequestHead,
    pub buf: &'a [u8],
    pub body: &'a [u8],
    /// The resolved token, set by `Route::serve` when ACLs are on, before the handler runs;
    /// empty with ACLs off (handlers then filter nothing).
    pub acl: std::cell::OnceCell<authz::Authz>,
}

impl<'a> Request<'a> {
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.head.header(self.buf, name)
    }

    /// The ACL token from `?token`, `X-Consul-Token`, or `Authorization: Bearer`.
    pub fn token(&self) -> Option<&str> {
        if let Some(t) = self.query.get("token").filter(|t| !t.is_empty()) {
            return Some(t);
        }
        if let Some(t) = self.header("X-Consul-Token").filter(|t| !t.is_empty()) {
            return Some(t);
        }
        self.header("Authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
    }
}

/// An error answered with a status and a plain-text reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    BadRequest(String),
    NotFound(String),
    MethodNotAllowed {
        method: String,
        allow: &'static [Method],
    },
    TooLarge(String),
    /// A server-side failure, answered 500 as Consul does ("No cluster leader", "No path to
    /// datacenter", …).
    Internal(String),
    Status(u16, String),
}

impl ApiError {
    pub fn bad_request(reason: impl Into<String>) -> Self {
        ApiError::BadRequest(reason.into())
    }

    /// The error's reason without its status: the text an RPC error carries for it, or a
    /// message that wraps it.
    pub fn text(&self) -> String {
        match self {
            ApiError::BadRequest(text)
            | ApiError::NotFound(text)
            | ApiError::TooLarge(text)
            | ApiError::Internal(text)
            | ApiError::Status(_, text) => text.clone(),
            ApiError::MethodNotAllowed { method, .. } => format!("method {method} not allowed"),
        }
    }

    /// The answer to a request the raft thread did not apply: Consul's status and message
    /// for each outcome. `None` for `Applied`, which the endpoint answers from the store's
    /// result. Consul answers "No cluster leader", "leadership lost while committing log"
    /// and "raft is already shutdown" with 500, and its rate limiter's leader-only refusal
    /// with 503; a request larger than a log entry is refused as too large.
    pub fn from_proposal(result: &crate::replica::ProposalResult) -> Option<ApiError> {
        use crate::replica::ProposalResult;
        match result {
            ProposalResult::Applied(_) => None,
            ProposalResult::NotLeader
            | ProposalResult::LeadershipLost
            | ProposalResult::ShuttingDown => Some(ApiError::Internal(result.to_string())),
            ProposalResult::Overloaded => Some(ApiError::Status(503, result.to_string())),
            ProposalResult::TooLarge { .. } => Some(ApiError::TooLarge(result.to_string())),
        }
    }
    pub fn status(&self) -> u16 {
        match self {
            ApiError::BadRequest(_) => 400,
            ApiError::NotFound(_) => 404,
            ApiError::MethodNotAllowed { .. } => 405,
            ApiError::TooLarge(_) => 413,
            ApiError::Internal(_) => 500,
            ApiError::Status(code, _) => *code,
        }
    }
}

/// Response writer for one request: where the bytes go and how to frame them.
pub struct Reply<'o> {
    pub out: &'o mut Vec<u8>,
    pub keep_alive: bool,
    /// Indented JSON (`?pretty`, or always in dev mode as Consul does).
    pub pretty: bool,
    /// A large body that follows the head already in `out`, to be streamed by the
    /// connection ([`Reply::take_tail`]). A reply dropped with its tail still here writes
    /// the tail into `out`, so a path that cannot stream still sends the whole answer.
    tail: Option<render::StreamedArray>,
}

impl Drop for Reply<'_> {
    fn drop(&mut self) {
        if let Some(mut tail) = self.tail.take() {
            tail.fill_all(self.out);
        }
    }
}

/// Consul's query metadata, sent as `X-Consul-*` headers on every read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryMeta {
    pub index: u64,
    pub known_leader: bool,
    pub last_contact_ms: u64,
    pub consistency: Consistency,
    /// `X-Cache` and `Age` of a `?cached` read (`agent_cache`).
    pub cache: Option<agent_cache::CacheMeta>,
}

impl QueryMeta {
    pub fn write_headers(&self, headers: &mut Vec<u8>) {
        // Consul never reports index 0: a client blocking on ?index=0 would spin.
        headers.extend_from_slice(b"X-Consul-Index: ");
        http::push_u64(headers, self.index.max(1));
        headers.extend_from_slice(if self.known_leader {
            b"\r\nX-Consul-KnownLeader: true\r\n"
        } else {
            b"\r\nX-Consul-KnownLeader: false\r\n"
        });
        headers.extend_from_slice(b"X-Consul-LastContact: ");
        http::push_u64(headers, self.last_contact_ms);
        headers.extend_from_slice(b"\r\nX-Consul-Effective-Consistency: ");
        headers.extend_from_slice(self.consistency.as_str().as_bytes());
        headers.extend_from_slice(b"\r\n");
        if let Some(cache) = self.cache {
            cache.write_headers(headers);
        }
    }
}

impl<'o> Reply<'o> {
    pub fn new(out: &'o mut Vec<u8>, keep_alive: bool, pretty: bool) -> Self {
        Reply {
            out,
            keep_alive,
            pretty,
            tail: None,
        }
    }

    /// The streamed body that must follow `out` on the wire, if the answer has one.
    pub fn take_tail(&mut self) -> Option<render::StreamedArray> {
        self.tail.take()
    }

    /// A complete response whose JSON array body is streamed after the head.
    pub fn send_streamed(&mut self, status: u16, headers: &[u8], body: render::StreamedArray) {
        debug_assert!(self.tail.is_none(), "one body per reply");
        http::write_response_head(
            self.out,
            status,
            Some("application/json"),
            headers,
            body.len(),
            self.keep_alive,
        );
        self.tail = Some(body);
    }

    /// A complete response with a body already serialized.
    pub fn send(&mut self, status: u16, content_type: Option<&str>, headers: &[u8], body: &[u8]) {
        // One allocation for large answers instead of repeated doubling.
        self.out.reserve(body.len() + headers.len() + 256);
        http::write_response(
            self.out,
            status,
            content_type,
            headers,
            body,
            self.keep_alive,
        );
    }

    /// A complete response whose large body is already in a buffer of its own: when nothing
    /// else waits in the output, the head is put in front of the body in place and the body's
    /// buffer becomes the output, so the answer is never held twice.
    pub fn send_owned(
        &mut self,
        status: u16,
        content_type: Option<&str>,
        headers: &[u8],
        mut body: Vec<u8>,
    ) {
        if !self.out.is_empty() {
            return self.send(status, content_type, headers, &body);
        }
        let mut head = Vec::with_capacity(headers.len() + 256);
        let body_len = body.len();
        http::write_response_head(
            &mut head,
            status,
            content_type,
            headers,
            body_len,
            self.keep_alive,
        );
        body.reserve_exact(head.len());
        body.splice(0..0, head);
        debug_assert!(body.len() > body_len, "the head precedes the body");
        *self.out = body;
    }

    /// A complete response whose body of `body_len` bytes `write_body` appends straight
    /// into the output, saving a copy for large answers.
    pub fn send_with(
        &mut self,
        status: u16,
        content_type: Option<&str>,
        headers: &[u8],
        body_len: usize,
        write_body: impl FnOnce(&mut Vec<u8>),
    ) {
        self.out.reserve(body_len + headers.len() + 256);
        http::write_response_head(
            self.out,
            status,
            content_type,
            headers,
            body_len,
            self.keep_alive,
        );
        let start = self.out.len();
        write_body(self.out);
        debug_assert_eq!(self.out.len() - start, body_len, "body length as announced");
    }

    pub fn json_bytes(&mut self, status: u16, headers: &[u8], body: &[u8]) {
        self.send(status, Some("application/json"), headers, body);
    }

    /// Serializes `value` and sends it as JSON.
    pub fn json<T: serde::Serialize + ?Sized>(&mut self, status: u16, headers: &[u8], value: &T) {
        let mut body = Vec::with_capacity(256);
        json::write_serde(&mut body, value, self.pretty);
        self.json_bytes(status, headers, &body);
    }

    /// `true` or `false`, the answer of KV and session writes.
    pub fn json_bool(&mut self, value: bool) {
        let body: &[u8] = match (value, self.pretty) {
            (true, false) => b"true",
            (false, false) => b"false",
            (true, true) => b"true\n",
            (false, true) => b"false\n",
        };
        self.json_bytes(200, b"", body);
    }

    pub fn text(&mut self, status: u16, body: &str) {
        self.send(
            status,
            Some("text/plain; charset=utf-8"),
            b"",
            body.as_bytes(),
        );
    }

    pub fn error(&mut self, error: &ApiError) {
        let status = error.status();
        match error {
            ApiError::MethodNotAllowed { method, allow } => {
                let mut headers = b"Allow: OPTIONS".to_vec();
                for m in allow.iter() {
                    headers.push(b',');
                    headers.extend_from_slice(m.as_str().as_bytes());
                }
                headers.extend_from_slice(b"\r\n");
                let body = format!("method {method} not allowed");
                self.send(
                    status,
                    Some("text/plain; charset=utf-8"),
                    &headers,
                    body.as_bytes(),
                );
            }
            ApiError::BadRequest(reason)
            | ApiError::NotFound(reason)
            | ApiError::TooLarge(reason)
            | ApiError::Internal(reason)
            | ApiError::Status(_, reason) => self.text(status, reason),
        }
    }
}

/// Consul's `QueryOptions`, parsed from the query string.
#[derive(Clone, Debug)]
pub struct QueryOptions {
    pub min_index: u64,
    pub wait: Duration,
    pub consistency: Consistency,
    pub max_stale: Option<Duration>,
    pub filter: Option<String>,
}

impl QueryOptions {
    pub fn is_blocking(&self) -> bool {
        self.min_index > 0
    }
}

/// The other datacenter `?dc=` names (lowercased), if it names one: a request for it is
/// answered there ([`routes::Route::serve`] hands it over before any check).
pub fn other_datacenter(ctx: &Context, query: &QueryParams) -> Option<String> {
    match query.get("dc") {
        None | Some("") => None,
        Some(dc) if dc.eq_ignore_ascii_case(&ctx.config().datacenter) => None,
        Some(dc) => Some(dc.to_ascii_lowercase()),
    }
}

/// Checks `?dc`: our own datacenter is fine, any other gets Consul's error. Routes that
/// forward across datacenters never get here with another one; the rest (the agent's own
/// endpoints, local lists) refuse it.
pub fn check_datacenter(ctx: &Context, query: &QueryParams) -> Result<(), ApiError> {
    match query.get("dc") {
        None | Some("") => Ok(()),
        Some(dc) if dc.eq_ignore_ascii_case(&ctx.config().datacenter) => Ok(()),
        Some(_) => Err(ApiError::Internal("No path to datacenter".to_string())),
    }
}

/// Parses `index`, `wait`, `stale`, `consistent`, `max_stale`, `filter` and checks `dc`.
pub fn query_options(ctx: &Context, query: &QueryParams) -> Result<QueryOptions, ApiError> {
    check_datacenter(ctx, query)?;
    query_options_in(ctx, query)
}

/// A handler that takes the datacenter its request names (empty: this one).
pub type DatacenterHandler = fn(&Context, &Request, &mut Reply, &str) -> Result<Outcome, ApiError>;

/// Runs `handler` for a request another datacenter answers (`?dc=`): it parses and checks
/// the request as always (the same errors), then makes that datacenter's typed call, whose
/// answer is the reply, so the handler writes nothing to one of its own.
pub fn run_for_datacenter(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
    handler: DatacenterHandler,
) -> Result<Outcome, ApiError> {
    debug_assert!(!datacenter.is_empty(), "another datacenter is named");
    let mut unused = Vec::new();
    let mut reply = Reply::new(&mut unused, false, false);
    handler(ctx, request, &mut reply, datacenter)
}

/// Whether a read of `request` is one of Consul's typed calls to a server rather than run
/// here ([`Context::reads_by_call`]): always on a client agent, never on the leader, and on
/// a follower as its query options' consistency says (parsed here for the question only).
pub fn read_by_call(ctx: &Context, request: &Request) -> Result<bool, ApiError> {
    if ctx.is_client() {
        return Ok(true);
    }
    if ctx.is_leader() {
        return Ok(false);
    }
    Ok(ctx.reads_by_call(&query_options(ctx, &request.query)?))
}

/// [`query_options`] for a request whose `dc` another datacenter answers.
pub fn query_options_in(ctx: &Context, query: &QueryParams) -> Result<QueryOptions, ApiError> {
    let min_index = match query.get("index") {
        None | Some("") => 0,
        Some(text) => text
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request("Invalid index"))?,
    };
    let wait = blocking_wait(ctx.config(), query.get("wait"))?;
    let stale = query.has("stale");
    let consistent = query.has("consistent");
    let max_stale = match query.get("max_stale") {
        None | Some("") => None,
        Some(text) => Some(
            parse_go_duration(text)
                .map_err(|_| ApiError::bad_request(format!("Invalid max_stale value {text:?}")))?,
        ),
    };
    let stale = stale || max_stale.is_some_and(|d| !d.is_zero());
    if stale && consistent {
        return Err(ApiError::bad_request(
            "Cannot specify ?stale with ?consistent, conflicting semantics.",
        ));
    }
    let consistency = if stale {
        Consistency::Stale
    } else if consistent {
        Consistency::Consistent
    } else {
        Consistency::Leader
    };
    Ok(QueryOptions {
        min_index,
        wait,
        consistency,
        max_stale,
        filter: query.get("filter").map(str::to_string),
    })
}

/// A read that can be re-run against newer versions while it blocks.
pub trait Query {
    /// The query's index and what it read, without building a response.
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet);
    /// Writes the complete response for `tables`, whose index `evaluate` returned as `meta`.
    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply);
}

/// Turns an applied command's result into the HTTP answer.
pub type WriteResponder = Box<dyn FnOnce(CommandResult, &mut Reply)>;

/// A command to replicate and how to answer once it is applied.
pub struct WriteOp {
    pub command: Command,
    pub respond: WriteResponder,
}

impl WriteOp {
    /// A KV write whose answer `respond` writes from the KV result.
    pub fn kv(op: KvOp, respond: impl FnOnce(KvResult, &mut Reply) + 'static) -> WriteOp {
        WriteOp::typed(Command::Kv(op), respond)
    }

    /// A catalog write whose answer `respond` writes from the catalog result.
    pub fn catalog(
        op: CatalogOp,
        respond: impl FnOnce(CatalogResult, &mut Reply) + 'static,
    ) -> WriteOp {
        WriteOp::typed(Command::Catalog(op), respond)
    }

    /// A session write whose answer `respond` writes from the session result.
    pub fn session(
        op: SessionOp,
        respond: impl FnOnce(SessionResult, &mut Reply) + 'static,
    ) -> WriteOp {
        WriteOp::typed(Command::Session(op), respond)
    }

    /// A transaction whose answer `respond` writes from the transaction's result.
    pub fn txn(ops: Vec<TxnOp>, respond: impl FnOnce(TxnAnswer, &mut Reply) + 'static) -> WriteOp {
        WriteOp::typed(Command::Txn(ops), respond)
    }

    /// A prepared-query write whose answer `respond` writes from the query result.
    pub fn query(op: QueryOp, respond: impl FnOnce(QueryResult, &mut Reply) + 'static) -> WriteOp {
        WriteOp::typed(Command::Query(op), respond)
    }

    /// An autopilot configuration write whose answer `respond` writes from its result.
    pub fn autopilot(
        op: AutopilotOp,
        respond: impl FnOnce(AutopilotResult, &mut Reply) + 'static,
    ) -> WriteOp {
        WriteOp::typed(Command::Autopilot(op), respond)
    }

    /// The seam between the envelope and a typed responder: the family's result goes to
    /// `respond`; the raft thread's refusal is answered as Consul answers a failed write
    /// (500 with its text), for every family alike.
    fn typed<R: FamilyResult + 'static>(
        command: Command,
        respond: impl FnOnce(R, &mut Reply) + 'static,
    ) -> WriteOp {
        WriteOp {
            command,
            respond: Box::new(move |result, reply: &mut Reply| match R::of(result) {
                Ok(result) => respond(result, reply),
                Err(reason) => reply.error(&ApiError::Internal(reason)),
            }),
        }
    }
}

/// A blocking query waiting for its index to move past `options.min_index`.
pub struct BlockOp {
    pub query: Box<dyn Query>,
    pub options: QueryOptions,
    /// Confirm leadership with a quorum round (ReadIndex) before the first evaluation.
    pub barrier: bool,
}

pub enum Outcome {
    /// The response is already in the output buffer.
    Done,
    Write(WriteOp),
    Block(BlockOp),
    /// Leader-side work beyond one command.
    Leader(LeaderOp),
    /// Local work that must wait (a gossip join, leave, keyring query, event wait); the
    /// future yields how to answer.
    Async(AsyncOp),
    /// An answer sent in pieces as they come (`/v1/agent/metrics/stream`), with chunked
    /// encoding, until the sender is dropped or the client hangs up; the connection closes
    /// after it.
    Stream(StreamOp),
}

/// The pieces of an [`Outcome::Stream`].
pub struct StreamOp {
    pub content_type: &'static str,
    pub chunks: flume::Receiver<Vec<u8>>,
}

/// Writes the answer of an [`Outcome::Async`] once its work is done.
pub type AsyncResponder = Box<dyn FnOnce(&mut Reply)>;
/// The work of an [`Outcome::Async`]; it runs on the shard that took the request.
pub type AsyncOp = std::pin::Pin<Box<dyn std::future::Future<Output = AsyncResponder>>>;

/// Work only the leader does, answered once it is done.
pub enum LeaderOp {
    /// Change the Raft configuration or hand leadership over.
    Operator {
        op: crate::shard::runtime::OperatorOp,
        respond: WriteResponder,
    },
    /// Replicate a snapshot's state in chunks, then switch every server to it.
    Restore {
        state: Vec<u8>,
        respond: WriteResponder,
    },
}

/// The refusal of a request that only the leader (or another server) can answer and
/// whose handler made no typed call for it. Every handler sends such requests as their
/// typed calls (`rpc::client`), so this answers a praetor bug in words, not a wrong answer.
pub fn no_typed_call() -> ApiError {
    ApiError::Internal(
        "rpc error: this request must be answered by the leader, and no call carries it there"
            .to_string(),
    )
}

/// Runs a read query: answers at once unless it is a blocking query whose index has not
/// moved yet, in which case it is handed back to be parked.
pub fn run_query<Q: Query + 'static>(
    ctx: &Context,
    query: Q,
    options: QueryOptions,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    match ctx.read_plan(&options) {
        ReadPlan::Forward => return Err(no_typed_call()),
        ReadPlan::Barrier => {
            crate::telemetry::incr(crate::consul::metrics::Counter::RpcQuery);
            return Ok(Outcome::Block(BlockOp {
                query: Box::new(query),
                options,
                barrier: true,
            }));
        }
        ReadPlan::Local => {}
    }
    crate::telemetry::incr(crate::consul::metrics::Counter::RpcQuery);
    let version = ctx.current_version();
    let (index, _) = query.evaluate(&version);
    if options.is_blocking() && index <= options.min_index {
        return Ok(Outcome::Block(BlockOp {
            query: Box::new(query),
            options,
            barrier: false,
        }));
    }
    query.respond(&version, ctx.query_meta(index, options.consistency), reply);
    Ok(Outcome::Done)
}

/// Entry point from the server loop: serves `request` through `route` (the route the
/// request's path matched, if any) and turns what comes back into the outcome to carry out.
pub fn dispatch(
    ctx: &Context,
    route: Option<&routes::Route>,
    request: &Request,
    reply: &mut Reply,
) -> Outcome {
    let result = match route {
        Some(route) => route.serve(ctx, request, reply),
        None => ui_assets::serve(ctx, request, reply).unwrap_or_else(|| {
            Err(ApiError::NotFound(format!(
                "404 page not found: {}",
                request.path
            )))
        }),
    };
    match result {
        // A client agent sends the writes it has typed calls for as those calls to a
        // server, a follower as those calls to the leader.
        Ok(Outcome::Write(op)) if ctx.writes_by_call() => {
            rpc::client::typed_write(ctx, request, op)
        }
        // The leader's own work: every handler that hands work to the leader sends a
        // follower's or a client agent's request as its typed call first, so this is a
        // handler that forgot to, refused rather than run where it must not.
        Ok(Outcome::Leader(_)) if !ctx.is_leader() => {
            reply.error(&no_typed_call());
            Outcome::Done
        }
        Ok(outcome) => outcome,
        Err(error) => {
            reply.error(&error);
            Outcome::Done
        }
    }
}

#[cfg(test)]
mod proposal_error_tests {
    use super::ApiError;
    use crate::replica::ProposalResult;
    use crate::store::CommandResult;

    fn answer(result: ProposalResult) -> Option<(u16, String)> {
        ApiError::from_proposal(&result).map(|error| {
            let text = match &error {
                ApiError::Internal(text) | ApiError::Status(_, text) | ApiError::TooLarge(text) => {
                    text.clone()
                }
                other => panic!("unexpected error shape {other:?}"),
            };
            (error.status(), text)
        })
    }

    #[test]
    fn each_outcome_gets_consuls_status_and_message() {
        assert_eq!(
            answer(ProposalResult::Applied(CommandResult::Bool(true))),
            None
        );
        assert_eq!(
            answer(ProposalResult::NotLeader),
            Some((500, "No cluster leader".to_string()))
        );
        assert_eq!(
            answer(ProposalResult::LeadershipLost),
            Some((500, "leadership lost while committing log".to_string()))
        );
        assert_eq!(
            answer(ProposalResult::ShuttingDown),
            Some((500, "raft is already shutdown".to_string()))
        );
        let (status, text) = answer(ProposalResult::Overloaded).expect("an error");
        assert_eq!(status, 503);
        assert!(text.starts_with("rate limit exceeded"), "{text}");
        let (status, _) = answer(ProposalResult::TooLarge {
            bytes: 9,
            bytes_max: 8,
        })
        .expect("an error");
        assert_eq!(status, 413);
    }
}
