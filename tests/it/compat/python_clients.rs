//! Real Python clients (py-consul from PyPI) against a real agent. CI installs py-consul;
//! a missing interpreter or module is a test failure, not a skip.

use crate::common;

use common::Agent;
use std::process::Command;

fn run_python(script: &str, agent: &Agent) {
    run_python_with(script, agent, &[]);
}

/// Runs `script HOST PORT extra…`.
fn run_python_with(script: &str, agent: &Agent, extra: &[&str]) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/");
    let output = Command::new("python3")
        .arg(format!("{path}{script}"))
        .arg(agent.ip.to_string())
        .arg(agent.http_port.to_string())
        .args(extra)
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

/// ACL objects, deleted reads (None, from Consul's 404), templated policies and their
/// preview, through py-consul with a management token.
#[test]
fn py_consul_acl_objects_and_templated_policies() {
    const MANAGEMENT: &str = "7e3d2c11-4444-4e7a-9c59-0123456789ab";
    let agent = Agent::dev(&[
        "-hcl",
        &format!(
            "acl {{ enabled = true\n default_policy = \"deny\"\n tokens {{ initial_management = \"{MANAGEMENT}\" }} }}"
        ),
    ]);
    let dir = common::TempDir::new("py-acl-key");
    let private = dir.path().join("key.pem");
    let public = dir.path().join("key.pub.pem");
    for args in [
        vec![
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
        ],
        vec!["pkey", "-pubout", "-in", private.to_str().unwrap(), "-out"],
    ] {
        let out = if args[0] == "genpkey" {
            &private
        } else {
            &public
        };
        let status = Command::new("openssl")
            .args(&args)
            .arg(out)
            .status()
            .expect("openssl runs");
        assert!(status.success(), "openssl {args:?}");
    }
    let key = std::fs::read_to_string(&public).unwrap();
    // The management token exists once the first leader has written it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while common::request(
        agent.addr(),
        "GET",
        "/v1/acl/token/self",
        b"",
        &[("X-Consul-Token", MANAGEMENT)],
    )
    .status
        != 200
    {
        assert!(std::time::Instant::now() < deadline, "no management token");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    run_python_with("acl_client.py", &agent, &[MANAGEMENT, &key]);
}
