//! The HTTP load loop: keep-alive connections, one request in flight each, closed or open loop.
//!
//! Closed loop: a connection sends its next request as soon as the previous answer is in.
//! Open loop (`--rate R`): connection `c` of `N` owns the schedule
//! `start + (c/N + k) · N/R`; it sleeps until each slot, and latency is measured from the
//! slot's *intended* time, so a stalled server is charged for the requests it delayed
//! (coordinated-omission correction, as wrk2 does). Timers have 1 ms granularity, so in open
//! loop up to ~1 ms of loadgen's own wake-up lag can appear in each latency.
//!
//! A request that fails (reset, EOF, parse error, timeout) is counted and its connection is
//! replaced; the run goes on. Only requests sent inside the window and answered before its end
//! are recorded.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;

use crate::config::RunConfig;
use crate::engine::{run_workers, Progress, ThreadStats, Window, WorkerEnv};
use crate::http::{parse_response_head, BodyFraming, ChunkedScanner, HttpError, ResponseHead};
use crate::net::{connect_tcp, Target};

/// Initial read buffer per connection; grows (bounded by the parser's limits) for big bodies.
pub const READ_BUFFER_BYTES: usize = 16 * 1024;
/// Smallest free space offered to one read.
const READ_SPACE_MIN_BYTES: usize = 4 * 1024;
/// Pause after a failed reconnect, so a dead target is not hammered in a tight loop.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// One request's outcome as a workload judges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub ok: bool,
    /// This response completes one operation (a cycle, a registration, …).
    pub op_done: bool,
    /// A failure that is not about the status code (e.g. a lock that was not acquired).
    pub protocol_error: bool,
}

impl Verdict {
    pub const OK: Verdict = Verdict {
        ok: true,
        op_done: true,
        protocol_error: false,
    };
    pub const OK_STEP: Verdict = Verdict {
        ok: true,
        op_done: false,
        protocol_error: false,
    };
    pub const BAD_STATUS: Verdict = Verdict {
        ok: false,
        op_done: false,
        protocol_error: false,
    };
    pub const BAD_ANSWER: Verdict = Verdict {
        ok: false,
        op_done: false,
        protocol_error: true,
    };

    /// OK when `status` is 2xx.
    pub fn from_status(status: u16) -> Verdict {
        if (200..300).contains(&status) {
            Verdict::OK
        } else {
            Verdict::BAD_STATUS
        }
    }
}

/// What a connection sends and how it judges the answers.
pub trait HttpWorkload {
    /// Writes the next request into `request`. The buffer still holds the previous request
    /// unless that one failed (then it is empty), so a workload with a fixed request may
    /// write it only when `request` is empty. Returns true when this request starts an
    /// operation.
    fn next_request(&mut self, request: &mut Vec<u8>) -> bool;

    /// Whether [`on_response`](Self::on_response) needs the body.
    fn wants_body(&self) -> bool {
        false
    }

    fn on_response(&mut self, status: u16, body: &[u8]) -> Verdict;

    /// The request failed at the transport level; the next one goes on a new connection.
    fn on_failure(&mut self) {}
}

/// Why a round trip failed.
#[derive(Debug)]
pub enum RoundTripError {
    Io(std::io::Error),
    /// The server closed the connection before a complete response.
    Eof,
    Parse(HttpError),
}

impl std::fmt::Display for RoundTripError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoundTripError::Io(e) => write!(f, "i/o: {e}"),
            RoundTripError::Eof => write!(f, "connection closed before a complete response"),
            RoundTripError::Parse(e) => write!(f, "{e}"),
        }
    }
}

/// A complete response.
#[derive(Clone, Copy, Debug)]
pub struct Response {
    pub status: u16,
    pub consul_index: Option<u64>,
    /// The connection cannot carry another request.
    pub close: bool,
}

/// A keep-alive HTTP/1.1 client connection on a monoio runtime.
pub struct HttpConn {
    stream: TcpStream,
    /// Received bytes not yet consumed, from index 0.
    rbuf: Vec<u8>,
    /// Least free space offered to a read before `rbuf` grows: half its initial size at
    /// most, so a small buffer that discards a large body as it goes never grows.
    read_space_min: usize,
}

impl HttpConn {
    pub fn new(stream: TcpStream, read_buffer_bytes: usize) -> Self {
        // Touch the buffer now: a fresh allocation's pages fault on first write, and that
        // cost belongs to setting the connection up, not to the first response it reads
        // (with 15,000 parked watchers answered at once it was 40 % of the client's CPU,
        // taken from the same two cores the server runs on).
        let mut rbuf = vec![1u8; read_buffer_bytes];
        rbuf.clear();
        HttpConn {
            stream,
            rbuf,
            read_space_min: READ_SPACE_MIN_BYTES.min(read_buffer_bytes / 2).max(1),
        }
    }

    /// Sends `request` and reads its response. Returns the request buffer for reuse.
    pub async fn round_trip(
        &mut self,
        request: Vec<u8>,
        want_body: bool,
        body: &mut Vec<u8>,
    ) -> (Result<Response, RoundTripError>, Vec<u8>) {
        let (written, request) = self.stream.write_all(request).await;
        if let Err(e) = written {
            return (Err(RoundTripError::Io(e)), request);
        }
        (self.read_response(want_body, body).await, request)
    }

    /// Writes `request` without reading (used to park blocking queries).
    pub async fn send(&mut self, request: Vec<u8>) -> std::io::Result<()> {
        self.stream.write_all(request).await.0.map(|_| ())
    }

    /// Reads one complete response; copies its body into `body` when `want_body`.
    pub async fn read_response(
        &mut self,
        want_body: bool,
        body: &mut Vec<u8>,
    ) -> Result<Response, RoundTripError> {
        let mut head: Option<ResponseHead> = None;
        let mut chunked = ChunkedScanner::new();
        // Body bytes of a `Content-Length` response already read and dropped (when the
        // caller does not want the body): a multi-megabyte answer then passes through a
        // small, cache-warm buffer instead of growing one per connection, so the client's
        // cost per byte stays flat and large answers do not look slower than they are.
        let mut discarded = 0usize;
        loop {
            if head.is_none() {
                head = parse_response_head(&self.rbuf).map_err(RoundTripError::Parse)?;
                // Informational responses (100 Continue) precede the real one.
                if let Some(h) = head.filter(|h| (100..200).contains(&h.status)) {
                    self.rbuf.drain(..h.head_len);
                    head = None;
                    continue;
                }
            }
            if let Some(h) = head {
                let complete = match h.framing {
                    BodyFraming::Length(n) if !want_body => {
                        let buffered = self.rbuf.len() - h.head_len;
                        if discarded + buffered >= n {
                            Some(h.head_len + (n - discarded))
                        } else {
                            discarded += buffered;
                            self.rbuf.truncate(h.head_len);
                            None
                        }
                    }
                    BodyFraming::Length(n) => {
                        let end = h.head_len + n;
                        (self.rbuf.len() >= end).then(|| {
                            body.extend_from_slice(&self.rbuf[h.head_len..end]);
                            end
                        })
                    }
                    BodyFraming::Chunked => chunked
                        .scan(&self.rbuf[h.head_len..], want_body.then_some(&mut *body))
                        .map_err(RoundTripError::Parse)?
                        .map(|encoded| h.head_len + encoded),
                    BodyFraming::UntilClose => None,
                };
                if let Some(consumed) = complete {
                    if consumed == self.rbuf.len() {
                        self.rbuf.clear();
                    } else {
                        self.rbuf.drain(..consumed);
                    }
                    return Ok(Response {
                        status: h.status,
                        consul_index: h.consul_index,
                        close: h.connection_close,
                    });
                }
            }
            let n = self.fill().await.map_err(RoundTripError::Io)?;
            if n == 0 {
                return match head {
                    Some(h) if h.framing == BodyFraming::UntilClose => {
                        if want_body {
                            body.extend_from_slice(&self.rbuf[h.head_len..]);
                        }
                        self.rbuf.clear();
                        Ok(Response {
                            status: h.status,
                            consul_index: h.consul_index,
                            close: true,
                        })
                    }
                    _ => Err(RoundTripError::Eof),
                };
            }
            if head.is_some_and(|h| h.framing == BodyFraming::UntilClose)
                && self.rbuf.len() > crate::http::HEAD_BYTES_MAX + crate::http::BODY_BYTES_MAX
            {
                return Err(RoundTripError::Parse(HttpError::BodyTooLarge));
            }
        }
    }

    /// Appends whatever the socket has to `rbuf`; returns the byte count (0 at EOF).
    async fn fill(&mut self) -> std::io::Result<usize> {
        let len = self.rbuf.len();
        if self.rbuf.capacity() - len < self.read_space_min {
            self.rbuf.reserve(len.max(READ_BUFFER_BYTES));
        }
        let cap = self.rbuf.capacity();
        let buf = std::mem::take(&mut self.rbuf).slice_mut(len..cap);
        let (result, buf) = self.stream.read(buf).await;
        self.rbuf = buf.into_inner();
        result
    }
}

/// Opens a connection asynchronously (or blocking, when a source address must be bound).
pub async fn reconnect(
    target: &Target,
    source: Option<std::net::Ipv4Addr>,
    timeout: Duration,
    read_buffer_bytes: usize,
) -> std::io::Result<HttpConn> {
    let stream = match source {
        None => {
            let connect = TcpStream::connect_addr(target.addr);
            let stream = monoio::time::timeout(timeout, connect)
                .await
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
                })??;
            stream.set_nodelay(true)?;
            stream
        }
        Some(ip) => TcpStream::from_std(connect_tcp(target.addr, Some(ip), timeout)?)?,
    };
    Ok(HttpConn::new(stream, read_buffer_bytes))
}

/// Source address for connection `index` (round-robin over `--source-addrs`).
pub fn source_for(config: &RunConfig, index: usize) -> Option<std::net::Ipv4Addr> {
    (!config.source_addrs.is_empty())
        .then(|| config.source_addrs[index % config.source_addrs.len()])
}

/// Everything the connections of one worker share.
struct Shared {
    config: Arc<RunConfig>,
    target: Target,
    window: Window,
    /// Open loop: time between two requests of one connection.
    interval: Option<Duration>,
    thread: usize,
    progress: Arc<Progress>,
    stats: RefCell<ThreadStats>,
}

/// Runs `config.connections` connections, each driven by the workload `make(conn_index)`
/// builds, across the worker threads; returns each worker's statistics.
pub fn run_http<M>(
    config: &RunConfig,
    target: &Target,
    label: &str,
    make: M,
) -> Result<Vec<ThreadStats>, String>
where
    M: Fn(usize) -> Box<dyn HttpWorkload> + Sync,
{
    crate::net::check_fd_budget(config.connections)?;
    let shared_config = Arc::new(config.clone());
    let interval = config
        .rate
        .map(|rate| Duration::from_secs_f64(config.connections as f64 / rate));
    run_workers(config, label, |env: WorkerEnv| {
        let make = &make;
        let shared_config = &shared_config;
        async move {
            let mut setup_errors = ThreadStats::default();
            let mut conns = Vec::new();
            for index in env.my_indices(config.connections) {
                let source = source_for(config, index);
                let conn = connect_tcp(target.addr, source, config.connect_timeout)
                    .and_then(TcpStream::from_std)
                    .map(|s| HttpConn::new(s, READ_BUFFER_BYTES));
                if let Err(e) = &conn {
                    setup_errors.errors.connect += 1;
                    setup_errors.note_error(|| format!("connect to {}: {e}", target.addr));
                }
                conns.push((index, conn.ok(), make(index)));
            }
            let start = env.ticket.arrive();
            let window = Window::new(start, config.warmup, config.duration);
            let shared = Rc::new(Shared {
                config: shared_config.clone(),
                target: target.clone(),
                window,
                interval,
                thread: env.index,
                progress: env.progress,
                stats: RefCell::new(setup_errors),
            });
            for (index, conn, workload) in conns {
                monoio::spawn(connection_loop(shared.clone(), index, conn, workload));
            }
            // Answers after the window are not recorded, so the worker stops at its end; the
            // runtime drops the connection tasks with it.
            monoio::time::sleep_until(monoio::time::Instant::from_std(window.end)).await;
            shared.stats.take()
        }
    })
}

async fn connection_loop(
    shared: Rc<Shared>,
    index: usize,
    mut conn: Option<HttpConn>,
    mut workload: Box<dyn HttpWorkload>,
) {
    let config = shared.config.clone();
    let window = shared.window;
    let source = source_for(&config, index);
    let mut request = Vec::with_capacity(256);
    let mut body = Vec::new();
    let mut intended = match shared.interval {
        Some(interval) => window.start + interval.mul_f64(index as f64 / config.connections as f64),
        None => window.start,
    };
    let mut now = Instant::now();
    let mut op_start = now;
    loop {
        // The instant latency is measured from: the slot in open loop, now in closed loop.
        let send_at = match shared.interval {
            Some(interval) => {
                if intended >= window.end {
                    break;
                }
                if intended > now {
                    monoio::time::sleep_until(monoio::time::Instant::from_std(intended)).await;
                }
                let slot = intended;
                intended += interval;
                slot
            }
            None => {
                if now >= window.end {
                    break;
                }
                now
            }
        };
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match reconnect(
                &shared.target,
                source,
                config.connect_timeout,
                READ_BUFFER_BYTES,
            )
            .await
            {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    now = Instant::now();
                    if now >= window.measure_start && now <= window.end {
                        let mut stats = shared.stats.borrow_mut();
                        stats.errors.connect += 1;
                        stats.note_error(|| format!("connect to {}: {e}", shared.target.addr));
                    }
                    monoio::time::sleep(RECONNECT_BACKOFF).await;
                    now = Instant::now();
                    continue;
                }
            },
        };
        if workload.next_request(&mut request) {
            op_start = send_at;
        }
        let want_body = workload.wants_body();
        body.clear();
        let deadline = monoio::time::Instant::from_std(send_at + config.timeout);
        let outcome = monoio::time::timeout_at(
            deadline,
            c.round_trip(std::mem::take(&mut request), want_body, &mut body),
        )
        .await;
        let done = Instant::now();
        now = done;
        let counted = window.counts(send_at, done);
        let mut stats = shared.stats.borrow_mut();
        if counted {
            stats.sent += 1;
        }
        match outcome {
            Ok((Ok(response), returned)) => {
                request = returned;
                let verdict = workload.on_response(response.status, &body);
                if counted {
                    if verdict.ok {
                        stats.requests_ok += 1;
                        stats.latency.record(done - send_at);
                        if verdict.op_done {
                            stats.ops += 1;
                            stats.op_latency.record(done - op_start);
                        }
                    } else if verdict.protocol_error {
                        stats.errors.protocol += 1;
                        stats.note_error(|| {
                            format!(
                                "unexpected answer: {}",
                                String::from_utf8_lossy(&body[..body.len().min(200)])
                            )
                        });
                    } else {
                        stats.errors.status += 1;
                        *stats.statuses.entry(response.status).or_default() += 1;
                        stats.note_error(|| format!("unexpected status {}", response.status));
                    }
                }
                if response.close {
                    conn = None;
                }
            }
            Ok((Err(e), returned)) => {
                request = returned;
                request.clear();
                if counted {
                    match e {
                        RoundTripError::Parse(_) => stats.errors.parse += 1,
                        _ => stats.errors.io += 1,
                    }
                    stats.note_error(|| e.to_string());
                }
                workload.on_failure();
                conn = None;
            }
            Err(_) => {
                // The request buffer went down with the cancelled round trip; `request` is
                // empty and the workload rebuilds it.
                if counted {
                    stats.errors.timeout += 1;
                    stats.note_error(|| format!("no answer within {:?}", config.timeout));
                }
                workload.on_failure();
                conn = None;
            }
        }
        if counted {
            shared
                .progress
                .publish(shared.thread, stats.requests_ok, stats.errors.total());
        }
    }
}
