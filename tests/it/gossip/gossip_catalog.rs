//! Gossip membership drives the catalog, across real processes: 3 servers and 3 client
//! agents. Every client's node is in the catalog with a passing `serfHealth` check; a client
//! killed with `-9` is detected by gossip, its `serfHealth` goes critical on the leader's
//! reconcile and the session bound to that check is invalidated (its lock released); a client
//! that leaves gracefully, through the API or on SIGTERM, is deregistered.

use crate::agent_support;
use crate::common;

use agent_support::wait_for;
use common::{try_request_bounded, Agent, Cluster, TempDir};
use serde_json::Value;
use std::time::Duration;

/// Failure detection (probe interval, suspicion timeout) plus the leader's reconcile period,
/// with room for a loaded machine.
const DETECTION_LIMIT: Duration = Duration::from_secs(40);

fn node_name(agent: &Agent) -> String {
    format!("client-{}", agent.ip)
}

/// The `serfHealth` status of `node` as `server` sees it (stale read: any server will do).
fn serf_health(server: &Agent, node: &str) -> Option<String> {
    let r = try_request_bounded(
        server.addr(),
        "GET",
        &format!("/v1/health/node/{node}?stale"),
        b"",
        &[],
        Duration::from_secs(5),
    )
    .ok()?;
    if r.status != 200 {
        return None;
    }
    let checks: Value = serde_json::from_slice(&r.body).ok()?;
    checks
        .as_array()?
        .iter()
        .find(|c| c["CheckID"] == "serfHealth")
        .and_then(|c| c["Status"].as_str().map(str::to_string))
}

fn catalog_has_node(server: &Agent, node: &str) -> Option<bool> {
    let r = try_request_bounded(
        server.addr(),
        "GET",
        "/v1/catalog/nodes?stale",
        b"",
        &[],
        Duration::from_secs(5),
    )
    .ok()?;
    let nodes: Value = serde_json::from_slice(&r.body).ok()?;
    Some(nodes.as_array()?.iter().any(|n| n["Node"] == node))
}

#[test]
fn client_failure_and_leave_reach_the_catalog_and_sessions() {
    let cluster = Cluster::start(3, &[]);
    let data: Vec<TempDir> = (0..3).map(|i| TempDir::new(&format!("gc{i}"))).collect();
    let mut clients: Vec<Agent> = data.iter().map(|d| cluster.start_client(d, &[])).collect();
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    let server = &cluster.servers[leader];

    for client in &clients {
        let node = node_name(client);
        wait_for(
            DETECTION_LIMIT,
            "every client node with passing serfHealth",
            || (serf_health(server, &node).as_deref() == Some("passing")).then_some(()),
        );
    }

    // A session made through client 0 binds to its node's serfHealth by default and holds
    // a lock.
    let doomed = node_name(&clients[0]);
    let session = wait_for(
        Duration::from_secs(15),
        "session created via client 0",
        || {
            let r = try_request_bounded(
                clients[0].addr(),
                "PUT",
                "/v1/session/create",
                br#"{"LockDelay":"1ms"}"#,
                &[],
                Duration::from_secs(5),
            )
            .ok()?;
            (r.status == 200).then(|| r.json()["ID"].as_str().unwrap().to_string())
        },
    );
    let info = clients[0]
        .get(&format!("/v1/session/info/{session}"))
        .json();
    assert_eq!(info[0]["Node"], doomed.as_str());
    assert_eq!(info[0]["NodeChecks"], serde_json::json!(["serfHealth"]));
    let acquired = clients[0].put(&format!("/v1/kv/gossip/lock?acquire={session}"), b"held");
    assert_eq!(acquired.text(), "true");

    clients[0].kill9();
    wait_for(
        DETECTION_LIMIT,
        "serfHealth of the killed client critical",
        || (serf_health(server, &doomed).as_deref() == Some("critical")).then_some(()),
    );
    wait_for(Duration::from_secs(10), "session invalidated", || {
        let r = cluster.servers[leader].get(&format!("/v1/session/info/{session}"));
        (r.status == 200 && r.json().as_array().is_none_or(Vec::is_empty)).then_some(())
    });
    let lock = cluster.servers[leader].get("/v1/kv/gossip/lock").json();
    assert!(
        lock[0].get("Session").is_none_or(Value::is_null),
        "the lock was released: {lock}"
    );
    // The other clients stay healthy.
    for client in &clients[1..] {
        assert_eq!(
            serf_health(server, &node_name(client)).as_deref(),
            Some("passing")
        );
    }

    // A graceful leave deregisters the node.
    let leaving = node_name(&clients[1]);
    let r = clients[1].put("/v1/agent/leave", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(DETECTION_LIMIT, "the node that left deregistered", || {
        (catalog_has_node(server, &leaving) == Some(false)).then_some(())
    });
    assert_eq!(
        catalog_has_node(server, &node_name(&clients[2])),
        Some(true)
    );
    assert_eq!(
        catalog_has_node(server, &doomed),
        Some(true),
        "failed, not left"
    );

    // SIGTERM on a client leaves gracefully too (Consul's `leave_on_terminate`, true on
    // clients by default): the node is deregistered, not left critical.
    let terminated = node_name(&clients[2]);
    let status = clients[2].terminate().expect("client 2 was running");
    assert!(status.success(), "client 2 exited cleanly: {status:?}");
    wait_for(
        DETECTION_LIMIT,
        "the terminated client deregistered",
        || (catalog_has_node(server, &terminated) == Some(false)).then_some(()),
    );
    clients.clear();
}
