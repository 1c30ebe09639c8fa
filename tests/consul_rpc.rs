//! Consul's RPC on the server port, spoken by an independent client: a Python script
//! (`tests/python/consul_rpc.py`, the `msgpack` package and the standard library only,
//! written from Consul's documented wire and structs) against a real agent. It calls
//! `Status.*`, `KVS.Apply`/`KVS.Get` (a blocking `MinQueryIndex` wait woken by a write on
//! another connection), `Catalog.Register`, `Health.ServiceNodes`, `Session.Apply`, over
//! byte 0 and over byte 4 with its own yamux (two streams at once), and over TLS with
//! `verify_incoming`; unknown methods get net/rpc's words; garbage after the first byte
//! closes the connection and the server keeps serving. A follower hands writes and
//! default reads (blocking ones too) to the leader, and serves stale reads itself. With ACLs
//! on, a call is as good as its `Token`.
//!
//! A missing interpreter or module is a failure, not a skip: `tests/run.sh` installs them.

mod common;

use common::{praetor_in, Agent, Cluster, TempDir};
use std::process::Command;

fn run_client(args: &[&str], agent: &Agent) {
    run_client_of(args, std::slice::from_ref(agent));
}

/// Runs the client; on failure shows the logs of `agents`.
fn run_client_of(args: &[&str], agents: &[Agent]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/consul_rpc.py");
    let output = Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 must be installed (tests/run.sh installs it)");
    let logs = || {
        agents
            .iter()
            .map(|a| format!("--- {}\n{}", a.ip, a.log()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        output.status.success(),
        "consul_rpc.py {args:?} failed:\nstdout: {}\nstderr: {}\nagent logs:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        logs()
    );
    assert!(
        agents.iter().all(|a| !a.log().contains("panicked")),
        "an agent panicked:\n{}",
        logs()
    );
}

#[test]
fn an_independent_client_speaks_consuls_rpc_over_byte_0_and_yamux() {
    let agent = Agent::dev(&[]);
    run_client(&["plain", &agent.ip.to_string()], &agent);
}

#[test]
fn an_independent_client_speaks_consuls_rpc_over_tls_with_verify_incoming() {
    let pki = TempDir::new("consul-rpc-pki");
    praetor_in(pki.path(), &["tls", "ca", "create"]);
    praetor_in(pki.path(), &["tls", "cert", "create", "-server"]);
    praetor_in(pki.path(), &["tls", "cert", "create", "-client"]);
    let file = |name: &str| pki.path().join(name).display().to_string();
    let tls = format!(
        "tls {{ defaults {{ ca_file = \"{}\" cert_file = \"{}\" key_file = \"{}\" }} \
         internal_rpc {{ verify_incoming = true }} }}",
        file("consul-agent-ca.pem"),
        file("dc1-server-consul-0.pem"),
        file("dc1-server-consul-0-key.pem"),
    );
    let agent = Agent::dev(&["-hcl", &tls]);
    run_client(
        &[
            "tls",
            &agent.ip.to_string(),
            &file("consul-agent-ca.pem"),
            &file("dc1-client-consul-0.pem"),
            &file("dc1-client-consul-0-key.pem"),
        ],
        &agent,
    );
}

#[test]
fn a_follower_hands_typed_calls_to_the_leader() {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_for_leader(std::time::Duration::from_secs(30));
    let follower = (leader + 1) % cluster.servers.len();
    run_client_of(
        &[
            "follower",
            &cluster.servers[follower].ip.to_string(),
            &cluster.servers[leader].ip.to_string(),
        ],
        &cluster.servers,
    );
}

#[test]
fn typed_calls_are_checked_against_their_tokens() {
    const MANAGEMENT: &str = "9b3ea15e-8a1c-4a55-8dd5-07c1a2e9c0a1";
    let acl = format!(
        "acl {{ enabled = true\n default_policy = \"deny\"\n tokens {{ initial_management = \"{MANAGEMENT}\" }} }}"
    );
    let agent = Agent::dev(&["-hcl", &acl]);
    run_client(&["acl", &agent.ip.to_string(), MANAGEMENT], &agent);
}
