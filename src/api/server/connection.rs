//! The connection loop: accepting (plain or TLS), reading a request's head and body within
//! their limits and timeouts, dispatching it, and writing answers in order.
//!
//! Each connection is one task with one input and one output buffer, reused across requests
//! and released when they grew large. Pipelined requests are answered in order; answers
//! accumulate in the output buffer and are written with one syscall when no further complete
//! request is buffered. A refused request gets its answer and a lingering close. A blocking
//! query hands the connection to [`super::parking`], which gives it back for the next request.

use super::dispatch::{client_token_to_resolve, complete, dispatch_buffered, Buffered, Dispatched};
use super::parking::{park_connection, AfterPark};
use super::{Server, BODY_READ_TIMEOUT, HEADER_READ_TIMEOUT, IDLE_TIMEOUT, WRITE_TIMEOUT};
use crate::api::routes::{self, BodyLimit};
use crate::api::{self, Outcome};
use crate::consul::render::{StreamedArray, STREAM_CHUNK_BYTES};
use crate::proto::http::{self, BodyFraming, ChunkedDecoder, HttpError, HttpLimits, RequestHead};
use crate::telemetry;
use crate::tls::stream::{FirstRecord, ServerTlsStream, HANDSHAKE_TIMEOUT_DEFAULT};
use crate::tls::Protocol;
use monoio::buf::{IoBuf, IoBufMut};
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::{TcpListener, TcpStream};
use monoio::BufResult;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// How long a refused request's remaining bytes are drained before closing.
const LINGER_TIMEOUT: Duration = Duration::from_secs(2);
/// Most bytes drained after a refused request.
const LINGER_BYTES_MAX: usize = 16 << 20;
/// Input buffer capacity a connection starts with; it grows for big requests.
const INPUT_INITIAL_BYTES: usize = 2048;
/// Least free space offered to each read.
pub(super) const READ_SPACE_MIN_BYTES: usize = 1024;
/// Output capacity kept between requests; a bigger buffer is released after use.
const OUTPUT_KEEP_MAX_BYTES: usize = 256 * 1024;
/// Input capacity kept between requests; a bigger buffer is released after use.
const INPUT_KEEP_MAX_BYTES: usize = 256 * 1024;
/// Pieces one `writev` of a streamed body lists: Linux's `IOV_MAX`.
const STREAM_IOVECS_MAX: usize = 1024;

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
pub(super) enum HttpStream {
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

unsafe impl monoio::buf::IoVecBuf for VectoredBody {
    fn read_iovec_ptr(&self) -> *const libc::iovec {
        self.iovecs.as_ptr()
    }
    fn read_iovec_len(&self) -> usize {
        self.iovecs.len()
    }
}

pub(super) struct Connection {
    pub(super) stream: HttpStream,
    pub(super) input: Vec<u8>,
    pub(super) output: Vec<u8>,
}

impl Connection {
    /// Reads more input. The read-with-timeout future is large (monoio's timer entry is
    /// hundreds of bytes), so it is boxed: it then costs heap only while a read is pending,
    /// instead of enlarging every connection's task, parked ones included.
    async fn fill(&mut self, timeout: Duration) -> io::Result<usize> {
        Box::pin(fill(&mut self.stream, &mut self.input, timeout)).await
    }

    pub(super) async fn flush(&mut self) -> io::Result<()> {
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

/// Reads the next request (head, then body as the endpoint's limit allows) and dispatches
/// it. `None` when the connection is done. The request head lives only in this future, so a
/// parked request does not keep it.
async fn next_request(
    server: &Server,
    conn: &mut Connection,
    limits: &HttpLimits,
) -> io::Result<Option<Dispatched>> {
    let Some(head) = read_head(conn, limits).await? else {
        return Ok(None);
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
    let Some(body) = read_body(conn, &head, &limit).await? else {
        return Ok(None);
    };

    // A client agent resolves the token of a request it answers itself with its servers
    // first (`client_tokens`), so that the check in `Route::serve` stays synchronous.
    if let Some(secret) = client_token_to_resolve(server, route, &conn.input, &head) {
        Box::pin(api::client_tokens::ensure(&server.context, &secret)).await;
    }

    let keep_alive = head.keep_alive && !server.shard.shutting_down();
    let mut dispatched = {
        let body_bytes: &[u8] = match &body.chunked {
            Some(decoded) => decoded,
            None => &conn.input[head.head_len..body.consumed],
        };
        dispatch_buffered(
            server,
            Buffered {
                input: &conn.input,
                head: &head,
                body: body_bytes,
                route,
            },
            keep_alive,
            &mut conn.output,
        )
    };
    conn.input.drain(..body.consumed);
    dispatched.http_metric = http_metric;

    Ok(Some(dispatched))
}

/// A request's body once read: where the request's bytes end in the input, and the decoded
/// body of a chunked one (a body framed by length is read in place).
struct ReadBody {
    consumed: usize,
    chunked: Option<Vec<u8>>,
}

/// Reads until a whole request head is buffered, within `IDLE_TIMEOUT` before its first
/// byte and `HEADER_READ_TIMEOUT` after. `None` when the connection is done (closed, or a
/// bad head answered). Earlier answers go out before each wait.
async fn read_head(conn: &mut Connection, limits: &HttpLimits) -> io::Result<Option<RequestHead>> {
    loop {
        match http::parse_head(&conn.input, limits) {
            Ok(Some(head)) => return Ok(Some(head)),
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
    }
}

/// Reads the body `head` announces, within `limit` and `BODY_READ_TIMEOUT` between reads,
/// answering `Expect: 100-continue` first. `None` when the connection is done (closed, or a
/// body over the limit answered).
async fn read_body(
    conn: &mut Connection,
    head: &RequestHead,
    limit: &BodyLimit,
) -> io::Result<Option<ReadBody>> {
    match head.framing {
        BodyFraming::None => Ok(Some(ReadBody {
            consumed: head.head_len,
            chunked: None,
        })),
        BodyFraming::Length(length) => read_length_body(conn, head, limit, length).await,
        BodyFraming::Chunked => read_chunked_body(conn, head, limit).await,
    }
}

/// A body framed by `Content-Length`: refused at once when over the limit, else read in
/// place after the head.
async fn read_length_body(
    conn: &mut Connection,
    head: &RequestHead,
    limit: &BodyLimit,
    length: u64,
) -> io::Result<Option<ReadBody>> {
    if length > limit.bytes_max as u64 {
        let error = HttpError::new(413, routes::body_too_large_message(limit, length));
        Box::pin(conn.fail(error)).await;
        return Ok(None);
    }
    let needed = head.head_len + length as usize;
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
    Ok(Some(ReadBody {
        consumed: needed,
        chunked: None,
    }))
}

/// A chunked body: decoded as it arrives, refused once the decoded bytes pass the limit.
async fn read_chunked_body(
    conn: &mut Connection,
    head: &RequestHead,
    limit: &BodyLimit,
) -> io::Result<Option<ReadBody>> {
    let mut decoder = ChunkedDecoder::default();
    let mut body = Vec::new();
    let mut offset = head.head_len;
    let mut continued = false;
    loop {
        match decoder.decode(&conn.input[offset..], &mut body, limit.bytes_max) {
            Ok(used) => offset += used,
            Err(mut error) => {
                if error.status == 413 {
                    error.message = routes::body_too_large_message(limit, (body.len() + 1) as u64);
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
    Ok(Some(ReadBody {
        consumed: offset,
        chunked: Some(body),
    }))
}

async fn serve_requests(server: &Server, conn: &mut Connection) -> io::Result<()> {
    let limits = *server.shard.http_limits();
    loop {
        let Some(Dispatched {
            outcome,
            shape,
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
        let shared = complete(server, outcome, shape, &mut conn.output, None).await?;
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
