//! Helpers for agent and health-check tests: small real servers (HTTP, gRPC health over
//! h2c, UDP echo) that checks probe, and polling with explicit deadlines.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Polls `probe` every 50 ms until it returns `Some`, or panics with `what` after `limit`.
pub fn wait_for<T>(limit: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        if Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A request the test HTTP server received.
#[derive(Clone, Debug, Default)]
pub struct SeenRequest {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A tiny HTTP/1.1 server on 127.0.0.1 answering every request with the configured status.
/// `stop` closes the listener, so later connections are refused.
pub struct TestHttpServer {
    pub addr: SocketAddr,
    pub status: Arc<AtomicU16>,
    pub seen: Arc<Mutex<Vec<SeenRequest>>>,
    running: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TestHttpServer {
    pub fn start(status: u16) -> TestHttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let status = Arc::new(AtomicU16::new(status));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let running = Arc::new(AtomicBool::new(true));
        let thread = {
            let (status, seen, running) = (status.clone(), seen.clone(), running.clone());
            std::thread::spawn(move || {
                while running.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => serve_one(stream, &status, &seen),
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
                // The listener drops here: new connections are refused.
            })
        };
        TestHttpServer {
            addr,
            status,
            seen,
            running,
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn stop(&mut self) {
        self.running.store(false, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for TestHttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve_one(mut stream: TcpStream, status: &AtomicU16, seen: &Mutex<Vec<SeenRequest>>) {
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let request = loop {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(head_len)) = req.parse(&buf) {
            let headers: Vec<(String, String)> = req
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_string(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            let method = req.method.unwrap_or("").to_string();
            let target = req.path.unwrap_or("").to_string();
            let length: usize = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            while buf.len() < head_len + length {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            break SeenRequest {
                method,
                target,
                headers,
                body: buf[head_len..head_len + length].to_vec(),
            };
        }
    };
    seen.lock().unwrap().push(request);
    let code = status.load(Ordering::SeqCst);
    let body = format!("status {code}");
    let response = format!(
        "HTTP/1.1 {code} Test\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes());
}

/// A minimal gRPC health server over h2c: answers every `Check` with the configured status
/// (1 = SERVING, 2 = NOT_SERVING).
pub struct TestGrpcServer {
    pub addr: SocketAddr,
    pub status: Arc<AtomicU8>,
    running: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TestGrpcServer {
    pub fn start(status: u8) -> TestGrpcServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let status = Arc::new(AtomicU8::new(status));
        let running = Arc::new(AtomicBool::new(true));
        let thread = {
            let (status, running) = (status.clone(), running.clone());
            std::thread::spawn(move || {
                while running.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => grpc_one(stream, status.load(Ordering::SeqCst)),
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        TestGrpcServer {
            addr,
            status,
            running,
            thread: Some(thread),
        }
    }
}

impl Drop for TestGrpcServer {
    fn drop(&mut self) {
        self.running.store(false, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn grpc_one(mut stream: TcpStream, status: u8) {
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // Read until the client's request DATA frame (END_STREAM on stream 1) arrives.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let preface = 24;
    loop {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if buf.len() < preface {
            continue;
        }
        let mut at = preface;
        let mut done = false;
        while buf.len() >= at + 9 {
            let len = u32::from_be_bytes([0, buf[at], buf[at + 1], buf[at + 2]]) as usize;
            if buf.len() < at + 9 + len {
                break;
            }
            if buf[at + 3] == 0 && buf[at + 4] & 1 == 1 {
                done = true;
            }
            at += 9 + len;
        }
        if done {
            break;
        }
    }
    let mut out = h2_frame(4, 0, 0, &[]);
    out.extend(h2_frame(4, 1, 0, &[]));
    // :status 200 (static index 8), content-type application/grpc.
    let mut headers = vec![0x88, 0x00, 12];
    headers.extend_from_slice(b"content-type");
    headers.push(16);
    headers.extend_from_slice(b"application/grpc");
    out.extend(h2_frame(1, 4, 1, &headers));
    let message = [0u8, 0, 0, 0, 2, 0x08, status];
    out.extend(h2_frame(0, 0, 1, &message));
    let mut trailers = vec![0x00, 11];
    trailers.extend_from_slice(b"grpc-status");
    trailers.push(1);
    trailers.push(b'0');
    out.extend(h2_frame(1, 5, 1, &trailers));
    let _ = stream.write_all(&out);
    std::thread::sleep(Duration::from_millis(50));
}

/// A UDP socket that answers every datagram.
pub struct UdpEcho {
    pub addr: SocketAddr,
    running: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl UdpEcho {
    pub fn start() -> UdpEcho {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let running = Arc::new(AtomicBool::new(true));
        let thread = {
            let running = running.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 512];
                while running.load(Ordering::SeqCst) {
                    if let Ok((n, from)) = socket.recv_from(&mut buf) {
                        let _ = socket.send_to(&buf[..n], from);
                    }
                }
            })
        };
        UdpEcho {
            addr,
            running,
            thread: Some(thread),
        }
    }
}

impl Drop for UdpEcho {
    fn drop(&mut self) {
        self.running.store(false, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A port on 127.0.0.1 where nothing listens (bound, then released).
pub fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
