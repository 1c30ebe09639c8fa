//! Helpers the ACL tests share: requests with a token, writes as a token that must succeed,
//! a token made from a policy's rules, waiting for the initial management token, and two
//! agents' answers to one request compared (a client agent's or a follower's against the
//! server that answers itself).

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

/// The header that says a token hid rows.
pub const FILTERED_HEADER: &str = "X-Consul-Results-Filtered-By-ACLs";

/// [`same_answer`] for each GET of `paths` (with the query's headers), each answer's
/// status one of `statuses`.
pub fn same_gets(
    asked: &Agent,
    direct: &Agent,
    paths: &[&str],
    token: Option<&str>,
    statuses: &[u16],
) {
    for path in paths {
        let answer = same_answer(asked, direct, ("GET", path, b""), token, true);
        assert!(
            statuses.contains(&answer.status),
            "{path}: {} {}",
            answer.status,
            answer.text()
        );
    }
}

/// `method path` with `body` on `asked` (a client agent, a follower) and on `direct` (the
/// server that answers itself) with `token`, until both answer the same status, body and
/// `Content-Type` (bounded: 10 s; a write lands on one a moment before the other sees it);
/// `asked`'s answer. With `headers`, the query's headers must match too (`X-Consul-Index`,
/// `X-Consul-KnownLeader`, the filtered-by-ACLs header; a refusal carries none on either).
pub fn same_answer(
    asked: &Agent,
    direct: &Agent,
    (method, path, body): (&str, &str, &[u8]),
    token: Option<&str>,
    headers: bool,
) -> HttpResponse {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = call(asked, method, path, body, token);
        let expected = call(direct, method, path, body, token);
        let header_names = ["X-Consul-Index", "X-Consul-KnownLeader", FILTERED_HEADER];
        let same = answer.status == expected.status
            && answer.body == expected.body
            && answer.header("Content-Type") == expected.header("Content-Type")
            && (!headers
                || header_names
                    .iter()
                    .all(|name| answer.header(name) == expected.header(name)));
        if same {
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "{method} {path}: asked\n{} {:?}\n{}\nanswering itself\n{} {:?}\n{}",
            answer.status,
            answer.headers,
            answer.text(),
            expected.status,
            expected.headers,
            expected.text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
