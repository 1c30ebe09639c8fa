//! The gossip HTTP and CLI surface between real praetor processes: members, join, leave,
//! force-leave (LAN and WAN), user events with blocking lists, the keyring across the
//! pool, and network coordinates. Every wait is bounded; each test stays well under 60 s.

use crate::common;

use common::{cli, try_request_bounded, Agent, Cluster, HttpResponse, TempDir};
use serde_json::Value;
use std::time::{Duration, Instant};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

fn call(agent: &Agent, method: &str, path: &str, body: &[u8]) -> HttpResponse {
    try_request_bounded(agent.addr(), method, path, body, &[], REQUEST_TIMEOUT)
        .unwrap_or_else(|e| panic!("{method} {path} on {}: {e}", agent.addr()))
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `timeout`.
fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn members(agent: &Agent, query: &str) -> Vec<Value> {
    let r = call(agent, "GET", &format!("/v1/agent/members{query}"), b"");
    assert_eq!(r.status, 200, "members: {}", r.text());
    r.json().as_array().cloned().unwrap_or_default()
}

fn status_of(agent: &Agent, node: &str) -> Option<i64> {
    members(agent, "")
        .iter()
        .find(|m| m["Name"] == node)
        .and_then(|m| m["Status"].as_i64())
}

fn name_of(agent: &Agent) -> String {
    let r = call(agent, "GET", "/v1/agent/self", b"");
    r.json()["Config"]["NodeName"].as_str().unwrap().to_string()
}

fn wait_alive(agent: &Agent, count: usize) {
    wait_for(
        &format!("{count} alive members on {}", agent.ip),
        Duration::from_secs(20),
        || {
            let alive = members(agent, "")
                .iter()
                .filter(|m| m["Status"] == 1)
                .count();
            (alive == count).then_some(())
        },
    );
}

/// A client agent that has joined nothing yet.
fn lone_client(name: &str, data: &TempDir) -> Agent {
    let ip = common::fresh_loopback();
    let args: Vec<String> = [
        "agent",
        "-node",
        &format!("{name}-{ip}"),
        "-bind",
        &ip.to_string(),
        "-client",
        &ip.to_string(),
        "-data-dir",
        data.path().to_str().unwrap(),
        "-dns-port=-1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let agent = Agent::spawn(ip, 8500, args);
    wait_for("the client's HTTP API", Duration::from_secs(15), || {
        try_request_bounded(
            agent.addr(),
            "GET",
            "/v1/agent/members",
            b"",
            &[],
            Duration::from_secs(2),
        )
        .ok()
        .filter(|r| r.status == 200)
    });
    agent
}

#[test]
fn members_join_leave_and_force_leave_over_http_and_cli() {
    let cluster = Cluster::start(3, &[]);
    let s0 = &cluster.servers[0];
    let s1 = &cluster.servers[1];
    wait_alive(s0, 3);

    // Consul's member JSON: numeric status, serf's port, Consul's tags, protocol fields.
    let list = members(s0, "");
    let me = list
        .iter()
        .find(|m| m["Name"] == name_of(s0).as_str())
        .expect("the agent lists itself");
    assert_eq!(me["Addr"], s0.ip.to_string());
    assert_eq!(me["Port"], 8301);
    assert_eq!(me["Status"], 1);
    assert_eq!(me["Tags"]["role"], "consul");
    assert_eq!(me["Tags"]["dc"], "dc1");
    assert_eq!(me["Tags"]["port"], "8300");
    for field in ["ProtocolMin", "ProtocolMax", "ProtocolCur", "DelegateCur"] {
        assert!(me[field].as_u64().is_some(), "{field} in {me}");
    }
    assert_eq!(
        call(s0, "GET", "/v1/agent/members?segment=other", b"").status,
        400
    );
    assert_eq!(members(s0, "?segment=_all").len(), 3);
    assert_eq!(
        call(s0, "GET", "/v1/agent/members?wan=1&segment=a", b"").status,
        400
    );

    // Servers flood each other into the WAN pool as `<node>.<dc>`.
    wait_for("3 alive WAN members", Duration::from_secs(20), || {
        let wan = members(s1, "?wan=1");
        let alive = wan.iter().filter(|m| m["Status"] == 1).count();
        (alive == 3
            && wan
                .iter()
                .all(|m| m["Name"].as_str().unwrap().ends_with(".dc1")))
        .then_some(())
    });
    let (code, out, err) = cli(&["members", "-wan", "-http-addr", &s1.http_addr()], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("{}.dc1", name_of(s0))), "{out}");
    assert!(out.contains(":8302"), "{out}");

    // Join over HTTP: a lone client joins through a server.
    let c1_data = TempDir::new("members-c1");
    let mut c1 = lone_client("c1", &c1_data);
    let c1_name = name_of(&c1);
    assert_eq!(members(&c1, "").len(), 1);
    assert_eq!(call(&c1, "GET", "/v1/agent/join/x", b"").status, 405);
    let r = call(&c1, "PUT", &format!("/v1/agent/join/{}", s0.ip), b"");
    assert_eq!(r.status, 200, "join: {}", r.text());
    let r = call(&c1, "PUT", "/v1/agent/join/127.0.0.1:1", b"");
    assert_eq!(r.status, 500, "joining nobody fails: {}", r.text());
    wait_for("the servers to see c1", Duration::from_secs(15), || {
        (status_of(s1, &c1_name) == Some(1)).then_some(())
    });
    // Client agents have no WAN pool.
    assert!(members(&c1, "?wan=1").is_empty());

    // Join over the CLI.
    let c2_data = TempDir::new("members-c2");
    let mut c2 = lone_client("c2", &c2_data);
    let c2_name = name_of(&c2);
    let (code, out, err) = cli(
        &["join", "-http-addr", &c2.http_addr(), &s1.ip.to_string()],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Successfully joined cluster by contacting 1 nodes."),
        "{out}"
    );
    wait_alive(s0, 5);
    let (code, out, _) = cli(&["members", "-http-addr", &s0.http_addr()], None);
    assert_eq!(code, 0);
    for line in [&c1_name, &c2_name] {
        let row = out
            .lines()
            .find(|l| l.starts_with(line.as_str()))
            .unwrap_or_else(|| panic!("{line} in {out}"));
        assert!(row.contains("alive") && row.contains("client"), "{row}");
    }
    let (code, out, _) = cli(
        &["members", "-detailed", "-http-addr", &s0.http_addr()],
        None,
    );
    assert_eq!(code, 0);
    assert!(
        out.contains("role=node") && out.contains("role=consul"),
        "{out}"
    );

    // Graceful leave over the CLI: the agent answers, leaves, and exits.
    let (code, out, err) = cli(&["leave", "-http-addr", &c1.http_addr()], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Graceful leave complete"), "{out}");
    let mut child = c1.child.take().expect("c1 running");
    wait_for("c1 to exit after leaving", Duration::from_secs(15), || {
        child.try_wait().ok().flatten()
    });
    wait_for("c1 left (not failed)", Duration::from_secs(10), || {
        (status_of(s0, &c1_name) == Some(3)).then_some(())
    });

    // A crashed member is failed; force-leave marks it left, -prune forgets it.
    c2.kill9();
    wait_for("c2 to be seen as failed", Duration::from_secs(30), || {
        (status_of(s0, &c2_name) == Some(4)).then_some(())
    });
    // Consul's agent refuses a node that is not a member with a plain error: 500.
    let r = call(s0, "PUT", "/v1/agent/force-leave/no-such-node", b"");
    assert_eq!(r.status, 500, "{}", r.text());
    let (code, _, err) = cli(
        &["force-leave", "-http-addr", &s0.http_addr(), &c2_name],
        None,
    );
    assert_eq!(code, 0, "{err}");
    wait_for("c2 left everywhere", Duration::from_secs(10), || {
        (status_of(s1, &c2_name) == Some(3)).then_some(())
    });
    let (code, out, _) = cli(
        &["members", "-status=left", "-http-addr", &s1.http_addr()],
        None,
    );
    assert_eq!(code, 0);
    assert!(out.contains(&c2_name) && !out.contains("alive"), "{out}");
    let (code, _, _) = cli(
        &["members", "-status=failed", "-http-addr", &s1.http_addr()],
        None,
    );
    assert_eq!(code, 2, "no failed members left to list");
    let r = call(
        s0,
        "PUT",
        &format!("/v1/agent/force-leave/{c2_name}?prune"),
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for("c2 pruned", Duration::from_secs(10), || {
        status_of(s1, &c2_name).is_none().then_some(())
    });
}

/// Consul's `uuidToUint64`.
fn uuid_index(id: &str) -> u64 {
    let hex: String = id.chars().filter(|c| *c != '-').collect();
    let v = u128::from_str_radix(&hex, 16).unwrap();
    (v >> 64) as u64 ^ v as u64
}

fn event_list(agent: &Agent, query: &str) -> (Vec<Value>, u64) {
    let r = call(agent, "GET", &format!("/v1/event/list{query}"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
    (r.json().as_array().cloned().unwrap(), r.index())
}

#[test]
fn events_fire_everywhere_and_wake_blocking_lists_and_coordinates_fill_in() {
    let cluster = Cluster::start(3, &[]);
    let [s0, s1, s2] = [
        &cluster.servers[0],
        &cluster.servers[1],
        &cluster.servers[2],
    ];
    wait_alive(s0, 3);
    wait_alive(s2, 3);

    let (before, index) = event_list(s1, "");
    assert!(before.is_empty());
    assert_eq!(index, 1, "an empty list reports index 1");

    // A blocking list on s1 wakes when an event fired on s0 arrives.
    let s1_addr = s1.addr();
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let r = try_request_bounded(
            s1_addr,
            "GET",
            "/v1/event/list?index=1&wait=30s",
            b"",
            &[],
            Duration::from_secs(40),
        )
        .expect("blocking list");
        (r, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    let (code, out, err) = cli(
        &[
            "event",
            "-http-addr",
            &s0.http_addr(),
            "-name",
            "deploy",
            "v42",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let id = out
        .trim()
        .strip_prefix("Event ID: ")
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    let (woken, waited) = waiter.join().unwrap();
    assert_eq!(woken.status, 200);
    assert!(waited < Duration::from_secs(15), "woke after {waited:?}");
    assert_eq!(woken.index(), uuid_index(&id));
    let events = woken.json();
    assert_eq!(events[0]["ID"], id.as_str());
    assert_eq!(events[0]["Name"], "deploy");
    assert_eq!(events[0]["Payload"], "djQy", "base64 of v42");
    assert_eq!(events[0]["Version"], 1);

    // Fired over HTTP with a node filter: only the matching node records it.
    let s2_name = name_of(s2);
    let r = call(
        s1,
        "PUT",
        &format!("/v1/event/fire/restart?node=%5E{s2_name}%24"),
        b"now",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let fired = r.json();
    assert_eq!(fired["Name"], "restart");
    assert_eq!(fired["NodeFilter"], format!("^{s2_name}$"));
    assert_eq!(fired["LTime"], 0);
    wait_for("the restart event on s2", Duration::from_secs(10), || {
        let (events, _) = event_list(s2, "?name=restart");
        (events.len() == 1).then_some(())
    });
    wait_for("the deploy event on s2", Duration::from_secs(10), || {
        let (events, _) = event_list(s2, "");
        (events.len() == 2).then_some(())
    });
    // Both events reached every node by now (gossip spreads them alike); the filter
    // kept the restart event out of s0's list.
    std::thread::sleep(Duration::from_secs(1));
    let (events, index) = event_list(s0, "");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(index, uuid_index(&id));
    let (only_deploy, _) = event_list(s2, "?name=deploy");
    assert_eq!(only_deploy.len(), 1);
    assert_eq!(call(s0, "PUT", "/v1/event/fire/x?tag=v1", b"").status, 400);
    assert_eq!(call(s0, "GET", "/v1/event/fire/x", b"").status, 405);

    // A blocking list whose index is current times out with the same index.
    let r = call(
        s2,
        "GET",
        &format!(
            "/v1/event/list?name=deploy&index={}&wait=1s",
            uuid_index(&id)
        ),
        b"",
    );
    assert_eq!(r.index(), uuid_index(&id));

    // Coordinates: every node's, after a few probes.
    let nodes = wait_for("3 coordinates", Duration::from_secs(20), || {
        let r = call(s0, "GET", "/v1/coordinate/nodes", b"");
        let list = r.json().as_array().cloned().unwrap_or_default();
        (list.len() == 3).then_some(list)
    });
    for entry in &nodes {
        assert_eq!(entry["Coord"]["Vec"].as_array().unwrap().len(), 8);
        assert!(entry["Coord"]["Error"].as_f64().unwrap() > 0.0);
        assert!(entry["Coord"]["Height"].as_f64().unwrap() > 0.0);
    }
    let r = call(s0, "GET", &format!("/v1/coordinate/node/{s2_name}"), b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()[0]["Node"], s2_name.as_str());
    assert_eq!(
        call(s0, "GET", "/v1/coordinate/node/nobody", b"").status,
        404
    );
    let r = call(s0, "GET", "/v1/coordinate/datacenters", b"");
    let dcs = r.json();
    assert_eq!(dcs[0]["Datacenter"], "dc1");
    assert!(!dcs[0]["Coordinates"].as_array().unwrap().is_empty());
    let (code, out, err) = cli(&["rtt", "-http-addr", &s0.http_addr(), &s2_name], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("Estimated {s2_name} <-> {}", name_of(s0)))
            && out.contains("ms (using LAN coordinates)"),
        "{out}"
    );
    let (code, _, err) = cli(&["rtt", "-http-addr", &s0.http_addr(), "nobody"], None);
    assert_eq!(code, 1);
    assert!(err.contains("nobody"), "{err}");

    // `?near=` on the catalog and health service endpoints: every instance answered, and a
    // node without a coordinate leaves the catalog's order alone.
    for server in [s0, s1, s2] {
        let name = name_of(server);
        let body = format!(
            r#"{{"Node":"{name}","Address":"{}","Service":{{"Service":"nearsvc","Port":80}}}}"#,
            server.ip
        );
        assert_eq!(
            call(s0, "PUT", "/v1/catalog/register", body.as_bytes()).status,
            200
        );
    }
    let nodes_of = |path: &str| -> Vec<String> {
        let r = call(s0, "GET", path, b"");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        r.json()
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                e["Node"]
                    .as_str()
                    .or_else(|| e["Node"]["Node"].as_str())
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let plain = nodes_of("/v1/catalog/service/nearsvc");
    assert_eq!(plain.len(), 3);
    assert_eq!(nodes_of("/v1/catalog/service/nearsvc?near=nobody"), plain);
    for near in ["_agent".to_string(), s2_name.clone()] {
        let mut sorted = nodes_of(&format!("/v1/catalog/service/nearsvc?near={near}"));
        sorted.sort();
        let mut expected = plain.clone();
        expected.sort();
        assert_eq!(sorted, expected, "near={near}");
        assert_eq!(
            nodes_of(&format!("/v1/health/service/nearsvc?near={near}")).len(),
            3
        );
    }
}

fn lan_keyring(agent: &Agent) -> Value {
    let r = call(agent, "GET", "/v1/operator/keyring", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["WAN"] == false)
        .cloned()
        .expect("a LAN entry")
}

#[test]
fn keyring_install_use_remove_across_the_pool() {
    let (code, first, _) = cli(&["keygen"], None);
    assert_eq!(code, 0);
    let first = first.trim().to_string();
    assert_eq!(first.len(), 44, "32 bytes in base64");
    let cluster = Cluster::start(3, &["-encrypt", &first]);
    let [s0, s1, s2] = [
        &cluster.servers[0],
        &cluster.servers[1],
        &cluster.servers[2],
    ];
    wait_alive(s0, 3);
    wait_alive(s2, 3);

    // Key operations reach the pools as they are; wait until the servers have flooded
    // each other into the WAN pool so that every pool has all three.
    for server in [s0, s1, s2] {
        wait_for("3 alive WAN members", Duration::from_secs(20), || {
            let alive = members(server, "?wan=1")
                .iter()
                .filter(|m| m["Status"] == 1)
                .count();
            (alive == 3).then_some(())
        });
    }
    let lan = lan_keyring(s0);
    assert_eq!(lan["Datacenter"], "dc1");
    assert_eq!(lan["NumNodes"], 3);
    assert_eq!(lan["Keys"][&first], 3);
    assert_eq!(lan["PrimaryKeys"][&first], 3);

    let (_, second, _) = cli(&["keygen"], None);
    let second = second.trim().to_string();
    assert_ne!(first, second);
    let body = format!("{{\"Key\":\"{second}\"}}");
    let r = call(s1, "POST", "/v1/operator/keyring", body.as_bytes());
    assert_eq!(r.status, 200, "install: {}", r.text());
    let lan = lan_keyring(s2);
    assert_eq!(lan["Keys"][&first], 3);
    assert_eq!(lan["Keys"][&second], 3);

    let (code, out, err) = cli(
        &["keyring", "-use", &second, "-http-addr", &s2.http_addr()],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Changing primary gossip encryption key"),
        "{out}"
    );
    let (code, out, _) = cli(
        &["keyring", "-list-primary", "-http-addr", &s0.http_addr()],
        None,
    );
    assert_eq!(code, 0);
    assert!(out.contains(&format!("  {second} [3/3]")), "{out}");
    assert!(out.contains("dc1 (LAN):"), "{out}");

    // The primary key cannot be removed; the old one can.
    let r = call(s0, "DELETE", "/v1/operator/keyring", body.as_bytes());
    assert_eq!(r.status, 500);
    assert!(
        r.text().contains("3/3 nodes reported failure"),
        "{}",
        r.text()
    );
    let (code, _, err) = cli(
        &["keyring", "-remove", &first, "-http-addr", &s0.http_addr()],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let lan = lan_keyring(s1);
    assert_eq!(lan["Keys"].as_object().unwrap().len(), 1, "{lan}");
    assert_eq!(lan["Keys"][&second], 3);
    let (code, out, _) = cli(&["keyring", "-list", "-http-addr", &s1.http_addr()], None);
    assert_eq!(code, 0);
    assert!(!out.contains(&first), "{out}");

    // The pool still works on the new key: an event fired now reaches every node.
    let r = call(s2, "PUT", "/v1/event/fire/rotated", b"");
    assert_eq!(r.status, 200);
    wait_for(
        "the event under the new key",
        Duration::from_secs(10),
        || {
            let (events, _) = event_list(s0, "?name=rotated");
            (events.len() == 1).then_some(())
        },
    );
    assert_eq!(
        call(s0, "POST", "/v1/operator/keyring", b"{\"Key\":\"short\"}").status,
        400
    );
    let (code, _, err) = cli(&["keyring", "-http-addr", &s0.http_addr()], None);
    assert_eq!(code, 1);
    assert!(err.contains("Exactly one of"), "{err}");
}
