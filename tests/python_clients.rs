//! Real Python clients (py-consul from PyPI) against a real agent. CI installs py-consul;
//! a missing interpreter or module is a test failure, not a skip.

mod common;

use common::Agent;
use std::process::Command;

fn run_python(script: &str, agent: &Agent) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/");
    let output = Command::new("python3")
        .arg(format!("{path}{script}"))
        .arg(agent.ip.to_string())
        .arg(agent.http_port.to_string())
        .output()
        .expect("python3 must be installed (tests/run.sh installs it)");
    assert!(
        output.status.success(),
        "{script} failed:\nstdout: {}\nstderr: {}\nagent log:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        agent.log()
    );
}

#[test]
fn py_consul_kv() {
    let agent = Agent::dev(&[]);
    run_python("kv_client.py", &agent);
}

#[test]
fn py_consul_catalog_and_health() {
    let agent = Agent::dev(&[]);
    run_python("catalog_client.py", &agent);
}

#[test]
fn py_consul_agent_services_and_checks() {
    let agent = Agent::dev(&[]);
    run_python("agent_client.py", &agent);
}

#[test]
fn py_consul_service_mesh() {
    let agent = Agent::dev(&[]);
    run_python("connect_client.py", &agent);
}
