//! What the health handlers answer (`/v1/health/*`), in-process.

use super::Harness;
use serde_json::json;

/// Registers `node` with service `web` instance `id` and one check of `status` on it.
fn register_with_check(h: &mut Harness, node: &str, id: &str, status: &str) {
    let body = json!({
        "Node": node,
        "Address": "10.0.0.1",
        "Service": {"ID": id, "Service": "web", "Port": 80},
        "Check": {"CheckID": format!("check-{id}"), "Name": "alive", "Status": status, "ServiceID": id},
    });
    let answer = h.check("PUT /v1/catalog/register", &body.to_string());
    assert_eq!((answer.status, answer.text().as_str()), (200, "true"));
}

fn instance_ids(answer: &serde_json::Value) -> Vec<String> {
    answer
        .as_array()
        .expect("a list")
        .iter()
        .map(|row| row["Service"]["ID"].as_str().expect("an ID").to_string())
        .collect()
}

#[test]
fn passing_leaves_out_instances_with_a_critical_or_warning_check() {
    let mut h = Harness::server();
    register_with_check(&mut h, "n1", "web-ok", "passing");
    register_with_check(&mut h, "n2", "web-warn", "warning");
    register_with_check(&mut h, "n3", "web-down", "critical");
    let all = h.check("GET /v1/health/service/web", "").json();
    assert_eq!(instance_ids(&all), ["web-ok", "web-warn", "web-down"]);
    let passing = h.check("GET /v1/health/service/web?passing", "").json();
    assert_eq!(instance_ids(&passing), ["web-ok"]);
    let not_passing = h
        .check("GET /v1/health/service/web?passing=false", "")
        .json();
    assert_eq!(not_passing.as_array().map(Vec::len), Some(3));
    let bad = h.check("GET /v1/health/service/web?passing=maybe", "");
    assert_eq!(
        (bad.status, bad.text().as_str()),
        (400, "Invalid value for ?passing")
    );
}

#[test]
fn checks_by_state_and_an_unknown_state_is_400() {
    let mut h = Harness::server();
    register_with_check(&mut h, "n1", "web-ok", "passing");
    register_with_check(&mut h, "n2", "web-down", "critical");
    let critical = h.check("GET /v1/health/state/critical", "").json();
    let ids: Vec<_> = critical
        .as_array()
        .expect("a list")
        .iter()
        .map(|check| check["CheckID"].clone())
        .collect();
    assert_eq!(ids, [json!("check-web-down")]);
    let any = h.check("GET /v1/health/state/any", "").json();
    assert_eq!(any.as_array().map(Vec::len), Some(2));
    let bad = h.check("GET /v1/health/state/sleepy", "");
    assert_eq!(bad.status, 400);
    assert_eq!(bad.text(), "Invalid check state: \"sleepy\"");
}

#[test]
fn node_and_service_checks_answer_their_own_rows() {
    let mut h = Harness::server();
    register_with_check(&mut h, "n1", "web-1", "passing");
    register_with_check(&mut h, "n2", "web-2", "critical");
    let node = h.check("GET /v1/health/node/n2", "").json();
    assert_eq!(node.as_array().map(Vec::len), Some(1));
    assert_eq!(node[0]["Status"], "critical");
    assert_eq!(node[0]["ServiceName"], "web");
    let service = h.check("GET /v1/health/checks/web", "").json();
    assert_eq!(service.as_array().map(Vec::len), Some(2));
    let nobody = h.check("GET /v1/health/node/nobody", "");
    assert_eq!((nobody.status, nobody.text().as_str()), (200, "[]"));
}

#[test]
fn a_check_update_moves_the_service_index_a_blocking_health_read_waits_on() {
    let mut h = Harness::server();
    register_with_check(&mut h, "n1", "web-1", "passing");
    let first = h.check("GET /v1/health/service/web", "");
    let index = first.index();
    let super::Checked::Parked(op) =
        h.serve(&format!("GET /v1/health/service/web?index={index}"), "")
    else {
        panic!("nothing changed yet");
    };
    register_with_check(&mut h, "n1", "web-1", "critical");
    let super::Checked::Answered(answer) = h.resume(op) else {
        panic!("the check's status changed");
    };
    assert!(answer.index() > index);
    assert_eq!(answer.json()[0]["Checks"][0]["Status"], "critical");
}
