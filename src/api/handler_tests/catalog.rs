//! What the catalog handlers answer (`/v1/catalog/*`), in-process.

use super::Harness;
use serde_json::json;

/// Registers `node` at `address` with one service instance `id` of `name` and `tags`.
pub(super) fn register(
    h: &mut Harness,
    node: &str,
    address: &str,
    id: &str,
    name: &str,
    tags: &[&str],
) {
    let body = json!({
        "Node": node,
        "Address": address,
        "Service": {"ID": id, "Service": name, "Tags": tags, "Port": 8080},
    });
    let answer = h.check("PUT /v1/catalog/register", &body.to_string());
    assert_eq!((answer.status, answer.text().as_str()), (200, "true"));
}

#[test]
fn a_registered_service_lists_with_its_tags_and_its_instances() {
    let mut h = Harness::server();
    register(&mut h, "n1", "10.0.0.1", "web-1", "web", &["v1"]);
    register(&mut h, "n2", "10.0.0.2", "web-2", "web", &["v2"]);
    register(&mut h, "n2", "10.0.0.2", "db-1", "db", &[]);
    let services = h.check("GET /v1/catalog/services", "");
    assert_eq!(services.status, 200);
    assert_eq!(services.json(), json!({"db": [], "web": ["v1", "v2"]}));
    let instances = h.check("GET /v1/catalog/service/web", "").json();
    let nodes: Vec<_> = instances
        .as_array()
        .expect("a list")
        .iter()
        .map(|row| {
            (
                row["Node"].clone(),
                row["ServiceAddress"].clone(),
                row["Address"].clone(),
            )
        })
        .collect();
    assert_eq!(
        nodes,
        [
            (json!("n1"), json!(""), json!("10.0.0.1")),
            (json!("n2"), json!(""), json!("10.0.0.2"))
        ]
    );
    let tagged = h.check("GET /v1/catalog/service/web?tag=v2", "").json();
    assert_eq!(tagged.as_array().map(Vec::len), Some(1));
    assert_eq!(tagged[0]["ServiceID"], "web-2");
}

#[test]
fn a_node_answers_its_services_and_an_unknown_node_answers_null() {
    let mut h = Harness::server();
    register(&mut h, "n1", "10.0.0.1", "web-1", "web", &[]);
    let node = h.check("GET /v1/catalog/node/n1", "").json();
    assert_eq!(node["Node"]["Address"], "10.0.0.1");
    assert_eq!(node["Services"]["web-1"]["Service"], "web");
    let unknown = h.check("GET /v1/catalog/node/nobody", "");
    assert_eq!((unknown.status, unknown.text().as_str()), (200, "null"));
}

#[test]
fn deregistering_a_service_keeps_the_node_and_deregistering_the_node_removes_it() {
    let mut h = Harness::server();
    register(&mut h, "n1", "10.0.0.1", "web-1", "web", &[]);
    let gone = h.check(
        "PUT /v1/catalog/deregister",
        r#"{"Node":"n1","ServiceID":"web-1"}"#,
    );
    assert_eq!(gone.text(), "true");
    assert_eq!(h.check("GET /v1/catalog/service/web", "").json(), json!([]));
    let nodes = h.check("GET /v1/catalog/nodes", "").json();
    assert!(nodes
        .as_array()
        .expect("a list")
        .iter()
        .any(|n| n["Node"] == "n1"));
    h.check("PUT /v1/catalog/deregister", r#"{"Node":"n1"}"#);
    let nodes = h.check("GET /v1/catalog/nodes", "").json();
    assert!(!nodes
        .as_array()
        .expect("a list")
        .iter()
        .any(|n| n["Node"] == "n1"));
}

#[test]
fn malformed_registrations_are_400_and_write_nothing() {
    let mut h = Harness::server();
    let before = h.index();
    let not_json = h.check("PUT /v1/catalog/register", "{");
    assert_eq!(not_json.status, 400);
    assert!(
        not_json.text().starts_with("Request decode failed: "),
        "{}",
        not_json.text()
    );
    let no_node = h.check("PUT /v1/catalog/deregister", r#"{"Node":""}"#);
    assert_eq!(
        (no_node.status, no_node.text().as_str()),
        (400, "Must provide node")
    );
    assert_eq!(h.index(), before);
}

#[test]
fn filter_expressions_select_rows_and_a_bad_one_is_400() {
    let mut h = Harness::server();
    register(&mut h, "n1", "10.0.0.1", "web-1", "web", &["blue"]);
    register(&mut h, "n2", "10.0.0.2", "web-2", "web", &["green"]);
    let blue = h
        .check(
            "GET /v1/catalog/service/web?filter=ServiceTags%20contains%20%22blue%22",
            "",
        )
        .json();
    assert_eq!(blue.as_array().map(Vec::len), Some(1));
    assert_eq!(blue[0]["Node"], "n1");
    let bad = h.check("GET /v1/catalog/service/web?filter=Nope%20%3D%3D", "");
    assert_eq!(bad.status, 400);
    assert!(
        bad.text()
            .starts_with("Failed to create boolean expression evaluator"),
        "{}",
        bad.text()
    );
}
