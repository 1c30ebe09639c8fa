//! A client agent's `/v1/acl/*` token, policy and role endpoints as Consul's typed calls
//! (`ACL.TokenRead|TokenList|TokenSet|TokenClone|TokenDelete`, `ACL.Policy*`, `ACL.Role*`):
//! one ACL-enabled server and one client agent, py-consul against the client agent for
//! create / read / list / update / delete, token self, a refusal in Consul's words, and a raw
//! msgpack-rpc call on the server's port (`tests/python/acl_client_calls.py`); then the
//! client agent's answers to the same reads equal the server's (status, body, index), and a
//! blocking list on the client agent wakes on a write.

use crate::acl_common;
use crate::common;

use acl_common::{call, wait_for_token};
use common::{Cluster, HttpResponse, TempDir};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const MANAGEMENT: &str = "5c2e1d3b-5555-4e7a-9c59-0123456789ab";

fn acl_hcl() -> String {
    format!(
        "acl {{\n enabled = true\n default_policy = \"deny\"\n tokens {{\n  initial_management = \"{MANAGEMENT}\"\n  agent = \"{MANAGEMENT}\"\n }}\n}}\ntelemetry {{ prometheus_retention_time = \"1m\" }}"
    )
}

/// What a comparison looks at: the status, the body, and the index the headers carry.
fn seen(response: &HttpResponse) -> (u16, String, Option<String>) {
    (
        response.status,
        response.text(),
        response.header("X-Consul-Index").map(str::to_string),
    )
}

#[test]
fn a_client_agent_serves_acl_tokens_policies_and_roles_with_typed_calls() {
    let cluster = Cluster::spawn(1, &["-hcl", &acl_hcl()]);
    let server = &cluster.servers[0];
    server.wait_ready();
    wait_for_token(server, MANAGEMENT);
    let client_data = TempDir::new("acl-calls-client");
    let client = cluster.start_client(&client_data, &["-hcl", &acl_hcl()]);
    client.wait_ready();
    wait_for_token(&client, MANAGEMENT);

    // py-consul through the client agent, and one raw call on the server's port.
    let script = "acl_client_calls.py";
    let printed = common::run_python(
        script,
        &[
            &client.ip.to_string(),
            &client.http_port.to_string(),
            &server.ip.to_string(),
            MANAGEMENT,
        ],
        &[&client, server],
    );
    let created: Value = serde_json::from_str(printed.trim()).unwrap();
    let field = |name: &str| created[name].as_str().unwrap().to_string();
    let (policy, role, accessor, secret) = (
        field("policy"),
        field("role"),
        field("accessor"),
        field("secret"),
    );

    // The same reads on the client agent and on its server answer alike.
    let reads: Vec<(String, &str)> = vec![
        (format!("/v1/acl/token/{accessor}"), MANAGEMENT),
        ("/v1/acl/tokens".to_string(), MANAGEMENT),
        (format!("/v1/acl/tokens?policy={policy}"), MANAGEMENT),
        ("/v1/acl/policies".to_string(), MANAGEMENT),
        (format!("/v1/acl/policy/{policy}"), MANAGEMENT),
        ("/v1/acl/policy/name/calls-policy".to_string(), MANAGEMENT),
        ("/v1/acl/roles".to_string(), MANAGEMENT),
        (format!("/v1/acl/role/{role}"), MANAGEMENT),
        ("/v1/acl/role/name/calls-role".to_string(), MANAGEMENT),
        ("/v1/acl/token/self".to_string(), MANAGEMENT),
        ("/v1/acl/token/self".to_string(), &secret),
        // Not there: Consul's 404; refused: its 403 with the server's words.
        (
            "/v1/acl/token/00000000-0000-4000-8000-000000000000".to_string(),
            MANAGEMENT,
        ),
        ("/v1/acl/role/name/no-such-role".to_string(), MANAGEMENT),
        ("/v1/acl/policies".to_string(), &secret),
        (format!("/v1/acl/token/{accessor}"), &secret),
        (
            "/v1/acl/token/self".to_string(),
            "00000000-0000-4000-8000-00000000dead",
        ),
        // The agent answers templated policies itself, after the same `acl:read` check.
        ("/v1/acl/templated-policies".to_string(), MANAGEMENT),
        ("/v1/acl/templated-policies".to_string(), &secret),
        (
            "/v1/acl/templated-policy/name/builtin/service".to_string(),
            &secret,
        ),
    ];
    for (path, token) in &reads {
        let on_client = call(&client, "GET", path, b"", Some(token));
        let on_server = call(server, "GET", path, b"", Some(token));
        assert_eq!(
            seen(&on_client),
            seen(&on_server),
            "GET {path} as {token}: the client agent and its server differ"
        );
    }
    let denied = call(&client, "GET", "/v1/acl/policies", b"", Some(&secret));
    assert_eq!(denied.status, 403, "{}", denied.text());
    assert!(
        denied
            .text()
            .starts_with("Permission denied: token with AccessorID"),
        "{}",
        denied.text()
    );
    // A write refused by the server: the same 403 on both.
    let body = json!({"Name": "refused"}).to_string();
    let on_client = call(
        &client,
        "PUT",
        "/v1/acl/policy",
        body.as_bytes(),
        Some(&secret),
    );
    let on_server = call(
        server,
        "PUT",
        "/v1/acl/policy",
        body.as_bytes(),
        Some(&secret),
    );
    assert_eq!(seen(&on_client), seen(&on_server));
    assert_eq!(on_client.status, 403);

    // A blocking list on the client agent wakes when a policy is written.
    let index = call(&client, "GET", "/v1/acl/policies", b"", Some(MANAGEMENT)).index();
    let client_addr = client.addr();
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let response = common::request(
            client_addr,
            "GET",
            &format!("/v1/acl/policies?index={index}&wait=20s"),
            b"",
            &[("X-Consul-Token", MANAGEMENT)],
        );
        (response, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    let written = call(
        &client,
        "PUT",
        "/v1/acl/policy",
        json!({"Name": "wakes-the-list"}).to_string().as_bytes(),
        Some(MANAGEMENT),
    );
    assert_eq!(written.status, 200, "{}", written.text());
    let (woken, waited) = waiter.join().unwrap();
    assert_eq!(woken.status, 200, "{}", woken.text());
    assert!(woken.index() > index, "the list's index did not move");
    assert!(waited < Duration::from_secs(15), "woken after {waited:?}");
    assert!(woken.text().contains("wakes-the-list"), "{}", woken.text());

    assert!(
        !client.log().contains("panicked") && !server.log().contains("panicked"),
        "an agent panicked"
    );
}
