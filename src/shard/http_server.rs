//! The HTTP/1.1 server loop of a shard: accept, read, parse, dispatch, write.
//!
//! Each connection is one task with one input and one output buffer, reused across requests.
//! Pipelined requests are answered in order; responses accumulate in the output buffer and
//! are written with one syscall when no further complete request is buffered.
//!
//! A blocking query releases both buffers while it is parked, so a parked connection costs
//! its task, its query object and its watch registration. While parked, the loop also watches
//! the socket for readability so that a client that hangs up frees its slot immediately
//! instead of after the wait expires.
//!
//! Limits and timeouts: head size and header count ([`HttpLimits`]), body size per endpoint
//! (`api::body_limit`), `HEADER_READ_TIMEOUT` from the first byte of a request to the end of
//! its head, `BODY_READ_TIMEOUT` between body reads, `IDLE_TIMEOUT` between requests, and
//! `WRITE_TIMEOUT` for a client that stops reading.

use crate::api::{self, BlockOp, Outcome, Reply, Request, BLOCKING_JITTER_FRACTION};
use crate::proto::http::{self, BodyFraming, ChunkedDecoder, HttpError, QueryParams, RequestHead};
use crate::shard::runtime::Shard;
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::{TcpListener, TcpStream};
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
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

pub async fn accept_loop(shard: Rc<Shard>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _peer)) => {
                let _ = stream.set_nodelay(true);
                monoio::spawn(serve_connection(shard.clone(), stream));
            }
            Err(e) => {
                if shard.shutting_down() {
                    return;
                }
                // Out of descriptors or memory: back off instead of spinning on accept.
                log::warn!("http: accept failed: {e}");
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

struct Connection {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
}

impl Connection {
    /// Reads more bytes into `input`. Returns 0 at end of stream.
    async fn fill(&mut self, timeout: Duration) -> io::Result<usize> {
        if self.input.capacity() - self.input.len() < READ_SPACE_MIN_BYTES {
            self.input
                .reserve(self.input.len().max(READ_SPACE_MIN_BYTES));
        }
        let buf = std::mem::take(&mut self.input);
        let len = buf.len();
        match monoio::time::timeout(timeout, self.stream.read(buf.slice_mut(len..))).await {
            Ok((result, slice)) => {
                self.input = slice.into_inner();
                result
            }
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "read timed out")),
        }
    }

    async fn flush(&mut self) -> io::Result<()> {
        if self.output.is_empty() {
            return Ok(());
        }
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

async fn serve_connection(shard: Rc<Shard>, stream: TcpStream) {
    let mut conn = Connection {
        stream,
        input: Vec::with_capacity(INPUT_INITIAL_BYTES),
        output: Vec::with_capacity(INPUT_INITIAL_BYTES),
    };
    // Errors end the connection; there is nobody to report them to.
    let _ = serve_requests(&shard, &mut conn).await;
}

async fn serve_requests(shard: &Shard, conn: &mut Connection) -> io::Result<()> {
    let limits = *shard.http_limits();
    loop {
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
                        return Ok(());
                    }
                }
                Err(error) => {
                    conn.fail(error).await;
                    return Ok(());
                }
            }
        };

        // The body: its limit depends on the endpoint, so look at the path first.
        let raw_path =
            std::str::from_utf8(&conn.input[head.path.start as usize..head.path.end as usize])
                .unwrap_or("");
        let limit = api::body_limit(shard, head.method, raw_path);
        let head_len = head.head_len;
        let mut chunked_body: Option<Vec<u8>> = None;
        let consumed = match head.framing {
            BodyFraming::None => head_len,
            BodyFraming::Length(length) => {
                if length > limit.bytes_max as u64 {
                    conn.fail(HttpError::new(
                        413,
                        api::body_too_large_message(&limit, length),
                    ))
                    .await;
                    return Ok(());
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
                            return Ok(());
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
                                    api::body_too_large_message(&limit, (body.len() + 1) as u64);
                            }
                            conn.fail(error).await;
                            return Ok(());
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
                        return Ok(());
                    }
                }
                chunked_body = Some(body);
                offset
            }
        };

        let keep_alive = head.keep_alive && !shard.shutting_down();
        let (outcome, pretty) = {
            let input = &conn.input;
            let raw_path =
                std::str::from_utf8(&input[head.path.start as usize..head.path.end as usize]);
            let raw_query =
                std::str::from_utf8(&input[head.query.start as usize..head.query.end as usize]);
            let decoded_path = raw_path.ok().and_then(|p| http::percent_decode(p, false));
            let query = raw_query
                .map_err(|_| HttpError::bad_request("query string is not UTF-8"))
                .and_then(QueryParams::parse);
            match (decoded_path, query) {
                (Some(path), Ok(query)) => {
                    let pretty = shard.config().dev_mode || query.has("pretty");
                    let body: &[u8] = match &chunked_body {
                        Some(body) => body,
                        None => &input[head_len..consumed],
                    };
                    let request = Request {
                        method: head.method,
                        path: &path,
                        query,
                        head: &head,
                        buf: input,
                        body,
                    };
                    let mut reply = Reply {
                        out: &mut conn.output,
                        keep_alive,
                        pretty,
                    };
                    (api::dispatch(shard, &request, &mut reply), pretty)
                }
                (None, _) => {
                    let mut reply = Reply {
                        out: &mut conn.output,
                        keep_alive,
                        pretty: false,
                    };
                    reply.error(&api::ApiError::bad_request("invalid escape in URL path"));
                    (Outcome::Done, false)
                }
                (_, Err(error)) => {
                    let mut reply = Reply {
                        out: &mut conn.output,
                        keep_alive,
                        pretty: false,
                    };
                    reply.error(&api::ApiError::BadRequest(error.message));
                    (Outcome::Done, false)
                }
            }
        };
        conn.input.drain(..consumed);

        match outcome {
            Outcome::Done => {}
            Outcome::Write(op) => {
                let result = shard.propose(op.command.encode()).await;
                let mut reply = Reply {
                    out: &mut conn.output,
                    keep_alive,
                    pretty,
                };
                (op.respond)(result, &mut reply);
            }
            Outcome::Block(op) => {
                conn.flush().await?;
                park(shard, conn, op, keep_alive, pretty).await?;
            }
        }
        if !keep_alive {
            conn.flush().await?;
            return Ok(());
        }
    }
}

/// Waits until the query's index moves past the client's index or the wait expires, then
/// answers. Fails when the client went away.
async fn park(
    shard: &Shard,
    conn: &mut Connection,
    op: BlockOp,
    keep_alive: bool,
    pretty: bool,
) -> io::Result<()> {
    let wait = op.options.wait;
    let jitter_ms = (wait.as_millis() as u64) / BLOCKING_JITTER_FRACTION as u64;
    let jitter = if jitter_ms > 0 {
        Duration::from_millis(rand::random_range(0..jitter_ms))
    } else {
        Duration::ZERO
    };
    let deadline = monoio::time::Instant::from_std(Instant::now() + wait + jitter);
    if conn.input.is_empty() {
        conn.input = Vec::new();
    }
    conn.output = Vec::new();
    let limits = *shard.http_limits();
    loop {
        let version = match shard.read_version(op.options.consistency) {
            Ok(version) => version,
            Err(error) => {
                restore_output(conn);
                Reply {
                    out: &mut conn.output,
                    keep_alive,
                    pretty,
                }
                .error(&error);
                return Ok(());
            }
        };
        let (index, watch_set) = op.query.evaluate(&version);
        let timed_out = monoio::time::Instant::now() >= deadline;
        if index > op.options.min_index || timed_out {
            restore_output(conn);
            let meta = shard.query_meta(index, op.options.consistency);
            op.query.respond(
                &version,
                meta,
                &mut Reply {
                    out: &mut conn.output,
                    keep_alive,
                    pretty,
                },
            );
            return Ok(());
        }
        drop(version);
        wait_parked(shard.watch(&watch_set), deadline, conn, &limits).await?;
    }
}

/// Waits for the watch to fire or the deadline to pass. Meanwhile it watches the socket:
/// bytes a client pipelines are kept for later, and a client that hangs up ends the wait.
async fn wait_parked(
    watch: crate::shard::runtime::WatchFuture<'_>,
    deadline: monoio::time::Instant,
    conn: &mut Connection,
    limits: &http::HttpLimits,
) -> io::Result<()> {
    let mut watch = std::pin::pin!(watch);
    let mut sleep = std::pin::pin!(monoio::time::sleep_until(deadline));
    loop {
        let watch_socket = conn.input.len() < limits.head_bytes_max;
        let socket_ready = monoio::select! {
            _ = &mut watch => return Ok(()),
            _ = &mut sleep => return Ok(()),
            readable = conn.stream.readable(false), if watch_socket => readable,
        };
        socket_ready?;
        if conn.fill(HEADER_READ_TIMEOUT).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "client closed while parked",
            ));
        }
    }
}

fn restore_output(conn: &mut Connection) {
    if conn.output.capacity() == 0 {
        conn.output = Vec::with_capacity(INPUT_INITIAL_BYTES);
    }
}
