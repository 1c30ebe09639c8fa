//! Restarts, with real processes: a server or client agent restarted on its data directory
//! under a new node name (same node ID) works as in Consul — the catalog entry is renamed,
//! a renamed leader reports itself — ; a port another process holds, gossip's included,
//! stops the agent with one line naming the holder; and after `kill -9`, an agent
//! restarted at once on the same ports answers within a second, every request after that
//! too (the killed process's sockets neither block the bind nor take connections).

use crate::common;

use common::{fresh_loopback, try_request_bounded, Agent, Cluster, HttpResponse, TempDir};
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a restarted agent may take to answer its first request.
const FIRST_ANSWER_MAX: Duration = Duration::from_secs(1);

fn get(addr: SocketAddr, path: &str) -> Option<HttpResponse> {
    try_request_bounded(addr, "GET", path, b"", &[], Duration::from_secs(2)).ok()
}

/// A server that bootstraps alone, named `name`, on `ip` with its data in `data`.
fn single_server(ip: IpAddr, name: &str, data: &TempDir) -> Vec<String> {
    [
        "agent",
        "-server",
        "-bootstrap",
        "-node",
        name,
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
    .collect()
}

/// Replaces the value of `-node` in an agent's command line.
fn rename(agent: &mut Agent, name: &str) {
    let at = agent.args.iter().position(|a| a == "-node").unwrap() + 1;
    agent.args[at] = name.to_string();
}

/// The catalog's node names and IDs, read from `addr` (any server: a stale read).
fn catalog_nodes(addr: SocketAddr) -> Vec<(String, String)> {
    let Some(r) = get(addr, "/v1/catalog/nodes?stale").filter(|r| r.status == 200) else {
        return Vec::new();
    };
    r.json()
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["Node"].as_str().unwrap().to_string(),
                n["ID"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `/v1/status/leader` names a leader on `addr`.
fn leader_known(addr: SocketAddr) -> bool {
    get(addr, "/v1/status/leader")
        .is_some_and(|r| r.status == 200 && !r.text().trim().trim_matches('"').is_empty())
}

#[test]
fn a_server_renamed_on_its_data_dir_leads_and_its_catalog_entry_follows() {
    let ip = fresh_loopback();
    let data = TempDir::new("rename-single");
    let mut agent = Agent::spawn(ip, 8500, single_server(ip, "before", &data));
    agent.wait_ready();
    let node_id = std::fs::read_to_string(data.path().join("node-id")).unwrap();
    let service = br#"{"Name": "web", "Port": 80}"#;
    assert_eq!(agent.put("/v1/agent/service/register", service).status, 200);
    wait_until("the node registered", Duration::from_secs(10), || {
        catalog_nodes(agent.addr()) == vec![("before".to_string(), node_id.clone())]
    });

    agent.terminate();
    rename(&mut agent, "after");
    agent.restart();
    // The leader reports itself (its own registration is under the new name) and serves.
    wait_until("a leader reported", Duration::from_secs(20), || {
        leader_known(agent.addr())
    });
    agent.wait_ready();
    wait_until("the node renamed", Duration::from_secs(10), || {
        catalog_nodes(agent.addr()) == vec![("after".to_string(), node_id.clone())]
    });
    let node = agent.get("/v1/catalog/node/after").json();
    assert!(node["Services"]["web"].is_object(), "{node}");
    assert!(node["Services"]["consul"].is_object(), "{node}");
    let checks = agent.get("/v1/health/node/after").json();
    assert!(
        checks
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["CheckID"] == "serfHealth" && c["Status"] == "passing"),
        "{checks}"
    );
    let peers = agent.get("/v1/operator/raft/configuration").json();
    assert_eq!(peers["Servers"][0]["Node"], "after", "{peers}");
    // And it stays renamed: the old name, failed in gossip, is not registered again.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        catalog_nodes(agent.addr()),
        vec![("after".to_string(), node_id)]
    );
}

#[test]
fn renamed_servers_and_client_agents_keep_their_place_in_a_cluster() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_for_voters(3, Duration::from_secs(30));
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    let follower = (leader + 1) % 3;
    let old_name = format!("s{follower}-{}", cluster.servers[follower].ip);
    let new_name = format!("renamed-{}", cluster.servers[follower].ip);
    let follower_id =
        std::fs::read_to_string(cluster.data[follower].path().join("node-id")).unwrap();

    // A follower comes back under a new name: the catalog and Raft's view follow, it keeps
    // its vote.
    cluster.servers[follower].kill9();
    rename(&mut cluster.servers[follower], &new_name);
    cluster.servers[follower].restart();
    let any = cluster.servers[leader].addr();
    let renamed = || {
        let nodes = catalog_nodes(any);
        let configuration = get(any, "/v1/operator/raft/configuration?stale")
            .map(|r| r.json())
            .unwrap_or_default();
        nodes.contains(&(new_name.clone(), follower_id.clone()))
            && !nodes.iter().any(|(name, _)| *name == old_name)
            && configuration["Servers"].as_array().is_some_and(|servers| {
                servers
                    .iter()
                    .any(|s| s["Node"] == new_name.as_str() && s["Voter"] == true)
            })
    };
    // Until gossip finds the old name failed (its probes reach a node of another name),
    // both names are alive with one node ID, as in Consul; then the new one holds.
    wait_until("the follower renamed", Duration::from_secs(60), renamed);
    cluster.wait_for_voters(3, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(3));
    assert!(renamed(), "the follower's new name did not hold");

    // The renamed server takes the lead: it reports itself, and every server names it.
    let transfer = common::try_request(
        cluster.servers[leader].addr(),
        "POST",
        &format!("/v1/operator/raft/transfer-leader?id={follower_id}"),
        b"",
        &[],
    )
    .unwrap();
    assert_eq!(transfer.status, 200, "{}", transfer.text());
    wait_until("the renamed server leads", Duration::from_secs(20), || {
        cluster.current_leader() == Some(follower)
    });
    for server in &cluster.servers {
        let named = server.get("/v1/status/leader").text();
        assert!(
            named.contains(&cluster.servers[follower].ip.to_string()),
            "{named}"
        );
    }

    // A client agent comes back under a new name: its node is renamed, and stays so.
    let client_data = TempDir::new("rename-client");
    let mut client = cluster.start_client(&client_data, &[]);
    client.wait_ready();
    let client_old = format!("client-{}", client.ip);
    let client_id = std::fs::read_to_string(client_data.path().join("node-id")).unwrap();
    wait_until("the client registered", Duration::from_secs(20), || {
        catalog_nodes(any).contains(&(client_old.clone(), client_id.clone()))
    });
    client.kill9();
    let client_new = format!("renamed-client-{}", client.ip);
    rename(&mut client, &client_new);
    client.restart();
    client.wait_ready();
    wait_until("the client renamed", Duration::from_secs(60), || {
        let nodes = catalog_nodes(any);
        nodes.contains(&(client_new.clone(), client_id.clone()))
            && !nodes.iter().any(|(name, _)| *name == client_old)
    });
    std::thread::sleep(Duration::from_secs(3));
    let nodes = catalog_nodes(any);
    assert!(
        nodes.contains(&(client_new.clone(), client_id)),
        "renamed back? {nodes:?}"
    );
    assert!(
        !nodes.iter().any(|(name, _)| *name == client_old),
        "{nodes:?}"
    );
}

/// Starts `praetor` with `args`, expecting it to stop at once: (exit code, stderr).
fn refused_start(args: &[String]) -> (Option<i32>, String) {
    let child = Command::new(common::praetor_binary())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !waiter.is_finished() {
        if Instant::now() > deadline {
            // SAFETY: killing the child this test started, by its PID.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("the agent did not stop with the port taken");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = waiter.join().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_gossip_or_rpc_port_another_process_holds_stops_the_agent_with_one_line() {
    let me = std::process::id();
    let data = TempDir::new("ports-held");
    // The LAN pool's UDP port, its TCP port, the WAN pool's port, the server RPC port.
    let cases: [(&str, u16, bool); 4] = [
        ("serf LAN", 8301, true),
        ("serf LAN", 8301, false),
        ("serf WAN", 8302, false),
        ("server RPC", 8300, false),
    ];
    for (what, port, udp) in cases {
        let ip = fresh_loopback();
        let addr = SocketAddr::new(ip, port);
        let _holder: Box<dyn std::any::Any> = if udp {
            Box::new(std::net::UdpSocket::bind(addr).unwrap())
        } else {
            Box::new(std::net::TcpListener::bind(addr).unwrap())
        };
        let (code, stderr) = refused_start(&single_server(ip, "held", &data));
        assert_eq!(code, Some(1), "{what}: {stderr}");
        let last = stderr.lines().last().unwrap_or("");
        let expected = format!(
            "cannot listen for {what} on {addr}: Address already in use (os error 98) (process {me}, "
        );
        assert!(
            last.starts_with(&expected) && last.ends_with(", holds it)"),
            "{what} ({}): {stderr}",
            if udp { "UDP" } else { "TCP" }
        );
    }
}

#[test]
fn after_kill_9_an_immediate_restart_answers_within_a_second_and_keeps_answering() {
    const RESTARTS: usize = 5;
    const CONSECUTIVE: usize = 50;
    let ip = fresh_loopback();
    let data = TempDir::new("kill-restart");
    let mut agent = Agent::spawn(ip, 8500, single_server(ip, "phoenix", &data));
    agent.wait_ready();
    let addr = agent.addr();
    for round in 0..RESTARTS {
        // Leave the process busy when it dies: parked blocking queries and connections
        // held open, requests in flight.
        let index = agent.get("/v1/kv/?recurse").index();
        let held: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(move || {
                    let _ = try_request_bounded(
                        addr,
                        "GET",
                        &format!("/v1/kv/parked?index={}&wait=30s", index.max(1) + 1000),
                        b"",
                        &[],
                        Duration::from_secs(5),
                    );
                })
            })
            .collect();
        let busy: Vec<_> = (0..4)
            .map(|i| {
                std::thread::spawn(move || {
                    for n in 0..200 {
                        let path = format!("/v1/kv/busy/{i}/{n}");
                        if try_request_bounded(
                            addr,
                            "PUT",
                            &path,
                            b"x",
                            &[],
                            Duration::from_secs(2),
                        )
                        .is_err()
                        {
                            return;
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        agent.kill9();
        let restarted = Instant::now();
        agent.restart();
        let first = loop {
            let elapsed = restarted.elapsed();
            if let Some(r) = get(addr, "/v1/kv/phoenix") {
                assert!(r.status == 404 || r.status == 200, "{}", r.text());
                break elapsed;
            }
            assert!(
                elapsed < Duration::from_secs(15),
                "round {round}: no answer after the restart; log:\n{}",
                agent.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(
            first <= FIRST_ANSWER_MAX,
            "round {round}: the first answer came {first:?} after the restart; log:\n{}",
            agent.log()
        );
        // Every request is answered: none lands on a socket the killed process left.
        for n in 0..CONSECUTIVE {
            let r = try_request_bounded(
                addr,
                "GET",
                "/v1/kv/phoenix",
                b"",
                &[],
                Duration::from_secs(2),
            );
            assert!(
                r.as_ref().is_ok_and(|r| r.status == 404 || r.status == 200),
                "round {round}, request {n}: {r:?}"
            );
        }
        println!("restarts: round {round}: first answer {first:?} after the restart");
        for thread in held.into_iter().chain(busy) {
            thread.join().unwrap();
        }
    }
}
