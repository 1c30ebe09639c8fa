//! Parked blocking queries on keep-alive connections, over real sockets: identical queries
//! woken by one write share one rendered answer; a woken connection goes on to serve its
//! next request; a request pipelined behind a parked query is answered after it; a client
//! that hangs up while parked frees its slot.

use crate::common;

use common::{parse_one_response, Agent, HttpResponse};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const READ_TIMEOUT: Duration = Duration::from_secs(20);

fn connect(agent: &Agent) -> TcpStream {
    let stream = TcpStream::connect(agent.addr()).unwrap();
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    stream
}

/// Reads exactly one response from a keep-alive connection; `pending` keeps bytes read past
/// it (a pipelined answer that arrived in the same read).
fn read_response(stream: &mut TcpStream, pending: &mut Vec<u8>) -> (HttpResponse, Vec<u8>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        if let Some((response, len)) = parse_one_response(pending) {
            let raw = pending[..len].to_vec();
            pending.drain(..len);
            return (response, raw);
        }
        let n = stream.read(&mut buf).expect("reading a response");
        assert!(n > 0, "the server closed the connection mid-response");
        pending.extend_from_slice(&buf[..n]);
    }
}

/// The parked-query gauge of the agent's shard (`-shards 1` makes it the only one).
fn parked_queries(agent: &Agent) -> u64 {
    let metrics = agent.get("/v1/agent/metrics").json();
    metrics["Gauges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["Name"] == "consul.http.parked_queries")
        .expect("parked-queries gauge")["Value"]
        .as_f64()
        .unwrap() as u64
}

fn wait_for_parked(agent: &Agent, expected: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let parked = parked_queries(agent);
        if parked == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{parked} queries parked, expected {expected}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn blocking_get(key: &str, index: u64, extra_header: &str) -> Vec<u8> {
    format!("GET /v1/kv/{key}?index={index}&wait=30s HTTP/1.1\r\nHost: t\r\n{extra_header}\r\n")
        .into_bytes()
}

/// Opens `count` connections and sends the same blocking GET of `key` on each.
fn park_identical(agent: &Agent, key: &str, index: u64, count: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|_| {
            let mut stream = connect(agent);
            stream.write_all(&blocking_get(key, index, "")).unwrap();
            stream
        })
        .collect()
}

#[test]
fn identical_woken_queries_get_the_same_answer_and_keep_their_connections() {
    let agent = Agent::dev(&[
        "-shards",
        "1",
        "-hcl",
        "telemetry { disable_hostname = true }",
    ]);
    agent.put("/v1/kv/fan", b"before");
    let index = agent.get("/v1/kv/fan").index();

    // Twelve identical queries, and two that differ only in a header: those must not be
    // answered from the identical ones' rendering unless their bytes say the same.
    let mut identical = park_identical(&agent, "fan", index, 12);
    let mut different = connect(&agent);
    different
        .write_all(&blocking_get("fan", index, "X-Test: one\r\n"))
        .unwrap();
    let mut closing = connect(&agent);
    closing
        .write_all(&blocking_get("fan", index, "Connection: close\r\n"))
        .unwrap();
    wait_for_parked(&agent, 14);

    agent.put("/v1/kv/fan", b"after");
    let mut answers = Vec::new();
    for stream in identical.iter_mut() {
        let mut pending = Vec::new();
        let (response, raw) = read_response(stream, &mut pending);
        assert!(pending.is_empty());
        assert_eq!(response.status, 200);
        assert!(response.index() > index);
        assert_eq!(
            response.json()[0]["Value"],
            "YWZ0ZXI=",
            "the new value, base64"
        );
        answers.push(raw);
    }
    assert!(
        answers.windows(2).all(|pair| pair[0] == pair[1]),
        "identical requests got different bytes"
    );
    let (response, raw) = read_response(&mut different, &mut Vec::new());
    assert_eq!(response.status, 200);
    assert_eq!(
        raw, answers[0],
        "a header the answer does not depend on changes nothing in it"
    );
    let (response, _) = read_response(&mut closing, &mut Vec::new());
    assert_eq!(response.status, 200);
    assert_eq!(response.json()[0]["Value"], "YWZ0ZXI=");
    let mut rest = Vec::new();
    closing.read_to_end(&mut rest).unwrap();
    assert!(
        rest.is_empty(),
        "Connection: close ends the connection after the answer"
    );

    // Every woken keep-alive connection goes on to its next request, parked or not.
    for stream in identical.iter_mut() {
        stream
            .write_all(b"GET /v1/kv/fan HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let (response, _) = read_response(stream, &mut Vec::new());
        assert_eq!(response.status, 200);
        assert_eq!(response.json()[0]["Value"], "YWZ0ZXI=");
    }
    let next_index = agent.get("/v1/kv/fan").index();
    for stream in identical.iter_mut() {
        stream
            .write_all(&blocking_get("fan", next_index, ""))
            .unwrap();
    }
    wait_for_parked(&agent, 12);
    agent.put("/v1/kv/fan", b"again");
    for stream in identical.iter_mut() {
        let (response, _) = read_response(stream, &mut Vec::new());
        assert_eq!(response.json()[0]["Value"], "YWdhaW4=");
    }
}

#[test]
fn a_request_pipelined_behind_a_parked_query_is_answered_after_it() {
    let agent = Agent::dev(&[
        "-shards",
        "1",
        "-hcl",
        "telemetry { disable_hostname = true }",
    ]);
    agent.put("/v1/kv/p", b"one");
    let index = agent.get("/v1/kv/p").index();
    let mut stream = connect(&agent);
    let mut bytes = blocking_get("p", index, "");
    bytes.extend_from_slice(b"GET /v1/kv/p?raw HTTP/1.1\r\nHost: t\r\n\r\n");
    stream.write_all(&bytes).unwrap();
    wait_for_parked(&agent, 1);
    // The pipelined request waits for the parked one; nothing is answered yet.
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut probe = [0u8; 1];
    assert!(
        stream.read(&mut probe).is_err(),
        "answered before the parked query woke"
    );
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();

    agent.put("/v1/kv/p", b"two");
    let mut pending = Vec::new();
    let (first, _) = read_response(&mut stream, &mut pending);
    assert!(first.index() > index);
    assert_eq!(first.json()[0]["Value"], "dHdv");
    let (second, _) = read_response(&mut stream, &mut pending);
    assert_eq!(second.status, 200);
    assert_eq!(second.body, b"two", "the pipelined raw GET, in order");
}

#[test]
fn a_client_that_hangs_up_while_parked_frees_its_slot() {
    let agent = Agent::dev(&[
        "-shards",
        "1",
        "-hcl",
        "telemetry { disable_hostname = true }",
    ]);
    agent.put("/v1/kv/h", b"x");
    let index = agent.get("/v1/kv/h").index();
    let mut streams = park_identical(&agent, "h", index, 5);
    wait_for_parked(&agent, 5);
    streams.truncate(2);
    wait_for_parked(&agent, 2);
    // The remaining two are still parked and still answered.
    agent.put("/v1/kv/h", b"y");
    for stream in streams.iter_mut() {
        let (response, _) = read_response(stream, &mut Vec::new());
        assert_eq!(response.json()[0]["Value"], "eQ==");
    }
    wait_for_parked(&agent, 0);
}
