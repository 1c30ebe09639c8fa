//! The service mesh's requests as Consul's typed calls across datacenters and from a
//! client agent: config entries (`ConfigEntry.Apply|Get|List|ListAll|Delete`), the
//! discovery chain (`DiscoveryChain.Get`), intentions (`Intention.Apply|Get|List|Match|
//! Check`) and the Connect CA (`ConnectCA.Roots`, `ConnectCA.ConfigurationGet`) naming dc2
//! (`?dc=dc2`), asked of dc1's server and of dc1's client agent, answer what dc2's server
//! answers itself (status, body, `X-Consul-Index`, `X-Consul-KnownLeader`); writes naming
//! dc2 land in dc2; a client agent's CA roots are its server's.

use crate::acl_common::same_answer;
use crate::common::{self, Agent, HttpResponse};

use super::consul_rpc::TwoDatacenters;
use std::time::{Duration, Instant};

/// `method path` with `body` on `asked` answers what `direct` answers, query headers
/// included; `asked`'s answer.
fn same(asked: &Agent, direct: &Agent, method: &str, path: &str, body: &[u8]) -> HttpResponse {
    same_answer(asked, direct, (method, path, body), None, true)
}

fn send(agent: &Agent, method: &str, path: &str, body: &str) -> HttpResponse {
    common::request(agent.addr(), method, path, body.as_bytes(), &[])
}

#[test]
fn mesh_requests_naming_another_datacenter_go_as_typed_calls() {
    let prometheus = ["-hcl", common::PROMETHEUS_HCL];
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start_with("mesh-calls", &prometheus, &prometheus);
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    // Until the WAN pool has converged, dc1 has no path to dc2.
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.get("/v1/kv/nothing?dc=dc2").status != 404 {
        assert!(Instant::now() < deadline, "dc1 never reached dc2");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Config entry writes naming dc2, from dc1's server and from the client agent, land in
    // dc2 and not in dc1.
    for (agent, name) in [(server, "web"), (client, "api")] {
        let body =
            format!(r#"{{"Kind": "service-defaults", "Name": "{name}", "Protocol": "http"}}"#);
        let written = send(agent, "PUT", "/v1/config?dc=dc2", &body);
        assert_eq!((written.status, written.text().as_str()), (200, "true"));
        let path = format!("/v1/config/service-defaults/{name}");
        assert_eq!(remote.get(&path).status, 200, "{name} reached dc2");
        assert_eq!(server.get(&path).status, 404, "{name} stayed out of dc1");
    }
    let stale = send(
        client,
        "PUT",
        "/v1/config?dc=dc2&cas=1",
        r#"{"Kind": "service-defaults", "Name": "web", "Protocol": "grpc"}"#,
    );
    assert_eq!((stale.status, stale.text().as_str()), (200, "false"));
    for agent in [server, client] {
        for path in [
            "/v1/config/service-defaults?dc=dc2",
            "/v1/config/service-defaults/web?dc=dc2",
            "/v1/config/service-defaults/nothing?dc=dc2",
            "/v1/config/?dc=dc2",
            "/v1/discovery-chain/web?dc=dc2",
            "/v1/discovery-chain/web?dc=dc2&compile-dc=dc2",
            "/v1/connect/ca/roots?dc=dc2",
            "/v1/connect/ca/roots?dc=dc2&pem",
            "/v1/connect/ca/configuration?dc=dc2",
        ] {
            same(agent, remote, "GET", path, b"");
        }
        same(
            agent,
            remote,
            "POST",
            "/v1/discovery-chain/web?dc=dc2",
            br#"{"OverrideProtocol": "grpc"}"#,
        );
        // A bad request is refused as the handler refuses it, before any call.
        same(agent, remote, "GET", "/v1/config/nonsense/web?dc=dc2", b"");
    }
    // A blocking read naming dc2 waits there and is woken by a write there.
    let first = client.get("/v1/config/service-defaults/web?dc=dc2");
    let index = first.header("X-Consul-Index").unwrap().to_string();
    let blocked = format!("/v1/config/service-defaults/web?dc=dc2&index={index}&wait=30s");
    let waiter = {
        let addr = client.addr();
        std::thread::spawn(move || common::request(addr, "GET", &blocked, b"", &[]))
    };
    std::thread::sleep(Duration::from_secs(1));
    assert!(!waiter.is_finished(), "the blocking read answered at once");
    let rewritten = send(
        remote,
        "PUT",
        "/v1/config",
        r#"{"Kind": "service-defaults", "Name": "web", "Protocol": "grpc"}"#,
    );
    assert_eq!(rewritten.text(), "true");
    let woken = waiter.join().unwrap();
    assert_eq!(woken.status, 200, "{}", woken.text());
    assert_eq!(woken.json()["Protocol"], "grpc");
    // Deletes naming dc2.
    for agent in [server, client] {
        let name = if agent.ip == server.ip { "web" } else { "api" };
        let path = format!("/v1/config/service-defaults/{name}?dc=dc2");
        let deleted = agent.delete(&path);
        assert_eq!(deleted.status, 200, "{}", deleted.text());
        assert_eq!(remote.get(&path).status, 404, "{name} deleted in dc2");
    }

    // Intentions naming dc2: created, read, matched, checked, updated and deleted there.
    let mut ids = Vec::new();
    for (agent, source) in [(server, "a"), (client, "b")] {
        let body =
            format!(r#"{{"SourceName": "{source}", "DestinationName": "db", "Action": "allow"}}"#);
        let created = send(agent, "POST", "/v1/connect/intentions?dc=dc2", &body);
        assert_eq!(created.status, 200, "{}", created.text());
        let id = created.json()["ID"].as_str().unwrap().to_string();
        assert_eq!(
            remote.get(&format!("/v1/connect/intentions/{id}")).status,
            200
        );
        assert_eq!(
            server.get(&format!("/v1/connect/intentions/{id}")).status,
            404
        );
        ids.push(id);
    }
    let update =
        r#"{"SourceName": "a", "DestinationName": "db", "Action": "deny", "Description": "now"}"#;
    let updated = send(
        server,
        "PUT",
        &format!("/v1/connect/intentions/{}?dc=dc2", ids[0]),
        update,
    );
    assert_eq!(updated.status, 200, "{}", updated.text());
    assert_eq!(
        remote
            .get(&format!("/v1/connect/intentions/{}", ids[0]))
            .json()["Description"],
        "now"
    );
    for agent in [server, client] {
        for path in [
            "/v1/connect/intentions?dc=dc2".to_string(),
            format!("/v1/connect/intentions/{}?dc=dc2", ids[1]),
            "/v1/connect/intentions/exact?source=a&destination=db&dc=dc2".to_string(),
            "/v1/connect/intentions/match?by=destination&name=db&dc=dc2".to_string(),
            "/v1/connect/intentions/check?source=a&destination=db&dc=dc2".to_string(),
            "/v1/connect/intentions/check?source=b&destination=db&dc=dc2".to_string(),
            "/v1/connect/intentions/match?by=nowhere&name=db&dc=dc2".to_string(),
        ] {
            same(agent, remote, "GET", &path, b"");
        }
        // A missing intention is Consul's 404, without the query headers a server's own
        // 404 carries (`docs/rpc.md`): the same status and body.
        let missing = "/v1/connect/intentions/exact?source=nobody&destination=db&dc=dc2";
        let answer = same_answer(agent, remote, ("GET", missing, b""), None, false);
        assert_eq!(answer.status, 404);
    }
    for id in &ids {
        let gone = server.delete(&format!("/v1/connect/intentions/{id}?dc=dc2"));
        assert_eq!((gone.status, gone.text().as_str()), (200, "true"));
    }
    // An upsert by name, once the writes by ID are done, read and deleted by name.
    let upsert = send(
        client,
        "PUT",
        "/v1/connect/intentions/exact?source=c&destination=db&dc=dc2",
        r#"{"Action": "deny"}"#,
    );
    assert_eq!((upsert.status, upsert.text().as_str()), (200, "true"));
    for agent in [server, client] {
        let path = "/v1/connect/intentions/exact?source=c&destination=db&dc=dc2";
        same(agent, remote, "GET", path, b"");
    }
    let gone = client.delete("/v1/connect/intentions/exact?source=c&destination=db&dc=dc2");
    assert_eq!((gone.status, gone.text().as_str()), (200, "true"));
    assert_eq!(remote.get("/v1/connect/intentions").text(), "[]");

    // The client agent's own CA roots are its server's.
    for path in ["/v1/connect/ca/roots", "/v1/connect/ca/roots?pem"] {
        same(client, server, "GET", path, b"");
    }
    // The client agent authorizes from its server's roots and intentions, as the server
    // decides from its store: a matched allow, a matched deny (the wildcard source), the
    // default, a foreign trust domain and a bad URI.
    let domain = server.get("/v1/connect/ca/roots").json()["TrustDomain"]
        .as_str()
        .unwrap()
        .to_string();
    for body in [
        r#"{"SourceName": "a", "DestinationName": "db", "Action": "allow"}"#,
        r#"{"SourceName": "*", "DestinationName": "db", "Action": "deny"}"#,
    ] {
        let created = send(server, "POST", "/v1/connect/intentions", body);
        assert_eq!(created.status, 200, "{}", created.text());
    }
    for (source, target) in [("a", "db"), ("b", "db"), ("a", "elsewhere")] {
        let body = format!(
            r#"{{"Target": "{target}", "ClientCertURI": "spiffe://{domain}/ns/default/dc/dc1/svc/{source}"}}"#
        );
        let answer = same(
            client,
            server,
            "POST",
            "/v1/agent/connect/authorize",
            body.as_bytes(),
        );
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    let foreign =
        r#"{"Target": "db", "ClientCertURI": "spiffe://other.consul/ns/default/dc/dc1/svc/a"}"#;
    let refused = same(
        client,
        server,
        "POST",
        "/v1/agent/connect/authorize",
        foreign.as_bytes(),
    );
    assert_eq!(refused.json()["Authorized"], false);
    let bad = br#"{"Target": "db", "ClientCertURI": "http://not-spiffe"}"#;
    assert_eq!(
        same(client, server, "POST", "/v1/agent/connect/authorize", bad).status,
        400
    );
}
