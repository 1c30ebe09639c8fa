//! Exported services replicating over the peer stream between two single-server dev
//! clusters: cluster A exports `web` (with a TTL check) to its peer B; B answers
//! `?peer=` health and catalog reads with A's instance, each row naming the peer; a health
//! flip on A reaches B within the 1 s bar and wakes a blocking read there;
//! removing `web` from A's entry removes it on B; deleting the peering on B drops what B
//! imported.

use super::stream::{establish, read, wait_state};
use super::support::{certificates, generate_token, peering_agent};
use crate::common::{request, Agent};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The bar for a health change on the exporting side to be visible on the
/// importing side.
const HEALTH_PROPAGATION_BAR: Duration = Duration::from_secs(1);

/// B's name for the peering with A, and A's name for the peering with B.
const A_ON_B: &str = "cluster-a";
const B_ON_A: &str = "cluster-b";

fn health_path() -> String {
    format!("/v1/health/service/web?peer={A_ON_B}")
}

/// Blocks on `path` (which has no query string of its own beyond `?peer=`) until its
/// answer satisfies `done`, each wait a blocking read from the last index; returns the
/// answer and its index. Bounded by `timeout`.
fn block_until(
    agent: &Agent,
    path: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Value) -> bool,
) -> (Value, u64) {
    let deadline = Instant::now() + timeout;
    let mut index = 0;
    loop {
        let answer = agent.get(&format!("{path}&index={index}&wait=5s"));
        assert_eq!(answer.status, 200, "{path}: {}", answer.text());
        let body = answer.json();
        if done(&body) {
            return (body, answer.index());
        }
        assert!(
            Instant::now() < deadline,
            "{path} never showed {what}: {body}\nlog:\n{}",
            agent.log()
        );
        index = answer.index();
    }
}

fn export_web(a: &Agent) {
    let entry = json!({"Kind": "exported-services", "Name": "default",
        "Services": [{"Name": "web", "Consumers": [{"Peer": B_ON_A}]}]});
    let answer = a.put("/v1/config", entry.to_string().as_bytes());
    assert_eq!(answer.status, 200, "{}", answer.text());
}

fn web_status(body: &Value) -> Option<&str> {
    body.as_array()?.first()?["Checks"]
        .as_array()?
        .iter()
        .find(|c| c["CheckID"] == "web-ttl")?["Status"]
        .as_str()
}

#[test]
fn exported_services_replicate_follow_health_and_go_away() {
    let dir = certificates("peer-replication");
    let a = peering_agent(&dir, "dc1", "");
    let b = peering_agent(&dir, "dc2", "");

    let web = json!({"Name": "web", "ID": "web-1", "Port": 8080, "Tags": ["v1"],
        "Check": {"CheckID": "web-ttl", "Name": "web alive", "TTL": "10m", "Status": "passing"}});
    let answer = a.put("/v1/agent/service/register", web.to_string().as_bytes());
    assert_eq!(answer.status, 200, "{}", answer.text());
    export_web(&a);

    let token = generate_token(&a, B_ON_A, json!({}));
    establish(&b, A_ON_B, &token);
    wait_state(&b, A_ON_B, "ACTIVE", Duration::from_secs(30));
    wait_state(&a, B_ON_A, "ACTIVE", Duration::from_secs(30));

    // B imports A's instance; every row names the peer it came from.
    let (body, _) = block_until(
        &b,
        &health_path(),
        "A's web",
        Duration::from_secs(30),
        |body| web_status(body) == Some("passing"),
    );
    let instance = &body[0];
    assert_eq!(instance["Node"]["PeerName"], A_ON_B, "{body}");
    assert_eq!(instance["Node"]["Datacenter"], "dc1");
    assert_eq!(instance["Service"]["ID"], "web-1");
    assert_eq!(instance["Service"]["Port"], 8080);
    assert_eq!(instance["Service"]["Tags"], json!(["v1"]));
    assert_eq!(instance["Service"]["PeerName"], A_ON_B);
    assert!(instance["Checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["PeerName"] == A_ON_B));
    let catalog = b
        .get(&format!("/v1/catalog/service/web?peer={A_ON_B}"))
        .json();
    assert_eq!(catalog.as_array().map(Vec::len), Some(1), "{catalog}");
    assert_eq!(catalog[0]["ServiceID"], "web-1");
    assert_eq!(catalog[0]["PeerName"], A_ON_B);
    let passing = b.get(&format!("{}&passing", health_path())).json();
    assert_eq!(passing.as_array().map(Vec::len), Some(1), "{passing}");
    // The local catalog of B has no web, and another peer name reads nothing.
    assert_eq!(b.get("/v1/health/service/web").json(), json!([]));
    assert_eq!(
        b.get("/v1/health/service/web?peer=nobody").json(),
        json!([])
    );
    // Both sides' stream status name the service.
    let on_b = read(&b, A_ON_B).unwrap();
    assert_eq!(on_b["StreamStatus"]["ImportedServices"], json!(["web"]));
    let on_a = read(&a, B_ON_A).unwrap();
    assert_eq!(on_a["StreamStatus"]["ExportedServices"], json!(["web"]));

    // The TTL check fails on A: a blocking read on B wakes with it, within the bar.
    let index = b.get(&health_path()).index();
    let addr = b.addr();
    let watcher = std::thread::spawn(move || {
        let mut index = index;
        loop {
            let answer = request(
                addr,
                "GET",
                &format!("{}&index={index}&wait=30s", health_path()),
                b"",
                &[],
            );
            let woke = Instant::now();
            let body = answer.json();
            if web_status(&body) != Some("passing") || answer.index() == index {
                return (woke, answer.index(), body);
            }
            index = answer.index();
        }
    });
    let flipped = Instant::now();
    let answer = a.put("/v1/agent/check/fail/web-ttl?note=down", b"");
    assert_eq!(answer.status, 200, "{}", answer.text());
    let (woke, woke_index, body) = watcher.join().unwrap();
    let latency = woke.saturating_duration_since(flipped);
    println!("health flip on A seen by a blocking read on B after {latency:?}");
    assert!(woke_index > index, "the blocking read woke on the change");
    assert_eq!(web_status(&body), Some("critical"), "{body}");
    assert!(
        latency < HEALTH_PROPAGATION_BAR,
        "the flip took {latency:?} to reach B, over the {HEALTH_PROPAGATION_BAR:?} bar"
    );
    let passing = b.get(&format!("{}&passing", health_path())).json();
    assert_eq!(passing, json!([]));

    // A stops exporting web: B drops it.
    assert_eq!(a.delete("/v1/config/exported-services/default").status, 200);
    block_until(
        &b,
        &health_path(),
        "no instance",
        Duration::from_secs(10),
        |body| body == &json!([]),
    );
    assert!(read(&b, A_ON_B).unwrap()["StreamStatus"]["ImportedServices"].is_null());

    // Exported again, then B deletes the peering: its imports go with it.
    export_web(&a);
    block_until(
        &b,
        &health_path(),
        "A's web again",
        Duration::from_secs(10),
        |body| body.as_array().is_some_and(|rows| rows.len() == 1),
    );
    assert_eq!(b.delete(&format!("/v1/peering/{A_ON_B}")).status, 200);
    block_until(
        &b,
        &health_path(),
        "no instance after the deletion",
        Duration::from_secs(10),
        |body| body == &json!([]),
    );
    assert_eq!(
        b.get(&format!("/v1/catalog/service/web?peer={A_ON_B}"))
            .json(),
        json!([])
    );
}
