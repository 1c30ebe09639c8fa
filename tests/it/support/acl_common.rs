//! Helpers the ACL tests share: requests with a token, writes as a token that must succeed,
//! a token made from a policy's rules, and waiting for the initial management token.

#![allow(dead_code)]

use crate::common::{request, Agent, HttpResponse};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A request with `X-Consul-Token: token`, or none.
pub fn call(
    agent: &Agent,
    method: &str,
    path: &str,
    body: &[u8],
    token: Option<&str>,
) -> HttpResponse {
    match token {
        Some(token) => request(
            agent.addr(),
            method,
            path,
            body,
            &[("X-Consul-Token", token)],
        ),
        None => request(agent.addr(), method, path, body, &[]),
    }
}

/// A request as `token` that must answer 200; its JSON (`null` for an empty body).
pub fn as_token(agent: &Agent, token: &str, method: &str, path: &str, body: Value) -> Value {
    let response = call(
        agent,
        method,
        path,
        body.to_string().as_bytes(),
        Some(token),
    );
    assert_eq!(response.status, 200, "{method} {path}: {}", response.text());
    serde_json::from_slice(&response.body).unwrap_or(Value::Null)
}

/// A policy named `name` with `rules` and a token linked to it, made with `management`:
/// the token's (SecretID, AccessorID) and the policy's ID.
pub fn token_with_rules(
    agent: &Agent,
    management: &str,
    name: &str,
    rules: &str,
) -> (String, String, String) {
    let policy = as_token(
        agent,
        management,
        "PUT",
        "/v1/acl/policy",
        json!({"Name": name, "Rules": rules}),
    );
    let token = as_token(
        agent,
        management,
        "PUT",
        "/v1/acl/token",
        json!({"Description": name, "Policies": [{"ID": policy["ID"]}]}),
    );
    let text = |v: &Value| v.as_str().expect("an ID").to_string();
    (
        text(&token["SecretID"]),
        text(&token["AccessorID"]),
        text(&policy["ID"]),
    )
}

/// Waits (bounded: 20 s) until `token` resolves: the leader has created the initial
/// management token.
pub fn wait_for_token(agent: &Agent, token: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while call(agent, "GET", "/v1/acl/token/self", b"", Some(token)).status != 200 {
        assert!(Instant::now() < deadline, "the token never resolved");
        std::thread::sleep(Duration::from_millis(100));
    }
}
