//! Operating an agent as a service, with real processes: systemd's readiness protocol on a
//! real datagram socket, SIGHUP reloads, the pid file, log files with rotation and JSON
//! lines, `/v1/agent/monitor` and `praetor monitor`, `/v1/agent/host` and
//! `/v1/agent/version`, `praetor info`, `validate` and `debug`, a port another process
//! holds, and the agent flags Consul users pass.

use crate::common;

use common::{cli, fresh_loopback, praetor_binary, request, Agent, TempDir};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Polls `condition` every 50 ms until it holds or `timeout` passes.
fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    condition()
}

fn signal(pid: u32, signal: i32) {
    // SAFETY: signalling a child process we started, by its PID.
    unsafe { libc::kill(pid as i32, signal) };
}

/// The dev agent's command line on `ip`, without DNS.
fn dev_args(ip: IpAddr, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "agent",
        "-dev",
        "-bind",
        &ip.to_string(),
        "-client",
        &ip.to_string(),
        "-dns-port=-1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Waits for a child to exit (bounded) and returns its exit code.
fn exit_code(child: &mut Child, timeout: Duration) -> Option<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `praetor agent …` expecting it to refuse to start; returns (exit code, stderr).
fn refused_start(args: &[String]) -> (Option<i32>, String) {
    let mut child = Command::new(praetor_binary())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let code = exit_code(&mut child, Duration::from_secs(30));
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (code, stderr)
}

#[test]
fn systemd_hears_ready_once_the_agent_serves_and_stopping_at_shutdown() {
    let dir = TempDir::new("notify");
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let ip = fresh_loopback();
    let data = TempDir::new("notify-data");
    let mut args = dev_args(ip, &["-data-dir"]);
    args.push(data.path().display().to_string());
    let mut child = Command::new(praetor_binary())
        .args(&args)
        .env("NOTIFY_SOCKET", &socket_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 256];
    let n = socket.recv(&mut buf).expect("READY=1 within 30 s");
    assert_eq!(&buf[..n], b"READY=1");
    // Ready means serving: the very next request is answered.
    let addr = SocketAddr::new(ip, 8500);
    let answer = request(addr, "GET", "/v1/agent/self", b"", &[]);
    assert_eq!(answer.status, 200);
    signal(child.id(), libc::SIGTERM);
    let n = socket.recv(&mut buf).expect("STOPPING=1 at shutdown");
    assert_eq!(&buf[..n], b"STOPPING=1");
    assert_eq!(exit_code(&mut child, Duration::from_secs(20)), Some(0));
}

#[test]
fn sighup_reloads_services_and_log_level_and_the_process_stays() {
    let config = TempDir::new("reload-config");
    let pid_dir = TempDir::new("reload-pid");
    let pid_path = pid_dir.path().join("praetor.pid");
    std::fs::write(
        config.path().join("web.json"),
        r#"{"service": {"name": "web", "port": 80}, "log_level": "info"}"#,
    )
    .unwrap();
    let ip = fresh_loopback();
    let mut agent = Agent::spawn(
        ip,
        8500,
        dev_args(
            ip,
            &[
                "-config-dir",
                &config.path().display().to_string(),
                "-pid-file",
                &pid_path.display().to_string(),
            ],
        ),
    );
    agent.wait_ready();
    let pid = agent.pid();
    assert_eq!(std::fs::read_to_string(&pid_path).unwrap(), pid.to_string());
    let services = |agent: &Agent| agent.get("/v1/agent/services").json();
    assert!(services(&agent).get("web").is_some());
    assert!(services(&agent).get("api").is_none());

    let checks = |agent: &Agent| agent.get("/v1/agent/checks").json();
    assert!(checks(&agent).get("api-alive").is_none());
    // At info, a user event's debug line is not logged.
    assert_eq!(agent.put("/v1/event/fire/before", b"").status, 200);
    assert!(wait_until(Duration::from_secs(10), || agent
        .get("/v1/event/list?name=before")
        .text()
        .contains("\"before\"")));

    // A new service and check file, a new log level, node metadata and a setting only a
    // restart applies.
    let api_json = r#"{"service": {"name": "api", "port": 81}, "raft_snapshot_threshold": 20000,
            "check": {"id": "api-alive", "name": "api alive", "ttl": "30s"},
            "node_meta": {"rack": "r2"}}"#;
    std::fs::write(config.path().join("api.json"), api_json).unwrap();
    std::fs::write(
        config.path().join("web.json"),
        r#"{"service": {"name": "web", "port": 80}, "log_level": "debug"}"#,
    )
    .unwrap();
    signal(pid, libc::SIGHUP);
    assert!(
        wait_until(Duration::from_secs(15), || services(&agent)
            .get("api")
            .is_some()),
        "the reload registered the new service; log:\n{}",
        agent.log()
    );
    assert!(services(&agent).get("web").is_some());
    assert_eq!(checks(&agent)["api-alive"]["Name"], "api alive");
    assert!(
        wait_until(Duration::from_secs(10), || agent
            .log()
            .contains("reload: done; applied ")),
        "{}",
        agent.log()
    );
    let log = agent.log();
    assert!(
        log.contains("in effect only after a restart: raft_snapshot_threshold"),
        "{log}"
    );
    assert!(
        log.contains("applied checks, log_level, node_meta, services"),
        "{log}"
    );
    // The new level is in effect: debug lines are logged now, and were not before.
    assert!(!log.contains("agent: new event \"before\""), "{log}");
    assert_eq!(agent.put("/v1/event/fire/after", b"").status, 200);
    assert!(
        wait_until(Duration::from_secs(10), || agent
            .log()
            .contains("[DEBUG] agent: new event \"after\"")),
        "{}",
        agent.log()
    );
    // Node metadata reaches the agent's own answer and the catalog.
    let self_ = agent.get("/v1/agent/self").json();
    assert_eq!(self_["Meta"]["rack"], "r2");
    let node = self_["Config"]["NodeName"].as_str().unwrap().to_string();
    assert!(wait_until(Duration::from_secs(10), || {
        agent.get(&format!("/v1/catalog/node/{node}")).json()["Node"]["Meta"]["rack"] == "r2"
    }));
    assert!(
        agent.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "still running"
    );

    // A broken file changes nothing and stops nothing.
    std::fs::write(config.path().join("broken.json"), "{ not json").unwrap();
    signal(pid, libc::SIGHUP);
    assert!(wait_until(Duration::from_secs(10), || agent
        .log()
        .contains("the configuration in use stays")));
    assert!(services(&agent).get("api").is_some());
    assert!(
        agent.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "still running"
    );

    // `PUT /v1/agent/reload` and `praetor reload` run the same reload and report its
    // failure.
    let answer = agent.put("/v1/agent/reload", b"");
    assert_eq!(answer.status, 500);
    assert!(
        answer.text().starts_with("Failed reloading config"),
        "{}",
        answer.text()
    );
    let (code, _, stderr) = cli(&["reload", "-http-addr", &agent.http_addr()], None);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("Failed reloading config"), "{stderr}");
    std::fs::remove_file(config.path().join("broken.json")).unwrap();
    std::fs::remove_file(config.path().join("api.json")).unwrap();
    let answer = agent.put("/v1/agent/reload", b"");
    assert_eq!((answer.status, answer.text().as_str()), (200, ""));
    assert!(services(&agent).get("api").is_none());
    assert!(checks(&agent).get("api-alive").is_none());
    std::fs::write(config.path().join("api.json"), api_json).unwrap();
    let (code, stdout, stderr) = cli(&["reload", "-http-addr", &agent.http_addr()], None);
    assert_eq!(
        (code, stdout.trim()),
        (0, "Configuration reload triggered"),
        "{stderr}"
    );
    assert!(services(&agent).get("api").is_some());
    assert!(checks(&agent).get("api-alive").is_some());
    assert_eq!(agent.pid(), pid, "the same process throughout");

    // The pid file goes away with a clean exit.
    assert_eq!(agent.terminate().and_then(|s| s.code()), Some(0));
    assert!(!pid_path.exists(), "the pid file was removed at exit");
}

#[test]
fn sighup_takes_in_acl_tokens_from_the_config() {
    const MANAGEMENT: &str = "6d1f0e2a-7b3c-4c1d-9e8f-00112233aabb";
    let config = TempDir::new("reload-acl");
    let acl = |default: &str| {
        format!(
            "acl {{\n  enabled = true\n  default_policy = \"deny\"\n  tokens {{\n    initial_management = \"{MANAGEMENT}\"\n{default}  }}\n}}\n"
        )
    };
    std::fs::write(config.path().join("acl.hcl"), acl("")).unwrap();
    let ip = fresh_loopback();
    let mut agent = Agent::spawn(
        ip,
        8500,
        dev_args(ip, &["-config-dir", &config.path().display().to_string()]),
    );
    agent.wait_ready();
    let with_token = |path: &str| {
        request(
            agent.addr(),
            "GET",
            path,
            b"",
            &[("X-Consul-Token", MANAGEMENT)],
        )
    };
    assert!(
        wait_until(Duration::from_secs(20), || with_token("/v1/acl/token/self")
            .status
            == 200),
        "the initial management token appeared; log:\n{}",
        agent.log()
    );
    // Anonymous requests are denied until the config names a default token.
    assert_eq!(agent.get("/v1/kv/acl-reload").status, 403);
    std::fs::write(
        config.path().join("acl.hcl"),
        acl(&format!("    default = \"{MANAGEMENT}\"\n")),
    )
    .unwrap();
    signal(agent.pid(), libc::SIGHUP);
    assert!(
        wait_until(Duration::from_secs(10), || agent
            .log()
            .contains("reload: done; applied acl.tokens")),
        "{}",
        agent.log()
    );
    assert_eq!(agent.get("/v1/kv/acl-reload").status, 404);
    // And the default token goes away with the next reload that removes it.
    std::fs::write(config.path().join("acl.hcl"), acl("")).unwrap();
    let answer = request(
        agent.addr(),
        "PUT",
        "/v1/agent/reload",
        b"",
        &[("X-Consul-Token", MANAGEMENT)],
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(agent.get("/v1/kv/acl-reload").status, 403);
    assert_eq!(agent.terminate().and_then(|s| s.code()), Some(0));
}

#[test]
fn log_file_rotates_with_consuls_names_and_json_lines() {
    let logs = TempDir::new("logfile");
    let log_dir = format!("{}/", logs.path().display());
    let ip = fresh_loopback();
    let mut agent = Agent::spawn(
        ip,
        8500,
        dev_args(
            ip,
            &[
                "-log-file",
                &log_dir,
                "-log-rotate-bytes=600",
                "-log-rotate-max-files=2",
                "-log-json",
            ],
        ),
    );
    agent.wait_ready();
    // Every reload logs a few lines: enough to rotate several times.
    for _ in 0..6 {
        signal(agent.pid(), libc::SIGHUP);
        std::thread::sleep(Duration::from_millis(200));
    }
    let names = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(logs.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert!(
        wait_until(Duration::from_secs(10), || names().len() == 3),
        "{:?}",
        names()
    );
    let names = names();
    assert_eq!(names[2], "consul.log");
    for rotated in &names[..2] {
        let stamp = rotated
            .strip_prefix("consul-")
            .and_then(|r| r.strip_suffix(".log"))
            .unwrap_or_else(|| panic!("rotated file named {rotated}"));
        assert!(
            stamp.len() >= 19 && stamp.bytes().all(|b| b.is_ascii_digit()),
            "{rotated}"
        );
    }
    let mut lines = 0;
    for name in &names {
        for line in std::fs::read_to_string(logs.path().join(name))
            .unwrap()
            .lines()
        {
            let entry: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {line}"));
            for key in ["@level", "@message", "@module", "@timestamp"] {
                assert!(entry[key].is_string(), "{key} in {line}");
            }
            // hclog's order (sorted keys first), levels and timestamp layout.
            assert!(line.starts_with("{\"@level\":"), "{line}");
            let level = entry["@level"].as_str().unwrap();
            assert!(
                ["trace", "debug", "info", "warn", "error"].contains(&level),
                "{line}"
            );
            assert!(
                is_hclog_timestamp(entry["@timestamp"].as_str().unwrap()),
                "{line}"
            );
            lines += 1;
        }
    }
    assert!(lines > 3);
    // Stderr carries the same JSON lines.
    assert!(
        agent.log().lines().all(|l| l.starts_with("{\"@level\":")),
        "{}",
        agent.log()
    );
    assert_eq!(agent.terminate().and_then(|s| s.code()), Some(0));
}

/// hclog's JSON timestamp: `2006-01-02T15:04:05.000000Z` (UTC, microseconds).
fn is_hclog_timestamp(stamp: &str) -> bool {
    let shape = "dddd-dd-ddTdd:dd:dd.ddddddZ";
    stamp.len() == shape.len()
        && stamp.bytes().zip(shape.bytes()).all(|(c, s)| match s {
            b'd' => c.is_ascii_digit(),
            _ => c == s,
        })
}

#[test]
fn log_file_rotates_by_age_under_its_own_name() {
    let logs = TempDir::new("logfile-age");
    let path = logs.path().join("agent.out");
    let ip = fresh_loopback();
    let mut agent = Agent::spawn(
        ip,
        8500,
        dev_args(
            ip,
            &[
                "-log-file",
                &path.display().to_string(),
                "-log-rotate-duration=2s",
            ],
        ),
    );
    agent.wait_ready();
    let names = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(logs.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(), vec!["agent.out"]);
    std::thread::sleep(Duration::from_millis(2500));
    // The next line after the file's age passed rotates it.
    signal(agent.pid(), libc::SIGHUP);
    assert!(
        wait_until(Duration::from_secs(10), || names().len() == 2),
        "{:?}",
        names()
    );
    let names = names();
    assert_eq!(names[1], "agent.out");
    assert!(
        names[0].starts_with("agent-") && names[0].ends_with(".out"),
        "{names:?}"
    );
    let rotated = std::fs::read_to_string(logs.path().join(&names[0])).unwrap();
    assert!(rotated.contains("agent: started node"), "{rotated}");
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .contains("reload: done")
    }));
    assert_eq!(agent.terminate().and_then(|s| s.code()), Some(0));
}

/// Reads a streamed response until `done` holds for what arrived or `timeout` passes.
fn read_until(stream: &mut TcpStream, timeout: Duration, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + timeout;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    while Instant::now() < deadline && !done(&String::from_utf8_lossy(&raw)) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    String::from_utf8_lossy(&raw).into_owned()
}

fn open_monitor(addr: SocketAddr, query: &str) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET /v1/agent/monitor?{query} HTTP/1.1\r\nHost: test\r\n\r\n"
    )
    .unwrap();
    let head = read_until(&mut stream, Duration::from_secs(10), |t| {
        t.contains("\r\n\r\n")
    });
    (stream, head)
}

#[test]
fn monitor_streams_lines_logged_after_it_connected() {
    let agent = Agent::dev(&[]);
    let (mut text, head) = open_monitor(agent.addr(), "loglevel=debug");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("Transfer-Encoding: chunked"), "{head}");
    let (mut json, _) = open_monitor(agent.addr(), "loglevel=info&logjson");
    signal(agent.pid(), libc::SIGHUP);
    let seen = read_until(&mut text, Duration::from_secs(15), |t| {
        t.contains("reload: done")
    });
    assert!(seen.contains("[INFO]  agent: reload: done"), "{seen}");
    // Only what was logged after the request: the start-up lines are not replayed.
    assert!(!seen.contains("agent: started node"), "{seen}");
    let seen = read_until(&mut json, Duration::from_secs(15), |t| {
        t.contains("reload: done")
    });
    let line = seen
        .split('\n')
        .map(|l| l.trim_end_matches('\r'))
        .find(|l| l.starts_with('{') && l.contains("reload: done"))
        .unwrap_or_else(|| panic!("{seen}"));
    let entry: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(entry["@level"], "info");
    assert_eq!(entry["@module"], "agent");
    assert!(entry["@message"]
        .as_str()
        .unwrap()
        .starts_with("reload: done"));
    assert!(entry["@timestamp"].as_str().unwrap().ends_with('Z'));
    // The level is the session's own: an info session gets no debug line.
    assert!(!seen.contains("\"@level\":\"debug\""), "{seen}");

    let bad = agent.get("/v1/agent/monitor?loglevel=verbose");
    assert_eq!(
        (bad.status, bad.text().as_str()),
        (400, "Unknown log level: verbose")
    );
}

#[test]
fn praetor_monitor_prints_lines_until_interrupted() {
    let agent = Agent::dev(&[]);
    let mut monitor = Command::new(praetor_binary())
        .args([
            "monitor",
            "-http-addr",
            &agent.http_addr(),
            "-log-level=debug",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = monitor.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    // The monitor connects in the background: reload until its lines show up.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = false;
    while !seen && Instant::now() < deadline {
        signal(agent.pid(), libc::SIGHUP);
        while let Ok(line) = lines.recv_timeout(Duration::from_millis(500)) {
            if line.contains("agent: reload: done") {
                seen = true;
                break;
            }
        }
    }
    assert!(seen, "praetor monitor printed the reload's line");
    signal(monitor.id(), libc::SIGINT);
    assert_eq!(exit_code(&mut monitor, Duration::from_secs(10)), Some(0));
}

#[test]
fn host_version_and_info_answer_as_consul() {
    let agent = Agent::dev(&[]);
    let host = agent.get("/v1/agent/host");
    assert_eq!(host.status, 200);
    let host = host.json();
    assert!(host["Errors"].is_null(), "{}", host["Errors"]);
    for key in ["Memory", "CPU", "Host", "Disk", "CollectionTime"] {
        assert!(!host[key].is_null(), "{key}");
    }
    assert!(host["Memory"]["total"].as_u64().unwrap() > 0);
    assert_eq!(host["Host"]["os"], "linux");
    let version = agent.get("/v1/agent/version").json();
    assert_eq!(version["HumanVersion"], praetor::CONSUL_API_VERSION);
    for key in ["SHA", "BuildDate", "FIPS"] {
        assert!(version[key].is_string(), "{key}");
    }
    let (code, stdout, stderr) = cli(&["info", "-http-addr", &agent.http_addr()], None);
    assert_eq!(code, 0, "{stderr}");
    let sections: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('\t')).collect();
    let mut sorted = sections.clone();
    sorted.sort();
    assert_eq!(sections, sorted);
    assert!(
        sections.contains(&"raft:") && sections.contains(&"consul:"),
        "{stdout}"
    );
    assert!(stdout.contains("\tleader = true\n"), "{stdout}");
}

#[test]
fn validate_reports_every_problem_or_says_valid() {
    let dir = TempDir::new("validate");
    let good = dir.path().join("good.json");
    std::fs::write(
        &good,
        r#"{"data_dir": "/var/lib/praetor", "service": {"name": "web", "port": 80}}"#,
    )
    .unwrap();
    let hcl_dir = dir.path().join("conf.d");
    std::fs::create_dir_all(&hcl_dir).unwrap();
    std::fs::write(
        hcl_dir.join("extra.hcl"),
        "node_meta {\n  rack = \"r1\"\n}\n",
    )
    .unwrap();
    let (code, stdout, stderr) = cli(
        &[
            "validate",
            good.to_str().unwrap(),
            hcl_dir.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(
        (code, stdout.as_str()),
        (0, "Configuration is valid!\n"),
        "{stderr}"
    );
    let (code, stdout, _) = cli(&["validate", "-quiet", good.to_str().unwrap()], None);
    assert_eq!((code, stdout.as_str()), (0, ""));

    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{ \"datacenter\": ").unwrap();
    let mistyped = dir.path().join("mistyped.hcl");
    std::fs::write(&mistyped, "ports {\n  http = \"eighty\"\n}\n").unwrap();
    let (code, stdout, stderr) = cli(
        &[
            "validate",
            good.to_str().unwrap(),
            broken.to_str().unwrap(),
            mistyped.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!((code, stdout.as_str()), (1, ""));
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines
        .iter()
        .all(|l| l.starts_with("Config validation failed: ")));
    assert!(
        lines[0].contains("broken.json") && lines[1].contains("'ports.http'"),
        "{stderr}"
    );

    // Files that parse but describe an invalid agent: the same check a start makes.
    let bad_check = dir.path().join("check.json");
    std::fs::write(
        &bad_check,
        r#"{"data_dir": "/tmp/x", "check": {"name": "c", "http": "http://x", "interval": "nope"}}"#,
    )
    .unwrap();
    let (code, _, stderr) = cli(&["validate", bad_check.to_str().unwrap()], None);
    assert_eq!(code, 1);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let (code, _, stderr) = cli(&["validate"], None);
    assert_eq!(
        (code, stderr.trim()),
        (1, "Must specify at least one config file or directory")
    );
}

#[test]
fn debug_writes_consuls_archive_layout() {
    let agent = Agent::dev(&[]);
    let out = TempDir::new("debug");
    let output = out.path().join("capture");
    let mut debug = Command::new(praetor_binary())
        .args([
            "debug",
            "-http-addr",
            &agent.http_addr(),
            "-duration=10s",
            "-interval=5s",
            "-output",
            output.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Something to log while the capture runs.
    std::thread::sleep(Duration::from_secs(3));
    signal(agent.pid(), libc::SIGHUP);
    assert_eq!(exit_code(&mut debug, Duration::from_secs(60)), Some(0));
    let mut stdout = String::new();
    debug
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let archive = out.path().join("capture.tar.gz");
    assert!(
        stdout.contains(&format!("Saved debug archive: {}", archive.display())),
        "{stdout}"
    );
    assert!(!output.exists(), "the directory is archived and removed");
    let listing = Command::new("tar")
        .arg("-tzf")
        .arg(&archive)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    for file in [
        "agent.json",
        "consul.log",
        "host.json",
        "index.json",
        "listpeers.json",
        "members.json",
        "metrics.json",
    ] {
        assert!(
            listing.lines().any(|l| l == format!("capture/{file}")),
            "{file} in {listing}"
        );
    }
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(out.path())
        .status()
        .unwrap();
    assert!(status.success());
    let read = |name: &str| std::fs::read_to_string(output.join(name)).unwrap();
    let index: serde_json::Value = serde_json::from_str(&read("index.json")).unwrap();
    assert_eq!(index["Version"], 1);
    assert_eq!(index["AgentVersion"], praetor::CONSUL_API_VERSION);
    assert_eq!(index["Interval"], "5s");
    assert_eq!(index["Duration"], "12s");
    let agent_json: serde_json::Value = serde_json::from_str(&read("agent.json")).unwrap();
    assert_eq!(agent_json["Config"]["Server"], true);
    let metrics: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&read("metrics.json"))
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        metrics.len() >= 2,
        "one metrics document per interval: {}",
        metrics.len()
    );
    assert!(
        read("consul.log").contains("reload: done"),
        "{}",
        read("consul.log")
    );
    let members: serde_json::Value = serde_json::from_str(&read("members.json")).unwrap();
    assert_eq!(members.as_array().unwrap().len(), 1);
}

/// How many TCP sockets listen on an IPv4 `addr`, from the kernel's socket table.
fn listening_sockets(addr: SocketAddr) -> usize {
    let SocketAddr::V4(addr) = addr else {
        panic!("IPv4 only: {addr}")
    };
    // /proc/net/tcp writes the address as the hex of its in-memory (little-endian) u32.
    let local = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(addr.ip().octets()),
        addr.port()
    );
    const LISTEN: &str = "0A";
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&LISTEN)
        })
        .count()
}

#[test]
fn a_port_another_process_holds_stops_the_agent() {
    let first = Agent::dev(&["-shards=2"]);
    // A second agent on the same HTTP address: refused, naming the holder.
    let data = TempDir::new("port-taken");
    let data_dir = data.path().display().to_string();
    let (code, stderr) = refused_start(&dev_args(first.ip, &["-data-dir", &data_dir]));
    assert_eq!(code, Some(1), "{stderr}");
    let line = format!(
        "cannot listen for HTTP on {}: Address already in use (os error 98) (process {}, praetor, holds it)",
        first.addr(),
        first.pid()
    );
    assert_eq!(stderr.lines().last(), Some(line.as_str()), "{stderr}");
    // Its two shards still share the address: two listening sockets, both the first
    // agent's.
    assert_eq!(listening_sockets(first.addr()), 2);
    // The first agent keeps serving all of its traffic.
    for _ in 0..20 {
        assert_eq!(first.get("/v1/agent/self").status, 200);
    }
    // Any other program's socket, with or without SO_REUSEPORT, stops it too.
    let ip = fresh_loopback();
    let holder = std::net::TcpListener::bind(SocketAddr::new(ip, 8500)).unwrap();
    let (code, stderr) = refused_start(&dev_args(ip, &["-data-dir", &data_dir]));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("(process {}, ", std::process::id())),
        "{stderr}"
    );
    drop(holder);
}

#[test]
fn refused_flags_stop_the_agent_with_one_line() {
    let ip = fresh_loopback();
    for (flag, expected) in [
        (
            "-segment=alpha",
            "Network segments are not supported in this version of Consul",
        ),
        (
            "-syslog",
            "enable_syslog (-syslog): praetor does not write to syslog",
        ),
        (
            "-raft-protocol=2",
            "raft_protocol version 2 is not supported",
        ),
        ("-protocol=9", "protocol: version 9 is not supported"),
        (
            "-config-format=yaml",
            "-config-format must be either 'hcl' or 'json'",
        ),
    ] {
        let (code, stderr) = refused_start(&dev_args(ip, &[flag]));
        assert_eq!(code, Some(1), "{flag}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{flag}: {stderr}");
        assert!(stderr.starts_with(expected), "{flag}: {stderr}");
    }
}

#[test]
fn accepted_flags_act_or_warn() {
    let config = TempDir::new("flags-config");
    std::fs::write(
        config.path().join("meta.conf"),
        "node_meta {\n  from = \"conf\"\n}\n",
    )
    .unwrap();
    let ip = fresh_loopback();
    let serf_ip = fresh_loopback();
    let agent = Agent::spawn(
        ip,
        8500,
        dev_args(
            ip,
            &[
                "-node-meta",
                "rack:r1",
                "-node-meta=zone:z:2",
                "-config-format=hcl",
                "-config-dir",
                &config.path().display().to_string(),
                "-default-query-time=1s",
                "-max-query-time=2s",
                "-serf-lan-bind",
                &serf_ip.to_string(),
                "-join-wan=127.0.0.1:8302",
                "-retry-join-wan",
                "127.0.0.1:8302",
                "-advertise-wan=10.0.0.9",
                "-rejoin",
                "-disable-host-node-id",
                "-raft-protocol=3",
                "-protocol=3",
                "-retry-interval=5s",
                "-https-port=-1",
                "-grpc-tls-port=-1",
            ],
        ),
    );
    agent.wait_ready();
    let meta = agent.get("/v1/agent/self").json()["Meta"].clone();
    assert_eq!(meta["rack"], "r1");
    assert_eq!(meta["zone"], "z:2");
    assert_eq!(meta["from"], "conf", "-config-format=hcl read meta.conf");
    // Blocking queries on a key nothing writes: default and longest waits.
    let index = agent.get("/v1/kv/never-written").index();
    for query in [format!("index={index}"), format!("index={index}&wait=10m")] {
        let started = Instant::now();
        let answer = agent.get(&format!("/v1/kv/never-written?{query}"));
        let waited = started.elapsed();
        assert_eq!(answer.status, 404);
        assert!(
            waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
            "{query}: waited {waited:?}"
        );
    }
    // The LAN pool listens on -serf-lan-bind.
    let taken = std::net::UdpSocket::bind(SocketAddr::new(serf_ip, 8301));
    assert_eq!(taken.unwrap_err().kind(), std::io::ErrorKind::AddrInUse);
    let log = agent.log();
    assert!(
        log.contains("protocol = 3 is accepted but not acted on yet"),
        "{log}"
    );
    // The WAN join flags act (`cluster::pools`): nothing says they do not.
    for key in ["start_join_wan", "retry_join_wan", "advertise_addr_wan"] {
        assert!(!log.contains(&format!("{key} is accepted")), "{key}: {log}");
    }
}

#[test]
fn an_exhausted_retry_max_exits_with_code_1() {
    let ip = fresh_loopback();
    let data = TempDir::new("retry-max");
    let (code, stderr) = refused_start(&[
        "agent".to_string(),
        "-data-dir".to_string(),
        data.path().display().to_string(),
        "-bind".to_string(),
        ip.to_string(),
        "-client".to_string(),
        ip.to_string(),
        "-dns-port=-1".to_string(),
        // Nothing listens on the discard port of this fresh address.
        "-retry-join".to_string(),
        format!("{ip}:9"),
        "-retry-max=2".to_string(),
        "-retry-interval=1s".to_string(),
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr
            .trim_end()
            .ends_with("agent: max join retry exhausted, exiting (2 attempts)"),
        "{stderr}"
    );
}

#[test]
fn the_packaged_unit_is_consuls() {
    let unit =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/dist/praetor.service"))
            .unwrap();
    for line in [
        "Type=notify",
        "ExecReload=/bin/kill --signal HUP $MAINPID",
        "KillSignal=SIGTERM",
        "EnvironmentFile=-/etc/sysconfig/praetor",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line}");
    }
    let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
    assert!(exec.contains("praetor agent -config-dir=/etc/praetor.d/ $PRAETOR_AGENT_FLAGS"));
    let sysconfig = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/dist/praetor.sysconfig"
    ))
    .unwrap();
    assert!(sysconfig
        .lines()
        .any(|l| l.starts_with("PRAETOR_AGENT_FLAGS=")));
}

#[test]
fn config_watches_run_their_handlers_and_follow_reloads() {
    let config = TempDir::new("watches-config");
    let out = TempDir::new("watches-out");
    let first = out.path().join("first");
    let second = out.path().join("second");
    let watches = |key: &str, file: &std::path::Path| {
        serde_json::json!({"watches": [{
            "type": "key",
            "key": key,
            "args": ["/bin/sh", "-c", format!("cat >> {}", file.display())],
        }]})
        .to_string()
    };
    std::fs::write(config.path().join("watches.json"), watches("w1", &first)).unwrap();
    let ip = fresh_loopback();
    let mut agent = Agent::spawn(
        ip,
        8500,
        dev_args(ip, &["-config-dir", &config.path().display().to_string()]),
    );
    agent.wait_ready();
    let read = |path: &std::path::Path| std::fs::read_to_string(path).unwrap_or_default();
    // The handler gets each new value of the key (base64 in the KV entry's JSON).
    assert_eq!(agent.put("/v1/kv/w1", b"one").status, 200);
    assert!(
        wait_until(Duration::from_secs(20), || read(&first).contains("b25l")),
        "handler output {:?}; log:\n{}",
        read(&first),
        agent.log()
    );
    // A reload replaces the plan: w2 is watched now, w1 no longer.
    std::fs::write(config.path().join("watches.json"), watches("w2", &second)).unwrap();
    signal(agent.pid(), libc::SIGHUP);
    assert!(wait_until(Duration::from_secs(10), || agent
        .log()
        .contains("reload: done; applied watches")));
    assert_eq!(agent.put("/v1/kv/w2", b"two").status, 200);
    assert!(
        wait_until(Duration::from_secs(20), || read(&second).contains("dHdv")),
        "{}",
        agent.log()
    );
    assert_eq!(agent.put("/v1/kv/w1", b"uno").status, 200);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !read(&first).contains("dW5v"),
        "the removed plan no longer runs"
    );
    assert_eq!(agent.terminate().and_then(|s| s.code()), Some(0));
}
