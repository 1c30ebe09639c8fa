//! The CA configuration and the operator endpoints through a client agent as Consul's typed
//! calls: `/v1/connect/ca/configuration` becomes `ConnectCA.ConfigurationGet` and
//! `ConfigurationSet`, `/v1/operator/raft/configuration` `Operator.RaftGetConfiguration`,
//! `/v1/operator/raft/peer` `Operator.RaftRemovePeerByAddress` / `ByID`, and
//! `/v1/operator/autopilot/{configuration,health,state}` `Operator.AutopilotGetConfiguration`,
//! `AutopilotSetConfiguration`, `ServerHealth` and `AutopilotState`. In a three-server
//! cluster with ACLs, the client agent answers what the leader answers for the same request,
//! and the leader's log shows each typed call it served. An independent msgpack-rpc client
//! (`tests/python/operator_rpc.py`) calls the methods on a server's port in Consul's shapes.

use crate::acl_common;
use crate::common;

use acl_common::{call, token_with_rules, wait_for_token};
use common::{Agent, Cluster, HttpResponse, TempDir};
use serde_json::Value;
use std::time::{Duration, Instant};

const MANAGEMENT: &str = "8f1e2d3c-4b5a-4697-8a7b-6c5d4e3f2a1b";

/// The leader of the cluster, as the first server names it.
fn leader(cluster: &Cluster) -> &Agent {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let named = cluster.servers[0].get("/v1/status/leader").text();
        let ip = named
            .trim_matches('"')
            .rsplit_once(':')
            .map(|(ip, _)| ip.to_string());
        if let Some(server) = cluster
            .servers
            .iter()
            .find(|s| Some(s.ip.to_string()) == ip)
        {
            return server;
        }
        assert!(Instant::now() < deadline, "no leader: {named}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sets `field` of every object in `value` (at any depth) to null: the fields that move
/// between two calls made a moment apart.
fn mask(value: &mut Value, fields: &[&str]) {
    match value {
        Value::Object(map) => {
            for (name, inner) in map.iter_mut() {
                if fields.contains(&name.as_str()) {
                    *inner = Value::Null;
                } else {
                    mask(inner, fields);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| mask(item, fields)),
        _ => {}
    }
}

/// `method path` on the client and on the leader with `token`, until both answer the same
/// status and body, `masked` fields left out of the comparison (bounded: 10 s); the
/// client's answer. Byte for byte when nothing is masked, with `X-Consul-Index` too.
fn same(
    client: &Agent,
    server: &Agent,
    method: &str,
    path: &str,
    body: &[u8],
    token: Option<&str>,
    masked: &[&str],
) -> HttpResponse {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let asked = call(client, method, path, body, token);
        let direct = call(server, method, path, body, token);
        let same = asked.status == direct.status
            && if masked.is_empty() {
                asked.body == direct.body
                    && asked.header("X-Consul-Index") == direct.header("X-Consul-Index")
            } else {
                let (mut a, mut d) = (asked.json(), direct.json());
                mask(&mut a, masked);
                mask(&mut d, masked);
                a == d
            };
        if same {
            return asked;
        }
        assert!(
            Instant::now() < deadline,
            "{method} {path}: the client answered\n{} {:?}\n{}\nthe leader\n{} {:?}\n{}",
            asked.status,
            asked.headers,
            asked.text(),
            direct.status,
            direct.headers,
            direct.text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_client_agent_reads_and_sets_the_ca_and_autopilot_through_typed_calls() {
    let acl = format!(
        "acl {{\n enabled = true\n default_policy = \"deny\"\n tokens {{\n  initial_management = \"{MANAGEMENT}\"\n  agent = \"{MANAGEMENT}\"\n }}\n}}"
    );
    let cluster = Cluster::spawn(3, &["-hcl", &acl, "-hcl", common::PROMETHEUS_HCL]);
    for server in &cluster.servers {
        server.wait_ready();
        wait_for_token(server, MANAGEMENT);
    }
    let leader = leader(&cluster);
    let data = TempDir::new("operator-calls-client");
    let client = cluster.start_client(&data, &["-hcl", &acl]);
    client.wait_ready();
    let (reader, _, _) = token_with_rules(leader, MANAGEMENT, "op-read", r#"operator = "read""#);
    wait_for_token(&client, &reader);
    let admin = Some(MANAGEMENT);

    // The CA configuration: read, set (a new leaf lifetime, then a new key, which rotates
    // the root on the leader), read again.
    let path = "/v1/connect/ca/configuration";
    let first = same(&client, leader, "GET", path, b"", admin, &[]);
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.json()["Config"]["LeafCertTTL"], "72h");
    same(
        &client,
        leader,
        "GET",
        &format!("{path}?stale"),
        b"",
        admin,
        &[],
    );
    let leaf = br#"{"Provider": "consul", "Config": {"LeafCertTTL": "24h"}}"#;
    let set = call(&client, "PUT", path, leaf, admin);
    assert_eq!((set.status, set.text().as_str()), (200, ""));
    let changed = same(&client, leader, "GET", path, b"", admin, &[]);
    assert_eq!(
        changed.json()["Config"],
        serde_json::json!({"LeafCertTTL": "24h"})
    );
    assert!(changed.json()["ModifyIndex"].as_u64() > first.json()["ModifyIndex"].as_u64());
    let rotate =
        br#"{"Provider": "consul", "Config": {"PrivateKeyType": "ec", "PrivateKeyBits": 384}}"#;
    assert_eq!(call(&client, "PUT", path, rotate, admin).status, 200);
    let roots = call(leader, "GET", "/v1/connect/ca/roots", b"", admin).json();
    assert_eq!(roots["Roots"].as_array().unwrap().len(), 2, "{roots}");
    same(&client, leader, "GET", path, b"", admin, &[]);
    // A blocking read on the client is woken by a write through another agent.
    let index = call(&client, "GET", path, b"", admin)
        .header("X-Consul-Index")
        .unwrap()
        .to_string();
    let waiter = {
        let addr = client.addr();
        let blocked = format!("{path}?index={index}&wait=30s");
        std::thread::spawn(move || {
            common::request(
                addr,
                "GET",
                &blocked,
                b"",
                &[("X-Consul-Token", MANAGEMENT)],
            )
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    assert!(!waiter.is_finished(), "the blocking read answered at once");
    let back = br#"{"Provider": "consul", "Config": {"LeafCertTTL": "48h", "PrivateKeyType": "ec", "PrivateKeyBits": 384}}"#;
    assert_eq!(call(leader, "PUT", path, back, admin).status, 200);
    let woken = waiter.join().unwrap();
    assert_eq!(woken.json()["Config"]["LeafCertTTL"], "48h");
    // Refusals in the leader's words: a token without operator:write, none at all, a body
    // the handler refuses, a provider the server refuses.
    for (body, token) in [
        (&leaf[..], Some(reader.as_str())),
        (&leaf[..], None),
        (&b"{\"Provider\": 7}"[..], admin),
        (&b"{\"Frob\": 1}"[..], admin),
        (&b"{\"Provider\": \"vault\"}"[..], admin),
    ] {
        let (asked, direct) = (
            call(&client, "PUT", path, body, token),
            call(leader, "PUT", path, body, token),
        );
        assert_eq!((asked.status, asked.text()), (direct.status, direct.text()));
        assert_ne!(asked.status, 200, "{}", asked.text());
    }
    assert_eq!(call(&client, "PUT", path, leaf, Some(&reader)).status, 403);
    same(&client, leader, "GET", path, b"", None, &[]);
    assert_eq!(call(&client, "GET", path, b"", None).status, 403);
    same(&client, leader, "GET", path, b"", Some(&reader), &[]);

    // The autopilot configuration: read, check-and-set, plain set.
    let path = "/v1/operator/autopilot/configuration";
    let config = same(&client, leader, "GET", path, b"", admin, &[]).json();
    let modify_index = config["ModifyIndex"].as_u64().unwrap();
    let mut wanted = config.clone();
    wanted["MinQuorum"] = 2.into();
    wanted["ServerStabilizationTime"] = "8s".into();
    let body = wanted.to_string();
    let stale = format!("{path}?cas={}", modify_index - 1);
    let answer = call(&client, "PUT", &stale, body.as_bytes(), admin);
    assert_eq!((answer.status, answer.text().trim()), (200, "false"));
    let cas = format!("{path}?cas={modify_index}");
    let answer = call(&client, "PUT", &cas, body.as_bytes(), admin);
    assert_eq!((answer.status, answer.text().trim()), (200, "true"));
    let config = same(&client, leader, "GET", path, b"", admin, &[]).json();
    assert_eq!(
        (
            config["MinQuorum"].as_u64(),
            config["ServerStabilizationTime"].as_str()
        ),
        (Some(2), Some("8s"))
    );
    let answer = call(&client, "PUT", path, br#"{"MaxTrailingLogs": 300}"#, admin);
    assert_eq!((answer.status, answer.text().trim()), (200, "true"));
    let config = same(
        &client,
        leader,
        "GET",
        &format!("{path}?stale"),
        b"",
        admin,
        &[],
    )
    .json();
    assert_eq!(
        (
            config["MaxTrailingLogs"].as_u64(),
            config["MinQuorum"].as_u64()
        ),
        (Some(300), Some(0))
    );
    for (body, token) in [
        (&br#"{"MinQuorum": 1}"#[..], Some(reader.as_str())),
        (&br#"{"MinQuorum": "x"}"#[..], admin),
    ] {
        let (asked, direct) = (
            call(&client, "PUT", path, body, token),
            call(leader, "PUT", path, body, token),
        );
        assert_eq!((asked.status, asked.text()), (direct.status, direct.text()));
        assert_ne!(asked.status, 200, "{}", asked.text());
    }
    assert_eq!(call(&client, "PUT", path, b"{}", Some(&reader)).status, 403);
    assert_eq!(
        same(&client, leader, "GET", path, b"", None, &[]).status,
        403
    );

    for method in [
        "ConnectCA.ConfigurationGet",
        "ConnectCA.ConfigurationSet",
        "Operator.AutopilotGetConfiguration",
        "Operator.AutopilotSetConfiguration",
    ] {
        common::wait_for_log(leader, &[&format!("rpc: call {method}")]);
    }
}

#[test]
fn a_client_agent_reads_the_raft_configuration_and_autopilots_view_through_typed_calls() {
    let acl = format!(
        "acl {{\n enabled = true\n default_policy = \"deny\"\n tokens {{\n  initial_management = \"{MANAGEMENT}\"\n  agent = \"{MANAGEMENT}\"\n }}\n}}"
    );
    let cluster = Cluster::spawn(3, &["-hcl", &acl, "-hcl", common::PROMETHEUS_HCL]);
    for server in &cluster.servers {
        server.wait_ready();
        wait_for_token(server, MANAGEMENT);
    }
    let leader = leader(&cluster);
    let data = TempDir::new("operator-raft-client");
    let client = cluster.start_client(&data, &["-hcl", &acl]);
    client.wait_ready();
    let (reader, _, _) = token_with_rules(leader, MANAGEMENT, "op-read", r#"operator = "read""#);
    wait_for_token(&client, &reader);
    let admin = Some(MANAGEMENT);
    // Autopilot judges every server healthy once they have been stable a while.
    let deadline = Instant::now() + Duration::from_secs(30);
    while call(leader, "GET", "/v1/operator/autopilot/health", b"", admin).status != 200 {
        assert!(
            Instant::now() < deadline,
            "the servers never became healthy"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // `LastIndex` is the leader's last log index, which moves with every write the cluster
    // makes (anti-entropy, sessions, …) between the client's call and the leader's.
    let raft = same(
        &client,
        leader,
        "GET",
        "/v1/operator/raft/configuration",
        b"",
        Some(&reader),
        &["LastIndex"],
    )
    .json();
    let servers = raft["Servers"].as_array().unwrap();
    assert_eq!(servers.len(), 3, "{raft}");
    assert_eq!(
        servers.iter().filter(|s| s["Leader"] == true).count(),
        1,
        "{raft}"
    );
    assert!(
        servers
            .iter()
            .all(|s| s["Voter"] == true && s["ProtocolVersion"] == "3"),
        "{raft}"
    );
    same(
        &client,
        leader,
        "GET",
        "/v1/operator/raft/configuration?stale",
        b"",
        admin,
        &["LastIndex"],
    );
    assert_eq!(
        same(
            &client,
            leader,
            "GET",
            "/v1/operator/raft/configuration",
            b"",
            None,
            &[]
        )
        .status,
        403
    );

    // Autopilot's view: `LastContact` (time since the leader last heard from a server) and
    // `LastIndex` (its log) move from one call to the next; the rest is the same.
    let moving = ["LastContact", "LastIndex"];
    let health = same(
        &client,
        leader,
        "GET",
        "/v1/operator/autopilot/health",
        b"",
        Some(&reader),
        &moving,
    );
    assert_eq!(health.status, 200, "{}", health.text());
    let health = health.json();
    assert_eq!(
        (
            health["Healthy"].as_bool(),
            health["FailureTolerance"].as_u64()
        ),
        (Some(true), Some(1))
    );
    assert_eq!(health["Servers"].as_array().unwrap().len(), 3);
    let state = same(
        &client,
        leader,
        "GET",
        "/v1/operator/autopilot/state",
        b"",
        admin,
        &moving,
    )
    .json();
    assert_eq!(state["Voters"].as_array().unwrap().len(), 3, "{state}");
    assert_eq!(
        state["Servers"][state["Leader"].as_str().unwrap()]["Status"],
        "leader",
        "{state}"
    );
    for path in [
        "/v1/operator/autopilot/health",
        "/v1/operator/autopilot/state",
    ] {
        assert_eq!(
            same(&client, leader, "GET", path, b"", None, &[]).status,
            403
        );
    }

    // Removing a peer the configuration does not hold: Consul's error, from the leader.
    for path in [
        "/v1/operator/raft/peer?address=10.9.9.9:8300",
        "/v1/operator/raft/peer?id=no-such-server",
    ] {
        let (asked, direct) = (
            call(&client, "DELETE", path, b"", admin),
            call(leader, "DELETE", path, b"", admin),
        );
        assert_eq!(
            (asked.status, asked.text()),
            (direct.status, direct.text()),
            "{path}"
        );
        assert_eq!(asked.status, 500, "{}", asked.text());
    }
    let missing = call(
        &client,
        "DELETE",
        "/v1/operator/raft/peer?address=10.9.9.9:8300",
        b"",
        admin,
    );
    assert_eq!(
        missing.text(),
        "address \"10.9.9.9:8300\" was not found in the Raft configuration"
    );
    // Without operator:write, refused by the server; without a peer, by the client itself.
    let denied = call(
        &client,
        "DELETE",
        "/v1/operator/raft/peer?address=10.9.9.9:8300",
        b"",
        Some(&reader),
    );
    assert_eq!(denied.status, 403, "{}", denied.text());
    let (asked, direct) = (
        call(&client, "DELETE", "/v1/operator/raft/peer", b"", admin),
        call(leader, "DELETE", "/v1/operator/raft/peer", b"", admin),
    );
    assert_eq!((asked.status, asked.text()), (direct.status, direct.text()));
    assert_eq!(asked.status, 400);
    assert_eq!(
        call(leader, "GET", "/v1/operator/raft/configuration", b"", admin).json()["Servers"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    for method in [
        "Operator.RaftGetConfiguration",
        "Operator.ServerHealth",
        "Operator.AutopilotState",
        "Operator.RaftRemovePeerByAddress",
        "Operator.RaftRemovePeerByID",
    ] {
        common::wait_for_log(leader, &[&format!("rpc: call {method}")]);
    }
}

#[test]
fn an_independent_client_calls_the_operator_methods_on_the_server_port() {
    let agent = Agent::dev(&[]);
    let script = "operator_rpc.py";
    // Autopilot's first judgement and the CA's first configuration come a moment after the
    // leader does.
    let deadline = Instant::now() + Duration::from_secs(20);
    while agent.get("/v1/operator/autopilot/health").status != 200
        || agent.get("/v1/connect/ca/configuration").status != 200
    {
        assert!(
            Instant::now() < deadline,
            "autopilot or the CA never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    common::run_python(script, &[&agent.ip.to_string()], &[&agent]);
}
