//! `praetor lock` and `praetor watch` as real processes against a real agent: the child runs
//! while the lock is held, a semaphore with `-n 2` admits exactly two holders, the child is
//! killed when the session is invalidated, timeouts and signals release; watches run their
//! handler with the data on stdin at every change.

use crate::common;

use common::{cli, praetor_binary, Agent, TempDir};
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn ready_agent() -> Agent {
    let agent = Agent::dev(&[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let r = agent.get("/v1/health/state/passing");
        if r.status == 200 && r.text().contains("serfHealth") {
            return agent;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no passing serfHealth check");
}

fn spawn_praetor(args: &[&str]) -> Child {
    Command::new(praetor_binary())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning praetor")
}

fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "condition not met within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn lock_runs_the_child_while_held_then_releases_and_cleans_up() {
    let agent = ready_agent();
    let addr = agent.http_addr();
    let lock_json = format!("curl -s http://{addr}/v1/kv/jobs/nightly/.lock");
    let (code, stdout, stderr) = cli(
        &[
            "lock",
            "-http-addr",
            &addr,
            "jobs/nightly",
            "echo",
            "held=$CONSUL_LOCK_HELD;",
            &lock_json,
        ],
        None,
    );
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(stdout.contains("held=true"), "{stdout}");
    let during: Value =
        serde_json::from_str(stdout.trim_start_matches("held=true").trim()).unwrap();
    assert_eq!(during[0]["Flags"], 3_304_740_253_564_472_344u64);
    assert!(during[0]["Session"].is_string());
    // Released, session destroyed, key removed.
    assert_eq!(agent.get("/v1/kv/jobs/nightly/.lock").status, 404);
    assert_eq!(agent.get("/v1/session/list").json(), serde_json::json!([]));
    // Child flags pass through untouched, and -child-exit-code reports a failing child.
    let (code, stdout, _) = cli(
        &[
            "lock",
            "-http-addr",
            &addr,
            "-shell=false",
            "p",
            "printf",
            "-%s-",
            "-n",
        ],
        None,
    );
    assert_eq!((code, stdout.as_str()), (0, "--n-"));
    let (code, _, _) = cli(
        &[
            "lock",
            "-http-addr",
            &addr,
            "-child-exit-code",
            "p",
            "false",
        ],
        None,
    );
    assert_eq!(code, 2);
    let (code, _, stderr) = cli(&["lock", "-http-addr", &addr, "p"], None);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("Key prefix and child command must be specified"),
        "{stderr}"
    );
}

#[test]
fn a_semaphore_with_n_2_admits_exactly_two_holders() {
    let agent = ready_agent();
    let addr = agent.http_addr();
    let dir = TempDir::new("semaphore");
    let log = dir.path().join("holders.log");
    let script = format!(
        "echo start $(date +%s%N) >> {log}; sleep 3; echo end $(date +%s%N) >> {log}",
        log = log.display()
    );
    let mut children: Vec<Child> = (0..3)
        .map(|_| spawn_praetor(&["lock", "-n", "2", "-http-addr", &addr, "pool", &script]))
        .collect();
    // Two hold the slots while the third waits as a contender.
    let (holders, contenders) = wait_for(Duration::from_secs(10), || {
        let r = agent.get("/v1/kv/pool?recurse");
        if r.status != 200 {
            return None;
        }
        let entries = r.json();
        let lock = entries
            .as_array()?
            .iter()
            .find(|e| e["Key"] == "pool/.lock")?
            .clone();
        use base64::Engine;
        let value = base64::engine::general_purpose::STANDARD
            .decode(lock["Value"].as_str()?)
            .ok()?;
        let state: Value = serde_json::from_slice(&value).ok()?;
        let holders = state["Holders"].as_object()?.len();
        let contenders = entries.as_array()?.len() - 1;
        (holders == 2 && contenders == 3).then_some((holders, contenders))
    });
    assert_eq!((holders, contenders), (2, 3));
    for child in &mut children {
        let status = wait_exit(child, Duration::from_secs(30));
        assert!(status.success());
    }
    // Replay the holders' log: never more than two at once, all three ran.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut events: Vec<(u128, i32)> = text
        .lines()
        .map(|line| {
            let (kind, at) = line.split_once(' ').unwrap();
            (at.parse().unwrap(), if kind == "start" { 1 } else { -1 })
        })
        .collect();
    events.sort();
    let (mut current, mut peak) = (0, 0);
    for (_, delta) in &events {
        current += delta;
        peak = peak.max(current);
    }
    assert_eq!(peak, 2, "{text}");
    assert_eq!(events.iter().filter(|(_, d)| *d == 1).count(), 3);
    assert_eq!(agent.get("/v1/kv/pool?recurse").status, 404, "cleaned up");
}

#[test]
fn lock_kills_its_child_when_the_session_is_invalidated() {
    let agent = ready_agent();
    let addr = agent.http_addr();
    let dir = TempDir::new("lockkill");
    let pid_file = dir.path().join("child.pid");
    let script = format!("echo $$ > {}; exec sleep 1000", pid_file.display());
    let mut lock = spawn_praetor(&["lock", "-http-addr", &addr, "guarded", &script]);
    let child_pid: i32 = wait_for(Duration::from_secs(10), || {
        std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
    });
    assert!(process_alive(child_pid));
    let entry = agent.get("/v1/kv/guarded/.lock").json();
    let session = entry[0]["Session"].as_str().unwrap().to_string();
    let invalidated = Instant::now();
    assert_eq!(
        agent
            .put(&format!("/v1/session/destroy/{session}"), b"")
            .status,
        200
    );
    let status = wait_exit(&mut lock, Duration::from_secs(15));
    assert!(
        status.success(),
        "consul lock exits 0 after losing the lock"
    );
    assert!(!process_alive(child_pid), "child {child_pid} still running");
    assert!(
        invalidated.elapsed() < Duration::from_secs(7),
        "SIGTERM, not the 5 s SIGKILL grace"
    );
}

#[test]
fn lock_timeouts_and_signals() {
    let agent = ready_agent();
    let addr = agent.http_addr();
    let holder = agent.put("/v1/session/create", b"{}").json()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let held = agent.put(
        &format!("/v1/kv/busy/.lock?acquire={holder}&flags=3304740253564472344"),
        b"",
    );
    assert_eq!(held.text().trim(), "true");
    let started = Instant::now();
    let (code, _, stderr) = cli(
        &[
            "lock",
            "-http-addr",
            &addr,
            "-timeout",
            "1s",
            "busy",
            "true",
        ],
        None,
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains("Shutdown triggered or timeout during lock acquisition"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // A key used by something else than a lock is a conflict.
    agent.put("/v1/kv/plain/.lock", b"data");
    let (code, _, stderr) = cli(&["lock", "-http-addr", &addr, "plain", "true"], None);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("Existing key does not match lock use"),
        "{stderr}"
    );
    // SIGTERM stops the child and releases the lock.
    let dir = TempDir::new("locksig");
    let pid_file = dir.path().join("child.pid");
    let script = format!("echo $$ > {}; exec sleep 1000", pid_file.display());
    let mut lock = spawn_praetor(&["lock", "-http-addr", &addr, "sig", &script]);
    let child_pid: i32 = wait_for(Duration::from_secs(10), || {
        std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
    });
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(lock.id() as i32, libc::SIGTERM) };
    wait_exit(&mut lock, Duration::from_secs(15));
    assert!(!process_alive(child_pid));
    assert_eq!(agent.get("/v1/kv/sig/.lock").status, 404);
}

#[test]
fn watch_runs_the_handler_on_every_change_and_prints_once_without_one() {
    let agent = ready_agent();
    let addr = agent.http_addr();
    let dir = TempDir::new("watch");
    let out = dir.path().join("handler.out");
    let handler = format!(
        "cat >> {}; echo \" index=$CONSUL_INDEX\" >> {}",
        out.display(),
        out.display()
    );
    let mut watch = spawn_praetor(&[
        "watch",
        "-http-addr",
        &addr,
        "-type",
        "key",
        "-key",
        "w/k",
        &handler,
    ]);
    // The first run hands over the current (absent) key.
    wait_for(Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&out).ok()?;
        text.starts_with("null").then_some(())
    });
    agent.put("/v1/kv/w/k", b"one");
    agent.put("/v1/kv/other", b"unrelated");
    agent.put("/v1/kv/w/k", b"two");
    let text = wait_for(Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&out).ok()?;
        text.contains("\"dHdv\"").then_some(text)
    });
    let runs: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with('{') || l.starts_with("null"))
        .collect();
    assert!(runs.len() <= 3, "one run per change of the key: {text}");
    let last: Value = serde_json::from_str(runs.last().unwrap()).unwrap();
    assert_eq!(last["Key"], "w/k");
    assert!(text.contains(" index="));
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(watch.id() as i32, libc::SIGTERM) };
    wait_exit(&mut watch, Duration::from_secs(10));

    // Without a handler: the data once, indented, then exit.
    let (code, stdout, stderr) = cli(
        &[
            "watch",
            "-http-addr",
            &addr,
            "-type=keyprefix",
            "-prefix=w/",
        ],
        None,
    );
    assert_eq!(code, 0, "{stderr}");
    let printed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(printed[0]["Key"], "w/k");
    assert!(
        stdout.contains("\n    {\n        \"LockIndex\""),
        "{stdout}"
    );
    let (code, stdout, _) = cli(&["watch", "-http-addr", &addr, "-type", "services"], None);
    assert_eq!(code, 0);
    assert!(serde_json::from_str::<Value>(&stdout).unwrap()["consul"].is_array());
    let (code, _, stderr) = cli(&["watch", "-http-addr", &addr, "-type", "key"], None);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("Must specify a single key to watch"),
        "{stderr}"
    );
}
