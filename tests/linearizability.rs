//! Linearizability under faults: clients read, write and compare-and-set a few keys on a
//! 3-server cluster while a nemesis kills (-9) and restarts servers, pauses them (SIGSTOP /
//! SIGCONT) and partitions them. Every key's history is then checked with a Wing–Gong
//! checker; any violation fails the test with the operation that cannot be placed.
//!
//! `LINEARIZABILITY_SECONDS` sets the fault phase (default 20 s, the CI run; the full run
//! used for the figures is 60 s or more). `LINEARIZABILITY_SEED` replays a nemesis schedule.

mod common;
#[path = "common/linearizability.rs"]
mod linearizability;

use common::{try_request_bounded, Cluster};
use linearizability::{check, Event, Op, Outcome, Value};
use rand::{RngExt, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEYS: usize = 4;
const CLIENTS: usize = 6;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(4);

fn key_name(key: usize) -> String {
    format!("lin/k{key}")
}

/// Parses a default-consistency GET of one key: `Some(Some(v))`, `Some(None)` for 404,
/// `None` when the outcome is unknown. Also returns the key's ModifyIndex.
fn read(addr: std::net::SocketAddr, key: usize) -> Option<(Option<Value>, u64)> {
    let r = try_request_bounded(
        addr,
        "GET",
        &format!("/v1/kv/{}", key_name(key)),
        b"",
        &[],
        REQUEST_TIMEOUT,
    )
    .ok()?;
    match r.status {
        404 => Some((None, 0)),
        200 => {
            let entries: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
            use base64::Engine;
            let raw = base64::engine::general_purpose::STANDARD
                .decode(entries[0]["Value"].as_str()?)
                .ok()?;
            let value: Value = String::from_utf8(raw).ok()?.parse().ok()?;
            Some((Some(value), entries[0]["ModifyIndex"].as_u64()?))
        }
        _ => None,
    }
}

fn client_loop(
    id: usize,
    cluster_addrs: Vec<std::net::SocketAddr>,
    started: Instant,
    stop: Arc<AtomicBool>,
    histories: Arc<Vec<Mutex<Vec<Event>>>>,
    seed: u64,
) {
    let mut rng =
        rand::rngs::StdRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut sequence: u64 = 0;
    let now = || started.elapsed().as_nanos() as u64;
    while !stop.load(Ordering::SeqCst) {
        let key = rng.random_range(0..KEYS);
        let addr = cluster_addrs[rng.random_range(0..cluster_addrs.len())];
        let roll = rng.random_range(0..100);
        let event = if roll < 45 {
            let invoked = now();
            match read(addr, key) {
                Some((value, _)) => Event {
                    client: id,
                    op: Op::Read,
                    outcome: Outcome::Read(value),
                    invoked,
                    completed: Some(now()),
                },
                None => Event {
                    client: id,
                    op: Op::Read,
                    outcome: Outcome::Unknown,
                    invoked,
                    completed: None,
                },
            }
        } else if roll < 80 {
            sequence += 1;
            let value = ((id as u64) << 40) | sequence;
            let invoked = now();
            let r = try_request_bounded(
                addr,
                "PUT",
                &format!("/v1/kv/{}", key_name(key)),
                value.to_string().as_bytes(),
                &[],
                REQUEST_TIMEOUT,
            );
            if definitely_not_applied(&r) {
                continue;
            }
            match r {
                Ok(r) if r.status == 200 && r.body.starts_with(b"true") => Event {
                    client: id,
                    op: Op::Write(value),
                    outcome: Outcome::Written,
                    invoked,
                    completed: Some(now()),
                },
                _ => Event {
                    client: id,
                    op: Op::Write(value),
                    outcome: Outcome::Unknown,
                    invoked,
                    completed: None,
                },
            }
        } else {
            // Read the current value and index, then CAS on that index. Values are unique,
            // so "index unchanged" is "value unchanged" and the register model applies.
            let invoked = now();
            let Some((expected, index)) = read(addr, key) else {
                histories[key].lock().unwrap().push(Event {
                    client: id,
                    op: Op::Read,
                    outcome: Outcome::Unknown,
                    invoked,
                    completed: None,
                });
                continue;
            };
            histories[key].lock().unwrap().push(Event {
                client: id,
                op: Op::Read,
                outcome: Outcome::Read(expected),
                invoked,
                completed: Some(now()),
            });
            sequence += 1;
            let new = ((id as u64) << 40) | sequence;
            let invoked = now();
            let r = try_request_bounded(
                addr,
                "PUT",
                &format!("/v1/kv/{}?cas={index}", key_name(key)),
                new.to_string().as_bytes(),
                &[],
                REQUEST_TIMEOUT,
            );
            let op = Op::Cas { expected, new };
            if definitely_not_applied(&r) {
                continue;
            }
            match r {
                Ok(r) if r.status == 200 && r.body.starts_with(b"true") => Event {
                    client: id,
                    op,
                    outcome: Outcome::Cas(true),
                    invoked,
                    completed: Some(now()),
                },
                Ok(r) if r.status == 200 && r.body.starts_with(b"false") => Event {
                    client: id,
                    op,
                    outcome: Outcome::Cas(false),
                    invoked,
                    completed: Some(now()),
                },
                _ => Event {
                    client: id,
                    op,
                    outcome: Outcome::Unknown,
                    invoked,
                    completed: None,
                },
            }
        };
        histories[key].lock().unwrap().push(event);
        std::thread::sleep(Duration::from_millis(rng.random_range(5..25)));
    }
}

/// Whether a write certainly did not take effect, so it can be left out of the history
/// instead of adding an unknown outcome: the connection was refused (nothing was sent), or
/// the server answered "No cluster leader" (`ProposalResult::NotLeader`: no leader to
/// forward to, or refused before reaching the log) or 503 (`Overloaded`: refused before
/// reaching the log). "leadership lost while committing log" and RPC errors stay unknown:
/// those writes may still commit.
fn definitely_not_applied(result: &std::io::Result<common::HttpResponse>) -> bool {
    match result {
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionRefused,
        Ok(r) => (r.status == 500 && r.body.starts_with(b"No cluster leader")) || r.status == 503,
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Kill(usize),
    Pause(usize),
    Partition(usize),
}

#[test]
fn kv_is_linearizable_under_kills_pauses_and_partitions() {
    let seconds: u64 = std::env::var("LINEARIZABILITY_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("LINEARIZABILITY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!(
        "linearizability: {seconds} s of faults, seed {seed} (replay: LINEARIZABILITY_SEED={seed})"
    );
    let mut cluster = Cluster::start(3, &[]);
    let addrs: Vec<_> = cluster.servers.iter().map(|s| s.addr()).collect();
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let histories: Arc<Vec<Mutex<Vec<Event>>>> =
        Arc::new((0..KEYS).map(|_| Mutex::new(Vec::new())).collect());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let (addrs, stop, histories) = (addrs.clone(), stop.clone(), histories.clone());
            std::thread::spawn(move || client_loop(id, addrs, started, stop, histories, seed))
        })
        .collect();

    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut faults = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(rng.random_range(1500..3000)));
        let target = rng.random_range(0..3);
        let fault = match rng.random_range(0..3) {
            0 => Fault::Kill(target),
            1 => Fault::Pause(target),
            _ => Fault::Partition(target),
        };
        faults.push(fault);
        match fault {
            Fault::Kill(i) => {
                cluster.servers[i].kill9();
                std::thread::sleep(Duration::from_millis(rng.random_range(1000..3000)));
                cluster.servers[i].restart();
            }
            Fault::Pause(i) => {
                cluster.signal(i, libc::SIGSTOP);
                std::thread::sleep(Duration::from_millis(rng.random_range(1000..3000)));
                cluster.signal(i, libc::SIGCONT);
            }
            Fault::Partition(i) => {
                cluster.partition(i);
                std::thread::sleep(Duration::from_millis(rng.random_range(1000..3000)));
                cluster.heal();
            }
        }
    }
    // Let the cluster settle so the final operations complete, then stop the clients.
    cluster.heal();
    cluster.wait_for_leader(Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.join().unwrap();
    }
    println!("linearizability: faults {faults:?}");

    let mut total = 0;
    let mut unknown = 0;
    let mut acknowledged_writes = 0;
    for (key, history) in histories.iter().enumerate() {
        let history = history.lock().unwrap();
        total += history.len();
        unknown += history
            .iter()
            .filter(|e| e.outcome == Outcome::Unknown)
            .count();
        acknowledged_writes += history
            .iter()
            .filter(|e| matches!(e.outcome, Outcome::Written | Outcome::Cas(true)))
            .count();
        if let Err(violation) = check(&history, None) {
            panic!(
                "key {key}: {violation} (seed {seed}; {} operations on this key)",
                history.len()
            );
        }
    }
    println!("linearizability: {total} operations, {acknowledged_writes} acknowledged writes, {unknown} with unknown outcome: no violation");
    assert!(
        acknowledged_writes > 20,
        "too few acknowledged writes ({acknowledged_writes}) for the check to mean much"
    );
    assert!(faults.len() >= 3, "the nemesis must act several times");
}
