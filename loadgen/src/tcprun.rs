//! Raw TCP scenarios, for the service-mesh proxy benchmarks, and the echo server they run
//! against (`loadgen tcp-echo`).
//!
//! - `tcp-stream`: every connection writes `--value-bytes` messages back to back and reads
//!   their echo on a reader thread of its own (so neither direction waits on the other); at
//!   most [`STREAM_MESSAGES_IN_FLIGHT`] messages are unanswered per connection. The figure
//!   is `bytes_per_s`: echoed bytes received in the measured window, per second.
//! - `tcp-connect`: every operation is a new connection: connect, write a 64-byte message,
//!   read its echo, close. The figure is `ops_per_s` (connections per second), with the
//!   latency of each whole operation.
//!
//! Blocking sockets and one thread per connection: these scenarios move few, large
//! messages or open few connections at a time, where threads cost nothing measurable.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map};

use crate::config::{RunConfig, Scenario};
use crate::engine::ThreadStats;
use crate::net::Target;
use crate::report::RunResult;

/// Most unanswered messages per `tcp-stream` connection.
pub const STREAM_MESSAGES_IN_FLIGHT: u64 = 4;
/// The message `tcp-connect` sends.
const CONNECT_MESSAGE: &[u8; 64] =
    b"mesh-connect-benchmark-0123456789abcdefghijklmnopqrstuvwxyzABCD\n";
/// Bytes read or written per system call by the echo server and the stream reader.
const IO_CHUNK_BYTES: usize = 256 * 1024;

/// Runs `tcp-stream` or `tcp-connect`.
pub fn run_tcp(config: &RunConfig, target: &Target, label: &str) -> Result<RunResult, String> {
    let _ = label;
    match config.scenario {
        Scenario::TcpStream => run_stream(config, target.addr),
        Scenario::TcpConnect => run_connect(config, target.addr),
        other => unreachable!("{} is not a TCP scenario", other.name()),
    }
}

fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

fn run_stream(config: &RunConfig, addr: SocketAddr) -> Result<RunResult, String> {
    let message: Arc<Vec<u8>> =
        Arc::new((0..config.value_bytes).map(|i| (i % 251) as u8).collect());
    let message_bytes = message.len().max(1) as u64;
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let measured_bytes = Arc::new(AtomicU64::new(0));
    let first_error: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let mut threads = Vec::new();
    for _ in 0..config.connections {
        let stream =
            connect(addr, config.connect_timeout).map_err(|e| format!("connect to {addr}: {e}"))?;
        stream
            .set_read_timeout(Some(config.timeout))
            .map_err(|e| e.to_string())?;
        let reader_stream = stream.try_clone().map_err(|e| e.to_string())?;
        let received = Arc::new(AtomicU64::new(0));
        let sent_messages = Arc::new(AtomicU64::new(0));
        {
            let (received, measuring, stop, measured_bytes, first_error) = (
                received.clone(),
                measuring.clone(),
                stop.clone(),
                measured_bytes.clone(),
                first_error.clone(),
            );
            threads.push(std::thread::spawn(move || {
                let mut stream = reader_stream;
                let mut buffer = vec![0u8; IO_CHUNK_BYTES];
                while !stop.load(Ordering::Relaxed) {
                    match stream.read(&mut buffer) {
                        Ok(0) => break,
                        Ok(n) => {
                            received.fetch_add(n as u64, Ordering::Release);
                            if measuring.load(Ordering::Relaxed) {
                                measured_bytes.fetch_add(n as u64, Ordering::Relaxed);
                            }
                        }
                        Err(e) => {
                            if !stop.load(Ordering::Relaxed) {
                                first_error
                                    .lock()
                                    .unwrap()
                                    .get_or_insert(format!("read: {e}"));
                            }
                            break;
                        }
                    }
                }
            }));
        }
        {
            let (message, stop, first_error) = (message.clone(), stop.clone(), first_error.clone());
            threads.push(std::thread::spawn(move || {
                let mut stream = stream;
                while !stop.load(Ordering::Relaxed) {
                    // Keep at most a few messages unanswered.
                    let echoed = received.load(Ordering::Acquire) / message_bytes;
                    if sent_messages.load(Ordering::Relaxed) >= echoed + STREAM_MESSAGES_IN_FLIGHT {
                        std::thread::sleep(Duration::from_micros(50));
                        continue;
                    }
                    if let Err(e) = stream.write_all(&message) {
                        if !stop.load(Ordering::Relaxed) {
                            first_error
                                .lock()
                                .unwrap()
                                .get_or_insert(format!("write: {e}"));
                        }
                        break;
                    }
                    sent_messages.fetch_add(1, Ordering::Relaxed);
                }
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }));
        }
    }
    std::thread::sleep(config.warmup);
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    std::thread::sleep(config.duration);
    measuring.store(false, Ordering::Relaxed);
    let measured = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    let bytes = measured_bytes.load(Ordering::Relaxed);
    let mut stats = ThreadStats {
        ops: bytes / message_bytes,
        requests_ok: bytes / message_bytes,
        ..Default::default()
    };
    stats.sent = stats.ops;
    if let Some(error) = first_error.lock().unwrap().take() {
        stats.first_error = Some(error);
        stats.errors.io += 1;
    }
    let mut extra = Map::new();
    extra.insert(
        "bytes_per_s".into(),
        json!((bytes as f64 / measured.as_secs_f64()).round()),
    );
    extra.insert("message_bytes".into(), json!(message_bytes));
    Ok(RunResult {
        config: config.clone(),
        stats,
        measured,
        extra,
        multi_step: false,
    })
}

fn one_connection(addr: SocketAddr, timeout: Duration) -> Result<(), String> {
    let mut stream = connect(addr, timeout).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(CONNECT_MESSAGE)
        .map_err(|e| format!("write: {e}"))?;
    let mut echo = [0u8; 64];
    stream
        .read_exact(&mut echo)
        .map_err(|e| format!("read: {e}"))?;
    if &echo != CONNECT_MESSAGE {
        return Err("the echo differs from the message".to_string());
    }
    Ok(())
}

fn run_connect(config: &RunConfig, addr: SocketAddr) -> Result<RunResult, String> {
    // One probe before the run: a target that cannot echo fails loudly, not as errors.
    one_connection(addr, config.connect_timeout).map_err(|e| format!("{addr}: {e}"))?;
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for _ in 0..config.connections {
        let (measuring, stop) = (measuring.clone(), stop.clone());
        let timeout = config.timeout;
        threads.push(std::thread::spawn(move || {
            let mut stats = ThreadStats::default();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let result = one_connection(addr, timeout);
                if !measuring.load(Ordering::Relaxed) {
                    continue;
                }
                stats.sent += 1;
                match result {
                    Ok(()) => {
                        stats.latency.record(started.elapsed());
                        stats.requests_ok += 1;
                        stats.ops += 1;
                    }
                    Err(e) => {
                        stats.errors.io += 1;
                        stats.first_error.get_or_insert(e);
                    }
                }
            }
            stats
        }));
    }
    std::thread::sleep(config.warmup);
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    std::thread::sleep(config.duration);
    measuring.store(false, Ordering::Relaxed);
    let measured = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut stats = ThreadStats::default();
    for thread in threads {
        if let Ok(s) = thread.join() {
            stats.merge(&s);
        }
    }
    Ok(RunResult {
        config: config.clone(),
        stats,
        measured,
        extra: Map::new(),
        multi_step: false,
    })
}

/// `loadgen tcp-echo --listen IP:PORT`: echoes every connection's bytes back until it
/// closes, one thread per connection. Runs until killed.
pub fn serve_echo(listen: SocketAddr) -> Result<(), String> {
    let listener =
        TcpListener::bind(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    eprintln!("tcp-echo: listening on {listen}");
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        std::thread::spawn(move || {
            let mut buffer = vec![0u8; IO_CHUNK_BYTES];
            loop {
                match stream.read(&mut buffer) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if stream.write_all(&buffer[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
    Ok(())
}
