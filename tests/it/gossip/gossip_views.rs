//! Membership views after graceful leaves and restarts, between real processes: 3 servers
//! and 40 clients (`-shards 1` each) on their own loopback addresses. A client that leaves
//! gracefully must show `left` (3) in every other member's `/v1/agent/members`, never
//! `failed` (4), within `LEFT_BOUND`; started again on its data dir it must show `alive`
//! (1) everywhere within `ALIVE_BOUND`. All 43 views are polled. Clients leave through
//! `PUT /v1/agent/leave` (what `praetor leave` sends), then exit.
//!
//! Twenty leave-and-restart rounds run in waves of `WAVE_CLIENTS` distinct clients at once
//! so the test stays within a few minutes; concurrent leaves and restarts are also the
//! harder case (intents and alive messages race each other in every view). Every wait is
//! bounded and every process is stopped by PID.

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{try_request_timeout, Agent, Cluster, TempDir};
use serde_json::Value;

/// Clients besides the 3 servers.
const CLIENTS: usize = 40;
/// Leave-and-restart rounds in all.
const ROUNDS: usize = 20;
/// Distinct clients that leave and restart at once.
const WAVE_CLIENTS: usize = 4;
/// Every view must show a leaver `left` this long after its leave request.
const LEFT_BOUND: Duration = Duration::from_secs(3);
/// Every view must show a restarted client `alive` this long after the first view did.
const ALIVE_BOUND: Duration = Duration::from_secs(3);
/// How long the pool may take to form, and a restarted client to reach its first view.
const START_LIMIT: Duration = Duration::from_secs(90);
const REJOIN_LIMIT: Duration = Duration::from_secs(20);
/// A leaver must have answered its leave request and exited this long after it (Consul's
/// 3 s leave propagation delay plus the broadcast and shutdown).
const EXIT_LIMIT: Duration = Duration::from_secs(15);
/// Views are polled this often.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// One members request may take this long on a loaded machine.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The whole test must finish within this long.
const TEST_LIMIT: Duration = Duration::from_secs(420);

const STATUS_ALIVE: i64 = 1;
const STATUS_LEFT: i64 = 3;
const STATUS_FAILED: i64 = 4;

/// One agent's view: member name to serf status. `None` when the agent did not answer.
fn view(agent: &Agent) -> Option<HashMap<String, i64>> {
    let r = try_request_timeout(agent.addr(), "GET", "/v1/agent/members", REQUEST_TIMEOUT).ok()?;
    if r.status != 200 {
        return None;
    }
    let list = r.json();
    Some(
        list.as_array()?
            .iter()
            .filter_map(|m: &Value| Some((m["Name"].as_str()?.to_owned(), m["Status"].as_i64()?)))
            .collect(),
    )
}

fn node_name(agent: &Agent) -> String {
    let i = agent
        .args
        .iter()
        .position(|a| a == "-node")
        .expect("harness agents are named");
    agent.args[i + 1].clone()
}

/// Polls the views of `watchers` until `done` holds for every one, checking `never` on
/// every view seen; panics with `what` after `limit`. Returns how long it took.
fn poll_views(
    agents: &[&Agent],
    what: &str,
    limit: Duration,
    done: impl Fn(&HashMap<String, i64>) -> bool,
    never: impl Fn(&str, &HashMap<String, i64>),
) -> Duration {
    let started = Instant::now();
    let mut pending: Vec<usize> = (0..agents.len()).collect();
    loop {
        pending.retain(|&i| match view(agents[i]) {
            Some(v) => {
                never(&node_name(agents[i]), &v);
                !done(&v)
            }
            None => true,
        });
        if pending.is_empty() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{what}: after {:?} these views still disagree: {:?}",
            started.elapsed(),
            pending
                .iter()
                .map(|&i| (node_name(agents[i]), view(agents[i])))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

#[test]
fn leavers_are_left_and_restarted_clients_alive_in_all_43_views() {
    let test_started = Instant::now();
    let cluster = Cluster::start(3, &["-shards", "1"]);
    let data: Vec<TempDir> = (0..CLIENTS)
        .map(|i| TempDir::new(&format!("views-client{i}")))
        .collect();
    let mut clients: Vec<Agent> = data
        .iter()
        .map(|d| cluster.start_client(d, &["-shards", "1"]))
        .collect();
    let names: Vec<String> = cluster
        .servers
        .iter()
        .chain(clients.iter())
        .map(node_name)
        .collect();
    {
        let everyone: Vec<&Agent> = cluster.servers.iter().chain(clients.iter()).collect();
        let formed = poll_views(
            &everyone,
            "the pool forming",
            START_LIMIT,
            |v| names.iter().all(|n| v.get(n) == Some(&STATUS_ALIVE)),
            |_, _| {},
        );
        eprintln!("[views] 43 members alive in all views after {formed:?} more");
    }

    let mut worst_left = Duration::ZERO;
    let mut worst_alive = Duration::ZERO;
    for wave in 0..ROUNDS / WAVE_CLIENTS {
        // Clients wave*4 .. wave*4+4 leave together, then come back together.
        let leavers: Vec<usize> = (wave * WAVE_CLIENTS..(wave + 1) * WAVE_CLIENTS).collect();
        let leaver_names: Vec<String> = leavers.iter().map(|&c| node_name(&clients[c])).collect();
        // `praetor leave`'s request: answered once the graceful leave is done, after which
        // the agent exits. Sent from threads, as it takes the leave propagation delay.
        let requests: Vec<_> = leavers
            .iter()
            .map(|&c| {
                let addr = clients[c].addr();
                std::thread::spawn(move || {
                    try_request_timeout(addr, "PUT", "/v1/agent/leave", EXIT_LIMIT)
                        .map(|r| r.status)
                })
            })
            .collect();
        let no_failed = |who: &str, v: &HashMap<String, i64>| {
            for n in &leaver_names {
                assert_ne!(
                    v.get(n),
                    Some(&STATUS_FAILED),
                    "wave {wave}: {who} shows {n}, which left gracefully, as failed"
                );
            }
        };
        let watchers: Vec<&Agent> = cluster
            .servers
            .iter()
            .chain(
                (0..CLIENTS)
                    .filter(|c| !leavers.contains(c))
                    .map(|c| &clients[c]),
            )
            .collect();
        let took = poll_views(
            &watchers,
            &format!("wave {wave}: leavers {leaver_names:?} left"),
            LEFT_BOUND,
            |v| leaver_names.iter().all(|n| v.get(n) == Some(&STATUS_LEFT)),
            no_failed,
        );
        worst_left = worst_left.max(took);
        for r in requests {
            let status = r.join().expect("leave request thread");
            assert!(
                matches!(status, Ok(200)),
                "wave {wave}: PUT /v1/agent/leave answered {status:?}"
            );
        }
        // The leavers exit by themselves; until then they stay in their `Agent`, whose drop
        // kills them should the test fail first.
        for &c in &leavers {
            let child = clients[c].child.as_mut().expect("client running");
            let deadline = Instant::now() + EXIT_LIMIT;
            let status = loop {
                if let Ok(Some(status)) = child.try_wait() {
                    break status;
                }
                assert!(
                    Instant::now() < deadline,
                    "wave {wave}: a leaver did not exit within {EXIT_LIMIT:?}"
                );
                std::thread::sleep(Duration::from_millis(20));
            };
            assert!(
                status.success(),
                "wave {wave}: a leaver exited with {status}"
            );
            clients[c].child = None;
        }

        // Back on their data dirs, same names and addresses.
        for &c in &leavers {
            clients[c].restart();
        }
        let watchers: Vec<&Agent> = cluster.servers.iter().chain(clients.iter()).collect();
        let first_seen = {
            let started = Instant::now();
            loop {
                let seen = cluster
                    .servers
                    .iter()
                    .filter_map(view)
                    .any(|v| leaver_names.iter().all(|n| v.get(n) == Some(&STATUS_ALIVE)));
                if seen {
                    break Instant::now();
                }
                assert!(
                    started.elapsed() < REJOIN_LIMIT,
                    "wave {wave}: no server saw {leaver_names:?} back within {REJOIN_LIMIT:?}"
                );
                std::thread::sleep(POLL_INTERVAL);
            }
        };
        poll_views(
            &watchers,
            &format!("wave {wave}: restarted {leaver_names:?} alive"),
            ALIVE_BOUND.saturating_sub(first_seen.elapsed()),
            |v| names.iter().all(|n| v.get(n) == Some(&STATUS_ALIVE)),
            no_failed,
        );
        worst_alive = worst_alive.max(first_seen.elapsed());
        assert!(
            test_started.elapsed() < TEST_LIMIT,
            "the test ran past {TEST_LIMIT:?}"
        );
    }
    eprintln!(
        "[views] {ROUNDS} leaves and restarts in waves of {WAVE_CLIENTS}: all views showed \
         leavers left within {worst_left:?} of their leave request and restarted clients alive within \
         {worst_alive:?} of the first server seeing them; test took {:?}",
        test_started.elapsed()
    );
}
