//! Blocking health and catalog queries wake precisely: a change to service A wakes A's
//! watchers and never B's, and the index each reports is that service's own.

use crate::common;

use common::{request, Agent};
use serde_json::json;
use std::time::{Duration, Instant};

/// Waits until the leader's own registration (node, serf check, `consul` service) is in
/// place, so that it cannot wake the watchers a test parks afterwards.
fn settle(agent: &Agent) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while agent.get("/v1/catalog/service/consul").json() == json!([]) {
        assert!(Instant::now() < deadline, "the leader registers itself");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn register_instance(agent: &Agent, node: &str, service: &str, status: &str) {
    let body = json!({
        "Node": node, "Address": "10.0.0.1", "SkipNodeUpdate": false,
        "Service": {"ID": service, "Service": service, "Port": 80},
        "Check": {"CheckID": format!("{service}-check"), "Name": "alive", "ServiceID": service, "Status": status}
    });
    let r = agent.put("/v1/catalog/register", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
}

fn set_check(agent: &Agent, node: &str, service: &str, status: &str) {
    let body = json!({
        "Node": node, "SkipNodeUpdate": true,
        "Check": {"CheckID": format!("{service}-check"), "Name": "alive", "ServiceID": service, "Status": status}
    });
    let r = agent.put("/v1/catalog/register", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn indexes_are_per_service() {
    let agent = Agent::dev(&[]);
    register_instance(&agent, "n1", "web", "passing");
    register_instance(&agent, "n2", "api", "passing");
    let web = agent.get("/v1/health/service/web").index();
    set_check(&agent, "n2", "api", "critical");
    assert_eq!(
        agent.get("/v1/health/service/web").index(),
        web,
        "api's change leaves web's index"
    );
    assert_eq!(agent.get("/v1/catalog/service/web").index(), web);
    assert!(agent.get("/v1/health/service/api").index() > web);
    set_check(&agent, "n1", "web", "warning");
    assert!(agent.get("/v1/health/service/web").index() > web);
}

#[test]
fn a_parked_health_query_wakes_for_its_service_and_not_for_another() {
    let agent = Agent::dev(&[]);
    register_instance(&agent, "n1", "web", "passing");
    register_instance(&agent, "n2", "api", "passing");
    let addr = agent.addr();
    let web_index = agent.get("/v1/health/service/web?passing").index();
    let api_index = agent.get("/v1/health/service/api").index();

    // A watcher on api with a 3 s wait must sit out web's change.
    let api_watch = std::thread::spawn(move || {
        let started = Instant::now();
        let r = request(
            addr,
            "GET",
            &format!("/v1/health/service/api?index={api_index}&wait=3s"),
            b"",
            &[],
        );
        (started.elapsed(), r)
    });
    let web_watch = std::thread::spawn(move || {
        let started = Instant::now();
        let r = request(
            addr,
            "GET",
            &format!("/v1/health/service/web?passing&index={web_index}&wait=30s"),
            b"",
            &[],
        );
        (started.elapsed(), r)
    });
    std::thread::sleep(Duration::from_millis(300));
    let flipped = Instant::now();
    set_check(&agent, "n1", "web", "critical");
    let (_, web) = web_watch.join().unwrap();
    assert!(
        flipped.elapsed() < Duration::from_secs(2),
        "web's watcher woke promptly"
    );
    assert!(web.index() > web_index);
    assert_eq!(
        web.json(),
        json!([]),
        "?passing drops the critical instance"
    );

    let (waited, api) = api_watch.join().unwrap();
    assert!(
        waited >= Duration::from_millis(2900),
        "api's watcher slept through web's change: {waited:?}"
    );
    assert_eq!(api.index(), api_index, "api's index did not move");
    assert_eq!(api.json()[0]["Checks"][0]["Status"], "passing");
}

#[test]
fn catalog_and_node_queries_block_too() {
    let agent = Agent::dev(&[]);
    settle(&agent);
    register_instance(&agent, "n1", "web", "passing");
    let addr = agent.addr();
    let services_index = agent.get("/v1/catalog/services").index();
    let node_index = agent.get("/v1/catalog/node/n1").index();
    let checks_index = agent.get("/v1/health/node/n1").index();
    let watch = |path: String| std::thread::spawn(move || request(addr, "GET", &path, b"", &[]));
    let services = watch(format!(
        "/v1/catalog/services?index={services_index}&wait=30s"
    ));
    let node = watch(format!("/v1/catalog/node/n1?index={node_index}&wait=30s"));
    let checks = watch(format!("/v1/health/node/n1?index={checks_index}&wait=30s"));
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    // One registration that adds a service and a check on n1 wakes all three.
    let body = json!({"Node": "n1", "Address": "10.0.0.1", "Service": {"Service": "cache"},
                      "Check": {"Name": "cache ok", "ServiceID": "cache", "Status": "passing"}});
    agent.put("/v1/catalog/register", body.to_string().as_bytes());
    let services = services.join().unwrap();
    assert!(services.json().get("cache").is_some());
    assert!(node.join().unwrap().json()["Services"]
        .get("cache")
        .is_some());
    assert_eq!(checks.join().unwrap().json().as_array().unwrap().len(), 2);
    assert!(started.elapsed() < Duration::from_secs(5));

    // A blocking query for a service that does not exist wakes when it appears.
    let missing_index = agent.get("/v1/catalog/service/later").index();
    let later = watch(format!(
        "/v1/catalog/service/later?index={missing_index}&wait=30s"
    ));
    std::thread::sleep(Duration::from_millis(200));
    register_instance(&agent, "n3", "later", "passing");
    let r = later.join().unwrap();
    assert_eq!(r.json()[0]["ServiceName"], "later");
    assert!(r.index() > missing_index);
}
