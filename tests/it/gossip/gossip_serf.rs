//! Interop with the real HashiCorp `serf` binary (Debian package `serf`, 0.9.4): our
//! driver runs in this process on a monoio runtime thread, two `serf agent` processes on
//! loopback join it. Checked in both directions: membership and tags, failure detection
//! of a `kill -9`ed agent, user events each way, graceful leave, and all of it again
//! with a shared AES-GCM key including serf's keyring queries.
//!
//! Fails when /usr/bin/serf is missing (`tests/run.sh` installs Debian's `serf`). Each
//! scenario takes three fresh loopback addresses and a temporary directory for the serf
//! agents' logs and event files; every process is stopped by PID; every wait is bounded.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{fresh_loopback, TempDir};
use base64::Engine;
use praetor::cluster::gossip::{gossip_pair, DriverConfig, GossipHandle};
use praetor::gossip::{GossipConfig, GossipEvent, KeyOp, MemberStatus};

const SERF: &str = "/usr/bin/serf";

fn block_on<F: Future>(f: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .expect("runtime")
        .block_on(f)
}

struct SerfAgent {
    name: String,
    child: Option<Child>,
    rpc: String,
    bind: String,
}

impl SerfAgent {
    fn start(
        name: &str,
        bind: &str,
        rpc: &str,
        join: &str,
        key: Option<&str>,
        handler_file: &Path,
        log_dir: &Path,
    ) -> SerfAgent {
        let mut cmd = Command::new(SERF);
        cmd.arg("agent")
            .arg(format!("-node={name}"))
            .arg(format!("-bind={bind}"))
            .arg(format!("-rpc-addr={rpc}"))
            .arg(format!("-join={join}"))
            .arg("-tag")
            .arg("role=serf-test")
            .arg("-log-level=debug")
            .arg(format!(
                "-event-handler=user:praetor-evt=cat >> {}",
                handler_file.display()
            ));
        if let Some(k) = key {
            cmd.arg(format!("-encrypt={k}"));
        }
        let log = std::fs::File::create(log_dir.join(format!("{name}.log"))).expect("log file");
        cmd.stdout(Stdio::from(log.try_clone().expect("clone")))
            .stderr(Stdio::from(log))
            .stdin(Stdio::null());
        let child = cmd.spawn().expect("spawn serf agent");
        SerfAgent {
            name: name.to_owned(),
            child: Some(child),
            rpc: rpc.to_owned(),
            bind: bind.to_owned(),
        }
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-9")
                .arg(c.id().to_string())
                .status();
            let _ = c.wait();
        }
    }

    fn serf(&self, args: &[&str]) -> String {
        // Options go right after the subcommand, before positional arguments.
        let out = Command::new(SERF)
            .arg(args[0])
            .arg(format!("-rpc-addr={}", self.rpc))
            .args(&args[1..])
            .output()
            .expect("run serf cli");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// `serf members -format=json` as (name -> (status, tags)).
    fn members(&self) -> BTreeMap<String, (String, BTreeMap<String, String>)> {
        let out = self.serf(&["members", "-format=json"]);
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&out) else {
            return BTreeMap::new();
        };
        let mut m = BTreeMap::new();
        for mem in v["members"].as_array().cloned().unwrap_or_default() {
            let tags = mem["tags"]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                        .collect()
                })
                .unwrap_or_default();
            m.insert(
                mem["name"].as_str().unwrap_or("").to_owned(),
                (mem["status"].as_str().unwrap_or("").to_owned(), tags),
            );
        }
        m
    }
}

impl Drop for SerfAgent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-9")
                .arg(c.id().to_string())
                .status();
            let _ = c.wait();
        }
    }
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out after {limit:?} waiting for: {what}");
}

struct Driver {
    handle: GossipHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.handle.shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start_driver(bind: SocketAddr, keys: Vec<Vec<u8>>) -> Driver {
    let mut cfg = GossipConfig::lan("praetor-1", bind.ip(), bind.port());
    cfg.tags.insert("role".into(), "node".into());
    cfg.tags.insert("dc".into(), "dc1".into());
    cfg.tags.insert("build".into(), "praetor-test".into());
    cfg.keys = keys;
    let (handle, driver) = gossip_pair(DriverConfig::new(cfg, bind));
    let thread = std::thread::spawn(move || {
        let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .expect("runtime");
        rt.block_on(driver.run()).expect("driver runs");
    });
    wait_for("driver bound", Duration::from_secs(5), || {
        handle.local_addr().is_some()
    });
    Driver {
        handle,
        thread: Some(thread),
    }
}

fn our_status(h: &GossipHandle, name: &str) -> Option<MemberStatus> {
    h.members()
        .iter()
        .find(|m| m.name == name)
        .map(|m| m.status)
}

fn scenario(base: u16, key: Option<Vec<u8>>) {
    let key_b64 = key
        .as_ref()
        .map(|k| base64::engine::general_purpose::STANDARD.encode(k));
    let [our_ip, serf1_ip, serf2_ip] = [fresh_loopback(), fresh_loopback(), fresh_loopback()];
    let dir = TempDir::new("serf");
    let ours = SocketAddr::new(our_ip, base);
    let driver = start_driver(ours, key.clone().into_iter().collect());
    let h = driver.handle.clone();
    let events = h.events();
    let handler_file = dir.0.join("events.txt");

    // serf1 joins us (exercises our push/pull server); we join serf2 (our client side).
    let mut serf1 = SerfAgent::start(
        "serf1",
        &format!("{serf1_ip}:{}", base + 10),
        &format!("{serf1_ip}:{}", base + 11),
        &ours.to_string(),
        key_b64.as_deref(),
        &handler_file,
        &dir.0,
    );
    wait_for("serf1 lists praetor-1", Duration::from_secs(15), || {
        serf1.members().contains_key("praetor-1")
    });
    // serf2 joins through serf1, so it starts once serf1 is up (a failed -join makes
    // `serf agent` exit).
    let mut serf2 = SerfAgent::start(
        "serf2",
        &format!("{serf2_ip}:{}", base + 20),
        &format!("{serf2_ip}:{}", base + 21),
        &format!("{serf1_ip}:{}", base + 10),
        key_b64.as_deref(),
        &handler_file,
        &dir.0,
    );
    // serf2 is up (its RPC answers and it joined serf1) before we dial it.
    wait_for("serf2 is running", Duration::from_secs(15), || {
        serf2.members().contains_key("serf1")
    });
    let joined = block_on(h.join(&[serf2.bind.clone()])).expect("join serf2");
    assert_eq!(joined, 1);

    let took = wait_for(
        "all three alive everywhere",
        Duration::from_secs(20),
        || {
            let s1 = serf1.members();
            let s2 = serf2.members();
            let ok_serf = [&s1, &s2].iter().all(|m| {
                m.get("praetor-1").is_some_and(|(st, tags)| {
                    st == "alive"
                        && tags.get("dc").map(String::as_str) == Some("dc1")
                        && tags.get("role").map(String::as_str) == Some("node")
                }) && m.len() == 3
            });
            let ok_ours = our_status(&h, "serf1") == Some(MemberStatus::Alive)
                && our_status(&h, "serf2") == Some(MemberStatus::Alive);
            ok_serf && ok_ours
        },
    );
    eprintln!(
        "[serf] pool converged in {took:?} (encrypted: {})",
        key.is_some()
    );
    let m = h.members();
    let s1 = m.iter().find(|m| m.name == "serf1").unwrap();
    assert_eq!(s1.tags.get("role").map(String::as_str), Some("serf-test"));
    assert_eq!(s1.addr, serf1_ip);
    assert_eq!(s1.port, base + 10);
    assert_eq!(
        (s1.protocol_min, s1.protocol_max, s1.delegate_max),
        (1, 5, 5)
    );

    // serf event -> our event stream.
    let out = serf1.serf(&["event", "deploy", "v42"]);
    assert!(
        out.contains("Event 'deploy' dispatched"),
        "serf event: {out}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = None;
    while Instant::now() < deadline && got.is_none() {
        if let Ok(GossipEvent::User(e)) = events.recv_timeout(Duration::from_millis(200)) {
            if e.name == "deploy" {
                got = Some(e);
            }
        }
    }
    let got = got.expect("user event from serf reached praetor");
    assert_eq!(got.payload, b"v42");

    // Our event -> serf's event handler script.
    block_on(h.fire_user_event("praetor-evt", b"hello-from-praetor", false)).expect("fire");
    wait_for(
        "serf ran the event handler with our payload",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(&handler_file)
                .unwrap_or_default()
                .contains("hello-from-praetor")
        },
    );

    if let Some(k) = &key {
        // serf's keyring query answered by us, and ours answered by serf.
        let out = serf1.serf(&["keys", "-list"]);
        assert!(
            out.contains(key_b64.as_deref().unwrap()) && out.contains("[3/3]"),
            "serf keys -list: {out}"
        );
        let r = block_on(h.keyring(KeyOp::List)).expect("list keys");
        assert_eq!((r.num_resp, r.num_err), (3, 0), "{r:?}");
        assert_eq!(r.keys.get(key_b64.as_deref().unwrap()), Some(&3));
        // Install a second key cluster-wide, from serf, and see it here.
        let k2 = base64::engine::general_purpose::STANDARD.encode([9u8; 16]);
        let out = serf1.serf(&["keys", "-install", &k2]);
        assert!(
            out.contains("Successfully installed"),
            "serf keys -install: {out}"
        );
        let keys = h.local_keys();
        assert!(keys.contains(&vec![9u8; 16]) && keys[0] == *k, "{keys:?}");
    }

    // kill -9 serf2: we see it failed within the suspicion timeout (+ probe slack).
    serf2.kill9();
    let killed = Instant::now();
    let cfg = GossipConfig::lan("x", ours.ip(), 1);
    // Suspicion timeout, plus: up to three probe intervals until a round-robin probe
    // order (reshuffled each round) reaches serf2, one for the failed probe itself, and
    // two of slack for Lifeguard stretching probes on a loaded machine.
    let bound = praetor::gossip::core::suspicion_timeout(cfg.suspicion_mult, 3, cfg.probe_interval)
        + cfg.probe_interval * 6;
    wait_for("praetor marks serf2 failed", bound, || {
        our_status(&h, "serf2") == Some(MemberStatus::Failed)
    });
    eprintln!(
        "[serf] kill -9 of serf2 seen as failed after {:?} (bound {bound:?})",
        killed.elapsed()
    );

    // Graceful leave: serf sees us as left.
    block_on(h.leave()).expect("leave");
    let started = Instant::now();
    let mut last_view = String::new();
    let mut left = false;
    while !left && started.elapsed() < Duration::from_secs(15) {
        let view = serf1.members().get("praetor-1").map(|(st, _)| st.clone());
        left = view.as_deref() == Some("left");
        last_view = format!("{view:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        left,
        "serf1 never saw praetor-1 as left within 15s; its last view: {last_view} (log: {})",
        dir.0.join("serf1.log").display()
    );
    serf1.kill9();
    drop(driver);
    let _ = serf1.name.len();
}

#[test]
fn interop_with_real_serf() {
    assert!(
        Path::new(SERF).exists(),
        "{SERF} is not installed: tests/run.sh installs Debian's serf package"
    );
    scenario(18340, None);
    scenario(18370, Some(vec![7u8; 32]));
}
