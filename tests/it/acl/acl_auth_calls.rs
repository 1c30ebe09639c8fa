//! A client agent's ACL bootstrap, auth method, binding rule, login and logout endpoints as
//! Consul's typed calls (`ACL.BootstrapTokens`, `ACL.AuthMethodRead|List|Set|Delete`,
//! `ACL.BindingRuleRead|List|Set|Delete`, `ACL.Login`, `ACL.Logout`): one ACL-enabled server
//! and one client agent on a fresh cluster. The bootstrap goes through the client agent (and
//! the second one is refused in Consul's words on both agents); py-consul against the client
//! agent creates, reads, lists, updates and deletes auth methods and binding rules, logs in
//! with a JWT the method verifies and logs out, meets a refusal, and makes raw msgpack-rpc
//! calls of the new methods on the server's port (`tests/python/acl_auth_calls.py`); then
//! the client agent's answers to the same requests equal the server's, and a blocking list
//! on the client agent wakes on a write.

use crate::acl_common;
use crate::common;

use acl_common::call;
use common::{Cluster, HttpResponse, TempDir};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Default `allow` so that nothing needs a token before the bootstrap (the metrics read
/// among them); the refusals below come from a token whose policy allows only `acl:read`.
fn acl_hcl() -> String {
    "acl {\n enabled = true\n default_policy = \"allow\"\n}\ntelemetry { prometheus_retention_time = \"1m\" }"
        .to_string()
}

/// What a comparison looks at: the status, the body, and the index the headers carry.
fn seen(response: &HttpResponse) -> (u16, String, Option<String>) {
    (
        response.status,
        response.text(),
        response.header("X-Consul-Index").map(str::to_string),
    )
}

/// A login token's answer without what differs from one login to the next: its IDs, its
/// times, its raft indexes and its hash (over the fields that differ).
fn masked(mut token: Value) -> Value {
    for field in [
        "AccessorID",
        "SecretID",
        "CreateTime",
        "ExpirationTime",
        "CreateIndex",
        "ModifyIndex",
        "Hash",
    ] {
        assert!(token.get(field).is_some(), "{field} in {token}");
        token[field] = json!("<masked>");
    }
    token
}

#[test]
fn a_client_agent_serves_acl_bootstrap_auth_methods_binding_rules_and_login_with_typed_calls() {
    let cluster = Cluster::spawn(1, &["-hcl", &acl_hcl()]);
    let server = &cluster.servers[0];
    server.wait_ready();
    let client_data = TempDir::new("acl-auth-client");
    let client = cluster.start_client(&client_data, &["-hcl", &acl_hcl()]);
    client.wait_ready();

    // The bootstrap, through the client agent, once the leader has set ACLs up.
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        let response = call(&client, "PUT", "/v1/acl/bootstrap", b"", None);
        if response.status == 200 || Instant::now() > deadline {
            break response;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(first.status, 200, "{}", first.text());
    let bootstrapped = first.json();
    let management = bootstrapped["SecretID"].as_str().unwrap().to_string();
    let accessor = bootstrapped["AccessorID"].as_str().unwrap();
    assert_eq!(bootstrapped["ID"], bootstrapped["SecretID"]);
    // The server's own view of that token, with the secret again as `ID`, as its
    // bootstrap answers.
    let mut on_server = call(
        server,
        "GET",
        &format!("/v1/acl/token/{accessor}"),
        b"",
        Some(&management),
    )
    .json();
    on_server["ID"] = on_server["SecretID"].clone();
    assert_eq!(bootstrapped, on_server);
    // The second bootstrap: refused alike by both agents, in Consul's words.
    let again_client = call(&client, "PUT", "/v1/acl/bootstrap", b"", None);
    let again_server = call(server, "PUT", "/v1/acl/bootstrap", b"", None);
    assert_eq!(seen(&again_client), seen(&again_server));
    assert_eq!(again_client.status, 403);
    assert!(
        again_client
            .text()
            .starts_with("Permission denied: ACL bootstrap no longer allowed (reset index: "),
        "{}",
        again_client.text()
    );
    // A bad body is the agent's own 400, as the server's.
    let bad_client = call(&client, "PUT", "/v1/acl/bootstrap", b"{\"Nope\": 1}", None);
    let bad_server = call(server, "PUT", "/v1/acl/bootstrap", b"{\"Nope\": 1}", None);
    assert_eq!(seen(&bad_client), seen(&bad_server));
    assert_eq!(bad_client.status, 400, "{}", bad_client.text());

    // py-consul through the client agent, and raw calls on the server's port.
    let script = "acl_auth_calls.py";
    let printed = common::run_python(
        script,
        &[
            &client.ip.to_string(),
            &client.http_port.to_string(),
            &server.ip.to_string(),
            &management,
        ],
        &[&client, server],
    );
    let created: Value = serde_json::from_str(printed.trim()).unwrap();
    let field = |name: &str| created[name].as_str().unwrap().to_string();
    let (rule, reader, jwt) = (field("rule"), field("reader"), field("jwt"));

    // The same reads on the client agent and on its server answer alike.
    let reads: Vec<(String, &str)> = vec![
        ("/v1/acl/auth-method/calls-jwt".to_string(), &management),
        ("/v1/acl/auth-method/calls-jwt".to_string(), &reader),
        ("/v1/acl/auth-methods".to_string(), &management),
        (format!("/v1/acl/binding-rule/{rule}"), &management),
        ("/v1/acl/binding-rules".to_string(), &management),
        (
            "/v1/acl/binding-rules?authmethod=calls-jwt".to_string(),
            &management,
        ),
        (
            "/v1/acl/binding-rules?authmethod=other-jwt".to_string(),
            &reader,
        ),
        // Not there: Consul's 404; an unknown token: its 403.
        ("/v1/acl/auth-method/other-jwt".to_string(), &management),
        (
            "/v1/acl/binding-rule/00000000-0000-4000-8000-000000000000".to_string(),
            &management,
        ),
        (
            "/v1/acl/auth-methods".to_string(),
            "00000000-0000-4000-8000-00000000dead",
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

    // Writes refused by the server (`acl:write`), and a bad body refused before any call:
    // the same answers on both.
    let refused_method = json!({"Name": "refused", "Type": "jwt", "Config": {}}).to_string();
    let refusals: Vec<(&str, String, Vec<u8>, &str)> = vec![
        (
            "PUT",
            "/v1/acl/auth-method".to_string(),
            refused_method.into_bytes(),
            &reader,
        ),
        (
            "DELETE",
            format!("/v1/acl/binding-rule/{rule}"),
            Vec::new(),
            &reader,
        ),
        (
            "PUT",
            "/v1/acl/binding-rule".to_string(),
            b"{\"AuthMethod\": 7}".to_vec(),
            &management,
        ),
    ];
    for (method, path, body, token) in &refusals {
        let on_client = call(&client, method, path, body, Some(token));
        let on_server = call(server, method, path, body, Some(token));
        assert_eq!(
            seen(&on_client),
            seen(&on_server),
            "{method} {path}: the client agent and its server differ"
        );
        assert!(
            on_client.status == 403 || on_client.status == 400,
            "{}",
            on_client.text()
        );
    }
    let denied = call(
        &client,
        "DELETE",
        &format!("/v1/acl/binding-rule/{rule}"),
        b"",
        Some(&reader),
    );
    assert!(
        denied
            .text()
            .starts_with("Permission denied: token with AccessorID"),
        "{}",
        denied.text()
    );

    // Login on both: the same token but for what differs per login; then each logs out.
    let login =
        json!({"AuthMethod": "calls-jwt", "BearerToken": jwt, "Meta": {"run": "7"}}).to_string();
    let on_client = call(&client, "POST", "/v1/acl/login", login.as_bytes(), None);
    let on_server = call(server, "POST", "/v1/acl/login", login.as_bytes(), None);
    assert_eq!(on_client.status, 200, "{}", on_client.text());
    assert_eq!(on_server.status, 200, "{}", on_server.text());
    let (client_token, server_token) = (on_client.json(), on_server.json());
    assert_eq!(masked(client_token.clone()), masked(server_token.clone()));
    assert_eq!(client_token["AuthMethod"], "calls-jwt");
    for (agent, token) in [(&client, &client_token), (server, &server_token)] {
        let secret = token["SecretID"].as_str().unwrap();
        let out = call(agent, "POST", "/v1/acl/logout", b"", Some(secret));
        assert_eq!((out.status, out.text().trim()), (200, "true"));
        let gone = call(
            agent,
            "GET",
            &format!("/v1/acl/token/{}", token["AccessorID"].as_str().unwrap()),
            b"",
            Some(&management),
        );
        assert_eq!(gone.status, 404, "{}", gone.text());
    }
    // Refused logins and logouts: the same answers on both.
    let refused: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        (
            "/v1/acl/login",
            json!({"AuthMethod": "no-such-method", "BearerToken": jwt})
                .to_string()
                .into_bytes(),
            None,
        ),
        (
            "/v1/acl/login",
            json!({"AuthMethod": "calls-jwt", "BearerToken": "not.a.jwt"})
                .to_string()
                .into_bytes(),
            None,
        ),
        ("/v1/acl/login", b"{\"AuthMethod\": [1]}".to_vec(), None),
        // A token no login made, and no token at all.
        ("/v1/acl/logout", Vec::new(), Some(&management)),
        ("/v1/acl/logout", Vec::new(), None),
        (
            "/v1/acl/logout",
            Vec::new(),
            Some("00000000-0000-4000-8000-00000000dead"),
        ),
    ];
    for (path, body, token) in &refused {
        let on_client = call(&client, "POST", path, body, *token);
        let on_server = call(server, "POST", path, body, *token);
        assert_eq!(
            seen(&on_client),
            seen(&on_server),
            "POST {path} as {token:?}: the client agent and its server differ"
        );
        assert!(
            matches!(on_client.status, 400 | 401 | 403),
            "POST {path}: {} {}",
            on_client.status,
            on_client.text()
        );
    }

    // A blocking list on the client agent wakes when an auth method is written.
    let index = call(
        &client,
        "GET",
        "/v1/acl/auth-methods",
        b"",
        Some(&management),
    )
    .index();
    let client_addr = client.addr();
    let waiter_token = management.clone();
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let response = common::request(
            client_addr,
            "GET",
            &format!("/v1/acl/auth-methods?index={index}&wait=20s"),
            b"",
            &[("X-Consul-Token", &waiter_token)],
        );
        (response, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    let method = call(
        &client,
        "GET",
        "/v1/acl/auth-method/calls-jwt",
        b"",
        Some(&management),
    )
    .json();
    let written = call(
        &client,
        "PUT",
        "/v1/acl/auth-method",
        json!({"Name": "wakes-the-list", "Type": "jwt", "Config": method["Config"]})
            .to_string()
            .as_bytes(),
        Some(&management),
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
