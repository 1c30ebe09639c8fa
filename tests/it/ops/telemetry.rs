//! Telemetry with real processes: a real Prometheus server (Debian's `prometheus`) scrapes
//! `/v1/agent/metrics?format=prometheus` and answers PromQL about Consul-named series; a
//! statsd and a dogstatsd listener (UDP sockets in the test) receive counters, timers and
//! gauges; `/v1/agent/metrics` answers go-metrics' JSON, and without a Prometheus retention
//! what Consul's clients see (a 200 with an empty body and `X-Consul-Reason`); the prefix
//! filter drops what it blocks.

use crate::common;

use common::{fresh_loopback, request, try_request, Agent, TempDir};
use serde_json::Value;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Writes to the agent's KV store until stopped, so timers always have fresh observations.
struct Writer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(addr: SocketAddr) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut i = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let _ = try_request(addr, "PUT", &format!("/v1/kv/load/{}", i % 50), b"v", &[]);
                i += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Writer {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A Prometheus server of our own: its own loopback address, data directory and log,
/// killed by PID when dropped.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    log: std::path::PathBuf,
    _dir: TempDir,
}

impl Prometheus {
    fn scraping(target: SocketAddr) -> Prometheus {
        let dir = TempDir::new("prometheus");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: praetor\n    metrics_path: /v1/agent/metrics\n\
                 \x20   params:\n      format: [prometheus]\n\
                 \x20   static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr = SocketAddr::new(fresh_loopback(), 9090);
        let log = dir.path().join("prometheus.log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--storage.tsdb.retention.time=1h")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("Debian's prometheus is installed (tests/run.sh)");
        Prometheus {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    /// The first sample of an instant PromQL query, if the query returns one.
    fn query(&self, promql: &str) -> Option<f64> {
        let encoded: String = promql
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let r = try_request(
            self.addr,
            "GET",
            &format!("/api/v1/query?query={encoded}"),
            b"",
            &[],
        )
        .ok()?;
        if r.status != 200 {
            return None;
        }
        let body: Value = serde_json::from_slice(&r.body).ok()?;
        body["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok())
    }

    /// Waits (bounded) until `promql` returns a sample `accept` takes.
    fn wait_for(&self, promql: &str, accept: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(value) = self.query(promql).filter(|v| accept(*v)) {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus never answered {promql} as expected (last: {:?}); log:\n{}",
                self.query(promql),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_real_prometheus_scrapes_consul_named_series() {
    let agent = Agent::dev(&[
        "-hcl",
        r#"telemetry { prometheus_retention_time = "60s" disable_hostname = true }"#,
    ]);
    let _writer = Writer::start(agent.addr());
    let prometheus = Prometheus::scraping(agent.addr());
    // The scrape parses (a malformed exposition would leave `up` at 0).
    prometheus.wait_for(r#"up{job="praetor"}"#, |v| v == 1.0);
    assert!(prometheus.wait_for("consul_raft_commitTime_count", |v| v > 0.0) > 0.0);
    assert!(prometheus.wait_for("consul_kvs_apply_count", |v| v > 0.0) > 0.0);
    // Quantiles of the last 10 s, in milliseconds: a commit on one server takes well under
    // a second, and never nothing.
    let p99 = prometheus.wait_for(r#"consul_kvs_apply{quantile="0.99"}"#, |v| v > 0.0);
    assert!(p99 < 1000.0, "kvs.apply p99 {p99} ms");
    prometheus.wait_for(r#"consul_raft_commitTime{quantile="0.5"}"#, |v| v >= 0.0);
    prometheus.wait_for("consul_raft_apply", |v| v > 0.0);
    prometheus.wait_for(
        r#"consul_api_http_count{method="PUT",path="v1_kv_"}"#,
        |v| v > 0.0,
    );
    prometheus.wait_for("consul_state_kv_entries", |v| v > 0.0);
    prometheus.wait_for("consul_autopilot_healthy", |v| v == 1.0);
    prometheus.wait_for("consul_raft_state_leader", |v| v >= 1.0);
    // Counters only grow: PromQL's rate over them is meaningful.
    prometheus.wait_for("rate(consul_raft_apply[5s])", |v| v > 0.0);
}

#[test]
fn prometheus_output_needs_a_retention_and_json_is_go_metrics_shaped() {
    let agent = Agent::dev(&[]);
    let r = agent.get("/v1/agent/metrics?format=prometheus");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "");
    assert_eq!(
        r.header("X-Consul-Reason"),
        Some("Prometheus is not enabled since its retention time is not positive")
    );
    // The status line says what its code means, as Go's server writes it.
    let raw = common::raw_exchange(
        agent.addr(),
        b"GET /v1/acl/policies HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        std::time::Duration::from_secs(10),
    );
    assert!(
        raw.starts_with(b"HTTP/1.1 401 Unauthorized\r\n"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    for i in 0..5 {
        assert_eq!(agent.put(&format!("/v1/kv/json/{i}"), b"x").status, 200);
    }
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    // go-metrics shows the last finished 10 s interval: wait (bounded) for the writes'.
    let deadline = Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        let metrics = agent.get("/v1/agent/metrics").json();
        let has = |list: &str, name: &str| {
            metrics[list]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["Name"] == name)
        };
        if has("Samples", "consul.kvs.apply") && has("Counters", "consul.raft.apply") {
            break metrics;
        }
        assert!(
            Instant::now() < deadline,
            "no interval with the writes: {metrics}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let timestamp = metrics["Timestamp"].as_str().unwrap();
    assert!(
        timestamp.ends_with(" +0000 UTC")
            && timestamp.len() == "2006-01-02 15:04:05 +0000 UTC".len()
            && timestamp.as_bytes()[10] == b' ',
        "{timestamp}"
    );
    let sample = metrics["Samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Name"] == "consul.kvs.apply")
        .unwrap();
    assert!(sample["Count"].as_u64().unwrap() >= 1);
    for field in ["Rate", "Sum", "Min", "Max", "Mean", "Stddev"] {
        assert!(sample[field].is_number(), "{field} in {sample}");
    }
    let http = metrics["Samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Name"] == "consul.api.http" && s["Labels"]["method"] == "PUT")
        .unwrap_or_else(|| panic!("no api.http sample: {metrics}"));
    assert_eq!(http["Labels"]["path"], "v1_kv_");
    // Gauges carry the host name unless disable_hostname is set, as Consul's.
    let gauge = |name: &str| {
        metrics["Gauges"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["Name"] == name)
            .map(|g| g["Value"].as_f64().unwrap())
    };
    assert!(gauge(&format!("consul.{hostname}.runtime.alloc_bytes")).unwrap() > 0.0);
    assert_eq!(
        gauge(&format!("consul.{hostname}.server.isLeader")),
        Some(1.0)
    );
}

#[test]
fn the_prefix_filter_drops_what_it_blocks() {
    let agent = Agent::dev(&[
        "-hcl",
        r#"telemetry {
             prometheus_retention_time = "30s"
             disable_hostname = true
             metrics_prefix = "praetor"
             prefix_filter = ["-praetor.kvs", "+praetor.kvs.apply.not", "-praetor.state"]
           }"#,
    ]);
    assert_eq!(agent.put("/v1/kv/filtered", b"x").status, 200);
    let text = agent.get("/v1/agent/metrics?format=prometheus").text();
    assert!(
        text.contains("# TYPE praetor_raft_commitTime summary\n"),
        "{text}"
    );
    assert!(text.contains("praetor_raft_apply "), "{text}");
    assert!(!text.contains("praetor_kvs_apply"), "{text}");
    assert!(!text.contains("praetor_state_"), "{text}");
    assert!(!text.contains("consul_"), "{text}");
}

/// Collects datagrams from `socket` until `done` holds for the lines seen (bounded).
fn collect_lines(socket: &UdpSocket, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut lines = Vec::new();
    let mut buf = [0u8; 65_536];
    while !done(&lines) {
        assert!(
            Instant::now() < deadline,
            "expected lines never arrived; got {lines:?}"
        );
        if let Ok(n) = socket.recv(&mut buf) {
            assert!(n <= 1400, "a datagram of {n} bytes, above the statsd limit");
            let text = String::from_utf8(buf[..n].to_vec()).unwrap();
            lines.extend(text.lines().map(str::to_string));
        }
    }
    lines
}

#[test]
fn statsd_and_dogstatsd_listeners_receive_counters_timers_and_gauges() {
    let statsd = UdpSocket::bind((fresh_loopback(), 8125)).unwrap();
    let dogstatsd = UdpSocket::bind((fresh_loopback(), 8125)).unwrap();
    let agent = Agent::dev(&[
        "-hcl",
        &format!(
            r#"telemetry {{
                 statsd_address = "{}"
                 dogstatsd_addr = "{}"
                 dogstatsd_tags = ["env:test"]
                 disable_hostname = true
               }}"#,
            statsd.local_addr().unwrap(),
            dogstatsd.local_addr().unwrap()
        ),
    ]);
    let _writer = Writer::start(agent.addr());
    let has = |lines: &[String], prefix: &str, suffix: &str| {
        lines
            .iter()
            .any(|l| l.starts_with(prefix) && l.contains(suffix))
    };
    let lines = collect_lines(&statsd, |lines| {
        has(lines, "consul.raft.apply:", "|c")
            && has(lines, "consul.kvs.apply:", "|ms")
            && has(lines, "consul.api.http.PUT.v1_kv_:", "|ms")
            && has(lines, "consul.state.kv_entries:", "|g")
    });
    // Counters are the increments since the previous flush; values print as Go's %f.
    let apply = lines
        .iter()
        .find(|l| l.starts_with("consul.raft.apply:"))
        .unwrap();
    let value: f64 = apply["consul.raft.apply:".len()..apply.len() - 2]
        .parse()
        .unwrap_or_else(|_| panic!("{apply}"));
    assert!(value >= 1.0, "{apply}");
    assert!(apply.contains('.'), "{apply}");
    let tagged = collect_lines(&dogstatsd, |lines| {
        lines
            .iter()
            .any(|l| l.starts_with("consul.raft.apply:") && l.ends_with("|c|#env:test"))
            && lines.iter().any(|l| {
                l.starts_with("consul.api.http:")
                    && l.contains("|ms")
                    && l.contains("#env:test,method:PUT,path:v1_kv_")
            })
    });
    assert!(!tagged.is_empty());
    // The agent still answers; a sink never slows it down.
    assert_eq!(
        request(agent.addr(), "GET", "/v1/kv/load/1", b"", &[]).status,
        200
    );
}

#[test]
fn the_metrics_stream_sends_each_interval_as_it_ends() {
    use std::io::{Read, Write};
    let agent = Agent::dev(&[]);
    let mut stream = std::net::TcpStream::connect(agent.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
        .write_all(b"GET /v1/agent/metrics/stream HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    assert_eq!(agent.put("/v1/kv/streamed", b"x").status, 200);
    // Two summaries arrive, ten seconds apart: read until the second one started.
    let mut received = Vec::new();
    let mut buf = [0u8; 16_384];
    let deadline = Instant::now() + Duration::from_secs(40);
    let text = loop {
        let n = stream.read(&mut buf).expect("the stream stays open");
        assert!(n > 0, "the agent closed the stream");
        received.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&received).into_owned();
        if text.matches("\"Timestamp\"").count() >= 2 {
            break text;
        }
        assert!(Instant::now() < deadline, "no two summaries: {text}");
    };
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("Transfer-Encoding: chunked"), "{head}");
    // Each chunk is one summary, indented as Consul's encoder indents it.
    let first_chunk = body.split("\r\n").nth(1).unwrap();
    let summary: Value = serde_json::from_str(first_chunk.trim_end()).unwrap();
    assert!(summary["Timestamp"]
        .as_str()
        .unwrap()
        .ends_with("+0000 UTC"));
    assert!(summary["Gauges"].is_array() && summary["Samples"].is_array());
    assert!(first_chunk.starts_with("{\n    \"Counters\"") || first_chunk.contains("\n    \""));
    drop(stream);
    // The agent lets the stream go when the client leaves and keeps answering.
    assert_eq!(agent.get("/v1/kv/streamed?raw").text(), "x");
}
