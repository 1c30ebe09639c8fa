//! Blocking queries: a query waits, parked, until its index moves past the client's or its
//! wait expires, then answers.
//!
//! A parked connection releases its buffers, so it costs its task, its query object, its
//! request head and its watch registration; its deadline lives in the shard's watch registry
//! (one ticker per shard), not in a timer of its own. While parked, one readiness poll watches
//! the socket so that a client that hangs up frees its slot at once; after the answer the same
//! poll waits for the client's next request. Woken queries with identical request heads share
//! one rendered answer per store version ([`crate::api::shared_answers`]), sent with one
//! non-blocking `send`: a write that wakes thousands of watchers costs little more than the
//! sends. A parked query answers in order: earlier pipelined answers went out before it parked.

use super::connection::{Connection, HttpStream, READ_SPACE_MIN_BYTES};
use super::dispatch::no_leader;
use super::{ReplyShape, Server, IDLE_TIMEOUT, WRITE_TIMEOUT};
use crate::api::shared_answers::{AnswerShape, SharedAnswer};
use crate::api::{self, BlockOp, Reply, BLOCKING_JITTER_FRACTION};
use crate::proto::http::HttpLimits;
use crate::shard::nonblocking::{receive_now, send_now};
use crate::shard::runtime::ReadPlan;
use monoio::net::TcpStream;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// What a connection does after its parked query was answered.
pub(super) enum AfterPark {
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
pub(super) async fn park_connection(
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
pub(super) trait ClientWatch {
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

/// Waits until the query's index moves past the client's index or the wait expires, then
/// answers. Fails when the client went away.
///
/// The deadline lives in the shard's watch registry (one ticker per shard) rather than in
/// a timer of this future: a monoio timer entry is hundreds of bytes, and this future is
/// what every parked query costs.
pub(super) async fn park(
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
