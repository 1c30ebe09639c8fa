//! Three real server processes on loopback: replication, forwarding, failover, pauses,
//! partitions, restarts, operator endpoints and snapshots.

use crate::common;

use common::{try_request_bounded, Cluster};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn put(cluster: &Cluster, server: usize, key: &str, value: &str) -> Option<bool> {
    let r = try_request_bounded(
        cluster.servers[server].addr(),
        "PUT",
        &format!("/v1/kv/{key}"),
        value.as_bytes(),
        &[],
        Duration::from_secs(10),
    )
    .ok()?;
    (r.status == 200).then(|| r.body.starts_with(b"true"))
}

fn get_raw(cluster: &Cluster, server: usize, path: &str) -> Option<(u16, Vec<u8>)> {
    let r = try_request_bounded(
        cluster.servers[server].addr(),
        "GET",
        path,
        b"",
        &[],
        Duration::from_secs(10),
    )
    .ok()?;
    Some((r.status, r.body))
}

/// Retries a PUT of `key` through `agent` every 200 ms until it is acknowledged `true`,
/// failing with `what` (and the agent's log) after `limit_s` seconds.
fn put_through_until_acknowledged(
    agent: &common::Agent,
    key: &str,
    value: &[u8],
    limit_s: u64,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(limit_s);
    loop {
        if let Ok(r) = try_request_bounded(
            agent.addr(),
            "PUT",
            &format!("/v1/kv/{key}"),
            value,
            &[],
            Duration::from_secs(10),
        ) {
            if r.status == 200 && r.body.starts_with(b"true") {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{what}; log:\n{}", agent.log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn other(leader: usize, n: usize) -> usize {
    (leader + 1) % n
}

/// Writers that record every acknowledged key and its value.
struct Writers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    acknowledged: Arc<Mutex<BTreeMap<String, String>>>,
}

impl Writers {
    fn start(cluster: &Cluster, count: usize) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(Mutex::new(BTreeMap::new()));
        let addrs: Vec<_> = cluster.servers.iter().map(|s| s.addr()).collect();
        let threads = (0..count)
            .map(|w| {
                let stop = stop.clone();
                let acknowledged = acknowledged.clone();
                let addrs = addrs.clone();
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        let key = format!("writes/w{w}/{n:06}");
                        let value = format!("v{w}-{n}");
                        let addr = addrs[(n as usize + w) % addrs.len()];
                        if let Ok(r) = try_request_bounded(
                            addr,
                            "PUT",
                            &format!("/v1/kv/{key}"),
                            value.as_bytes(),
                            &[],
                            Duration::from_secs(10),
                        ) {
                            if r.status == 200 && r.body.starts_with(b"true") {
                                acknowledged.lock().unwrap().insert(key, value);
                            }
                        }
                        n += 1;
                    }
                })
            })
            .collect();
        Writers {
            stop,
            threads,
            acknowledged,
        }
    }

    fn stop(self) -> BTreeMap<String, String> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            t.join().unwrap();
        }
        let acknowledged = self.acknowledged.lock().unwrap().clone();
        acknowledged
    }
}

/// Every acknowledged write is readable (default consistency) through `server`.
fn assert_all_present(cluster: &Cluster, server: usize, acknowledged: &BTreeMap<String, String>) {
    let (status, body) =
        get_raw(cluster, server, "/v1/kv/writes/?recurse").expect("read after the faults");
    assert_eq!(status, 200);
    let entries: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
    let present: BTreeMap<String, String> = entries
        .iter()
        .map(|e| {
            use base64::Engine;
            let value = base64::engine::general_purpose::STANDARD
                .decode(e["Value"].as_str().unwrap_or(""))
                .unwrap();
            (
                e["Key"].as_str().unwrap().to_string(),
                String::from_utf8(value).unwrap(),
            )
        })
        .collect();
    for (key, value) in acknowledged {
        assert_eq!(
            present.get(key),
            Some(value),
            "acknowledged write {key} lost or wrong"
        );
    }
}

#[test]
fn writes_through_followers_replicate_everywhere() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    let follower = other(leader, 3);
    assert_eq!(
        put(&cluster, follower, "fwd/a", "1"),
        Some(true),
        "a follower forwards writes"
    );
    // Default reads through any server see it at once (forwarded or leader-served).
    for i in 0..3 {
        assert_eq!(
            get_raw(&cluster, i, "/v1/kv/fwd/a?raw"),
            Some((200, b"1".to_vec())),
            "server {i}"
        );
    }
    // Stale reads are served locally, with the stale headers.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = try_request_bounded(
            cluster.servers[follower].addr(),
            "GET",
            "/v1/kv/fwd/a?stale",
            b"",
            &[],
            Duration::from_secs(5),
        )
        .unwrap();
        if r.status == 200 {
            assert_eq!(r.header("X-Consul-Effective-Consistency"), Some("stale"));
            assert_eq!(r.header("X-Consul-KnownLeader"), Some("true"));
            assert!(
                r.header("X-Consul-LastContact")
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
                    < 5000
            );
            break;
        }
        assert!(Instant::now() < deadline, "stale read never caught up");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Consistent reads through a follower, and CAS through a follower.
    assert_eq!(
        get_raw(&cluster, follower, "/v1/kv/fwd/a?consistent&raw"),
        Some((200, b"1".to_vec()))
    );
    let index = cluster.servers[follower].get("/v1/kv/fwd/a").index();
    assert_eq!(
        put(&cluster, follower, &format!("fwd/a?cas={index}"), "2"),
        Some(true)
    );
    assert_eq!(
        put(&cluster, follower, &format!("fwd/a?cas={index}"), "3"),
        Some(false)
    );
    // Peers and leader agree everywhere.
    let leader_addr = cluster.servers[leader].get("/v1/status/leader").json();
    for i in 0..3 {
        assert_eq!(
            cluster.servers[i].get("/v1/status/leader").json(),
            leader_addr
        );
        assert_eq!(
            cluster.servers[i]
                .get("/v1/status/peers")
                .json()
                .as_array()
                .unwrap()
                .len(),
            3
        );
    }
}

#[test]
fn leader_kill_9_fails_over_within_3s_losing_nothing() {
    let mut cluster = Cluster::start(3, &[]);
    let writers = Writers::start(&cluster, 3);
    std::thread::sleep(Duration::from_millis(800));
    let leader = cluster.wait_for_leader(Duration::from_secs(5));
    cluster.servers[leader].kill9();
    let killed_at = Instant::now();
    let new_leader = cluster.wait_for_leader(Duration::from_secs(10));
    let failover = killed_at.elapsed();
    assert_ne!(new_leader, leader);
    assert!(
        failover < Duration::from_secs(3),
        "new leader after {failover:?}"
    );
    std::thread::sleep(Duration::from_millis(800));
    let acknowledged = writers.stop();
    assert!(
        acknowledged.len() > 50,
        "only {} writes acknowledged",
        acknowledged.len()
    );
    assert_all_present(&cluster, new_leader, &acknowledged);

    // The killed server restarts on its data dir and catches up.
    cluster.servers[leader].restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    let last_key = acknowledged.keys().last().unwrap().clone();
    loop {
        if let Some((200, _)) = get_raw(&cluster, leader, &format!("/v1/kv/{last_key}?stale")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "restarted server did not catch up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn paused_leader_is_replaced_and_rejoins_as_follower() {
    let cluster = Cluster::start(3, &[]);
    let writers = Writers::start(&cluster, 2);
    std::thread::sleep(Duration::from_millis(500));
    let leader = cluster.wait_for_leader(Duration::from_secs(5));
    cluster.signal(leader, libc::SIGSTOP);
    // The others elect a new leader among themselves.
    let deadline = Instant::now() + Duration::from_secs(10);
    let survivor = other(leader, 3);
    loop {
        let r = try_request_bounded(
            cluster.servers[survivor].addr(),
            "GET",
            "/v1/status/leader",
            b"",
            &[],
            Duration::from_secs(2),
        );
        if let Ok(r) = r {
            let text = r.text();
            if text != "\"\"" && !text.contains(&cluster.servers[leader].ip.to_string()) {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no new leader while the old one is paused"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    cluster.signal(leader, libc::SIGCONT);
    let new_leader = cluster.wait_for_leader(Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    let acknowledged = writers.stop();
    assert_all_present(&cluster, new_leader, &acknowledged);
    // The resumed server follows and serves the same data.
    assert_all_present(&cluster, leader, &acknowledged);
}

#[test]
fn partitioned_minority_refuses_while_majority_serves() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    assert_eq!(put(&cluster, leader, "part/before", "1"), Some(true));
    // Cut the leader off: it is now the minority.
    cluster.partition(leader);
    let majority: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    let new_leader = loop {
        let text = try_request_bounded(
            cluster.servers[majority[0]].addr(),
            "GET",
            "/v1/status/leader",
            b"",
            &[],
            Duration::from_secs(2),
        )
        .map(|r| r.text())
        .unwrap_or_default();
        if !text.is_empty()
            && text != "\"\""
            && !text.contains(&cluster.servers[leader].ip.to_string())
        {
            let ip: std::net::IpAddr = text
                .trim_matches('"')
                .rsplit_once(':')
                .unwrap()
                .0
                .parse()
                .unwrap();
            break cluster.servers.iter().position(|s| s.ip == ip).unwrap();
        }
        assert!(Instant::now() < deadline, "majority did not elect a leader");
        std::thread::sleep(Duration::from_millis(50));
    };
    // The majority keeps taking writes and default reads.
    assert_eq!(put(&cluster, majority[0], "part/during", "2"), Some(true));
    assert_eq!(
        get_raw(&cluster, majority[1], "/v1/kv/part/during?raw"),
        Some((200, b"2".to_vec()))
    );
    // The minority refuses writes and default reads (it lost its lease and its quorum).
    let write = try_request_bounded(
        cluster.servers[leader].addr(),
        "PUT",
        "/v1/kv/part/minority",
        b"x",
        &[],
        Duration::from_secs(20),
    )
    .unwrap();
    assert_eq!(
        write.status,
        500,
        "minority write: {} {}",
        write.status,
        write.text()
    );
    let read = try_request_bounded(
        cluster.servers[leader].addr(),
        "GET",
        "/v1/kv/part/before",
        b"",
        &[],
        Duration::from_secs(20),
    )
    .unwrap();
    assert_eq!(
        read.status,
        500,
        "minority default read: {} {}",
        read.status,
        read.text()
    );
    // Stale reads still answer from its local state.
    let stale = try_request_bounded(
        cluster.servers[leader].addr(),
        "GET",
        "/v1/kv/part/before?stale&raw",
        b"",
        &[],
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!((stale.status, stale.body.as_slice()), (200, &b"1"[..]));
    cluster.heal();
    // After healing the old leader catches up and sees the majority's write.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if get_raw(&cluster, leader, "/v1/kv/part/during?stale&raw") == Some((200, b"2".to_vec())) {
            break;
        }
        assert!(Instant::now() < deadline, "healed server did not catch up");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        get_raw(&cluster, new_leader, "/v1/kv/part/minority")
            .unwrap()
            .0
            == 404,
        "the minority's write must not exist"
    );
}

#[test]
fn operator_endpoints_and_cli() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    let follower = other(leader, 3);
    let config = cluster.servers[follower]
        .get("/v1/operator/raft/configuration")
        .json();
    let servers = config["Servers"].as_array().unwrap();
    assert_eq!(servers.len(), 3);
    assert_eq!(servers.iter().filter(|s| s["Leader"] == true).count(), 1);
    assert!(servers
        .iter()
        .all(|s| s["Voter"] == true && s["ID"].as_str().unwrap().len() == 36));
    let health = cluster.servers[follower]
        .get("/v1/operator/autopilot/health")
        .json();
    assert_eq!(health["Servers"].as_array().unwrap().len(), 3);
    let deadline = Instant::now() + Duration::from_secs(10);
    while cluster.servers[leader]
        .get("/v1/operator/autopilot/health")
        .json()["Healthy"]
        != true
    {
        assert!(Instant::now() < deadline, "cluster never reported healthy");
        std::thread::sleep(Duration::from_millis(200));
    }

    // CLI list-peers.
    let (code, out, err) = common::cli(
        &[
            "operator",
            "raft",
            "list-peers",
            "-http-addr",
            &cluster.servers[follower].http_addr(),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 4, "{out}");
    assert!(out.lines().next().unwrap().starts_with("Node"));
    assert_eq!(out.matches("leader").count(), 1);

    // Transfer leadership to a named follower.
    let target_id = servers.iter().find(|s| s["Leader"] == false).unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, out, err) = common::cli(
        &[
            "operator",
            "raft",
            "transfer-leader",
            "-id",
            &target_id,
            "-http-addr",
            &cluster.servers[follower].http_addr(),
        ],
        None,
    );
    assert_eq!((code, out.trim()), (0, "Success"), "{err}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let config = cluster.servers[follower]
            .get("/v1/operator/raft/configuration?stale")
            .json();
        let now_leader = config["Servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["Leader"] == true)
            .map(|s| s["ID"].as_str().unwrap().to_string());
        if now_leader.as_deref() == Some(target_id.as_str()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leadership did not move to {target_id}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Removing an unknown peer is a clear error; removing a real one shrinks the config.
    let r = cluster.servers[follower].delete("/v1/operator/raft/peer?address=10.9.9.9:8300");
    assert_eq!(r.status, 500);
    assert!(r.text().contains("not found"), "{}", r.text());
    assert_eq!(
        cluster.servers[follower]
            .delete("/v1/operator/raft/peer")
            .status,
        400
    );
}

#[test]
fn snapshot_save_restore_inspect() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    let follower = other(leader, 3);
    for i in 0..50 {
        assert_eq!(
            put(
                &cluster,
                follower,
                &format!("snap/k{i:02}"),
                &format!("v{i}")
            ),
            Some(true)
        );
    }
    let dir = common::TempDir::new("snapfile");
    let file = dir.path().join("backup.snap");
    let file = file.to_str().unwrap();
    let addr = cluster.servers[follower].http_addr();
    let (code, out, err) = common::cli(&["snapshot", "save", "-http-addr", &addr, file], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("Saved and verified snapshot to index "),
        "{out}"
    );
    let (code, out, _) = common::cli(&["snapshot", "inspect", file], None);
    assert_eq!(code, 0);
    assert!(out.contains("KVS") && out.contains("50"), "{out}");

    // Change the state, then restore: every server goes back to the saved state.
    cluster.servers[follower].delete("/v1/kv/snap/?recurse");
    assert_eq!(put(&cluster, leader, "snap/extra", "x"), Some(true));
    let (code, out, err) = common::cli(&["snapshot", "restore", "-http-addr", &addr, file], None);
    assert_eq!((code, out.trim()), (0, "Restored snapshot"), "{err}");
    for i in 0..3 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let keys = get_raw(&cluster, i, "/v1/kv/snap/?keys&stale");
            if let Some((200, body)) = keys {
                let keys: Vec<String> = serde_json::from_slice(&body).unwrap();
                if keys.len() == 50 && !keys.contains(&"snap/extra".to_string()) {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "server {i} did not converge on the restored state"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // A tampered archive is refused before anything changes.
    let mut bytes = std::fs::read(file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    let r = try_request_bounded(
        cluster.servers[follower].addr(),
        "PUT",
        "/v1/snapshot",
        &bytes,
        &[],
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        get_raw(&cluster, leader, "/v1/kv/snap/k07?raw"),
        Some((200, b"v7".to_vec()))
    );
}

#[test]
fn client_agent_forwards_and_survives_a_server_kill() {
    let mut cluster = Cluster::start(3, &[]);
    let data = common::TempDir::new("client");
    let client = cluster.start_client(&data, &[]);
    let ip = client.ip;
    // The client knows a server once gossip tells it about one.
    put_through_until_acknowledged(
        &client,
        "client/a",
        b"1",
        20,
        "client never reached a server",
    );
    assert_eq!(client.get("/v1/kv/client/a?raw").body, b"1");
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    let leader_addr = cluster.servers[leader].get("/v1/status/leader").json();
    assert_eq!(
        client.get("/v1/status/leader").json(),
        leader_addr,
        "a client reports the servers' leader"
    );
    assert_eq!(
        client
            .get("/v1/status/peers")
            .json()
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // The client's node reaches the servers' catalog through its anti-entropy.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let nodes = cluster.servers[leader].get("/v1/catalog/nodes").json();
        if nodes
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["Node"] == format!("client-{ip}"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "client node never registered: {nodes}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Kill the leader: the client keeps working once the cluster has a new leader (and once
    // gossip has told it if its own server was the one that died).
    cluster.servers[leader].kill9();
    cluster.wait_for_leader(Duration::from_secs(10));
    put_through_until_acknowledged(
        &client,
        "client/b",
        b"2",
        30,
        "client did not recover after the leader died",
    );
    assert_eq!(client.get("/v1/kv/client/b?raw").body, b"2");
}

/// Autopilot's dead-server cleanup with a fresh replacement: a follower is killed for good,
/// an empty server joins, the leader swaps the dead voter for the new one, and the newcomer
/// receives the whole state by InstallSnapshot because the log was compacted past it.
#[test]
fn dead_server_is_replaced_by_an_empty_server_that_receives_a_snapshot() {
    // Tiny snapshot settings so that a few hundred writes compact the log.
    let raft_settings = "raft_snapshot_threshold = 64\nraft_trailing_logs = 8";
    let mut cluster = Cluster::start(3, &["-hcl", raft_settings]);
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    let key_count = 300;
    for i in 0..key_count {
        assert_eq!(
            put(&cluster, leader, &format!("dead/{i:04}"), &i.to_string()),
            Some(true),
            "write {i} through the leader"
        );
    }
    let victim = other(leader, 3);
    let victim_name = format!("s{victim}-{}", cluster.servers[victim].ip);
    cluster.servers[victim].kill9();

    let ip = common::fresh_loopback();
    let data = common::TempDir::new("replacement");
    let replacement_name = format!("replacement-{ip}");
    let args: Vec<String> = [
        "agent",
        "-server",
        "-node",
        &replacement_name,
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
        raft_settings,
        "-log-level",
        "debug",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let replacement = common::Agent::spawn(ip, 8500, args);

    // The configuration ends with the two survivors and the newcomer, the dead one gone.
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut last_seen = serde_json::Value::Null;
    loop {
        if let Ok(r) = try_request_bounded(
            cluster.servers[leader].addr(),
            "GET",
            "/v1/operator/raft/configuration?stale",
            b"",
            &[],
            Duration::from_secs(5),
        ) {
            if r.status == 200 {
                last_seen = r.json();
                let names: Vec<&str> = last_seen["Servers"]
                    .as_array()
                    .map(|servers| servers.iter().filter_map(|s| s["Node"].as_str()).collect())
                    .unwrap_or_default();
                if names.len() == 3
                    && names.contains(&replacement_name.as_str())
                    && !names.contains(&victim_name.as_str())
                {
                    break;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "dead server never replaced; last configuration {last_seen}\nleader log:\n{}",
            cluster.servers[leader].log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The newcomer serves every key from its own copy, which it got as a snapshot.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let keys = try_request_bounded(
            replacement.addr(),
            "GET",
            "/v1/kv/dead/?keys&stale",
            b"",
            &[],
            Duration::from_secs(5),
        );
        if let Ok(r) = keys {
            if r.status == 200 && r.json().as_array().map(Vec::len) == Some(key_count) {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "replacement never caught up; log:\n{}",
            replacement.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let last = replacement.get(&format!("/v1/kv/dead/{:04}?stale&raw", key_count - 1));
    assert_eq!(last.text(), (key_count - 1).to_string());
    assert!(
        replacement.log().contains("installed snapshot at index"),
        "the replacement caught up without a snapshot; log:\n{}",
        replacement.log()
    );
}
