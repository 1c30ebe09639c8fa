//! The xDS protocol checked by an independent client: `tests/python/xds_conformance.py`
//! (grpcio and xds-protos from PyPI, which `tests/run.sh` installs) against a real agent's
//! gRPC port — delta subscribe, ACK, NACK, removal, reconnect with
//! `initial_resource_versions`, state-of-the-world, unknown and missing type URLs, a resolver
//! subset's filter — and against an agent with ACLs on for a wrong token, one without
//! `service:write` and a revoked one.

use crate::common;

use common::Agent;
use std::process::Command;

const ROOT_TOKEN: &str = "b1gs3cr3-0000-4000-8000-000000000001";

#[test]
fn an_independent_ads_client_finds_the_protocol_consul_serves() {
    let agent = Agent::dev(&[]);
    let acl = Agent::dev(&[
        "-hcl",
        &format!(
            "acl {{ enabled = true\n default_policy = \"deny\"\n tokens {{ initial_management = \"{ROOT_TOKEN}\" }} }}"
        ),
    ]);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/xds_conformance.py"
    );
    let output = Command::new("timeout")
        .args(["300", "python3", script])
        .args([
            agent.ip.to_string(),
            agent.http_port.to_string(),
            "8502".to_string(),
            acl.ip.to_string(),
            ROOT_TOKEN.to_string(),
        ])
        .output()
        .expect("python3 must be installed (tests/run.sh installs it)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\nstderr: {}\nagent log:\n{}\nacl agent log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        agent.log(),
        acl.log()
    );
    assert!(stdout.contains("10 passed, 0 failed"), "{stdout}");
}
