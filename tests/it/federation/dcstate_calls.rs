//! Sessions, transactions, prepared queries, the servers' status, user events and the
//! operator's endpoints naming another datacenter (`?dc=dc2`), and the operator's usage and
//! leadership transfer on a client agent, all as typed calls: dc1's server and dc1's
//! client agent answer `?dc=dc2` exactly as dc2's server answers it itself (status, body,
//! the query headers), writes land in dc2, and an event fired for dc2 is broadcast in dc2.

use crate::acl_common::{call, same_answer};
use crate::common;

use super::consul_rpc::{wait_for_log, TwoDatacenters};
use common::Agent;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The node name an agent registered under.
fn node_name(agent: &Agent) -> String {
    let me = agent.get("/v1/agent/self").json();
    me["Config"]["NodeName"]
        .as_str()
        .expect("a node name")
        .to_string()
}

/// Waits until `server` logged a call of each of `methods` (`rpc: call <method>`).
fn served(server: &Agent, methods: &[&str]) {
    for method in methods {
        wait_for_log(server, &[&format!("rpc: call {method}")]);
    }
}

/// `method path body` on `agent`, which must answer 200; its body as JSON.
fn ok_json(agent: &Agent, method: &str, path: &str, body: &[u8]) -> Value {
    let answer = call(agent, method, path, body, None);
    assert_eq!(answer.status, 200, "{method} {path}: {}", answer.text());
    answer.json()
}

/// A GET that both `asked` and dc2's `remote` answer alike, query headers included.
fn same_get(asked: &Agent, remote: &Agent, path: &str) -> Value {
    same_answer(asked, remote, ("GET", path, b""), None, true).json()
}

#[test]
fn another_datacenters_state_is_reached_through_typed_calls() {
    let prometheus = ["-hcl", common::PROMETHEUS_HCL];
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start_with("dcstate-calls", &prometheus, &prometheus);
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    // Until the WAN pool has converged, dc1 has no path to dc2.
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.get("/v1/status/leader?dc=dc2").text() != remote.get("/v1/status/leader").text()
        || client.get("/v1/status/peers?dc=dc2").status != 200
    {
        assert!(Instant::now() < deadline, "dc1 never reached dc2");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (dc1_node, dc2_node) = (node_name(server), node_name(remote));
    let agents = [server, client];

    // Status: dc2's leader and voters, from either agent.
    for agent in agents {
        for path in ["/v1/status/leader?dc=dc2", "/v1/status/peers?dc=dc2"] {
            let answer = same_get(agent, remote, path);
            assert_ne!(answer, same_get(server, server, &path[..path.len() - 7]));
        }
    }
    served(remote, &["Status.Leader", "Status.Peers"]);

    // Sessions: created in dc2 on dc2's node, read, renewed and destroyed there.
    for agent in agents {
        let body = json!({"Node": dc2_node, "Name": "far", "TTL": "60s"}).to_string();
        let created = ok_json(agent, "PUT", "/v1/session/create?dc=dc2", body.as_bytes());
        let id = created["ID"].as_str().expect("an ID").to_string();
        let info = ok_json(remote, "GET", &format!("/v1/session/info/{id}"), b"");
        assert_eq!(info[0]["Node"], dc2_node.as_str(), "{info}");
        assert_eq!(
            server.get(&format!("/v1/session/info/{id}")).text(),
            "[]",
            "dc1 holds the session"
        );
        let listed = same_get(agent, remote, "/v1/session/list?dc=dc2");
        assert!(listed.as_array().unwrap().iter().any(|s| s["ID"] == id));
        same_get(
            agent,
            remote,
            &format!("/v1/session/node/{dc2_node}?dc=dc2"),
        );
        let read = same_get(agent, remote, &format!("/v1/session/info/{id}?dc=dc2"));
        assert_eq!(read[0]["ID"], id.as_str());
        let renew = format!("/v1/session/renew/{id}?dc=dc2");
        let renewed = same_answer(agent, remote, ("PUT", &renew, b""), None, false).json();
        assert_eq!(renewed[0]["ID"], id.as_str());
        let destroy = format!("/v1/session/destroy/{id}?dc=dc2");
        assert_eq!(agent.put(&destroy, b"").text(), "true");
        assert_eq!(remote.get(&format!("/v1/session/info/{id}")).text(), "[]");
        // The agent's own node (a dc1 node) is not registered in dc2: dc2 refuses it, as
        // it refuses the same session asked of it directly.
        let from_dc1 = agent.put("/v1/session/create?dc=dc2", b"{}");
        let node = json!({"Node": dc1_node}).to_string();
        let direct = remote.put("/v1/session/create", node.as_bytes());
        assert_eq!(
            (from_dc1.status, from_dc1.text()),
            (direct.status, direct.text())
        );
        assert_eq!(from_dc1.status, 500, "{}", from_dc1.text());
        assert_eq!(agent.get("/v1/session/info/x?dc=dc9").status, 500);
    }
    served(remote, &["Session.Apply", "Session.Renew", "Session.List"]);

    // Transactions: a write lands in dc2, a read is dc2's, a failed check-and-set is
    // dc2's refusal.
    for agent in agents {
        let write = br#"[{"KV": {"Verb": "set", "Key": "txn/far", "Value": "ZmFy"}}]"#;
        let written = ok_json(agent, "PUT", "/v1/txn?dc=dc2", write);
        assert_eq!(written["Results"][0]["KV"]["Key"], "txn/far");
        assert_eq!(remote.get("/v1/kv/txn/far?raw").text(), "far");
        assert_eq!(server.get("/v1/kv/txn/far").status, 404);
        let read = br#"[{"KV": {"Verb": "get", "Key": "txn/far"}}]"#;
        same_answer(agent, remote, ("PUT", "/v1/txn?dc=dc2", read), None, true);
        let stale = br#"[{"KV": {"Verb": "cas", "Key": "txn/far", "Value": "eA==", "Index": 1}}]"#;
        let refused = same_answer(agent, remote, ("PUT", "/v1/txn?dc=dc2", stale), None, true);
        assert_eq!(refused.status, 409, "{}", refused.text());
        let malformed = agent.put("/v1/txn?dc=dc2", b"[{");
        assert_eq!(malformed.status, 400, "{}", malformed.text());
    }
    served(remote, &["Txn.Apply", "Txn.Read"]);

    // Prepared queries: written, read, explained, executed and deleted in dc2.
    let register = json!({"Node": "web-node", "Address": "10.8.2.1",
        "Service": {"Service": "web", "ID": "web-1", "Port": 80}});
    let registered = remote.put("/v1/catalog/register", register.to_string().as_bytes());
    assert_eq!(registered.status, 200, "{}", registered.text());
    for (n, agent) in agents.into_iter().enumerate() {
        let name = format!("web-far-{n}");
        let body = json!({"Name": name, "Service": {"Service": "web"}}).to_string();
        let created = ok_json(agent, "POST", "/v1/query?dc=dc2", body.as_bytes());
        let id = created["ID"].as_str().expect("an ID").to_string();
        assert_eq!(server.get(&format!("/v1/query/{id}")).status, 404);
        let listed = same_get(agent, remote, "/v1/query?dc=dc2");
        assert!(listed.as_array().unwrap().iter().any(|q| q["ID"] == id));
        let one = same_get(agent, remote, &format!("/v1/query/{id}?dc=dc2"));
        assert_eq!(one[0]["Name"], name.as_str());
        let update = json!({"Name": name, "Service": {"Service": "web", "OnlyPassing": true}});
        let path = format!("/v1/query/{id}?dc=dc2");
        let updated = call(agent, "PUT", &path, update.to_string().as_bytes(), None);
        assert_eq!(updated.status, 200, "{}", updated.text());
        let stored = ok_json(remote, "GET", &format!("/v1/query/{id}"), b"");
        assert_eq!(stored[0]["Service"]["OnlyPassing"], true, "{stored}");
        same_get(agent, remote, &format!("/v1/query/{name}/explain?dc=dc2"));
        let executed = ok_json(
            agent,
            "GET",
            &format!("/v1/query/{name}/execute?dc=dc2"),
            b"",
        );
        let direct = ok_json(remote, "GET", &format!("/v1/query/{name}/execute"), b"");
        for field in ["Service", "Nodes", "Datacenter", "Failovers", "DNS"] {
            assert_eq!(executed[field], direct[field], "{field}: {executed}");
        }
        assert_eq!(executed["Nodes"][0]["Node"]["Node"], "web-node");
        let missing = ("GET", "/v1/query/nothing/execute?dc=dc2", &b""[..]);
        assert_eq!(same_answer(agent, remote, missing, None, false).status, 404);
        let deleted = call(agent, "DELETE", &path, b"", None);
        assert_eq!(deleted.status, 200, "{}", deleted.text());
        assert_eq!(remote.get(&format!("/v1/query/{id}")).status, 404);
    }
    served(
        remote,
        &[
            "PreparedQuery.Apply",
            "PreparedQuery.Execute",
            "PreparedQuery.Explain",
        ],
    );

    // The operator's endpoints: dc2's Raft configuration, autopilot and usage.
    for agent in agents {
        same_get(agent, remote, "/v1/operator/raft/configuration?dc=dc2");
        same_get(agent, remote, "/v1/operator/autopilot/configuration?dc=dc2");
        same_get(agent, remote, "/v1/operator/usage?dc=dc2");
        // 429 while dc2's autopilot does not yet count its server healthy.
        let health = agent.get("/v1/operator/autopilot/health?dc=dc2");
        assert!([200, 429].contains(&health.status), "{}", health.text());
        let health = health.json();
        assert_eq!(health["Servers"][0]["Name"], dc2_node.as_str(), "{health}");
        let state = ok_json(agent, "GET", "/v1/operator/autopilot/state?dc=dc2", b"");
        let direct = ok_json(remote, "GET", "/v1/operator/autopilot/state", b"");
        assert_eq!(state["Leader"], direct["Leader"], "{state}");
        let set = br#"{"CleanupDeadServers": false, "LastContactThreshold": "250ms"}"#;
        let written = agent.put("/v1/operator/autopilot/configuration?dc=dc2", set);
        assert_eq!(written.text(), "true");
        let stored = ok_json(remote, "GET", "/v1/operator/autopilot/configuration", b"");
        assert_eq!(stored["CleanupDeadServers"], false, "{stored}");
        let ours = ok_json(server, "GET", "/v1/operator/autopilot/configuration", b"");
        assert_eq!(ours["CleanupDeadServers"], true, "dc1's was written");
        let reset = br#"{"CleanupDeadServers": true, "LastContactThreshold": "200ms"}"#;
        let written = agent.put("/v1/operator/autopilot/configuration?dc=dc2", reset);
        assert_eq!(written.text(), "true");
    }
    served(
        remote,
        &[
            "Operator.RaftGetConfiguration",
            "Operator.Usage",
            "Operator.AutopilotSetConfiguration",
        ],
    );
    // On the client agent, its own datacenter's usage and leadership transfer are typed
    // calls too, answered as its server answers them.
    same_answer(
        client,
        server,
        ("GET", "/v1/operator/usage", b""),
        None,
        true,
    );
    let transfer = ("POST", "/v1/operator/raft/transfer-leader", &b""[..]);
    same_answer(client, server, transfer, None, false);
    served(server, &["Operator.TransferLeader"]);

    // A user event fired for dc2 is broadcast in dc2, not in dc1.
    let fired = ok_json(client, "PUT", "/v1/event/fire/far-deploy?dc=dc2", b"v1");
    let id = fired["ID"].as_str().expect("an event ID").to_string();
    assert_eq!(fired["Name"], "far-deploy");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = remote.get("/v1/event/list?name=far-deploy").json();
        if events.as_array().unwrap().iter().any(|e| e["ID"] == id) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "dc2 never saw the event: {events}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    served(remote, &["Internal.EventFire"]);
    let seen_here = server.get("/v1/event/list?name=far-deploy").json();
    assert_eq!(seen_here, json!([]), "dc1 saw dc2's event");
}
