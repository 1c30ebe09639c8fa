//! Cluster peering as typed calls (`Peering.*`, praetor's own;
//! `ConfigEntry.GetResolvedExportedServices`) and snapshots on their own connection (byte
//! 5, `RPCSnapshot`, as Consul's): a
//! dc1 client agent answers `/v1/peering*`, `/v1/exported-services` and `/v1/snapshot` as
//! dc1's server answers them itself; `?dc=dc2`, on dc1's server and on the client agent,
//! answers as dc2's server does, and writes land in dc2; a follower of a three-server
//! cluster answers as its leader; a snapshot saved through the client agent restores
//! through it; and ACL refusals are the leader's.

use crate::acl_common::{call, same_answer, wait_for_token};
use crate::common::{self, Agent, Cluster, HttpResponse, TempDir};
use crate::peering::support::{certificates, decode, post, trust_domain, GRPC_TLS_PORT};

use super::consul_rpc::{wait_for_log, TwoDatacenters};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Waits until `server` logged a call of each of `methods` (`rpc: call <method>`).
fn served(server: &Agent, methods: &[&str]) {
    for method in methods {
        wait_for_log(server, &[&format!("rpc: call {method}")]);
    }
}

/// Agent configuration serving gRPC over TLS with the certificates in `dir` (token
/// generation needs `ports.grpc_tls`, as Consul's does).
fn grpc_tls_hcl(dir: &TempDir) -> String {
    let d = dir.path().display();
    format!(
        "tls {{ defaults {{ ca_file = \"{d}/consul-agent-ca.pem\" cert_file = \"{d}/dc1-server-consul-0.pem\" key_file = \"{d}/dc1-server-consul-0-key.pem\" }} grpc {{ verify_incoming = false }} }} ports {{ grpc = -1 grpc_tls = {GRPC_TLS_PORT} }}"
    )
}

/// A GET that `asked` and `direct` answer alike, query headers included.
fn same_get(asked: &Agent, direct: &Agent, path: &str, token: Option<&str>) -> HttpResponse {
    same_answer(asked, direct, ("GET", path, b""), token, true)
}

/// A token for `peer` generated through `agent` (at `path`), which must succeed: the token
/// and its document.
fn token_via(agent: &Agent, path: &str, peer: &str, token: Option<&str>) -> (String, Value) {
    let answer = post(
        agent,
        path,
        &json!({"PeerName": peer, "Meta": {"via": "call"}}),
        token,
    );
    assert_eq!(answer.status, 200, "{path}: {}", answer.text());
    let text = answer.json()["PeeringToken"].as_str().unwrap().to_string();
    let (_, document) = decode(&text);
    (text, document)
}

/// Waits (bounded) until `agent` answers `path` with `status`.
fn wait_status(agent: &Agent, path: &str, status: u16, token: Option<&str>) -> HttpResponse {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = call(agent, "GET", path, b"", token);
        if answer.status == status {
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "{path}: {} {}",
            answer.status,
            answer.text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A snapshot saved through `agent` (at `path`): the archive, answered 200 as gzip with the
/// query's headers.
fn save(agent: &Agent, path: &str, token: Option<&str>) -> Vec<u8> {
    let saved = call(agent, "GET", path, b"", token);
    assert_eq!(saved.status, 200, "{path}: {}", saved.text());
    assert_eq!(saved.header("Content-Type"), Some("application/x-gzip"));
    assert!(saved.index() > 0, "{:?}", saved.headers);
    assert!(saved.header("X-Consul-KnownLeader").is_some());
    saved.body
}

/// Restores `archive` through `agent` (at `path`), which must answer 200.
fn restore(agent: &Agent, path: &str, archive: &[u8], token: Option<&str>) {
    let restored = call(agent, "PUT", path, archive, token);
    assert_eq!(restored.status, 200, "{path}: {}", restored.text());
}

/// Waits (bounded) until `agent` reads `value` at KV `key`.
fn wait_value(agent: &Agent, key: &str, value: &str, token: Option<&str>) {
    let path = format!("/v1/kv/{key}?raw");
    let deadline = Instant::now() + Duration::from_secs(15);
    while call(agent, "GET", &path, b"", token).text() != value {
        assert!(
            Instant::now() < deadline,
            "{key} never came back as {value}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn peering_and_snapshots_on_a_client_agent_and_in_another_datacenter_are_typed_calls() {
    let certs = certificates("peer-snapshot-calls-certs");
    let tls = grpc_tls_hcl(&certs);
    let extra = ["-hcl", common::PROMETHEUS_HCL, "-hcl", &tls];
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start_with("peer-snapshot-calls", &extra, &extra);
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    trust_domain(server);
    trust_domain(remote);
    // Until the WAN pool has converged, dc1 has no path to dc2.
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.get("/v1/peerings?dc=dc2").status != 200
        || client.get("/v1/peerings?dc=dc2").status != 200
    {
        assert!(Instant::now() < deadline, "dc1 never reached dc2");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Snapshots first (a restore brings back everything else as it was).
    assert_eq!(server.put("/v1/kv/snap/key", b"before").text(), "true");
    let archive = save(client, "/v1/snapshot", None);
    save(client, "/v1/snapshot?stale", None);
    assert_eq!(server.put("/v1/kv/snap/key", b"after").text(), "true");
    restore(client, "/v1/snapshot", &archive, None);
    wait_value(server, "snap/key", "before", None);
    wait_value(client, "snap/key", "before", None);
    // A damaged archive is refused alike, before any call.
    let damaged = &archive[..archive.len() / 2];
    let refused = same_answer(
        client,
        server,
        ("PUT", "/v1/snapshot", damaged),
        None,
        false,
    );
    assert_eq!(refused.status, 400, "{}", refused.text());
    // dc2's state, saved from dc1's server and from the client agent, restored from dc1.
    assert_eq!(remote.put("/v1/kv/snap/far", b"dc2").text(), "true");
    let far = save(client, "/v1/snapshot?dc=dc2", None);
    save(server, "/v1/snapshot?dc=dc2", None);
    assert_eq!(remote.put("/v1/kv/snap/far", b"later").text(), "true");
    restore(server, "/v1/snapshot?dc=dc2", &far, None);
    wait_value(remote, "snap/far", "dc2", None);
    assert_eq!(remote.put("/v1/kv/snap/far", b"later").text(), "true");
    restore(client, "/v1/snapshot?dc=DC2", &far, None);
    wait_value(remote, "snap/far", "dc2", None);
    assert_eq!(
        server.get("/v1/kv/snap/far").status,
        404,
        "dc1 holds dc2's key"
    );
    // dc2's server served them on their own connections (byte 5), relayed by dc1's.
    wait_for_log(remote, &["rpc: snapshot Save from"]);
    wait_for_log(remote, &["rpc: snapshot Restore from"]);

    // Peering in dc1 through the client agent: a token, the acceptor's PENDING peering.
    let (_, document) = token_via(client, "/v1/peering/token", "via-client", None);
    let (_, own) = token_via(server, "/v1/peering/token", "via-server", None);
    for field in ["CA", "ServerAddresses", "ServerName", "Remote"] {
        assert_eq!(document[field], own[field], "{field}");
    }
    assert_ne!(document["PeerID"], own["PeerID"]);
    let read = same_get(client, server, "/v1/peering/via-client", None).json();
    assert_eq!(
        (&read["State"], &read["Meta"]["via"]),
        (&json!("PENDING"), &json!("call"))
    );
    let listed = same_get(client, server, "/v1/peerings", None).json();
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    same_get(client, server, "/v1/peerings?stale", None);
    let missing = same_answer(
        client,
        server,
        ("GET", "/v1/peering/nothing", b""),
        None,
        false,
    );
    assert_eq!(missing.status, 404, "{}", missing.text());
    // A blocking list on the client agent, woken by a token generated on the server.
    let index = client.get("/v1/peerings").index();
    let addr = client.addr();
    let waiter = std::thread::spawn(move || {
        let path = format!("/v1/peerings?index={index}&wait=20s");
        common::request(addr, "GET", &path, b"", &[])
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!waiter.is_finished(), "the blocking list answered at once");
    token_via(server, "/v1/peering/token", "wakes", None);
    let woken = waiter.join().unwrap();
    assert_eq!(woken.status, 200);
    assert!(woken.index() > index);
    assert_eq!(woken.json().as_array().unwrap().len(), 3);
    // Establishing with one of dc1's own tokens is refused alike (400).
    let (dc1_token, dc1_document) = token_via(server, "/v1/peering/token", "for-dc2", None);
    let own_cluster = json!({"PeerName": "loop", "PeeringToken": dc1_token}).to_string();
    let refused = same_answer(
        client,
        server,
        ("POST", "/v1/peering/establish", own_cluster.as_bytes()),
        None,
        false,
    );
    assert_eq!(refused.status, 400, "{}", refused.text());
    let bad = json!({"PeerName": "x", "PeeringToken": "not a token"}).to_string();
    same_answer(
        client,
        server,
        ("POST", "/v1/peering/establish", bad.as_bytes()),
        None,
        false,
    );
    // Exported services.
    let exported = json!({"Kind": "exported-services", "Name": "default",
        "Services": [{"Name": "web", "Consumers": [{"Peer": "via-client"}]}]});
    assert_eq!(
        server
            .put("/v1/config", exported.to_string().as_bytes())
            .status,
        200
    );
    let services = same_get(client, server, "/v1/exported-services", None).json();
    assert_eq!(
        services,
        json!([{"Service": "web", "Consumers": {"Peers": ["via-client"]}}])
    );
    // Deletion through the client agent.
    assert_eq!(client.delete("/v1/peering/via-client").status, 200);
    wait_status(server, "/v1/peering/via-client", 404, None);
    assert_eq!(client.delete("/v1/peering/via-client").status, 200);

    // dc2 through dc1's server and the client agent: a token generated there, read, listed,
    // exported services, deleted there.
    for (agent, name) in [(server, "from-dc1-server"), (client, "from-dc1-client")] {
        let (_, far) = token_via(agent, "/v1/peering/token?dc=dc2", name, None);
        assert_eq!(far["Remote"]["Datacenter"], "dc2", "{far}");
        let path = format!("/v1/peering/{name}?dc=dc2");
        let read = same_get(agent, remote, &path, None).json();
        assert_eq!(read["State"], "PENDING");
        assert_eq!(server.get(&format!("/v1/peering/{name}")).status, 404);
        same_get(agent, remote, "/v1/peerings?dc=dc2", None);
        same_get(agent, remote, "/v1/exported-services?dc=dc2", None);
        same_answer(
            agent,
            remote,
            ("GET", "/v1/peering/nothing?dc=dc2", b""),
            None,
            false,
        );
        assert_eq!(agent.delete(&path).status, 200);
        wait_status(remote, &format!("/v1/peering/{name}"), 404, None);
    }
    // An establishment in dc2 with dc1's token, through the client agent: dc2 dials dc1.
    let establish = json!({"PeerName": "to-dc1", "PeeringToken": dc1_token}).to_string();
    let established = call(
        client,
        "POST",
        "/v1/peering/establish?dc=dc2",
        establish.as_bytes(),
        None,
    );
    assert_eq!(established.status, 200, "{}", established.text());
    assert_eq!(established.text(), "{}");
    let dialer = wait_status(remote, "/v1/peering/to-dc1", 200, None).json();
    assert_eq!(dialer["PeerID"], dc1_document["PeerID"], "{dialer}");
    assert_eq!(client.get("/v1/peering/to-dc1").status, 404);
    let unknown = client.get("/v1/peerings?dc=dc9");
    assert_eq!(
        (unknown.status, unknown.text()),
        (500, "No path to datacenter".to_string())
    );
    served(
        remote,
        &[
            "Peering.GenerateToken",
            "Peering.Establish",
            "Peering.Read",
            "Peering.List",
            "Peering.Delete",
            "ConfigEntry.GetResolvedExportedServices",
        ],
    );
}

const MANAGEMENT: &str = "4c1d2e3f-5a6b-4c7d-8e9f-0a1b2c3d4e5f";

#[test]
fn a_follower_and_a_client_agent_answer_peering_and_snapshots_as_the_leader() {
    let certs = certificates("peer-snapshot-follower-certs");
    let tls = grpc_tls_hcl(&certs);
    let acl = format!(
        "acl {{\n enabled = true\n default_policy = \"deny\"\n tokens {{\n  initial_management = \"{MANAGEMENT}\"\n  agent = \"{MANAGEMENT}\"\n }}\n}}"
    );
    let extra = ["-hcl", &acl, "-hcl", common::PROMETHEUS_HCL, "-hcl", &tls];
    // `spawn`: the leader probe needs a token, which `wait_for_token` gives.
    let cluster = Cluster::spawn(3, &extra);
    for server in &cluster.servers {
        server.wait_ready();
    }
    let admin = Some(MANAGEMENT);
    // The leader all three name (`/v1/status/leader` needs no token).
    let leader_index = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let named: Vec<String> = cluster
                .servers
                .iter()
                .map(|s| {
                    s.get("/v1/status/leader?stale")
                        .text()
                        .trim_matches('"')
                        .to_string()
                })
                .collect();
            let ip = named[0].rsplit_once(':').map(|(ip, _)| ip.to_string());
            let agreed = named.iter().all(|n| *n == named[0]);
            let index =
                ip.and_then(|ip| cluster.servers.iter().position(|s| s.ip.to_string() == ip));
            if let (true, Some(index)) = (agreed, index) {
                break index;
            }
            assert!(Instant::now() < deadline, "no leader: {named:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let leader = &cluster.servers[leader_index];
    let follower = &cluster.servers[(leader_index + 1) % 3];
    for server in &cluster.servers {
        wait_for_token(server, MANAGEMENT);
    }
    let data = TempDir::new("peer-snapshot-follower-client");
    let client = cluster.start_client(&data, &extra);
    client.wait_ready();
    wait_for_token(&client, MANAGEMENT);
    let deadline = Instant::now() + Duration::from_secs(20);
    while call(leader, "GET", "/v1/connect/ca/roots", b"", admin).json()["Roots"]
        .as_array()
        .is_none_or(|roots| roots.is_empty())
    {
        assert!(
            Instant::now() < deadline,
            "the Connect CA never initialized"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    for asked in [follower, &client] {
        // Peering: a token through the follower or the agent, read and listed alike.
        let name = if std::ptr::eq(asked, follower) {
            "via-follower"
        } else {
            "via-agent"
        };
        let (_, document) = token_via(asked, "/v1/peering/token", name, admin);
        assert!(document["PeerID"].is_string(), "{document}");
        let path = format!("/v1/peering/{name}");
        let read = same_get(asked, leader, &path, admin).json();
        assert_eq!(read["Name"], name);
        same_get(asked, leader, "/v1/peerings", admin);
        same_get(asked, leader, "/v1/peerings?consistent", admin);
        same_get(asked, leader, "/v1/exported-services", admin);
        // Refusals: no token, the leader's 403 in its words.
        for (method, path, body) in [
            ("GET", "/v1/peerings", ""),
            ("GET", path.as_str(), ""),
            ("GET", "/v1/exported-services", ""),
            ("POST", "/v1/peering/token", r#"{"PeerName": "denied"}"#),
            ("DELETE", path.as_str(), ""),
            ("GET", "/v1/snapshot", ""),
        ] {
            let request = (method, path, body.as_bytes());
            let refused = same_answer(asked, leader, request, None, false);
            assert_eq!(refused.status, 403, "{method} {path}: {}", refused.text());
            assert!(
                refused.text().contains("Permission denied"),
                "{}",
                refused.text()
            );
        }
        // Snapshots: saved through the follower or the agent, restored through it.
        let key = format!("snap/{name}");
        call(leader, "PUT", &format!("/v1/kv/{key}"), b"saved", admin);
        let archive = save(asked, "/v1/snapshot", admin);
        save(asked, "/v1/snapshot?stale", admin);
        call(leader, "PUT", &format!("/v1/kv/{key}"), b"changed", admin);
        restore(asked, "/v1/snapshot", &archive, admin);
        wait_value(leader, &key, "saved", admin);
        // Deleted through it.
        let deleted = call(asked, "DELETE", &path, b"", admin);
        assert_eq!(deleted.status, 200, "{}", deleted.text());
        wait_status(leader, &path, 404, admin);
    }
    served(leader, &["Peering.GenerateToken"]);
    wait_for_log(leader, &["rpc: snapshot Restore from"]);
}
