//! Buffered dispatch: a request whose bytes are all in memory goes through
//! [`api::dispatch`], and what must wait is carried out by [`complete`].
//!
//! Dispatch itself is synchronous and writes nothing but into the output buffer; it decides
//! how the answer is shaped and keys a query to park by its request head (woken queries with identical heads share one rendered answer). The order of
//! answers is the order of requests: an outcome is completed before the next request is read.

use super::parking::park;
use super::{ReplyShape, Server};
use crate::api::routes::{self, Route};
use crate::api::shared_answers::SharedAnswer;
use crate::api::{self, LeaderOp, Outcome, Reply, Request};
use crate::consul::metrics;
use crate::consul::render::StreamedArray;
use crate::proto::http::{self, HttpError, QueryParams, RequestHead};
use crate::shard::runtime::ProposalResult;
use crate::telemetry;
use std::borrow::Cow;
use std::io;
use std::time::Instant;

/// A request ready to dispatch: its head, where its body is, and the route its raw path
/// matched (which also sized the body).
pub(super) struct Buffered<'a> {
    pub(super) input: &'a [u8],
    pub(super) head: &'a RequestHead,
    pub(super) body: &'a [u8],
    pub(super) route: Option<&'static Route>,
}

/// Dispatches a request whose bytes are all in memory. Returns the outcome, how to shape
/// the answer, and a large body to stream after what `output` holds.
pub(super) fn dispatch_buffered(
    server: &Server,
    request: Buffered,
    keep_alive: bool,
    output: &mut Vec<u8>,
) -> Dispatched {
    let input = request.input;
    let head = request.head;
    let raw_path = std::str::from_utf8(&input[head.path.start as usize..head.path.end as usize]);
    let raw_query = std::str::from_utf8(&input[head.query.start as usize..head.query.end as usize]);
    let decoded_path = raw_path.ok().and_then(|p| http::percent_decode(p, false));
    let query = raw_query
        .map_err(|_| HttpError::bad_request("query string is not UTF-8"))
        .and_then(QueryParams::parse);
    match (decoded_path, query) {
        (Some(path), Ok(query)) => {
            let pretty = server.shard.config().dev_mode || query.has("pretty");
            // Nearly every path has no escapes: the route found for the body limit serves it.
            let route = match path {
                Cow::Borrowed(_) => request.route,
                Cow::Owned(_) => routes::find(&path),
            };
            let req = Request {
                method: head.method,
                path: &path,
                query,
                rest: route.map_or("", |route| route.path.rest(&path)),
                head,
                buf: input,
                body: request.body,
                acl: std::cell::OnceCell::new(),
            };
            let answer_start = output.len();
            let mut reply = Reply::new(output, keep_alive, pretty);
            let outcome = api::dispatch(&server.context, route, &req, &mut reply);
            let mut tail = reply.take_tail();
            drop(reply);
            if head.method == http::Method::Head {
                // No route declares HEAD, so its answer is always written here at once (a
                // 405, a 404, or a UI file's head). The head keeps the length a GET would
                // get; the body must not follow, or the client would read it as the start
                // of its next response.
                debug_assert!(matches!(outcome, Outcome::Done), "HEAD is answered at once");
                tail = None;
                http::truncate_to_head(output, answer_start);
            }
            debug_assert!(
                tail.is_none() || matches!(outcome, Outcome::Done),
                "only a finished answer has a body to stream"
            );
            // A parked query keeps its head: woken queries with identical heads share one
            // rendered answer (see `shared_answers`).
            let answer_key = matches!(&outcome, Outcome::Block(op) if op.options.is_blocking())
                .then(|| Box::<[u8]>::from(&input[..head.head_len]));
            Dispatched {
                outcome,
                shape: ReplyShape { keep_alive, pretty },
                keep_alive,
                tail,
                answer_key,
                http_metric: None,
            }
        }
        (None, _) => {
            Reply::new(output, keep_alive, false)
                .error(&api::ApiError::bad_request("invalid escape in URL path"));
            Dispatched::done(keep_alive)
        }
        (_, Err(error)) => {
            Reply::new(output, keep_alive, false).error(&api::ApiError::BadRequest(error.message));
            Dispatched::done(keep_alive)
        }
    }
}

/// On a client agent with ACLs, the secret a request it answers itself authenticates with
/// (its own token, else the agent's default); `None` when the request needs no resolution
/// here (a server).
pub(super) fn client_token_to_resolve(
    server: &Server,
    route: Option<&Route>,
    input: &[u8],
    head: &RequestHead,
) -> Option<String> {
    let ctx = &server.context;
    if !ctx.is_client() || !ctx.acl_enabled() || !route?.answered_by_agent() {
        return None;
    }
    let raw_query =
        std::str::from_utf8(&input[head.query.start as usize..head.query.end as usize]).ok()?;
    let request = Request {
        method: head.method,
        path: "",
        query: QueryParams::parse(raw_query).ok()?,
        rest: "",
        head,
        buf: input,
        body: &[],
        acl: std::cell::OnceCell::new(),
    };
    Some(api::authz::request_secret(ctx, &request).into_owned())
}

/// A request read and dispatched; what remains is to carry out its outcome.
pub(super) struct Dispatched {
    pub(super) outcome: Outcome,
    pub(super) shape: ReplyShape,
    pub(super) keep_alive: bool,
    pub(super) tail: Option<StreamedArray>,
    /// The request head of a query to park, the key of its shared answer.
    pub(super) answer_key: Option<Box<[u8]>>,
    /// The `api.http` series of a client's request and when its head was read.
    pub(super) http_metric: Option<(usize, Instant)>,
}

impl Dispatched {
    /// An answer already complete in the output (an error).
    pub(super) fn done(keep_alive: bool) -> Self {
        Dispatched {
            outcome: Outcome::Done,
            shape: ReplyShape {
                keep_alive,
                pretty: false,
            },
            keep_alive,
            tail: None,
            answer_key: None,
            http_metric: None,
        }
    }
}

/// Carries out what dispatch decided. The answer ends up in `output`, or, for a woken
/// blocking query, may come back as an answer shared with identical queries.
pub(super) async fn complete(
    server: &Server,
    outcome: Outcome,
    shape: ReplyShape,
    output: &mut Vec<u8>,
    answer_key: Option<Box<[u8]>>,
) -> io::Result<Option<SharedAnswer>> {
    let ReplyShape { keep_alive, pretty } = shape;
    match outcome {
        Outcome::Done => Ok(None),
        Outcome::Write(op) => {
            // Consul times a write on the server that applies it: the leader.
            let timer = metrics::write_sample(&op.command)
                .filter(|sample| telemetry::timing(*sample))
                .map(|sample| (sample, Instant::now()));
            let result = server.shard.propose(op.command.encode()).await;
            if let Some((sample, started)) = timer {
                telemetry::observe_since(sample, started);
            }
            answer_proposal(
                result,
                op.respond,
                &mut Reply::new(output, keep_alive, pretty),
            );
            Ok(None)
        }
        Outcome::Block(op) => park(server, op, shape, output, answer_key, None).await,
        Outcome::Leader(LeaderOp::Operator { op, respond }) => {
            let result = Box::pin(server.shard.operator(op)).await;
            answer_proposal(result, respond, &mut Reply::new(output, keep_alive, pretty));
            Ok(None)
        }
        Outcome::Leader(LeaderOp::Restore { state, respond }) => {
            let result = Box::pin(api::snapshot::replicate_restore(&server.shard, state)).await;
            answer_proposal(result, respond, &mut Reply::new(output, keep_alive, pretty));
            Ok(None)
        }
        Outcome::Async(work) => {
            let respond = work.await;
            respond(&mut Reply::new(output, keep_alive, pretty));
            Ok(None)
        }
        Outcome::Stream(_) => {
            // The connection loop streams a client's answer itself before it gets here.
            Reply::new(output, keep_alive, pretty).error(&api::ApiError::Internal(
                "a streamed answer is served by its connection".into(),
            ));
            Ok(None)
        }
    }
}

/// Consul's answer when no leader can serve the request.
pub(super) fn no_leader() -> api::ApiError {
    refusal(&ProposalResult::NotLeader)
}

/// The answer to a request that was not applied.
fn refusal(result: &ProposalResult) -> api::ApiError {
    api::ApiError::from_proposal(result)
        .unwrap_or_else(|| api::ApiError::Internal(result.to_string()))
}

/// Answers an applied request through the endpoint, anything else as Consul would.
fn answer_proposal(result: ProposalResult, respond: api::WriteResponder, reply: &mut Reply) {
    match result {
        ProposalResult::Applied(applied) => respond(applied, reply),
        other => reply.error(&refusal(&other)),
    }
}
