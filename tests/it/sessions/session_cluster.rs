//! Sessions on a real 3-server cluster through failures: a lock whose holder renews at TTL/2
//! survives leader failovers (consul#912), and real py-consul processes contending for one
//! lock while servers are killed and restarted never hold it at the same time and always
//! wait out the lock-delay after an invalidation.
//!
//! A client agent forwards session requests and puts its sessions on its own node.
//!
//! Every wait is bounded; the mutual-exclusion run lasts `SESSION_MUTEX_SECONDS` (default
//! 20 s so the suite stays quick; the issue's figure is 60 s).

use crate::common;

use common::{try_request_bounded, Cluster, HttpResponse};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Timeout of one probe request; a killed server refuses at once, a leaderless one answers
/// within the server's hold time.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The session TTL the failover holder uses: Consul's minimum, so 2 × TTL fits the test.
const HOLDER_TTL: Duration = Duration::from_secs(10);

/// Sends one request to the first server in `servers` (starting at `first`) that answers
/// with a status below 500; `None` when none does.
fn first_answer(
    servers: &[SocketAddr],
    first: usize,
    method: &str,
    path: &str,
    body: &[u8],
) -> Option<(usize, HttpResponse)> {
    for step in 0..servers.len() {
        let i = (first + step) % servers.len();
        if let Ok(r) = try_request_bounded(servers[i], method, path, body, &[], PROBE_TIMEOUT) {
            if r.status < 500 {
                return Some((i, r));
            }
        }
    }
    None
}

/// Retries [`first_answer`] until one server answers or `limit` passes.
fn answer_within(
    servers: &[SocketAddr],
    method: &str,
    path: &str,
    body: &[u8],
    limit: Duration,
) -> HttpResponse {
    let deadline = Instant::now() + limit;
    loop {
        if let Some((_, r)) = first_answer(servers, 0, method, path, body) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "{method} {path}: no server answered within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn addresses(cluster: &Cluster) -> Vec<SocketAddr> {
    cluster.servers.iter().map(|s| s.addr()).collect()
}

/// Waits until every server's node is in the catalog, so a session may name any of them.
fn wait_for_server_nodes(cluster: &Cluster) {
    let servers = addresses(cluster);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let nodes = answer_within(
            &servers,
            "GET",
            "/v1/catalog/nodes",
            b"",
            Duration::from_secs(10),
        );
        if nodes.status == 200 && nodes.json().as_array().map_or(0, |n| n.len()) >= 3 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "servers never all registered: {}",
            nodes.text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The key as a consistent read on whichever server answers.
fn key_entry(servers: &[SocketAddr], key: &str) -> Option<Value> {
    let r = answer_within(
        servers,
        "GET",
        &format!("/v1/kv/{key}?consistent"),
        b"",
        Duration::from_secs(20),
    );
    match r.status {
        404 => None,
        200 => Some(r.json()[0].clone()),
        other => panic!("GET {key}: {other} {}", r.text()),
    }
}

/// Renews `session` every TTL/2 against whichever server answers, as a careful lock holder
/// does, until `stop`. Returns why it stopped early if the session was lost.
fn renew_at_half_ttl(
    servers: Vec<SocketAddr>,
    session: String,
    stop: Arc<AtomicBool>,
) -> Result<u32, String> {
    let mut renewals = 0;
    let mut last_renewal = Instant::now();
    let mut preferred = 0;
    while !stop.load(Ordering::Relaxed) {
        if last_renewal.elapsed() < HOLDER_TTL / 2 {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        match first_answer(
            &servers,
            preferred,
            "PUT",
            &format!("/v1/session/renew/{session}"),
            b"",
        ) {
            Some((i, r)) if r.status == 200 => {
                preferred = i;
                renewals += 1;
                last_renewal = Instant::now();
            }
            Some((_, r)) => {
                return Err(format!(
                    "renewal {} refused after {:?}: {} {}",
                    renewals + 1,
                    last_renewal.elapsed(),
                    r.status,
                    r.text()
                ))
            }
            // No server answers right now (an election): retry shortly.
            None => std::thread::sleep(Duration::from_millis(200)),
        }
    }
    Ok(renewals)
}

/// Watches the lock for `span`, asserting it stays with `session` at `lock_index`.
fn assert_held_for(
    servers: &[SocketAddr],
    key: &str,
    session: &str,
    lock_index: u64,
    span: Duration,
) {
    let until = Instant::now() + span;
    while Instant::now() < until {
        let e = key_entry(servers, key).expect("the locked key exists");
        assert_eq!(e["Session"], json!(session), "lock lost: {e}");
        assert_eq!(e["LockIndex"], json!(lock_index), "lock re-acquired: {e}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_lock_renewed_at_half_ttl_survives_leader_failovers() {
    let mut cluster = Cluster::start(3, &[]);
    wait_for_server_nodes(&cluster);
    let servers = addresses(&cluster);
    let leader = cluster.wait_for_leader(Duration::from_secs(20));

    // A TTL-only session (no serfHealth binding), so that killing the node it was created
    // on does not invalidate it; only missed renewals could.
    let created = answer_within(
        &servers,
        "PUT",
        "/v1/session/create",
        json!({"Name": "failover", "TTL": "10s", "Checks": [], "LockDelay": "15s"})
            .to_string()
            .as_bytes(),
        Duration::from_secs(10),
    );
    assert_eq!(created.status, 200, "create: {}", created.text());
    let session = created.json()["ID"].as_str().unwrap().to_string();
    let acquired = answer_within(
        &servers,
        "PUT",
        &format!("/v1/kv/failover/lock?acquire={session}"),
        b"holder",
        Duration::from_secs(10),
    );
    assert_eq!(acquired.text().trim(), "true");
    let lock_index = key_entry(&servers, "failover/lock").unwrap()["LockIndex"]
        .as_u64()
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let holder = {
        let (servers, session, stop) = (servers.clone(), session.clone(), stop.clone());
        std::thread::spawn(move || renew_at_half_ttl(servers, session, stop))
    };

    // First failover: kill the leader. The new leader restarts the TTL timers; for more
    // than 2 × TTL after the kill the lock must stay where it is.
    std::thread::sleep(Duration::from_secs(3));
    cluster.servers[leader].kill9();
    let second = cluster.wait_for_leader(Duration::from_secs(30));
    assert_ne!(second, leader);
    assert_held_for(
        &servers,
        "failover/lock",
        &session,
        lock_index,
        HOLDER_TTL * 2 + Duration::from_secs(2),
    );

    // Bring the old leader back and kill the second one: two failovers in a row. Autopilot
    // removed the killed leader once gossip declared it failed; back, it votes again only
    // after the stabilization time, and the second kill must wait for that (as with Consul).
    cluster.servers[leader].restart();
    cluster.servers[leader].wait_ready();
    cluster.wait_for_voters(3, Duration::from_secs(60));
    cluster.servers[second].kill9();
    let third = cluster.wait_for_leader(Duration::from_secs(30));
    assert_ne!(third, second);
    assert_held_for(
        &servers,
        "failover/lock",
        &session,
        lock_index,
        HOLDER_TTL * 2 + Duration::from_secs(2),
    );

    stop.store(true, Ordering::Relaxed);
    let renewals = holder.join().unwrap().unwrap_or_else(|why| {
        let logs: Vec<String> = cluster.servers.iter().map(|s| s.log()).collect();
        panic!(
            "the holder lost its session: {why}\n{}",
            logs.join("\n---\n")
        )
    });
    assert!(
        renewals >= 6,
        "the holder renewed at TTL/2 throughout: {renewals}"
    );

    // The restarted server agrees once it has caught up, and the holder still owns the lock.
    cluster.servers[second].restart();
    cluster.servers[second].wait_ready();
    let revived = cluster.servers[leader].addr();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = try_request_bounded(
            revived,
            "GET",
            &format!("/v1/session/info/{session}?stale"),
            b"",
            &[],
            PROBE_TIMEOUT,
        );
        if r.as_ref()
            .is_ok_and(|r| r.status == 200 && r.json()[0]["ID"] == json!(session))
        {
            break;
        }
        assert!(Instant::now() < deadline, "the revived server: {r:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let destroyed = answer_within(
        &servers,
        "PUT",
        &format!("/v1/session/destroy/{session}"),
        b"",
        Duration::from_secs(10),
    );
    assert_eq!(destroyed.status, 200);
    let released = key_entry(&servers, "failover/lock").unwrap();
    assert!(released.get("Session").is_none(), "{released}");
}

/// One event a python contender reported (see tests/python/session_mutex.py).
#[derive(Debug, Clone)]
struct Event {
    worker: u64,
    kind: String,
    /// Seconds on the machine's monotonic clock, shared by all processes.
    at: f64,
    session: String,
    /// For `acquired`: when the request that got `true` was sent.
    sent: f64,
}

/// One holding of the lock: from the acquire's `true` to the moment the holder started to
/// give it up, and how it gave it up.
#[derive(Debug)]
struct Holding {
    worker: u64,
    acquired_at: f64,
    acquire_sent_at: f64,
    ended_at: f64,
    ended_by: String,
}

fn parse_events(worker: u64, stdout: &str) -> Vec<Event> {
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|line| {
            let v: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("bad event {line:?}: {e}"));
            Event {
                worker,
                kind: v["event"].as_str().unwrap().to_string(),
                at: v["t"].as_f64().unwrap(),
                session: v["session"].as_str().unwrap_or_default().to_string(),
                sent: v["sent"].as_f64().unwrap_or_default(),
            }
        })
        .collect()
}

fn holdings(events: &[Event]) -> Vec<Holding> {
    let mut out = Vec::new();
    let mut open: Option<(f64, f64)> = None;
    for e in events {
        match e.kind.as_str() {
            "acquired" => {
                assert!(open.is_none(), "worker {} acquired twice", e.worker);
                open = Some((e.sent, e.at));
            }
            "release_begin" | "destroy_begin" => {
                let (acquire_sent_at, acquired_at) =
                    open.take().expect("an end follows an acquisition");
                out.push(Holding {
                    worker: e.worker,
                    acquired_at,
                    acquire_sent_at,
                    ended_at: e.at,
                    ended_by: e.kind.clone(),
                });
            }
            _ => {}
        }
    }
    assert!(open.is_none(), "a worker exited holding the lock");
    out
}

#[test]
fn python_contenders_exclude_each_other_while_servers_die() {
    let seconds: u64 = std::env::var("SESSION_MUTEX_SECONDS")
        .ok()
        .map(|s| s.parse().expect("SESSION_MUTEX_SECONDS is a whole number"))
        .unwrap_or(20);
    let workers = 3u64;
    let lock_delay_seconds = 2.0;
    // Lock-delays run on the leader's wall clock, holders measure on the monotonic one;
    // this bounds how far the two may drift apart over one delay.
    let clock_slack = 0.05;

    let mut cluster = Cluster::start(3, &[]);
    wait_for_server_nodes(&cluster);
    let servers: Vec<String> = addresses(&cluster).iter().map(|a| a.to_string()).collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/session_mutex.py");
    let mut children: Vec<_> = (0..workers)
        .map(|w| {
            Command::new("python3")
                .arg(script)
                .arg(w.to_string())
                .arg(seconds.to_string())
                .arg(lock_delay_seconds.to_string())
                .arg(servers.join(","))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("python3 must be installed (tests/run.sh installs it)")
        })
        .collect();
    // Drain the pipes while the run goes on so a chatty worker never blocks.
    let outputs: Vec<_> = children
        .iter_mut()
        .map(|child| {
            let mut stdout = child.stdout.take().unwrap();
            let mut stderr = child.stderr.take().unwrap();
            let collected = Arc::new(Mutex::new((String::new(), String::new())));
            let sink = collected.clone();
            let reader = std::thread::spawn(move || {
                use std::io::Read;
                let mut out = String::new();
                let mut err = String::new();
                let _ = stdout.read_to_string(&mut out);
                let _ = stderr.read_to_string(&mut err);
                *sink.lock().unwrap() = (out, err);
            });
            (reader, collected)
        })
        .collect();

    // Kill a server (the leader every other time), keep it down a moment, restart it, and
    // wait for a serving leader before the next round: one server down at a time.
    let started = Instant::now();
    let run = Duration::from_secs(seconds);
    let mut kills = 0;
    let mut seed = std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    let mut next_random = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    std::thread::sleep(Duration::from_secs(2));
    while started.elapsed() + Duration::from_secs(4) < run {
        let victim = if kills % 2 == 0 {
            cluster.wait_for_leader(Duration::from_secs(30))
        } else {
            next_random(3) as usize
        };
        cluster.servers[victim].kill9();
        kills += 1;
        std::thread::sleep(Duration::from_millis(1000 + 200 * next_random(8)));
        cluster.servers[victim].restart();
        cluster.servers[victim].wait_ready();
        cluster.wait_for_leader(Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(1000 + 200 * next_random(8)));
    }

    // Workers stop contending at the end of the run and give the lock back; bound the wait.
    let deadline = Instant::now() + Duration::from_secs(60);
    for child in &mut children {
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let mut events = Vec::new();
    let mut report = String::new();
    for (w, ((reader, collected), child)) in outputs.into_iter().zip(&mut children).enumerate() {
        reader.join().unwrap();
        let (out, err) = collected.lock().unwrap().clone();
        let status = child.wait().unwrap();
        report.push_str(&format!("--- worker {w} ({status})\n{out}{err}\n"));
        assert!(status.success(), "worker {w} failed:\n{report}");
        events.push(parse_events(w as u64, &out));
    }

    let mut all: Vec<Holding> = events.iter().flat_map(|e| holdings(e)).collect();
    all.sort_by(|a, b| a.acquired_at.total_cmp(&b.acquired_at));
    let lost: Vec<&Event> = events
        .iter()
        .flatten()
        .filter(|e| e.kind == "release_refused")
        .collect();
    assert!(
        lost.is_empty(),
        "a holder lost the lock: {lost:?}\n{report}"
    );

    // Mutual exclusion: a holding starts (its acquire answered `true`) only after every
    // earlier holder began to give the lock up. Anything else means two processes held it.
    // Lock-delay: after a holder destroyed its session, the next acquisition was answered
    // no sooner than one lock-delay after the destroy was sent.
    let mut after_destroy = 0;
    for pair in all.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        assert!(
            after.acquired_at > before.ended_at,
            "worker {} acquired at {:.3} while worker {} held the lock until {:.3}\n{report}",
            after.worker,
            after.acquired_at,
            before.worker,
            before.ended_at
        );
        if before.ended_by == "destroy_begin" {
            after_destroy += 1;
            let waited = after.acquired_at - before.ended_at;
            assert!(
                waited >= lock_delay_seconds - clock_slack,
                "worker {} acquired {waited:.3} s after worker {} destroyed its session, \
                 inside the {lock_delay_seconds} s lock-delay\n{report}",
                after.worker,
                before.worker
            );
        }
    }
    let holders: std::collections::BTreeSet<u64> = all.iter().map(|h| h.worker).collect();
    let renewals = events
        .iter()
        .flatten()
        .filter(|e| e.kind == "renewed")
        .count();
    let sessions: std::collections::BTreeSet<&str> = events
        .iter()
        .flatten()
        .map(|e| e.session.as_str())
        .filter(|s| !s.is_empty())
        .collect();
    eprintln!(
        "mutex run: {seconds} s, {kills} server kills, {} holdings by {} workers, \
         {after_destroy} after a destroy, {renewals} renewals, {} sessions, \
         longest acquire request {:.3} s",
        all.len(),
        holders.len(),
        sessions.len(),
        all.iter()
            .map(|h| h.acquired_at - h.acquire_sent_at)
            .fold(0.0, f64::max)
    );
    // The run must have exercised what it claims to check.
    assert!(kills >= 2, "only {kills} server kills");
    assert!(all.len() >= 4, "only {} holdings\n{report}", all.len());
    assert!(
        holders.len() >= 2,
        "only workers {holders:?} ever held the lock"
    );
    assert!(
        after_destroy >= 1,
        "no acquisition followed a destroy\n{report}"
    );
}

#[test]
fn a_client_agent_forwards_sessions_and_puts_them_on_its_own_node() {
    let cluster = Cluster::start(3, &[]);
    let data = common::TempDir::new("session-client");
    let client = cluster.start_client(&data, &[]);
    let node = format!("client-{}", client.ip);
    // The client's own anti-entropy puts its node in the catalog. (Its serfHealth check
    // arrives once the leader reconciles every gossip member, which main does not do yet,
    // so this session binds no check.)
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = try_request_bounded(
            client.addr(),
            "GET",
            &format!("/v1/catalog/node/{node}"),
            b"",
            &[],
            PROBE_TIMEOUT,
        );
        if r.as_ref()
            .is_ok_and(|r| r.status == 200 && r.json()["Node"]["Node"] == json!(node))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the client's node never reached the catalog: {r:?}\n{}",
            client.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let created = client.put(
        "/v1/session/create",
        br#"{"Name":"via-client","Checks":[],"TTL":"10s"}"#,
    );
    assert_eq!(created.status, 200, "{}", created.text());
    let session = created.json()["ID"].as_str().unwrap().to_string();
    let info = client.get(&format!("/v1/session/info/{session}")).json();
    assert_eq!(info[0]["Node"], json!(node), "{info}");
    let acquired = client.put(&format!("/v1/kv/client/lock?acquire={session}"), b"x");
    assert_eq!(acquired.text().trim(), "true");
    let txn = client.put(
        "/v1/txn",
        json!([{"KV": {"Verb": "check-session", "Key": "client/lock", "Session": session}}])
            .to_string()
            .as_bytes(),
    );
    assert_eq!(txn.status, 200, "{}", txn.text());
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    let on_leader = cluster.servers[leader]
        .get(&format!("/v1/session/node/{node}"))
        .json();
    assert_eq!(on_leader[0]["ID"], json!(session), "{on_leader}");
    assert_eq!(
        client
            .put(&format!("/v1/session/renew/{session}"), b"")
            .status,
        200
    );
    assert_eq!(
        client
            .put(&format!("/v1/session/destroy/{session}"), b"")
            .status,
        200
    );
    let entry = client.get("/v1/kv/client/lock").json();
    assert!(entry[0].get("Session").is_none(), "{entry}");
}
