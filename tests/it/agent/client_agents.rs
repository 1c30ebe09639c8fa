//! Client agents as Consul runs them, with real processes: 3 servers and 3 client agents.
//!
//! - A client killed with SIGKILL and restarted on its data directory comes back with its
//!   local state exactly as it was — maintenance mode, TTL check states, inline checks kept
//!   by a re-registration without `Check`, deregistered checks gone — and the catalog agrees.
//! - Killing the server a client uses: the client's next forwarded read and write and its
//!   next anti-entropy sync go through another server within 1 s, with at most a few log
//!   lines over the outage.
//! - With only one server left (no leader) and then none, the client keeps answering its
//!   agent endpoints; a stale read through it says `X-Consul-KnownLeader: false`.

use crate::agent_support;
use crate::common;

use agent_support::wait_for;
use common::{try_request_timeout, Agent, Cluster, TempDir};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long the catalog may take to show a client's local state.
const CONVERGE_LIMIT: Duration = Duration::from_secs(15);
/// The failover bound the issue sets: the next request after the kill succeeds within it.
const FAILOVER_LIMIT: Duration = Duration::from_secs(1);
/// How long the test watches a client's log while its server stays dead.
const OUTAGE_WATCH: Duration = Duration::from_secs(4);
/// Warning and error lines a client may log over that outage.
const OUTAGE_LOG_LINES_MAX: usize = 3;
/// An agent endpoint must answer within this while no server answers.
const AGENT_ENDPOINT_LIMIT: Duration = Duration::from_secs(1);

fn node_name(agent: &Agent) -> String {
    format!("client-{}", agent.ip)
}

fn put_json(agent: &Agent, path: &str, body: Value) {
    let r = agent.put(path, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "PUT {path}: {}\n{}", r.text(), agent.log());
}

fn put_empty(agent: &Agent, path: &str) {
    let r = agent.put(path, b"");
    assert_eq!(r.status, 200, "PUT {path}: {}\n{}", r.text(), agent.log());
}

/// The client's node in a server's own catalog (`?stale`): `(CheckID, Status, Output,
/// Notes, ServiceID)` of every check, sorted.
fn catalog_checks(server: &Agent, node: &str) -> Vec<(String, String, String, String, String)> {
    let r = server.get(&format!("/v1/health/node/{node}?stale"));
    if r.status != 200 {
        return Vec::new();
    }
    let field = |c: &Value, k: &str| c[k].as_str().unwrap_or_default().to_string();
    let mut rows: Vec<_> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["CheckID"] != "serfHealth")
        .map(|c| {
            (
                field(c, "CheckID"),
                field(c, "Status"),
                field(c, "Output"),
                field(c, "Notes"),
                field(c, "ServiceID"),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// The same rows from the client's own `/v1/agent/checks`.
fn local_checks(client: &Agent) -> Vec<(String, String, String, String, String)> {
    let field = |c: &Value, k: &str| c[k].as_str().unwrap_or_default().to_string();
    let mut rows: Vec<_> = client
        .get("/v1/agent/checks")
        .json()
        .as_object()
        .unwrap()
        .values()
        .map(|c| {
            (
                field(c, "CheckID"),
                field(c, "Status"),
                field(c, "Output"),
                field(c, "Notes"),
                field(c, "ServiceID"),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// The server a client forwards to, from the last line its router logged.
fn server_in_use(client: &Agent) -> Option<SocketAddr> {
    let log = client.log();
    const MARKER: &str = "agent: forwarding to server ";
    let line = log.lines().rev().find(|l| l.contains(MARKER))?;
    let rest = &line[line.find(MARKER)? + MARKER.len()..];
    let open = rest.find('(')?;
    let close = rest[open..].find(')')? + open;
    rest[open + 1..close].parse().ok()
}

fn warnings_since(client: &Agent, offset: usize) -> Vec<String> {
    client.log()[offset..]
        .lines()
        .filter(|l| l.contains("[WARN]") || l.contains("[ERROR]"))
        .map(str::to_string)
        .collect()
}

/// Registers the state the restart must keep, on `client`.
fn build_local_state(client: &Agent) {
    // A service with two inline TTL checks, then re-registered without `Check`: Consul
    // keeps the checks it already has.
    put_json(
        client,
        "/v1/agent/service/register",
        json!({"Name": "web", "ID": "web-1", "Port": 80, "Checks": [
            {"CheckID": "web-ttl", "TTL": "300s"},
            {"CheckID": "web-slow", "TTL": "300s"}
        ]}),
    );
    put_json(
        client,
        "/v1/agent/service/register",
        json!({"Name": "web", "ID": "web-1", "Port": 8080, "Tags": ["v2"]}),
    );
    put_json(
        client,
        "/v1/agent/service/register",
        json!({"Name": "api", "ID": "api-1", "Port": 90, "Check": {"CheckID": "api-ttl", "TTL": "300s", "Status": "passing"}}),
    );
    put_empty(client, "/v1/agent/check/pass/web-ttl?note=all%20good");
    put_empty(client, "/v1/agent/check/warn/web-slow?note=slow%20disk");
    put_empty(client, "/v1/agent/check/fail/api-ttl?note=down");
    // A node check registered and deregistered: it must stay gone.
    put_json(
        client,
        "/v1/agent/check/register",
        json!({"ID": "node-ttl", "Name": "node ttl", "TTL": "300s"}),
    );
    put_empty(client, "/v1/agent/check/deregister/node-ttl");
    // Maintenance of one service and of the node, with reasons.
    put_empty(
        client,
        "/v1/agent/service/maintenance/api-1?enable=true&reason=upgrading",
    );
    put_empty(client, "/v1/agent/maintenance?enable=true&reason=patching");
}

#[test]
fn client_agents_keep_their_state_across_kill9_and_fail_over_between_servers() {
    let mut cluster = Cluster::start(3, &[]);
    let data: Vec<TempDir> = (0..3)
        .map(|i| TempDir::new(&format!("client{i}")))
        .collect();
    let mut clients: Vec<Agent> = data
        .iter()
        .map(|d| cluster.start_client(d, &["-log-level", "debug"]))
        .collect();
    for client in &clients {
        client.wait_ready();
    }

    // --- kill -9 and restart keep the local state exactly ---
    let client = &mut clients[0];
    let node = node_name(client);
    build_local_state(client);
    let services_before = client.get("/v1/agent/services").json();
    let checks_before = client.get("/v1/agent/checks").json();
    let rows_before = local_checks(client);
    let ids: Vec<&str> = rows_before.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        ids,
        [
            "_node_maintenance",
            "_service_maintenance:api-1",
            "api-ttl",
            "web-slow",
            "web-ttl"
        ],
        "{rows_before:?}"
    );
    wait_for(
        CONVERGE_LIMIT,
        "the catalog to show the client's checks",
        || (catalog_checks(&cluster.servers[1], &node) == rows_before).then_some(()),
    );

    client.kill9();
    client.restart();
    client.wait_ready();
    assert_eq!(
        client.get("/v1/agent/services").json(),
        services_before,
        "services after the restart"
    );
    assert_eq!(
        client.get("/v1/agent/checks").json(),
        checks_before,
        "checks after the restart: maintenance, TTL states, inline checks, no deregistered one"
    );
    // The inline check kept by the re-registration still takes updates (Consul would
    // answer 404 had it been lost) ...
    put_empty(client, "/v1/agent/check/fail/web-ttl?note=broken");
    let after = client.get("/v1/agent/checks").json();
    assert_eq!(after["web-ttl"]["Status"], "critical");
    assert_eq!(after["web-ttl"]["Output"], "broken");
    // ... and the catalog agrees, after the restarted client's first (full) sync: the
    // deregistered check did not come back.
    let mut rows_expected = rows_before.clone();
    for row in rows_expected.iter_mut().filter(|r| r.0 == "web-ttl") {
        row.1 = "critical".to_string();
        row.2 = "broken".to_string();
    }
    wait_for(CONVERGE_LIMIT, "the catalog after the restart", || {
        (catalog_checks(&cluster.servers[2], &node) == rows_expected).then_some(())
    });
    assert_eq!(local_checks(client), rows_expected);

    // --- kill the server a client uses: the next requests go elsewhere at once ---
    let client = &clients[1];
    let used = server_in_use(client)
        .unwrap_or_else(|| panic!("no server in use in the log:\n{}", client.log()));
    let victim = cluster
        .servers
        .iter()
        .position(|s| s.ip == used.ip())
        .expect("the client uses one of the servers");
    // A dead leader needs an election before writes succeed anywhere; the failover is
    // about the client, so the server it uses is made a follower first.
    if cluster.current_leader() == Some(victim) {
        let r = cluster.servers[victim].put("/v1/operator/raft/transfer-leader", b"");
        assert_eq!(r.status, 200, "{}", r.text());
        wait_for(Duration::from_secs(15), "a new leader", || {
            cluster.current_leader().filter(|&l| l != victim)
        });
    }
    let survivor = (victim + 1) % 3;
    // Warm the connection, so the kill breaks one in use.
    assert_eq!(client.get("/v1/catalog/nodes").status, 200);
    let log_offset = client.log().len();
    cluster.servers[victim].kill9();

    let started = Instant::now();
    let read = client.get("/v1/catalog/nodes");
    assert_eq!(read.status, 200, "forwarded read: {}", read.text());
    let write = client.put("/v1/kv/failover", b"yes");
    assert_eq!(write.status, 200, "forwarded write: {}", write.text());
    assert!(
        started.elapsed() < FAILOVER_LIMIT,
        "forwarded requests took {:?}",
        started.elapsed()
    );

    let started = Instant::now();
    put_json(
        client,
        "/v1/agent/service/register",
        json!({"Name": "after-failover", "Port": 1}),
    );
    wait_for(
        FAILOVER_LIMIT,
        "anti-entropy through another server",
        || {
            let r = cluster.servers[survivor].get("/v1/catalog/service/after-failover?stale");
            (r.status == 200 && r.json().as_array().is_some_and(|a| a.len() == 1)).then_some(())
        },
    );
    let synced_in = started.elapsed();
    assert!(
        synced_in < FAILOVER_LIMIT,
        "anti-entropy took {synced_in:?}"
    );

    // The server stays dead; the client keeps syncing without filling its log.
    let watch_until = Instant::now() + OUTAGE_WATCH;
    let mut round = 0;
    while Instant::now() < watch_until {
        round += 1;
        let status = if round % 2 == 0 { "pass" } else { "warn" };
        put_json(
            client,
            "/v1/agent/check/register",
            json!({"ID": "flip", "Name": "flip", "TTL": "60s"}),
        );
        put_empty(client, &format!("/v1/agent/check/{status}/flip"));
        std::thread::sleep(Duration::from_millis(100));
    }
    let warnings = warnings_since(client, log_offset);
    assert!(
        warnings.len() <= OUTAGE_LOG_LINES_MAX,
        "{} warnings while the server was down:\n{}",
        warnings.len(),
        warnings.join("\n")
    );
    assert!(
        warnings.iter().any(|l| l.contains(&used.to_string())),
        "the failover itself is logged: {warnings:?}"
    );

    put_empty(client, "/v1/agent/check/deregister/flip");

    // --- one server left, then none: the agent endpoints keep answering ---
    let second = (survivor + 1) % 3;
    assert_ne!(second, victim);
    cluster.servers[second].kill9();
    // The last server loses its leader; a stale read through the client says so.
    wait_for(
        Duration::from_secs(20),
        "KnownLeader false on a stale read",
        || {
            let r = try_request_timeout(
                client.addr(),
                "GET",
                "/v1/catalog/nodes?stale",
                Duration::from_secs(10),
            )
            .ok()?;
            (r.status == 200 && r.header("X-Consul-KnownLeader") == Some("false")).then_some(())
        },
    );
    cluster.servers[survivor].kill9();
    for path in [
        "/v1/agent/services",
        "/v1/agent/checks",
        "/v1/agent/self",
        "/v1/agent/members",
        "/v1/agent/health/service/name/after-failover",
    ] {
        let started = Instant::now();
        let r = try_request_timeout(client.addr(), "GET", path, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(
            r.status == 200,
            "{path} answered {} with no server: {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        assert!(
            started.elapsed() < AGENT_ENDPOINT_LIMIT,
            "{path} took {:?} with no server",
            started.elapsed()
        );
    }
    // A store read has nowhere to go: Consul's error, within the hold time.
    let started = Instant::now();
    let r = try_request_timeout(
        client.addr(),
        "GET",
        "/v1/catalog/nodes",
        Duration::from_secs(15),
    )
    .expect("an answer, not a hung connection");
    assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(clients);
    drop(cluster.servers.drain(..));
}
