//! Proxyless gRPC over xDS: a grpcio client (`tests/python/grpc_proxyless.py`, grpcio from
//! PyPI) with the `GRPC_XDS_BOOTSTRAP` that `praetor connect grpc-bootstrap` writes dials
//! `xds:///db` with no sidecar of its own. praetor serves it the gRPC flavour of its
//! proxy's resources (an API listener, an EDS cluster whose mTLS names the bootstrap's
//! file-watcher certificates, weighted localities); the call reaches a Python gRPC `db`
//! server through db's Envoy sidecar with mTLS (the client's fallback credentials carry no
//! certificate, so an answer proves the xDS security was applied); a deny intention makes
//! the next call fail with Envoy's RBAC denial and an allow restores it.

use crate::common;
use crate::envoy;

use common::{praetor_binary, Agent, TempDir};
use envoy::{free_port, register_with_sidecar, wait_for, write_config, Envoy};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the mesh may take to answer the first call (Envoy's start, the sidecar's check
/// turning healthy, the client's xDS round trips).
const MESH_READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long one call's answer may take to be printed (the script's deadline is 10 s).
const CALL_ANSWER_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an intention change may take to decide the next call.
const INTENTION_TIMEOUT: Duration = Duration::from_secs(10);

fn script() -> String {
    format!(
        "{}/tests/python/grpc_proxyless.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The grpcio client: one call per line written, one answer line read.
struct GrpcClient {
    _child: Killed,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    log: std::path::PathBuf,
}

impl GrpcClient {
    fn start(bootstrap: &std::path::Path, dir: &TempDir) -> GrpcClient {
        let log = dir.path().join("grpc-client.log");
        let mut child = Command::new("python3")
            .args([&script(), "client", "xds:///db"])
            .env("GRPC_XDS_BOOTSTRAP", bootstrap)
            .env("GRPC_VERBOSITY", "ERROR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("python3 must be installed (tests/run.sh installs it)");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        GrpcClient {
            _child: Killed(child),
            stdin,
            lines,
            log,
        }
    }

    /// One call: `Ok(answer)` or `Err("<status code> <details>")`.
    fn call(&mut self, message: &str) -> Result<String, String> {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
        let line = self
            .lines
            .recv_timeout(CALL_ANSWER_TIMEOUT)
            .unwrap_or_else(|_| {
                panic!(
                    "the client printed no answer:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                )
            });
        if let Some(answer) = line.strip_prefix("ok ") {
            Ok(answer.to_string())
        } else if let Some(error) = line.strip_prefix("err ") {
            Err(error.to_string())
        } else {
            panic!("unexpected client output {line:?}")
        }
    }
}

/// `praetor connect grpc-bootstrap` with `flags`, its output and exit status.
fn grpc_bootstrap_once(agent: &Agent, flags: &[&str]) -> std::process::Output {
    Command::new(praetor_binary())
        .args(["connect", "grpc-bootstrap", "-once"])
        .arg(format!("-http-addr={}", agent.http_addr()))
        .args(flags)
        .output()
        .unwrap()
}

#[test]
fn a_grpcio_client_reaches_db_over_xds_with_mtls_and_follows_intentions() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("grpc-proxyless");
    let ip = agent.ip;
    let db_port = free_port(ip);
    let db_proxy_port = free_port(ip);

    // The db gRPC server, plain text behind its Envoy sidecar, which speaks gRPC.
    let mut server = Command::new("python3")
        .args([&script(), "serve", &ip.to_string(), &db_port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 must be installed (tests/run.sh installs it)");
    let mut ready = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    let _server = Killed(server);
    assert_eq!(ready.trim(), "ready");
    write_config(
        &agent,
        json!({"Kind": "service-defaults", "Name": "db", "Protocol": "grpc"}),
    );
    register_with_sidecar(&agent, "db", db_port, db_proxy_port, json!([]));
    // web's sidecar registration is what the gRPC client speaks for: its upstream db is
    // the client's `xds:///db`, its destination web the identity of its certificate.
    register_with_sidecar(
        &agent,
        "web",
        free_port(ip),
        free_port(ip),
        json!([{"DestinationName": "db", "LocalBindAddress": ip.to_string(), "LocalBindPort": free_port(ip)}]),
    );
    let db_envoy = Envoy::start(&agent, &dir, "db", &["-sidecar-for", "db"]);

    // -once writes the bootstrap and the certificates and exits.
    let once_dir = dir.path().join("once");
    std::fs::create_dir(&once_dir).unwrap();
    let once = grpc_bootstrap_once(
        &agent,
        &[
            "-sidecar-for",
            "web",
            &format!("-grpc-addr=http://{ip}:8502"),
            &format!("-dir={}", once_dir.display()),
        ],
    );
    assert!(
        once.status.success(),
        "{}",
        String::from_utf8_lossy(&once.stderr)
    );
    let bootstrap: Value =
        serde_json::from_slice(&std::fs::read(once_dir.join("bootstrap.json")).unwrap()).unwrap();
    assert_eq!(bootstrap["node"]["id"], "web-sidecar-proxy");
    assert_eq!(
        bootstrap["xds_servers"][0]["server_uri"],
        format!("{ip}:8502")
    );
    let leaf = std::fs::read_to_string(once_dir.join("leaf.pem")).unwrap();
    // web's leaf, the one the agent hands out for it.
    let agent_leaf = agent.get("/v1/agent/connect/ca/leaf/web").json();
    assert_eq!(leaf, agent_leaf["CertPEM"].as_str().unwrap());
    assert!(std::fs::read_to_string(once_dir.join("roots.pem"))
        .unwrap()
        .contains("BEGIN CERTIFICATE"));
    // A registration that is no proxy is refused with connect envoy's message.
    let refused = grpc_bootstrap_once(
        &agent,
        &["-proxy-id", "web", &format!("-dir={}", once_dir.display())],
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("service is not a Connect proxy"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // The long-running command keeps the files current for the client.
    let live_dir = dir.path().join("live");
    std::fs::create_dir(&live_dir).unwrap();
    let mut bootstrapper = Command::new(praetor_binary())
        .args([
            "connect",
            "grpc-bootstrap",
            "-sidecar-for",
            "web",
            &format!("-http-addr={}", agent.http_addr()),
            &format!("-grpc-addr=http://{ip}:8502"),
            &format!("-dir={}", live_dir.display()),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut written = String::new();
    BufReader::new(bootstrapper.stdout.take().unwrap())
        .read_line(&mut written)
        .unwrap();
    let _bootstrapper = Killed(bootstrapper);
    let bootstrap_path = live_dir.join("bootstrap.json");
    assert_eq!(written.trim(), bootstrap_path.display().to_string());

    let mut client = GrpcClient::start(&bootstrap_path, &dir);
    let answer = wait_for("the gRPC client reaches db", MESH_READY_TIMEOUT, || {
        client.call("hello").map_err(|e| {
            format!(
                "{e}\nclient:\n{}\ndb envoy:\n{}\nagent:\n{}",
                std::fs::read_to_string(&client.log).unwrap_or_default(),
                db_envoy.log(),
                agent.log()
            )
        })
    });
    assert_eq!(answer, "db says hello");
    db_envoy.assert_connected_and_nothing_rejected();
    assert!(
        !agent.log().contains("rejected"),
        "the gRPC client rejected a resource:\n{}",
        agent.log()
    );

    // Deny: the next call fails with the sidecar's RBAC denial.
    let deny = agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        json!({"Action": "deny"}).to_string().as_bytes(),
    );
    assert_eq!(deny.text(), "true\n");
    let start = Instant::now();
    let denial = loop {
        match client.call("denied?") {
            Err(e) => break e,
            Ok(answer) => assert!(
                start.elapsed() < INTENTION_TIMEOUT,
                "still answered after a deny: {answer}"
            ),
        }
    };
    assert!(
        denial.starts_with("PERMISSION_DENIED") && denial.contains("RBAC"),
        "{denial}"
    );

    // Allow restores it.
    let allow = agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        json!({"Action": "allow"}).to_string().as_bytes(),
    );
    assert_eq!(allow.text(), "true\n");
    let start = Instant::now();
    loop {
        match client.call("again") {
            Ok(answer) => {
                assert_eq!(answer, "db says again");
                break;
            }
            Err(e) => assert!(
                start.elapsed() < INTENTION_TIMEOUT,
                "still failing after an allow: {e}"
            ),
        }
    }
}
