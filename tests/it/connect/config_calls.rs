//! Config entries through a client agent as Consul's typed calls: `/v1/config` on a client
//! agent becomes `ConfigEntry.Apply`, `.Get`, `.List`, `.ListAll` and `.Delete` on its
//! server's RPC port, and the client answers byte for byte what the server answers for the
//! same request (status, body, `X-Consul-Index`, the filtered-by-ACLs header). An independent msgpack-rpc client (`tests/python/config_entry_rpc.py`)
//! calls the methods on a server's port in Consul's own shapes.

use crate::acl_common;
use crate::common;

use acl_common::{
    call, same_answer, token_with_rules, wait_for_token, FILTERED_HEADER as FILTERED,
};
use common::{Agent, Cluster, HttpResponse, TempDir};
use std::time::Duration;

const MANAGEMENT: &str = "5d0c8a1e-3f2b-4c6d-9e7f-36a1b2c3d4e5";

/// `method path` on the client and on its server with `token`, until both answer the same,
/// query headers included (`acl_common::same_answer`); the client's answer.
fn same(
    client: &Agent,
    server: &Agent,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> HttpResponse {
    same_answer(client, server, (method, path, b""), token, true)
}

fn put(agent: &Agent, path: &str, body: &str, token: Option<&str>) -> HttpResponse {
    call(agent, "PUT", path, body.as_bytes(), token)
}

#[test]
fn a_client_agent_manages_config_entries_through_typed_calls() {
    let cluster = Cluster::start(1, &["-hcl", common::PROMETHEUS_HCL]);
    let data = TempDir::new("config-calls-client");
    let client = cluster.start_client(&data, &[]);
    client.wait_ready();
    let server = &cluster.servers[0];

    // Writes: each kind's body is decoded on the client and applied by the server.
    let bodies = [
        r#"{"Kind": "service-defaults", "Name": "web", "Protocol": "HTTP", "Meta": {"team": "<a&b>"}}"#,
        r#"{"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http", "ratio": 0.5, "nested": {"z": [1, "x"]}}}"#,
        r#"{"Kind": "service-resolver", "Name": "web", "ConnectTimeout": "15s", "DefaultSubset": "v1", "Subsets": {"v1": {"Filter": "Service.Meta.version == v1"}}}"#,
        r#"{"Kind": "service-intentions", "Name": "db", "Sources": [{"Name": "web", "Action": "allow"}, {"Name": "*", "Action": "deny"}]}"#,
        r#"{"Kind": "mesh", "TransparentProxy": {"MeshDestinationsOnly": true}}"#,
    ];
    for body in bodies {
        let written = put(&client, "/v1/config", body, None);
        assert_eq!(
            (written.status, written.text().as_str()),
            (200, "true"),
            "{body}"
        );
    }
    common::wait_for_log(server, &["rpc: call ConfigEntry.Apply"]);

    // Reads, as the server answers them.
    for path in [
        "/v1/config/service-defaults/web",
        "/v1/config/service-defaults/web?pretty",
        "/v1/config/proxy-defaults/global",
        "/v1/config/service-resolver/web",
        "/v1/config/service-intentions/db",
        "/v1/config/mesh/mesh",
        "/v1/config/service-defaults/nothing",
        "/v1/config/service-defaults",
        "/v1/config/service-intentions?pretty",
        "/v1/config/terminating-gateway",
        "/v1/config/",
        "/v1/config/frob/web",
        "/v1/config/service-defaults/web?stale",
        "/v1/config/service-defaults/web?consistent",
    ] {
        same(&client, server, "GET", path, None);
    }
    let entry = client.get("/v1/config/service-defaults/web").json();
    assert_eq!(entry["Protocol"], "http");
    assert_eq!(entry["Meta"]["team"], "<a&b>");
    assert_eq!(
        client.get("/v1/config/").json().as_array().unwrap().len(),
        5
    );
    let missing = client.get("/v1/config/service-defaults/nothing");
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.text(),
        "Config entry not found for \"service-defaults\" / \"nothing\""
    );
    common::wait_for_log(server, &["rpc: call ConfigEntry.Get"]);
    common::wait_for_log(server, &["rpc: call ConfigEntry.List"]);
    common::wait_for_log(server, &["rpc: call ConfigEntry.ListAll"]);

    // CAS: a stale index is refused, the current one applied.
    let index = entry["ModifyIndex"].as_u64().unwrap();
    let grpc = r#"{"Kind": "service-defaults", "Name": "web", "Protocol": "grpc"}"#;
    assert_eq!(put(&client, "/v1/config?cas=1", grpc, None).text(), "false");
    let cas = format!("/v1/config?cas={index}");
    assert_eq!(put(&client, &cas, grpc, None).text(), "true");
    assert_eq!(
        server.get("/v1/config/service-defaults/web").json()["Protocol"],
        "grpc"
    );

    // A body the handler refuses is refused on the client in the server's words.
    for body in [
        r#"{"Kind": "service-defaults", "Name": ""}"#,
        r#"{"Kind": "frob", "Name": "x"}"#,
        r#"{"Name": "x"}"#,
        r#"{"Kind": "service-defaults", "Name": "x", "Frob": 1}"#,
    ] {
        let (asked, direct) = (
            put(&client, "/v1/config", body, None),
            put(server, "/v1/config", body, None),
        );
        assert_eq!(
            (asked.status, asked.text()),
            (direct.status, direct.text()),
            "{body}"
        );
        assert_ne!(asked.status, 200, "{body}");
    }

    // A blocking read on the client is woken by a write on the server.
    let head = client.get("/v1/config/service-defaults/web");
    let index = head.header("X-Consul-Index").unwrap().to_string();
    let blocked = format!("/v1/config/service-defaults/web?index={index}&wait=30s");
    let waiter = {
        let addr = client.addr();
        std::thread::spawn(move || common::request(addr, "GET", &blocked, b"", &[]))
    };
    std::thread::sleep(Duration::from_secs(1));
    assert!(!waiter.is_finished(), "the blocking read answered at once");
    let http2 = r#"{"Kind": "service-defaults", "Name": "web", "Protocol": "http2"}"#;
    assert_eq!(put(server, "/v1/config", http2, None).text(), "true");
    let woken = waiter.join().unwrap();
    assert_eq!(woken.status, 200);
    assert_eq!(woken.json()["Protocol"], "http2");
    // A blocking list too.
    let head = client.get("/v1/config/service-defaults");
    let index = head.header("X-Consul-Index").unwrap().to_string();
    let blocked = format!("/v1/config/service-defaults?index={index}&wait=30s");
    let waiter = {
        let addr = client.addr();
        std::thread::spawn(move || common::request(addr, "GET", &blocked, b"", &[]))
    };
    std::thread::sleep(Duration::from_secs(1));
    assert!(!waiter.is_finished(), "the blocking list answered at once");
    let api = r#"{"Kind": "service-defaults", "Name": "api", "Protocol": "tcp"}"#;
    assert_eq!(put(&client, "/v1/config", api, None).text(), "true");
    assert_eq!(waiter.join().unwrap().json().as_array().unwrap().len(), 2);

    // Deletes: a stale delete-cas is refused, a plain delete answers `{}`.
    let stale = client.delete("/v1/config/service-defaults/api?cas=1");
    assert_eq!((stale.status, stale.text().as_str()), (200, "false"));
    let deleted = client.delete("/v1/config/service-defaults/api");
    assert_eq!((deleted.status, deleted.text().as_str()), (200, "{}"));
    let index = server.get("/v1/config/service-defaults/web").json()["ModifyIndex"]
        .as_u64()
        .unwrap();
    let cas = format!("/v1/config/service-defaults/web?cas={index}");
    assert_eq!(client.delete(&cas).text(), "true");
    let (asked, direct) = (
        client.delete("/v1/config/proxy-defaults/other"),
        server.delete("/v1/config/proxy-defaults/other"),
    );
    assert_eq!((asked.status, asked.text()), (direct.status, direct.text()));
    common::wait_for_log(server, &["rpc: call ConfigEntry.Delete"]);
    same(&client, server, "GET", "/v1/config/service-defaults", None);
    assert_eq!(server.get("/v1/config/service-defaults/web").status, 404);
}

#[test]
fn a_client_agents_config_entry_calls_carry_the_requests_token() {
    let acl = format!(
        "acl {{\n enabled = true\n default_policy = \"deny\"\n tokens {{\n  initial_management = \"{MANAGEMENT}\"\n  agent = \"{MANAGEMENT}\"\n }}\n}}"
    );
    let cluster = Cluster::spawn(1, &["-hcl", &acl, "-hcl", common::PROMETHEUS_HCL]);
    let server = &cluster.servers[0];
    server.wait_ready();
    wait_for_token(server, MANAGEMENT);
    let data = TempDir::new("config-calls-acl-client");
    let client = cluster.start_client(&data, &["-hcl", &acl]);
    client.wait_ready();

    let (web_only, _, _) = token_with_rules(
        server,
        MANAGEMENT,
        "web-only",
        r#"service "web" { policy = "write" }"#,
    );
    // Anonymous writes and reads are refused in the server's words, with its status.
    let web = r#"{"Kind": "service-defaults", "Name": "web", "Protocol": "http"}"#;
    let (asked, direct) = (
        put(&client, "/v1/config", web, None),
        put(server, "/v1/config", web, None),
    );
    assert_eq!((asked.status, asked.text()), (direct.status, direct.text()));
    assert_eq!(asked.status, 403, "{}", asked.text());
    // The token's write goes through; another service's is refused.
    assert_eq!(
        put(&client, "/v1/config", web, Some(&web_only)).text(),
        "true"
    );
    let db = r#"{"Kind": "service-defaults", "Name": "db", "Protocol": "http"}"#;
    assert_eq!(put(&client, "/v1/config", db, Some(&web_only)).status, 403);
    assert_eq!(
        put(&client, "/v1/config", db, Some(MANAGEMENT)).text(),
        "true"
    );
    let denied = same(
        &client,
        server,
        "GET",
        "/v1/config/service-defaults/db",
        Some(&web_only),
    );
    assert_eq!(denied.status, 403, "{}", denied.text());
    same(
        &client,
        server,
        "GET",
        "/v1/config/service-defaults/web",
        Some(&web_only),
    );
    same(
        &client,
        server,
        "GET",
        "/v1/config/service-defaults/web",
        None,
    );
    // A list leaves out what the token may not read, and says so to a caller with a token.
    let listed = same(
        &client,
        server,
        "GET",
        "/v1/config/service-defaults",
        Some(&web_only),
    );
    assert_eq!(listed.json().as_array().unwrap().len(), 1);
    assert_eq!(listed.header(FILTERED), Some("true"));
    same(&client, server, "GET", "/v1/config/", Some(&web_only));
    let anonymous = same(&client, server, "GET", "/v1/config/service-defaults", None);
    assert_eq!(anonymous.text(), "[]");
    let all = same(&client, server, "GET", "/v1/config/", Some(MANAGEMENT));
    assert_eq!(all.json().as_array().unwrap().len(), 2);
    let (asked, direct) = (
        call(
            &client,
            "DELETE",
            "/v1/config/service-defaults/db",
            b"",
            Some(&web_only),
        ),
        call(
            server,
            "DELETE",
            "/v1/config/service-defaults/db",
            b"",
            Some(&web_only),
        ),
    );
    assert_eq!((asked.status, asked.text()), (direct.status, direct.text()));
    assert_eq!(asked.status, 403);
}

#[test]
fn an_independent_client_calls_config_entry_methods_on_the_server_port() {
    let agent = Agent::dev(&[]);
    let script = "config_entry_rpc.py";
    common::run_python(script, &[&agent.ip.to_string()], &[&agent]);
}
