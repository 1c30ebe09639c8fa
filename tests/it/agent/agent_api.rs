//! The agent endpoints over real sockets: service and check registration (lenient bodies,
//! Go durations), TTL updates, maintenance, the agent health endpoints and their status
//! codes, members, metrics, reload and leave.

use crate::agent_support;
use crate::common;

use agent_support::wait_for;
use common::{request, Agent, TempDir};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn put(agent: &Agent, path: &str, body: Value) -> common::HttpResponse {
    agent.put(path, body.to_string().as_bytes())
}

#[test]
fn service_registration_shapes_and_lenient_bodies() {
    let agent = Agent::dev(&["-node", "agent-node"]);
    // Lowercase and snake_case keys, Go durations with fractions.
    let r = put(
        &agent,
        "/v1/agent/service/register",
        json!({"name": "web", "id": "web-1", "tags": ["v1"], "port": 8080, "address": "10.1.2.3",
               "meta": {"version": "2"}, "enable_tag_override": true,
               "weights": {"passing": 5, "warning": 2},
               "check": {"ttl": "15.0s", "notes": "manual"}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let services = agent.get("/v1/agent/services").json();
    let web = &services["web-1"];
    assert_eq!(web["Service"], "web");
    assert_eq!(web["Tags"], json!(["v1"]));
    assert_eq!(web["Port"], 8080);
    assert_eq!(web["Meta"], json!({"version": "2"}));
    assert_eq!(web["EnableTagOverride"], true);
    assert_eq!(web["Weights"], json!({"Passing": 5, "Warning": 2}));
    assert_eq!(web["Datacenter"], "dc1");
    assert_eq!(
        web["TaggedAddresses"]["lan_ipv4"],
        json!({"Address": "10.1.2.3", "Port": 8080})
    );

    let checks = agent.get("/v1/agent/checks").json();
    let check = &checks["service:web-1"];
    assert_eq!(check["Name"], "Service 'web' check");
    assert_eq!(check["Status"], "critical", "checks start critical");
    assert_eq!(check["Notes"], "manual");
    assert_eq!(check["Type"], "ttl");
    assert_eq!(check["Node"], "agent-node");
    assert_eq!(check["ServiceTags"], json!(["v1"]));

    // The registration reached the catalog before the call returned.
    let catalog = agent.get("/v1/catalog/service/web").json();
    assert_eq!(catalog[0]["ServiceID"], "web-1");
    assert_eq!(catalog[0]["Node"], "agent-node");
    assert_eq!(
        catalog[0]["ServiceWeights"],
        json!({"Passing": 5, "Warning": 2})
    );
    assert_eq!(
        agent.get("/v1/health/checks/web").json()[0]["Definition"]["TTL"],
        15_000_000_000u64
    );

    // One service by ID, with a content hash that blocks until the service changes.
    let one = agent.get("/v1/agent/service/web-1");
    let hash = one.json()["ContentHash"].as_str().unwrap().to_string();
    assert_eq!(one.header("X-Consul-ContentHash"), Some(hash.as_str()));
    let addr = agent.addr();
    let waiter = {
        let hash = hash.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let r = request(
                addr,
                "GET",
                &format!("/v1/agent/service/web-1?hash={hash}&wait=10s"),
                b"",
                &[],
            );
            (started.elapsed(), r)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    put(
        &agent,
        "/v1/agent/service/register",
        json!({"Name": "web", "ID": "web-1", "Port": 9090}),
    );
    let (waited, changed) = waiter.join().unwrap();
    assert!(waited < Duration::from_secs(5));
    assert_eq!(changed.json()["Port"], 9090);
    assert_ne!(changed.json()["ContentHash"].as_str().unwrap(), hash);
    assert_eq!(agent.get("/v1/agent/service/nope").status, 404);

    // replace-existing-checks drops checks the new definition lacks.
    put(
        &agent,
        "/v1/agent/service/register",
        json!({"Name": "db", "Checks": [{"CheckID": "a", "TTL": "10s"}, {"CheckID": "b", "TTL": "10s"}]}),
    );
    put(
        &agent,
        "/v1/agent/service/register?replace-existing-checks",
        json!({"Name": "db", "Checks": [{"CheckID": "a", "TTL": "10s"}]}),
    );
    let checks = agent.get("/v1/agent/checks").json();
    assert!(checks.get("a").is_some() && checks.get("b").is_none());
    assert!(agent
        .get("/v1/health/checks/db")
        .json()
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["CheckID"] != "b"));

    // Filters over agent services.
    let filtered = agent
        .get("/v1/agent/services?filter=Service%20%3D%3D%20db")
        .json();
    assert_eq!(
        filtered.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["db"]
    );

    // Deregistration by PUT and by GET (python-consul sends GET).
    assert_eq!(
        agent.put("/v1/agent/service/deregister/db", b"").status,
        200
    );
    assert_eq!(agent.get("/v1/agent/service/deregister/web-1").status, 200);
    assert_eq!(agent.get("/v1/agent/services").json(), json!({}));
    assert_eq!(agent.get("/v1/catalog/service/web").json(), json!([]));
    let missing = agent.put("/v1/agent/service/deregister/web-1", b"");
    assert_eq!(missing.status, 404);
    assert!(
        missing.text().contains("Unknown service ID"),
        "{}",
        missing.text()
    );
}

#[test]
fn bad_service_and_check_registrations() {
    let agent = Agent::dev(&[]);
    let cases = [
        (json!({"Port": 1}), 400, "Missing service name"),
        (
            json!({"Name": "w", "Check": {"HTTP": "http://x"}}),
            400,
            "Interval must be > 0",
        ),
        (
            json!({"Name": "w", "Check": {"Interval": "10s"}}),
            400,
            "TTL must be > 0",
        ),
        (
            json!({"Name": "w", "Check": {"TTL": "1s", "Status": "fine"}}),
            400,
            "Status for checks",
        ),
        (
            json!({"Name": "w", "Check": {"TTL": "forever"}}),
            400,
            "Request decode failed",
        ),
        (
            json!({"Name": "w", "Meta": {"bad key": "x"}}),
            400,
            "Invalid Service Meta",
        ),
        (
            json!({"Name": "w", "Address": "0.0.0.0"}),
            400,
            "Invalid service address",
        ),
    ];
    for (body, status, needle) in cases {
        let r = put(&agent, "/v1/agent/service/register", body.clone());
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert!(r.text().contains(needle), "{body}: {}", r.text());
    }
    let r = agent.put("/v1/agent/service/register", b"{not json");
    assert_eq!(r.status, 400);
    let r = put(&agent, "/v1/agent/check/register", json!({"TTL": "10s"}));
    assert_eq!((r.status, r.text().as_str()), (400, "Missing check name"));
    let r = put(
        &agent,
        "/v1/agent/check/register",
        json!({"Name": "c", "TTL": "10s", "ServiceID": "ghost"}),
    );
    assert_eq!(r.status, 404);
    assert_eq!(agent.get("/v1/agent/service/register").status, 405);
    let r = agent.put("/v1/agent/check/pass/ghost", b"");
    assert_eq!(r.status, 404);
    assert!(r.text().contains("Unknown check ID"), "{}", r.text());
    assert_eq!(
        agent
            .put("/v1/agent/service/maintenance/ghost?enable=true", b"")
            .status,
        404
    );
    assert_eq!(agent.put("/v1/agent/maintenance", b"").status, 400);
    let r = put(
        &agent,
        "/v1/agent/check/update/x",
        json!({"Status": "green"}),
    );
    assert_eq!(
        (r.status, r.text().as_str()),
        (400, "Invalid check status: 'green'")
    );
}

#[test]
fn ttl_updates_maintenance_and_agent_health_codes() {
    let agent = Agent::dev(&[]);
    put(
        &agent,
        "/v1/agent/service/register",
        json!({"Name": "web", "ID": "web-1", "Check": {"CheckID": "ttl-1", "TTL": "60s"}}),
    );
    put(
        &agent,
        "/v1/agent/service/register",
        json!({"Name": "web", "ID": "web-2", "Check": {"CheckID": "ttl-2", "TTL": "60s"}}),
    );
    put(
        &agent,
        "/v1/agent/check/register",
        json!({"Name": "node disk", "ID": "disk", "TTL": "60s", "Status": "passing"}),
    );
    let code = |path: &str| agent.get(path).status;

    assert_eq!(
        code("/v1/agent/health/service/id/web-1"),
        503,
        "critical at start"
    );
    assert_eq!(
        agent.put("/v1/agent/check/pass/ttl-1?note=ok", b"").status,
        200
    );
    let healthy = agent.get("/v1/agent/health/service/id/web-1");
    assert_eq!(healthy.status, 200);
    let body = healthy.json();
    assert_eq!(body["AggregatedStatus"], "passing");
    assert_eq!(body["Service"]["ID"], "web-1");
    let ids: Vec<&str> = body["Checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["CheckID"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"ttl-1") && ids.contains(&"disk"),
        "node checks count too: {ids:?}"
    );
    assert_eq!(agent.get("/v1/health/checks/web").json()[0]["Output"], "ok");

    // PUT check/update carries status and output in the body; GET warn works too.
    let r = put(
        &agent,
        "/v1/agent/check/update/ttl-2",
        json!({"Status": "warning", "Output": "slow"}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(code("/v1/agent/health/service/id/web-2"), 429);
    // By name: the worst instance decides.
    let by_name = agent.get("/v1/agent/health/service/name/web");
    assert_eq!(by_name.status, 429);
    assert_eq!(by_name.json().as_array().unwrap().len(), 2);
    let text = agent.get("/v1/agent/health/service/name/web?format=text");
    assert_eq!((text.status, text.text().as_str()), (429, "warning"));
    assert_eq!(
        agent.get("/v1/agent/check/fail/ttl-2?note=down").status,
        200
    );
    assert_eq!(code("/v1/agent/health/service/name/web"), 503);
    let missing = agent.get("/v1/agent/health/service/name/nothing");
    assert_eq!((missing.status, missing.json()), (404, json!([])));
    let missing = agent.get("/v1/agent/health/service/id/nothing?format=text");
    assert_eq!(
        (missing.status, missing.text().as_str()),
        (404, "ServiceId nothing not found")
    );

    // Service maintenance: a critical check, "maintenance" in the agent's health.
    agent.put("/v1/agent/check/pass/ttl-2", b"");
    assert_eq!(
        agent
            .put(
                "/v1/agent/service/maintenance/web-2?enable=true&reason=patching",
                b""
            )
            .status,
        200
    );
    let text = agent.get("/v1/agent/health/service/id/web-2?format=text");
    assert_eq!((text.status, text.text().as_str()), (503, "maintenance"));
    let maint = agent.get("/v1/agent/checks").json()["_service_maintenance:web-2"].clone();
    assert_eq!(maint["Notes"], "patching");
    assert_eq!(maint["Status"], "critical");
    assert_eq!(
        agent
            .get("/v1/health/service/web?passing")
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    agent.put("/v1/agent/service/maintenance/web-2?enable=false", b"");
    assert_eq!(code("/v1/agent/health/service/id/web-2"), 200);

    // Node maintenance affects every service on the node.
    agent.put("/v1/agent/maintenance?enable=true", b"");
    let node_maint = agent.get("/v1/agent/checks").json()["_node_maintenance"].clone();
    assert!(node_maint["Notes"]
        .as_str()
        .unwrap()
        .contains("default message"));
    assert_eq!(
        agent.get("/v1/health/service/web?passing").json(),
        json!([])
    );
    agent.put("/v1/agent/maintenance?enable=false", b"");
    assert_eq!(
        agent
            .get("/v1/health/service/web?passing")
            .json()
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // Check deregistration.
    assert_eq!(
        agent.put("/v1/agent/check/deregister/disk", b"").status,
        200
    );
    assert!(agent.get("/v1/agent/checks").json().get("disk").is_none());
    assert_eq!(
        agent.put("/v1/agent/check/deregister/disk", b"").status,
        404
    );
}

#[test]
fn members_metrics_reload_and_leave() {
    let config = TempDir::new("agent-reload");
    let file = config.path().join("services.json");
    std::fs::write(
        &file,
        json!({"service": {"name": "from-file", "port": 1234}}).to_string(),
    )
    .unwrap();
    let mut agent = Agent::dev(&[
        "-node",
        "m1",
        "-config-dir",
        config.path().to_str().unwrap(),
        "-hcl",
        r#"telemetry { disable_hostname = true prometheus_retention_time = "60s" }"#,
    ]);
    let members = agent.get("/v1/agent/members").json();
    assert_eq!(members[0]["Name"], "m1");
    assert_eq!(members[0]["Status"], 1);
    assert_eq!(members[0]["Tags"]["role"], "consul");

    let services = wait_for(Duration::from_secs(5), "config services", || {
        let s = agent.get("/v1/agent/services").json();
        s.get("from-file").is_some().then_some(s)
    });
    assert_eq!(services["from-file"]["Port"], 1234);

    // Reload replaces config-file services.
    std::fs::write(
        &file,
        json!({"services": [{"name": "reloaded", "port": 1, "checks": [{"ttl": "30s"}]}]})
            .to_string(),
    )
    .unwrap();
    assert_eq!(agent.put("/v1/agent/reload", b"").status, 200);
    let services = agent.get("/v1/agent/services").json();
    assert!(
        services.get("from-file").is_none() && services.get("reloaded").is_some(),
        "{services}"
    );
    assert_eq!(
        agent
            .get("/v1/catalog/service/reloaded")
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(agent.get("/v1/catalog/service/from-file").json(), json!([]));

    let metrics = agent.get("/v1/agent/metrics").json();
    let gauge = |name: &str| {
        metrics["Gauges"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["Name"] == name)
            .map(|g| g["Value"].as_f64().unwrap())
    };
    assert_eq!(gauge("consul.agent.local.services"), Some(1.0));
    assert!(gauge("consul.runtime.alloc_bytes").unwrap() > 0.0);
    let prometheus = agent.get("/v1/agent/metrics?format=prometheus");
    assert!(prometheus
        .header("Content-Type")
        .unwrap()
        .starts_with("text/plain"));
    let text = prometheus.text();
    assert!(
        text.contains("# TYPE consul_state_service_instances gauge"),
        "{text}"
    );
    assert!(text.contains("consul_agent_anti_entropy_syncs "), "{text}");

    assert_eq!(agent.put("/v1/agent/leave", b"").status, 200);
    let exited = wait_for(Duration::from_secs(10), "the agent to exit", || {
        agent.child.as_mut().unwrap().try_wait().unwrap()
    });
    assert!(exited.success());
    agent.child = None;
}
