//! Catalog and health benchmarks against a real agent process, every figure next to a
//! baseline measured in the same run:
//!
//! - `throughput`: `health/service/<svc>?passing` with 1,000 and 5,000 instances against KV
//!   GET of one key (wrk, 2 threads, 64 connections), as ratios; and the 5,000/1,000 cost ratio.
//! - `fanout`: 15,000 blocking queries parked on `web` and 4,900 on `api` on one agent; one
//!   `web` instance turns critical; latency from the flip's response to every `web` answer
//!   (p50/p99/max), and how many `api` watchers woke (must be 0).
//! - `memory`: resident memory per service instance (one check each) at 100,000 instances on
//!   a `-dev` agent.
//! - `churn`: registrations and deregistrations through one server's agent endpoint
//!   (`/v1/agent/service/register`, each answered once anti-entropy wrote it through Raft) on
//!   a 3-server cluster, against KV PUT through the same agent with the same concurrency.
//!
//! Run: `cargo bench --bench catalog -- <throughput|fanout|memory|churn|all> [--rounds N]`.
//! Agents listen on `<net>.1` … `<net>.30`, where `<net>` is `$PRAETOR_BENCH_NET` (three
//! octets, default `127.0.88`). The machine is shared: run when quiet and compare medians
//! over rounds.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Loopback network the bench's agents use unless `$PRAETOR_BENCH_NET` names another.
const BENCH_NET_DEFAULT: [u8; 3] = [127, 0, 88];
/// Concurrent keep-alive connections of the churn benchmark, and how long each measurement
/// runs.
const CHURN_CONNECTIONS: usize = 16;
const CHURN_SECONDS: u64 = 5;
/// Distinct service IDs each churn connection cycles through.
const CHURN_IDS_PER_CONNECTION: usize = 50;

/// The agent address with last octet `host` on the bench network.
fn bench_ip(host: u8) -> Ipv4Addr {
    let net = std::env::var("PRAETOR_BENCH_NET")
        .ok()
        .and_then(|text| {
            let octets: Vec<u8> = text.split('.').filter_map(|o| o.parse().ok()).collect();
            <[u8; 3]>::try_from(octets).ok()
        })
        .unwrap_or(BENCH_NET_DEFAULT);
    Ipv4Addr::new(net[0], net[1], net[2], host)
}
/// Blocking queries the fan-out parks on `web`, and on `api` (the agent process can hold
/// about 19,990 sockets: `ulimit -n` is 20,000 and cannot be raised here).
const FANOUT_WEB: usize = 15_000;
const FANOUT_API: usize = 4_900;
/// Connections one fan-out client process holds (its own descriptor limit applies too).
const CLIENT_CONNECTIONS_MAX: usize = 10_000;

fn praetor() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_praetor"))
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into our timespec; CLOCK_MONOTONIC is system-wide, so
    // readings compare across processes.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct AgentProcess {
    child: Child,
    addr: SocketAddr,
    data_dir: PathBuf,
}

impl AgentProcess {
    fn start(dev: bool, ip: Ipv4Addr) -> AgentProcess {
        // Gauges named without the host, so the memory figure reads one name everywhere.
        let server: &[&str] = if dev {
            &["-dev", "-hcl", "telemetry { disable_hostname = true }"]
        } else {
            &[
                "-server",
                "-bootstrap",
                "-hcl",
                "telemetry { disable_hostname = true }",
            ]
        };
        let agent = AgentProcess::spawn(ip, "bench", server);
        agent.wait_ready();
        agent
    }

    /// Starts an agent with `mode_args` (plus its data dir, node name and addresses) without
    /// waiting for it.
    fn spawn(ip: Ipv4Addr, node: &str, mode_args: &[&str]) -> AgentProcess {
        let data_dir =
            std::env::temp_dir().join(format!("praetor-bench-{}-{}", std::process::id(), ip));
        let _ = std::fs::remove_dir_all(&data_dir);
        std::fs::create_dir_all(&data_dir).unwrap();
        let ip_text = ip.to_string();
        let mut args: Vec<String> = vec!["agent".into()];
        args.extend(mode_args.iter().map(|s| s.to_string()));
        // `-dev` too gets the bench's directory, so nothing outlives the run.
        args.push("-data-dir".into());
        args.push(data_dir.to_string_lossy().into_owned());
        args.extend(
            [
                "-node",
                node,
                "-bind",
                &ip_text,
                "-client",
                &ip_text,
                "-dns-port=-1",
                "-log-level",
                "warn",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        let log = std::fs::File::create(data_dir.join("agent.log")).unwrap();
        let child = Command::new(praetor())
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawning praetor");
        AgentProcess {
            child,
            addr: SocketAddr::new(IpAddr::V4(ip), 8500),
            data_dir,
        }
    }

    /// Waits until the agent serves a leader read that shows the leader registered itself.
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok((200, body)) = http(self.addr, "GET", "/v1/catalog/service/consul", b"") {
                if body.len() > 10 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "agent on {} did not become ready; log in {}",
                self.addr,
                self.data_dir.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// CPU time the agent process has used so far (user + system).
    fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // Fields after the parenthesised command name; utime and stime are 14th and 15th.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        ticks as f64 / hz
    }

    fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
            * 1024
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        // SAFETY: terminating our own child by PID.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// One request on a fresh connection.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    parse_response(&response).ok_or_else(|| std::io::Error::other("bad response"))
}

fn parse_response(raw: &[u8]) -> Option<(u16, Vec<u8>)> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut parsed = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(head) = parsed.parse(raw).ok()? else {
        return None;
    };
    Some((parsed.code?, raw[head..].to_vec()))
}

fn header_value(raw: &[u8], name: &str) -> Option<String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut parsed = httparse::Response::new(&mut headers);
    parsed.parse(raw).ok()?;
    parsed
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| String::from_utf8_lossy(h.value).into_owned())
}

fn index_of(addr: SocketAddr, path: &str) -> u64 {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    header_value(&raw, "X-Consul-Index")
        .unwrap()
        .parse()
        .unwrap()
}

/// A keep-alive connection for bulk registration.
struct KeepAlive {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl KeepAlive {
    fn new(addr: SocketAddr) -> KeepAlive {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        KeepAlive {
            stream,
            buffer: Vec::new(),
        }
    }

    fn put(&mut self, path: &str, body: &[u8]) -> u16 {
        let mut request = format!(
            "PUT {path} HTTP/1.1\r\nHost: bench\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        self.stream.write_all(&request).unwrap();
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut parsed = httparse::Response::new(&mut headers);
            if let Ok(httparse::Status::Complete(head)) = parsed.parse(&self.buffer) {
                let length: usize = parsed
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
                    .unwrap_or(0);
                if self.buffer.len() >= head + length {
                    let code = parsed.code.unwrap_or(0);
                    self.buffer.drain(..head + length);
                    return code;
                }
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).unwrap();
            assert!(n > 0, "agent closed the connection");
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Registers `count` instances of `service` spread over nodes of `per_node` instances,
/// each with one passing service check, plus a passing node check per node, using
/// `threads` keep-alive connections.
fn populate(addr: SocketAddr, service: &str, count: usize, per_node: usize, threads: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let next = next.clone();
            let service = service.to_string();
            std::thread::spawn(move || {
                let mut conn = KeepAlive::new(addr);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return;
                    }
                    let node = format!("{service}-node-{}", i / per_node);
                    let third = ((i / per_node) / 250) % 250;
                    let fourth = (i / per_node) % 250 + 1;
                    let body = format!(
                        r#"{{"Node":"{node}","Address":"10.{third}.{fourth}.1","NodeMeta":{{"rack":"r{}"}},
"Service":{{"ID":"{service}-{i}","Service":"{service}","Tags":["v1","blue"],"Port":{}}},
"Checks":[{{"CheckID":"node-alive","Name":"node alive","Status":"passing"}},
{{"CheckID":"{service}-{i}-check","Name":"{service} health","ServiceID":"{service}-{i}","Status":"passing","Output":"HTTP GET http://10.{third}.{fourth}.1:{}/health: 200 OK"}}]}}"#,
                        i % 7,
                        8000 + i % 1000,
                        8000 + i % 1000
                    );
                    assert_eq!(conn.put("/v1/catalog/register", body.as_bytes()), 200);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

fn wrk(url: &str, seconds: u32) -> f64 {
    let output = Command::new("wrk")
        .args(["-t2", "-c64", &format!("-d{seconds}s"), url])
        .output()
        .expect("wrk must be installed");
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in wrk output:\n{text}"))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values[values.len() / 2]
}

fn throughput(rounds: usize) {
    let agent = AgentProcess::start(false, bench_ip(1));
    let started = Instant::now();
    populate(agent.addr, "web1k", 1_000, 1, 4);
    populate(agent.addr, "web5k", 5_000, 1, 4);
    println!("populated 6,000 instances in {:.1?}", started.elapsed());
    assert_eq!(
        http(agent.addr, "PUT", "/v1/kv/bench-key", b"hello")
            .unwrap()
            .0,
        200
    );
    let base = format!("http://{}", agent.addr);
    let check = |path: &str, instances: usize| {
        let (code, body) = http(agent.addr, "GET", path, b"").unwrap();
        let rows: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (code, rows.as_array().unwrap().len()),
            (200, instances),
            "{path}"
        );
        body.len()
    };
    let bytes_1k = check("/v1/health/service/web1k?passing", 1_000);
    let bytes_5k = check("/v1/health/service/web5k?passing", 5_000);
    println!("response bodies: 1,000 instances {bytes_1k} bytes, 5,000 instances {bytes_5k} bytes");
    // Throughput is shared with wrk and with everything else on the machine; the agent's
    // own CPU time per request is the steadier measure of what a query costs.
    let measure = |url: &str| {
        let cpu = agent.cpu_seconds();
        let rate = wrk(url, 5);
        let cpu = agent.cpu_seconds() - cpu;
        (rate, cpu / (rate * 5.0) * 1e6)
    };
    let (mut kv, mut h1, mut h5, mut c1, mut c5, mut ck) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for round in 0..rounds {
        let (k, kc) = measure(&format!("{base}/v1/kv/bench-key"));
        let (a, ac) = measure(&format!("{base}/v1/health/service/web1k?passing"));
        let (b, bc) = measure(&format!("{base}/v1/health/service/web5k?passing"));
        println!(
            "round {}: kv GET {k:.0} req/s ({kc:.1} us CPU/req), health 1k {a:.1} req/s ({ac:.0} us/req), health 5k {b:.1} req/s ({bc:.0} us/req)",
            round + 1
        );
        kv.push(k);
        h1.push(a);
        h5.push(b);
        ck.push(kc);
        c1.push(ac);
        c5.push(bc);
    }
    let (k, a, b) = (median(kv), median(h1), median(h5));
    let (kc, ac, bc) = (median(ck), median(c1), median(c5));
    println!("median throughput: kv GET {k:.0} req/s; health?passing 1,000 instances {a:.1} req/s = {:.4} of KV GET (1:{:.0}); 5,000 instances {b:.1} req/s",
        a / k, k / a);
    println!("median agent CPU per request: kv GET {kc:.1} us, 1,000 instances {ac:.0} us, 5,000 instances {bc:.0} us");
    println!(
        "5,000-instance query cost / 1,000-instance: {:.2}x by agent CPU, {:.2}x by throughput (target <= 6x)",
        bc / ac,
        a / b
    );
}

/// Fan-out client role: opens `count` connections, parks `path` on each, reports READY,
/// then prints one arrival time (monotonic ns) per answer until stdin closes.
fn fanout_client(addr: SocketAddr, count: usize, path: String) {
    let mut runtime = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .with_entries(8192)
        .enable_timer()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let (tx, rx) = flume::unbounded::<u64>();
        let sent = std::rc::Rc::new(std::cell::Cell::new(0usize));
        for _ in 0..count {
            let tx = tx.clone();
            let path = path.clone();
            let sent = sent.clone();
            monoio::spawn(async move {
                use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
                let mut stream = loop {
                    match monoio::net::TcpStream::connect_addr(addr).await {
                        Ok(s) => break s,
                        Err(_) => monoio::time::sleep(Duration::from_millis(20)).await,
                    }
                };
                let request = format!("GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n").into_bytes();
                let (result, _) = stream.write_all(request).await;
                result.unwrap();
                sent.set(sent.get() + 1);
                let mut buffer = Vec::new();
                loop {
                    let (result, chunk) = stream.read(Vec::with_capacity(16 * 1024)).await;
                    match result {
                        Ok(0) | Err(_) => return,
                        Ok(_) => buffer.extend_from_slice(&chunk),
                    }
                    let mut headers = [httparse::EMPTY_HEADER; 32];
                    let mut parsed = httparse::Response::new(&mut headers);
                    if let Ok(httparse::Status::Complete(head)) = parsed.parse(&buffer) {
                        let length: usize = parsed
                            .headers
                            .iter()
                            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                            .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
                            .unwrap_or(0);
                        if buffer.len() >= head + length {
                            let _ = tx.send(monotonic_ns());
                            // Keep the connection open so the server does not see a hang-up.
                            monoio::time::sleep(Duration::from_secs(600)).await;
                            return;
                        }
                    }
                }
            });
        }
        while sent.get() < count {
            monoio::time::sleep(Duration::from_millis(10)).await;
        }
        println!("READY");
        let _ = std::io::stdout().flush();
        // Stdin closing is the signal to report.
        let (done_tx, done_rx) = flume::bounded::<()>(1);
        std::thread::spawn(move || {
            let mut sink = String::new();
            let _ = std::io::stdin().read_line(&mut sink);
            let _ = done_tx.send(());
        });
        let _ = done_rx.recv_async().await;
        let mut arrivals = Vec::new();
        while let Ok(at) = rx.try_recv() {
            arrivals.push(at);
        }
        println!("ARRIVALS {}", arrivals.len());
        for at in arrivals {
            println!("{at}");
        }
        let _ = std::io::stdout().flush();
    });
}

struct ClientProcess {
    child: Child,
}

impl ClientProcess {
    fn start(addr: SocketAddr, count: usize, path: &str) -> ClientProcess {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["fanout-client", &addr.to_string(), &count.to_string(), path])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.as_mut().unwrap();
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        reader.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "READY", "client failed to park its queries");
        ClientProcess { child }
    }

    fn finish(mut self) -> Vec<u64> {
        drop(self.child.stdin.take());
        let mut text = String::new();
        self.child
            .stdout
            .as_mut()
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        let _ = self.child.wait();
        let mut lines = text.lines();
        let count: usize = lines
            .find_map(|l| l.strip_prefix("ARRIVALS "))
            .unwrap()
            .parse()
            .unwrap();
        let arrivals: Vec<u64> = lines.map(|l| l.parse().unwrap()).collect();
        assert_eq!(arrivals.len(), count);
        arrivals
    }
}

fn fanout(rounds: usize) {
    for round in 0..rounds {
        let agent = AgentProcess::start(false, bench_ip(2 + round as u8));
        populate(agent.addr, "web", 10, 5, 2);
        populate(agent.addr, "api", 10, 5, 2);
        let web_index = index_of(agent.addr, "/v1/health/service/web?passing");
        let api_index = index_of(agent.addr, "/v1/health/service/api");
        let web_path = format!("/v1/health/service/web?passing&index={web_index}&wait=10m");
        let api_path = format!("/v1/health/service/api?index={api_index}&wait=10m");
        let parked = Instant::now();
        let mut web_clients = Vec::new();
        let mut left = FANOUT_WEB;
        while left > 0 {
            let n = left.min(CLIENT_CONNECTIONS_MAX);
            web_clients.push(ClientProcess::start(agent.addr, n, &web_path));
            left -= n;
        }
        let api_client = ClientProcess::start(agent.addr, FANOUT_API, &api_path);
        // Every request is written; give the agent a moment to park the last ones.
        std::thread::sleep(Duration::from_secs(2));
        println!("round {}: parked {FANOUT_WEB} web + {FANOUT_API} api queries in {:.1?}; agent RSS {} MiB",
            round + 1, parked.elapsed(), agent.rss_bytes() >> 20);
        // Flip web-3's check to critical.
        let body = r#"{"Node":"web-node-0","SkipNodeUpdate":true,"Check":{"CheckID":"web-3-check","Name":"web health","ServiceID":"web-3","Status":"critical"}}"#;
        let (code, _) = http(agent.addr, "PUT", "/v1/catalog/register", body.as_bytes()).unwrap();
        let flipped = monotonic_ns();
        assert_eq!(code, 200);
        std::thread::sleep(Duration::from_secs(3));
        let mut latencies: Vec<f64> = web_clients
            .into_iter()
            .flat_map(|c| c.finish())
            .map(|at| at.saturating_sub(flipped) as f64 / 1e6)
            .collect();
        let api_woken = api_client.finish().len();
        latencies.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let pct =
            |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
        println!(
            "round {}: web answered {}/{FANOUT_WEB}; after the flip's response: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; api woken {api_woken}/{FANOUT_API}",
            round + 1,
            latencies.len(),
            pct(0.50),
            pct(0.99),
            latencies.last().copied().unwrap_or(f64::NAN),
        );
    }
}

fn memory() {
    const INSTANCES: usize = 100_000;
    let agent = AgentProcess::start(true, bench_ip(20));
    std::thread::sleep(Duration::from_secs(2));
    let before = agent.rss_bytes();
    let started = Instant::now();
    populate(agent.addr, "mem", INSTANCES, 100, 8);
    let elapsed = started.elapsed();
    // Let snapshotting and allocator caches settle.
    std::thread::sleep(Duration::from_secs(10));
    let after = agent.rss_bytes();
    let (code, body) = http(agent.addr, "GET", "/v1/agent/metrics", b"").unwrap();
    assert_eq!(code, 200);
    let metrics: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let instances = metrics["Gauges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["Name"] == "consul.state.service_instances")
        .unwrap()["Value"]
        .as_f64()
        .unwrap();
    println!(
        "registered {INSTANCES} instances ({} per node, one service check each, one node check per node) in {elapsed:.1?} ({:.0}/s); catalog holds {instances}",
        100,
        INSTANCES as f64 / elapsed.as_secs_f64()
    );
    println!(
        "VmRSS before {} MiB, after {} MiB: {:.0} bytes per instance (target <= 1024)",
        before >> 20,
        after >> 20,
        (after.saturating_sub(before)) as f64 / INSTANCES as f64
    );
}

/// Runs `op(connection, thread, n)` on [`CHURN_CONNECTIONS`] keep-alive connections for
/// [`CHURN_SECONDS`]; returns completed operations per second.
fn closed_loop(addr: SocketAddr, op: fn(&mut KeepAlive, usize, usize)) -> f64 {
    let done = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + Duration::from_secs(CHURN_SECONDS);
    let handles: Vec<_> = (0..CHURN_CONNECTIONS)
        .map(|thread| {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut conn = KeepAlive::new(addr);
                let mut n = 0;
                while Instant::now() < until {
                    op(&mut conn, thread, n);
                    n += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    for h in handles {
        h.join().unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// Every other operation registers a service (with a TTL check) through the agent, the next
/// deregisters it; IDs cycle so the catalog stays small.
fn churn_op(conn: &mut KeepAlive, thread: usize, n: usize) {
    let id = format!("churn-{thread}-{}", (n / 2) % CHURN_IDS_PER_CONNECTION);
    if n.is_multiple_of(2) {
        let body = format!(
            r#"{{"ID":"{id}","Name":"churn","Port":{},"Tags":["v1"],"Check":{{"CheckID":"{id}-ttl","TTL":"600s","Status":"passing"}}}}"#,
            8000 + n % 1000
        );
        assert_eq!(conn.put("/v1/agent/service/register", body.as_bytes()), 200);
    } else {
        assert_eq!(
            conn.put(&format!("/v1/agent/service/deregister/{id}"), b""),
            200
        );
    }
}

fn kv_put_op(conn: &mut KeepAlive, thread: usize, n: usize) {
    let path = format!("/v1/kv/churn/{thread}/{}", n % CHURN_IDS_PER_CONNECTION);
    assert_eq!(conn.put(&path, b"some value of a typical size"), 200);
}

fn churn(rounds: usize) {
    let ips: Vec<Ipv4Addr> = (0..3).map(|i| bench_ip(21 + i)).collect();
    let join = ips[0].to_string();
    let servers: Vec<AgentProcess> = ips
        .iter()
        .enumerate()
        .map(|(i, ip)| {
            AgentProcess::spawn(
                *ip,
                &format!("bench-s{i}"),
                &["-server", "-bootstrap-expect", "3", "-retry-join", &join],
            )
        })
        .collect();
    for server in &servers {
        server.wait_ready();
    }
    // Through the first server's agent, whether or not it leads: that is what a Consul user
    // registering on a server sees.
    let addr = servers[0].addr;
    let (mut kv, mut reg) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let k = closed_loop(addr, kv_put_op);
        let r = closed_loop(addr, churn_op);
        println!(
            "round {}: KV PUT {k:.0}/s, agent register+deregister {r:.0}/s ({CHURN_CONNECTIONS} connections, {CHURN_SECONDS} s each)",
            round + 1
        );
        kv.push(k);
        reg.push(r);
    }
    let (k, r) = (median(kv), median(reg));
    println!(
        "median: KV PUT {k:.0}/s; agent registrations and deregistrations {r:.0}/s = {:.2} of KV PUT/s",
        r / k
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("fanout-client") {
        let addr: SocketAddr = args[1].parse().unwrap();
        let count: usize = args[2].parse().unwrap();
        fanout_client(addr, count, args[3].clone());
        return;
    }
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let which = args.first().map(String::as_str).unwrap_or("all");
    if matches!(which, "throughput" | "all") {
        throughput(rounds);
    }
    if matches!(which, "fanout" | "all") {
        fanout(rounds);
    }
    if matches!(which, "memory" | "all") {
        memory();
    }
    if matches!(which, "churn" | "all") {
        churn(rounds);
    }
}
