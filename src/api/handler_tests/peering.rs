//! `GET /v1/exported-services`, in-process: the `exported-services` entry resolved against
//! the catalog.

use super::catalog::register;
use super::{Checked, Harness};
use serde_json::json;

const ENTRY: &str = r#"{
    "Kind": "exported-services",
    "Name": "default",
    "Services": [
        {"Name": "web", "Consumers": [{"Peer": "west"}, {"Peer": "east"}]},
        {"Name": "*", "Consumers": [{"Peer": "north"}, {"Peer": "east"}]}
    ]
}"#;

#[test]
fn without_an_entry_nothing_is_exported() {
    let mut h = Harness::server();
    let answer = h.check("GET /v1/exported-services", "");
    assert_eq!((answer.status, answer.text().as_str()), (200, "[]"));
    assert!(answer.index() >= 1, "an index to block on, never 0");
}

#[test]
fn a_wildcard_exports_every_typical_service_and_consumers_merge_sorted() {
    let mut h = Harness::server();
    register(&mut h, "n1", "10.0.0.1", "web-1", "web", &[]);
    register(&mut h, "n1", "10.0.0.1", "db-1", "db", &[]);
    // The servers' own registration is never exported, nor are proxies.
    register(&mut h, "s1", "10.0.0.9", "consul", "consul", &[]);
    let proxy = json!({
        "Node": "n1",
        "Address": "10.0.0.1",
        "Service": {"Kind": "connect-proxy", "ID": "web-proxy", "Service": "web-sidecar-proxy",
                    "Port": 21000, "Proxy": {"DestinationServiceName": "web"}},
    });
    assert_eq!(
        h.check("PUT /v1/catalog/register", &proxy.to_string())
            .status,
        200
    );
    let written = h.check("PUT /v1/config", ENTRY);
    assert_eq!((written.status, written.text().as_str()), (200, "true"));
    let exported = h.check("GET /v1/exported-services", "");
    assert_eq!(exported.status, 200);
    assert_eq!(
        exported.json(),
        json!([
            {"Service": "db", "Consumers": {"Peers": ["east", "north"]}},
            {"Service": "web", "Consumers": {"Peers": ["east", "north", "west"]}},
        ])
    );
    assert_eq!(exported.index(), h.index());
}

#[test]
fn a_new_service_wakes_a_blocking_read_under_a_wildcard() {
    let mut h = Harness::server();
    h.check("PUT /v1/config", ENTRY);
    register(&mut h, "n1", "10.0.0.1", "web-1", "web", &[]);
    let index = h.check("GET /v1/exported-services", "").index();
    let Checked::Parked(op) = h.serve(&format!("GET /v1/exported-services?index={index}"), "")
    else {
        panic!("nothing changed yet");
    };
    register(&mut h, "n2", "10.0.0.2", "api-1", "api", &[]);
    let Checked::Answered(answer) = h.resume(op) else {
        panic!("a service the wildcard covers arrived");
    };
    let services: Vec<_> = answer
        .json()
        .as_array()
        .expect("a list")
        .iter()
        .map(|row| row["Service"].clone())
        .collect();
    assert_eq!(services, [json!("api"), json!("web")]);
}
