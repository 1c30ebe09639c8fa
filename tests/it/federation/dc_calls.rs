//! `?dc=` as Consul's typed calls between datacenters: a client agent sends the typed read
//! naming the other datacenter to its server, which hands the same call on to a server of
//! that datacenter over Consul's own RPC (byte 4, a yamux stream), as Consul's `forwardDC`
//! does, and relays the answer. The remote server's log shows the session from the first
//! server and the method it served; a blocking read travels with its options and is woken
//! by a write in the remote datacenter, its `X-Consul-Index` the remote's; a datacenter
//! nobody knows is Consul's "No path to datacenter", a 500, on both agents. KV writes
//! naming the other datacenter go the same way, as `KVS.Apply`. With
//! `translate_wan_addrs`, the agent that took the request rewrites the typed answer's
//! addresses to the remote nodes' and services' WAN addresses, as it does a forwarded one.

use crate::common;

use super::consul_rpc::{wait_for_log, TwoDatacenters};
use std::time::{Duration, Instant};

#[test]
fn a_dc_read_is_the_same_typed_call_handed_to_the_other_datacenter() {
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start("dc-calls-client", &[]);
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    assert_eq!(remote.put("/v1/kv/far/a", b"one").text(), "true");
    // Until the WAN pool has converged, dc1 has no path to dc2.
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.get("/v1/kv/far/a?dc=dc2&raw").status != 200 {
        assert!(Instant::now() < deadline, "dc1 never reached dc2");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The call reached dc2 as a typed call on a yamux session dc1's server opened: the
    // client agent itself never talks to dc2.
    wait_for_log(remote, &["rpc: call KVS.Get"]);
    wait_for_log(
        remote,
        &[&format!("rpc: yamux session from {}:", server.ip)],
    );
    assert!(
        !remote
            .log()
            .contains(&format!("rpc: yamux session from {}:", client.ip)),
        "the client agent reached dc2 itself"
    );

    // A blocking read naming dc2, asked of the client agent, waits in dc2 and is woken by
    // a write there; its metadata is dc2's.
    let first = client.get("/v1/kv/far/a?dc=dc2");
    assert_eq!(first.status, 200, "{}", first.text());
    let index = first.header("X-Consul-Index").unwrap().to_string();
    assert_eq!(
        Some(index.as_str()),
        remote.get("/v1/kv/far/a").header("X-Consul-Index")
    );
    let blocked_path = format!("/v1/kv/far/a?dc=dc2&index={index}&wait=30s");
    let waiter = {
        let addr = client.addr();
        std::thread::spawn(move || {
            let started = Instant::now();
            let reply = common::request(addr, "GET", &blocked_path, b"", &[]);
            (reply, started.elapsed())
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    assert!(!waiter.is_finished(), "the blocking read answered at once");
    assert_eq!(remote.put("/v1/kv/far/a", b"two").text(), "true");
    let (woken, elapsed) = waiter.join().unwrap();
    assert_eq!(woken.status, 200, "{}", woken.text());
    assert!(elapsed < Duration::from_secs(15), "{elapsed:?}");
    assert_eq!(woken.json()[0]["Value"], "dHdv");
    let direct = remote.get("/v1/kv/far/a");
    assert_eq!(
        woken.header("X-Consul-Index"),
        direct.header("X-Consul-Index")
    );
    assert_ne!(woken.header("X-Consul-Index"), Some(index.as_str()));
    assert_eq!(woken.header("X-Consul-KnownLeader"), Some("true"));
    // The health read of dc2 goes the same way.
    let health = client.get("/v1/health/node/nobody?dc=dc2");
    assert_eq!(health.status, 200, "{}", health.text());
    wait_for_log(remote, &["rpc: call Health.NodeChecks"]);

    // Writes naming dc2 go as `KVS.Apply` naming it, from either agent, and answer as
    // dc2's own endpoint does.
    for (agent, key) in [(client, "far/from-client"), (server, "far/from-server")] {
        let path = format!("/v1/kv/{key}?dc=dc2");
        assert_eq!(agent.put(&path, b"written").text(), "true");
        assert_eq!(remote.get(&format!("/v1/kv/{key}?raw")).text(), "written");
        let stale_cas = format!("/v1/kv/{key}?dc=dc2&cas=1");
        assert_eq!(agent.put(&stale_cas, b"no").text(), "false");
        assert_eq!(agent.delete(&path).text(), "true");
        assert_eq!(remote.get(&format!("/v1/kv/{key}")).status, 404);
    }
    assert_eq!(server.get("/v1/kv/far/from-server").status, 404);
    wait_for_log(remote, &["rpc: call KVS.Apply"]);
    let bad = client.put("/v1/kv/far/x?dc=dc2&cas=1&acquire=abc", b"");
    assert_eq!(bad.status, 400, "{}", bad.text());

    // A datacenter nobody knows: Consul's words, a 500, from either agent.
    for agent in [client, server] {
        for path in ["/v1/kv/far/a?dc=dc9", "/v1/health/node/x?dc=dc9"] {
            let unknown = agent.get(path);
            assert_eq!(
                (unknown.status, unknown.text()),
                (500, "No path to datacenter".to_string()),
                "{path}"
            );
        }
        let unknown = agent.put("/v1/kv/far/a?dc=dc9", b"x");
        assert_eq!(
            (unknown.status, unknown.text()),
            (500, "No path to datacenter".to_string())
        );
    }
}

#[test]
fn a_typed_dc_read_carries_wan_addresses_with_translate_wan_addrs() {
    let translate = ["-hcl", "translate_wan_addrs = true"];
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start("dc-calls-translate", &translate);
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    let registration = br#"{"Node": "far", "Address": "10.2.0.9",
        "TaggedAddresses": {"wan": "198.51.100.9"},
        "Service": {"ID": "db-1", "Service": "db", "Address": "10.2.0.10", "Port": 5432,
            "TaggedAddresses": {"wan": {"Address": "198.51.100.10", "Port": 9000}}}}"#;
    assert_eq!(
        remote.put("/v1/catalog/register", registration).text(),
        "true"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.get("/v1/catalog/service/db?dc=dc2").text() == "[]"
        || client.get("/v1/catalog/service/db?dc=dc2").status != 200
    {
        assert!(Instant::now() < deadline, "dc1 never reached dc2");
        std::thread::sleep(Duration::from_millis(200));
    }
    for agent in [client, server] {
        let services = agent.get("/v1/catalog/service/db?dc=dc2");
        assert_eq!(
            services.header("X-Consul-Translate-Addresses"),
            Some("true")
        );
        let services = services.json();
        assert_eq!(services[0]["Address"], "198.51.100.9", "{services}");
        assert_eq!(services[0]["ServiceAddress"], "198.51.100.10", "{services}");
        assert_eq!(services[0]["ServicePort"], 9000, "{services}");
        let health = agent.get("/v1/health/service/db?dc=dc2").json();
        assert_eq!(health[0]["Node"]["Address"], "198.51.100.9", "{health}");
        assert_eq!(health[0]["Service"]["Address"], "198.51.100.10", "{health}");
        let node = agent.get("/v1/catalog/node/far?dc=dc2").json();
        assert_eq!(node["Node"]["Address"], "198.51.100.9", "{node}");
        // The remote datacenter's own answer is untouched.
        let direct = remote.get("/v1/catalog/service/db").json();
        assert_eq!(direct[0]["Address"], "10.2.0.9", "{direct}");
    }
    wait_for_log(remote, &["rpc: call Catalog.ServiceNodes"]);
}
