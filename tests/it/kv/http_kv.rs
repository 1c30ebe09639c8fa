//! The KV API over real sockets against a spawned `praetor agent -dev`.

use crate::common;

use common::{raw_exchange, request, Agent};
use std::time::{Duration, Instant};

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[test]
fn put_get_raw_and_missing_keys() {
    let agent = Agent::dev(&[]);
    let put = agent.put("/v1/kv/web/config", b"hello");
    assert_eq!(put.status, 200);
    assert_eq!(put.json(), serde_json::json!(true));

    let get = agent.get("/v1/kv/web/config");
    assert_eq!(get.status, 200);
    assert_eq!(get.header("Content-Type"), Some("application/json"));
    assert_eq!(get.header("X-Consul-KnownLeader"), Some("true"));
    assert_eq!(get.header("X-Consul-LastContact"), Some("0"));
    assert_eq!(get.header("X-Consul-Effective-Consistency"), Some("leader"));
    let entries = get.json();
    let entry = &entries[0];
    assert_eq!(entry["Key"], "web/config");
    assert_eq!(entry["Value"], b64("hello"));
    assert_eq!(entry["Flags"], 0);
    assert_eq!(entry["LockIndex"], 0);
    assert!(
        entry.get("Session").is_none(),
        "Session is omitted when empty"
    );
    let modify_index = entry["ModifyIndex"].as_u64().unwrap();
    assert_eq!(entry["CreateIndex"].as_u64().unwrap(), modify_index);
    assert_eq!(
        get.index(),
        modify_index,
        "a single key's index is its ModifyIndex"
    );

    let raw = agent.get("/v1/kv/web/config?raw");
    assert_eq!(raw.body, b"hello");
    assert_eq!(raw.header("Content-Type"), Some("text/plain"));

    let missing = agent.get("/v1/kv/nope");
    assert_eq!(missing.status, 404);
    assert!(missing.body.is_empty());
    assert!(
        missing.index() >= modify_index,
        "a missing key reports the table index"
    );

    // An empty value reads back as null, as Go renders a nil []byte.
    agent.put("/v1/kv/empty", b"");
    assert_eq!(
        agent.get("/v1/kv/empty").json()[0]["Value"],
        serde_json::Value::Null
    );

    // Binary values survive.
    let binary: Vec<u8> = (0..=255u8).collect();
    agent.put("/v1/kv/bin", &binary);
    assert_eq!(agent.get("/v1/kv/bin?raw").body, binary);
}

#[test]
fn flags_cas_and_percent_encoded_keys() {
    let agent = Agent::dev(&[]);
    assert_eq!(agent.put("/v1/kv/f?flags=42", b"x").status, 200);
    assert_eq!(agent.get("/v1/kv/f").json()[0]["Flags"], 42);

    // cas=0: only if absent.
    assert_eq!(
        agent.put("/v1/kv/c?cas=0", b"1").json(),
        serde_json::json!(true)
    );
    assert_eq!(
        agent.put("/v1/kv/c?cas=0", b"2").json(),
        serde_json::json!(false)
    );
    let index = agent.get("/v1/kv/c").json()[0]["ModifyIndex"]
        .as_u64()
        .unwrap();
    assert_eq!(
        agent
            .put(&format!("/v1/kv/c?cas={}", index + 1000), b"3")
            .json(),
        serde_json::json!(false)
    );
    assert_eq!(
        agent.put(&format!("/v1/kv/c?cas={index}"), b"4").json(),
        serde_json::json!(true)
    );
    assert_eq!(agent.get("/v1/kv/c?raw").body, b"4");

    // %2F inside a key is a slash.
    agent.put("/v1/kv/a%2Fb%2Fc", b"slashed");
    assert_eq!(agent.get("/v1/kv/a/b/c?raw").body, b"slashed");
    assert_eq!(agent.get("/v1/kv/a%2Fb%2Fc?raw").body, b"slashed");
}

#[test]
fn recurse_keys_separator_and_deletes() {
    let agent = Agent::dev(&[]);
    for key in ["app/a", "app/b/1", "app/b/2", "apple", "zoo"] {
        agent.put(&format!("/v1/kv/{key}"), key.as_bytes());
    }
    let listed = agent.get("/v1/kv/app/?recurse").json();
    let keys: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, vec!["app/a", "app/b/1", "app/b/2"]);

    let folded = agent.get("/v1/kv/app/?keys&separator=/").json();
    assert_eq!(folded, serde_json::json!(["app/a", "app/b/"]));
    assert_eq!(
        agent.get("/v1/kv/?keys").json().as_array().unwrap().len(),
        5
    );
    assert_eq!(agent.get("/v1/kv/nothing/?keys").status, 404);
    assert_eq!(agent.get("/v1/kv/nothing/?recurse").status, 404);

    // The prefix index does not slide back after a delete (tombstones).
    let before = agent.get("/v1/kv/app/?recurse").index();
    assert_eq!(agent.delete("/v1/kv/app/a").json(), serde_json::json!(true));
    let after = agent.get("/v1/kv/app/?recurse").index();
    assert!(
        after > before,
        "deleting under the prefix moves its index forward ({before} -> {after})"
    );

    // CAS delete.
    let index = agent.get("/v1/kv/zoo").index();
    assert_eq!(
        agent
            .delete(&format!("/v1/kv/zoo?cas={}", index + 1))
            .json(),
        serde_json::json!(false)
    );
    assert_eq!(agent.get("/v1/kv/zoo").status, 200);
    assert_eq!(
        agent.delete(&format!("/v1/kv/zoo?cas={index}")).json(),
        serde_json::json!(true)
    );
    assert_eq!(agent.get("/v1/kv/zoo").status, 404);

    // Recursive delete takes the prefix only.
    assert_eq!(
        agent.delete("/v1/kv/app/?recurse").json(),
        serde_json::json!(true)
    );
    assert_eq!(agent.get("/v1/kv/app/?recurse").status, 404);
    assert_eq!(agent.get("/v1/kv/apple?raw").body, b"apple");
}

#[test]
fn bad_requests_get_clear_errors() {
    let agent = Agent::dev(&[]);
    let addr = agent.addr();
    // Missing key names.
    assert_eq!(agent.put("/v1/kv/", b"x").status, 400);
    assert_eq!(agent.get("/v1/kv/").status, 400);
    assert_eq!(agent.delete("/v1/kv/").status, 400);
    // Conflicting flags, bad numbers, unknown datacenter.
    let conflict = agent.put("/v1/kv/k?cas=1&acquire=abc", b"");
    assert_eq!(conflict.status, 400);
    assert!(
        conflict.text().starts_with("Conflicting flags"),
        "{}",
        conflict.text()
    );
    assert_eq!(agent.put("/v1/kv/k?flags=x", b"").status, 400);
    assert_eq!(agent.get("/v1/kv/k?index=abc").text(), "Invalid index");
    assert_eq!(
        agent.get("/v1/kv/k?wait=forever").text(),
        "Invalid wait time"
    );
    assert_eq!(agent.get("/v1/kv/k?stale&consistent").status, 400);
    let dc = agent.get("/v1/kv/k?dc=elsewhere");
    assert_eq!(
        (dc.status, dc.text().as_str()),
        (500, "No path to datacenter")
    );
    assert_eq!(
        agent.get("/v1/kv/nope?dc=dc1").status,
        404,
        "our own datacenter is accepted"
    );
    // Acquiring with a session that does not exist fails as Consul's does: 500, naming it.
    let acquire = agent.put("/v1/kv/k?acquire=0b4d8a3c-7e0c-4f7e-8a1a-0f2c7f0f5a11", b"");
    assert_eq!(acquire.status, 500, "{}", acquire.text());
    assert!(
        acquire.text().to_lowercase().contains("invalid session"),
        "{}",
        acquire.text()
    );
    // Unknown path and wrong method.
    assert_eq!(agent.get("/v1/nonsense").status, 404);
    let patch = request(addr, "PATCH", "/v1/kv/k", b"", &[]);
    assert_eq!(patch.status, 405);
    assert_eq!(patch.header("Allow"), Some("OPTIONS,GET,PUT,DELETE"));
    assert_eq!(patch.text(), "method PATCH not allowed");
    assert_eq!(
        request(addr, "POST", "/v1/status/leader", b"", &[]).status,
        405
    );
    // Traversal.
    assert_eq!(agent.get("/v1/kv/a/../b").status, 400);
    // A value over 512 KiB is refused with Consul's 413 before its body is read.
    let too_big = vec![b'x'; 512 * 1024 + 1];
    let response = agent.put("/v1/kv/big", &too_big);
    assert_eq!(response.status, 413);
    assert!(
        response
            .text()
            .contains("too large, max size: 524288 bytes"),
        "{}",
        response.text()
    );
    assert_eq!(
        agent.put("/v1/kv/big", &vec![b'y'; 512 * 1024]).status,
        200,
        "exactly the limit is fine"
    );
    // Garbage on the wire gets a 400 and a closed connection, not a hang.
    let reply = raw_exchange(
        addr,
        b"\x16\x03\x01 definitely not http\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(
        reply.starts_with(b"HTTP/1.1 400"),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
    // An invalid escape in the path.
    assert_eq!(agent.get("/v1/kv/%zz").status, 400);
    // The agent is still healthy.
    assert_eq!(agent.get("/v1/kv/big?raw").body.len(), 512 * 1024);
}

#[test]
fn chunked_bodies_expect_continue_and_pipelining() {
    let agent = Agent::dev(&[]);
    let addr = agent.addr();
    let chunked = b"PUT /v1/kv/chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    let reply = raw_exchange(addr, chunked, Duration::from_secs(5));
    assert!(
        reply.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    assert_eq!(agent.get("/v1/kv/chunked?raw").body, b"hello world");

    // Expect: 100-continue gets the interim response before the body is sent.
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(b"PUT /v1/kv/continued HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n").unwrap();
    let mut interim = [0u8; 25];
    stream.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    stream.write_all(b"body").unwrap();
    let mut rest = vec![0u8; 1024];
    let n = stream.read(&mut rest).unwrap();
    assert!(rest[..n].starts_with(b"HTTP/1.1 200"));
    assert_eq!(agent.get("/v1/kv/continued?raw").body, b"body");

    // Three pipelined requests on one connection, answered in order.
    let pipelined = b"PUT /v1/kv/p HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n1GET /v1/kv/p?raw HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/kv/absent HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let reply = raw_exchange(addr, pipelined, Duration::from_secs(5));
    let (first, used) = common::parse_one_response(&reply).unwrap();
    let (second, used2) = common::parse_one_response(&reply[used..]).unwrap();
    let (third, _) = common::parse_one_response(&reply[used + used2..]).unwrap();
    assert_eq!((first.status, first.body.as_slice()), (200, &b"true\n"[..]));
    assert_eq!((second.status, second.body.as_slice()), (200, &b"1"[..]));
    assert_eq!(third.status, 404);
}

#[test]
fn blocking_get_wakes_for_its_key_only() {
    let agent = Agent::dev(&[]);
    agent.put("/v1/kv/watched", b"v1");
    agent.put("/v1/kv/other", b"o1");
    let index = agent.get("/v1/kv/watched").index();
    let addr = agent.addr();

    // A write to another key must not wake it: it returns at its wait, with the same index.
    let started = Instant::now();
    let waiter = std::thread::spawn(move || {
        request(
            addr,
            "GET",
            &format!("/v1/kv/watched?index={index}&wait=1s"),
            b"",
            &[],
        )
    });
    std::thread::sleep(Duration::from_millis(200));
    agent.put("/v1/kv/other", b"o2");
    let response = waiter.join().unwrap();
    let waited = started.elapsed();
    assert_eq!(response.index(), index);
    assert!(
        waited >= Duration::from_millis(1000),
        "returned after {waited:?}, before its wait expired"
    );
    assert!(
        waited < Duration::from_millis(1000 + 1000 / 16 + 500),
        "returned after {waited:?}"
    );

    // A write to its key wakes it within 50 ms of the PUT's response.
    let waiter = std::thread::spawn(move || {
        let response = request(
            addr,
            "GET",
            &format!("/v1/kv/watched?index={index}&wait=30s"),
            b"",
            &[],
        );
        (response, Instant::now())
    });
    std::thread::sleep(Duration::from_millis(300));
    agent.put("/v1/kv/watched", b"v2");
    let put_answered = Instant::now();
    let (response, woke) = waiter.join().unwrap();
    assert!(response.index() > index);
    assert_eq!(response.json()[0]["Value"], b64("v2"));
    let delay = woke.saturating_duration_since(put_answered);
    assert!(
        delay < Duration::from_millis(50),
        "woke {delay:?} after the PUT was answered"
    );

    // A prefix watch wakes for a key under it.
    let list_index = agent.get("/v1/kv/dir/?recurse").index();
    let waiter = std::thread::spawn(move || {
        request(
            addr,
            "GET",
            &format!("/v1/kv/dir/?recurse&index={list_index}&wait=30s"),
            b"",
            &[],
        )
    });
    std::thread::sleep(Duration::from_millis(200));
    agent.put("/v1/kv/dir/child", b"c");
    let response = waiter.join().unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.json()[0]["Key"], "dir/child");

    // An index already behind answers at once.
    let started = Instant::now();
    agent.get(&format!("/v1/kv/watched?index={}&wait=30s", index - 1));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn status_self_and_datacenters() {
    let agent = Agent::dev(&["-node", "n-one"]);
    let leader = agent.get("/v1/status/leader").json();
    assert_eq!(leader, serde_json::json!(format!("{}:8300", agent.ip)));
    assert_eq!(
        agent.get("/v1/status/peers").json(),
        serde_json::json!([format!("{}:8300", agent.ip)])
    );
    assert_eq!(
        agent.get("/v1/catalog/datacenters").json(),
        serde_json::json!(["dc1"])
    );
    let me = agent.get("/v1/agent/self").json();
    assert_eq!(me["Config"]["Version"], praetor::CONSUL_API_VERSION);
    assert_eq!(me["Config"]["NodeName"], "n-one");
    assert_eq!(me["Config"]["Datacenter"], "dc1");
    assert_eq!(me["Config"]["PraetorVersion"], praetor::PRAETOR_VERSION);
    assert_eq!(me["Member"]["Name"], "n-one");
    let version = semver_triplet(me["Config"]["Version"].as_str().unwrap());
    assert!(version >= (1, 20, 0));
    assert!(agent.log().contains("cluster leadership acquired"));
}

fn semver_triplet(text: &str) -> (u32, u32, u32) {
    let parts: Vec<u32> = text.split('.').map(|p| p.parse().unwrap()).collect();
    (parts[0], parts[1], parts[2])
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let mut agent = Agent::dev(&[]);
    agent.put("/v1/kv/x", b"1");
    let status = agent.terminate().expect("agent was running");
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        agent.log()
    );
    assert!(agent.log().contains("shutdown complete"));
}

/// A write acknowledged on one shard is seen by the next read on any shard, even while the
/// raft core is slow to hand the batch to the other shards. Every request opens its own
/// connection, so the write and the read land on shards chosen by SO_REUSEPORT's hash; with
/// two shards about one pair in four acknowledges on the shard fed first and reads on the
/// one still waiting for the batch.
#[test]
fn read_on_another_shard_sees_acknowledged_write() {
    let agent = Agent::dev(&["-shards", "2", "-hcl", "enable_debug_faults = true"]);
    let stall = agent.put("/v1/agent/debug/faults", br#"{"PublishStallMs": 60}"#);
    assert_eq!(stall.status, 200, "{}", stall.text());
    assert_eq!(stall.json()["PublishStallMs"], 60);
    for round in 0..40 {
        let value = format!("v{round}");
        let put = agent.put("/v1/kv/ryw", value.as_bytes());
        assert_eq!((put.status, put.json()), (200, serde_json::json!(true)));
        let consistency = if round % 2 == 0 { "" } else { "&stale" };
        let get = agent.get(&format!("/v1/kv/ryw?raw{consistency}"));
        assert_eq!(get.status, 200);
        assert_eq!(
            get.text(),
            value,
            "round {round}: read missed the acknowledged write"
        );
    }
    let bad = agent.put("/v1/agent/debug/faults", br#"{"PublishStallMs": 5000}"#);
    assert_eq!(bad.status, 400, "{}", bad.text());
}
