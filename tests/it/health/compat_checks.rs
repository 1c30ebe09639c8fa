//! Agent check behaviours as Consul has them, each over real sockets against a real
//! `praetor agent -dev` and named after what it reproduces (looked up in hashicorp/consul:
//! `agent/checks/check.go`, `agent/checks/os_service_unix.go`, `agent/agent.go`,
//! `agent/local/state.go`, `agent/structs/check_type.go`): H2PING checks against a real
//! HTTP/2 server (haproxy, over h2c and over TLS), OSService checks refused as Consul refuses
//! them outside Windows, the floor and period of `DeregisterCriticalServiceAfter` reaping,
//! and `check_update_interval = "0s"` syncing output changes at once.

use crate::common;

use common::{fresh_loopback, Agent, TempDir};
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest haproxy may take to start listening.
const PROXY_START_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a check may take to reach an expected status.
const CHECK_STATUS_WAIT: Duration = Duration::from_secs(20);
/// haproxy's ports on its own loopback address: HTTP/2 without TLS, and with TLS.
const H2C_PORT: u16 = 28611;
const H2_TLS_PORT: u16 = 28612;
/// A port on the proxy's address where nothing listens.
const CLOSED_PORT: u16 = 28613;

/// haproxy serving HTTP/2 (it answers PING frames itself), stopped by PID when dropped.
struct Haproxy {
    child: Child,
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A self-signed certificate and key for the proxy, made with openssl.
fn self_signed(dir: &Path, ip: IpAddr) -> String {
    let output = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=h2.test",
            "-addext",
        ])
        .arg(format!("subjectAltName=DNS:h2.test,IP:{ip}"))
        .args(["-keyout", "h2.key", "-out", "h2.pem"])
        .current_dir(dir)
        .output()
        .expect("openssl is installed by tests/run.sh");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let combined = [
        std::fs::read(dir.join("h2.pem")).unwrap(),
        std::fs::read(dir.join("h2.key")).unwrap(),
    ]
    .concat();
    let path = dir.join("h2-combined.pem");
    std::fs::write(&path, combined).unwrap();
    path.display().to_string()
}

fn start_h2_server(dir: &Path, ip: IpAddr) -> Haproxy {
    let certificate = self_signed(dir, ip);
    let config = format!(
        "global\n  maxconn 64\n\
         defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
         frontend h2c\n  bind {ip}:{H2C_PORT} proto h2\n  http-request return status 200\n\
         frontend h2_tls\n  bind {ip}:{H2_TLS_PORT} ssl crt {certificate} alpn h2\n  \
           http-request return status 200\n"
    );
    let config_path = dir.join("haproxy.cfg");
    std::fs::write(&config_path, config).unwrap();
    let child = Command::new("haproxy")
        .args(["-db", "-f"])
        .arg(&config_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("haproxy is installed by tests/run.sh");
    let proxy = Haproxy { child };
    let deadline = Instant::now() + PROXY_START_TIMEOUT;
    while ![H2C_PORT, H2_TLS_PORT].iter().all(|port| {
        TcpStream::connect_timeout(&SocketAddr::new(ip, *port), Duration::from_millis(200)).is_ok()
    }) {
        assert!(Instant::now() < deadline, "haproxy did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
    proxy
}

fn register_check(agent: &Agent, body: Value) {
    let response = agent.put("/v1/agent/check/register", body.to_string().as_bytes());
    assert_eq!(response.status, 200, "{body}: {}", response.text());
}

/// Waits (bounded) until the agent's check `id` has `status` from a probe (a check starts
/// critical with no output, before its first run); returns the check.
fn wait_check(agent: &Agent, id: &str, status: &str) -> Value {
    let deadline = Instant::now() + CHECK_STATUS_WAIT;
    loop {
        let check = agent.get("/v1/agent/checks").json()[id].clone();
        if check["Status"] == status && check["Output"].as_str().is_some_and(|o| !o.is_empty()) {
            return check;
        }
        assert!(
            Instant::now() < deadline,
            "check {id} never became {status}: {check}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Consul's H2PING check (`CheckH2PING`): an HTTP/2 PING, over TLS with ALPN `h2` unless
/// `h2ping_use_tls` is false (it defaults to true when `H2PING` is set); passing with
/// "HTTP2 ping was successful", critical with "Failed to dial to <target>: …" when the
/// connection or the TLS handshake fails. TLS verifies against the system's roots unless
/// `tls_skip_verify`; the check's type is `h2ping` and the catalog keeps its definition.
#[test]
fn h2ping_checks_ping_over_h2c_and_tls() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("h2ping");
    let ip = fresh_loopback();
    let _server = start_h2_server(dir.path(), ip);
    let h2c = format!("{ip}:{H2C_PORT}");
    let tls = format!("{ip}:{H2_TLS_PORT}");
    let closed = format!("{ip}:{CLOSED_PORT}");
    register_check(
        &agent,
        json!({"ID": "h2c", "Name": "h2c", "H2PING": h2c, "H2PingUseTLS": false, "Interval": "1s"}),
    );
    register_check(
        &agent,
        json!({"ID": "h2-tls", "Name": "h2-tls", "h2ping": tls, "tls_skip_verify": true,
               "interval": "1s"}),
    );
    register_check(
        &agent,
        json!({"ID": "h2-untrusted", "Name": "h2-untrusted", "H2PING": tls, "Interval": "1s"}),
    );
    register_check(
        &agent,
        json!({"ID": "h2-plain-as-tls", "Name": "h2-plain-as-tls", "H2PING": h2c,
               "TLSSkipVerify": true, "Interval": "1s"}),
    );
    register_check(
        &agent,
        json!({"ID": "h2-closed", "Name": "h2-closed", "H2PING": closed,
               "H2PingUseTLS": false, "Interval": "1s", "Timeout": "2s"}),
    );

    let passing = wait_check(&agent, "h2c", "passing");
    assert_eq!(passing["Output"], "HTTP2 ping was successful");
    assert_eq!(passing["Type"], "h2ping");
    let passing = wait_check(&agent, "h2-tls", "passing");
    assert_eq!(passing["Output"], "HTTP2 ping was successful");

    // Without skip-verify the self-signed certificate is not trusted: the dial fails.
    let untrusted = wait_check(&agent, "h2-untrusted", "critical");
    let output = untrusted["Output"].as_str().unwrap();
    assert!(
        output.starts_with(&format!("Failed to dial to {tls}: ")),
        "{output}"
    );
    assert!(output.to_lowercase().contains("certificate"), "{output}");
    // TLS is the default: a plaintext HTTP/2 server fails the handshake.
    let plain = wait_check(&agent, "h2-plain-as-tls", "critical");
    let output = plain["Output"].as_str().unwrap();
    assert!(
        output.starts_with(&format!("Failed to dial to {h2c}: ")),
        "{output}"
    );
    let closed_check = wait_check(&agent, "h2-closed", "critical");
    let output = closed_check["Output"].as_str().unwrap();
    assert!(
        output.starts_with(&format!("Failed to dial to {closed}: ")),
        "{output}"
    );
    assert!(output.contains("connection refused"), "{output}");

    // The catalog carries the check's type and definition.
    let node = agent.get("/v1/agent/self").json()["Config"]["NodeName"]
        .as_str()
        .unwrap()
        .to_string();
    let checks = agent.get(&format!("/v1/health/node/{node}")).json();
    let synced = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["CheckID"] == "h2c")
        .cloned()
        .unwrap_or_else(|| panic!("h2c in the catalog: {checks}"));
    assert_eq!(synced["Type"], "h2ping");
    assert_eq!(synced["Definition"]["H2PING"], h2c.as_str());
    assert!(synced["Definition"].get("H2PingUseTLS").is_none());
    let tls_synced = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["CheckID"] == "h2-untrusted")
        .cloned()
        .unwrap();
    assert_eq!(tls_synced["Definition"]["H2PingUseTLS"], true);

    // An H2PING check needs an interval, with Consul's words.
    let response = agent.put(
        "/v1/agent/check/register",
        json!({"Name": "no-interval", "H2PING": h2c})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(response.status, 400);
    assert_eq!(
        response.text(),
        "Invalid check: Interval must be > 0 for Script, HTTP, H2PING, TCP, UDP or OSService checks"
    );
}

/// Consul checks OS services through the Windows service manager only: on Linux its
/// `NewOSServiceClient` answers "not implemented", so the agent refuses an OSService check
/// (500) whether registered alone or with a service, and nothing of it stays registered.
#[test]
fn os_service_checks_are_refused_on_linux_as_consul_refuses_them() {
    let agent = Agent::dev(&[]);
    let response = agent.put(
        "/v1/agent/check/register",
        json!({"ID": "sshd", "Name": "sshd", "OSService": "sshd", "Interval": "10s"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(response.status, 500, "{}", response.text());
    assert_eq!(response.text(), "not implemented");
    assert!(agent.get("/v1/agent/checks").json().get("sshd").is_none());

    let response = agent.put(
        "/v1/agent/service/register",
        json!({"Name": "db", "Check": {"OSService": "postgresql", "Interval": "10s"}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(response.status, 500, "{}", response.text());
    assert_eq!(response.text(), "not implemented");
    assert!(agent.get("/v1/agent/services").json().get("db").is_none());

    // Validation comes first, as in Consul: no interval is a 400.
    let response = agent.put(
        "/v1/agent/check/register",
        json!({"Name": "sshd", "OSService": "sshd"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(response.status, 400);
    assert!(
        response.text().contains("Interval must be > 0"),
        "{}",
        response.text()
    );
}

fn catalog_has(agent: &Agent, service: &str) -> bool {
    !agent
        .get(&format!("/v1/catalog/service/{service}"))
        .json()
        .as_array()
        .unwrap()
        .is_empty()
}

/// Consul raises a `DeregisterCriticalServiceAfter` below `check_deregister_interval_min`
/// (one minute) to it, with a warning, and reaps every `check_reap_interval` (30 s); both
/// are shortened here (praetor reads them from the config, Consul only from its own
/// defaults), so a service asking for 1 s is still registered at 3 s and gone after 6 s.
#[test]
fn deregister_critical_service_after_has_consuls_floor() {
    let agent = Agent::dev(&[
        "-hcl",
        "check_deregister_interval_min = \"6s\" check_reap_interval = \"1s\"",
    ]);
    let started = Instant::now();
    let response = agent.put(
        "/v1/agent/service/register",
        json!({"Name": "doomed", "Check": {"CheckID": "doomed-ttl", "TTL": "30s",
               "DeregisterCriticalServiceAfter": "1s"}})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(response.status, 200, "{}", response.text());
    // The check starts critical. At 3 s the 1 s asked for has long passed, the floor not.
    std::thread::sleep(Duration::from_secs(3).saturating_sub(started.elapsed()));
    assert!(catalog_has(&agent, "doomed"), "reaped before the 6 s floor");
    let deadline = Instant::now() + Duration::from_secs(15);
    while catalog_has(&agent, "doomed") {
        assert!(Instant::now() < deadline, "never reaped");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        started.elapsed() >= Duration::from_secs(6),
        "reaped after {:?}",
        started.elapsed()
    );
    assert!(agent
        .log()
        .contains("check \"doomed-ttl\" has deregister interval below minimum"));
}

/// `check_update_interval = "0s"` turns Consul's deferral of output-only changes off: every
/// output change syncs at once (`agent/local/state.go` defers only when the interval is
/// positive).
#[test]
fn check_update_interval_zero_syncs_output_at_once() {
    let agent = Agent::dev(&["-hcl", "check_update_interval = \"0s\""]);
    let response = agent.put(
        "/v1/agent/service/register",
        json!({"Name": "chatty", "Check": {"CheckID": "chatty-ttl", "TTL": "60s"}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(response.status, 200);
    let output = || agent.get("/v1/health/checks/chatty").json()[0]["Output"].clone();
    for note in ["one", "two", "three"] {
        assert_eq!(
            agent
                .put(&format!("/v1/agent/check/pass/chatty-ttl?note={note}"), b"")
                .status,
            200
        );
        assert_eq!(output(), note, "an output-only change synced with the call");
    }
}
