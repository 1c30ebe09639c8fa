//! Anti-entropy: the catalog's copy of the agent's node converges on the local state. Drift
//! made behind the agent's back is repaired by the periodic full sync, output-only changes
//! wait for `check_update_interval`, config-file definitions (JSON and HCL) and API
//! registrations persisted in the data directory survive restarts.

use crate::agent_support;
use crate::common;

use agent_support::wait_for;
use common::{fresh_loopback, Agent, TempDir};
use serde_json::{json, Value};
use std::time::Duration;

fn put(agent: &Agent, path: &str, body: Value) -> common::HttpResponse {
    agent.put(path, body.to_string().as_bytes())
}

fn catalog_ids(agent: &Agent, service: &str) -> Vec<String> {
    agent
        .get(&format!("/v1/catalog/service/{service}"))
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["ServiceID"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn full_sync_repairs_drift_behind_the_agents_back() {
    let agent = Agent::dev(&["-node", "ae-node", "-hcl", "ae_interval = \"1s\""]);
    put(
        &agent,
        "/v1/agent/service/register",
        json!({"Name": "web", "ID": "web-1", "Check": {"CheckID": "web-ttl", "TTL": "60s", "Status": "passing"}}),
    );
    assert_eq!(catalog_ids(&agent, "web"), ["web-1"]);

    // Deleted from the catalog directly: registered again.
    let r = put(
        &agent,
        "/v1/catalog/deregister",
        json!({"Node": "ae-node", "ServiceID": "web-1"}),
    );
    assert_eq!(r.status, 200);
    assert!(catalog_ids(&agent, "web").is_empty());
    wait_for(Duration::from_secs(5), "web-1 to be re-registered", || {
        (catalog_ids(&agent, "web") == ["web-1"]).then_some(())
    });
    let checks = agent.get("/v1/health/checks/web").json();
    assert_eq!(checks[0]["Status"], "passing", "with its check");

    // A service the agent does not have, registered on its node: removed.
    put(
        &agent,
        "/v1/catalog/register",
        json!({"Node": "ae-node", "Address": agent.ip.to_string(), "SkipNodeUpdate": true, "Service": {"Service": "intruder"}}),
    );
    assert_eq!(catalog_ids(&agent, "intruder"), ["intruder"]);
    wait_for(Duration::from_secs(5), "intruder to be removed", || {
        catalog_ids(&agent, "intruder").is_empty().then_some(())
    });

    // A check status changed behind the agent: restored.
    put(
        &agent,
        "/v1/catalog/register",
        json!({"Node": "ae-node", "SkipNodeUpdate": true,
        "Check": {"CheckID": "web-ttl", "Name": "tampered", "ServiceID": "web-1", "Status": "critical"}}),
    );
    wait_for(Duration::from_secs(5), "the check to be restored", || {
        let c = agent.get("/v1/health/checks/web").json();
        (c[0]["Status"] == "passing" && c[0]["Name"] != "tampered").then_some(())
    });

    // The node row itself, and the leader's serf check and consul service, are kept.
    let node = agent.get("/v1/catalog/node/ae-node").json();
    assert_eq!(node["Node"]["Meta"]["consul-version"], "1.22.0");
    assert!(node["Services"].get("consul").is_some());
    let checks = agent.get("/v1/health/node/ae-node").json();
    assert!(checks
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["CheckID"] == "serfHealth"));
}

#[test]
fn output_only_changes_wait_for_check_update_interval() {
    let agent = Agent::dev(&["-hcl", "check_update_interval = \"2s\""]);
    put(
        &agent,
        "/v1/agent/service/register",
        json!({"Name": "quiet", "Check": {"CheckID": "q", "TTL": "60s"}}),
    );
    agent.put("/v1/agent/check/pass/q?note=first", b"");
    let output = || agent.get("/v1/health/checks/quiet").json()[0]["Output"].clone();
    assert_eq!(output(), "first", "a status change syncs at once");
    agent.put("/v1/agent/check/pass/q?note=second", b"");
    assert_eq!(output(), "first", "an output-only change waits");
    assert_eq!(
        agent.get("/v1/agent/checks").json()["q"]["Output"],
        "second",
        "the agent knows it"
    );
    wait_for(Duration::from_secs(6), "the deferred output", || {
        (output() == "second").then_some(())
    });
    agent.put("/v1/agent/check/fail/q?note=third", b"");
    assert_eq!(output(), "third");
}

#[test]
fn config_files_and_persisted_registrations_survive_restarts() {
    let data = TempDir::new("ae-data");
    let config = TempDir::new("ae-config");
    std::fs::write(
        config.path().join("a.json"),
        json!({"services": [{"name": "json-svc", "port": 1, "checks": [{"ttl": "30s", "status": "passing"}]}]}).to_string(),
    )
    .unwrap();
    std::fs::write(
        config.path().join("b.hcl"),
        "service {\n  name = \"hcl-svc\"\n  tags = [\"x\"]\n  check {\n    id = \"hcl-check\"\n    ttl = \"30s\"\n  }\n}\nchecks = [\n  { name = \"node-ttl\", ttl = \"30s\" }\n]\n",
    )
    .unwrap();
    let ip = fresh_loopback();
    let args: Vec<String> = [
        "agent",
        "-server",
        "-bootstrap",
        "-node",
        "restarty",
        "-bind",
        &ip.to_string(),
        "-client",
        &ip.to_string(),
        "-data-dir",
        data.path().to_str().unwrap(),
        "-config-dir",
        config.path().to_str().unwrap(),
        "-dns-port=-1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut agent = Agent::spawn(ip, 8500, args);
    agent.wait_ready();
    wait_for(
        Duration::from_secs(10),
        "config services in the catalog",
        || {
            (catalog_ids(&agent, "json-svc").len() == 1
                && catalog_ids(&agent, "hcl-svc").len() == 1)
                .then_some(())
        },
    );
    let checks = agent.get("/v1/agent/checks").json();
    assert_eq!(checks["service:json-svc"]["Status"], "passing");
    assert!(checks.get("hcl-check").is_some());
    assert!(checks.get("node-ttl").is_some());
    put(
        &agent,
        "/v1/agent/service/register",
        json!({"Name": "api-svc", "Port": 7}),
    );

    agent.terminate();
    agent.restart();
    agent.wait_ready();
    let services = wait_for(Duration::from_secs(10), "services after restart", || {
        let s = agent.get("/v1/agent/services").json();
        (s.as_object().unwrap().len() == 3).then_some(s)
    });
    assert_eq!(
        services["api-svc"]["Port"], 7,
        "API registrations are persisted"
    );
    assert!(services.get("json-svc").is_some() && services.get("hcl-svc").is_some());

    // Deregistered services stay gone after another restart.
    assert_eq!(
        agent
            .put("/v1/agent/service/deregister/api-svc", b"")
            .status,
        200
    );
    agent.terminate();
    agent.restart();
    agent.wait_ready();
    std::thread::sleep(Duration::from_millis(500));
    assert!(agent
        .get("/v1/agent/services")
        .json()
        .get("api-svc")
        .is_none());
}

#[test]
fn invalid_config_definitions_stop_the_agent() {
    let config = TempDir::new("ae-bad-config");
    std::fs::write(
        config.path().join("bad.json"),
        json!({"service": {"name": "x", "check": {"args": ["/bin/true"], "interval": "10s"}}})
            .to_string(),
    )
    .unwrap();
    let (code, _, stderr) = common::cli(
        &[
            "agent",
            "-dev",
            "-bind",
            "127.0.0.1",
            "-http-port=-1",
            "-dns-port=-1",
            "-config-dir",
            config.path().to_str().unwrap(),
        ],
        None,
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("enable_local_script_checks"), "{stderr}");
}
