//! Sessions and locks through py-consul, the Python client Consul users run, against a real
//! agent. A missing interpreter or module is a test failure, not a skip.

use crate::common;

use common::Agent;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn py_consul_sessions_locks_and_transactions() {
    let agent = Agent::dev(&[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !agent
        .get("/v1/health/state/passing")
        .text()
        .contains("serfHealth")
    {
        assert!(Instant::now() < deadline, "no passing serfHealth check");
        std::thread::sleep(Duration::from_millis(50));
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/session_lock.py");
    let output = Command::new("python3")
        .arg(script)
        .arg(agent.ip.to_string())
        .arg(agent.http_port.to_string())
        .output()
        .expect("python3 must be installed (tests/run.sh installs it)");
    assert!(
        output.status.success(),
        "session_lock.py failed:\nstdout: {}\nstderr: {}\nagent log:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        agent.log()
    );
}
