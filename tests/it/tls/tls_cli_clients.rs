//! Every client command of the CLI against an agent that serves only HTTPS and requires a
//! client certificate, each reached four ways: Consul's flags (`-http-addr https://…`,
//! `-ca-file`, `-client-cert`, `-client-key`, `-tls-server-name`), Consul's variables alone
//! (`CONSUL_HTTP_ADDR`, `CONSUL_HTTP_SSL`, `CONSUL_CAPATH`, `CONSUL_CLIENT_CERT`,
//! `CONSUL_CLIENT_KEY`, `CONSUL_TLS_SERVER_NAME`), `-ca-path` with `CONSUL_CACERT` and
//! `CONSUL_HTTP_SSL_VERIFY`, and a Unix socket (`unix://…`, a real haproxy relaying it to the
//! agent's HTTPS port with a client certificate). Then each variable and flag is shown to be
//! read: removing or spoiling it alone makes the same command fail for its reason.
//!
//! The agent and the certificates are real: `praetor tls` makes the CA and certificates, the
//! agent runs with `ports.http = -1`.

use crate::common;

use common::{fresh_loopback, praetor_binary, Agent, TempDir};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HTTPS_PORT: u16 = 8501;
/// Longest one CLI command may take against the local agent.
const CLI_TIMEOUT: Duration = Duration::from_secs(30);
const KEY: &str = "pUqJrVyVRj5jsiYEkM/tFQYfWyJIv4s3XkvDwy7Cu5s=";

/// Every variable the CLI reads, removed so the test's own environment cannot leak in.
const CLIENT_VARIABLES: &[&str] = &[
    "CONSUL_HTTP_ADDR",
    "CONSUL_HTTP_TOKEN",
    "CONSUL_HTTP_TOKEN_FILE",
    "CONSUL_HTTP_AUTH",
    "CONSUL_HTTP_SSL",
    "CONSUL_HTTP_SSL_VERIFY",
    "CONSUL_CACERT",
    "CONSUL_CAPATH",
    "CONSUL_CLIENT_CERT",
    "CONSUL_CLIENT_KEY",
    "CONSUL_TLS_SERVER_NAME",
    "CONSUL_NAMESPACE",
    "CONSUL_PARTITION",
];

/// Runs `praetor args…` with exactly `env` among the client variables; (code, stdout, stderr).
fn praetor(dir: &Path, args: &[String], env: &[(&str, String)]) -> (i32, String, String) {
    let (out_path, err_path) = (dir.join("out"), dir.join("err"));
    let mut command = Command::new(praetor_binary());
    command
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(&out_path).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err_path).unwrap()));
    for name in CLIENT_VARIABLES {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + CLI_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} did not finish in {CLI_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (
        status.code().unwrap_or(-1),
        std::fs::read_to_string(out_path).unwrap(),
        std::fs::read_to_string(err_path).unwrap(),
    )
}

fn praetor_tls(dir: &Path, args: &[&str]) {
    let output = Command::new(praetor_binary())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The agent's CA, its server certificate (valid for its IP), a CLI certificate, the CA in a
/// directory of its own (for `-ca-path`), and a second CA the agent does not trust.
struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new(ip: IpAddr) -> Pki {
        let dir = TempDir::new("cli-clients-pki");
        let d = dir.path();
        praetor_tls(d, &["tls", "ca", "create"]);
        praetor_tls(
            d,
            &[
                "tls",
                "cert",
                "create",
                "-server",
                &format!("-additional-ipaddress={ip}"),
            ],
        );
        praetor_tls(d, &["tls", "cert", "create", "-cli"]);
        std::fs::create_dir(d.join("cas")).unwrap();
        std::fs::copy(d.join("consul-agent-ca.pem"), d.join("cas/agent-ca.pem")).unwrap();
        std::fs::create_dir(d.join("other")).unwrap();
        praetor_tls(&d.join("other"), &["tls", "ca", "create"]);
        std::fs::create_dir(d.join("other-cas")).unwrap();
        std::fs::copy(
            d.join("other/consul-agent-ca.pem"),
            d.join("other-cas/other-ca.pem"),
        )
        .unwrap();
        // haproxy presents the CLI certificate to the agent: certificate and key in one file.
        let combined = [
            std::fs::read(d.join("dc1-cli-consul-0.pem")).unwrap(),
            std::fs::read(d.join("dc1-cli-consul-0-key.pem")).unwrap(),
        ]
        .concat();
        std::fs::write(d.join("cli-combined.pem"), combined).unwrap();
        Pki { dir }
    }
    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

/// haproxy relaying a Unix socket to the agent's HTTPS port, presenting the CLI certificate
/// and verifying the agent's; stopped by PID when dropped.
struct UnixRelay {
    child: Child,
    socket: PathBuf,
}

impl UnixRelay {
    fn start(dir: &Path, pki: &Pki, agent: SocketAddr) -> UnixRelay {
        let socket = dir.join("agent.sock");
        let config = format!(
            "global\n  maxconn 64\n\
             defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             frontend local\n  bind unix@{socket}\n  default_backend agent\n\
             backend agent\n  server agent {agent} ssl verify required ca-file {ca} crt {crt} sni str(server.dc1.consul)\n",
            socket = socket.display(),
            ca = pki.path("consul-agent-ca.pem"),
            crt = pki.path("cli-combined.pem"),
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
        let relay = UnixRelay { child, socket };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !relay.socket.exists() {
            assert!(Instant::now() < deadline, "haproxy did not start listening");
            std::thread::sleep(Duration::from_millis(50));
        }
        relay
    }
}

impl Drop for UnixRelay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a command reaches the agent: extra flags and the client variables.
struct Route {
    name: &'static str,
    flags: Vec<String>,
    env: Vec<(&'static str, String)>,
}

/// One client command, and what must come back: exit code and a text in stdout (or, for an
/// error the agent answers, in stderr).
struct Call {
    args: Vec<String>,
    success: bool,
    expect: String,
}

fn call(args: &[&str], success: bool, expect: &str) -> Call {
    Call {
        args: args.iter().map(|s| s.to_string()).collect(),
        success,
        expect: expect.to_string(),
    }
}

/// Every client command, in an order where each finds the state it needs. Errors that only
/// the agent can answer (no other voter, no such peer, no such node) prove the request got
/// through as well as a success does.
fn every_command(node: &str, ip: IpAddr, snapshot: &Path) -> Vec<Call> {
    let snapshot = snapshot.display().to_string();
    let import = r#"[{"key":"cli/imported","flags":0,"value":"aQ=="}]"#;
    vec![
        call(
            &["kv", "put", "cli/k", "v"],
            true,
            "Success! Data written to: cli/k",
        ),
        call(&["kv", "get", "cli/k"], true, "v"),
        call(&["kv", "export", "cli/"], true, "\"key\": \"cli/k\""),
        call(&["kv", "import", import], true, "Imported: cli/imported"),
        call(
            &["kv", "delete", "cli/imported"],
            true,
            "Success! Deleted key: cli/imported",
        ),
        call(&["catalog", "datacenters"], true, "dc1"),
        call(&["catalog", "nodes"], true, node),
        call(&["catalog", "services"], true, "consul"),
        call(
            &["services", "register", "-name", "web"],
            true,
            "Registered service: web",
        ),
        call(
            &["services", "deregister", "-id", "web"],
            true,
            "Deregistered service: web",
        ),
        call(
            &["maint", "-enable", "-reason", "tls"],
            true,
            "Node maintenance is now enabled",
        ),
        call(
            &["maint", "-disable"],
            true,
            "Node maintenance is now disabled",
        ),
        call(&["operator", "raft", "list-peers"], true, "leader"),
        call(
            &["operator", "raft", "transfer-leader"],
            false,
            "no other voter",
        ),
        call(
            &["operator", "raft", "remove-peer", "-address=10.0.0.1:8300"],
            false,
            "was not found in the Raft configuration",
        ),
        call(
            &["snapshot", "save", &snapshot],
            true,
            "Saved and verified snapshot to index",
        ),
        call(
            &["snapshot", "restore", &snapshot],
            true,
            "Restored snapshot",
        ),
        call(&["lock", "cli/lock", "echo", "held"], true, "held"),
        call(
            &["watch", "-type", "key", "-key", "cli/k"],
            true,
            "\"Key\": \"cli/k\"",
        ),
        call(&["members"], true, "alive"),
        call(
            &["join", &ip.to_string()],
            true,
            "Successfully joined cluster by contacting 1 nodes.",
        ),
        call(
            &["force-leave", "nobody"],
            false,
            "No node found with name 'nobody'",
        ),
        call(&["reload"], true, "Configuration reload triggered"),
        call(&["event", "-name", "deploy"], true, "Event ID: "),
        call(&["keyring", "-list"], true, KEY),
        call(&["rtt", node], true, "Estimated"),
    ]
}

/// Runs `call` over `route` and checks what came back.
fn check(dir: &Path, route: &Route, call: &Call) {
    // Flags go right after the command's words, before its positional arguments (a child
    // command line of `lock` must stay last).
    let words = match call.args[0].as_str() {
        "kv" | "catalog" | "services" | "snapshot" => 2,
        "operator" => 3,
        _ => 1,
    };
    let mut args: Vec<String> = call.args[..words].to_vec();
    args.extend(route.flags.iter().cloned());
    args.extend(call.args[words..].iter().cloned());
    let (code, out, err) = praetor(dir, &args, &route.env);
    let text = if call.success { &out } else { &err };
    assert!(
        (code == 0) == call.success && text.contains(&call.expect),
        "{}: praetor {args:?} exited {code}, expected {} with {:?}\nstdout: {out}\nstderr: {err}",
        route.name,
        if call.success { "success" } else { "failure" },
        call.expect
    );
}

#[test]
fn every_client_command_speaks_https_with_flags_variables_and_unix_sockets() {
    let ip = fresh_loopback();
    let pki = Pki::new(ip);
    let node = format!("tls-cli-{ip}");
    let hcl = format!(
        "tls {{ defaults {{ ca_file = \"{}\" cert_file = \"{}\" key_file = \"{}\" }} https {{ verify_incoming = true }} }} ports {{ http = -1 https = {HTTPS_PORT} }} encrypt = \"{KEY}\"",
        pki.path("consul-agent-ca.pem"),
        pki.path("dc1-server-consul-0.pem"),
        pki.path("dc1-server-consul-0-key.pem"),
    );
    let mut agent = Agent::spawn(
        ip,
        HTTPS_PORT,
        [
            "agent",
            "-dev",
            "-node",
            &node,
            "-bind",
            &ip.to_string(),
            "-client",
            &ip.to_string(),
            "-dns-port=-1",
            "-hcl",
            &hcl,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    );
    let work = TempDir::new("cli-clients-work");
    let relay = UnixRelay::start(work.path(), &pki, SocketAddr::new(ip, HTTPS_PORT));
    let https = format!("https://{ip}:{HTTPS_PORT}");
    let bare = format!("{ip}:{HTTPS_PORT}");
    let ca = pki.path("consul-agent-ca.pem");
    let (cert, key) = (
        pki.path("dc1-cli-consul-0.pem"),
        pki.path("dc1-cli-consul-0-key.pem"),
    );
    let flags = Route {
        name: "flags",
        flags: vec![
            format!("-http-addr={https}"),
            format!("-ca-file={ca}"),
            format!("-client-cert={cert}"),
            format!("-client-key={key}"),
            "-tls-server-name=server.dc1.consul".to_string(),
        ],
        env: Vec::new(),
    };
    let variables = Route {
        name: "variables",
        flags: Vec::new(),
        env: vec![
            ("CONSUL_HTTP_ADDR", bare.clone()),
            ("CONSUL_HTTP_SSL", "true".to_string()),
            ("CONSUL_CAPATH", pki.path("cas")),
            ("CONSUL_CLIENT_CERT", cert.clone()),
            ("CONSUL_CLIENT_KEY", key.clone()),
            ("CONSUL_TLS_SERVER_NAME", "server.dc1.consul".to_string()),
        ],
    };
    let mixed = Route {
        name: "ca-path flag, CONSUL_CACERT and CONSUL_HTTP_SSL_VERIFY",
        flags: vec![
            format!("-ca-path={}", pki.path("cas")),
            format!("-client-cert={cert}"),
            format!("-client-key={key}"),
        ],
        env: vec![
            ("CONSUL_HTTP_ADDR", https.clone()),
            // A directory whose CA did not sign the agent: the flag wins over the variable.
            ("CONSUL_CAPATH", pki.path("other-cas")),
            ("CONSUL_HTTP_SSL_VERIFY", "true".to_string()),
        ],
    };
    let unix = Route {
        name: "unix socket",
        flags: vec![format!("-http-addr=unix://{}", relay.socket.display())],
        env: Vec::new(),
    };

    // The agent answers over HTTPS only, to a client certificate only.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut ready: Vec<String> = vec!["operator".into(), "raft".into(), "list-peers".into()];
    ready.extend(flags.flags.iter().cloned());
    while !praetor(work.path(), &ready, &[]).1.contains("leader") {
        assert!(
            Instant::now() < deadline,
            "agent not ready:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        TcpStream::connect_timeout(&SocketAddr::new(ip, 8500), Duration::from_secs(2)).is_err(),
        "plain HTTP is off"
    );

    for route in [&flags, &variables, &mixed, &unix] {
        let snapshot = work.path().join(format!("{}.snap", route.name.len()));
        for call in every_command(&node, ip, &snapshot) {
            check(work.path(), route, &call);
        }
    }

    // Each variable is read: removing or spoiling it alone breaks the same command.
    let get = call(&["kv", "get", "cli/k"], true, "v");
    let without = |name: &str| Route {
        name: "variables, one spoiled",
        flags: Vec::new(),
        env: variables
            .env
            .iter()
            .filter(|(n, _)| *n != name)
            .cloned()
            .collect(),
    };
    let with = |name: &'static str, value: &str| {
        let mut route = without(name);
        route.env.push((name, value.to_string()));
        route
    };
    let refused = |route: &Route, expect: &str| {
        check(
            work.path(),
            route,
            &Call {
                args: get.args.clone(),
                success: false,
                expect: expect.to_string(),
            },
        )
    };
    // Without CONSUL_HTTP_SSL the CLI speaks plain HTTP to the TLS port, which says so.
    const PLAIN_TO_TLS: &str = "400 (Client sent an HTTP request to an HTTPS server.)";
    const UNKNOWN_CA: &str = "peer certificate rejected: signed by an unknown authority";
    const WRONG_NAME: &str =
        "peer certificate rejected: certificate is not valid for other.example";
    refused(&without("CONSUL_HTTP_SSL"), PLAIN_TO_TLS);
    refused(&with("CONSUL_HTTP_SSL", "false"), PLAIN_TO_TLS);
    // Without CONSUL_CAPATH the system roots do not know the agent CA.
    refused(&without("CONSUL_CAPATH"), UNKNOWN_CA);
    refused(&with("CONSUL_CAPATH", &pki.path("other-cas")), UNKNOWN_CA);
    // ...unless verification is off.
    check(work.path(), &with("CONSUL_HTTP_SSL_VERIFY", "false"), &get);
    let mut unverified = without("CONSUL_CAPATH");
    unverified
        .env
        .push(("CONSUL_HTTP_SSL_VERIFY", "false".into()));
    check(work.path(), &unverified, &get);
    // CONSUL_CACERT alone replaces the directory.
    let mut cacert = without("CONSUL_CAPATH");
    cacert.env.push(("CONSUL_CACERT", ca.clone()));
    check(work.path(), &cacert, &get);
    // The client certificate is required by the agent and comes in pairs.
    let mut no_pair = without("CONSUL_CLIENT_CERT");
    no_pair.env.retain(|(n, _)| *n != "CONSUL_CLIENT_KEY");
    refused(
        &no_pair,
        "the peer aborted the handshake: it requires a client certificate and we sent none",
    );
    refused(
        &without("CONSUL_CLIENT_KEY"),
        "both client cert and client key must be provided",
    );
    // The name checked is CONSUL_TLS_SERVER_NAME's.
    refused(&with("CONSUL_TLS_SERVER_NAME", "other.example"), WRONG_NAME);
    // The same for each flag.
    let spoiled = |flag: &str, value: &str| Route {
        name: "flags, one spoiled",
        flags: flags
            .flags
            .iter()
            .map(|f| {
                if f.starts_with(&format!("-{flag}=")) {
                    format!("-{flag}={value}")
                } else {
                    f.clone()
                }
            })
            .collect(),
        env: Vec::new(),
    };
    refused(
        &spoiled("ca-file", &pki.path("other/consul-agent-ca.pem")),
        UNKNOWN_CA,
    );
    refused(&spoiled("tls-server-name", "other.example"), WRONG_NAME);
    refused(
        &spoiled("http-addr", &format!("http://{bare}")),
        PLAIN_TO_TLS,
    );
    refused(
        &spoiled("client-key", ""),
        "both client cert and client key must be provided",
    );

    // Last, `leave` over HTTPS stops the agent.
    check(
        work.path(),
        &flags,
        &call(&["leave"], true, "Graceful leave complete"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let child = agent.child.as_mut().unwrap();
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the agent did not leave");
        std::thread::sleep(Duration::from_millis(50));
    }
}
