//! The `dns` scenario: A/SRV/… queries over UDP or TCP, closed or open loop.
//!
//! UDP closed loop: each socket has one query in flight; a reply with another ID (a late
//! answer to an earlier, timed-out query) is skipped. UDP open loop: each socket has a sender
//! that follows the fixed schedule whatever the server does, and a receiver that matches
//! answers by ID against a table of send times (one slot per 16-bit ID); latency is measured
//! from the intended send time. An ID slot reused while still occupied, an answer later than
//! `--timeout`, and at the end any query older than `--timeout` still unanswered are counted
//! as timeouts. TCP uses RFC 1035 length framing with one query in flight per connection.
//!
//! An answer counts as a success when RCODE is NOERROR and it carries at least one record
//! (unless `--allow-empty`); truncated UDP answers (TC) succeed and are counted separately.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::udp::UdpSocket;
use monoio::net::TcpStream;
use serde_json::{json, Map};

use crate::config::RunConfig;
use crate::dnswire::{
    encode_query, parse_answer_header, set_id, AnswerHeader, DNS_MESSAGE_BYTES_MAX,
};
use crate::engine::{run_workers, Progress, ThreadStats, Window, WorkerEnv};
use crate::httprun::source_for;
use crate::net::{connect_tcp, connect_udp, Target};
use crate::report::RunResult;

/// Receive buffer per UDP socket (EDNS answers up to this size fit).
const UDP_RECEIVE_BYTES: usize = 65_536;
/// Pause after a socket error, so a closed port is not hammered in a tight loop.
const ERROR_BACKOFF: Duration = Duration::from_millis(10);
/// Slots in the open-loop send-time table: one per possible DNS ID.
const ID_SLOTS: usize = 65_536;

struct Shared {
    config: Arc<RunConfig>,
    target: Target,
    query: Vec<u8>,
    window: Window,
    interval: Option<Duration>,
    thread: usize,
    progress: Arc<Progress>,
    stats: RefCell<ThreadStats>,
}

impl Shared {
    /// Records an answer that arrived `latency` after it was (meant to be) sent.
    fn judge(&self, header: AnswerHeader, sent: Instant, done: Instant) {
        if !self.window.counts(sent, done) {
            return;
        }
        let mut stats = self.stats.borrow_mut();
        if done - sent > self.config.timeout {
            stats.errors.timeout += 1;
        } else if header.rcode != 0 {
            stats.errors.protocol += 1;
            *stats.rcodes.entry(header.rcode).or_default() += 1;
            stats.note_error(|| format!("RCODE {}", header.rcode));
        } else if header.answers == 0 && !header.truncated && !self.config.allow_empty {
            stats.errors.protocol += 1;
            stats.note_error(|| "answer with no records".into());
        } else {
            stats.requests_ok += 1;
            stats.ops += 1;
            if header.truncated {
                stats.truncated += 1;
            }
            stats.latency.record(done - sent);
        }
        self.progress
            .publish(self.thread, stats.requests_ok, stats.errors.total());
    }

    fn count_error(&self, at: Instant, kind: fn(&mut ThreadStats), what: impl FnOnce() -> String) {
        if at >= self.window.measure_start && at <= self.window.end {
            let mut stats = self.stats.borrow_mut();
            kind(&mut stats);
            stats.note_error(what);
            self.progress
                .publish(self.thread, stats.requests_ok, stats.errors.total());
        }
    }
}

pub fn run_dns(config: &RunConfig, target: &Target, label: &str) -> Result<RunResult, String> {
    crate::net::check_fd_budget(config.connections)?;
    let qname = config.effective_qname();
    let query = encode_query(&qname, config.qtype, config.edns)?;
    let interval = config
        .rate
        .map(|rate| Duration::from_secs_f64(config.connections as f64 / rate));
    let shared_config = Arc::new(config.clone());
    let per_thread = run_workers(config, label, |env: WorkerEnv| {
        let shared_config = shared_config.clone();
        let query = query.clone();
        async move {
            let config = shared_config.clone();
            let mut setup = ThreadStats::default();
            let mut udp = Vec::new();
            let mut tcp = Vec::new();
            for index in env.my_indices(config.connections) {
                let source = source_for(&config, index);
                if config.tcp {
                    match connect_tcp(target.addr, source, config.connect_timeout)
                        .and_then(TcpStream::from_std)
                    {
                        Ok(s) => tcp.push((index, Some(s))),
                        Err(e) => {
                            setup.errors.connect += 1;
                            setup.note_error(|| format!("connect to {}: {e}", target.addr));
                            tcp.push((index, None));
                        }
                    }
                } else {
                    match connect_udp(target.addr, source).and_then(UdpSocket::from_std) {
                        Ok(s) => udp.push((index, Rc::new(s))),
                        Err(e) => {
                            setup.errors.connect += 1;
                            setup.note_error(|| format!("udp socket for {}: {e}", target.addr));
                        }
                    }
                }
            }
            let start = env.ticket.arrive();
            let window = Window::new(start, config.warmup, config.duration);
            let shared = Rc::new(Shared {
                config: config.clone(),
                target: target.clone(),
                query,
                window,
                interval,
                thread: env.index,
                progress: env.progress,
                stats: RefCell::new(setup),
            });
            let mut tables = Vec::new();
            for (index, socket) in udp {
                match interval {
                    None => {
                        monoio::spawn(udp_closed_loop(shared.clone(), index, socket));
                    }
                    Some(_) => {
                        let table = Rc::new(RefCell::new(vec![0u64; ID_SLOTS]));
                        tables.push(table.clone());
                        monoio::spawn(udp_open_sender(
                            shared.clone(),
                            index,
                            socket.clone(),
                            table.clone(),
                        ));
                        monoio::spawn(udp_open_receiver(shared.clone(), socket, table));
                    }
                }
            }
            for (index, stream) in tcp {
                monoio::spawn(tcp_loop(shared.clone(), index, stream));
            }
            monoio::time::sleep_until(monoio::time::Instant::from_std(window.end)).await;
            // Queries older than the timeout that never got an answer are timeouts.
            let mut stats = shared.stats.take();
            let cutoff = window
                .end
                .checked_sub(config.timeout)
                .unwrap_or(window.start);
            for table in tables {
                for &slot in table.borrow().iter() {
                    if slot != 0 {
                        let sent = window.start + Duration::from_nanos(slot - 1);
                        if sent >= window.measure_start && sent <= cutoff {
                            stats.errors.timeout += 1;
                        }
                    }
                }
            }
            stats
        }
    })?;
    let mut stats = ThreadStats::default();
    for s in &per_thread {
        stats.merge(s);
    }
    let mut extra = Map::new();
    extra.insert("qname".into(), json!(qname));
    extra.insert("qtype".into(), json!(config.qtype.name()));
    extra.insert(
        "transport".into(),
        json!(if config.tcp { "tcp" } else { "udp" }),
    );
    extra.insert("truncated".into(), json!(stats.truncated));
    if !stats.rcodes.is_empty() {
        extra.insert(
            "rcodes".into(),
            json!(stats
                .rcodes
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<Map<_, _>>()),
        );
    }
    Ok(RunResult {
        config: config.clone(),
        stats,
        measured: config.duration,
        extra,
        multi_step: false,
    })
}

/// First ID a socket uses: spread so sockets do not share ID sequences.
fn first_id(index: usize) -> u16 {
    (index.wrapping_mul(7919) & 0xffff) as u16
}

async fn udp_closed_loop(shared: Rc<Shared>, index: usize, socket: Rc<UdpSocket>) {
    let window = shared.window;
    let timeout = shared.config.timeout;
    let mut query = shared.query.clone();
    let mut rbuf = Some(Vec::with_capacity(UDP_RECEIVE_BYTES));
    let mut id = first_id(index);
    loop {
        let sent = Instant::now();
        if sent >= window.end {
            break;
        }
        id = id.wrapping_add(1);
        set_id(&mut query, id);
        let (result, q) = socket.send(query).await;
        query = q;
        if let Err(e) = result {
            shared.count_error(sent, |s| s.errors.io += 1, || format!("send: {e}"));
            monoio::time::sleep(ERROR_BACKOFF).await;
            continue;
        }
        if window.counts(sent, sent) {
            shared.stats.borrow_mut().sent += 1;
        }
        let deadline = monoio::time::Instant::from_std(sent + timeout);
        loop {
            let buf = rbuf
                .take()
                .unwrap_or_else(|| Vec::with_capacity(UDP_RECEIVE_BYTES));
            match monoio::time::timeout_at(deadline, socket.recv(buf)).await {
                Err(_) => {
                    // The buffer went with the cancelled receive; a fresh one is made above.
                    shared.count_error(
                        sent,
                        |s| s.errors.timeout += 1,
                        || format!("no answer within {timeout:?}"),
                    );
                    break;
                }
                Ok((Err(e), buf)) => {
                    rbuf = Some(buf);
                    shared.count_error(sent, |s| s.errors.io += 1, || format!("receive: {e}"));
                    monoio::time::sleep(ERROR_BACKOFF).await;
                    break;
                }
                Ok((Ok(_), buf)) => {
                    let done = Instant::now();
                    let header = parse_answer_header(&buf);
                    rbuf = Some(buf);
                    match header {
                        Ok(h) if h.id == id => {
                            shared.judge(h, sent, done);
                            break;
                        }
                        // A late answer to an earlier query: keep waiting for ours.
                        Ok(_) => continue,
                        Err(e) => {
                            shared.count_error(sent, |s| s.errors.parse += 1, || e.to_string());
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// Nanoseconds since the window start, plus one so that zero marks an empty slot.
fn slot_value(window: &Window, sent: Instant) -> u64 {
    u64::try_from(sent.saturating_duration_since(window.start).as_nanos()).unwrap_or(u64::MAX - 1)
        + 1
}

async fn udp_open_sender(
    shared: Rc<Shared>,
    index: usize,
    socket: Rc<UdpSocket>,
    table: Rc<RefCell<Vec<u64>>>,
) {
    let window = shared.window;
    let interval = shared.interval.expect("open loop has an interval");
    let connections = shared.config.connections;
    let mut intended = window.start + interval.mul_f64(index as f64 / connections as f64);
    let mut query = shared.query.clone();
    let mut id = first_id(index);
    while intended < window.end {
        let now = Instant::now();
        if intended > now {
            monoio::time::sleep_until(monoio::time::Instant::from_std(intended)).await;
        }
        id = id.wrapping_add(1);
        {
            let mut slots = table.borrow_mut();
            let previous = slots[id as usize];
            if previous != 0 {
                // Never answered during a whole ID cycle: lost.
                let old = window.start + Duration::from_nanos(previous - 1);
                shared.count_error(
                    old,
                    |s| s.errors.timeout += 1,
                    || "query lost (ID reused unanswered)".into(),
                );
            }
            slots[id as usize] = slot_value(&window, intended);
        }
        set_id(&mut query, id);
        let (result, q) = socket.send(query).await;
        query = q;
        match result {
            Ok(_) => {
                if window.counts(intended, intended) {
                    shared.stats.borrow_mut().sent += 1;
                }
            }
            Err(e) => {
                table.borrow_mut()[id as usize] = 0;
                shared.count_error(intended, |s| s.errors.io += 1, || format!("send: {e}"));
            }
        }
        intended += interval;
    }
}

async fn udp_open_receiver(
    shared: Rc<Shared>,
    socket: Rc<UdpSocket>,
    table: Rc<RefCell<Vec<u64>>>,
) {
    let window = shared.window;
    let mut buf = Vec::with_capacity(UDP_RECEIVE_BYTES);
    loop {
        let (result, b) = socket.recv(buf).await;
        buf = b;
        let done = Instant::now();
        match result {
            Ok(_) => match parse_answer_header(&buf) {
                Ok(h) => {
                    let slot = std::mem::take(&mut table.borrow_mut()[h.id as usize]);
                    if slot != 0 {
                        let sent = window.start + Duration::from_nanos(slot - 1);
                        shared.judge(h, sent, done);
                    }
                }
                Err(e) => shared.count_error(done, |s| s.errors.parse += 1, || e.to_string()),
            },
            Err(e) => {
                shared.count_error(done, |s| s.errors.io += 1, || format!("receive: {e}"));
                monoio::time::sleep(ERROR_BACKOFF).await;
            }
        }
        if done >= window.end {
            break;
        }
    }
}

/// Reads one length-prefixed DNS message into `rbuf` (from index 0); returns its length.
async fn read_framed(stream: &mut TcpStream, rbuf: &mut Vec<u8>) -> Result<usize, String> {
    loop {
        if rbuf.len() >= 2 {
            let len = u16::from_be_bytes([rbuf[0], rbuf[1]]) as usize;
            if rbuf.len() >= 2 + len {
                return Ok(len);
            }
        }
        let have = rbuf.len();
        if rbuf.capacity() - have < 4096 {
            rbuf.reserve(4096.max(have));
        }
        if have > 2 + DNS_MESSAGE_BYTES_MAX {
            return Err("DNS message over TCP exceeds 65,535 bytes".into());
        }
        let cap = rbuf.capacity();
        let (result, buf) = stream.read(std::mem::take(rbuf).slice_mut(have..cap)).await;
        *rbuf = buf.into_inner();
        match result {
            Ok(0) => return Err("connection closed before a complete answer".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

async fn tcp_round_trip(
    stream: &mut TcpStream,
    framed: Vec<u8>,
    rbuf: &mut Vec<u8>,
) -> (Result<AnswerHeader, String>, Vec<u8>) {
    let (written, framed) = stream.write_all(framed).await;
    if let Err(e) = written {
        return (Err(format!("write: {e}")), framed);
    }
    let result = match read_framed(stream, rbuf).await {
        Ok(len) => {
            let header = parse_answer_header(&rbuf[2..2 + len]).map_err(String::from);
            rbuf.drain(..2 + len);
            header
        }
        Err(e) => Err(e),
    };
    (result, framed)
}

async fn tcp_loop(shared: Rc<Shared>, index: usize, mut stream: Option<TcpStream>) {
    let config = shared.config.clone();
    let window = shared.window;
    let source = source_for(&config, index);
    let query_len = u16::try_from(shared.query.len()).expect("queries are small");
    let mut framed = Vec::with_capacity(shared.query.len() + 2);
    let build = |framed: &mut Vec<u8>| {
        framed.clear();
        framed.extend_from_slice(&query_len.to_be_bytes());
        framed.extend_from_slice(&shared.query);
    };
    build(&mut framed);
    let mut rbuf = Vec::with_capacity(4096);
    let mut id = first_id(index);
    let mut intended = match shared.interval {
        Some(interval) => window.start + interval.mul_f64(index as f64 / config.connections as f64),
        None => window.start,
    };
    let mut now = Instant::now();
    loop {
        let sent = match shared.interval {
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
        let s = match stream.as_mut() {
            Some(s) => s,
            None => match connect_tcp(shared.target.addr, source, config.connect_timeout)
                .and_then(TcpStream::from_std)
            {
                Ok(s) => stream.insert(s),
                Err(e) => {
                    shared.count_error(
                        Instant::now(),
                        |s| s.errors.connect += 1,
                        || format!("connect: {e}"),
                    );
                    monoio::time::sleep(ERROR_BACKOFF).await;
                    now = Instant::now();
                    continue;
                }
            },
        };
        id = id.wrapping_add(1);
        if framed.len() != shared.query.len() + 2 {
            build(&mut framed);
        }
        set_id(&mut framed[2..], id);
        rbuf.clear();
        let deadline = monoio::time::Instant::from_std(sent + config.timeout);
        let outcome = monoio::time::timeout_at(
            deadline,
            tcp_round_trip(s, std::mem::take(&mut framed), &mut rbuf),
        )
        .await;
        let done = Instant::now();
        now = done;
        if window.counts(sent, done) {
            shared.stats.borrow_mut().sent += 1;
        }
        match outcome {
            Ok((Ok(header), returned)) => {
                framed = returned;
                if header.id == id {
                    shared.judge(header, sent, done);
                } else {
                    shared.count_error(
                        sent,
                        |s| s.errors.parse += 1,
                        || "answer with a different ID".into(),
                    );
                    stream = None;
                }
            }
            Ok((Err(e), returned)) => {
                framed = returned;
                shared.count_error(sent, |s| s.errors.io += 1, || e);
                stream = None;
            }
            Err(_) => {
                shared.count_error(
                    sent,
                    |s| s.errors.timeout += 1,
                    || format!("no answer within {:?}", config.timeout),
                );
                stream = None;
            }
        }
    }
}
