//! Federation states with real processes: three datacenters of one `-dev` server each on
//! loopback, dc1 the primary, dc2 and dc3 joined to it over the WAN pool.
//!
//! - A mesh gateway registered in dc2 (a `Kind: mesh-gateway` service with a `wan` tagged
//!   address) reaches the primary through dc2's leader's anti-entropy, and dc3 through
//!   replication from the primary: `/v1/internal/federation-states/mesh-gateways` lists it
//!   under `dc2` in both, with its `CheckServiceNode` as dc2's catalog has it.
//! - `/v1/internal/federation-state/dc2` answers `{"State": …}` with the query meta; dc3's
//!   copy carries the primary's `ModifyIndex` as `PrimaryModifyIndex`; an unknown datacenter
//!   is a 404.
//! - A blocking read of dc3's list parks and wakes when the gateway is deregistered in dc2,
//!   after which neither dc1 nor dc3 lists a gateway for dc2.
//!
//! Bounded: every wait has a deadline.

use crate::agent_support::wait_for;
use crate::common::{fresh_loopback, Agent};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// How long the WAN pool and the roots may take to federate the three datacenters.
const FEDERATION_LIMIT: Duration = Duration::from_secs(60);
/// How long a gateway change in dc2 may take to show in dc1 and dc3: one anti-entropy
/// round (at most 5 s after the previous write) and one replication round, under load.
const CONVERGE_LIMIT: Duration = Duration::from_secs(20);

fn gateways_of(agent: &Agent, datacenter: &str) -> Vec<Value> {
    let r = agent.get("/v1/internal/federation-states/mesh-gateways");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()[datacenter].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_mesh_gateway_in_dc2_reaches_the_primary_and_dc3_and_leaves_with_its_deregistration() {
    let (dc1_ip, dc2_ip, dc3_ip) = (fresh_loopback(), fresh_loopback(), fresh_loopback());
    let primary = "primary_datacenter = \"dc1\"";
    let dc1 = Agent::dev_at(dc1_ip, &["-datacenter", "dc1", "-hcl", primary]);
    let join_wan = format!("retry_join_wan = [\"{dc1_ip}\"]");
    let dc2 = Agent::dev_at(
        dc2_ip,
        &["-datacenter", "dc2", "-hcl", primary, "-hcl", &join_wan],
    );
    let dc3 = Agent::dev_at(
        dc3_ip,
        &["-datacenter", "dc3", "-hcl", primary, "-hcl", &join_wan],
    );
    wait_for(
        FEDERATION_LIMIT,
        "three datacenters in the WAN pool",
        || {
            [&dc1, &dc2, &dc3]
                .iter()
                .all(|a| {
                    a.get("/v1/catalog/datacenters")
                        .json()
                        .as_array()
                        .is_some_and(|d| d.len() == 3)
                })
                .then_some(())
        },
    );
    // Before any gateway: nothing to list, and an unknown datacenter is a 404.
    assert_eq!(
        dc1.get("/v1/internal/federation-states/mesh-gateways")
            .json(),
        json!({})
    );
    let missing = dc1.get("/v1/internal/federation-state/dc9");
    assert_eq!(missing.status, 404, "{}", missing.text());
    assert!(missing.body.is_empty());

    let registration = json!({
        "Node": "gw-node", "Address": "10.2.0.9",
        "Service": {
            "ID": "mgw", "Service": "mesh-gateway", "Kind": "mesh-gateway", "Port": 8443,
            "TaggedAddresses": {"wan": {"Address": "198.51.100.2", "Port": 443}},
            "Meta": {"consul-wan-federation": "1"}
        }
    });
    let r = dc2.put("/v1/catalog/register", registration.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let registered = Instant::now();
    for (agent, name) in [(&dc1, "dc1"), (&dc3, "dc3")] {
        let gateways = wait_for(CONVERGE_LIMIT, &format!("dc2's gateway in {name}"), || {
            let found = gateways_of(agent, "dc2");
            (!found.is_empty()).then_some(found)
        });
        assert_eq!(gateways.len(), 1, "{gateways:?}");
        assert_eq!(gateways[0]["Service"]["ID"], "mgw");
        assert_eq!(gateways[0]["Service"]["Kind"], "mesh-gateway");
        assert_eq!(
            gateways[0]["Service"]["TaggedAddresses"]["wan"]["Address"],
            "198.51.100.2"
        );
        assert_eq!(gateways[0]["Node"]["Node"], "gw-node");
        assert!(gateways[0]["Checks"].is_array());
    }
    eprintln!(
        "dc2's gateway in dc1 and dc3 after {:?}",
        registered.elapsed()
    );

    // The primary's row and dc3's copy of it.
    let in_dc1 = dc1.get("/v1/internal/federation-state/dc2");
    assert_eq!(in_dc1.status, 200, "{}", in_dc1.text());
    let in_dc1 = in_dc1.json();
    let state = &in_dc1["State"];
    assert_eq!(state["Datacenter"], "dc2");
    assert!(state["UpdatedAt"]
        .as_str()
        .is_some_and(|t| t.ends_with('Z')));
    assert!(in_dc1["Index"].as_u64().is_some_and(|i| i > 0));
    assert_eq!(in_dc1["KnownLeader"], true);
    let primary_index = state["ModifyIndex"].as_u64().unwrap();
    let copy = wait_for(CONVERGE_LIMIT, "dc3's copy of the primary's row", || {
        let r = dc3.get("/v1/internal/federation-state/dc2");
        (r.status == 200 && r.json()["State"]["PrimaryModifyIndex"] == primary_index)
            .then(|| r.json())
    });
    assert_eq!(copy["State"]["MeshGateways"], state["MeshGateways"]);
    // The full list, by datacenter name.
    let list = dc3.get("/v1/internal/federation-states").json();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["Datacenter"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"dc2"), "{list}");
    assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted: {names:?}");

    // A blocking read in dc3 wakes when the gateway leaves dc2.
    let before = dc3.get("/v1/internal/federation-states/mesh-gateways");
    let index: u64 = before
        .header("X-Consul-Index")
        .and_then(|v| v.parse().ok())
        .expect("an index");
    let dc3_addr = dc3.addr();
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let r = crate::common::request(
            dc3_addr,
            "GET",
            &format!("/v1/internal/federation-states/mesh-gateways?index={index}&wait=60s"),
            b"",
            &[],
        );
        (r.status, r.json(), started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    let r = dc2.put(
        "/v1/catalog/deregister",
        json!({"Node": "gw-node", "ServiceID": "mgw"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (status, woke, waited) = waiter.join().unwrap();
    assert_eq!(status, 200);
    assert!(
        waited < Duration::from_secs(50),
        "woke by the change, not the wait"
    );
    assert!(woke.get("dc2").is_none(), "{woke}");
    for (agent, name) in [(&dc1, "dc1"), (&dc3, "dc3")] {
        wait_for(
            CONVERGE_LIMIT,
            &format!("dc2's gateway gone from {name}"),
            || gateways_of(agent, "dc2").is_empty().then_some(()),
        );
    }
}
