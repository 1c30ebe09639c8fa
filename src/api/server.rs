//! The HTTP/1.1 server loop of a shard: accept, read, parse, dispatch, write — and the same
//! request path for requests forwarded from other servers over RPC.
//!
//! Each connection is one task with one input and one output buffer, reused across requests.
//! Pipelined requests are answered in order; responses accumulate in the output buffer and
//! are written with one syscall when no further complete request is buffered.
//!
//! A request is dispatched synchronously ([`api::dispatch`]); what must wait comes back as an
//! owned [`Outcome`] that [`complete`] carries out: propose a write, park a blocking query,
//! pass a read barrier, or forward the request to the leader. A forwarded request is
//! re-framed with `Content-Length` and an `X-Praetor-Forwarded` hop count, and the receiving
//! server answers it through the very same `dispatch` + `complete` path
//! ([`answer_forwarded`]), so every endpoint forwards without endpoint-specific RPCs.
//!
//! A blocking query releases the connection's buffers while it is parked, so a parked
//! connection costs its task, its query object, its request head and its watch registration.
//! While parked, one readiness poll watches the socket so that a client that hangs up frees
//! its slot at once; after the answer the same poll waits for the client's next request
//! ([`park_connection`]). Woken queries with identical request heads share one rendered
//! answer per store version ([`crate::api::shared_answers`]), sent with one non-blocking
//! `send`: a write that wakes thousands of watchers costs little more than the sends.
//!
//! Limits and timeouts: head size and header count ([`HttpLimits`]), body size per endpoint
//! (`api::routes::body_limit`), `HEADER_READ_TIMEOUT` from the first byte of a request to the end of
//! its head, `BODY_READ_TIMEOUT` between body reads, `IDLE_TIMEOUT` between requests,
//! `WRITE_TIMEOUT` for a client that stops reading, `RPC_HOLD_TIMEOUT` waiting for a leader,
//! `FORWARD_HOPS_MAX` forwards per request.

use crate::api::agent_channel::AgentChannel;
use crate::api::routes::{self, Route};
use crate::api::shared_answers::{AnswerShape, SharedAnswer, SharedAnswers};
use crate::api::{
    self, BlockOp, LeaderOp, Outcome, Reply, Request, BLOCKING_JITTER_FRACTION, ORIGIN_NODE_HEADER,
};
use crate::cluster::servers::{self, Retry};
use crate::cluster::Pools;
use crate::consul::metrics;
use crate::consul::render::{StreamedArray, STREAM_CHUNK_BYTES};
use crate::proto::http::{
    self, BodyFraming, ChunkedDecoder, HttpError, HttpLimits, QueryParams, RequestHead,
};
use crate::proto::rpc::{kind, Frame};
use crate::shard::nonblocking::{receive_now, send_now};
use crate::shard::rpc_server::ForwardedHttp;
use crate::shard::runtime::{ProposalResult, ReadPlan, Shard};
use crate::store::restore::{RestoreOp, RESTORE_CHUNK_BYTES};
use crate::store::{Command, CommandResult};
use crate::telemetry;
use crate::tls::stream::{FirstRecord, ServerTlsStream, HANDSHAKE_TIMEOUT_DEFAULT};
use crate::tls::Protocol;
use monoio::buf::{IoBuf, IoBufMut};
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::{TcpListener, TcpStream};
use monoio::BufResult;
use std::borrow::Cow;
use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a request waits for a leader to appear before "No cluster leader" (Consul's
/// `rpc_hold_timeout` default).
pub const RPC_HOLD_TIMEOUT: Duration = Duration::from_secs(7);
/// Pause between looks for a leader while a request is held for one.
const LEADER_RETRY_PAUSE: Duration = Duration::from_millis(50);
/// Forwards one request may take before it is refused as a loop.
pub const FORWARD_HOPS_MAX: u32 = 3;
/// Timeout of a forwarded non-blocking request.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(15);
/// Header carrying the forward hop count between servers.
const FORWARDED_HEADER: &str = "X-Praetor-Forwarded";
/// How long a refused request's remaining bytes are drained before closing.
const LINGER_TIMEOUT: Duration = Duration::from_secs(2);
/// Most bytes drained after a refused request.
const LINGER_BYTES_MAX: usize = 16 << 20;
/// Input buffer capacity a connection starts with; it grows for big requests.
const INPUT_INITIAL_BYTES: usize = 2048;
/// Least free space offered to each read.
const READ_SPACE_MIN_BYTES: usize = 1024;
/// Output capacity kept between requests; a bigger buffer is released after use.
const OUTPUT_KEEP_MAX_BYTES: usize = 256 * 1024;
/// Input capacity kept between requests; a bigger buffer is released after use.
const INPUT_KEEP_MAX_BYTES: usize = 256 * 1024;
/// Pieces one `writev` of a streamed body lists: Linux's `IOV_MAX`.
const STREAM_IOVECS_MAX: usize = 1024;

/// One shard's HTTP server: the context its handlers see, and the runtime it carries their
/// outcomes out with.
pub struct Server {
    shard: Rc<Shard>,
    context: api::Context,
    /// Rendered answers of woken blocking queries, shared by identical requests; forgotten
    /// with every new version (they belong to the version they were rendered from).
    shared_answers: Rc<RefCell<SharedAnswers>>,
}

impl Server {
    /// The shard this server runs on (for `api::rpc`, which carries out what it decides
    /// as this loop does).
    pub(crate) fn shard(&self) -> &Rc<Shard> {
        &self.shard
    }

    /// What handlers see.
    pub(crate) fn context(&self) -> &api::Context {
        &self.context
    }

    pub fn new(shard: Rc<Shard>, pools: Arc<Pools>, agent: AgentChannel) -> Rc<Server> {
        let shared_answers = Rc::new(RefCell::new(SharedAnswers::new()));
        let forgotten = shared_answers.clone();
        shard.on_new_version(move |_| forgotten.borrow_mut().forget());
        Rc::new(Server {
            context: api::Context::new(shard.clone(), pools, agent),
            shard,
            shared_answers,
        })
    }
}

pub async fn accept_loop(server: Rc<Server>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _peer)) => {
                let _ = stream.set_nodelay(true);
                monoio::spawn(serve_connection(server.clone(), HttpStream::Plain(stream)));
            }
            Err(e) => {
                if server.shard.shutting_down() {
                    return;
                }
                // Out of descriptors or memory: back off instead of spinning on accept.
                log::warn!("http: accept failed: {e}");
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Accepts HTTPS connections: each one's TLS handshake runs in its own task (under the
/// handshake timeout) with the HTTPS configuration in force at that moment, so a reload
/// serves the next connection and leaves open ones alone. After the handshake the
/// connection is served exactly as a plain one.
pub async fn accept_tls_loop(server: Rc<Server>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                monoio::spawn(handshake_and_serve(server.clone(), stream, peer));
            }
            Err(e) => {
                if server.shard.shutting_down() {
                    return;
                }
                log::warn!("https: accept failed: {e}");
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

async fn handshake_and_serve(server: Rc<Server>, stream: TcpStream, peer: SocketAddr) {
    let tls = &server.shard.shared().tls;
    let Some(config) = tls.server_config(Protocol::Https) else {
        // The agent refuses to start an HTTPS listener without a certificate, and a reload
        // that removes it fails; so this is a bug, not a configuration.
        debug_assert!(false, "an HTTPS listener without a certificate");
        return;
    };
    let accepted = crate::tls::stream::accept(
        config,
        stream,
        HANDSHAKE_TIMEOUT_DEFAULT,
        FirstRecord::AnswerPlainHttp,
    );
    match accepted.await {
        Ok(stream) => serve_connection(server, HttpStream::Tls(Box::new(stream))).await,
        Err(error) => log::warn!(
            "{}",
            crate::tls::handshake_failure_line(Protocol::Https, peer, &error)
        ),
    }
}

/// The socket a connection is served on: plain TCP, or TLS over TCP.
enum HttpStream {
    Plain(TcpStream),
    Tls(Box<ServerTlsStream<TcpStream>>),
}

impl HttpStream {
    async fn read<T: IoBufMut>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            HttpStream::Plain(stream) => stream.read(buf).await,
            HttpStream::Tls(stream) => stream.read(buf).await,
        }
    }

    async fn write_all<T: IoBuf + 'static>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            HttpStream::Plain(stream) => stream.write_all(buf).await,
            HttpStream::Tls(stream) => stream.write_all(buf).await,
        }
    }

    /// Ends our direction: a FIN, after a TLS `close_notify` on TLS.
    async fn shutdown(&mut self) -> io::Result<()> {
        match self {
            HttpStream::Plain(stream) => stream.shutdown().await,
            HttpStream::Tls(stream) => stream.shutdown().await,
        }
    }
}

/// Reads more bytes into `input`. Returns 0 at end of stream.
async fn fill(
    stream: &mut HttpStream,
    input: &mut Vec<u8>,
    timeout: Duration,
) -> io::Result<usize> {
    if input.capacity() - input.len() < READ_SPACE_MIN_BYTES {
        input.reserve(input.len().max(READ_SPACE_MIN_BYTES));
    }
    let buf = std::mem::take(input);
    let len = buf.len();
    match monoio::time::timeout(timeout, stream.read(buf.slice_mut(len..))).await {
        Ok((result, slice)) => {
            *input = slice.into_inner();
            result
        }
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "read timed out")),
    }
}

/// One `writev` of a streamed answer: what waited in the output (the head) and the body's
/// next pieces. It owns the body, whose pinned version keeps every piece's bytes alive while
/// the runtime holds the iovecs.
struct VectoredBody {
    head: Vec<u8>,
    body: StreamedArray,
    pieces: Vec<(*const u8, usize)>,
    iovecs: Vec<libc::iovec>,
}

impl VectoredBody {
    /// Lists the next writev: the head if any, then the body's next pieces. Returns whether
    /// they end the body.
    fn prepare(&mut self) -> bool {
        self.pieces.clear();
        if !self.head.is_empty() {
            self.pieces.push((self.head.as_ptr(), self.head.len()));
        }
        let room = STREAM_IOVECS_MAX - self.pieces.len();
        let done = self.body.next_pieces(&mut self.pieces, room);
        self.iovecs.clear();
        self.iovecs
            .extend(self.pieces.iter().map(|&(ptr, len)| libc::iovec {
                iov_base: ptr as *mut libc::c_void,
                iov_len: len,
            }));
        done
    }
}

// SAFETY: the iovecs point into `head` and into the renderings `body` pins; neither moves
// nor changes while the runtime owns the value (the vectors are not touched during a write),
// and `iovecs` itself is not reallocated then.
unsafe impl monoio::buf::IoVecBuf for VectoredBody {
    fn read_iovec_ptr(&self) -> *const libc::iovec {
        self.iovecs.as_ptr()
    }
    fn read_iovec_len(&self) -> usize {
        self.iovecs.len()
    }
}

struct Connection {
    stream: HttpStream,
    input: Vec<u8>,
    output: Vec<u8>,
}

impl Connection {
    /// Reads more input. The read-with-timeout future is large (monoio's timer entry is
    /// hundreds of bytes), so it is boxed: it then costs heap only while a read is pending,
    /// instead of enlarging every connection's task, parked ones included.
    async fn fill(&mut self, timeout: Duration) -> io::Result<usize> {
        Box::pin(fill(&mut self.stream, &mut self.input, timeout)).await
    }

    async fn flush(&mut self) -> io::Result<()> {
        if self.output.is_empty() {
            return Ok(());
        }
        Box::pin(self.write_output()).await
    }

    /// Sends what `output` holds, then `body`. Later pipelined answers queue behind it.
    async fn stream(&mut self, body: StreamedArray) -> io::Result<()> {
        if matches!(self.stream, HttpStream::Plain(_)) {
            return self.stream_vectored(body).await;
        }
        self.stream_copied(body).await
    }

    /// A plain socket: `output` and the body's pieces go out by `writev` straight from the
    /// rows' render caches, up to [`STREAM_IOVECS_MAX`] pieces per call, so the answer's
    /// bytes are copied once, by the kernel.
    async fn stream_vectored(&mut self, body: StreamedArray) -> io::Result<()> {
        let HttpStream::Plain(stream) = &mut self.stream else {
            unreachable!("only a plain socket is written vectored");
        };
        let mut batch = VectoredBody {
            head: std::mem::take(&mut self.output),
            body,
            pieces: Vec::with_capacity(STREAM_IOVECS_MAX),
            iovecs: Vec::with_capacity(STREAM_IOVECS_MAX),
        };
        loop {
            let done = batch.prepare();
            let written = monoio::time::timeout(WRITE_TIMEOUT, stream.write_vectored_all(batch));
            batch = match written.await {
                Ok((Ok(_), batch)) => batch,
                Ok((Err(e), _)) => return Err(e),
                Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "write timed out")),
            };
            batch.head.clear();
            if done {
                break;
            }
        }
        self.output = batch.head;
        if self.output.capacity() > OUTPUT_KEEP_MAX_BYTES {
            self.output = Vec::with_capacity(INPUT_INITIAL_BYTES);
        }
        Ok(())
    }

    /// TLS: `body` a chunk at a time through the same bounded buffer (the record layer
    /// copies anyway).
    async fn stream_copied(&mut self, mut body: StreamedArray) -> io::Result<()> {
        self.flush().await?;
        loop {
            let done = body.fill(&mut self.output, STREAM_CHUNK_BYTES);
            self.write_output().await?;
            if done {
                return Ok(());
            }
        }
    }

    async fn write_output(&mut self) -> io::Result<()> {
        let buf = std::mem::take(&mut self.output);
        match monoio::time::timeout(WRITE_TIMEOUT, self.stream.write_all(buf)).await {
            Ok((result, mut buf)) => {
                result?;
                buf.clear();
                if buf.capacity() > OUTPUT_KEEP_MAX_BYTES {
                    buf = Vec::with_capacity(INPUT_INITIAL_BYTES);
                }
                self.output = buf;
                Ok(())
            }
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "write timed out")),
        }
    }

    /// Answers a protocol error and closes.
    ///
    /// The client may still be sending a body we refused; closing with unread bytes would
    /// make the kernel send a reset that can destroy our response before the client reads
    /// it. So the write side is shut first and incoming bytes are discarded for a bounded
    /// time and size ("lingering close"), as HTTP servers commonly do.
    async fn fail(&mut self, error: HttpError) {
        http::write_response(
            &mut self.output,
            error.status,
            Some("text/plain; charset=utf-8"),
            b"",
            error.message.as_bytes(),
            false,
        );
        if self.flush().await.is_err() {
            return;
        }
        let _ = self.stream.shutdown().await;
        let deadline = Instant::now() + LINGER_TIMEOUT;
        let mut discarded = 0usize;
        while discarded < LINGER_BYTES_MAX {
            self.input.clear();
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return;
            }
            match self.fill(remaining).await {
                Ok(0) | Err(_) => return,
                Ok(n) => discarded += n,
            }
        }
    }
}

async fn serve_connection(server: Rc<Server>, stream: HttpStream) {
    let mut conn = Connection {
        stream,
        // Buffers are allocated by the first read and the first answer, sized to need.
        input: Vec::new(),
        output: Vec::new(),
    };
    // Errors end the connection; there is nobody to report them to.
    let _ = serve_requests(&server, &mut conn).await;
    if let HttpStream::Tls(_) = conn.stream {
        // A TLS client tells a truncated answer from a complete one by our close_notify.
        let _ = monoio::time::timeout(LINGER_TIMEOUT, conn.stream.shutdown()).await;
    }
}

/// How a request's answer is framed.
#[derive(Clone, Copy)]
struct ReplyShape {
    keep_alive: bool,
    pretty: bool,
}

/// A request ready to dispatch: its head, where its body is, and the route its raw path
/// matched (which also sized the body).
struct Buffered<'a> {
    input: &'a [u8],
    head: &'a RequestHead,
    body: &'a [u8],
    route: Option<&'static Route>,
}

/// Dispatches a request whose bytes are all in memory. Returns the outcome, how to shape
/// the answer, when the outcome is `Forward` the re-framed request and its timeout, and a
/// large body to stream after what `output` holds.
fn dispatch_buffered(
    server: &Server,
    request: Buffered,
    keep_alive: bool,
    output: &mut Vec<u8>,
    hops: u32,
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
            let forward_timeout = forward_timeout_for(server.shard.config(), &query);
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
            let forward = match outcome {
                Outcome::Forward | Outcome::ForwardDatacenter(_) => Some((
                    reframe_for_forwarding(
                        input,
                        head,
                        request.body,
                        hops + 1,
                        &server.shard.config().node_name,
                        // A request without a token is answered with this agent's default
                        // token, not the default of the server that answers it.
                        server
                            .context
                            .acl_enabled()
                            .then(|| req.token().is_none())
                            .filter(|none| *none)
                            .and_then(|_| server.context.agent_default_token()),
                    ),
                    forward_timeout,
                )),
                _ => None,
            };
            // A parked query keeps its head: woken queries with identical heads share one
            // rendered answer (see `shared_answers`).
            let answer_key = matches!(&outcome, Outcome::Block(op) if op.options.is_blocking())
                .then(|| Box::<[u8]>::from(&input[..head.head_len]));
            Dispatched {
                outcome,
                shape: ReplyShape { keep_alive, pretty },
                forward,
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
/// here (a server, or a request forwarded to one).
fn client_token_to_resolve(
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

/// A blocking query may legitimately take its whole wait on the leader.
fn forward_timeout_for(config: &crate::config::AgentConfig, query: &QueryParams) -> Duration {
    if query
        .get("index")
        .is_some_and(|i| !i.is_empty() && i != "0")
    {
        // An unparsable wait is refused before anything is forwarded.
        let wait = api::blocking_wait(config, query.get("wait"))
            .unwrap_or(config.process.default_query_time);
        return wait + wait / BLOCKING_JITTER_FRACTION + FORWARD_TIMEOUT;
    }
    FORWARD_TIMEOUT
}

/// Rebuilds a request for another server: the same method, target and headers, with the
/// body framed by `Content-Length` and the hop count updated.
fn reframe_for_forwarding(
    input: &[u8],
    head: &RequestHead,
    body: &[u8],
    hops: u32,
    origin_node: &str,
    default_token: Option<String>,
) -> Vec<u8> {
    let target_end = if head.query.end > head.query.start {
        head.query.end
    } else {
        head.path.end
    };
    let mut out = Vec::with_capacity(head.head_len + body.len() + 64);
    out.extend_from_slice(&input[head.method_range.start as usize..head.method_range.end as usize]);
    out.push(b' ');
    out.extend_from_slice(&input[head.path.start as usize..target_end as usize]);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let has_origin = head.headers.iter().any(|h| {
        input[h.name.start as usize..h.name.end as usize]
            .eq_ignore_ascii_case(ORIGIN_NODE_HEADER.as_bytes())
    });
    if !has_origin {
        out.extend_from_slice(format!("{ORIGIN_NODE_HEADER}: {origin_node}\r\n").as_bytes());
    }
    if let Some(token) = default_token.filter(|t| !t.contains(['\r', '\n'])) {
        out.extend_from_slice(format!("X-Consul-Token: {token}\r\n").as_bytes());
    }
    for header in &head.headers {
        let name = &input[header.name.start as usize..header.name.end as usize];
        let dropped = [
            "content-length",
            "transfer-encoding",
            "connection",
            "expect",
            "keep-alive",
            FORWARDED_HEADER,
        ];
        if dropped
            .iter()
            .any(|d| name.eq_ignore_ascii_case(d.as_bytes()))
        {
            continue;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(&input[header.value.start as usize..header.value.end as usize]);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(
        format!(
            "{FORWARDED_HEADER}: {hops}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(body);
    out
}

/// A request read and dispatched; what remains is to carry out its outcome.
struct Dispatched {
    outcome: Outcome,
    shape: ReplyShape,
    forward: Option<(Vec<u8>, Duration)>,
    keep_alive: bool,
    tail: Option<StreamedArray>,
    /// The request head of a query to park, the key of its shared answer.
    answer_key: Option<Box<[u8]>>,
    /// The `api.http` series of a client's request and when its head was read.
    http_metric: Option<(usize, Instant)>,
}

impl Dispatched {
    /// An answer already complete in the output (an error).
    fn done(keep_alive: bool) -> Self {
        Dispatched {
            outcome: Outcome::Done,
            shape: ReplyShape {
                keep_alive,
                pretty: false,
            },
            forward: None,
            keep_alive,
            tail: None,
            answer_key: None,
            http_metric: None,
        }
    }
}

/// Reads the next request (head, then body as the endpoint's limit allows) and dispatches
/// it. `None` when the connection is done. The request head lives only in this future, so a
/// parked request does not keep it.
async fn next_request(
    server: &Server,
    conn: &mut Connection,
    limits: &HttpLimits,
) -> io::Result<Option<Dispatched>> {
    let limits = *limits;
    // The head.
    let head: RequestHead = loop {
        match http::parse_head(&conn.input, &limits) {
            Ok(Some(head)) => break head,
            Ok(None) => {
                conn.flush().await?;
                if conn.input.is_empty() && conn.input.capacity() > INPUT_KEEP_MAX_BYTES {
                    conn.input = Vec::with_capacity(INPUT_INITIAL_BYTES);
                }
                let timeout = if conn.input.is_empty() {
                    IDLE_TIMEOUT
                } else {
                    HEADER_READ_TIMEOUT
                };
                if conn.fill(timeout).await? == 0 {
                    return Ok(None);
                }
            }
            Err(error) => {
                Box::pin(conn.fail(error)).await;
                return Ok(None);
            }
        }
    };

    // The body: its limit depends on the endpoint, so look at the path first.
    let raw_path =
        std::str::from_utf8(&conn.input[head.path.start as usize..head.path.end as usize])
            .unwrap_or("");
    let route = routes::find(raw_path);
    // Consul times a request from its handler's start: here, once the head is read.
    let http_metric = route
        .filter(|_| telemetry::http_timing())
        .and_then(|route| routes::metric_slot(route, head.method))
        .map(|slot| (slot, Instant::now()));
    let limit = routes::body_limit(
        route,
        head.method,
        server.context.config(),
        server.context.http_limits(),
    );
    let head_len = head.head_len;
    let mut chunked_body: Option<Vec<u8>> = None;
    let consumed = match head.framing {
        BodyFraming::None => head_len,
        BodyFraming::Length(length) => {
            if length > limit.bytes_max as u64 {
                let error = HttpError::new(413, routes::body_too_large_message(&limit, length));
                Box::pin(conn.fail(error)).await;
                return Ok(None);
            }
            let needed = head_len + length as usize;
            if conn.input.len() < needed {
                if head.expect_continue {
                    conn.output
                        .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                    conn.flush().await?;
                }
                conn.input.reserve(needed - conn.input.len());
                while conn.input.len() < needed {
                    if conn.fill(BODY_READ_TIMEOUT).await? == 0 {
                        return Ok(None);
                    }
                }
            }
            needed
        }
        BodyFraming::Chunked => {
            let mut decoder = ChunkedDecoder::default();
            let mut body = Vec::new();
            let mut offset = head_len;
            let mut continued = false;
            loop {
                match decoder.decode(&conn.input[offset..], &mut body, limit.bytes_max) {
                    Ok(used) => offset += used,
                    Err(mut error) => {
                        if error.status == 413 {
                            error.message =
                                routes::body_too_large_message(&limit, (body.len() + 1) as u64);
                        }
                        Box::pin(conn.fail(error)).await;
                        return Ok(None);
                    }
                }
                if decoder.is_done() {
                    break;
                }
                if head.expect_continue && !continued {
                    continued = true;
                    conn.output
                        .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                    conn.flush().await?;
                }
                if conn.fill(BODY_READ_TIMEOUT).await? == 0 {
                    return Ok(None);
                }
            }
            chunked_body = Some(body);
            offset
        }
    };

    // A client agent resolves the token of a request it answers itself with its servers
    // first (`client_tokens`), so that the check in `Route::serve` stays synchronous.
    if let Some(secret) = client_token_to_resolve(server, route, &conn.input, &head) {
        Box::pin(api::client_tokens::ensure(&server.context, &secret)).await;
    }

    let keep_alive = head.keep_alive && !server.shard.shutting_down();
    let mut dispatched = {
        let body: &[u8] = match &chunked_body {
            Some(body) => body,
            None => &conn.input[head_len..consumed],
        };
        dispatch_buffered(
            server,
            Buffered {
                input: &conn.input,
                head: &head,
                body,
                route,
            },
            keep_alive,
            &mut conn.output,
            0,
        )
    };
    conn.input.drain(..consumed);
    dispatched.http_metric = http_metric;

    Ok(Some(dispatched))
}

async fn serve_requests(server: &Server, conn: &mut Connection) -> io::Result<()> {
    let limits = *server.shard.http_limits();
    loop {
        let Some(Dispatched {
            outcome,
            shape,
            forward,
            keep_alive,
            tail,
            answer_key,
            http_metric,
        }) = next_request(server, conn, &limits).await?
        else {
            return Ok(());
        };
        let answered = || {
            if let Some((slot, started)) = http_metric {
                telemetry::observe_http(slot, started.elapsed());
            }
        };
        if let Outcome::Block(_) | Outcome::Async(_) = outcome {
            // Parking may be long: send earlier pipelined answers and let go of the buffers.
            conn.flush().await?;
            if conn.input.is_empty() {
                conn.input = Vec::new();
            }
            conn.output = Vec::new();
        }
        if let Outcome::Stream(op) = outcome {
            conn.flush().await?;
            Box::pin(stream_response(conn, op)).await?;
            answered();
            return Ok(());
        }
        if let Outcome::Block(op) = outcome {
            let after = park_connection(server, op, shape, answer_key, conn, &limits).await?;
            answered();
            match after {
                AfterPark::NextRequest => continue,
                AfterPark::Close => return Ok(()),
                AfterPark::SendOutput if keep_alive => continue,
                AfterPark::SendOutput => {
                    conn.flush().await?;
                    return Ok(());
                }
            }
        }
        let shared = complete(server, outcome, shape, &mut conn.output, forward, None).await?;
        debug_assert!(shared.is_none(), "only parked queries share answers");
        answered();
        if let Some(tail) = tail {
            Box::pin(conn.stream(tail)).await?;
        }
        if !keep_alive {
            conn.flush().await?;
            return Ok(());
        }
    }
}

/// Sends a streamed answer: the head, then each chunk as it arrives (chunked encoding),
/// then the last chunk once the sender is gone. A plain connection's client is watched
/// while waiting: it sends nothing on a stream, so readability means it hung up.
async fn stream_response(conn: &mut Connection, op: api::StreamOp) -> io::Result<()> {
    conn.output.extend_from_slice(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nTransfer-Encoding: chunked\r\n\
             Connection: close\r\n\r\n",
            op.content_type
        )
        .as_bytes(),
    );
    conn.flush().await?;
    loop {
        let next = match &conn.stream {
            HttpStream::Plain(stream) => {
                let mut hang_up = std::pin::pin!(stream.readable(false));
                let mut chunk = std::pin::pin!(op.chunks.recv_async());
                std::future::poll_fn(|cx| {
                    if let Poll::Ready(next) = chunk.as_mut().poll(cx) {
                        return Poll::Ready(Some(next));
                    }
                    hang_up.as_mut().poll(cx).map(|_| None)
                })
                .await
            }
            HttpStream::Tls(_) => Some(op.chunks.recv_async().await),
        };
        let chunk = match next {
            None => return Ok(()),
            Some(Err(_)) => break,
            Some(Ok(chunk)) => chunk,
        };
        if chunk.is_empty() {
            continue;
        }
        conn.output
            .extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        conn.output.extend_from_slice(&chunk);
        conn.output.extend_from_slice(b"\r\n");
        conn.flush().await?;
    }
    conn.output.extend_from_slice(b"0\r\n\r\n");
    conn.flush().await
}

/// What a connection does after its parked query was answered.
enum AfterPark {
    /// The answer is in the output buffer; the usual path sends it.
    SendOutput,
    /// The answer went out; read the next request.
    NextRequest,
    /// The answer went out and the connection ends (not keep-alive, or idle too long).
    Close,
}

/// Parks a blocking query that arrived on a client connection, and answers it.
///
/// One readiness poll on the client's socket serves the whole wait: while the query is
/// parked it notices a client that hangs up (and takes in pipelined bytes), and after the
/// answer it is what waits for the client's next request. So a woken query neither cancels
/// nor re-arms anything, and until its client sends again the connection holds no input
/// buffer, read or timer: its idle deadline is the shard ticker's. With thousands of
/// queries woken by one change, that is most of what each wake-up would otherwise cost
/// besides the send itself.
async fn park_connection(
    server: &Server,
    op: BlockOp,
    shape: ReplyShape,
    answer_key: Option<Box<[u8]>>,
    conn: &mut Connection,
    limits: &HttpLimits,
) -> io::Result<AfterPark> {
    if matches!(conn.stream, HttpStream::Tls(_)) {
        return Box::pin(park_tls_connection(server, op, shape, answer_key, conn)).await;
    }
    let Connection {
        stream,
        input,
        output,
    } = conn;
    let stream: &TcpStream = match stream {
        HttpStream::Plain(stream) => stream,
        HttpStream::Tls(_) => unreachable!("TLS connections park above"),
    };
    let mut client = ParkedClient {
        stream,
        input,
        limits,
        readable: std::pin::pin!(stream.readable(false)),
        rearm: move || stream.readable(false),
    };
    let Some(answer) = park(server, op, shape, output, answer_key, Some(&mut client)).await? else {
        return Ok(AfterPark::SendOutput);
    };
    // Earlier answers went out before the query parked, so this one is next.
    debug_assert!(output.is_empty(), "a parked query answers in order");
    send_shared(stream, &answer).await?;
    if !shape.keep_alive {
        return Ok(AfterPark::Close);
    }
    if !client.input.is_empty() {
        // The client pipelined its next request while parked.
        return Ok(AfterPark::NextRequest);
    }
    let idle_deadline_ms = server.shard.shared().now_ms() + IDLE_TIMEOUT.as_millis() as u64;
    loop {
        let mut idle = std::pin::pin!(server.shard.deadline(idle_deadline_ms));
        let readable = std::future::poll_fn(|cx| {
            if let Poll::Ready(result) = client.readable.as_mut().poll(cx) {
                return Poll::Ready(Some(result));
            }
            idle.as_mut().poll(cx).map(|()| None)
        })
        .await;
        if let Some(result) = readable {
            return result.map(|()| AfterPark::NextRequest);
        }
        if server.shard.shutting_down() || server.shard.shared().now_ms() >= idle_deadline_ms {
            return Ok(AfterPark::Close);
        }
        // Woken early with every registration (a leadership change): an idle
        // connection has nothing to re-evaluate, so it keeps waiting.
    }
}

/// Parks a blocking query that arrived over TLS, and answers it.
///
/// The socket's readiness says nothing about a TLS client: its bytes are records (a
/// `close_notify` alert when it hangs up politely) that only the TLS session can read, and
/// reading them here would interleave with the session's own reads. So a parked HTTPS query
/// does not watch its client: one that hangs up is noticed when the query is answered (by a
/// change or its wait deadline), and the answer then goes through the session like any other.
async fn park_tls_connection(
    server: &Server,
    op: BlockOp,
    shape: ReplyShape,
    answer_key: Option<Box<[u8]>>,
    conn: &mut Connection,
) -> io::Result<AfterPark> {
    debug_assert!(matches!(conn.stream, HttpStream::Tls(_)));
    let Some(answer) = park(server, op, shape, &mut conn.output, answer_key, None).await? else {
        return Ok(AfterPark::SendOutput);
    };
    debug_assert!(conn.output.is_empty(), "a parked query answers in order");
    conn.output.extend_from_slice(&answer);
    conn.flush().await?;
    Ok(if shape.keep_alive {
        AfterPark::NextRequest
    } else {
        AfterPark::Close
    })
}

/// Sends an answer shared with other connections.
///
/// A woken query's answer nearly always fits in the socket's send buffer, so it is offered
/// to one non-blocking `send`: when thousands of queries wake at once, that saves each of
/// them an io_uring operation, a timer and a heap-allocated write future. What the socket
/// does not take waits for writability, within the write timeout.
async fn send_shared(stream: &TcpStream, answer: &SharedAnswer) -> io::Result<()> {
    let mut sent = send_now(stream, answer)?;
    if sent == answer.len() {
        return Ok(());
    }
    // Rare, and the timed wait is large: it costs heap only here.
    Box::pin(async move {
        let deadline = Instant::now() + WRITE_TIMEOUT;
        while sent < answer.len() {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "write timed out"));
            }
            match monoio::time::timeout(remaining, stream.writable(false)).await {
                Ok(ready) => ready?,
                Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "write timed out")),
            }
            sent += send_now(stream, &answer[sent..])?;
            debug_assert!(sent <= answer.len());
        }
        Ok(())
    })
    .await
}

/// The client of a parked query, watched while the query waits.
trait ClientWatch {
    /// Takes in what the client sent (pipelined requests wait in the input buffer); ready
    /// with an error once the client hung up or its socket failed.
    fn poll_hang_up(&mut self, cx: &mut Context<'_>) -> Poll<io::Error>;
}

/// A client connection's socket while its query is parked. `readable` is the pending
/// readiness poll; `rearm` makes the next one after bytes were taken in.
struct ParkedClient<'a, F, M> {
    stream: &'a TcpStream,
    input: &'a mut Vec<u8>,
    limits: &'a HttpLimits,
    readable: Pin<&'a mut F>,
    rearm: M,
}

/// Reads taken in per wake-up of a parked client before yielding to other tasks.
const PARKED_READS_PER_POLL_MAX: usize = 16;

impl<F, M> ClientWatch for ParkedClient<'_, F, M>
where
    F: Future<Output = io::Result<()>>,
    M: FnMut() -> F,
{
    fn poll_hang_up(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        for _ in 0..PARKED_READS_PER_POLL_MAX {
            if self.input.len() >= self.limits.head_bytes_max {
                // Enough is buffered; stop reading until this query is answered.
                return Poll::Pending;
            }
            match self.readable.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(error)) => return Poll::Ready(error),
                Poll::Ready(Ok(())) => {}
            }
            let room = self.limits.head_bytes_max - self.input.len();
            self.input.reserve(READ_SPACE_MIN_BYTES.min(room));
            match receive_now(self.stream, self.input, room) {
                Ok(Some(0)) => {
                    return Poll::Ready(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "client closed while parked",
                    ))
                }
                Ok(_) => self.readable.set((self.rearm)()),
                Err(error) => return Poll::Ready(error),
            }
        }
        // A client streaming bytes at us: let other tasks run, then continue.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Carries out what dispatch decided. The answer ends up in `output`, or, for a woken
/// blocking query, may come back as an answer shared with identical queries.
async fn complete(
    server: &Server,
    outcome: Outcome,
    shape: ReplyShape,
    output: &mut Vec<u8>,
    forward: Option<(Vec<u8>, Duration)>,
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
            let result = Box::pin(replicate_restore(&server.shard, state)).await;
            answer_proposal(result, respond, &mut Reply::new(output, keep_alive, pretty));
            Ok(None)
        }
        Outcome::Async(work) => {
            let respond = work.await;
            respond(&mut Reply::new(output, keep_alive, pretty));
            Ok(None)
        }
        Outcome::Stream(_) => {
            // Only a forwarded request gets here: its answer travels back as one message.
            Reply::new(output, keep_alive, pretty).error(&api::ApiError::Internal(
                "a streamed answer cannot be forwarded".into(),
            ));
            Ok(None)
        }
        Outcome::Forward => {
            let (payload, timeout) = forward.expect("a forward outcome carries its request");
            Box::pin(forward_to_leader(
                server, payload, timeout, output, keep_alive,
            ))
            .await;
            Ok(None)
        }
        Outcome::ForwardDatacenter(datacenter) => {
            let (payload, timeout) = forward.expect("a forward outcome carries its request");
            Box::pin(forward_to_datacenter(
                server,
                &datacenter,
                payload,
                timeout,
                output,
                keep_alive,
            ))
            .await;
            Ok(None)
        }
    }
}

/// Whether a failed forwarded request may be sent to another server: reads may; a write
/// only when it certainly never left this agent.
fn forward_retry(payload: &[u8]) -> Retry {
    let read = payload.starts_with(b"GET ") || payload.starts_with(b"HEAD ");
    if read {
        Retry::Always
    } else {
        Retry::NotSent
    }
}

/// Hands a request for another datacenter to a server of it and copies its raw answer into
/// `output`. A client agent sends it to its own server, which makes the hop; a server
/// sends it through the WAN router, which fails over among that datacenter's servers.
async fn forward_to_datacenter(
    server: &Server,
    datacenter: &str,
    payload: Vec<u8>,
    timeout: Duration,
    output: &mut Vec<u8>,
    keep_alive: bool,
) {
    let retry = forward_retry(&payload);
    let answer = if server.shard.is_client() {
        servers::call(
            server.context.servers(),
            &server.shard.forward,
            kind::FORWARD_HTTP,
            &payload,
            timeout,
            retry,
        )
        .await
    } else {
        server
            .context
            .router()
            .forward(
                &server.shard.forward,
                datacenter,
                kind::FORWARD_HTTP,
                &payload,
                timeout,
                retry,
            )
            .await
    };
    let start = output.len();
    write_forwarded_answer(answer, output, keep_alive);
    if server.shard.config().translate_wan_addrs {
        crate::api::translate::translate_answer(
            &server.context,
            &payload,
            datacenter,
            output,
            start,
        );
    }
}

/// Consul's answer when no leader can serve the request.
fn no_leader() -> api::ApiError {
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

/// Replicates a restore: the state in chunks through the log, then the commit that every
/// server verifies and switches to. A failed chunk aborts the staged restore.
async fn replicate_restore(shard: &Shard, state: Vec<u8>) -> ProposalResult {
    use sha2::Digest;
    let restore_id: u64 = rand::random();
    for (i, chunk) in state.chunks(RESTORE_CHUNK_BYTES).enumerate() {
        let op = RestoreOp::Chunk {
            restore_id,
            offset: (i * RESTORE_CHUNK_BYTES) as u64,
            data: bytes::Bytes::copy_from_slice(chunk),
        };
        let result = shard.propose(Command::Restore(op).encode()).await;
        let failure = match result {
            ProposalResult::Applied(CommandResult::Error(reason)) => {
                ProposalResult::Applied(CommandResult::Error(format!("restore failed: {reason}")))
            }
            ProposalResult::Applied(_) => continue,
            refused => refused,
        };
        let _ = shard
            .propose(Command::Restore(RestoreOp::Abort { restore_id }).encode())
            .await;
        return failure;
    }
    let sha256 = sha2::Sha256::digest(&state).to_vec();
    let commit = RestoreOp::Commit {
        restore_id,
        total_bytes: state.len() as u64,
        sha256,
    };
    shard.propose(Command::Restore(commit).encode()).await
}

/// Hands a request to the leader and copies its raw answer into `output`, waiting up to
/// `RPC_HOLD_TIMEOUT` for a leader to be known.
async fn forward_to_leader(
    server: &Server,
    payload: Vec<u8>,
    timeout: Duration,
    output: &mut Vec<u8>,
    keep_alive: bool,
) {
    if server.shard.is_client() {
        // A client agent sends it to the server its server manager picks, which fails
        // over to the next server when this one cannot be reached.
        let answer = servers::call(
            server.context.servers(),
            &server.shard.forward,
            kind::FORWARD_HTTP,
            &payload,
            timeout,
            forward_retry(&payload),
        )
        .await;
        write_forwarded_answer(answer, output, keep_alive);
        return;
    }
    let started = Instant::now();
    loop {
        let Some(leader) = wait_for_leader(server, started, &payload, output, keep_alive).await
        else {
            return;
        };
        if server.shard.shared().faults.is_blocked(leader.ip()) {
            monoio::time::sleep(timeout.min(RPC_HOLD_TIMEOUT)).await;
            Reply::new(output, keep_alive, false).error(&api::ApiError::Internal(
                "rpc error: leader unreachable".to_string(),
            ));
            return;
        }
        let answer = server
            .shard
            .forward
            .call_checked(leader, kind::FORWARD_HTTP, &payload, timeout)
            .await;
        match answer {
            // The leader could not be reached and the request never left: it is likely
            // gone and an election under way. Look for the leader again while the hold
            // lasts, as for a server without one; sending again cannot apply it twice.
            Err(failure) if !failure.sent && started.elapsed() < RPC_HOLD_TIMEOUT => {
                log::debug!(
                    "agent: forwarding to the leader failed, retrying: {}",
                    failure.reason
                );
                monoio::time::sleep(LEADER_RETRY_PAUSE).await;
            }
            answer => {
                let answer = answer.map_err(|failure| format!("rpc error: {}", failure.reason));
                write_forwarded_answer(answer, output, keep_alive);
                return;
            }
        }
    }
}

/// The leader to forward to, waiting up to `RPC_HOLD_TIMEOUT` since `started` for one to
/// be known; `None` once the request was answered here instead (this server took the lead
/// meanwhile, or no leader appeared in time).
async fn wait_for_leader(
    server: &Server,
    started: Instant,
    payload: &[u8],
    output: &mut Vec<u8>,
    keep_alive: bool,
) -> Option<SocketAddr> {
    loop {
        let status = server.shard.cluster_status();
        if let Ok(addr) = status.leader_rpc_address.parse::<SocketAddr>() {
            // A leader that has not applied its first entry yet is ourselves: wait for it.
            if !status.is_leader && addr != server.shard.shared().rpc_address {
                return Some(addr);
            }
        }
        if status.is_leader {
            // Leadership arrived here while we waited: answer locally.
            let answer = Box::pin(answer_forwarded(
                server,
                bytes::Bytes::copy_from_slice(payload),
            ))
            .await;
            output.extend_from_slice(&answer);
            return None;
        }
        if started.elapsed() >= RPC_HOLD_TIMEOUT {
            // Consul's words for a server without a leader.
            Reply::new(output, keep_alive, false).error(&no_leader());
            return None;
        }
        monoio::time::sleep(LEADER_RETRY_PAUSE).await;
    }
}

/// Copies a forwarded request's raw answer into `output`, or answers the failure.
fn write_forwarded_answer(answer: Result<Frame, String>, output: &mut Vec<u8>, keep_alive: bool) {
    match answer {
        Ok(frame) if frame.kind == kind::FORWARD_HTTP_RESPONSE => {
            output.extend_from_slice(&frame.payload)
        }
        Ok(frame) => {
            let reason = String::from_utf8_lossy(&frame.payload).into_owned();
            Reply::new(output, keep_alive, false).error(&api::ApiError::Internal(reason));
        }
        Err(reason) => {
            Reply::new(output, keep_alive, false).error(&api::ApiError::Internal(reason))
        }
    }
}

impl ForwardedHttp for Server {
    fn answer(&self, request: bytes::Bytes) -> impl Future<Output = Vec<u8>> {
        answer_forwarded(self, request)
    }
}

/// Answers a request another server forwarded to us: the raw HTTP/1.1 request in, the raw
/// response out, through the same dispatch path as a local client.
async fn answer_forwarded(server: &Server, payload: bytes::Bytes) -> Vec<u8> {
    let mut output = Vec::with_capacity(1024);
    let limits = HttpLimits {
        body_bytes_max: usize::MAX,
        ..*server.shard.http_limits()
    };
    let head = match http::parse_head(&payload, &limits) {
        Ok(Some(head)) => head,
        Ok(None) => {
            http::write_response(
                &mut output,
                400,
                Some("text/plain; charset=utf-8"),
                b"",
                b"incomplete forwarded request",
                true,
            );
            return output;
        }
        Err(error) => {
            http::write_response(
                &mut output,
                error.status,
                Some("text/plain; charset=utf-8"),
                b"",
                error.message.as_bytes(),
                true,
            );
            return output;
        }
    };
    let body_end = match head.framing {
        BodyFraming::Length(n) => (head.head_len + n as usize).min(payload.len()),
        _ => head.head_len,
    };
    let hops: u32 = head
        .header(&payload, FORWARDED_HEADER)
        .and_then(|h| h.trim().parse().ok())
        .unwrap_or(0);
    if hops > FORWARD_HOPS_MAX {
        http::write_response(
            &mut output,
            500,
            Some("text/plain; charset=utf-8"),
            b"",
            b"No cluster leader (request forwarded too many times)",
            true,
        );
        return output;
    }
    let body = &payload[head.head_len..body_end];
    let Dispatched {
        outcome,
        shape,
        forward,
        tail,
        answer_key,
        ..
    } = dispatch_buffered(
        server,
        Buffered {
            input: &payload,
            head: &head,
            body,
            route: std::str::from_utf8(&payload[head.path.start as usize..head.path.end as usize])
                .ok()
                .and_then(routes::find),
        },
        true,
        &mut output,
        hops,
    );
    // The answer travels back as one RPC message: no streaming here.
    if let Some(mut tail) = tail {
        tail.fill_all(&mut output);
    }
    if matches!(outcome, Outcome::Forward | Outcome::ForwardDatacenter(_))
        && hops >= FORWARD_HOPS_MAX
    {
        http::write_response(
            &mut output,
            500,
            Some("text/plain; charset=utf-8"),
            b"",
            b"No cluster leader (request forwarded too many times)",
            true,
        );
        return output;
    }
    if let Ok(Some(answer)) =
        complete(server, outcome, shape, &mut output, forward, answer_key).await
    {
        output.extend_from_slice(&answer);
    }
    output
}

/// Waits until the query's index moves past the client's index or the wait expires, then
/// answers. Fails when the client went away.
///
/// The deadline lives in the shard's watch registry (one ticker per shard) rather than in
/// a timer of this future: a monoio timer entry is hundreds of bytes, and this future is
/// what every parked query costs.
async fn park(
    server: &Server,
    op: BlockOp,
    shape: ReplyShape,
    output: &mut Vec<u8>,
    answer_key: Option<Box<[u8]>>,
    mut client: Option<&mut (dyn ClientWatch + '_)>,
) -> io::Result<Option<SharedAnswer>> {
    let ReplyShape { keep_alive, pretty } = shape;
    let wait_ms = op.options.wait.as_millis() as u64;
    let jitter_ms = wait_ms / BLOCKING_JITTER_FRACTION as u64;
    let jitter_ms = if jitter_ms > 0 {
        rand::random_range(0..jitter_ms)
    } else {
        0
    };
    let deadline_ms = server.shard.shared().now_ms() + wait_ms + jitter_ms;
    if op.barrier {
        let result = Box::pin(server.shard.read_barrier()).await;
        if let Some(error) = api::ApiError::from_proposal(&result) {
            Reply::new(output, keep_alive, pretty).error(&error);
            return Ok(None);
        }
    }
    let mut woken = false;
    loop {
        if server.context.read_plan(&op.options) == ReadPlan::Forward {
            // Leadership moved while this query waited here.
            Reply::new(output, keep_alive, pretty).error(&no_leader());
            return Ok(None);
        }
        let version = server.shard.current_version();
        let (index, watch_set) = op.query.evaluate(&version);
        let timed_out = server.shard.shared().now_ms() >= deadline_ms;
        if !op.options.is_blocking() || index > op.options.min_index || timed_out {
            let meta = server.context.query_meta(index, op.options.consistency);
            if let (true, Some(head)) = (woken, &answer_key) {
                // Queries woken by one change are often identical: render once per shard.
                let shape = AnswerShape {
                    meta,
                    keep_alive,
                    pretty,
                };
                let kept = server
                    .shared_answers
                    .borrow_mut()
                    .get(&version, head, &shape);
                if let Some(answer) = kept {
                    return Ok(Some(answer));
                }
                let mut rendered = Vec::new();
                op.query.respond(
                    &version,
                    meta,
                    &mut Reply::new(&mut rendered, keep_alive, pretty),
                );
                let answer = server
                    .shared_answers
                    .borrow_mut()
                    .insert(&version, head, shape, rendered);
                return Ok(Some(answer));
            }
            op.query
                .respond(&version, meta, &mut Reply::new(output, keep_alive, pretty));
            return Ok(None);
        }
        drop(version);
        let fired = server.shard.watch(&watch_set, deadline_ms);
        // Registered: the set itself need not be kept while parked.
        drop(watch_set);
        wait_parked(fired, client.as_deref_mut()).await?;
        woken = true;
    }
}

/// Waits for the watch to fire (a change or the deadline). Meanwhile it watches the
/// client, if there is one: pipelined bytes are kept for later, and a client that hangs up
/// ends the wait with an error.
async fn wait_parked(
    watch: crate::shard::runtime::WatchFuture<'_>,
    client: Option<&mut (dyn ClientWatch + '_)>,
) -> io::Result<()> {
    let mut watch = std::pin::pin!(watch);
    let Some(client) = client else {
        watch.await;
        return Ok(());
    };
    std::future::poll_fn(|cx| {
        if watch.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ok(()));
        }
        client.poll_hang_up(cx).map(Err)
    })
    .await
}
