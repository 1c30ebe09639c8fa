//! The built-in proxy end to end on loopback with real TCP: a client connects to web's
//! upstream listener, web's proxy opens mTLS to db's sidecar, db's proxy hands the bytes to
//! db (an echo server). A `deny` intention refuses the next connection within a second,
//! `allow` restores it; a client without a certificate from the CA is refused by db's
//! proxy; the agent's TCP checks of the proxies' listeners are not logged as failed
//! handshakes, and every log line has the agent's timestamp. A sidecar with Consul's default
//! checks is routable within its check interval, and the wait is explained. Everything runs
//! as real processes: one `praetor agent -dev`, two `praetor connect proxy`.

use crate::common;

use common::{echo_server, praetor_binary, round_trip, Agent, TempDir};
use serde_json::json;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free port on `ip` (bound, read, released).
pub(super) fn free_port(ip: IpAddr) -> u16 {
    TcpListener::bind(SocketAddr::new(ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `praetor connect proxy` process, killed on drop.
struct Proxy {
    child: Child,
    log: std::path::PathBuf,
}

impl Proxy {
    fn start(agent: &Agent, dir: &TempDir, sidecar_for: &str) -> Proxy {
        Proxy::start_with(agent, dir, sidecar_for, &[])
    }

    fn start_with(agent: &Agent, dir: &TempDir, sidecar_for: &str, extra: &[&str]) -> Proxy {
        let log = dir.path().join(format!("proxy-{sidecar_for}.log"));
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
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Proxy { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `message` through `addr` until its echo comes back, at most until `deadline`
/// (then fails with `why`, given the last error); returns how many tries failed first.
fn until_echoed(
    addr: SocketAddr,
    message: &[u8],
    deadline: Instant,
    pause: Duration,
    why: impl Fn(&str) -> String,
) -> usize {
    let mut refused = 0;
    loop {
        match round_trip(addr, message) {
            Ok(echo) => {
                assert_eq!(echo, message);
                return refused;
            }
            Err(e) => {
                refused += 1;
                assert!(Instant::now() < deadline, "{}", why(&e));
                std::thread::sleep(pause);
            }
        }
    }
}

fn register(agent: &Agent, body: serde_json::Value) {
    let r = agent.put("/v1/agent/service/register", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "register: {}", r.text());
}

#[test]
fn client_to_web_upstream_to_db_sidecar_to_db_follows_intentions() {
    let agent = Agent::dev_with_dns(&[]);
    let dir = TempDir::new("connect-proxy");
    let ip = agent.ip;
    let db_port = free_port(ip);
    let db_proxy_port = free_port(ip);
    let web_proxy_port = free_port(ip);
    let upstream_port = free_port(ip);
    echo_server(SocketAddr::new(ip, db_port));

    let tcp_check = |port: u16| json!({"TCP": format!("{ip}:{port}"), "Interval": "1s"});
    register(
        &agent,
        json!({
            "Name": "db", "Port": db_port, "Address": ip.to_string(),
            "Connect": {"SidecarService": {
                "Address": ip.to_string(), "Port": db_proxy_port,
                "Proxy": {"LocalServiceAddress": ip.to_string()},
                "Check": tcp_check(db_proxy_port),
            }}
        }),
    );
    register(
        &agent,
        json!({
            "Name": "web", "Port": free_port(ip), "Address": ip.to_string(),
            "Connect": {"SidecarService": {
                "Address": ip.to_string(), "Port": web_proxy_port,
                "Proxy": {"Upstreams": [
                    {"DestinationName": "db", "LocalBindAddress": ip.to_string(), "LocalBindPort": upstream_port}
                ]},
                "Check": tcp_check(web_proxy_port),
            }}
        }),
    );
    // The sidecar registrations are Consul's.
    let sidecar = agent.get("/v1/agent/service/db-sidecar-proxy").json();
    assert_eq!(sidecar["Kind"], "connect-proxy");
    assert_eq!(sidecar["Service"], "db-sidecar-proxy");
    assert_eq!(sidecar["Proxy"]["DestinationServiceName"], "db");
    assert_eq!(sidecar["Proxy"]["LocalServicePort"], db_port);
    let catalog = agent.get("/v1/catalog/connect/db").json();
    assert_eq!(catalog[0]["ServiceName"], "db-sidecar-proxy", "{catalog}");
    assert_eq!(catalog[0]["ServicePort"], db_proxy_port);
    let db_proxy = Proxy::start(&agent, &dir, "db");
    let web_proxy = Proxy::start_with(&agent, &dir, "web", &["-log-level", "debug"]);
    let upstream = SocketAddr::new(ip, upstream_port);
    let message = b"hello through the mesh".to_vec();
    let deadline = Instant::now() + Duration::from_secs(40);
    until_echoed(
        upstream,
        &message,
        deadline,
        Duration::from_millis(100),
        |e| {
            format!(
                "the mesh never carried a message: {e}\ndb proxy:\n{}\nweb proxy:\n{}\nhealth: {}",
                db_proxy.log(),
                web_proxy.log(),
                agent.get("/v1/health/connect/db").text()
            )
        },
    );
    // DNS answers `db.connect.consul` with db's proxy once its check passes (dig, a real
    // resolver client).
    let dns = agent.dns_addr();
    let dig_srv = || {
        let dig = Command::new("dig")
            .args([
                &format!("@{}", dns.ip()),
                "-p",
                &dns.port().to_string(),
                "+short",
                "+time=2",
                "+tries=3",
                "db.connect.consul",
                "SRV",
            ])
            .output()
            .expect("dig must be installed (tests/run.sh installs it)");
        String::from_utf8_lossy(&dig.stdout).into_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let srv = dig_srv();
        if srv.contains(&format!(" {db_proxy_port} ")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "db.connect.consul SRV: {srv}\nhealth: {}",
            agent.get("/v1/health/connect/db").text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Each sidecar's TCP check opened and closed a connection to its public listener every
    // second all along (the mesh only carries traffic once db's check passed): the proxies
    // do not call that a failed handshake. At the default level they say nothing of it; at
    // `-log-level debug` (web's proxy) they say what it was. Every line carries the agent's
    // timestamp and level, as hclog writes them.
    std::thread::sleep(Duration::from_millis(2500));
    let line = regex::Regex::new(
        r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z \[(TRACE|DEBUG|INFO|WARN|ERROR)\] {1,2}proxy: ",
    )
    .unwrap();
    for (name, log) in [("db", db_proxy.log()), ("web", web_proxy.log())] {
        assert!(!log.contains("handshake"), "{name}'s proxy:\n{log}");
        assert!(
            log.contains("[INFO]  proxy: serving"),
            "{name}'s proxy:\n{log}"
        );
        for l in log.lines() {
            assert!(line.is_match(l), "{name}'s proxy logged {l:?}");
        }
    }
    let web_log = web_proxy.log();
    assert!(
        web_log.contains("[DEBUG] proxy: connection from ")
            && web_log.contains("closed before sending anything (a TCP check)"),
        "{web_log}"
    );
    assert!(!db_proxy.log().contains("[DEBUG]"), "{}", db_proxy.log());

    // A megabyte goes through whole.
    let big: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    assert_eq!(round_trip(upstream, &big).unwrap(), big);

    // Deny: the next connection is refused within a second.
    let written = Instant::now();
    let deny = agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        json!({"Action": "deny"}).to_string().as_bytes(),
    );
    assert_eq!(deny.text(), "true\n");
    loop {
        if round_trip(upstream, &message).is_err() {
            break;
        }
        assert!(
            written.elapsed() < Duration::from_secs(1),
            "a deny took longer than a second"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        written.elapsed() < Duration::from_secs(1),
        "refused only after {:?}",
        written.elapsed()
    );
    assert!(db_proxy.log().contains("refused"), "{}", db_proxy.log());

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

    // db's proxy refuses a client that shows no certificate of the mesh: nothing it sends
    // reaches db (whose echo would come back).
    let mut child = Command::new("timeout")
        .args([
            "10",
            "openssl",
            "s_client",
            "-quiet",
            "-connect",
            &format!("{ip}:{db_proxy_port}"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl must be installed (tests/run.sh installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"ping-from-outside\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        !stdout.contains("ping-from-outside"),
        "a client without a certificate reached db: {stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    drop(web_proxy);
    drop(db_proxy);
}

/// A sidecar registered with Consul's default checks, started at once: how long until the
/// first connection goes through, and why it is not at once. Its "Connect Sidecar
/// Listening" TCP check starts critical (as every check registered without a status does in
/// Consul) and first runs after a random pause of up to its 10 s interval (Consul staggers
/// every check's first run so that checks registered together do not probe in step); until
/// it passes, db's proxy is not among db's healthy proxies and web's upstream has nowhere
/// to go, which web's proxy says. If that first probe comes before db's proxy listens, the
/// next one is an interval later: so the bound is two intervals.
#[test]
fn a_sidecar_with_the_default_checks_is_routable_within_its_check_interval() {
    const CHECK_INTERVAL: Duration = Duration::from_secs(10);
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("connect-proxy-default-checks");
    let ip = agent.ip;
    let db_port = free_port(ip);
    let upstream_port = free_port(ip);
    echo_server(SocketAddr::new(ip, db_port));
    let registered = Instant::now();
    register(
        &agent,
        json!({
            "Name": "db", "Port": db_port, "Address": ip.to_string(),
            "Connect": {"SidecarService": {"Address": ip.to_string(),
                "Proxy": {"LocalServiceAddress": ip.to_string()}}}
        }),
    );
    register(
        &agent,
        json!({
            "Name": "web", "Port": free_port(ip), "Address": ip.to_string(),
            "Connect": {"SidecarService": {"Address": ip.to_string(), "Proxy": {"Upstreams": [
                {"DestinationName": "db", "LocalBindAddress": ip.to_string(), "LocalBindPort": upstream_port}
            ]}}}
        }),
    );
    // Consul's default checks, the TCP one critical until it has seen the proxy listen
    // (nothing listens yet).
    let checks = agent
        .get("/v1/health/checks/db-sidecar-proxy")
        .json()
        .as_array()
        .cloned()
        .unwrap();
    let listening = checks
        .iter()
        .find(|c| c["Name"] == "Connect Sidecar Listening")
        .unwrap_or_else(|| panic!("{checks:?}"));
    assert_eq!(listening["Interval"], "10s", "{listening}");
    assert_eq!(listening["Status"], "critical", "{listening}");
    assert!(
        checks
            .iter()
            .any(|c| c["Name"] == "Connect Sidecar Aliasing db"),
        "{checks:?}"
    );
    let db_proxy = Proxy::start(&agent, &dir, "db");
    let web_proxy = Proxy::start(&agent, &dir, "web");
    let upstream = SocketAddr::new(ip, upstream_port);
    let message = b"first through the mesh".to_vec();
    let deadline = registered + 2 * CHECK_INTERVAL + Duration::from_secs(5);
    let refused = until_echoed(
        upstream,
        &message,
        deadline,
        Duration::from_millis(50),
        |e| {
            format!(
            "not routable {:?} after registration: {e}\ndb proxy:\n{}\nweb proxy:\n{}\nchecks: {}",
            registered.elapsed(),
            db_proxy.log(),
            web_proxy.log(),
            agent.get("/v1/health/checks/db-sidecar-proxy").text()
        )
        },
    );
    let elapsed = registered.elapsed();
    println!(
        "measure registration_to_first_connection_ms {} (refused {refused} before)",
        elapsed.as_millis()
    );
    if refused > 0 {
        // Each connection made before db's proxy was healthy was closed, and web's proxy
        // said why in words a user can act on.
        let log = web_proxy.log();
        assert!(
            log.contains(
                "no healthy proxy of db: none is registered, or none passes its health checks yet"
            ),
            "{log}"
        );
    }
}
