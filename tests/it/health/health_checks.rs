//! Check runners against real servers started by the test: HTTP, TCP, UDP, gRPC health,
//! script, alias, TTL, thresholds and `deregister_critical_service_after`, observed through
//! the catalog and health endpoints of a real agent.

use crate::agent_support;
use crate::common;

use agent_support::{closed_port, wait_for, TestGrpcServer, TestHttpServer, UdpEcho};
use common::{request, Agent};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn register(agent: &Agent, body: Value) {
    let r = agent.put("/v1/agent/service/register", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "register {body}: {}", r.text());
}

/// The catalog's view of one check.
fn catalog_check(agent: &Agent, service: &str, check_id: &str) -> Option<Value> {
    let checks = agent.get(&format!("/v1/health/checks/{service}")).json();
    checks
        .as_array()?
        .iter()
        .find(|c| c["CheckID"] == check_id)
        .cloned()
}

fn wait_status(
    agent: &Agent,
    service: &str,
    check_id: &str,
    status: &str,
    limit: Duration,
) -> Value {
    wait_for(limit, &format!("{check_id} to become {status}"), || {
        catalog_check(agent, service, check_id).filter(|c| c["Status"] == status)
    })
}

#[test]
fn http_check_passes_then_goes_critical_and_wakes_only_its_watchers() {
    let agent = Agent::dev(&[]);
    let mut server = TestHttpServer::start(200);
    register(
        &agent,
        json!({"Name": "web", "Port": server.addr.port(),
               "Check": {"HTTP": server.url("/health"), "Interval": "1s", "Timeout": "1s",
                         "Header": {"X-Probe": ["yes"]}, "Method": "POST", "Body": "ping"}}),
    );
    register(
        &agent,
        json!({"Name": "api", "Port": 1, "Check": {"TTL": "60s", "Status": "passing"}}),
    );
    let check = wait_status(
        &agent,
        "web",
        "service:web",
        "passing",
        Duration::from_secs(10),
    );
    let output = check["Output"].as_str().unwrap();
    assert!(
        output.starts_with(&format!(
            "HTTP POST {}: 200 Test Output: status 200",
            server.url("/health")
        )),
        "{output}"
    );
    let seen = server.seen.lock().unwrap()[0].clone();
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("POST", "/health")
    );
    assert_eq!(seen.body, b"ping");
    assert!(seen
        .headers
        .iter()
        .any(|(n, v)| n == "X-Probe" && v == "yes"));
    assert!(seen
        .headers
        .iter()
        .any(|(n, v)| n == "User-Agent" && v == "Consul Health Check"));
    assert_eq!(
        agent
            .get("/v1/health/service/web?passing")
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Park one blocking query on web and one on api.
    let addr = agent.addr();
    let web_index = agent.get("/v1/health/service/web?passing").index();
    let api_index = agent.get("/v1/health/service/api").index();
    let web_watch = std::thread::spawn(move || {
        let r = request(
            addr,
            "GET",
            &format!("/v1/health/service/web?passing&index={web_index}&wait=30s"),
            b"",
            &[],
        );
        (Instant::now(), r)
    });
    let api_watch = std::thread::spawn(move || {
        let started = Instant::now();
        let r = request(
            addr,
            "GET",
            &format!("/v1/health/service/api?index={api_index}&wait=4s"),
            b"",
            &[],
        );
        (started.elapsed(), r)
    });
    std::thread::sleep(Duration::from_millis(200));

    // Stop the server: critical within interval + timeout (plus the sync), and ?passing
    // drops the instance.
    let stopped = Instant::now();
    server.stop();
    let check = wait_status(
        &agent,
        "web",
        "service:web",
        "critical",
        Duration::from_secs(5),
    );
    let seen_critical = Instant::now();
    let took = seen_critical.duration_since(stopped);
    assert!(took < Duration::from_secs(3), "critical after {took:?}");
    assert!(
        check["Output"]
            .as_str()
            .unwrap()
            .contains("connection refused"),
        "{check}"
    );
    assert_eq!(
        agent.get("/v1/health/service/web?passing").json(),
        json!([])
    );

    // The parked query answers with the change that made the check critical: measured from
    // when polling saw it, so a slow probe on a loaded machine does not count against the
    // wake-up (its own bound is the one above).
    let (woke_at, web) = web_watch.join().unwrap();
    let wake_lag = woke_at.saturating_duration_since(seen_critical);
    assert!(
        wake_lag < Duration::from_secs(1),
        "the web watcher woke {wake_lag:?} after the change was visible"
    );
    assert!(web.index() > web_index);
    assert_eq!(web.json(), json!([]));
    let (waited, api) = api_watch.join().unwrap();
    assert!(
        waited >= Duration::from_millis(3900),
        "api's watcher was woken: {waited:?}"
    );
    assert_eq!(api.index(), api_index);

    // 429 is a warning.
    let mut server = TestHttpServer::start(429);
    register(
        &agent,
        json!({"Name": "busy", "Check": {"HTTP": server.url("/"), "Interval": "1s"}}),
    );
    wait_status(
        &agent,
        "busy",
        "service:busy",
        "warning",
        Duration::from_secs(10),
    );
    server.stop();
}

#[test]
fn tcp_udp_and_grpc_checks() {
    let agent = Agent::dev(&[]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open = listener.local_addr().unwrap();
    let udp = UdpEcho::start();
    let grpc = TestGrpcServer::start(1);
    register(
        &agent,
        json!({"Name": "multi", "Checks": [
            {"CheckID": "tcp-open", "TCP": open.to_string(), "Interval": "1s", "Timeout": "1s"},
            {"CheckID": "tcp-closed", "TCP": format!("127.0.0.1:{}", closed_port()), "Interval": "1s", "Timeout": "1s"},
            {"CheckID": "udp-echo", "UDP": udp.addr.to_string(), "Interval": "1s", "Timeout": "500ms"},
            {"CheckID": "udp-closed", "UDP": format!("127.0.0.1:{}", closed_port()), "Interval": "1s", "Timeout": "1s"},
            {"CheckID": "grpc", "GRPC": format!("{}/my.Service", grpc.addr), "Interval": "1s", "Timeout": "2s"},
            {"CheckID": "grpc-down", "GRPC": format!("127.0.0.1:{}", closed_port()), "Interval": "1s", "Timeout": "1s", "Status": "passing"}
        ]}),
    );
    let tcp = wait_status(
        &agent,
        "multi",
        "tcp-open",
        "passing",
        Duration::from_secs(10),
    );
    assert_eq!(tcp["Output"], format!("TCP connect {open}: Success"));
    assert_eq!(tcp["Type"], "tcp");
    wait_status(
        &agent,
        "multi",
        "udp-echo",
        "passing",
        Duration::from_secs(10),
    );
    let grpc_check = wait_status(&agent, "multi", "grpc", "passing", Duration::from_secs(10));
    assert_eq!(grpc_check["Type"], "grpc");
    let down = wait_status(
        &agent,
        "multi",
        "grpc-down",
        "critical",
        Duration::from_secs(10),
    );
    assert!(
        down["Output"]
            .as_str()
            .unwrap()
            .contains("connection refused"),
        "{down}"
    );
    // Closed TCP and UDP ports: critical from the start, and they stay so.
    assert_eq!(
        catalog_check(&agent, "multi", "tcp-closed").unwrap()["Status"],
        "critical"
    );
    let udp_closed = wait_for(Duration::from_secs(10), "udp-closed to run", || {
        agent
            .get("/v1/agent/checks")
            .json()
            .get("udp-closed")
            .filter(|c| !c["Output"].as_str().unwrap_or("").is_empty())
            .cloned()
    });
    assert_eq!(udp_closed["Status"], "critical");
    assert!(
        udp_closed["Output"].as_str().unwrap().contains("refused"),
        "{udp_closed}"
    );

    // NOT_SERVING turns the gRPC check critical.
    grpc.status.store(2, std::sync::atomic::Ordering::SeqCst);
    let check = wait_status(&agent, "multi", "grpc", "critical", Duration::from_secs(10));
    assert!(
        check["Output"].as_str().unwrap().contains("NOT_SERVING"),
        "{check}"
    );
    drop(listener);
}

#[test]
fn script_checks_need_enable_script_checks() {
    let locked = Agent::dev(&[]);
    let r = locked.put(
        "/v1/agent/check/register",
        json!({"Name": "script", "Args": ["/bin/true"], "Interval": "1s"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 500);
    assert!(r.text().contains("enable_script_checks"), "{}", r.text());

    let agent = Agent::dev(&["-enable-script-checks"]);
    register(
        &agent,
        json!({"Name": "scripted", "Checks": [
            {"CheckID": "ok", "Args": ["/bin/sh", "-c", "echo all good"], "Interval": "1s"},
            {"CheckID": "meh", "Args": ["/bin/sh", "-c", "echo so-so; exit 1"], "Interval": "1s"},
            {"CheckID": "bad", "Args": ["/bin/sh", "-c", "exit 3"], "Interval": "1s", "Status": "passing"}
        ]}),
    );
    let ok = wait_status(&agent, "scripted", "ok", "passing", Duration::from_secs(10));
    assert_eq!(ok["Output"], "all good\n");
    assert_eq!(ok["Type"], "script");
    wait_status(
        &agent,
        "scripted",
        "meh",
        "warning",
        Duration::from_secs(10),
    );
    wait_status(
        &agent,
        "scripted",
        "bad",
        "critical",
        Duration::from_secs(10),
    );
}

#[test]
fn ttl_alias_thresholds_and_deregister_critical_service_after() {
    // Consul reaps every 30 s and never sooner than a minute (`check_reap_interval`,
    // `check_deregister_interval_min`); shortened here so the test need not wait that long.
    let agent = Agent::dev(&[
        "-hcl",
        "check_reap_interval = \"1s\" check_deregister_interval_min = \"1s\"",
    ]);
    register(
        &agent,
        json!({"Name": "backend", "ID": "backend-1", "Check": {"CheckID": "backend-ttl", "TTL": "2s"}}),
    );
    register(
        &agent,
        json!({"Name": "frontend", "Check": {"CheckID": "frontend-alias", "AliasService": "backend-1"}}),
    );
    // TTL: passing on update, critical ("TTL expired") when the TTL runs out.
    assert_eq!(
        agent
            .put("/v1/agent/check/pass/backend-ttl?note=alive", b"")
            .status,
        200
    );
    let c = wait_status(
        &agent,
        "backend",
        "backend-ttl",
        "passing",
        Duration::from_secs(2),
    );
    assert_eq!(c["Output"], "alive");
    let alias = wait_status(
        &agent,
        "frontend",
        "frontend-alias",
        "passing",
        Duration::from_secs(5),
    );
    assert_eq!(alias["Output"], "All checks passing.");
    let expired = wait_status(
        &agent,
        "backend",
        "backend-ttl",
        "critical",
        Duration::from_secs(5),
    );
    assert_eq!(expired["Output"], "TTL expired");
    let alias = wait_status(
        &agent,
        "frontend",
        "frontend-alias",
        "critical",
        Duration::from_secs(5),
    );
    assert!(
        alias["Output"]
            .as_str()
            .unwrap()
            .starts_with("Aliased check"),
        "{alias}"
    );

    // SuccessBeforePassing / FailuresBeforeCritical keep a flapping check steady.
    let mut server = TestHttpServer::start(200);
    register(
        &agent,
        json!({"Name": "steady", "Check": {"CheckID": "steady-http", "HTTP": server.url("/"), "Interval": "1s",
               "SuccessBeforePassing": 3, "FailuresBeforeWarning": 1, "FailuresBeforeCritical": 3}}),
    );
    let started = Instant::now();
    wait_status(
        &agent,
        "steady",
        "steady-http",
        "passing",
        Duration::from_secs(10),
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "three successes take two intervals"
    );
    server.stop();
    wait_status(
        &agent,
        "steady",
        "steady-http",
        "warning",
        Duration::from_secs(5),
    );
    wait_status(
        &agent,
        "steady",
        "steady-http",
        "critical",
        Duration::from_secs(10),
    );

    // A service whose check stays critical for longer than its setting is deregistered.
    register(
        &agent,
        json!({"Name": "doomed", "Check": {"TTL": "10s", "DeregisterCriticalServiceAfter": "2s"}}),
    );
    assert_eq!(
        agent
            .get("/v1/catalog/service/doomed")
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    wait_for(Duration::from_secs(8), "doomed to be reaped", || {
        agent
            .get("/v1/catalog/service/doomed")
            .json()
            .as_array()
            .unwrap()
            .is_empty()
            .then_some(())
    });
    assert!(agent
        .get("/v1/agent/services")
        .json()
        .get("doomed")
        .is_none());
}

/// Consul's TTL check is a timer reset by each update: a 100 ms TTL passed once is critical
/// by the time 200 ms have gone by (three rounds, so a one-second sweep that happened to
/// fall inside the window cannot pass for the timer), and still passing well before its TTL.
#[test]
fn a_ttl_check_turns_critical_at_its_ttl() {
    let agent = Agent::dev(&[]);
    let r = agent.put(
        "/v1/agent/check/register",
        json!({"Name": "fast", "TTL": "100ms"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let status = |agent: &Agent| agent.get("/v1/agent/checks").json()["fast"]["Status"].clone();
    for round in 0..3 {
        let r = agent.put("/v1/agent/check/pass/fast", b"");
        assert_eq!(r.status, 200, "{}", r.text());
        let passed = Instant::now();
        assert_eq!(
            status(&agent),
            "passing",
            "round {round}: right after the update"
        );
        std::thread::sleep(Duration::from_millis(200).saturating_sub(passed.elapsed()));
        assert_eq!(
            status(&agent),
            "critical",
            "round {round}: 200 ms after the update"
        );
        let check = &agent.get("/v1/agent/checks").json()["fast"];
        assert_eq!(check["Output"], "TTL expired");
    }
}
