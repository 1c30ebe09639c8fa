//! `loadgen floor http|dns --listen IP:PORT [--threads N] [--duration D]`: the physical
//! floors of this machine — the least work an HTTP or a DNS server can do per request on the
//! same runtime praetor uses (monoio, one pinned thread per core, one `SO_REUSEPORT` socket
//! per thread). Every "vs floor" row of `bench/compare.py` is a ratio against one of these,
//! measured in the same run, so the project carries its own yardstick.
//!
//! - `http`: for every complete request head (`\r\n\r\n`) on a keep-alive connection, one
//!   fixed `200` answer; pipelined heads get their answers in one write. It reads no body
//!   (the floor rows send GETs), parses nothing, and allocates nothing per request.
//! - `dns`: every UDP query gets its header and first question back with QR/AA/RA set and
//!   one fixed A record pointing at the question's name.
//!
//! Bounds: an HTTP connection whose unanswered bytes exceed `HEAD_BYTES_MAX` is closed; a DNS
//! datagram is read into `DATAGRAM_BYTES_MAX`; the server stops by itself after `--duration`.

use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The one answer of the HTTP floor: a small JSON list with the index header a Consul
/// client reads, as the floor rows have always measured it.
const HTTP_ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Consul-Index: 7\r\nContent-Length: 2\r\n\r\n[]";
/// Unanswered request bytes a connection may hold before the floor gives up on it.
const HEAD_BYTES_MAX: usize = 16 * 1024;
/// Bytes asked of one read.
const READ_BYTES: usize = 16 * 1024;
/// The largest DNS datagram read; queries are far smaller.
const DATAGRAM_BYTES_MAX: usize = 1500;
/// The DNS header's length.
const DNS_HEADER_BYTES: usize = 12;
/// The answer record appended to every DNS query: a pointer to the question's name, type A,
/// class IN, TTL 0, 4 bytes of data, 10.0.0.1.
const DNS_ANSWER_RECORD: &[u8] = &[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 10, 0, 0, 1];

/// Which floor to serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloorKind {
    Http,
    Dns,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServeFloorConfig {
    pub kind: FloorKind,
    pub listen: SocketAddr,
    pub threads: usize,
    pub duration: Duration,
}

/// Serves the floor on `threads` pinned threads until `duration` has passed.
pub fn serve(config: &ServeFloorConfig) -> Result<(), String> {
    assert!(config.threads > 0, "the parser admits at least one thread");
    let deadline = Instant::now() + config.duration;
    // Bind every socket before any thread starts, so a taken port is one error here rather
    // than a panic on a worker.
    let mut sockets = Vec::with_capacity(config.threads);
    for _ in 0..config.threads {
        sockets.push(match config.kind {
            FloorKind::Http => Socket::Tcp(crate::net::reuseport_listener(config.listen)?),
            FloorKind::Dns => Socket::Udp(reuseport_udp(config.listen)?),
        });
    }
    eprintln!(
        "[floor] {:?} on {} with {} threads for {:?}",
        config.kind, config.listen, config.threads, config.duration
    );
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let threads: Vec<_> = sockets
        .into_iter()
        .enumerate()
        .map(|(i, socket)| {
            let core = (!cores.is_empty()).then(|| cores[i % cores.len()]);
            std::thread::spawn(move || {
                if let Some(core) = core {
                    core_affinity::set_for_current(core);
                }
                let mut runtime = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
                    .enable_timer()
                    .build()
                    .expect("building the runtime");
                runtime.block_on(async move {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let serving = async move {
                        match socket {
                            Socket::Tcp(listener) => serve_http(listener).await,
                            Socket::Udp(socket) => serve_dns(socket).await,
                        }
                    };
                    let _ = monoio::time::timeout(left, serving).await;
                });
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
    Ok(())
}

enum Socket {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

fn reuseport_udp(addr: SocketAddr) -> Result<std::net::UdpSocket, String> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        None,
    )
    .map_err(|e| format!("socket: {e}"))?;
    socket
        .set_reuse_address(true)
        .and_then(|_| socket.set_reuse_port(true))
        .and_then(|_| socket.bind(&addr.into()))
        .map_err(|e| format!("cannot bind {addr}/udp: {e}"))?;
    Ok(socket.into())
}

async fn serve_http(listener: std::net::TcpListener) {
    let listener = monoio::net::TcpListener::from_std(listener).expect("a bound listener");
    loop {
        if let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            monoio::spawn(http_connection(stream));
        }
    }
}

/// Answers every complete request head on the connection with [`HTTP_ANSWER`].
async fn http_connection(mut stream: monoio::net::TcpStream) {
    let mut pending: Vec<u8> = Vec::with_capacity(READ_BYTES);
    let mut read_buffer: Vec<u8> = Vec::with_capacity(READ_BYTES);
    let mut answers: Vec<u8> = Vec::with_capacity(HTTP_ANSWER.len() * 4);
    loop {
        let (result, buffer) = stream.read(read_buffer).await;
        read_buffer = buffer;
        match result {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        pending.extend_from_slice(&read_buffer);
        read_buffer.clear();
        let mut consumed = 0;
        while let Some(end) = memchr::memmem::find(&pending[consumed..], b"\r\n\r\n") {
            answers.extend_from_slice(HTTP_ANSWER);
            consumed += end + 4;
        }
        pending.drain(..consumed);
        if pending.len() > HEAD_BYTES_MAX {
            return;
        }
        if !answers.is_empty() {
            let (result, buffer) = stream.write_all(answers).await;
            answers = buffer;
            answers.clear();
            if result.is_err() {
                return;
            }
        }
    }
}

async fn serve_dns(socket: std::net::UdpSocket) {
    let socket = monoio::net::udp::UdpSocket::from_std(socket).expect("a bound socket");
    let mut buffer = vec![0u8; DATAGRAM_BYTES_MAX];
    loop {
        let (result, returned) = socket.recv_from(buffer).await;
        buffer = returned;
        let Ok((length, peer)) = result else { continue };
        let Some(answer) = dns_answer(&buffer[..length]) else {
            continue;
        };
        let _ = socket.send_to(answer, peer).await;
    }
}

/// The floor's answer to one DNS query: its header and first question with the response
/// bits set, then [`DNS_ANSWER_RECORD`]. `None` for a datagram too short to be a query.
fn dns_answer(query: &[u8]) -> Option<Vec<u8>> {
    if query.len() < DNS_HEADER_BYTES {
        return None;
    }
    // Walk the question's labels to its end: the zero label, then type and class.
    let mut at = DNS_HEADER_BYTES;
    while at < query.len() && query[at] != 0 {
        at += 1 + usize::from(query[at]);
    }
    let question_end = (at + 5).min(query.len());
    let mut answer = Vec::with_capacity(question_end + DNS_ANSWER_RECORD.len());
    answer.extend_from_slice(&query[..question_end]);
    answer[2] |= 0x84; // QR and AA
    answer[3] = 0x80; // RA, RCODE 0
    answer[4..12].copy_from_slice(&[0, 1, 0, 1, 0, 0, 0, 0]); // one question, one answer
    answer.extend_from_slice(DNS_ANSWER_RECORD);
    Some(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dns_answer_echoes_the_question_and_adds_one_a_record() {
        // ID 0x1234, RD, one question: "web.service.consul" A IN.
        let mut query = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in ["web", "service", "consul"] {
            query.push(label.len() as u8);
            query.extend_from_slice(label.as_bytes());
        }
        query.extend_from_slice(&[0, 0, 1, 0, 1]);
        let answer = dns_answer(&query).unwrap();
        assert_eq!(&answer[..2], &[0x12, 0x34], "the ID is kept");
        assert_eq!(answer[2] & 0x80, 0x80, "QR set");
        assert_eq!(&answer[4..8], &[0, 1, 0, 1], "one question, one answer");
        assert_eq!(
            &answer[12..query.len()],
            &query[12..],
            "the question is echoed"
        );
        assert_eq!(&answer[query.len()..], DNS_ANSWER_RECORD);
    }

    #[test]
    fn a_datagram_shorter_than_a_header_gets_no_answer() {
        assert!(dns_answer(&[0; 11]).is_none());
    }
}
