//! Shared harness for real-socket tests: spawns real `praetor` processes on their own loopback
//! addresses, talks to them over real TCP, and stops them by PID.
//!
//! Every agent gets a distinct 127.x.y.z address (derived from the test process id and a
//! counter) with Consul's default ports, so tests run in parallel with each other and with
//! other agents on the machine without port races.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static NEXT_ADDRESS: AtomicU32 = AtomicU32::new(1);

/// Addresses one block of the fourth octet holds.
const ADDRESSES_PER_BLOCK: u32 = 250;

/// A fresh loopback address for one agent, never one this process handed out before: all
/// integration tests share one process, and a long test (a soak, 40 servers and clients)
/// may still hold its addresses while the others go through thousands.
pub fn fresh_loopback() -> IpAddr {
    let n = NEXT_ADDRESS.fetch_add(1, Ordering::SeqCst);
    let pid = std::process::id();
    // 127.(100..228).(pid-derived + block).(counter) keeps clear of 127.0.0.x used by
    // humans; each block of 250 moves the third octet on, so one process has 62,500 before
    // any address repeats.
    let second = 100 + (pid % 128) as u8;
    let block = n / ADDRESSES_PER_BLOCK;
    assert!(
        block < 250,
        "a test process used more than 62,500 loopback addresses"
    );
    let third = ((pid / 128 + block) % 250) as u8 + 1;
    IpAddr::V4(Ipv4Addr::new(
        127,
        second,
        third,
        (n % ADDRESSES_PER_BLOCK) as u8 + 1,
    ))
}

pub fn praetor_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_praetor"))
}

/// Runs `praetor` in `dir` and requires success (`praetor tls ca create`, …).
pub fn praetor_in(dir: &Path, args: &[&str]) {
    let output = Command::new(praetor_binary())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run praetor");
    assert!(
        output.status.success(),
        "praetor {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "praetor-test-{name}-{}-{}",
            std::process::id(),
            NEXT_ADDRESS.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running agent process.
pub struct Agent {
    pub child: Option<Child>,
    pub ip: IpAddr,
    pub http_port: u16,
    pub args: Vec<String>,
    pub log_path: PathBuf,
    /// The data directory the harness gave a `-dev` agent started without `-data-dir`: a killed
    /// agent cannot remove its own temporary directory (64 MiB of preallocated log each), so
    /// the harness owns it and removes it after the process is gone.
    owned_data_dir: Option<TempDir>,
}

impl Agent {
    /// Starts `praetor agent -dev` on a fresh address with extra args, waiting until it leads.
    pub fn dev(extra: &[&str]) -> Agent {
        Agent::dev_at(fresh_loopback(), extra)
    }

    /// [`Agent::dev`] on `ip` (an address the test already handed out, as for a WAN join).
    pub fn dev_at(ip: IpAddr, extra: &[&str]) -> Agent {
        Agent::dev_on(ip, false, extra)
    }

    /// Like [`Agent::dev`], with the DNS interface on port 8600 of the agent's address.
    pub fn dev_with_dns(extra: &[&str]) -> Agent {
        Agent::dev_on(fresh_loopback(), true, extra)
    }

    /// A `-dev` agent bound to `ip`, with or without its DNS interface, once it leads.
    fn dev_on(ip: IpAddr, dns: bool, extra: &[&str]) -> Agent {
        let mut args: Vec<String> = vec![
            "agent".into(),
            "-dev".into(),
            "-bind".into(),
            ip.to_string(),
            "-client".into(),
            ip.to_string(),
        ];
        if !dns {
            args.push("-dns-port=-1".into());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let agent = Agent::spawn(ip, 8500, args);
        agent.wait_ready();
        agent
    }

    /// The DNS address of an agent started with [`Agent::dev_with_dns`].
    pub fn dns_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, 8600)
    }

    pub fn spawn(ip: IpAddr, http_port: u16, mut args: Vec<String>) -> Agent {
        let mut owned_data_dir = None;
        let has_data_dir = args
            .iter()
            .any(|a| a == "-data-dir" || a.starts_with("-data-dir="));
        if args.iter().any(|a| a == "-dev") && !has_data_dir {
            let dir = TempDir::new(&format!("dev-{ip}"));
            args.push("-data-dir".into());
            args.push(dir.path().display().to_string());
            owned_data_dir = Some(dir);
        }
        let log_path =
            std::env::temp_dir().join(format!("praetor-test-{}-{}.log", ip, std::process::id()));
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(praetor_binary())
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawning praetor");
        Agent {
            child: Some(child),
            ip,
            http_port,
            args,
            log_path,
            owned_data_dir,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.http_port)
    }

    pub fn http_addr(&self) -> String {
        self.addr().to_string()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("agent running").id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Waits until the agent answers and knows a leader (bounded: 20 s).
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(r) = try_request(self.addr(), "GET", "/v1/status/leader", b"", &[]) {
                // Dev mode answers pretty JSON, so "no leader" may end with a newline.
                if r.status == 200 && r.body.trim_ascii() != b"\"\"" && !r.body.is_empty() {
                    // A leader exists; wait until this agent serves leader reads too.
                    if let Ok(r) = try_request(self.addr(), "GET", "/v1/kv/__ready_probe", b"", &[])
                    {
                        // 403: ACLs on with default deny; the agent serves requests.
                        if r.status == 404 || r.status == 403 {
                            return;
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!(
            "agent on {} did not become ready; log:\n{}",
            self.ip,
            self.log()
        );
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean exit (bounded: 10 s).
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        // SAFETY: sending a signal to our own child by PID.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the same command line again (same address, same data dir).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart needs a stopped agent");
        // The command line already names its data dir, so `spawn` adds none.
        let mut fresh = Agent::spawn(self.ip, self.http_port, self.args.clone());
        self.child = fresh.child.take();
        // The log now belongs to this agent; the husk must not remove it when it drops.
        self.log_path = std::mem::take(&mut fresh.log_path);
    }

    pub fn get(&self, path: &str) -> HttpResponse {
        request(self.addr(), "GET", path, b"", &[])
    }
    pub fn put(&self, path: &str, body: &[u8]) -> HttpResponse {
        request(self.addr(), "PUT", path, body, &[])
    }
    pub fn delete(&self, path: &str) -> HttpResponse {
        request(self.addr(), "DELETE", path, b"", &[])
    }

    /// A counter of the agent's Prometheus metrics (the agent needs [`PROMETHEUS_HCL`]),
    /// read with `token` when ACLs guard them.
    pub fn prometheus_counter(&self, name: &str, token: Option<&str>) -> u64 {
        let headers: Vec<(&str, &str)> = token.map(|t| ("X-Consul-Token", t)).into_iter().collect();
        let response = request(
            self.addr(),
            "GET",
            "/v1/agent/metrics?format=prometheus",
            b"",
            &headers,
        );
        let text = response.text();
        let line = text
            .lines()
            .find(|line| line.split(' ').next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }
}

/// Agent configuration that keeps cumulative counters for the Prometheus format.
pub const PROMETHEUS_HCL: &str = "telemetry { prometheus_retention_time = \"1m\" }";

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill9();
        // Keep the log of a failing test for the post-mortem; otherwise leave nothing behind.
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log_path);
        }
        drop(self.owned_data_dir.take());
    }
}

#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn index(&self) -> u64 {
        self.header("X-Consul-Index")
            .expect("X-Consul-Index present")
            .parse()
            .unwrap()
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("invalid JSON ({e}): {}", self.text()))
    }
}

pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> HttpResponse {
    try_request(addr, method, path, body, headers)
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"))
}

/// One request on a fresh connection (`Connection: close`), bounded by a 30 s timeout.
pub fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> std::io::Result<HttpResponse> {
    try_request_bounded(addr, method, path, body, headers, Duration::from_secs(30))
}

/// One request on a fresh connection, every step bounded by `timeout`.
pub fn try_request_bounded(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    headers: &[(&str, &str)],
    timeout: Duration,
) -> std::io::Result<HttpResponse> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5).min(timeout))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        raw.push_str(&format!("{name}: {value}\r\n"));
    }
    raw.push_str("\r\n");
    let mut bytes = raw.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    parse_response(&response).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("bad response: {:?}", String::from_utf8_lossy(&response)),
        )
    })
}

/// Parses one response from the front of `raw`; returns it and its length.
pub fn parse_one_response(raw: &[u8]) -> Option<(HttpResponse, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut headers);
    let head_len = match parsed.parse(raw).ok()? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return None,
    };
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or(0);
    if raw.len() < head_len + length {
        return None;
    }
    Some((
        HttpResponse {
            status: parsed.code?,
            headers,
            body: raw[head_len..head_len + length].to_vec(),
        },
        head_len + length,
    ))
}

fn parse_response(raw: &[u8]) -> Option<HttpResponse> {
    parse_one_response(raw).map(|(r, _)| r)
}

/// Sends raw bytes and reads until the server closes or `timeout` passes.
pub fn raw_exchange(addr: SocketAddr, bytes: &[u8], timeout: Duration) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(timeout)).unwrap();
    stream.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    out
}

/// Runs a praetor CLI command and returns (exit code, stdout, stderr).
pub fn cli(args: &[&str], stdin: Option<&[u8]>) -> (i32, String, String) {
    let mut child = Command::new(praetor_binary())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut input = child.stdin.take().unwrap();
        if let Some(data) = stdin {
            input.write_all(data).unwrap();
        }
    }
    let output = child.wait_with_output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `-dns-port=-1` unless `extra` names a DNS port itself: cluster agents serve no DNS by
/// default, and a flag may be given only once.
fn dns_disabled_unless_asked(extra: &[&str]) -> Option<String> {
    let asked = extra.iter().any(|a| a.starts_with("-dns-port"));
    (!asked).then(|| "-dns-port=-1".to_string())
}

/// A cluster of real server processes on loopback, each on its own address.
pub struct Cluster {
    pub servers: Vec<Agent>,
    pub data: Vec<TempDir>,
}

impl Cluster {
    /// Starts `n` servers with `-bootstrap-expect n`, each retrying joins to every server (as
    /// an operator lists them all: a restarted server must find the others even when it is
    /// the first), fault injection enabled, and waits until they agree on a serving leader.
    pub fn start(n: usize, extra: &[&str]) -> Cluster {
        let cluster = Cluster::spawn(n, extra);
        cluster.wait_for_leader(Duration::from_secs(30));
        cluster
    }

    /// Starts the servers as [`Cluster::start`] does without waiting for a leader (for a
    /// cluster whose readiness the test judges itself, e.g. with ACLs denying the probe).
    pub fn spawn(n: usize, extra: &[&str]) -> Cluster {
        let ips: Vec<IpAddr> = (0..n).map(|_| fresh_loopback()).collect();
        let mut servers = Vec::new();
        let mut data = Vec::new();
        for (i, ip) in ips.iter().enumerate() {
            let dir = TempDir::new(&format!("cluster{i}"));
            let mut args: Vec<String> = [
                "agent",
                "-server",
                "-bootstrap-expect",
                &n.to_string(),
                "-node",
                &format!("s{i}-{ip}"),
                "-bind",
                &ip.to_string(),
                "-client",
                &ip.to_string(),
                "-data-dir",
                dir.path().to_str().unwrap(),
                "-retry-join",
                &ips[0].to_string(),
                "-hcl",
                "enable_debug_faults = true",
                "-log-level",
                "debug",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            for other in ips.iter().skip(1) {
                args.push("-retry-join".to_string());
                args.push(other.to_string());
            }
            args.extend(dns_disabled_unless_asked(extra));
            args.extend(extra.iter().map(|s| s.to_string()));
            servers.push(Agent::spawn(*ip, 8500, args));
            data.push(dir);
        }
        Cluster { servers, data }
    }

    /// Starts a client agent (no `-server`) named `client-<ip>` on a fresh address, with its
    /// data in `data`, joined through the first server; `extra` is appended to its flags.
    pub fn start_client(&self, data: &TempDir, extra: &[&str]) -> Agent {
        let ip = fresh_loopback();
        let mut args: Vec<String> = [
            "agent",
            "-node",
            &format!("client-{ip}"),
            "-bind",
            &ip.to_string(),
            "-client",
            &ip.to_string(),
            "-data-dir",
            data.path().to_str().unwrap(),
            "-retry-join",
            &self.servers[0].ip.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(dns_disabled_unless_asked(extra));
        args.extend(extra.iter().map(|s| s.to_string()));
        Agent::spawn(ip, 8500, args)
    }

    /// Index of the server that reports itself leader and serves, waiting up to `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(i) = self.current_leader() {
                return i;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let logs: Vec<String> = self
            .servers
            .iter()
            .map(|s| format!("--- {}\n{}", s.ip, s.log()))
            .collect();
        panic!("no leader within {timeout:?}\n{}", logs.join("\n"));
    }

    /// The running server every running server names as leader, if they agree and it
    /// answers a leader read.
    pub fn current_leader(&self) -> Option<usize> {
        let mut named = None;
        for server in self.servers.iter().filter(|s| s.child.is_some()) {
            let r = try_request_timeout(
                server.addr(),
                "GET",
                "/v1/status/leader?stale",
                Duration::from_secs(2),
            )
            .ok()?;
            let text = String::from_utf8_lossy(&r.body)
                .trim_matches('"')
                .to_string();
            if text.is_empty() {
                return None;
            }
            match &named {
                None => named = Some(text),
                Some(previous) if *previous == text => {}
                Some(_) => return None,
            }
        }
        let leader_ip: IpAddr = named?.rsplit_once(':')?.0.parse().ok()?;
        let index = self
            .servers
            .iter()
            .position(|s| s.ip == leader_ip && s.child.is_some())?;
        let probe = try_request_timeout(
            self.servers[index].addr(),
            "GET",
            "/v1/kv/__leader_probe",
            Duration::from_secs(2),
        )
        .ok()?;
        (probe.status == 404).then_some(index)
    }

    /// Waits until autopilot finds every server healthy and `voters` of them vote. A server
    /// that rejoins after autopilot removed it (a killed server is removed once gossip
    /// declares it failed, as Consul's `cleanup_dead_servers` does) is a non-voter until it
    /// has been healthy for `server_stabilization_time` (10 s by default): killing another
    /// server before then can leave the cluster without a quorum, in praetor as in Consul.
    pub fn wait_for_voters(&self, voters: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        loop {
            if let Some(leader) = self.current_leader() {
                if let Ok(r) = try_request_timeout(
                    self.servers[leader].addr(),
                    "GET",
                    "/v1/operator/autopilot/health",
                    Duration::from_secs(5),
                ) {
                    last = r.text();
                    if r.status == 200 {
                        let health = r.json();
                        let voting = health["Servers"]
                            .as_array()
                            .map_or(0, |s| s.iter().filter(|s| s["Voter"] == true).count());
                        if voting == voters {
                            return;
                        }
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "{voters} healthy voters never reported within {timeout:?}; last health {last}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Blocks traffic between `isolated` and every other server, in both directions.
    pub fn partition(&self, isolated: usize) {
        for (i, server) in self.servers.iter().enumerate() {
            let blocked: Vec<String> = if i == isolated {
                self.servers
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != isolated)
                    .map(|(_, s)| s.ip.to_string())
                    .collect()
            } else {
                vec![self.servers[isolated].ip.to_string()]
            };
            if server.child.is_some() {
                let body = serde_json::json!({ "BlockedPeers": blocked }).to_string();
                let _ = try_request(
                    server.addr(),
                    "PUT",
                    "/v1/agent/debug/faults",
                    body.as_bytes(),
                    &[],
                );
            }
        }
    }

    pub fn heal(&self) {
        for server in self.servers.iter().filter(|s| s.child.is_some()) {
            let _ = try_request(
                server.addr(),
                "PUT",
                "/v1/agent/debug/faults",
                br#"{"BlockedPeers":[]}"#,
                &[],
            );
        }
    }

    /// SIGSTOP / SIGCONT a server.
    pub fn signal(&self, i: usize, signal: i32) {
        // SAFETY: signalling our own child by PID.
        unsafe { libc::kill(self.servers[i].pid() as i32, signal) };
    }
}

/// Like [`try_request`] with a custom read timeout, for probes that must not hang on a
/// paused server.
pub fn try_request_timeout(
    addr: SocketAddr,
    method: &str,
    path: &str,
    timeout: Duration,
) -> std::io::Result<HttpResponse> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    stream.write_all(raw.as_bytes())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    parse_response(&response)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad response"))
}

/// An 8-dimensional coordinate (serf's dimensionality) `x` seconds out on the first axis.
pub fn coordinate_at(x: f64) -> serde_json::Value {
    serde_json::json!({
        "Vec": [x, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        "Error": 0.2,
        "Adjustment": 0.0,
        "Height": 0.00001
    })
}

/// An echo server on `addr`, one thread per connection, for the proxies' tests.
pub fn echo_server(addr: SocketAddr) {
    let listener = std::net::TcpListener::bind(addr).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buffer = [0u8; 16 * 1024];
                loop {
                    match stream.read(&mut buffer) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if stream.write_all(&buffer[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
}

/// Sends `message` through `addr` and reads the echo: `Ok(echo)`, or why not.
pub fn round_trip(addr: SocketAddr, message: &[u8]) -> Result<Vec<u8>, String> {
    let mut stream =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    stream.write_all(message).map_err(|e| e.to_string())?;
    let mut echo = vec![0u8; message.len()];
    let mut read = 0;
    while read < echo.len() {
        match stream.read(&mut echo[read..]) {
            Ok(0) => return Err(format!("closed after {read} bytes")),
            Ok(n) => read += n,
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(echo)
}

/// A PEM public key (EC P-256) made by openssl, for a `jwt` auth method's validation key.
pub fn jwt_public_key_pem() -> String {
    let dir = TempDir::new("jwt-key");
    let private = dir.path().join("key.pem");
    let public = dir.path().join("key.pub.pem");
    for args in [
        vec![
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            private.to_str().unwrap(),
        ],
        vec![
            "pkey",
            "-in",
            private.to_str().unwrap(),
            "-pubout",
            "-out",
            public.to_str().unwrap(),
        ],
    ] {
        let status = std::process::Command::new("openssl")
            .args(&args)
            .status()
            .expect("openssl runs");
        assert!(status.success(), "openssl {args:?}");
    }
    std::fs::read_to_string(public).unwrap()
}

/// The certificate a TLS server at `addr` presents for `server_name` to `openssl s_client`
/// (run with `s_client_args` too: a client certificate, a TLS version), as
/// `openssl x509 -noout <x509_args>` prints it, or why no certificate came.
pub fn presented_certificate(
    addr: SocketAddr,
    server_name: &str,
    s_client_args: &[&str],
    x509_args: &[&str],
) -> Result<String, String> {
    let output = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &addr.to_string(),
            "-servername",
            server_name,
        ])
        .args(s_client_args)
        .stdin(Stdio::null())
        .output()
        .expect("openssl must be installed (tests/run.sh installs it)");
    let text = String::from_utf8_lossy(&output.stdout);
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let Some(start) = text.find(BEGIN) else {
        return Err(format!(
            "no certificate (exit {:?}): {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        ));
    };
    let end = text[start..]
        .find(END)
        .map(|e| start + e + END.len())
        .ok_or("a truncated certificate")?;
    let mut x509 = Command::new("openssl")
        .args(["x509", "-noout"])
        .args(x509_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("openssl must be installed (tests/run.sh installs it)");
    x509.stdin
        .take()
        .expect("piped stdin")
        .write_all(text[start..end].as_bytes())
        .expect("openssl x509 reads the certificate");
    let parsed = x509.wait_with_output().expect("openssl x509 ends");
    Ok(String::from_utf8_lossy(&parsed.stdout).into_owned())
}

/// Runs `tests/python/<script>` with `args` (an independent client: py-consul, or msgpack
/// and the standard library) and returns what it printed; a failure shows its output and
/// the logs of `agents`, and an agent that panicked meanwhile fails the test too. A missing
/// interpreter or module is a failure, not a skip: `tests/run.sh` installs them.
pub fn run_python(script: &str, args: &[&str], agents: &[&Agent]) -> String {
    let path = format!("{}/tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("python3")
        .arg(&path)
        .args(args)
        .output()
        .expect("python3 must be installed (tests/run.sh installs it)");
    let logs = || {
        agents
            .iter()
            .map(|a| format!("--- {}\n{}", a.ip, a.log()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        output.status.success(),
        "{script} {args:?} failed:\nstdout: {}\nstderr: {}\nagent logs:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        logs()
    );
    assert!(
        agents.iter().all(|a| !a.log().contains("panicked")),
        "an agent panicked:\n{}",
        logs()
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Waits until `agent`'s log has a line with every piece of `what` (bounded: 10 s).
pub fn wait_for_log(agent: &Agent, what: &[&str]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !agent
        .log()
        .lines()
        .any(|line| what.iter().all(|w| line.contains(w)))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no log line with {what:?}:\n{}",
            agent.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
