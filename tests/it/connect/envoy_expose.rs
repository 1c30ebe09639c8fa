//! Expose paths and prepared-query upstreams on real Envoy sidecars configured by a
//! `praetor agent -dev`: an exposed `/health` reaches the application in plain HTTP while
//! every other path on that port is Envoy's 404 and the public listener still takes only
//! mTLS; a path on another port of the application gets its own cluster; Consul's
//! validation refuses a bad `Expose` at registration; with `Expose.Checks` the agent probes
//! the service's HTTP check through a listener of the sidecar on a port of
//! `ports.expose_min_port..=expose_max_port`; a prepared-query upstream carries TCP
//! to the query's service, follows intentions and gains an endpoint when the service gains
//! an instance.

use crate::common;
use crate::envoy;

use common::{echo_server, request, round_trip, Agent, TempDir};
use envoy::{free_port, http_server, register, register_with_sidecar, wait_for, Envoy};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long a sidecar may take to serve its first request (Envoy's start, the first xDS
/// round, the checks turning healthy).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// `(status, body)` of a plain `GET` with curl (status 0: no HTTP answer).
fn curl_get(url: &str) -> (u16, String) {
    let output = Command::new("curl")
        .args(["-s", "--max-time", "5", "-w", "\n%{http_code}", url])
        .output()
        .expect("curl must be installed (tests/run.sh installs it)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.trim().parse().unwrap_or(0), body.to_string())
}

#[test]
fn an_exposed_path_reaches_the_app_without_mtls_and_nothing_else_does() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("envoy-expose");
    let ip = agent.ip;
    let app_port = free_port(ip);
    let metrics_port = free_port(ip);
    let proxy_port = free_port(ip);
    let health_listener = free_port(ip);
    let metrics_listener = free_port(ip);
    http_server(SocketAddr::new(ip, app_port), "app");
    http_server(SocketAddr::new(ip, metrics_port), "metrics");
    let address = ip.to_string();
    register(
        &agent,
        json!({
            "Name": "web", "Port": app_port, "Address": address,
            "Connect": {"SidecarService": {
                "Address": address, "Port": proxy_port,
                "Proxy": {
                    "LocalServiceAddress": address,
                    "Expose": {"Paths": [
                        {"Path": "/health", "LocalPathPort": app_port,
                         "ListenerPort": health_listener},
                        {"Path": "/metrics", "LocalPathPort": metrics_port,
                         "ListenerPort": metrics_listener, "Protocol": "http"},
                    ]},
                },
                "Check": {"TCP": format!("{address}:{proxy_port}"), "Interval": "1s"},
            }}
        }),
    );
    // The registration shows `Expose` as given, in the agent's and the catalog's answers.
    let expected = json!({"Paths": [
        {"ListenerPort": health_listener, "Path": "/health", "LocalPathPort": app_port},
        {"ListenerPort": metrics_listener, "Path": "/metrics", "LocalPathPort": metrics_port,
         "Protocol": "http"},
    ]});
    let service = agent.get("/v1/agent/service/web-sidecar-proxy").json();
    assert_eq!(service["Proxy"]["Expose"], expected, "{service}");
    let catalog = agent.get("/v1/catalog/service/web-sidecar-proxy").json();
    assert_eq!(catalog[0]["ServiceProxy"]["Expose"], expected, "{catalog}");

    let web = Envoy::start(&agent, &dir, "web", &["-sidecar-for", "web"]);
    let health_url = format!("http://{ip}:{health_listener}");
    wait_for(
        "the exposed path answers",
        READY_TIMEOUT,
        || match curl_get(&format!("{health_url}/health")) {
            (200, body) if body == "app" => Ok(()),
            other => Err(format!("{other:?}\n{}", web.log())),
        },
    );
    // Only that path: anything else on the port is Envoy's 404, never the application.
    for path in ["/other", "/health/deeper", "/"] {
        let (status, body) = curl_get(&format!("{health_url}{path}"));
        assert_eq!(status, 404, "{path}: {body}");
        assert_ne!(body, "app");
    }
    // A path on another port of the application goes to that port.
    assert_eq!(
        curl_get(&format!("http://{ip}:{metrics_listener}/metrics")),
        (200, "metrics".to_string())
    );
    assert_eq!(
        curl_get(&format!("http://{ip}:{metrics_listener}/health")).0,
        404
    );

    // The public listener still takes only mTLS: plain HTTP gets no answer.
    let mut plain = TcpStream::connect(SocketAddr::new(ip, proxy_port)).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    plain
        .write_all(b"GET /health HTTP/1.1\r\nhost: web\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).contains("app"),
        "plain text through the public listener: {answer:?}"
    );
    assert!(
        !answer.starts_with(b"HTTP/"),
        "the public listener answered plain HTTP: {answer:?}"
    );

    web.assert_connected_and_nothing_rejected();
    let dump = web.admin_get("/config_dump");
    for name in [
        format!("exposed_path_health:{ip}:{health_listener}"),
        format!("exposed_path_filter_health_{health_listener}"),
        format!("exposed_path_metrics:{ip}:{metrics_listener}"),
        format!("exposed_cluster_{metrics_port}"),
    ] {
        assert!(dump.contains(&name), "config_dump lacks {name}");
    }
    assert!(
        !dump.contains(&format!("exposed_cluster_{app_port}")),
        "a path on the service's own port goes to local_app"
    );
}

/// The agent's view of check `id`: `(Status, Output, ExposedPort)`.
fn agent_check(agent: &Agent, id: &str) -> (String, String, i64) {
    let checks = agent.get("/v1/agent/checks").json();
    let check = &checks[id];
    (
        check["Status"].as_str().unwrap_or_default().to_string(),
        check["Output"].as_str().unwrap_or_default().to_string(),
        check["ExposedPort"].as_i64().unwrap_or(-1),
    )
}

#[test]
fn exposed_checks_are_probed_through_the_sidecar() {
    let ip = common::fresh_loopback();
    let exposed_port = free_port(ip);
    let ports =
        format!("ports {{ expose_min_port = {exposed_port} expose_max_port = {exposed_port} }}");
    let agent = Agent::dev_at(ip, &["-hcl", &ports]);
    let dir = TempDir::new("envoy-expose-checks");
    let app_port = free_port(ip);
    let proxy_port = free_port(ip);
    http_server(SocketAddr::new(ip, app_port), "app");
    let address = ip.to_string();
    let check_url = format!("http://{address}:{app_port}/health");
    register(
        &agent,
        json!({
            "Name": "web", "Port": app_port, "Address": address,
            "Check": {"CheckID": "web-http", "HTTP": check_url, "Interval": "1s"},
            "Connect": {"SidecarService": {
                "Address": address, "Port": proxy_port,
                "Proxy": {"LocalServiceAddress": address, "Expose": {"Checks": true}},
                "Check": {"TCP": format!("{address}:{proxy_port}"), "Interval": "1s"},
            }}
        }),
    );
    // Before the sidecar runs, the check is probed at the sidecar's listener, which nothing
    // serves yet: critical, naming that port, while the application itself is up.
    let exposed_url = format!("http://{address}:{exposed_port}/health");
    wait_for(
        "the check probes the exposed port",
        READY_TIMEOUT,
        || match agent_check(&agent, "web-http") {
            (status, output, port)
                if status == "critical"
                    && output.contains(&exposed_url)
                    && port == i64::from(exposed_port) =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        },
    );
    // The catalog has the port too, with the check's own URL unchanged.
    let catalog = agent.get("/v1/health/checks/web").json();
    assert_eq!(catalog[0]["ExposedPort"], json!(exposed_port), "{catalog}");
    assert_eq!(
        catalog[0]["Definition"]["HTTP"],
        json!(check_url),
        "{catalog}"
    );

    let web = Envoy::start(&agent, &dir, "web", &["-sidecar-for", "web"]);
    wait_for(
        "the check passes through Envoy",
        READY_TIMEOUT,
        || match agent_check(&agent, "web-http") {
            (status, output, _) if status == "passing" && output.contains(&exposed_url) => Ok(()),
            other => Err(format!("{other:?}\n{}", web.log())),
        },
    );
    web.assert_connected_and_nothing_rejected();
    let dump = web.admin_get("/config_dump");
    for needle in [
        format!("exposed_path_health:{address}:{exposed_port}"),
        format!("exposed_path_filter_health_{exposed_port}"),
        "source_prefix_ranges".to_string(),
    ] {
        assert!(dump.contains(&needle), "config_dump lacks {needle}");
    }
    // Only the check's path is routed on that listener.
    assert_eq!(
        curl_get(&format!("http://{address}:{exposed_port}/other")).0,
        404
    );

    // Without the sidecar the check goes back to its own target and the port is freed.
    let r = agent.put("/v1/agent/service/deregister/web-sidecar-proxy", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(
        "the check probes the application again",
        READY_TIMEOUT,
        || match agent_check(&agent, "web-http") {
            (status, output, 0) if status == "passing" && output.contains(&check_url) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
}

#[test]
fn a_bad_expose_is_refused_at_registration_with_consuls_errors() {
    let agent = Agent::dev(&[]);
    let attempt = |paths: Value| -> (u16, String) {
        let body = json!({
            "Name": "web-sidecar-proxy", "Kind": "connect-proxy", "Port": 21000,
            "Proxy": {"DestinationServiceName": "web", "Expose": {"Paths": paths}},
        });
        let r = agent.put("/v1/agent/service/register", body.to_string().as_bytes());
        (r.status, r.text())
    };
    let cases = [
        (
            json!([{"Path": "", "LocalPathPort": 8080, "ListenerPort": 21500}]),
            "Validation failed: expose.paths: empty path exposed",
        ),
        (
            json!([
                {"Path": "/a", "LocalPathPort": 8080, "ListenerPort": 21500},
                {"Path": "/b", "LocalPathPort": 8080, "ListenerPort": 21500},
            ]),
            "Validation failed: expose.paths: duplicate listener ports exposed",
        ),
        (
            json!([{"Path": "/a", "LocalPathPort": 8080}]),
            "Validation failed: expose.paths: invalid listener port: 0",
        ),
        (
            json!([{"Path": "/a", "LocalPathPort": 8080, "ListenerPort": 65536}]),
            "Validation failed: expose.paths: invalid listener port: 65536",
        ),
        (
            json!([{"Path": "/a", "LocalPathPort": 8080, "ListenerPort": 21500,
                    "Protocol": "FOO"}]),
            "Validation failed: protocol 'foo' not supported for path: /a, must be in: [http http2]",
        ),
    ];
    for (paths, message) in cases {
        let (status, text) = attempt(paths.clone());
        assert_eq!((status, text.trim()), (400, message), "{paths}");
    }
    // Nothing of those was registered; a good one is, protocol in any case, and two paths
    // may share a path on different ports as in Consul.
    assert_eq!(agent.get("/v1/agent/service/web-sidecar-proxy").status, 404);
    let (status, text) = attempt(json!([
        {"Path": "/a", "LocalPathPort": 8080, "ListenerPort": 21500, "Protocol": "HTTP2"},
        {"Path": "/a", "LocalPathPort": 8080, "ListenerPort": 21501},
    ]));
    assert_eq!(status, 200, "{text}");
}

/// Envoy's `/clusters` lines of `cluster` that name an endpoint's health.
fn cluster_hosts(envoy: &Envoy, cluster: &str) -> Vec<String> {
    let prefix = format!("{cluster}::");
    envoy
        .admin_get("/clusters")
        .lines()
        .filter(|l| l.starts_with(&prefix) && l.contains("::health_flags::"))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_prepared_query_upstream_carries_tcp_follows_intentions_and_the_store() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("envoy-query");
    let ip = agent.ip;
    let db_port = free_port(ip);
    let upstream_port = free_port(ip);
    echo_server(SocketAddr::new(ip, db_port));
    register_with_sidecar(&agent, "db", db_port, free_port(ip), json!([]));
    let created = request(
        agent.addr(),
        "POST",
        "/v1/query",
        json!({"Name": "db-query", "Service": {"Service": "db"}})
            .to_string()
            .as_bytes(),
        &[],
    );
    assert_eq!(created.status, 200, "{}", created.text());
    register_with_sidecar(
        &agent,
        "web",
        free_port(ip),
        free_port(ip),
        json!([{"DestinationType": "prepared_query", "DestinationName": "db-query",
                "LocalBindAddress": ip.to_string(), "LocalBindPort": upstream_port}]),
    );
    let db = Envoy::start(&agent, &dir, "db", &["-sidecar-for", "db"]);
    let web = Envoy::start(&agent, &dir, "web", &["-sidecar-for", "web"]);
    let upstream = SocketAddr::new(ip, upstream_port);
    let message = b"hello through a prepared query".to_vec();
    wait_for(
        "the query's upstream carries a message",
        READY_TIMEOUT,
        || {
            round_trip(upstream, &message).map_err(|e| {
                format!(
                    "{e}\nweb envoy:\n{}\ndb envoy:\n{}\nexecute: {}",
                    web.log(),
                    db.log(),
                    agent.get("/v1/query/db-query/execute?connect=true").text()
                )
            })
        },
    );
    assert_eq!(round_trip(upstream, &message).unwrap(), message);

    let trust_domain = agent.get("/v1/connect/ca/roots").json()["TrustDomain"]
        .as_str()
        .unwrap()
        .to_string();
    let cluster = format!("db-query.default.dc1.query.{trust_domain}");
    assert_eq!(cluster_hosts(&web, &cluster).len(), 1);
    let dump = web.admin_get("/config_dump");
    for name in [
        format!("prepared_query:db-query:{ip}:{upstream_port}"),
        format!("\"sni\": \"{cluster}\""),
        format!("spiffe://{trust_domain}/ns/default/dc/dc1/svc/db"),
    ] {
        assert!(dump.contains(&name), "config_dump lacks {name}");
    }

    // A second instance of db (with its sidecar) becomes a second endpoint. A plain
    // listener stands in for its Envoy, enough for the sidecar's TCP check to pass.
    let db2_port = free_port(ip);
    let db2_proxy_port = free_port(ip);
    echo_server(SocketAddr::new(ip, db2_proxy_port));
    let address = ip.to_string();
    register(
        &agent,
        json!({
            "ID": "db-2", "Name": "db", "Port": db2_port, "Address": address,
            "Connect": {"SidecarService": {
                "Address": address, "Port": db2_proxy_port,
                "Proxy": {"LocalServiceAddress": address},
                "Check": {"TCP": format!("{address}:{db2_proxy_port}"), "Interval": "1s"},
            }}
        }),
    );
    wait_for(
        "the second db instance is an endpoint",
        READY_TIMEOUT,
        || {
            let hosts = cluster_hosts(&web, &cluster);
            if hosts.len() == 2
                && hosts
                    .iter()
                    .any(|h| h.contains(&db2_proxy_port.to_string()))
            {
                Ok(())
            } else {
                Err(format!("{hosts:?}"))
            }
        },
    );
    // And leaves when a check of its sidecar fails.
    let failing = agent.put(
        "/v1/agent/check/register",
        json!({"Name": "down", "ServiceID": "db-2-sidecar-proxy", "TTL": "30s",
               "Status": "critical"})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(failing.status, 200, "{}", failing.text());
    wait_for("the failing db instance leaves", READY_TIMEOUT, || {
        let hosts = cluster_hosts(&web, &cluster);
        if hosts.len() == 1 && !hosts[0].contains(&db2_proxy_port.to_string()) {
            Ok(())
        } else {
            Err(format!("{hosts:?}"))
        }
    });

    // A deny intention web → db refuses the next connection.
    let deny = agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        json!({"Action": "deny"}).to_string().as_bytes(),
    );
    assert_eq!(deny.text(), "true\n");
    let written = Instant::now();
    while round_trip(upstream, &message).is_ok() {
        assert!(
            written.elapsed() < Duration::from_secs(5),
            "a deny took longer than five seconds"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for envoy in [&web, &db] {
        envoy.assert_connected_and_nothing_rejected();
    }
}
