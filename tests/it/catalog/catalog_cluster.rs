//! The catalog across processes: 3 servers and 2 client agents. Services registered on the
//! clients reach every server's catalog through the clients' anti-entropy; catalog, health
//! and KV reads on a client are answered by the servers; a restarted client re-syncs what the
//! catalog lost while it was down; an entry deleted behind an agent's back is put back.

use crate::agent_support;
use crate::common;

use agent_support::wait_for;
use common::{Agent, Cluster, TempDir};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Anti-entropy full-sync period of the test's client agents: short, so drift repair is
/// observed within the test's time budget.
const CLIENT_AE_INTERVAL: &str = "2s";
/// How long a change may take to reach every server's catalog.
const CONVERGE_LIMIT: Duration = Duration::from_secs(15);

/// A client agent with a short anti-entropy period, joined through the first server.
fn start_client(cluster: &Cluster, data: &TempDir) -> Agent {
    let ae_interval = format!("ae_interval = \"{CLIENT_AE_INTERVAL}\"");
    cluster.start_client(data, &["-hcl", &ae_interval])
}

fn node_name(agent: &Agent) -> String {
    format!("client-{}", agent.ip)
}

/// `(ServiceID, Node)` pairs of a service in one server's own catalog (`?stale`, so a
/// follower answers from its replica instead of asking the leader).
fn local_instances(server: &Agent, service: &str) -> Vec<(String, String)> {
    let r = server.get(&format!("/v1/catalog/service/{service}?stale"));
    if r.status != 200 {
        return Vec::new();
    }
    let mut pairs: Vec<(String, String)> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["ServiceID"].as_str().unwrap().to_string(),
                s["Node"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    pairs.sort();
    pairs
}

/// Waits until every server's own catalog lists exactly `expected` for `service`.
fn wait_everywhere(cluster: &Cluster, service: &str, expected: &[(String, String)], what: &str) {
    wait_for(CONVERGE_LIMIT, what, || {
        cluster
            .servers
            .iter()
            .all(|s| local_instances(s, service) == expected)
            .then_some(())
    });
}

fn register(agent: &Agent, body: Value) {
    let r = agent.put("/v1/agent/service/register", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "register: {}\n{}", r.text(), agent.log());
}

#[test]
fn client_services_reach_every_server_and_survive_restarts_and_drift() {
    let started = Instant::now();
    let cluster = Cluster::start(3, &[]);
    let (data_a, data_b) = (TempDir::new("client-a"), TempDir::new("client-b"));
    let mut client_a = start_client(&cluster, &data_a);
    let client_b = start_client(&cluster, &data_b);
    let (node_a, node_b) = (node_name(&client_a), node_name(&client_b));

    // Registered locally at once; anti-entropy carries them to the servers once the clients
    // know one.
    for (client, id) in [(&client_a, "web-a"), (&client_b, "web-b")] {
        wait_for(Duration::from_secs(10), "the client's HTTP API", || {
            common::try_request(client.addr(), "GET", "/v1/agent/self", b"", &[])
                .ok()
                .filter(|r| r.status == 200)
        });
        register(
            client,
            json!({"Name": "web", "ID": id, "Port": 8080, "Tags": ["v1"],
                   "Check": {"CheckID": format!("{id}-ttl"), "TTL": "120s", "Status": "passing"}}),
        );
    }
    register(&client_b, json!({"Name": "db", "ID": "db-b", "Port": 5432}));
    let both = vec![
        ("web-a".to_string(), node_a.clone()),
        ("web-b".to_string(), node_b.clone()),
    ];
    wait_everywhere(&cluster, "web", &both, "both clients' web in every catalog");
    wait_everywhere(
        &cluster,
        "db",
        &[("db-b".to_string(), node_b.clone())],
        "client b's db in every catalog",
    );

    // Store-bound reads on a client are the servers' answers, not an empty local store.
    let health = client_a.get("/v1/health/service/web?passing");
    assert_eq!(health.status, 200, "{}", health.text());
    let mut nodes: Vec<String> = health
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Node"]["Node"].as_str().unwrap().to_string())
        .collect();
    nodes.sort();
    let mut expected_nodes = vec![node_a.clone(), node_b.clone()];
    expected_nodes.sort();
    assert_eq!(
        nodes, expected_nodes,
        "health on a client sees both clients"
    );
    assert!(
        health.index() > 0,
        "a forwarded answer carries the servers' index"
    );
    let services = client_a.get("/v1/catalog/services").json();
    assert!(services.get("db").is_some(), "{services}");
    // The servers' own rows come from the leader's member reconcile, which runs once a
    // second: wait for them rather than race it.
    wait_for(
        CONVERGE_LIMIT,
        "3 servers and 2 clients in the catalog",
        || {
            let nodes = client_b.get("/v1/catalog/nodes").json();
            let services = client_b.get("/v1/catalog/services").json();
            (nodes.as_array().map(Vec::len) == Some(5) && services.get("consul").is_some())
                .then_some(())
        },
    );
    let checks = client_b.get(&format!("/v1/health/node/{node_a}")).json();
    assert!(
        checks
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["CheckID"] == "web-a-ttl" && c["Status"] == "passing"),
        "{checks}"
    );
    assert_eq!(client_a.put("/v1/kv/from-client", b"hello").text(), "true");
    assert_eq!(client_b.get("/v1/kv/from-client?raw").body, b"hello");
    // The agent's own health endpoint answers from the client's local services.
    let local = client_a.get("/v1/agent/health/service/name/web");
    assert_eq!(local.status, 200, "{}", local.text());
    assert_eq!(local.json()[0]["Service"]["ID"], "web-a");
    assert_eq!(local.json()[0]["AggregatedStatus"], "passing");

    // Deleted behind the agent's back on a server: the client's anti-entropy puts it back.
    let r = cluster.servers[2].put(
        "/v1/catalog/deregister",
        json!({"Node": node_b, "ServiceID": "web-b"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let deleted = cluster.servers[2].get("/v1/catalog/service/web").json();
    assert_eq!(
        deleted.as_array().unwrap().len(),
        1,
        "the deregistration took effect: {deleted}"
    );
    wait_everywhere(&cluster, "web", &both, "web-b repaired by anti-entropy");
    let checks = cluster.servers[1].get("/v1/health/checks/web?stale").json();
    assert!(
        checks
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["CheckID"] == "web-b-ttl"),
        "the repaired service comes back with its check: {checks}"
    );

    // A service on the client's node that the client does not have: removed, which needs
    // the client to read its node's rows from a server.
    let r = cluster.servers[0].put(
        "/v1/catalog/register",
        json!({"Node": node_a, "Address": client_a.ip.to_string(), "SkipNodeUpdate": true,
               "Service": {"Service": "intruder"}})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        cluster.servers[0]
            .get("/v1/catalog/service/intruder")
            .json()[0]["Node"],
        node_a.as_str()
    );
    wait_everywhere(
        &cluster,
        "intruder",
        &[],
        "the intruder removed by client a",
    );

    // A client that crashes and whose node the catalog loses meanwhile re-syncs on restart
    // from the registrations it persisted.
    client_a.kill9();
    let r = cluster.servers[1].put(
        "/v1/catalog/deregister",
        json!({"Node": node_a}).to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    wait_everywhere(
        &cluster,
        "web",
        &[("web-b".to_string(), node_b.clone())],
        "client a's node gone from every catalog",
    );
    client_a.restart();
    wait_everywhere(
        &cluster,
        "web",
        &both,
        "client a re-synced after its restart",
    );
    let node = cluster.servers[0]
        .get(&format!("/v1/catalog/node/{node_a}?stale"))
        .json();
    assert_eq!(node["Node"]["Address"], client_a.ip.to_string(), "{node}");

    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the cluster test stays within its budget: {:?}",
        started.elapsed()
    );
}
