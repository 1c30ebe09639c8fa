//! Consul's RPC on the server port, spoken by an independent client: a Python script
//! (`tests/python/consul_rpc.py`, the `msgpack` package and the standard library only,
//! written from Consul's documented wire and structs) against a real agent. It calls
//! `Status.*`, `KVS.Apply`/`KVS.Get` (a blocking `MinQueryIndex` wait woken by a write on
//! another connection), `Catalog.Register`, `Health.ServiceNodes`, `Session.Apply`, over
//! byte 0 and over byte 4 with its own yamux (two streams at once), and over TLS with
//! `verify_incoming`; unknown methods get net/rpc's words; garbage after the first byte
//! closes the connection and the server keeps serving. A follower hands writes and
//! default reads (blocking ones too) to the leader, and serves stale reads itself. With ACLs
//! on, a call is as good as its `Token`.
//!
//! A missing interpreter or module is a failure, not a skip: `tests/run.sh` installs them.

use crate::common;

use common::{Agent, Cluster, TempDir};
use std::process::Command;

fn run_client(args: &[&str], agent: &Agent) {
    run_client_of(args, std::slice::from_ref(agent));
}

/// Runs the client; on failure shows the logs of `agents`.
fn run_client_of(args: &[&str], agents: &[Agent]) {
    let agents: Vec<&Agent> = agents.iter().collect();
    common::run_python("consul_rpc.py", args, &agents);
}

#[test]
fn an_independent_client_speaks_consuls_rpc_over_byte_0_and_yamux() {
    let agent = Agent::dev(&[]);
    run_client(&["plain", &agent.ip.to_string()], &agent);
}

#[test]
fn an_independent_client_speaks_consuls_rpc_over_tls_with_verify_incoming() {
    let (_pki, agent, client_args) =
        super::verify_incoming_dev_agent("auto_encrypt { allow_tls = true }");
    let args: Vec<&str> = client_args.iter().map(String::as_str).collect();
    run_client(&args, &agent);
}

#[test]
fn a_follower_hands_typed_calls_to_the_leader() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_for_leader(std::time::Duration::from_secs(30));
    let follower = (leader + 1) % cluster.servers.len();
    run_client_of(
        &[
            "follower",
            &cluster.servers[follower].ip.to_string(),
            &cluster.servers[leader].ip.to_string(),
        ],
        &cluster.servers,
    );
}

#[test]
fn a_follower_servers_anti_entropy_registers_on_the_leader_through_typed_calls() {
    let cluster = Cluster::start(3, &[]);
    let leader_index = cluster.wait_for_leader(std::time::Duration::from_secs(30));
    let (leader, follower) = (
        &cluster.servers[leader_index],
        &cluster.servers[(leader_index + 1) % cluster.servers.len()],
    );
    let registered = follower.put(
        "/v1/agent/service/register",
        br#"{"Name": "on-follower", "ID": "on-follower-1", "Port": 7000,
             "Check": {"TTL": "30s"}}"#,
    );
    assert_eq!(registered.status, 200, "{}", registered.text());
    // The follower's anti-entropy reaches the leader as Catalog.Register: the service and
    // its check land in the catalog.
    wait_for_log(leader, &["rpc: call Catalog.Register"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let health = leader.get("/v1/health/service/on-follower").json();
        if health[0]["Checks"]
            .as_array()
            .is_some_and(|checks| checks.iter().any(|c| c["ServiceID"] == "on-follower-1"))
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{health}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // And a deregistration as Catalog.Deregister.
    let removed = follower.put("/v1/agent/service/deregister/on-follower-1", b"");
    assert_eq!(removed.status, 200, "{}", removed.text());
    wait_for_log(leader, &["rpc: call Catalog.Deregister"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while leader.get("/v1/catalog/service/on-follower").text() != "[]" {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn typed_calls_are_checked_against_their_tokens() {
    const MANAGEMENT: &str = "9b3ea15e-8a1c-4a55-8dd5-07c1a2e9c0a1";
    let acl = format!(
        "acl {{ enabled = true\n default_policy = \"deny\"\n tokens {{ initial_management = \"{MANAGEMENT}\" }} }}"
    );
    let agent = Agent::dev(&["-hcl", &acl]);
    run_client(&["acl", &agent.ip.to_string(), MANAGEMENT], &agent);
}

/// Two datacenters of one server each, dc2 WAN-joined to dc1, and a client agent in dc1
/// (its data in a directory named after `name`); `dc1_extra` goes to dc1's agents.
pub(super) struct TwoDatacenters {
    pub dc1: Cluster,
    pub dc2: Cluster,
    pub client: Agent,
    _data: TempDir,
}

impl TwoDatacenters {
    pub(super) fn start(name: &str, dc1_extra: &[&str]) -> TwoDatacenters {
        TwoDatacenters::start_with(name, dc1_extra, &[])
    }

    /// [`TwoDatacenters::start`], `dc2_extra` going to dc2's server.
    pub(super) fn start_with(name: &str, dc1_extra: &[&str], dc2_extra: &[&str]) -> TwoDatacenters {
        let dc1_args = [&["-datacenter", "dc1"], dc1_extra].concat();
        let dc1 = Cluster::start(1, &dc1_args);
        let join_wan = format!("retry_join_wan = [\"{}\"]", dc1.servers[0].ip);
        let dc2_args = [&["-datacenter", "dc2", "-hcl", &join_wan], dc2_extra].concat();
        let dc2 = Cluster::start(1, &dc2_args);
        let data = TempDir::new(name);
        let client = dc1.start_client(&data, &dc1_args);
        client.wait_ready();
        TwoDatacenters {
            dc1,
            dc2,
            client,
            _data: data,
        }
    }
}

pub(super) use common::wait_for_log;

#[test]
fn a_client_agent_serves_kv_through_typed_calls() {
    let cluster = Cluster::start(1, &[]);
    let data = TempDir::new("consul-rpc-client");
    let client = cluster.start_client(&data, &[]);
    client.wait_ready();
    let server = &cluster.servers[0];
    assert_eq!(client.put("/v1/kv/typed/a", b"one").text(), "true");
    assert_eq!(client.get("/v1/kv/typed/a?raw").text(), "one");
    // The server saw a yamux session (the client's outbound address is not its own): the
    // typed path, not forwarded HTTP, which uses praetor's frames.
    wait_for_log(server, &["rpc: yamux session from"]);
    let entry = client.get("/v1/kv/typed/a").json();
    assert_eq!(entry[0]["Key"], "typed/a");
    assert_eq!(entry[0]["Value"], "b25l");
    let index: u64 = entry[0]["ModifyIndex"].as_u64().unwrap();
    // CAS with a stale index is refused, with the current one applied.
    assert_eq!(client.put("/v1/kv/typed/a?cas=1", b"two").text(), "false");
    let cas = format!("/v1/kv/typed/a?cas={index}");
    assert_eq!(client.put(&cas, b"two").text(), "true");
    assert_eq!(server.get("/v1/kv/typed/a?raw").text(), "two");
    assert_eq!(
        client.put("/v1/kv/typed/b/c?flags=42", b"three").text(),
        "true"
    );
    let keys = client.get("/v1/kv/typed/?keys&separator=/").json();
    assert_eq!(keys, serde_json::json!(["typed/a", "typed/b/"]));
    let listed = client.get("/v1/kv/typed/?recurse").json();
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert_eq!(listed[1]["Flags"], 42);
    let missing = client.get("/v1/kv/typed/nothing");
    assert_eq!(missing.status, 404);
    assert!(missing.header("X-Consul-Index").is_some());
    // A blocking read on the client is woken by a write on the server.
    let head = client.get("/v1/kv/typed/a");
    let index = head.header("X-Consul-Index").unwrap().to_string();
    let blocked_path = format!("/v1/kv/typed/a?index={index}&wait=30s");
    let waiter = {
        let addr = client.addr();
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            let reply = common::request(addr, "GET", &blocked_path, b"", &[]);
            (reply, started.elapsed())
        })
    };
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(!waiter.is_finished(), "the blocking read answered at once");
    assert_eq!(server.put("/v1/kv/typed/a", b"four").text(), "true");
    let (woken, elapsed) = waiter.join().unwrap();
    assert_eq!(woken.status, 200);
    assert!(elapsed < std::time::Duration::from_secs(15), "{elapsed:?}");
    assert_eq!(woken.json()[0]["Value"], "Zm91cg==");
    // Deletes: a stale delete-cas is refused, a tree goes at once.
    assert_eq!(client.delete("/v1/kv/typed/a?cas=1").text(), "false");
    assert_eq!(client.delete("/v1/kv/typed?recurse").text(), "true");
    assert_eq!(server.get("/v1/kv/typed/b/c").status, 404);
}

#[test]
fn another_datacenters_kv_is_read_through_typed_calls() {
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start("consul-rpc-dc-client", &[]);
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    assert_eq!(remote.put("/v1/kv/far/a", b"away").text(), "true");
    assert_eq!(remote.put("/v1/kv/far/b/c", b"deeper").text(), "true");
    // Until the WAN pool has converged, dc1 has no path to dc2.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while server.get("/v1/kv/far/a?dc=dc2&raw").status != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "dc1 never reached dc2"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for agent in [server, client] {
        assert_eq!(agent.get("/v1/kv/far/a?dc=dc2&raw").text(), "away");
        let entry = agent.get("/v1/kv/far/a?dc=DC2").json();
        assert_eq!(entry[0]["Value"], "YXdheQ==", "{entry}");
        let keys = agent.get("/v1/kv/far/?dc=dc2&keys&separator=/").json();
        assert_eq!(keys, serde_json::json!(["far/a", "far/b/"]));
        let tree = agent.get("/v1/kv/far?dc=dc2&recurse").json();
        assert_eq!(tree.as_array().unwrap().len(), 2);
        assert_eq!(agent.get("/v1/kv/far/nothing?dc=dc2").status, 404);
        // dc1 itself holds none of it.
        assert_eq!(agent.get("/v1/kv/far/a").status, 404);
        let unknown = agent.get("/v1/kv/far/a?dc=dc9");
        assert_eq!(
            (unknown.status, unknown.text()),
            (500, "No path to datacenter".to_string())
        );
    }
}

#[test]
fn a_client_agent_asks_its_server_who_leads_through_typed_calls() {
    let cluster = Cluster::start(1, &[]);
    let data = TempDir::new("consul-rpc-client-status");
    let client = cluster.start_client(&data, &[]);
    client.wait_ready();
    let server = &cluster.servers[0];
    let leader = server.get("/v1/status/leader").json();
    let prefix = format!("{}:", server.ip);
    assert!(leader.as_str().unwrap().starts_with(&prefix), "{leader}");
    for path in [
        "/v1/status/leader",
        "/v1/status/peers",
        "/v1/catalog/datacenters",
    ] {
        let (asked, direct) = (client.get(path), server.get(path));
        assert_eq!((asked.status, direct.status), (200, 200), "{path}");
        assert_eq!(asked.json(), direct.json(), "{path}");
    }
    assert_eq!(
        client.get("/v1/catalog/datacenters").json(),
        serde_json::json!(["dc1"])
    );
    // Only typed calls open yamux sessions on a server; nothing else of this client did.
    wait_for_log(server, &["rpc: yamux session from"]);
}

/// `path` on the client and on its server, until both answer the same (the client's own
/// registration may still be moving the catalog); bounded: 10 s.
fn same_answer(client: &Agent, server: &Agent, path: &str) -> common::HttpResponse {
    same_answers(client, path, server, path)
}

/// `asked_path` on `client` and `direct_path` on `server`, until both answer the same;
/// bounded: 10 s.
fn same_answers(
    client: &Agent,
    asked_path: &str,
    server: &Agent,
    direct_path: &str,
) -> common::HttpResponse {
    let path = asked_path;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (asked, direct) = (client.get(asked_path), server.get(direct_path));
        let same = asked.status == direct.status
            && asked.body == direct.body
            && asked.header("X-Consul-Index") == direct.header("X-Consul-Index")
            && asked.header("X-Consul-KnownLeader") == direct.header("X-Consul-KnownLeader")
            && asked.header("X-Consul-LastContact").is_some()
            && asked.header("X-Consul-Results-Filtered-By-ACLs")
                == direct.header("X-Consul-Results-Filtered-By-ACLs");
        if same {
            return asked;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{path}: the client answered\n{} {:?}\n{}\nthe server\n{} {:?}\n{}",
            asked.status,
            asked.headers,
            asked.text(),
            direct.status,
            direct.headers,
            direct.text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Waits until `agent` answers `path` with 200 (bounded: 30 s) and returns the answer.
fn eventually_ok(agent: &Agent, method: &str, path: &str, body: &[u8]) -> common::HttpResponse {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let answer = common::request(agent.addr(), method, path, body, &[]);
        if answer.status == 200 {
            return answer;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{method} {path}: {} {}",
            answer.status,
            answer.text()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn a_client_agent_manages_sessions_through_typed_calls() {
    let cluster = Cluster::start(1, &[]);
    let data = TempDir::new("consul-rpc-client-session");
    let client = cluster.start_client(&data, &[]);
    client.wait_ready();
    let server = &cluster.servers[0];
    let node = client.get("/v1/agent/self").json()["Config"]["NodeName"]
        .as_str()
        .unwrap()
        .to_string();
    // The create names the client's node and its serfHealth check, which exist once the
    // client's registration reached the catalog.
    let created = eventually_ok(
        &client,
        "PUT",
        "/v1/session/create",
        br#"{"Name": "typed", "TTL": "30s", "Behavior": "delete"}"#,
    );
    let id = created.json()["ID"].as_str().unwrap().to_string();
    wait_for_log(server, &["rpc: call Session.Apply"]);
    let info = same_answer(&client, server, &format!("/v1/session/info/{id}"));
    let session = &info.json()[0];
    assert_eq!(session["Node"], node.as_str());
    assert_eq!(session["Behavior"], "delete");
    assert_eq!(session["NodeChecks"], serde_json::json!(["serfHealth"]));
    wait_for_log(server, &["rpc: call Session.Get"]);
    let of_node = same_answer(&client, server, &format!("/v1/session/node/{node}"));
    assert_eq!(of_node.json()[0]["ID"], id.as_str());
    wait_for_log(server, &["rpc: call Session.NodeSessions"]);
    let listed = same_answer(&client, server, "/v1/session/list");
    assert_eq!(listed.json().as_array().unwrap().len(), 1);
    wait_for_log(server, &["rpc: call Session.List"]);
    // A renewal answers the session, as the server's own endpoint does.
    let renew = format!("/v1/session/renew/{id}");
    let renewed = client.put(&renew, b"");
    assert_eq!(renewed.status, 200, "{}", renewed.text());
    assert_eq!(renewed.body, server.put(&renew, b"").body);
    wait_for_log(server, &["rpc: call Session.Renew"]);
    // The server refuses what it refuses for its own callers, in the same words.
    for body in [
        &br#"{"Behavior": "frob"}"#[..],
        br#"{"TTL": "1s"}"#,
        br#"{"Node": "no-such-node"}"#,
    ] {
        let (asked, direct) = (
            client.put("/v1/session/create", body),
            server.put("/v1/session/create", body),
        );
        assert_eq!(
            (asked.status, asked.text()),
            (direct.status, direct.text()),
            "{}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(asked.status, 500);
    }
    // A blocking read of the session is woken by its destruction.
    let index = info.header("X-Consul-Index").unwrap().to_string();
    let blocked_path = format!("/v1/session/info/{id}?index={index}&wait=30s");
    let waiter = {
        let addr = client.addr();
        std::thread::spawn(move || common::request(addr, "GET", &blocked_path, b"", &[]))
    };
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(!waiter.is_finished(), "the blocking read answered at once");
    let destroy = format!("/v1/session/destroy/{id}");
    assert_eq!(client.put(&destroy, b"").text(), "true");
    let woken = waiter.join().unwrap();
    assert_eq!(woken.status, 200);
    assert_eq!(woken.text(), "[]");
    // Gone: destroying again is still true; renewing is Consul's 404.
    assert_eq!(client.put(&destroy, b"").text(), "true");
    let (asked, direct) = (client.put(&renew, b""), server.put(&renew, b""));
    assert_eq!((asked.status, asked.text()), (direct.status, direct.text()));
    assert_eq!(asked.status, 404);
}

#[test]
fn a_client_agent_runs_transactions_through_typed_calls() {
    let cluster = Cluster::start(1, &[]);
    let data = TempDir::new("consul-rpc-client-txn");
    let client = cluster.start_client(&data, &[]);
    client.wait_ready();
    let server = &cluster.servers[0];
    let same = |body: &str| {
        let (asked, direct) = (
            client.put("/v1/txn", body.as_bytes()),
            server.put("/v1/txn", body.as_bytes()),
        );
        assert_eq!(
            (asked.status, asked.text()),
            (direct.status, direct.text()),
            "{body}"
        );
        asked
    };
    // A write with a read in it: Txn.Apply.
    let applied = client.put(
        "/v1/txn",
        br#"[{"KV": {"Verb": "set", "Key": "txn/a", "Value": "b25l", "Flags": 7}},
             {"KV": {"Verb": "get", "Key": "txn/a"}},
             {"Node": {"Verb": "set", "Node": {"Node": "txn-node", "Address": "10.1.1.1",
                       "Meta": {"rack": "r1"}}}},
             {"Service": {"Verb": "set", "Node": "txn-node",
                          "Service": {"Service": "web", "Port": 80, "Tags": ["a"]}}},
             {"Check": {"Verb": "set", "Check": {"Node": "txn-node", "CheckID": "web-alive",
                        "Name": "alive", "Status": "passing", "ServiceID": "web"}}}]"#,
    );
    assert_eq!(applied.status, 200, "{}", applied.text());
    let results = applied.json()["Results"].clone();
    assert_eq!(results[1]["KV"]["Value"], "b25l");
    assert_eq!(results[1]["KV"]["Flags"], 7);
    assert_eq!(results[2]["Node"]["Meta"]["rack"], "r1");
    assert_eq!(results[3]["Service"]["Tags"], serde_json::json!(["a"]));
    assert_eq!(results[4]["Check"]["ServiceName"], "web");
    wait_for_log(server, &["rpc: call Txn.Apply"]);
    // Reads only: Txn.Read, the server's answer byte for byte, headers included.
    let reads = r#"[{"KV": {"Verb": "get", "Key": "txn/a"}},
                    {"KV": {"Verb": "get-tree", "Key": "txn/"}},
                    {"Node": {"Verb": "get", "Node": {"Node": "txn-node"}}},
                    {"Service": {"Verb": "get", "Node": "txn-node", "Service": {"ID": "web"}}},
                    {"Check": {"Verb": "get", "Check": {"Node": "txn-node",
                               "CheckID": "web-alive"}}}]"#;
    let read = same(reads);
    assert_eq!(read.status, 200);
    assert_eq!(read.header("X-Consul-KnownLeader"), Some("true"));
    assert!(read.header("X-Consul-LastContact").is_some());
    wait_for_log(server, &["rpc: call Txn.Read"]);
    // A rolled-back write (a stale CAS) and a read of a missing key answer the server's 409.
    same(r#"[{"KV": {"Verb": "cas", "Key": "txn/a", "Value": "dHdv", "Index": 1}}]"#);
    same(r#"[{"KV": {"Verb": "get", "Key": "txn/missing"}}]"#);
    // Pre-check failures and bad bodies are refused by the agent in the server's words.
    let refused = same(r#"[{"KV": {"Verb": "frob", "Key": "x"}}, {"Node": {"Verb": "set"}}]"#);
    assert_eq!(refused.status, 409);
    assert_eq!(same("{").status, 400);
    // Deletes through the client leave what the server shows.
    let deleted = client.put(
        "/v1/txn",
        br#"[{"Check": {"Verb": "delete", "Check": {"Node": "txn-node", "CheckID": "web-alive"}}},
             {"Service": {"Verb": "delete", "Node": "txn-node",
                          "Service": {"ID": "web", "Service": "web"}}},
             {"KV": {"Verb": "delete-tree", "Key": "txn/"}}]"#,
    );
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    assert_eq!(server.get("/v1/kv/txn/a").status, 404);
    assert_eq!(server.get("/v1/catalog/service/web").text(), "[]");
}

#[test]
fn a_client_agent_signs_its_leaves_through_typed_calls() {
    let cluster = Cluster::start(1, &[]);
    let data = TempDir::new("consul-rpc-client-leaf");
    let client = cluster.start_client(&data, &[]);
    client.wait_ready();
    let server = &cluster.servers[0];
    let roots = eventually_ok(server, "GET", "/v1/agent/connect/ca/roots", b"").json();
    let trust_domain = roots["TrustDomain"].as_str().unwrap();
    // The client follows the roots with ConnectCA.Roots and has its CSR signed with
    // ConnectCA.Sign; the key stays on the client.
    let leaf = eventually_ok(&client, "GET", "/v1/agent/connect/ca/leaf/web", b"").json();
    wait_for_log(server, &["rpc: call ConnectCA.Roots"]);
    wait_for_log(server, &["rpc: call ConnectCA.Sign"]);
    assert_eq!(leaf["Service"], "web");
    let uri = leaf["ServiceURI"].as_str().unwrap();
    assert!(
        uri.starts_with(&format!("spiffe://{trust_domain}/")) && uri.ends_with("/svc/web"),
        "{uri}"
    );
    assert!(leaf["PrivateKeyPEM"]
        .as_str()
        .unwrap()
        .contains("PRIVATE KEY"));
    assert!(leaf["ValidAfter"].as_str().unwrap() < leaf["ValidBefore"].as_str().unwrap());
    // The leaf chains to the server's active root (checked by openssl, not by us).
    let dir = TempDir::new("consul-rpc-client-leaf-pem");
    let (root_file, leaf_file) = (dir.path().join("root.pem"), dir.path().join("leaf.pem"));
    let active = roots["Roots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["Active"] == true)
        .unwrap();
    std::fs::write(&root_file, active["RootCert"].as_str().unwrap()).unwrap();
    std::fs::write(&leaf_file, leaf["CertPEM"].as_str().unwrap()).unwrap();
    let verified = Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(&root_file)
        .arg(&leaf_file)
        .output()
        .expect("openssl must be installed (tests/run.sh installs it)");
    assert!(
        verified.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verified.stdout),
        String::from_utf8_lossy(&verified.stderr)
    );
}

#[test]
fn a_client_agent_reads_the_catalog_and_health_through_typed_calls() {
    let cluster = Cluster::start(1, &[]);
    let data = TempDir::new("consul-rpc-client-catalog");
    let client = cluster.start_client(&data, &[]);
    client.wait_ready();
    let server = &cluster.servers[0];
    let registration = br#"{"Node": "ext", "Address": "10.0.0.9",
        "TaggedAddresses": {"wan": "192.0.2.9"}, "NodeMeta": {"rack": "r1"},
        "Service": {"ID": "web-1", "Service": "web", "Tags": ["v1", "blue"], "Port": 8080,
            "Meta": {"version": "1"}, "Weights": {"Passing": 3, "Warning": 1},
            "TaggedAddresses": {"lan": {"Address": "10.0.0.9", "Port": 8080}}},
        "Checks": [{"CheckID": "web-alive", "Name": "alive", "Status": "passing",
            "ServiceID": "web-1", "Definition": {"HTTP": "http://10.0.0.9:8080/health",
            "Interval": "10s", "Header": {"X-Probe": ["1"]}}},
            {"CheckID": "ext-disk", "Name": "disk", "Status": "warning", "Notes": "full"}]}"#;
    assert_eq!(
        server.put("/v1/catalog/register", registration).text(),
        "true"
    );
    let proxy = br#"{"Node": "ext", "Address": "10.0.0.9", "Service": {"Kind": "connect-proxy",
        "ID": "web-proxy", "Service": "web-proxy", "Port": 21000,
        "Proxy": {"DestinationServiceName": "web", "LocalServicePort": 8080,
            "Upstreams": [{"DestinationName": "db", "LocalBindPort": 9191}]}}}"#;
    assert_eq!(server.put("/v1/catalog/register", proxy).text(), "true");
    for path in [
        "/v1/catalog/nodes",
        "/v1/catalog/nodes?node-meta=rack:r1",
        "/v1/catalog/nodes?filter=Meta.rack%20%3D%3D%20%22r1%22&pretty",
        "/v1/catalog/services",
        "/v1/catalog/services?node-meta=rack:r1&pretty",
        "/v1/catalog/service/web",
        "/v1/catalog/service/web?tag=v1&tag=blue",
        "/v1/catalog/service/web?tag=green",
        "/v1/catalog/service/web-proxy?pretty",
        "/v1/catalog/service/nothing",
        "/v1/catalog/node/ext",
        "/v1/catalog/node/ext?pretty",
        "/v1/catalog/node/nothing",
        "/v1/health/service/web",
        "/v1/health/service/web?passing",
        "/v1/health/service/web?pretty&stale",
        "/v1/health/service/web-proxy",
        "/v1/health/node/ext",
        "/v1/health/checks/web",
        "/v1/health/state/any",
        "/v1/health/state/warning?pretty",
        "/v1/health/state/critical",
    ] {
        let answer = same_answer(&client, server, path);
        assert_eq!(answer.status, 200, "{path}: {}", answer.text());
    }
    assert_eq!(
        client.get("/v1/health/service/web?passing").json(),
        serde_json::json!([])
    );
    assert_eq!(client.get("/v1/catalog/node/nothing").text(), "null");
    // Bad input is refused by the agent in the server's words, before any call.
    for path in ["/v1/catalog/nodes?filter=%3D%3D", "/v1/health/state/nope"] {
        let (asked, direct) = (client.get(path), server.get(path));
        assert_eq!(
            (asked.status, asked.text()),
            (direct.status, direct.text()),
            "{path}"
        );
        assert_eq!(asked.status, 400, "{path}");
    }
    // A blocking health read on the client is woken by a registration on the server.
    let index = client.get("/v1/health/service/web").index();
    let blocked_path = format!("/v1/health/service/web?index={index}&wait=30s");
    let waiter = {
        let addr = client.addr();
        std::thread::spawn(move || common::request(addr, "GET", &blocked_path, b"", &[]))
    };
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(!waiter.is_finished(), "the blocking read answered at once");
    let second = br#"{"Node": "ext2", "Address": "10.0.0.10",
        "Service": {"ID": "web-2", "Service": "web", "Port": 8080}}"#;
    assert_eq!(server.put("/v1/catalog/register", second).text(), "true");
    let woken = waiter.join().unwrap();
    assert_eq!(woken.status, 200);
    assert!(woken.index() > index);
    assert_eq!(woken.json().as_array().unwrap().len(), 2);
    // A catalog write through the agent is its typed call: the server logs one more
    // `Catalog.Register` (the agent's own node is in sync, so anti-entropy sends none).
    let registers = || server.log().matches("rpc: call Catalog.Register").count();
    let before = registers();
    let direct = br#"{"Node": "viaclient", "Address": "10.0.0.11"}"#;
    assert_eq!(client.put("/v1/catalog/register", direct).text(), "true");
    assert_eq!(
        server.get("/v1/catalog/node/viaclient").json()["Node"]["Address"],
        "10.0.0.11"
    );
    assert!(registers() > before, "no typed Catalog.Register arrived");
    let gone = br#"{"Node": "viaclient"}"#;
    assert_eq!(client.put("/v1/catalog/deregister", gone).text(), "true");
    assert_eq!(server.get("/v1/catalog/node/viaclient").text(), "null");
    wait_for_log(server, &["rpc: call Catalog.Deregister"]);
    // Each read arrived at the server as its typed call.
    for method in [
        "Catalog.ListNodes",
        "Catalog.ListServices",
        "Catalog.ServiceNodes",
        "Catalog.NodeServices",
        "Health.ServiceNodes",
        "Health.NodeChecks",
        "Health.ServiceChecks",
        "Health.ChecksInState",
    ] {
        wait_for_log(server, &[&format!("rpc: call {method}")]);
    }
}

#[test]
fn a_client_agents_anti_entropy_registers_through_typed_calls() {
    let cluster = Cluster::start(1, &[]);
    let data = TempDir::new("consul-rpc-client-sync");
    let client = cluster.start_client(&data, &[]);
    client.wait_ready();
    let server = &cluster.servers[0];
    let service = br#"{"ID": "api-1", "Name": "api", "Port": 9000, "Tags": ["v2"],
        "Check": {"CheckID": "api-ttl", "TTL": "30s", "Status": "passing"}}"#;
    assert_eq!(
        client.put("/v1/agent/service/register", service).status,
        200
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let node = format!("client-{}", client.ip);
    loop {
        let checks = server.get("/v1/health/checks/api").json();
        if checks.as_array().is_some_and(|c| c.len() == 1) {
            assert_eq!(checks[0]["Node"], node.as_str());
            assert_eq!(checks[0]["Status"], "passing");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never registered: {checks}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let instances = server.get("/v1/catalog/service/api").json();
    assert_eq!(instances[0]["ServiceTags"], serde_json::json!(["v2"]));
    wait_for_log(server, &["rpc: call Catalog.Register"]);
    // The sync round reads the node's rows with Consul's anti-entropy calls.
    wait_for_log(server, &["rpc: call Catalog.NodeServices"]);
    wait_for_log(server, &["rpc: call Health.NodeChecks"]);
    assert_eq!(
        client.put("/v1/agent/service/deregister/api-1", b"").status,
        200
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while server.get("/v1/catalog/service/api").json() != serde_json::json!([]) {
        assert!(std::time::Instant::now() < deadline, "never deregistered");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    wait_for_log(server, &["rpc: call Catalog.Deregister"]);
    assert_eq!(
        server.get("/v1/health/checks/api").json(),
        serde_json::json!([])
    );
}

#[test]
fn another_datacenters_catalog_and_health_are_read_through_typed_calls() {
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start("consul-rpc-dc-catalog", &[]);
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    let registration = br#"{"Node": "far", "Address": "10.2.0.9", "NodeMeta": {"rack": "r2"},
        "Service": {"ID": "db-1", "Service": "db", "Tags": ["primary"], "Port": 5432},
        "Checks": [{"CheckID": "db-alive", "Name": "alive", "Status": "critical",
            "ServiceID": "db-1"}]}"#;
    assert_eq!(
        remote.put("/v1/catalog/register", registration).text(),
        "true"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // Until the WAN pool has converged, dc1 has no path to dc2 (a 500, not JSON).
    while server.get("/v1/catalog/service/db?dc=dc2").text() == "[]"
        || server.get("/v1/catalog/service/db?dc=dc2").status != 200
    {
        assert!(
            std::time::Instant::now() < deadline,
            "dc1 never reached dc2"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for path in [
        "/v1/catalog/nodes?node-meta=rack:r2",
        "/v1/catalog/services",
        "/v1/catalog/service/db?tag=primary",
        "/v1/catalog/node/far",
        "/v1/health/service/db",
        "/v1/health/service/db?passing",
        "/v1/health/node/far",
        "/v1/health/checks/db",
        "/v1/health/state/critical",
    ] {
        let separator = if path.contains('?') { '&' } else { '?' };
        let asked = format!("{path}{separator}dc=dc2");
        for agent in [server, client] {
            let answer = same_answers(agent, &asked, remote, path);
            assert_eq!(answer.status, 200, "{asked}: {}", answer.text());
        }
    }
    let unknown = client.get("/v1/catalog/nodes?dc=dc9");
    assert_eq!(
        (unknown.status, unknown.text()),
        (500, "No path to datacenter".to_string())
    );
    // Bad input is refused where the request arrived, in the server's words.
    let bad = client.get("/v1/health/state/nope?dc=dc2");
    assert_eq!(bad.status, 400, "{}", bad.text());
    for method in [
        "Catalog.ServiceNodes",
        "Health.ServiceNodes",
        "Health.ChecksInState",
    ] {
        wait_for_log(remote, &[&format!("rpc: call {method}")]);
    }
}
