//! A follower server hands what only the leader answers — writes, and reads whose
//! consistency needs the leader — to it as Consul's typed calls (`KVS.Apply`,
//! `Catalog.Register`, `Session.Apply`, `Txn.Apply`, `PreparedQuery.Execute`,
//! `ConfigEntry.Apply`, `Intention.*`, `DiscoveryChain.Get`, `Operator.*`, …), as
//! Consul's `ForwardRPC` does. Three real servers: every request is made on a follower,
//! its answer compared with the leader's own answer for the same read, and the leader's
//! log shows each typed call it served.

use crate::acl_common::same_answer;
use crate::common;

use common::{request, Agent, Cluster, HttpResponse};
use std::time::{Duration, Instant};

/// `path` read on the follower and on the leader until both answer alike, query headers
/// included (`acl_common::same_answer`); the follower's answer.
fn same(follower: &Agent, leader: &Agent, path: &str) -> HttpResponse {
    same_answer(follower, leader, ("GET", path, b""), None, true)
}

#[test]
fn a_follower_hands_writes_and_leader_reads_to_the_leader_as_typed_calls() {
    let cluster = Cluster::start(
        3,
        &[
            "-hcl",
            common::PROMETHEUS_HCL,
            "-hcl",
            "connect { enabled = true }",
        ],
    );
    let leader_index = cluster.wait_for_leader(Duration::from_secs(10));
    let leader = &cluster.servers[leader_index];
    let follower = &cluster.servers[(leader_index + 1) % 3];

    // KV: a write, a default read, a consistent read, compare-and-set both ways, a delete.
    let put = follower.put("/v1/kv/follower/a", b"1");
    assert_eq!(
        (put.status, put.text().trim()),
        (200, "true"),
        "{}",
        put.text()
    );
    let read = same(follower, leader, "/v1/kv/follower/a");
    assert_eq!(read.json()[0]["Key"], "follower/a");
    let consistent = follower.get("/v1/kv/follower/a?consistent&raw");
    assert_eq!(
        (consistent.status, consistent.text()),
        (200, "1".to_string())
    );
    let index = read.index();
    let cas = follower.put(&format!("/v1/kv/follower/a?cas={index}"), b"2");
    assert_eq!(cas.text().trim(), "true");
    let stale_cas = follower.put(&format!("/v1/kv/follower/a?cas={index}"), b"3");
    assert_eq!(
        stale_cas.text().trim(),
        "false",
        "an old index must not win"
    );
    same(follower, leader, "/v1/kv/follower/?recurse");
    same(follower, leader, "/v1/kv/follower/?keys");

    // A blocking read on the follower, parked on the leader and woken by a write made
    // through the follower.
    let index = follower.get("/v1/kv/follower/a").index();
    let follower_addr = follower.addr();
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let answer = request(
            follower_addr,
            "GET",
            &format!("/v1/kv/follower/a?index={index}&wait=20s&raw"),
            b"",
            &[],
        );
        (answer, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        follower.put("/v1/kv/follower/a", b"woken").text().trim(),
        "true"
    );
    let (woken, waited) = waiter.join().unwrap();
    assert_eq!((woken.status, woken.text()), (200, "woken".to_string()));
    assert!(
        woken.index() > index,
        "the answer moved past the index it waited on"
    );
    assert!(
        waited < Duration::from_secs(10),
        "woken by the write, not the wait: {waited:?}"
    );
    let deleted = follower.delete("/v1/kv/follower/a");
    assert_eq!(deleted.text().trim(), "true");
    assert_eq!(same(follower, leader, "/v1/kv/follower/a").status, 404);

    // The catalog and health.
    let registration = br#"{"Node":"ext-1","Address":"10.1.2.3","Service":{"Service":"web","Port":80},"Check":{"Name":"web alive","ServiceID":"web","Status":"passing"}}"#;
    let registered = follower.put("/v1/catalog/register", registration);
    assert_eq!(registered.text().trim(), "true", "{}", registered.text());
    let nodes = same(follower, leader, "/v1/catalog/service/web");
    assert_eq!(nodes.json()[0]["Address"], "10.1.2.3");
    let health = same(follower, leader, "/v1/health/service/web?passing");
    assert_eq!(health.json().as_array().unwrap().len(), 1);
    same(follower, leader, "/v1/catalog/nodes");
    same(follower, leader, "/v1/health/node/ext-1");

    // Sessions: create, read, renew, destroy.
    let created = follower.put(
        "/v1/session/create",
        br#"{"Node":"ext-1","Checks":[],"TTL":"30s"}"#,
    );
    assert_eq!(created.status, 200, "{}", created.text());
    let id = created.json()["ID"].as_str().unwrap().to_string();
    let info = same(follower, leader, &format!("/v1/session/info/{id}"));
    assert_eq!(info.json()[0]["TTL"], "30s");
    same(follower, leader, "/v1/session/list");
    let renewed = follower.put(&format!("/v1/session/renew/{id}"), b"");
    assert_eq!(renewed.status, 200, "{}", renewed.text());
    assert_eq!(renewed.json()[0]["ID"], id.as_str());
    let destroyed = follower.put(&format!("/v1/session/destroy/{id}"), b"");
    assert_eq!(destroyed.text().trim(), "true");
    assert_eq!(
        same(follower, leader, &format!("/v1/session/info/{id}"))
            .text()
            .trim(),
        "[]"
    );

    // Transactions: a write and a read.
    let txn = br#"[{"KV":{"Verb":"set","Key":"follower/txn","Value":"dHhu"}}]"#;
    let written = follower.put("/v1/txn", txn);
    assert_eq!(written.status, 200, "{}", written.text());
    let txn_read = br#"[{"KV":{"Verb":"get","Key":"follower/txn"}}]"#;
    let read = follower.put("/v1/txn", txn_read);
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(read.json()["Results"][0]["KV"]["Value"], "dHhu");

    // Prepared queries: create, get, execute, delete.
    let created = request(
        follower.addr(),
        "POST",
        "/v1/query",
        br#"{"Name":"web-query","Service":{"Service":"web"}}"#,
        &[],
    );
    assert_eq!(created.status, 200, "{}", created.text());
    let query_id = created.json()["ID"].as_str().unwrap().to_string();
    same(follower, leader, &format!("/v1/query/{query_id}"));
    let executed = follower.get("/v1/query/web-query/execute");
    assert_eq!(executed.status, 200, "{}", executed.text());
    assert_eq!(executed.json()["Nodes"][0]["Node"]["Node"], "ext-1");
    assert_eq!(
        follower.delete(&format!("/v1/query/{query_id}")).status,
        200
    );
    // A refused call carries no `QueryMeta` (net/rpc sends only the error), so only the
    // status and the words are compared here.
    let gone = follower.get(&format!("/v1/query/{query_id}"));
    assert_eq!(
        (gone.status, gone.text()),
        (404, "Query not found".to_string())
    );

    // The service mesh's configuration: a config entry, intentions, the discovery chain,
    // the CA's configuration.
    let entry = br#"{"Kind":"service-defaults","Name":"web","Protocol":"http"}"#;
    assert_eq!(follower.put("/v1/config", entry).text().trim(), "true");
    same(follower, leader, "/v1/config/service-defaults/web");
    same(follower, leader, "/v1/config/service-defaults");
    let intention = br#"{"SourceName":"api","DestinationName":"web","Action":"allow"}"#;
    let created = request(
        follower.addr(),
        "POST",
        "/v1/connect/intentions",
        intention,
        &[],
    );
    assert_eq!(created.status, 200, "{}", created.text());
    let intention_id = created.json()["ID"].as_str().unwrap().to_string();
    same(
        follower,
        leader,
        &format!("/v1/connect/intentions/{intention_id}"),
    );
    same(follower, leader, "/v1/connect/intentions");
    let check = same(
        follower,
        leader,
        "/v1/connect/intentions/check?source=api&destination=web",
    );
    assert_eq!(check.json()["Allowed"], true);
    same(
        follower,
        leader,
        "/v1/connect/intentions/match?by=destination&name=web",
    );
    let removed = follower.delete(&format!("/v1/connect/intentions/{intention_id}"));
    assert_eq!(removed.status, 200, "{}", removed.text());
    same(follower, leader, "/v1/discovery-chain/web");
    same(follower, leader, "/v1/connect/ca/configuration");

    // The operator's reads: what the leader knows of Raft and autopilot.
    let raft = same(follower, leader, "/v1/operator/raft/configuration");
    assert_eq!(raft.json()["Servers"].as_array().unwrap().len(), 3);
    same(follower, leader, "/v1/operator/autopilot/configuration");
    let health = follower.get("/v1/operator/autopilot/health");
    assert_eq!(health.status, 200, "{}", health.text());
    assert_eq!(health.json()["Servers"].as_array().unwrap().len(), 3);

    // The leader served the typed calls.
    for method in [
        "KVS.Apply",
        "KVS.Get",
        "Catalog.Register",
        "Session.Apply",
        "Session.Renew",
        "Txn.Apply",
        "PreparedQuery.Execute",
    ] {
        common::wait_for_log(leader, &["rpc: call", method]);
    }
}
