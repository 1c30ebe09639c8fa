//! `praetor catalog`, `praetor services` and `praetor maint` against a real agent.

use crate::common;

use common::{cli, Agent, TempDir};
use serde_json::json;

fn run(agent: &Agent, args: &[&str]) -> (i32, String, String) {
    let mut full: Vec<&str> = args.to_vec();
    let addr = agent.http_addr();
    full.insert(2.min(full.len()), "-http-addr");
    full.insert(3.min(full.len()), &addr);
    cli(&full, None)
}

#[test]
fn catalog_listings() {
    let agent = Agent::dev(&["-node", "cli-node"]);
    let register = |body: serde_json::Value| {
        assert_eq!(
            agent
                .put("/v1/catalog/register", body.to_string().as_bytes())
                .status,
            200
        );
    };
    register(
        json!({"Node": "db-1", "Address": "10.0.0.5", "NodeMeta": {"rack": "r1"},
                    "Service": {"Service": "db", "Tags": ["primary", "v2"]}}),
    );
    register(
        json!({"Node": "web-1", "Address": "10.0.0.6", "NodeMeta": {"rack": "r2"},
                    "Service": {"Service": "web", "Tags": ["v1"]}}),
    );

    let (code, out, _) = run(&agent, &["catalog", "datacenters"]);
    assert_eq!((code, out.as_str()), (0, "dc1\n"));

    let (code, out, err) = run(&agent, &["catalog", "nodes"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("Node") && lines[0].contains("ID") && lines[0].ends_with("DC"),
        "{out}"
    );
    assert!(
        out.contains("db-1") && out.contains("10.0.0.5") && out.contains("cli-node"),
        "{out}"
    );

    let (_, out, _) = run(&agent, &["catalog", "nodes", "-node-meta", "rack=r2"]);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("web-1"));
    let (_, out, _) = run(&agent, &["catalog", "nodes", "-service", "db", "-detailed"]);
    assert!(
        out.lines().next().unwrap().contains("TaggedAddresses"),
        "{out}"
    );
    assert!(
        out.contains("db-1") && out.contains("rack=r1") && !out.contains("web-1"),
        "{out}"
    );

    // The leader registers the consul service shortly after it starts leading.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while agent.get("/v1/catalog/service/consul").json() == json!([]) {
        assert!(
            std::time::Instant::now() < deadline,
            "the consul service appears"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (_, out, _) = run(&agent, &["catalog", "services"]);
    assert_eq!(out, "consul\ndb\nweb\n");
    let (_, out, _) = run(&agent, &["catalog", "services", "-tags"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("db") && l.ends_with("primary,v2")),
        "{out}"
    );
    let (_, out, _) = run(&agent, &["catalog", "services", "-node", "web-1"]);
    assert_eq!(out, "web\n");
    let (code, _, err) = run(&agent, &["catalog", "services", "-node", "nowhere"]);
    assert_ne!(code, 0);
    assert!(err.contains("No node found"), "{err}");
}

#[test]
fn services_register_deregister_and_maint() {
    let agent = Agent::dev(&[]);
    let (code, out, err) = run(
        &agent,
        &[
            "services", "register", "-name", "web", "-id", "web-1", "-port", "8080", "-tag", "a",
            "-tag", "b", "-meta", "env=prod",
        ],
    );
    assert_eq!(
        (code, out.as_str()),
        (0, "Registered service: web-1\n"),
        "{err}"
    );
    let services = agent.get("/v1/agent/services").json();
    assert_eq!(services["web-1"]["Tags"], json!(["a", "b"]));
    assert_eq!(services["web-1"]["Meta"], json!({"env": "prod"}));

    let dir = TempDir::new("services-cli");
    let json_file = dir.path().join("api.json");
    std::fs::write(
        &json_file,
        json!({"service": {"name": "api", "port": 9000}}).to_string(),
    )
    .unwrap();
    let hcl_file = dir.path().join("many.hcl");
    std::fs::write(
        &hcl_file,
        "services = [\n  { name = \"one\" },\n  { name = \"two\", id = \"two-1\" }\n]\n",
    )
    .unwrap();
    let (code, out, err) = run(
        &agent,
        &[
            "services",
            "register",
            json_file.to_str().unwrap(),
            hcl_file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "Registered service: api\nRegistered service: one\nRegistered service: two-1\n"
    );
    assert_eq!(
        agent.get("/v1/catalog/service/api").json()[0]["ServicePort"],
        9000
    );

    let (code, out, _) = run(
        &agent,
        &["services", "deregister", hcl_file.to_str().unwrap()],
    );
    assert_eq!(
        (code, out.as_str()),
        (
            0,
            "Deregistered service: one\nDeregistered service: two-1\n"
        )
    );
    let (code, out, _) = run(&agent, &["services", "deregister", "-id", "api"]);
    assert_eq!((code, out.as_str()), (0, "Deregistered service: api\n"));
    assert!(agent.get("/v1/agent/services").json().get("api").is_none());
    let (code, _, err) = run(&agent, &["services", "register"]);
    assert_ne!(code, 0);
    assert!(err.contains("-name"), "{err}");

    let (code, out, _) = run(&agent, &["maint", "-enable", "-reason", "upgrading disks"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "Node maintenance is now enabled\n")
    );
    let (code, out, _) = run(&agent, &["maint", "-enable", "-service", "web-1"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "Service maintenance is now enabled for \"web-1\"\n")
    );
    let (_, out, _) = run(&agent, &["maint"]);
    assert!(
        out.contains("Node:") && out.contains("Reason: upgrading disks"),
        "{out}"
    );
    assert!(out.contains("Service:\n  ID:     web-1"), "{out}");
    let (code, out, _) = run(&agent, &["maint", "-disable"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "Node maintenance is now disabled\n")
    );
    let (code, out, _) = run(&agent, &["maint", "-disable", "-service", "web-1"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "Service maintenance is now disabled for \"web-1\"\n")
    );
    let (_, out, _) = run(&agent, &["maint"]);
    assert_eq!(out, "");
    let (code, _, err) = run(&agent, &["maint", "-enable", "-service", "ghost"]);
    assert_ne!(code, 0);
    assert!(err.contains("ghost"), "{err}");
}
