//! Snapshots on their own connection (byte 5, `RPCSnapshot`), as Consul streams them: an
//! independent client (`tests/python/snapshot_rpc.py`, the `msgpack` package and the
//! standard library, written from Consul's `SnapshotRPC` and structs) saves and restores
//! on a server, plain and inside TLS with `verify_incoming`, and is refused in Consul's
//! words (a bad token, an unknown `Op`, a stale restore, a truncated archive; garbage closes
//! the connection). A client agent and a follower save and restore archives larger than
//! the 8 MiB a msgpack string carries, through the leader, and the data comes back.

use crate::common;

use common::{wait_for_log, Agent, Cluster, TempDir};
use std::time::{Duration, Instant};

#[test]
fn an_independent_client_saves_and_restores_on_byte_5() {
    let agent = Agent::dev(&["-log-level", "debug"]);
    common::run_python(
        "snapshot_rpc.py",
        &["plain", &agent.ip.to_string()],
        &[&agent],
    );
    wait_for_log(&agent, &["rpc: snapshot Save from"]);
    wait_for_log(&agent, &["rpc: snapshot Restore from"]);
}

#[test]
fn an_independent_client_streams_snapshots_inside_tls_with_verify_incoming() {
    let (_pki, agent, client_args) = super::verify_incoming_dev_agent("");
    let args: Vec<&str> = client_args.iter().map(String::as_str).collect();
    common::run_python("snapshot_rpc.py", &args, &[&agent]);
}

#[test]
fn a_snapshot_stream_is_checked_against_its_token() {
    const MANAGEMENT: &str = "5d0b6b9e-4a1c-4f55-9dd5-17c1a2e9c0b2";
    let acl = format!(
        "acl {{ enabled = true\n default_policy = \"deny\"\n tokens {{ initial_management = \"{MANAGEMENT}\" }} }}"
    );
    let agent = Agent::dev(&["-hcl", &acl]);
    common::run_python(
        "snapshot_rpc.py",
        &["acl", &agent.ip.to_string(), MANAGEMENT],
        &[&agent],
    );
}

/// Bytes gzip cannot shrink (xorshift), so that the archive is as large as the values.
fn incompressible(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// Values this large, this many: 12 MB of state, more than one msgpack string's 8 MiB.
const VALUE_BYTES: usize = 500_000;
const VALUES: usize = 24;
const ONE_STRING_BYTES_MAX: usize = 8 << 20;

/// Waits until `agent` reads every big value back (bounded: 30 s).
fn wait_values_back(agent: &Agent) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for i in 0..VALUES {
        let path = format!("/v1/kv/big/{i}?raw");
        loop {
            let answer = agent.get(&path);
            if answer.status == 200 {
                assert_eq!(answer.body, incompressible(i as u64, VALUE_BYTES), "{path}");
                break;
            }
            assert!(Instant::now() < deadline, "{path}: {}", answer.status);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_client_agent_and_a_follower_stream_archives_larger_than_one_msgpack_string() {
    let cluster = Cluster::start(3, &[]);
    let data = TempDir::new("snapshot-stream-client");
    let client = cluster.start_client(&data, &[]);
    client.wait_ready();
    let leader_index = cluster.wait_for_leader(Duration::from_secs(30));
    let leader = &cluster.servers[leader_index];
    let follower = &cluster.servers[(leader_index + 1) % cluster.servers.len()];
    for i in 0..VALUES {
        let value = incompressible(i as u64, VALUE_BYTES);
        let written = leader.put(&format!("/v1/kv/big/{i}"), &value);
        assert_eq!(written.text(), "true");
    }
    for (name, agent) in [("client agent", &client), ("follower", follower)] {
        let saved = agent.get("/v1/snapshot");
        assert_eq!(saved.status, 200, "{name}: {}", saved.text());
        assert!(
            saved.body.len() > ONE_STRING_BYTES_MAX,
            "{name}: an archive of {} bytes",
            saved.body.len()
        );
        assert_eq!(&saved.body[..2], b"\x1f\x8b", "{name}: not gzip");
        assert!(saved.index() > 0, "{name}");
        assert_eq!(saved.header("X-Consul-KnownLeader"), Some("true"));
        // The data goes; the restore through the agent brings it back everywhere.
        assert_eq!(leader.delete("/v1/kv/big?recurse").text(), "true");
        assert_eq!(leader.get("/v1/kv/big/0").status, 404);
        let restored = agent.put("/v1/snapshot", &saved.body);
        assert_eq!(restored.status, 200, "{name}: {}", restored.text());
        wait_values_back(leader);
        wait_values_back(agent);
    }
    // The leader served both, each on its own connection.
    wait_for_log(leader, &["rpc: snapshot Save from"]);
    wait_for_log(leader, &["rpc: snapshot Restore from"]);
    // A stale save on the follower is its own.
    let stale = follower.get("/v1/snapshot?stale");
    assert_eq!(stale.status, 200);
    assert!(stale.body.len() > ONE_STRING_BYTES_MAX);
    // A damaged archive is refused by the agent, 400, as the server's handler refuses it.
    let saved = client.get("/v1/snapshot").body;
    let damaged = &saved[..saved.len() / 2];
    let (asked, direct) = (
        client.put("/v1/snapshot", damaged),
        leader.put("/v1/snapshot", damaged),
    );
    assert_eq!((asked.status, asked.text()), (direct.status, direct.text()));
    assert_eq!(asked.status, 400);
}
