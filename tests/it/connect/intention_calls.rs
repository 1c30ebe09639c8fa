//! Intentions and the discovery chain through a client agent as Consul's typed calls:
//! `/v1/connect/intentions*` on a client agent becomes `Intention.Apply`, `.Get`, `.List`,
//! `.Match` and `.Check` on its server's RPC port, `/v1/discovery-chain/<service>`
//! `DiscoveryChain.Get`, and the client answers what the server answers for the same
//! request (status, body, `X-Consul-Index`, the filtered-by-ACLs header). An independent msgpack-rpc client (`tests/python/intention_rpc.py`) calls
//! `Intention.*` on a server's port in Consul's own shapes.

use crate::acl_common;
use crate::common;

use acl_common::{
    call, same_answer, token_with_rules, wait_for_token, FILTERED_HEADER as FILTERED,
};
use common::{Agent, Cluster, HttpResponse, TempDir};
use std::time::Duration;

const MANAGEMENT: &str = "7a0c8a1e-3f2b-4c6d-9e7f-36a1b2c3d4e6";

/// `method path` with `body` on the client and on its server with `token`, until both
/// answer the same (`acl_common::same_answer`); the client's answer.
fn same_as(
    client: &Agent,
    server: &Agent,
    (method, path, body): (&str, &str, &str),
    token: Option<&str>,
    headers: bool,
) -> HttpResponse {
    same_answer(
        client,
        server,
        (method, path, body.as_bytes()),
        token,
        headers,
    )
}

fn same(client: &Agent, server: &Agent, path: &str, token: Option<&str>) -> HttpResponse {
    same_as(client, server, ("GET", path, ""), token, true)
}

fn send(agent: &Agent, method: &str, path: &str, body: &str) -> HttpResponse {
    call(agent, method, path, body.as_bytes(), None)
}

/// A blocking read of `path` on the client from the index it is at now, woken by `write`.
fn woken_by(client: &Agent, path: &str, write: impl FnOnce()) -> HttpResponse {
    let head = client.get(path);
    assert_eq!(head.status, 200, "{}", head.text());
    let index = head.header("X-Consul-Index").unwrap().to_string();
    let separator = if path.contains('?') { '&' } else { '?' };
    let blocked = format!("{path}{separator}index={index}&wait=30s");
    let waiter = {
        let addr = client.addr();
        std::thread::spawn(move || common::request(addr, "GET", &blocked, b"", &[]))
    };
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !waiter.is_finished(),
        "{path}: the blocking read answered at once"
    );
    write();
    let woken = waiter.join().unwrap();
    assert_eq!(woken.status, 200, "{}", woken.text());
    assert_ne!(woken.header("X-Consul-Index"), Some(index.as_str()));
    woken
}

#[test]
fn a_client_agent_manages_intentions_through_typed_calls() {
    let cluster = Cluster::start(1, &["-hcl", common::PROMETHEUS_HCL]);
    let data = TempDir::new("intention-calls-client");
    let client = cluster.start_client(&data, &[]);
    client.wait_ready();
    let server = &cluster.servers[0];
    // L7 permissions need an HTTP destination.
    let http = r#"{"Kind": "service-defaults", "Name": "db", "Protocol": "http"}"#;
    assert_eq!(send(server, "PUT", "/v1/config", http).text(), "true");

    // Creates: a legacy POST answers the server's new ID; upserts by name answer true (on
    // another destination: the store keeps legacy and by-name intentions apart).
    let legacy = r#"{"SourceName": "web", "DestinationName": "cache", "Action": "allow", "Description": "<d&>", "Meta": {"team": "a"}}"#;
    let created = send(&client, "POST", "/v1/connect/intentions", legacy);
    assert_eq!(created.status, 200, "{}", created.text());
    let id = created.json()["ID"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 36, "{id}");
    common::wait_for_log(server, &["rpc: call Intention.Apply"]);
    let exact = "/v1/connect/intentions/exact?source=api&destination=db";
    let upserted = send(&client, "PUT", exact, r#"{"Action": "deny"}"#);
    assert_eq!((upserted.status, upserted.text().as_str()), (200, "true"));
    let l7 = r#"{"Permissions": [{"Action": "deny", "HTTP": {"PathPrefix": "/admin", "Methods": ["GET", "PUT"], "Header": [{"Name": "x-a", "Exact": "<b>"}]}}], "Description": "l7"}"#;
    let path = "/v1/connect/intentions/exact?source=admin&destination=db";
    assert_eq!(send(&client, "PUT", path, l7).text(), "true");
    assert_eq!(
        server
            .get("/v1/connect/intentions")
            .json()
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Reads answer as the server's.
    let by_id = format!("/v1/connect/intentions/{id}");
    for path in [
        "/v1/connect/intentions",
        "/v1/connect/intentions?pretty",
        "/v1/connect/intentions?filter=SourceName%20%3D%3D%20web",
        by_id.as_str(),
        &format!("{by_id}?pretty"),
        "/v1/connect/intentions/exact?source=web&destination=cache",
        "/v1/connect/intentions/exact?source=admin&destination=default/db",
        "/v1/connect/intentions/match?by=destination&name=db&name=default/db&name=cache&name=other",
        "/v1/connect/intentions/match?by=source&name=web",
        "/v1/connect/intentions/check?source=web&destination=cache",
        "/v1/connect/intentions/check?source=api&destination=db",
        "/v1/connect/intentions/check?source=nobody&destination=db",
        "/v1/connect/intentions/check?source=web&destination=cache&stale",
        "/v1/connect/intentions/check?source=admin&destination=db&consistent",
    ] {
        same(&client, server, path, None);
    }
    let read = client.get(&by_id).json();
    assert_eq!(
        (read["SourceName"].as_str(), read["Description"].as_str()),
        (Some("web"), Some("<d&>"))
    );
    assert_eq!(read["Meta"]["team"], "a");
    let l7_read = client
        .get("/v1/connect/intentions/exact?source=admin&destination=db")
        .json();
    assert_eq!(l7_read["Permissions"][0]["HTTP"]["PathPrefix"], "/admin");
    let checked = client.get("/v1/connect/intentions/check?source=api&destination=db");
    assert_eq!(checked.json()["Allowed"], false);
    for method in ["Get", "List", "Match", "Check"] {
        common::wait_for_log(server, &[&format!("rpc: call Intention.{method}")]);
    }

    // Refusals and misses, in the server's words and statuses.
    let missing = "/v1/connect/intentions/0a1b2c3d-0000-0000-0000-000000000000";
    for (method, path, body) in [
        ("GET", missing, ""),
        (
            "GET",
            "/v1/connect/intentions/exact?source=nobody&destination=db",
            "",
        ),
        ("PUT", missing, legacy),
        ("DELETE", missing, ""),
        (
            "POST",
            "/v1/connect/intentions",
            r#"{"SourceName": "web", "DestinationName": "db"}"#,
        ),
        (
            "POST",
            "/v1/connect/intentions",
            r#"{"ID": "x", "SourceName": "a", "DestinationName": "db", "Action": "allow"}"#,
        ),
        ("POST", "/v1/connect/intentions", r#"{"Frob": 1"#),
        (
            "PUT",
            "/v1/connect/intentions/exact?source=web&destination=db",
            r#"{"Action": "allow", "Meta": {"x": "y"}}"#,
        ),
        (
            "PUT",
            "/v1/connect/intentions/exact?source=api&destination=cache",
            r#"{"Action": "allow"}"#,
        ),
        (
            "GET",
            "/v1/connect/intentions/match?by=sideways&name=db",
            "",
        ),
        ("GET", "/v1/connect/intentions?filter=Frob%20%3D%3D", ""),
    ] {
        let answer = same_as(&client, server, (method, path, body), None, false);
        assert_ne!(answer.status, 200, "{method} {path}: {}", answer.text());
    }

    // A blocking list on the client is woken by a write on the server.
    let exact_web = "/v1/connect/intentions/exact?source=cache&destination=db";
    let woken = woken_by(&client, "/v1/connect/intentions", || {
        assert_eq!(
            send(server, "PUT", exact_web, r#"{"Action": "allow"}"#).text(),
            "true"
        );
    });
    assert_eq!(woken.json().as_array().unwrap().len(), 4);
    // And a blocking check by one of the client's own writes.
    let woken = woken_by(
        &client,
        "/v1/connect/intentions/check?source=api&destination=db",
        || {
            let allow = send(&client, "PUT", exact, r#"{"Action": "allow"}"#);
            assert_eq!(allow.text(), "true");
        },
    );
    assert_eq!(woken.json()["Allowed"], true);

    // Update by ID answers the ID; the server holds the new action.
    let update = r#"{"SourceName": "web", "DestinationName": "cache", "Action": "deny", "Description": "now deny"}"#;
    let updated = send(&client, "PUT", &by_id, update);
    assert_eq!(updated.status, 200, "{}", updated.text());
    assert_eq!(updated.json()["ID"], id.as_str());
    assert_eq!(server.get(&by_id).json()["Action"], "deny");
    same(&client, server, &by_id, None);

    // Deletes by ID and by name (twice: nothing to delete is no error).
    let deleted = send(&client, "DELETE", &by_id, "");
    assert_eq!((deleted.status, deleted.text().as_str()), (200, "true"));
    assert_eq!(server.get(&by_id).status, 404);
    for _ in 0..2 {
        let deleted = send(&client, "DELETE", exact, "");
        assert_eq!((deleted.status, deleted.text().as_str()), (200, "true"));
    }
    same(&client, server, "/v1/connect/intentions", None);
    assert_eq!(
        client
            .get("/v1/connect/intentions")
            .json()
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // The discovery chain: a resolver with subsets, a splitter and a router on `db`.
    for body in [
        r#"{"Kind": "service-resolver", "Name": "db", "ConnectTimeout": "3s", "Subsets": {"v1": {"Filter": "Service.Meta.version == v1"}, "v2": {"Filter": "Service.Meta.version == v2"}}}"#,
        r#"{"Kind": "service-splitter", "Name": "db", "Splits": [{"Weight": 75.5, "ServiceSubset": "v1"}, {"Weight": 24.5, "ServiceSubset": "v2"}]}"#,
        r#"{"Kind": "service-router", "Name": "db", "Routes": [{"Match": {"HTTP": {"PathPrefix": "/admin", "Header": [{"Name": "x-a", "Exact": "b"}]}}, "Destination": {"ServiceSubset": "v2"}}]}"#,
    ] {
        assert_eq!(
            send(&client, "PUT", "/v1/config", body).text(),
            "true",
            "{body}"
        );
    }
    for path in [
        "/v1/discovery-chain/db",
        "/v1/discovery-chain/db?pretty",
        "/v1/discovery-chain/web",
        "/v1/discovery-chain/web?compile-dc=dc1",
    ] {
        same(&client, server, path, None);
    }
    let chain = client.get("/v1/discovery-chain/db").json();
    assert_eq!(chain["Chain"]["StartNode"], "router:db.default.default");
    for body in [
        r#"{"OverrideProtocol": "GRPC", "OverrideConnectTimeout": "7s", "OverrideMeshGateway": {"Mode": "local"}}"#,
        r#"{"OverrideConnectTimeout": "2s"}"#,
        "",
    ] {
        same_as(
            &client,
            server,
            ("POST", "/v1/discovery-chain/web", body),
            None,
            true,
        );
    }
    let overridden = send(
        &client,
        "POST",
        "/v1/discovery-chain/web",
        r#"{"OverrideProtocol": "grpc", "OverrideConnectTimeout": "7s"}"#,
    )
    .json();
    assert_eq!(overridden["Chain"]["Protocol"], "grpc");
    assert_eq!(overridden["Chain"]["Default"], false);
    for (method, body) in [
        ("POST", r#"{"OverrideMeshGateway": {"Mode": "sideways"}}"#),
        ("POST", r#"{"OverrideConnectTimeout": "soon"}"#),
    ] {
        let answer = same_as(
            &client,
            server,
            (method, "/v1/discovery-chain/web", body),
            None,
            false,
        );
        assert_eq!(answer.status, 400, "{}", answer.text());
    }
    common::wait_for_log(server, &["rpc: call DiscoveryChain.Get"]);
}

#[test]
fn a_client_agents_intention_calls_carry_the_requests_token() {
    let acl = format!(
        "acl {{\n enabled = true\n default_policy = \"deny\"\n tokens {{\n  initial_management = \"{MANAGEMENT}\"\n  agent = \"{MANAGEMENT}\"\n }}\n}}"
    );
    let cluster = Cluster::spawn(1, &["-hcl", &acl, "-hcl", common::PROMETHEUS_HCL]);
    let server = &cluster.servers[0];
    server.wait_ready();
    wait_for_token(server, MANAGEMENT);
    let data = TempDir::new("intention-calls-acl-client");
    let client = cluster.start_client(&data, &["-hcl", &acl]);
    client.wait_ready();

    let (reader, reader_accessor, _) = token_with_rules(
        server,
        MANAGEMENT,
        "db-reader",
        r#"service "db" { policy = "read" intentions = "read" }"#,
    );
    let token = |t: &str| -> Option<String> { Some(t.to_string()) };
    let post = |agent: &Agent, body: &str, t: Option<&str>| {
        call(agent, "POST", "/v1/connect/intentions", body.as_bytes(), t)
    };
    let web_db = r#"{"SourceName": "web", "DestinationName": "db", "Action": "allow"}"#;

    // A token without intentions:write on the destination is refused in Consul's words.
    let (asked, direct) = (
        post(&client, web_db, Some(&reader)),
        post(server, web_db, Some(&reader)),
    );
    assert_eq!((asked.status, asked.text()), (direct.status, direct.text()));
    assert_eq!(asked.status, 403);
    assert_eq!(
        asked.text(),
        format!(
            "Permission denied: token with AccessorID '{reader_accessor}' lacks permission 'intention:write' on \"db\""
        )
    );
    let exact = "/v1/connect/intentions/exact?source=api&destination=db";
    let refused = same_as(
        &client,
        server,
        ("PUT", exact, r#"{"Action": "deny"}"#),
        token(&reader).as_deref(),
        false,
    );
    assert_eq!(refused.status, 403, "{}", refused.text());

    // The management token writes; the reader reads db's, not others'.
    let created = post(&client, web_db, Some(MANAGEMENT));
    assert_eq!(created.status, 200, "{}", created.text());
    let id = created.json()["ID"].as_str().unwrap().to_string();
    let other = r#"{"SourceName": "web", "DestinationName": "cache", "Action": "deny"}"#;
    let other_id = post(&client, other, Some(MANAGEMENT)).json()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let listed = same(&client, server, "/v1/connect/intentions", Some(&reader));
    assert_eq!(listed.json().as_array().unwrap().len(), 1);
    assert_eq!(listed.header(FILTERED), Some("true"));
    same(&client, server, "/v1/connect/intentions", Some(MANAGEMENT));
    same(
        &client,
        server,
        &format!("/v1/connect/intentions/{id}"),
        Some(&reader),
    );
    let denied = same_as(
        &client,
        server,
        ("GET", &format!("/v1/connect/intentions/{other_id}"), ""),
        Some(&reader),
        false,
    );
    assert_eq!(denied.status, 403, "{}", denied.text());
    same(
        &client,
        server,
        "/v1/connect/intentions/check?source=web&destination=db",
        Some(&reader),
    );
    for path in [
        "/v1/connect/intentions/check?source=web&destination=cache",
        "/v1/connect/intentions/match?by=destination&name=cache",
        "/v1/connect/intentions/exact?source=web&destination=cache",
    ] {
        let denied = same_as(&client, server, ("GET", path, ""), Some(&reader), false);
        assert_eq!(denied.status, 403, "{path}: {}", denied.text());
    }
    let delete = call(
        &client,
        "DELETE",
        &format!("/v1/connect/intentions/{id}"),
        b"",
        Some(&reader),
    );
    assert_eq!(delete.status, 403, "{}", delete.text());
    let chain = same_as(
        &client,
        server,
        ("GET", "/v1/discovery-chain/cache", ""),
        Some(&reader),
        false,
    );
    assert_eq!(chain.status, 403, "{}", chain.text());
    same(&client, server, "/v1/discovery-chain/db", Some(&reader));
}

#[test]
fn an_independent_client_calls_intention_methods_on_the_server_port() {
    let agent = Agent::dev(&[]);
    let script = "intention_rpc.py";
    common::run_python(script, &[&agent.ip.to_string()], &[&agent]);
}
