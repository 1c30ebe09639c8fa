//! ACLs across a real cluster: three server processes and a client agent on loopback, with
//! `default_policy = "deny"`, driven over plain HTTP with tokens the way Consul's clients
//! send them.
//!
//! Shows: anonymous KV, catalog and agent calls are denied (lists come back empty); a
//! `key_prefix "app/"` policy allows writes there only, also through the client agent,
//! which forwards the caller's token; recursive reads and catalog lists are filtered; a
//! snapshot needs management; bootstrap is refused once the cluster is bootstrapped; a
//! policy change takes effect on the next request on every server and every shard; the
//! client agent resolves tokens through its servers and syncs its services with its agent
//! token, or with the token a service was registered with, also after a `kill -9` and a
//! restart; tokens and policies survive a leader kill and a restore from a snapshot.

use crate::acl_common;
use crate::common;

use acl_common::{as_token, call, token_with_rules};
use common::{fresh_loopback, try_request, Agent, Cluster, HttpResponse, TempDir};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const MANAGEMENT: &str = "7e1d2c3b-3333-4e7a-9c59-0123456789ab";
const FILTERED: &str = "X-Consul-Results-Filtered-By-ACLs";

fn acl_hcl() -> String {
    format!(
        "acl {{\n enabled = true\n default_policy = \"deny\"\n tokens {{\n  initial_management = \"{MANAGEMENT}\"\n  agent = \"{MANAGEMENT}\"\n }}\n}}"
    )
}

/// Starts three servers as `Cluster::start` does, with ACLs on; the harness's own leader
/// probe reads a key anonymously, which default deny refuses, so this waits with the
/// management token instead.
fn start_cluster() -> Cluster {
    let ips: Vec<_> = (0..3).map(|_| fresh_loopback()).collect();
    let mut servers = Vec::new();
    let mut data = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        let dir = TempDir::new(&format!("acl-cluster{i}"));
        let args: Vec<String> = [
            "agent",
            "-server",
            "-bootstrap-expect",
            "3",
            "-node",
            &format!("s{i}-{ip}"),
            "-bind",
            &ip.to_string(),
            "-client",
            &ip.to_string(),
            "-data-dir",
            dir.path().to_str().unwrap(),
            "-retry-join",
            &ips[0].to_string(),
            "-dns-port=-1",
            "-hcl",
            &acl_hcl(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        servers.push(Agent::spawn(*ip, 8500, args));
        data.push(dir);
    }
    let cluster = Cluster { servers, data };
    wait_for_acl_leader(&cluster, Duration::from_secs(60));
    cluster
}

/// The serving leader, once the leader has created the management token: index of the
/// server every running server names.
fn acl_leader(cluster: &Cluster) -> Option<usize> {
    // Servers still starting refuse connections: not an answer yet.
    let ask = |agent: &Agent, path: &str, token: &[(&str, &str)]| {
        try_request(agent.addr(), "GET", path, b"", token).ok()
    };
    let mut leader = None;
    for server in cluster.servers.iter().filter(|s| s.child.is_some()) {
        let named = ask(server, "/v1/status/leader?stale", &[])?.text();
        let named = named.trim_matches('"').to_string();
        if named.is_empty() || leader.as_ref().is_some_and(|l| *l != named) {
            return None;
        }
        leader = Some(named);
    }
    let ip: std::net::IpAddr = leader?.rsplit_once(':')?.0.parse().ok()?;
    let index = cluster
        .servers
        .iter()
        .position(|s| s.ip == ip && s.child.is_some())?;
    let probe = ask(
        &cluster.servers[index],
        "/v1/kv/__probe",
        &[("X-Consul-Token", MANAGEMENT)],
    )?;
    (probe.status == 404).then_some(index)
}

fn wait_for_acl_leader(cluster: &Cluster, timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(leader) = acl_leader(cluster) {
            return leader;
        }
        assert!(
            Instant::now() < deadline,
            "no serving leader with ACLs within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls `check` (bounded) until it holds.
fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn ok_json(agent: &Agent, method: &str, path: &str, body: Value) -> Value {
    as_token(agent, MANAGEMENT, method, path, body)
}

/// A token whose only policy has `rules`: (SecretID, policy ID).
fn token_for(agent: &Agent, name: &str, rules: &str) -> (String, String) {
    let (secret, _, policy) = token_with_rules(agent, MANAGEMENT, name, rules);
    (secret, policy)
}

fn keys(response: &HttpResponse) -> Vec<String> {
    response
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Key"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn acls_hold_across_servers_a_client_agent_a_leader_kill_and_a_restore() {
    let mut cluster = start_cluster();
    let leader = wait_for_acl_leader(&cluster, Duration::from_secs(30));
    let follower = (leader + 1) % 3;
    let server = &cluster.servers[follower];

    // Bootstrapped by the initial management token: a bootstrap is refused.
    let bootstrap = call(server, "PUT", "/v1/acl/bootstrap", b"", None);
    assert_eq!(bootstrap.status, 403, "{}", bootstrap.text());
    assert!(
        bootstrap.text().contains("ACL bootstrap no longer allowed"),
        "{}",
        bootstrap.text()
    );

    // Default deny: anonymous writes and agent reads are refused, lists come back empty.
    assert_eq!(call(server, "PUT", "/v1/kv/app/a", b"1", None).status, 403);
    assert_eq!(call(server, "GET", "/v1/agent/self", b"", None).status, 403);
    let nodes = call(server, "GET", "/v1/catalog/nodes", b"", None);
    assert_eq!((nodes.status, nodes.json()), (200, json!([])));

    // A key_prefix policy allows writes under its prefix only.
    let (writer, writer_policy) = token_for(
        server,
        "app-writer",
        "key_prefix \"app/\" {\n  policy = \"write\"\n}",
    );
    let allowed = call(server, "PUT", "/v1/kv/app/a", b"1", Some(&writer));
    assert_eq!(allowed.status, 200, "{}", allowed.text());
    let other = call(server, "PUT", "/v1/kv/other/b", b"2", Some(&writer));
    assert_eq!(other.status, 403, "{}", other.text());
    assert!(
        other
            .text()
            .contains("lacks permission 'key:write' on \"other/b\""),
        "{}",
        other.text()
    );
    ok_json(server, "PUT", "/v1/kv/other/b", json!("2"));
    // Recursive reads are filtered.
    let listed = call(server, "GET", "/v1/kv/?recurse", b"", Some(&writer));
    assert_eq!(keys(&listed), vec!["app/a"]);
    assert_eq!(listed.header(FILTERED), Some("true"));
    // Catalog lists are filtered by node and service read.
    let first_node = format!("s0-{}", cluster.servers[0].ip);
    let (reader, _) = token_for(
        server,
        "one-node",
        &format!("node \"{first_node}\" {{\n  policy = \"read\"\n}}\nservice \"consul\" {{\n  policy = \"read\"\n}}"),
    );
    eventually(
        "the servers are in the catalog",
        Duration::from_secs(30),
        || {
            ok_json(server, "GET", "/v1/catalog/nodes", json!(null))
                .as_array()
                .map_or(0, Vec::len)
                >= 3
        },
    );
    let nodes = call(server, "GET", "/v1/catalog/nodes", b"", Some(&reader));
    let names: Vec<String> = nodes
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["Node"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec![first_node.clone()]);
    assert_eq!(nodes.header(FILTERED), Some("true"));
    let instances = call(
        server,
        "GET",
        "/v1/catalog/service/consul",
        b"",
        Some(&reader),
    );
    assert_eq!(
        instances.json().as_array().unwrap().len(),
        1,
        "{}",
        instances.text()
    );
    // Snapshots need management.
    assert_eq!(
        call(server, "GET", "/v1/snapshot", b"", Some(&writer)).status,
        403
    );

    // A client agent: it forwards the caller's token, resolves the tokens of what it
    // answers itself through its servers, and syncs with its agent token.
    let client_data = TempDir::new("acl-client");
    // Its ACL settings come from a config dir, rewritten before the restart below.
    let client_config = TempDir::new("acl-client-config");
    let client_acl_file = client_config.path().join("acl.hcl");
    std::fs::write(&client_acl_file, acl_hcl()).unwrap();
    let mut client = cluster.start_client(
        &client_data,
        &["-config-dir", client_config.path().to_str().unwrap()],
    );
    client.wait_ready();
    let client_node = format!("client-{}", client.ip);
    eventually("the client joined", Duration::from_secs(30), || {
        call(&client, "GET", "/v1/agent/self", b"", Some(MANAGEMENT)).status == 200
    });
    assert_eq!(
        call(&client, "GET", "/v1/agent/self", b"", None).status,
        403
    );
    assert_eq!(
        call(&client, "GET", "/v1/agent/self", b"", Some("no-such-token")).text(),
        "ACL not found"
    );
    assert_eq!(
        call(&client, "PUT", "/v1/kv/app/c", b"3", Some(&writer)).status,
        200
    );
    assert_eq!(
        call(&client, "PUT", "/v1/kv/other/c", b"3", Some(&writer)).status,
        403
    );
    assert_eq!(
        keys(&call(&client, "GET", "/v1/kv/?recurse", b"", Some(&writer))),
        vec!["app/a", "app/c"]
    );
    // Its own agent token, set at runtime: write on its node and the services it runs.
    let (agent_token, _) = token_for(
        server,
        "client-agent",
        &format!("node \"{client_node}\" {{\n  policy = \"write\"\n}}\nservice_prefix \"\" {{\n  policy = \"write\"\n}}"),
    );
    let set = call(
        &client,
        "PUT",
        "/v1/agent/token/agent",
        json!({"Token": agent_token}).to_string().as_bytes(),
        Some(MANAGEMENT),
    );
    assert_eq!(set.status, 200, "{}", set.text());
    let register = call(
        &client,
        "PUT",
        "/v1/agent/service/register",
        br#"{"Name":"web","Port":80}"#,
        Some(MANAGEMENT),
    );
    assert_eq!(register.status, 200, "{}", register.text());
    eventually(
        "anti-entropy synced the client's service",
        Duration::from_secs(30),
        || {
            ok_json(server, "GET", "/v1/catalog/service/web", json!(null))
                .as_array()
                .is_some_and(|a| a.iter().any(|i| i["Node"] == json!(client_node)))
        },
    );

    // A service registered with its own token keeps it across a restart of the client:
    // after `kill -9`, with the service gone from the catalog and an agent token that may
    // write only the node, the restarted client syncs the service with the token it was
    // registered with (as Consul persists service tokens), or not at all.
    let (api_token, _) = token_for(
        server,
        "api-owner",
        "service \"api\" {\n  policy = \"write\"\n}",
    );
    let register = call(
        &client,
        "PUT",
        "/v1/agent/service/register",
        br#"{"Name":"api","Port":81}"#,
        Some(&api_token),
    );
    assert_eq!(register.status, 200, "{}", register.text());
    let api_in_catalog = || {
        ok_json(server, "GET", "/v1/catalog/service/api", json!(null))
            .as_array()
            .is_some_and(|a| a.iter().any(|i| i["Node"] == json!(client_node)))
    };
    eventually(
        "the api service synced",
        Duration::from_secs(30),
        api_in_catalog,
    );
    let (node_only, _) = token_for(
        server,
        "client-node-only",
        &format!("node \"{client_node}\" {{\n  policy = \"write\"\n}}"),
    );
    client.kill9();
    std::fs::write(
        &client_acl_file,
        format!(
            "acl {{\n enabled = true\n default_policy = \"deny\"\n tokens {{\n  agent = \"{node_only}\"\n }}\n}}"
        ),
    )
    .unwrap();
    ok_json(
        server,
        "PUT",
        "/v1/catalog/deregister",
        json!({"Node": client_node, "ServiceID": "api"}),
    );
    assert!(!api_in_catalog(), "the deregistration took effect");
    client.restart();
    client.wait_ready();
    eventually(
        "the restarted client synced api with its persisted token",
        Duration::from_secs(30),
        api_in_catalog,
    );

    // A policy change takes effect on the next request, on every server and shard (new
    // connections spread over the shards).
    ok_json(
        server,
        "PUT",
        &format!("/v1/acl/policy/{writer_policy}"),
        json!({"Name": "app-writer", "Rules": "key_prefix \"app/\" {\n  policy = \"read\"\n}"}),
    );
    for agent in cluster.servers.iter().chain([&client]) {
        for _ in 0..8 {
            let denied = call(agent, "PUT", "/v1/kv/app/d", b"4", Some(&writer));
            assert_eq!(denied.status, 403, "{}: {}", agent.ip, denied.text());
        }
    }
    ok_json(
        server,
        "PUT",
        &format!("/v1/acl/policy/{writer_policy}"),
        json!({"Name": "app-writer", "Rules": "key_prefix \"app/\" {\n  policy = \"write\"\n}"}),
    );

    // Tokens and policies survive a leader kill.
    cluster.servers[leader].kill9();
    let new_leader = wait_for_acl_leader(&cluster, Duration::from_secs(60));
    assert_ne!(new_leader, leader);
    let survivor = &cluster.servers[new_leader];
    assert_eq!(
        call(survivor, "PUT", "/v1/kv/app/e", b"5", Some(&writer)).status,
        200
    );
    assert_eq!(
        call(survivor, "PUT", "/v1/kv/other/e", b"5", Some(&writer)).status,
        403
    );

    // ... and a restore from a snapshot: a token deleted after the snapshot comes back.
    let (later, _) = token_for(
        survivor,
        "later",
        "key_prefix \"app/\" {\n  policy = \"read\"\n}",
    );
    let snapshot = call(survivor, "GET", "/v1/snapshot", b"", Some(MANAGEMENT));
    assert_eq!(snapshot.status, 200);
    let self_of_later = call(survivor, "GET", "/v1/acl/token/self", b"", Some(&later));
    let accessor = self_of_later.json()["AccessorID"]
        .as_str()
        .unwrap()
        .to_string();
    ok_json(
        survivor,
        "DELETE",
        &format!("/v1/acl/token/{accessor}"),
        json!(null),
    );
    assert_eq!(
        call(survivor, "GET", "/v1/kv/app/a", b"", Some(&later)).text(),
        "ACL not found"
    );
    let restored = call(
        survivor,
        "PUT",
        "/v1/snapshot",
        &snapshot.body,
        Some(MANAGEMENT),
    );
    assert_eq!(restored.status, 200, "{}", restored.text());
    eventually(
        "the restored token works again",
        Duration::from_secs(30),
        || call(survivor, "GET", "/v1/kv/app/a", b"", Some(&later)).status == 200,
    );
    assert_eq!(
        call(survivor, "PUT", "/v1/kv/app/f", b"6", Some(&later)).status,
        403
    );
}
