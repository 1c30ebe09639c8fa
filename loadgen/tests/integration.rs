//! Integration tests: the real loadgen binary against real servers started here — the HTTP
//! and DNS floor (`loadgen floor`), a one-member etcd, and for `blocking-fanout` a small
//! blocking-query fixture in this file (loadgen's fan-out logic needs a server that parks
//! queries; praetor's own tests exercise praetor).
//!
//! Every child process is stopped by PID when its guard drops and every wait has a deadline.
//! The peers (etcd, wrk, a TrueType font for charts) are installed by `tests/run.sh`; a test
//! whose peer is missing fails, naming the package. Ports come from loadgen's range: 18450-18459 and etcd 12400-12401.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Bound on one loadgen invocation.
const RUN_DEADLINE: Duration = Duration::from_secs(60);
/// Bound on a server becoming ready.
const READY_DEADLINE: Duration = Duration::from_secs(15);

/// Kills and reaps its child on drop.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn loadgen() -> &'static str {
    env!("CARGO_BIN_EXE_loadgen")
}

fn wait_for_tcp(port: u16) {
    let deadline = Instant::now() + READY_DEADLINE;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nothing listening on {port} after {READY_DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `loadgen floor <mode>` on one thread; it stops by itself after `RUN_DEADLINE` at
/// the latest, and by its guard before that.
fn start_floor(mode: &str, port: u16) -> Guard {
    let child = Command::new(loadgen())
        .args([
            "floor",
            mode,
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--threads",
            "1",
        ])
        .args(["--duration", &format!("{}s", RUN_DEADLINE.as_secs())])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start floor");
    let guard = Guard(child);
    if mode == "http" {
        wait_for_tcp(port);
    } else {
        std::thread::sleep(Duration::from_millis(300));
    }
    guard
}

/// Runs loadgen with `args`, bounded in time; returns (exit code, stdout).
fn run(args: &[&str]) -> (i32, String) {
    let mut child = Command::new(loadgen())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start loadgen");
    let deadline = Instant::now() + RUN_DEADLINE;
    loop {
        if let Some(status) = child.try_wait().expect("wait loadgen") {
            let mut out = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            if !status.success() {
                eprintln!("loadgen {args:?} failed: {err}");
            }
            return (status.code().unwrap_or(-1), out);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("loadgen {args:?} ran longer than {RUN_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_json(args: &[&str]) -> Value {
    let (code, out) = run(args);
    assert_eq!(code, 0, "loadgen {args:?} exited {code}: {out}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[test]
fn kv_get_closed_and_open_loop_against_the_http_floor() {
    let _floor = start_floor("http", 18450);
    let target = "http://127.0.0.1:18450";
    let closed = run_json(&[
        "kv-get",
        "--target",
        target,
        "--duration",
        "1s",
        "--connections",
        "8",
        "--threads",
        "1",
        "--no-preload",
        "--no-progress",
        "--json",
    ]);
    assert_eq!(f(&closed, "errors"), 0.0, "{closed}");
    assert!(f(&closed, "throughput_rps") > 1000.0, "{closed}");
    assert!(
        f(&closed, "p50_ms") <= f(&closed, "p99_ms")
            && f(&closed, "p99_ms") <= f(&closed, "max_ms")
    );
    assert_eq!(closed["mode"], "closed");

    // Open loop at a rate the floor sustains easily: the achieved rate is the offered one, never
    // more (the lower bound leaves room for a loaded machine delaying loadgen itself).
    let open = run_json(&[
        "kv-get",
        "--target",
        target,
        "--duration",
        "2s",
        "--connections",
        "8",
        "--threads",
        "1",
        "--rate",
        "2000",
        "--no-preload",
        "--no-progress",
        "--json",
    ]);
    let rps = f(&open, "throughput_rps");
    assert!(
        (1500.0..=2100.0).contains(&rps),
        "open loop at 2000/s achieved {rps}: {open}"
    );
    assert_eq!(f(&open, "errors"), 0.0);
    assert_eq!(open["mode"], "open");
}

#[test]
fn dns_udp_and_tcp_against_the_dns_floor() {
    let _floor = start_floor("dns", 18451);
    let udp = run_json(&[
        "dns",
        "--target",
        "127.0.0.1:18451",
        "--duration",
        "1s",
        "--connections",
        "4",
        "--threads",
        "1",
        "--no-progress",
        "--json",
    ]);
    assert_eq!(f(&udp, "errors"), 0.0, "{udp}");
    assert!(f(&udp, "throughput_rps") > 1000.0, "{udp}");
    assert_eq!(udp["transport"], "udp");
    let open = run_json(&[
        "dns",
        "--target",
        "127.0.0.1:18451",
        "--duration",
        "2s",
        "--connections",
        "4",
        "--threads",
        "1",
        "--rate",
        "3000",
        "--qtype",
        "SRV",
        "--no-progress",
        "--json",
    ]);
    let rps = f(&open, "throughput_rps");
    assert!(
        (2250.0..=3150.0).contains(&rps),
        "open-loop DNS at 3000/s achieved {rps}: {open}"
    );
    // The floor has no TCP DNS listener: every query is an error, and the run still ends.
    let tcp = run_json(&[
        "dns",
        "--target",
        "127.0.0.1:18451",
        "--tcp",
        "--duration",
        "500ms",
        "--connections",
        "2",
        "--threads",
        "1",
        "--no-progress",
        "--json",
    ]);
    assert!(
        f(&tcp, "errors") > 0.0 && f(&tcp, "requests") == 0.0,
        "{tcp}"
    );
}

#[test]
fn a_dead_target_gives_counted_errors_not_a_crash() {
    // Nothing listens on 18452.
    let v = run_json(&[
        "kv-get",
        "--target",
        "http://127.0.0.1:18452",
        "--duration",
        "500ms",
        "--connections",
        "2",
        "--threads",
        "1",
        "--no-preload",
        "--no-progress",
        "--json",
    ]);
    assert!(v["error_kinds"]["connect"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(f(&v, "throughput_rps"), 0.0);
    // A bad command line is exit code 2 with a message, not a panic.
    let (code, _) = run(&[
        "kv-get",
        "--target",
        "http://127.0.0.1:1",
        "--connections",
        "0",
    ]);
    assert_eq!(code, 2);
}

#[test]
fn compare_interleaves_and_charts() {
    let _floor = start_floor("http", 18453);
    let dir = std::env::temp_dir().join(format!("loadgen-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json_path = dir.join("cmp.json");
    let v = run_json(&[
        "compare",
        "kv-get",
        "--target-a",
        "http://127.0.0.1:18453",
        "--target-b",
        "http://127.0.0.1:18453",
        "--runs",
        "2",
        "--pause",
        "100ms",
        "--duration",
        "500ms",
        "--connections",
        "4",
        "--threads",
        "1",
        "--no-preload",
        "--no-progress",
        "--json",
        "--json-out",
        json_path.to_str().unwrap(),
    ]);
    assert_eq!(v["runs"], 2);
    assert_eq!(v["a"]["runs"].as_array().unwrap().len(), 2);
    // Each ratio is B/A of the same run pair, and the median is the middle one. (How close it is
    // to 1 depends on the machine's other load, so that is not asserted.)
    let per_run = v["ratio"]["per_run"].as_array().unwrap();
    for (i, ratio) in per_run.iter().enumerate() {
        let a = f(&v["a"]["runs"][i], "throughput_rps");
        let b = f(&v["b"]["runs"][i], "throughput_rps");
        assert!(a > 0.0 && b > 0.0, "{v}");
        assert!(
            (ratio.as_f64().unwrap() - b / a).abs() < 1e-9,
            "run {i}: {ratio} != {b}/{a}"
        );
        assert_eq!(
            f(&v["a"]["runs"][i], "errors") + f(&v["b"]["runs"][i], "errors"),
            0.0,
            "{v}"
        );
    }
    let (r0, r1) = (per_run[0].as_f64().unwrap(), per_run[1].as_f64().unwrap());
    assert!((v["ratio"]["median"].as_f64().unwrap() - (r0 + r1) / 2.0).abs() < 1e-9);
    let png = dir.join("cmp.png");
    let (code, _) = run(&[
        "chart",
        "--input",
        json_path.to_str().unwrap(),
        "--output",
        png.to_str().unwrap(),
    ]);
    assert_eq!(
        code, 0,
        "loadgen chart failed (tests/run.sh installs fonts-dejavu-core)"
    );
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn etcd_put_and_range_through_the_json_gateway() {
    let etcd = ["/usr/bin/etcd", "/usr/local/bin/etcd"]
        .iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("no etcd binary (tests/run.sh installs Debian's etcd-server)");
    let dir = std::env::temp_dir().join(format!("loadgen-etcd-{}", std::process::id()));
    let child = Command::new(etcd)
        .args([
            "--name",
            "lg",
            "--data-dir",
            dir.join("data").to_str().unwrap(),
            "--listen-client-urls",
            "http://127.0.0.1:12400",
            "--advertise-client-urls",
            "http://127.0.0.1:12400",
            "--listen-peer-urls",
            "http://127.0.0.1:12401",
            "--initial-advertise-peer-urls",
            "http://127.0.0.1:12401",
            "--initial-cluster",
            "lg=http://127.0.0.1:12401",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start etcd");
    let _etcd = Guard(child);
    wait_for_tcp(12400);
    // The gateway answers once the member has elected itself.
    let deadline = Instant::now() + READY_DEADLINE;
    let put = loop {
        let v = run_json(&[
            "kv-put",
            "--etcd",
            "--target",
            "http://127.0.0.1:12400",
            "--duration",
            "1s",
            "--connections",
            "4",
            "--threads",
            "1",
            "--no-progress",
            "--json",
        ]);
        // Ready means a whole second without an error and with at least one answer: under
        // load etcd's first fsync alone can outlast the second.
        let answered = f(&v, "errors") == 0.0 && f(&v, "requests") > 0.0;
        if answered || Instant::now() > deadline {
            break v;
        }
    };
    assert_eq!(f(&put, "errors"), 0.0, "{put}");
    assert!(f(&put, "requests") > 0.0, "{put}");
    let get = run_json(&[
        "kv-get",
        "--etcd",
        "--target",
        "http://127.0.0.1:12400",
        "--duration",
        "1s",
        "--connections",
        "4",
        "--threads",
        "1",
        "--consistency",
        "stale",
        "--no-progress",
        "--json",
    ]);
    assert_eq!(f(&get, "errors"), 0.0, "{get}");
    assert!(f(&get, "requests") > 0.0);
    drop(_etcd);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A minimal server with Consul's blocking-query contract: `GET /v1/kv/<k>` or
/// `GET /v1/health/service/<svc>` answers 404 with `X-Consul-Index: 5`; with `?index=5` it
/// parks until a write to the same thing — `PUT /v1/kv/<k>`, or
/// `PUT /v1/agent/check/fail/service:<svc>-<n>` for a service — then answers with index 6.
/// One thread per connection; `stop` ends it.
struct BlockingFixture {
    port: u16,
    state: Arc<(Mutex<FixtureState>, Condvar)>,
}

#[derive(Default)]
struct FixtureState {
    /// Keys written so far.
    written: Vec<String>,
    stop: bool,
}

impl BlockingFixture {
    fn start(port: u16) -> BlockingFixture {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind fixture");
        let state: Arc<(Mutex<FixtureState>, Condvar)> = Arc::default();
        let accept_state = state.clone();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || loop {
            if accept_state.0.lock().unwrap().stop {
                return;
            }
            match listener.accept() {
                Ok((stream, _)) => {
                    let s = accept_state.clone();
                    std::thread::spawn(move || serve(stream, s));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        });
        BlockingFixture { port, state }
    }
}

impl Drop for BlockingFixture {
    fn drop(&mut self) {
        self.state.0.lock().unwrap().stop = true;
        self.state.1.notify_all();
    }
}

/// What a fixture request watches or writes: `kv:<key>` or `health:<service>`.
fn fixture_watch_key(path: &str) -> String {
    if let Some(key) = path.strip_prefix("/v1/kv/") {
        format!("kv:{key}")
    } else if let Some(service) = path.strip_prefix("/v1/health/service/") {
        format!("health:{service}")
    } else if let Some(check) = path.strip_prefix("/v1/agent/check/fail/service:") {
        // `service:<svc>-<n>` belongs to service <svc>.
        let service = check.rsplit_once('-').map_or(check, |(svc, _)| svc);
        format!("health:{service}")
    } else {
        path.to_string()
    }
}

fn serve(stream: TcpStream, state: Arc<(Mutex<FixtureState>, Condvar)>) {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut content_length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
            if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                content_length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; content_length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let key = fixture_watch_key(path);
        let (lock, cv) = &*state;
        let response = if method == "PUT" {
            lock.lock().unwrap().written.push(key);
            cv.notify_all();
            "HTTP/1.1 200 OK\r\nX-Consul-Index: 6\r\nContent-Length: 4\r\n\r\ntrue".to_string()
        } else if query.contains("index=5") {
            let mut s = lock.lock().unwrap();
            while !s.written.contains(&key) && !s.stop {
                s = cv.wait(s).unwrap();
            }
            if s.stop {
                return;
            }
            "HTTP/1.1 200 OK\r\nX-Consul-Index: 6\r\nContent-Length: 2\r\n\r\n[]".to_string()
        } else {
            "HTTP/1.1 404 Not Found\r\nX-Consul-Index: 5\r\nContent-Length: 0\r\n\r\n".to_string()
        };
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

#[test]
fn blocking_fanout_measures_wake_ups_and_spares_the_others() {
    let fixture = BlockingFixture::start(18454);
    let target = format!("http://127.0.0.1:{}", fixture.port);
    let v = run_json(&[
        "blocking-fanout",
        "--target",
        &target,
        "--watchers",
        "60",
        "--others",
        "20",
        "--key",
        "k",
        "--other-key",
        "other",
        "--settle",
        "300ms",
        "--wake-timeout",
        "5s",
        "--others-grace",
        "300ms",
        "--threads",
        "2",
        "--source-addrs",
        "127.0.0.40-127.0.0.42",
        "--rss-pid",
        &std::process::id().to_string(),
        // As bench/compare.py runs the fan-out rows: the policy change must not fail the run.
        "--sched",
        "batch",
        "--no-progress",
        "--json",
    ]);
    assert_eq!(v["answered"], 60, "{v}");
    assert_eq!(v["all_answered"], true);
    assert_eq!(v["early"], 0);
    assert_eq!(v["others_parked"], 20);
    assert_eq!(
        v["others_woken"], 0,
        "a write to k woke watchers of another key: {v}"
    );
    assert_eq!(v["index_not_advanced"], 0);
    assert_eq!(v["write_status"], 200);
    assert!(f(&v, "wake_p99_ms") < 2000.0, "{v}");
    assert!(f(&v, "wake_p50_ms") <= f(&v, "wake_p99_ms"));
    assert!(v.get("rss_per_watcher_bytes").is_some(), "{v}");
    assert_eq!(v["source_addresses"], 3);
}

#[test]
fn the_benchmark_script_writes_a_report_with_a_chart() {
    assert!(
        Command::new("wrk").arg("-v").output().is_ok(),
        "wrk is missing (tests/run.sh installs it)"
    );
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = std::env::temp_dir().join(format!("loadgen-bench-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let console = out.join("console.log");
    // The floor's fixed port: this test must not run while bench/compare.sh does.
    let mut child = Command::new("python3")
        .arg(format!("{root}/bench/compare.py"))
        .args(["--root", root, "--loadgen", loadgen()])
        .args([
            "--quick",
            "--runs",
            "1",
            "--only",
            "ceiling-http",
            "--max-time",
            "120",
            "--out",
        ])
        .arg(&out)
        .stdout(std::fs::File::create(&console).unwrap())
        .stderr(std::fs::File::create(out.join("console.err")).unwrap())
        .spawn()
        .expect("start python3 bench/compare.py");
    let deadline = Instant::now() + Duration::from_secs(150);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for compare.py") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("bench/compare.py ran longer than 150 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if !status.success() {
        let err = std::fs::read_to_string(out.join("console.err")).unwrap_or_default();
        panic!("bench/compare.py failed ({status}):\n{err}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md written");
    let row = report
        .lines()
        .find(|l| l.contains("**ceiling-http**"))
        .expect("a ceiling-http row");
    assert!(
        row.contains("req/s") && (row.contains("pass") || row.contains("fail")),
        "{row}"
    );
    assert!(
        row.contains("`wrk -t2 -c64"),
        "the row quotes its exact command: {row}"
    );
    let raw: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("raw/ceiling-http.json")).unwrap())
            .unwrap();
    assert!(raw["b"]["runs"][0]["throughput_rps"].as_f64().unwrap() > 0.0);
    assert!(
        raw["a"]["runs"][0]["throughput_rps"].as_f64().unwrap() > 0.0,
        "wrk output parsed: {raw}"
    );
    assert!(std::fs::read(out.join("charts/ceiling-http.png"))
        .expect("the row's chart (tests/run.sh installs fonts-dejavu-core)")
        .starts_with(b"\x89PNG"));
    // Nothing it started is left listening.
    assert!(
        TcpStream::connect(("127.0.0.1", 18500)).is_err(),
        "the HTTP floor was left running"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn blocking_fanout_on_a_health_service_with_a_check_failure() {
    let fixture = BlockingFixture::start(18455);
    let target = format!("http://127.0.0.1:{}", fixture.port);
    let v = run_json(&[
        "blocking-fanout",
        "--target",
        &target,
        "--watch",
        "health",
        "--service",
        "fweb",
        "--check-id",
        "service:fweb-0",
        "--watchers",
        "40",
        "--others",
        "10",
        "--other-service",
        "fapi",
        "--settle",
        "300ms",
        "--wake-timeout",
        "5s",
        "--others-grace",
        "300ms",
        "--threads",
        "2",
        "--no-progress",
        "--json",
    ]);
    assert_eq!(v["answered"], 40, "{v}");
    assert_eq!(v["others_woken"], 0, "{v}");
    assert_eq!(v["others_parked"], 10);
    assert_eq!(v["write_status"], 200);
}
