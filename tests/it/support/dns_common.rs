//! Helpers for the DNS tests: real clients (`dig`, `kdig`), raw queries parsed with
//! hickory-proto as the oracle, and a small upstream DNS server for recursor tests.

#![allow(dead_code)]

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs `dig` against `server` with extra arguments; returns its stdout.
pub fn dig(server: SocketAddr, args: &[&str]) -> String {
    run_tool("dig", server, args)
}

/// Runs `kdig` (Knot) against `server`.
pub fn kdig(server: SocketAddr, args: &[&str]) -> String {
    run_tool("kdig", server, args)
}

fn run_tool(tool: &str, server: SocketAddr, args: &[&str]) -> String {
    let output = Command::new(tool)
        .arg(format!("@{}", server.ip()))
        .arg("-p")
        .arg(server.port().to_string())
        .args(if tool == "kdig" {
            ["+timeout=3", "+retry=0"]
        } else {
            ["+time=3", "+tries=1"]
        })
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {tool} (install dnsutils / knot-dnsutils): {e}"));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Builds a query message with hickory.
pub fn query(name: &str, qtype: RecordType, edns_size: Option<u16>) -> Message {
    let mut message = Message::query();
    message.metadata.recursion_desired = true;
    message
        .queries
        .push(Query::query(Name::from_str(name).unwrap(), qtype));
    if let Some(size) = edns_size {
        let mut edns = Edns::new();
        edns.set_max_payload(size);
        message.edns = Some(edns);
    }
    message
}

/// Sends raw bytes over UDP and parses the reply (bounded: 5 s).
pub fn udp_exchange_raw(server: SocketAddr, bytes: &[u8]) -> Option<Vec<u8>> {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    socket.send_to(bytes, server).unwrap();
    let mut buffer = vec![0u8; 65_535];
    let (n, _) = socket.recv_from(&mut buffer).ok()?;
    buffer.truncate(n);
    Some(buffer)
}

pub fn udp_exchange(server: SocketAddr, message: &Message) -> (Message, usize) {
    let bytes = udp_exchange_raw(server, &message.to_vec().unwrap()).expect("a UDP reply");
    let parsed = Message::from_vec(&bytes).expect("hickory parses the reply");
    assert_eq!(parsed.metadata.id, message.metadata.id);
    (parsed, bytes.len())
}

/// One query over TCP with RFC 1035 framing.
pub fn tcp_exchange(server: SocketAddr, message: &Message) -> Message {
    let mut stream = TcpStream::connect_timeout(&server, Duration::from_secs(5)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let bytes = message.to_vec().unwrap();
    let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&bytes);
    stream.write_all(&framed).unwrap();
    read_tcp_message(&mut stream).expect("a TCP reply")
}

pub fn read_tcp_message(stream: &mut TcpStream) -> Option<Message> {
    let mut length = [0u8; 2];
    stream.read_exact(&mut length).ok()?;
    let mut reply = vec![0u8; u16::from_be_bytes(length) as usize];
    stream.read_exact(&mut reply).ok()?;
    Some(Message::from_vec(&reply).expect("hickory parses the TCP reply"))
}

pub fn a_records(message: &Message) -> Vec<Ipv4Addr> {
    let mut ips: Vec<Ipv4Addr> = message
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect();
    ips.sort();
    ips
}

/// A small authoritative upstream for recursor tests, on 127.0.0.1 (UDP and TCP, same port).
/// It answers:
/// - `example.org. A` → 192.0.2.10 (UDP and TCP);
/// - `big.example.org. A` → over UDP an empty reply with TC set, over TCP 40 A records;
/// - `fail.example.org.` → SERVFAIL; anything else → NXDOMAIN.
pub struct Upstream {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Upstream {
    pub fn start() -> Upstream {
        let deadline = Instant::now() + Duration::from_secs(5);
        let (udp, tcp) = loop {
            let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
            let port = udp.local_addr().unwrap().port();
            if let Ok(tcp) = TcpListener::bind(("127.0.0.1", port)) {
                break (udp, tcp);
            }
            assert!(
                Instant::now() < deadline,
                "no free port pair for the upstream"
            );
        };
        let addr = udp.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        udp.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp_stop = stop.clone();
        let udp_thread = std::thread::spawn(move || {
            let mut buffer = vec![0u8; 4096];
            while !udp_stop.load(Ordering::Relaxed) {
                let Ok((n, peer)) = udp.recv_from(&mut buffer) else {
                    continue;
                };
                if let Some(reply) = upstream_reply(&buffer[..n], false) {
                    let _ = udp.send_to(&reply, peer);
                }
            }
        });
        let tcp_stop = stop.clone();
        let tcp_thread = std::thread::spawn(move || {
            while !tcp_stop.load(Ordering::Relaxed) {
                match tcp.accept() {
                    Ok((mut stream, _)) => {
                        stream.set_nonblocking(false).unwrap();
                        stream
                            .set_read_timeout(Some(Duration::from_secs(2)))
                            .unwrap();
                        let mut length = [0u8; 2];
                        if stream.read_exact(&mut length).is_err() {
                            continue;
                        }
                        let mut request = vec![0u8; u16::from_be_bytes(length) as usize];
                        if stream.read_exact(&mut request).is_err() {
                            continue;
                        }
                        if let Some(reply) = upstream_reply(&request, true) {
                            let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
                            framed.extend_from_slice(&reply);
                            let _ = stream.write_all(&framed);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Upstream {
            addr,
            stop,
            threads: vec![udp_thread, tcp_thread],
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn upstream_reply(request: &[u8], over_tcp: bool) -> Option<Vec<u8>> {
    let request = Message::from_vec(request).ok()?;
    let question = request.queries.first()?.clone();
    let mut reply = Message::response(request.metadata.id, OpCode::Query);
    reply.metadata.message_type = MessageType::Response;
    reply.metadata.recursion_desired = request.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    reply.queries.push(question.clone());
    let name = question.name.to_ascii().to_ascii_lowercase();
    match name.as_str() {
        "example.org." => reply.answers.push(Record::from_rdata(
            question.name.clone(),
            60,
            RData::A(A::new(192, 0, 2, 10)),
        )),
        "big.example.org." if !over_tcp => reply.metadata.truncation = true,
        "big.example.org." => {
            for i in 0..40 {
                reply.answers.push(Record::from_rdata(
                    question.name.clone(),
                    60,
                    RData::A(A::new(198, 51, 100, i + 1)),
                ));
            }
        }
        "fail.example.org." => reply.metadata.response_code = ResponseCode::ServFail,
        _ => reply.metadata.response_code = ResponseCode::NXDomain,
    }
    reply.to_vec().ok()
}

/// `dig` output with every run of whitespace turned into one space, line by line, so that
/// assertions do not depend on its column padding.
pub fn squash(text: &str) -> String {
    text.lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}
