//! `/v1/txn` over real sockets: all-or-nothing, Consul's response shapes and status codes,
//! limits, read-only transactions without Raft, locks inside transactions, catalog verbs.

use crate::common;

use base64::Engine;
use common::Agent;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn txn(agent: &Agent, ops: Value) -> (u16, Value) {
    let r = agent.put("/v1/txn", ops.to_string().as_bytes());
    let body = if r.body.is_empty() || !r.text().trim_start().starts_with('{') {
        json!(r.text())
    } else {
        r.json()
    };
    (r.status, body)
}

fn kv(verb: &str, key: &str) -> Value {
    json!({"KV": {"Verb": verb, "Key": key}})
}

fn kv_value(verb: &str, key: &str, value: &str) -> Value {
    json!({"KV": {"Verb": verb, "Key": key, "Value": b64(value)}})
}

fn kv_index(verb: &str, key: &str, index: u64) -> Value {
    json!({"KV": {"Verb": verb, "Key": key, "Index": index}})
}

fn wait_for_serf_health(agent: &Agent) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let r = agent.get("/v1/health/state/passing");
        if r.status == 200 && r.text().contains("serfHealth") {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the agent's node never got a passing serfHealth check");
}

/// Waits (bounded) until the agent's first anti-entropy sync has written its node row with
/// the metadata every agent publishes. That is the last Raft write a fresh dev agent makes
/// on its own (the leader registered the node, `serfHealth` and `consul` before it was
/// reported ready); a test counting Raft entries starts after it.
fn wait_for_first_sync(agent: &Agent) {
    let node = agent.get("/v1/agent/self").json()["Config"]["NodeName"]
        .as_str()
        .expect("the agent's node name")
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let row = agent.get(&format!("/v1/catalog/node/{node}")).json();
        if row["Node"]["Meta"]["consul-version"].is_string() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the agent never synced its node metadata");
}

#[test]
fn a_failing_check_index_rolls_the_whole_transaction_back() {
    let agent = Agent::dev(&[]);
    let (status, body) = txn(
        &agent,
        json!([kv_value("set", "t/a", "1"), kv_value("set", "t/b", "2")]),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Errors"], Value::Null);
    let results = body["Results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["KV"]["Key"], "t/a");
    assert_eq!(
        results[0]["KV"]["Value"],
        Value::Null,
        "write results carry no value"
    );
    let b_index = results[1]["KV"]["ModifyIndex"].as_u64().unwrap();
    let kv_index_before = agent.get("/v1/kv/t/?recurse").index();

    let (status, body) = txn(
        &agent,
        json!([
            kv_value("set", "t/a", "changed"),
            kv("delete", "t/b"),
            kv_value("set", "t/c", "new"),
            kv_index("check-index", "t/a", b_index + 1000),
        ]),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["Results"], Value::Null);
    let errors = body["Errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{body}");
    assert_eq!(errors[0]["OpIndex"], 3);
    // The set in op 0 moved t/a inside the (rolled back) transaction.
    let what = errors[0]["What"].as_str().unwrap();
    assert!(
        what.starts_with("failed index check for key \"t/a\", current modify index ")
            && what.ends_with(&format!(" != {}", b_index + 1000)),
        "{what}"
    );
    // Nothing changed: values, existence, and the index blocking queries see.
    let a = agent.get("/v1/kv/t/a");
    assert_eq!(a.json()[0]["Value"], b64("1"));
    assert_eq!(agent.get("/v1/kv/t/b").status, 200);
    assert_eq!(agent.get("/v1/kv/t/c").status, 404);
    assert_eq!(agent.get("/v1/kv/t/?recurse").index(), kv_index_before);

    // With the right index the same transaction applies as a whole.
    let a_index = a.json()[0]["ModifyIndex"].as_u64().unwrap();
    let (status, body) = txn(
        &agent,
        json!([
            kv_index("check-index", "t/a", a_index),
            kv_value("set", "t/a", "changed"),
            kv("delete", "t/b"),
            kv_value("cas", "t/c", "new"),
            kv("get", "t/a"),
        ]),
    );
    assert_eq!(status, 200, "{body}");
    let results = body["Results"].as_array().unwrap();
    assert_eq!(results.len(), 4, "delete adds no result: {body}");
    assert_eq!(
        results[3]["KV"]["Value"],
        b64("changed"),
        "get sees the earlier set"
    );
    assert_eq!(agent.get("/v1/kv/t/b").status, 404);
    assert_eq!(agent.get("/v1/kv/t/c").json()[0]["Value"], b64("new"));
}

#[test]
fn limits_and_malformed_bodies() {
    let agent = Agent::dev(&[]);
    let ops: Vec<Value> = (0..65)
        .map(|i| kv_value("set", &format!("l/{i}"), "v"))
        .collect();
    let r = agent.put("/v1/txn", Value::from(ops).to_string().as_bytes());
    assert_eq!(r.status, 413);
    assert_eq!(
        r.text(),
        "Transaction contains too many operations (65 > 64)"
    );
    assert_eq!(agent.get("/v1/kv/l/0").status, 404);
    let ops: Vec<Value> = (0..64)
        .map(|i| kv_value("set", &format!("l/{i}"), "v"))
        .collect();
    let (status, body) = txn(&agent, Value::from(ops));
    assert_eq!(status, 200);
    assert_eq!(body["Results"].as_array().unwrap().len(), 64);
    // Every key of the 64 landed at one index: one Raft entry.
    let indexes: std::collections::BTreeSet<u64> = body["Results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["KV"]["ModifyIndex"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes.len(), 1);

    let big = "x".repeat(600 * 1024);
    let r = agent.put(
        "/v1/txn",
        json!([kv_value("set", "big", &big)]).to_string().as_bytes(),
    );
    assert_eq!(r.status, 413, "{}", r.text());
    let r = agent.put("/v1/txn", b"{not json");
    assert_eq!(r.status, 400);
    assert!(r.text().starts_with("Failed to parse body"), "{}", r.text());
    let r = agent.put(
        "/v1/txn",
        br#"[{"KV":{"Verb":"set","Key":"a","Value":"***"}}]"#,
    );
    assert_eq!(r.status, 400);
    let (status, body) = txn(&agent, json!([kv("frobnicate", "a"), kv("get", "")]));
    assert_eq!(status, 409);
    assert_eq!(
        body["Errors"],
        json!([
            {"OpIndex": 0, "What": "unknown KV verb \"frobnicate\""},
            {"OpIndex": 1, "What": "Must provide key"}
        ])
    );
    assert_eq!(agent.get("/v1/txn").status, 405);
}

#[test]
fn read_only_transactions_are_served_without_raft() {
    let agent = Agent::dev(&[]);
    // The agent's own catalog write would otherwise take an index between the test's.
    wait_for_first_sync(&agent);
    agent.put("/v1/kv/ro/a", b"1");
    agent.put("/v1/kv/ro/b", b"2");
    agent.put("/v1/kv/rox/first", b"1");
    let before = agent.get("/v1/kv/rox/first").index();
    for query in ["", "?stale", "?consistent"].iter().cycle().take(30) {
        let r = agent.put(
            &format!("/v1/txn{query}"),
            json!([
                kv("get-tree", "ro/"),
                kv("check-not-exists", "ro/c"),
                kv("get-or-empty", "ro/z")
            ])
            .to_string()
            .as_bytes(),
        );
        assert_eq!(r.status, 200, "{query}: {}", r.text());
        assert_eq!(r.header("X-Consul-KnownLeader"), Some("true"));
        assert!(r.header("X-Consul-LastContact").is_some());
        let body = r.json();
        let results = body["Results"].as_array().unwrap();
        assert_eq!(results.len(), 3);
        assert_eq!(results[1]["KV"]["Value"], b64("2"));
        assert_eq!(results[2]["KV"]["Key"], "ro/z");
        assert_eq!(results[2]["KV"]["Value"], Value::Null);
    }
    let r = agent.put(
        "/v1/txn",
        json!([kv("get", "ro/missing")]).to_string().as_bytes(),
    );
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json()["Errors"][0]["What"],
        "key \"ro/missing\" doesn't exist"
    );
    // Reads took no Raft entry: a write after them lands right after the writes before.
    agent.put("/v1/kv/ro/c", b"3");
    assert_eq!(
        agent.get("/v1/kv/ro/c").json()[0]["ModifyIndex"],
        before + 1
    );
}

#[test]
fn locks_in_transactions() {
    let agent = Agent::dev(&[]);
    wait_for_serf_health(&agent);
    let s = agent.put("/v1/session/create", b"{}").json()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let lock = json!({"KV": {"Verb": "lock", "Key": "tl", "Value": b64("v"), "Session": s}});
    let (status, body) = txn(&agent, json!([lock]));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Results"][0]["KV"]["LockIndex"], 1);
    assert_eq!(body["Results"][0]["KV"]["Session"], json!(s));
    let (status, body) = txn(
        &agent,
        json!([{"KV": {"Verb": "check-session", "Key": "tl", "Session": s}}]),
    );
    assert_eq!(status, 200, "{body}");
    let other = agent.put("/v1/session/create", b"{}").json()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, body) = txn(
        &agent,
        json!([{"KV": {"Verb": "lock", "Key": "tl", "Session": other}},
               {"KV": {"Verb": "unlock", "Key": "tl", "Session": other}}]),
    );
    assert_eq!(status, 409);
    assert_eq!(
        body["Errors"],
        json!([
            {"OpIndex": 0, "What": "failed to lock key \"tl\", lock is already held"},
            {"OpIndex": 1, "What": "failed to unlock key \"tl\", lock isn't held, or is held by another session"}
        ])
    );
    // After an invalidation the lock-delay refuses a transaction lock with Consul's words.
    agent.put(&format!("/v1/session/destroy/{s}"), b"");
    let (status, body) = txn(
        &agent,
        json!([{"KV": {"Verb": "lock", "Key": "tl", "Session": other}}]),
    );
    assert_eq!(status, 409);
    assert_eq!(
        body["Errors"][0]["What"],
        "failed to lock key \"tl\" due to lock delay"
    );
}

#[test]
fn node_service_and_check_verbs() {
    let agent = Agent::dev(&[]);
    let (status, body) = txn(
        &agent,
        json!([
            {"Node": {"Verb": "set", "Node": {"Node": "txn-node", "Address": "10.1.2.3", "Meta": {"rack": "r1"}}}},
            {"Service": {"Verb": "set", "Node": "txn-node", "Service": {"ID": "web1", "Service": "web", "Port": 80, "Tags": ["a"]}}},
            {"Check": {"Verb": "set", "Check": {"Node": "txn-node", "CheckID": "web-check", "Name": "web", "Status": "passing", "ServiceID": "web1"}}}
        ]),
    );
    assert_eq!(status, 200, "{body}");
    let results = body["Results"].as_array().unwrap();
    assert_eq!(results[0]["Node"]["Node"], "txn-node");
    assert_eq!(results[0]["Node"]["Meta"]["rack"], "r1");
    assert_eq!(results[1]["Service"]["Service"], "web");
    assert_eq!(results[2]["Check"]["ServiceName"], "web");
    let health = agent.get("/v1/health/service/web");
    assert_eq!(health.json()[0]["Checks"][0]["CheckID"], "web-check");

    let service_index = results[1]["Service"]["ModifyIndex"].as_u64().unwrap();
    let (status, body) = txn(
        &agent,
        json!([
            {"Service": {"Verb": "cas", "Node": "txn-node", "Service": {"ID": "web1", "Service": "web", "Port": 81, "ModifyIndex": service_index + 7}}},
            {"Node": {"Verb": "get", "Node": {"Node": "absent"}}}
        ]),
    );
    assert_eq!(status, 409);
    assert_eq!(
        body["Errors"],
        json!([
            {"OpIndex": 0, "What": "failed to set service \"web1\" on node \"txn-node\", index is stale"},
            {"OpIndex": 1, "What": "node \"absent\" doesn't exist"}
        ])
    );
    let (status, body) = txn(
        &agent,
        json!([
            {"Check": {"Verb": "delete", "Check": {"Node": "txn-node", "CheckID": "web-check"}}},
            {"Service": {"Verb": "delete", "Node": "txn-node", "Service": {"ID": "web1", "Service": "web"}}},
            {"Node": {"Verb": "get", "Node": {"Node": "txn-node"}}}
        ]),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Results"].as_array().unwrap().len(), 1);
    assert_eq!(agent.get("/v1/health/service/web").json(), json!([]));
}
