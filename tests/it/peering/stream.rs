//! The peer stream between two single-server dev clusters with gRPC over TLS: a dialer
//! whose token's secret was rotated away is refused by `ExchangeSecret`; a good token
//! makes both sides `ACTIVE` with heartbeats; killing the acceptor makes the dialer's
//! peering `FAILING`, and restarting it brings the stream back; deleting the peering on
//! the acceptor terminates the dialer's.

use super::support::{certificates, decode, generate_token, peering_agent, post};
use crate::common::Agent;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The peering `name` as `agent` reads it, `None` when there is none.
pub(super) fn read(agent: &Agent, name: &str) -> Option<Value> {
    let answer = agent.get(&format!("/v1/peering/{name}"));
    match answer.status {
        200 => Some(answer.json()),
        404 => None,
        other => panic!("reading peering {name}: {other} {}", answer.text()),
    }
}

/// Waits (bounded) until `agent`'s peering `name` satisfies `done`, returning it.
pub(super) fn wait_for(
    agent: &Agent,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Option<Value>) -> bool,
) -> Option<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let current = read(agent, name);
        if done(&current) {
            return current;
        }
        assert!(
            Instant::now() < deadline,
            "peering {name} never became {what}: {current:?}\nlog:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(super) fn wait_state(agent: &Agent, name: &str, state: &str, timeout: Duration) -> Value {
    wait_for(agent, name, state, timeout, |p| {
        p.as_ref().is_some_and(|p| p["State"] == state)
    })
    .unwrap()
}

pub(super) fn establish(dialer: &Agent, name: &str, token: &str) {
    let body = json!({"PeerName": name, "PeeringToken": token});
    let answer = post(dialer, "/v1/peering/establish", &body, None);
    assert_eq!(answer.status, 200, "{}", answer.text());
}

#[test]
fn a_peering_streams_fails_with_its_acceptor_recovers_and_terminates() {
    let dir = certificates("peer-stream");
    let mut acceptor = peering_agent(&dir, "dc1", "");
    let dialer = peering_agent(&dir, "dc2", "");

    // A token whose secret a newer token replaced: the acceptor refuses the exchange and
    // the dialer's peering stays ESTABLISHING.
    let stale = generate_token(&acceptor, "dc2-peer", json!({}));
    let token = generate_token(&acceptor, "dc2-peer", json!({}));
    establish(&dialer, "stale", &stale);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dialer.log().contains("invalid establishment secret") {
        assert!(
            Instant::now() < deadline,
            "the refused exchange was never logged:\n{}",
            dialer.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(read(&dialer, "stale").unwrap()["State"], "ESTABLISHING");
    assert_eq!(read(&acceptor, "dc2-peer").unwrap()["State"], "PENDING");
    assert_eq!(dialer.delete("/v1/peering/stale").status, 200);
    wait_for(
        &dialer,
        "stale",
        "deleted",
        Duration::from_secs(10),
        Option::is_none,
    );

    // The current token: the secret is exchanged, the stream opens, both sides are ACTIVE.
    establish(&dialer, "dc1-peer", &token);
    let on_dialer = wait_state(&dialer, "dc1-peer", "ACTIVE", Duration::from_secs(30));
    let on_acceptor = wait_state(&acceptor, "dc2-peer", "ACTIVE", Duration::from_secs(30));
    let (_, fields) = decode(&token);
    assert_eq!(on_dialer["PeerID"], fields["PeerID"]);
    assert_eq!(on_acceptor["ID"], fields["PeerID"]);
    assert_eq!(
        on_acceptor["Remote"],
        json!({"Partition": "default", "Datacenter": "dc2"}),
        "the acceptor learns the dialer's datacenter from Open"
    );
    // The acceptor's first heartbeat goes out when it admits the stream.
    wait_for(
        &dialer,
        "dc1-peer",
        "heartbeated",
        Duration::from_secs(10),
        |p| {
            p.as_ref()
                .is_some_and(|p| p["StreamStatus"]["LastHeartbeat"].is_string())
        },
    );

    // The acceptor dies: the dialer's stream breaks and its peering is FAILING.
    acceptor.kill9();
    wait_state(&dialer, "dc1-peer", "FAILING", Duration::from_secs(30));
    // It comes back with its data: the dialer dials again and both are ACTIVE.
    acceptor.restart();
    acceptor.wait_ready();
    wait_state(&dialer, "dc1-peer", "ACTIVE", Duration::from_secs(90));
    wait_state(&acceptor, "dc2-peer", "ACTIVE", Duration::from_secs(30));

    // Deleting on the acceptor terminates the dialer's peering, which stops dialing and
    // can still be deleted.
    assert_eq!(acceptor.delete("/v1/peering/dc2-peer").status, 200);
    wait_state(&dialer, "dc1-peer", "TERMINATED", Duration::from_secs(30));
    assert!(read(&acceptor, "dc2-peer").is_none());
    assert_eq!(dialer.delete("/v1/peering/dc1-peer").status, 200);
    wait_for(
        &dialer,
        "dc1-peer",
        "deleted",
        Duration::from_secs(10),
        Option::is_none,
    );
}
