//! What the route table's ACL rules let through, in-process: each route's rule applied by
//! `Route::serve` before its handler, and the reads that filter rows instead of refusing.

use super::Harness;
use crate::store::acl::AclOp;
use crate::store::Command;
use serde_json::json;

const MANAGEMENT: &str = "11111111-2222-3333-4444-555555555555";

/// A server with ACLs on and `default_policy = "deny"`, its builtin policies and anonymous
/// token initialized and a management token whose secret is [`MANAGEMENT`] — what the
/// leader's first duties and `acl.tokens.initial_management` leave in the store.
fn denying_server() -> Harness {
    let mut h = Harness::with_hcl(r#"acl { enabled = true default_policy = "deny" }"#);
    let now_unix_ns = 1_800_000_000_000_000_000;
    h.apply(&Command::Acl(AclOp::Initialize { now_unix_ns }));
    h.apply(&Command::Acl(AclOp::InitialManagement {
        accessor_id: "aaaaaaaa-0000-0000-0000-000000000001".into(),
        secret_id: MANAGEMENT.into(),
        now_unix_ns,
    }));
    h
}

/// A token holding one policy made of `rules`; its SecretID.
fn token_with_rules(h: &mut Harness, name: &str, rules: &str) -> String {
    let policy = h.check(
        &format!("PUT /v1/acl/policy?token={MANAGEMENT}"),
        &json!({"Name": name, "Rules": rules}).to_string(),
    );
    assert_eq!(policy.status, 200, "{}", policy.text());
    let token = h.check(
        &format!("PUT /v1/acl/token?token={MANAGEMENT}"),
        &json!({"Policies": [{"Name": name}]}).to_string(),
    );
    assert_eq!(token.status, 200, "{}", token.text());
    token.json()["SecretID"]
        .as_str()
        .expect("a SecretID")
        .to_string()
}

#[test]
fn the_anonymous_token_is_denied_with_consuls_words() {
    let mut h = denying_server();
    let read = h.check("GET /v1/kv/a", "");
    assert_eq!(read.status, 403);
    assert!(
        read.text().starts_with("Permission denied: token with AccessorID '00000000-0000-0000-0000-000000000002' lacks permission 'key:read' on \"a\""),
        "{}",
        read.text()
    );
    let write = h.check("PUT /v1/kv/a", "v");
    assert_eq!(write.status, 403);
    assert!(write.text().contains("'key:write'"), "{}", write.text());
}

#[test]
fn an_unknown_secret_is_403_acl_not_found() {
    let mut h = denying_server();
    let answer = h.check(
        "GET /v1/kv/a?token=99999999-9999-9999-9999-999999999999",
        "",
    );
    assert_eq!(
        (answer.status, answer.text().as_str()),
        (403, "ACL not found")
    );
}

#[test]
fn a_key_prefix_rule_allows_its_prefix_only() {
    let mut h = denying_server();
    let secret = token_with_rules(&mut h, "app", r#"key_prefix "app/" { policy = "write" }"#);
    let inside = h.check(&format!("PUT /v1/kv/app/x?token={secret}"), "v");
    assert_eq!((inside.status, inside.text().as_str()), (200, "true"));
    let outside = h.check(&format!("PUT /v1/kv/other?token={secret}"), "v");
    assert_eq!(outside.status, 403);
    let read = h.check(&format!("GET /v1/kv/app/x?token={secret}"), "");
    assert_eq!(read.status, 200);
}

#[test]
fn a_recursive_read_keeps_the_keys_the_token_may_read_and_says_it_filtered() {
    let mut h = denying_server();
    for key in ["app/a", "app/b", "secret/s"] {
        let put = h.check(&format!("PUT /v1/kv/{key}?token={MANAGEMENT}"), "v");
        assert_eq!(put.status, 200);
    }
    let secret = token_with_rules(
        &mut h,
        "app-read",
        r#"key_prefix "app/" { policy = "read" }"#,
    );
    // Consul checks the listing itself against the prefix asked for: key:list needs
    // read on it, so the token lists from "app/".
    let listed = h.check(&format!("GET /v1/kv/app/?recurse&token={secret}"), "");
    assert_eq!(listed.status, 200, "{}", listed.text());
    let keys: Vec<_> = listed
        .json()
        .as_array()
        .expect("a list")
        .iter()
        .map(|entry| entry["Key"].clone())
        .collect();
    assert_eq!(keys, [json!("app/a"), json!("app/b")]);
    let management = h.check(&format!("GET /v1/kv/?recurse&token={MANAGEMENT}"), "");
    assert_eq!(management.json().as_array().map(Vec::len), Some(3));
}

#[test]
fn catalog_reads_leave_out_services_the_token_cannot_read() {
    let mut h = denying_server();
    for (id, name) in [("web-1", "web"), ("db-1", "db")] {
        let body = json!({
            "Node": "n1",
            "Address": "10.0.0.1",
            "Service": {"ID": id, "Service": name},
        });
        let answer = h.check(
            &format!("PUT /v1/catalog/register?token={MANAGEMENT}"),
            &body.to_string(),
        );
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    let secret = token_with_rules(
        &mut h,
        "web-read",
        r#"service "web" { policy = "read" } node_prefix "" { policy = "read" }"#,
    );
    let services = h.check(&format!("GET /v1/catalog/services?token={secret}"), "");
    assert_eq!(services.status, 200);
    assert_eq!(services.json(), json!({"web": []}));
    assert_eq!(
        services.header("X-Consul-Results-Filtered-By-ACLs"),
        Some("true")
    );
    let all = h.check(&format!("GET /v1/catalog/services?token={MANAGEMENT}"), "");
    assert_eq!(all.json(), json!({"db": [], "web": []}));
    assert_eq!(all.header("X-Consul-Results-Filtered-By-ACLs"), None);
}

#[test]
fn acl_writes_need_acl_write() {
    let mut h = denying_server();
    let secret = token_with_rules(&mut h, "reader", r#"acl = "read""#);
    let create = h.check(
        &format!("PUT /v1/acl/policy?token={secret}"),
        &json!({"Name": "sneaky", "Rules": ""}).to_string(),
    );
    assert_eq!(create.status, 403);
    assert!(create.text().contains("'acl:write'"), "{}", create.text());
    let list = h.check(&format!("GET /v1/acl/policies?token={secret}"), "");
    assert_eq!(list.status, 200, "acl:read lists policies");
}
