//! Autopilot with real processes: the configuration API (read, set, check-and-set) and the
//! `praetor operator autopilot` commands on one server; in a five-server cluster, a killed
//! server removed by autopilot's dead-server cleanup and a new server that joins as a
//! non-voter and votes only after `ServerStabilizationTime`; `/v1/operator/usage`.

use crate::common;

use common::{cli, fresh_loopback, try_request_bounded, Agent, Cluster, TempDir};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The autopilot configuration, once the leader wrote it (bounded wait).
fn configuration(agent: &Agent) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = agent.get("/v1/operator/autopilot/configuration");
        if r.status == 200 {
            return r.json();
        }
        assert!(Instant::now() < deadline, "no configuration: {}", r.text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn configuration_api_and_cli_follow_consul() {
    let agent = Agent::dev(&[
        "-hcl",
        r#"autopilot { min_quorum = 1 max_trailing_logs = 300 }"#,
    ]);
    let config = configuration(&agent);
    // The agent's autopilot stanza is what the first leader wrote.
    assert_eq!(config["CleanupDeadServers"], true);
    assert_eq!(config["LastContactThreshold"], "200ms");
    assert_eq!(config["MaxTrailingLogs"], 300);
    assert_eq!(config["MinQuorum"], 1);
    assert_eq!(config["ServerStabilizationTime"], "10s");
    assert_eq!(config["RedundancyZoneTag"], "");
    let modify_index = config["ModifyIndex"].as_u64().unwrap();
    assert!(modify_index > 0);
    assert_eq!(config["CreateIndex"], config["ModifyIndex"]);

    // A check-and-set with a stale index changes nothing; with the current one it applies.
    let mut changed = config.clone();
    changed["MinQuorum"] = 3.into();
    changed["ServerStabilizationTime"] = "7s".into();
    let body = changed.to_string();
    let stale = agent.put(
        &format!(
            "/v1/operator/autopilot/configuration?cas={}",
            modify_index - 1
        ),
        body.as_bytes(),
    );
    assert_eq!((stale.status, stale.text().trim()), (200, "false"));
    let applied = agent.put(
        &format!("/v1/operator/autopilot/configuration?cas={modify_index}"),
        body.as_bytes(),
    );
    assert_eq!((applied.status, applied.text().trim()), (200, "true"));
    let config = configuration(&agent);
    assert_eq!(config["MinQuorum"], 3);
    assert_eq!(config["ServerStabilizationTime"], "7s");
    assert!(config["ModifyIndex"].as_u64().unwrap() > modify_index);
    assert_eq!(config["CreateIndex"].as_u64().unwrap(), modify_index);
    // A plain set answers true; durations may be numbers of nanoseconds, as Consul's.
    let plain = agent.put(
        "/v1/operator/autopilot/configuration",
        br#"{"CleanupDeadServers": true, "LastContactThreshold": 300000000,
             "MaxTrailingLogs": 250, "ServerStabilizationTime": "10s"}"#,
    );
    assert_eq!((plain.status, plain.text().trim()), (200, "true"));
    assert_eq!(configuration(&agent)["LastContactThreshold"], "300ms");
    // Bad input: Consul's words.
    let r = agent.put("/v1/operator/autopilot/configuration?cas=x", b"{}");
    assert_eq!(r.status, 400);
    assert!(
        r.text().starts_with("Error parsing cas value"),
        "{}",
        r.text()
    );
    let r = agent.put(
        "/v1/operator/autopilot/configuration",
        br#"{"LastContactThreshold": "soon"}"#,
    );
    assert_eq!(r.status, 400);
    assert!(
        r.text().starts_with("Error parsing autopilot config"),
        "{}",
        r.text()
    );

    // The CLI: set-config is a check-and-set of what get-config shows.
    let http = ["-http-addr", &agent.http_addr()];
    let (code, out, err) = cli(
        &[
            &["operator", "autopilot", "set-config"][..],
            &http[..],
            &[
                "-min-quorum=2",
                "-server-stabilization-time",
                "5s",
                "-cleanup-dead-servers=false",
            ],
        ]
        .concat(),
        None,
    );
    assert_eq!((code, out.trim()), (0, "Configuration updated!"), "{err}");
    let (code, out, err) = cli(
        &[&["operator", "autopilot", "get-config"][..], &http[..]].concat(),
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "CleanupDeadServers = false\nLastContactThreshold = 300ms\nMaxTrailingLogs = 250\n\
         MinQuorum = 2\nServerStabilizationTime = 5s\nRedundancyZoneTag = \"\"\n\
         DisableUpgradeMigration = false\nUpgradeVersionTag = \"\"\n"
    );
    let (code, out, err) = cli(
        &[
            &["operator", "autopilot", "state", "-format=json"][..],
            &http[..],
        ]
        .concat(),
        None,
    );
    assert_eq!(code, 0, "{err}");
    let state: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(state["Healthy"], true);
    let leader = state["Leader"].as_str().unwrap();
    assert_eq!(state["Servers"][leader]["Status"], "leader");
    assert_eq!(state["Voters"], serde_json::json!([leader]));
    let (code, out, _) = cli(
        &[&["operator", "autopilot", "state"][..], &http[..]].concat(),
        None,
    );
    assert_eq!(code, 0);
    assert!(
        out.starts_with("Healthy:                      true\n"),
        "{out}"
    );
    assert!(out.contains("      Status:          leader\n"), "{out}");

    // One healthy server: 200 from the health endpoint, and list-peers shows its index.
    let health = agent.get("/v1/operator/autopilot/health");
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["FailureTolerance"], 0);
    let (code, out, err) = cli(
        &[&["operator", "raft", "list-peers"][..], &http[..]].concat(),
        None,
    );
    assert_eq!(code, 0, "{err}");
    let header = out.lines().next().unwrap();
    assert!(
        header.contains("Commit Index") && header.contains("Trails Leader By"),
        "{out}"
    );
    assert!(
        out.lines().nth(1).unwrap().trim_end().ends_with('_'),
        "{out}"
    );
}

/// Consul decodes a `PUT` onto `api.NewAutopilotConfiguration()`: a field the body leaves
/// out takes Consul's default, not zero and not the stored value.
#[test]
fn a_partial_configuration_put_keeps_consuls_defaults_for_what_it_omits() {
    let agent = Agent::dev(&[
        "-hcl",
        r#"autopilot { max_trailing_logs = 300 last_contact_threshold = "1s" redundancy_zone_tag = "zone" }"#,
    ]);
    assert_eq!(configuration(&agent)["MaxTrailingLogs"], 300);
    let r = agent.put(
        "/v1/operator/autopilot/configuration",
        br#"{"MinQuorum": 2}"#,
    );
    assert_eq!((r.status, r.text().trim()), (200, "true"), "{}", r.text());
    let config = configuration(&agent);
    assert_eq!(config["MinQuorum"], 2);
    assert_eq!(config["CleanupDeadServers"], true);
    assert_eq!(config["LastContactThreshold"], "200ms");
    assert_eq!(config["MaxTrailingLogs"], 250);
    assert_eq!(config["ServerStabilizationTime"], "10s");
    assert_eq!(config["RedundancyZoneTag"], "");
    assert_eq!(config["DisableUpgradeMigration"], false);

    // What the body gives, it sets, false and zero included.
    let r = agent.put(
        "/v1/operator/autopilot/configuration",
        br#"{"CleanupDeadServers": false, "MaxTrailingLogs": 0}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let config = configuration(&agent);
    assert_eq!(config["CleanupDeadServers"], false);
    assert_eq!(config["MaxTrailingLogs"], 0);
    assert_eq!(config["MinQuorum"], 0);
}

#[test]
fn usage_counts_the_catalog_as_consul() {
    let agent = Agent::dev(&[]);
    for (id, body) in [
        ("web1", r#"{"ID": "web1", "Name": "web", "Port": 80}"#),
        ("web2", r#"{"ID": "web2", "Name": "web", "Port": 81}"#),
        (
            "web-proxy",
            r#"{"ID": "web-proxy", "Name": "web-sidecar-proxy", "Kind": "connect-proxy", "Port": 21000,
                "Proxy": {"DestinationServiceName": "web"}}"#,
        ),
    ] {
        let r = agent.put("/v1/agent/service/register", body.as_bytes());
        assert_eq!(r.status, 200, "{id}: {}", r.text());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = agent.get("/v1/operator/usage");
        assert_eq!(r.status, 200);
        assert!(r.header("X-Consul-Index").is_some());
        let usage = r.json()["Usage"]["dc1"].clone();
        // The server's own `consul` service counts as an instance but is not billable.
        if usage["ServiceInstances"] == 4 {
            assert_eq!(usage["Services"], 3);
            assert_eq!(usage["Nodes"], 1);
            assert_eq!(usage["BillableServiceInstances"], 2);
            assert_eq!(usage["ConnectServiceInstances"]["connect-proxy"], 1);
            assert_eq!(usage["ConnectServiceInstances"]["mesh-gateway"], 0);
            // Consul's answer embeds its query meta, as its headers carry it.
            let body = r.json();
            assert_eq!(body["KnownLeader"], true);
            assert_eq!(
                body["Index"].as_u64().unwrap().max(1).to_string(),
                r.header("X-Consul-Index").unwrap()
            );
            assert_eq!(body["ConsistencyLevel"], "leader");
            assert_eq!(body["LastContact"], 0);
            // One server: its Raft configuration is the bootstrap entry, at index 1.
            let raft = agent.get("/v1/operator/raft/configuration").json();
            assert_eq!(raft["Index"], 1, "{raft}");
            break;
        }
        assert!(Instant::now() < deadline, "usage never counted: {usage}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The leader's view of the Raft configuration: (node name, voter) per server.
fn raft_members(cluster: &Cluster) -> Option<Vec<(String, bool)>> {
    let leader = cluster.current_leader()?;
    let r = try_request_bounded(
        cluster.servers[leader].addr(),
        "GET",
        "/v1/operator/raft/configuration",
        b"",
        &[],
        Duration::from_secs(5),
    )
    .ok()
    .filter(|r| r.status == 200)?;
    Some(
        r.json()["Servers"]
            .as_array()?
            .iter()
            .map(|s| {
                (
                    s["Node"].as_str().unwrap_or("").to_string(),
                    s["Voter"] == true,
                )
            })
            .collect(),
    )
}

#[test]
fn autopilot_removes_a_killed_server_and_promotes_a_newcomer_after_stabilization() {
    const STABILIZATION: Duration = Duration::from_secs(5);
    let autopilot = r#"autopilot { server_stabilization_time = "5s" }"#;
    let mut cluster = Cluster::start(5, &["-hcl", autopilot]);
    let leader = cluster.wait_for_leader(Duration::from_secs(30));
    let healthy_five = |cluster: &Cluster| {
        let leader = cluster.current_leader()?;
        let r = try_request_bounded(
            cluster.servers[leader].addr(),
            "GET",
            "/v1/operator/autopilot/health",
            b"",
            &[],
            Duration::from_secs(5),
        )
        .ok()?;
        let health = r.json();
        (r.status == 200
            && health["Healthy"] == true
            && health["Servers"].as_array()?.len() == 5
            && health["FailureTolerance"] == 2)
            .then_some(())
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while healthy_five(&cluster).is_none() {
        assert!(Instant::now() < deadline, "five servers never healthy");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Kill a follower for good: gossip declares it failed, autopilot removes it.
    let victim = (0..5).find(|i| *i != leader).unwrap();
    let victim_name = format!("s{victim}-{}", cluster.servers[victim].ip);
    cluster.servers[victim].kill9();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(members) = raft_members(&cluster) {
            if members.len() == 4 && members.iter().all(|(name, _)| *name != victim_name) {
                assert!(members.iter().all(|(_, voter)| *voter));
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the killed server was never removed: {:?}\nleader log:\n{}",
            raft_members(&cluster),
            cluster.servers[cluster.wait_for_leader(Duration::from_secs(10))].log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // A new server joins: first a non-voter, a voter only after the stabilization time.
    let ip = fresh_loopback();
    let data = TempDir::new("newcomer");
    let newcomer_name = format!("newcomer-{ip}");
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    let args: Vec<String> = [
        "agent",
        "-server",
        "-node",
        &newcomer_name,
        "-bind",
        &ip.to_string(),
        "-client",
        &ip.to_string(),
        "-data-dir",
        data.path().to_str().unwrap(),
        "-retry-join",
        &cluster.servers[leader].ip.to_string(),
        "-dns-port=-1",
        "-hcl",
        autopilot,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let newcomer = Agent::spawn(ip, 8500, args);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut added_at = None;
    let mut saw_non_voter_state = false;
    let promoted_at = loop {
        let voter = raft_members(&cluster).and_then(|members| {
            members
                .into_iter()
                .find(|(name, _)| *name == newcomer_name)
                .map(|(_, voter)| voter)
        });
        match (voter, added_at) {
            (Some(false), None) => added_at = Some(Instant::now()),
            (Some(true), None) => panic!("the newcomer joined as a voter"),
            (Some(true), Some(_)) => break Instant::now(),
            _ => {}
        }
        if added_at.is_some() && !saw_non_voter_state {
            let state = cluster.servers[cluster.wait_for_leader(Duration::from_secs(10))]
                .get("/v1/operator/autopilot/state")
                .json();
            saw_non_voter_state = state["Servers"]
                .as_object()
                .unwrap()
                .values()
                .any(|s| s["Name"] == newcomer_name.as_str() && s["Status"] == "non-voter");
        }
        assert!(
            Instant::now() < deadline,
            "the newcomer was never promoted: {:?}\nits log:\n{}",
            raft_members(&cluster),
            newcomer.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let waited = promoted_at - added_at.unwrap();
    // We see the addition up to one poll (plus a request) after it happened.
    assert!(
        waited + Duration::from_millis(500) >= STABILIZATION,
        "promoted {waited:?} after joining, before the {STABILIZATION:?} stabilization time"
    );
    assert!(
        saw_non_voter_state,
        "autopilot state never showed the non-voter"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while healthy_five(&cluster).is_none() {
        assert!(
            Instant::now() < deadline,
            "the cluster never healed to five"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
