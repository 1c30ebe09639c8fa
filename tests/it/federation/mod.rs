//! Several datacenters: WAN federation and `?dc=`, and Consul's RPC between agents and
//! servers.

mod acl_dc_calls;
mod catalog_calls;
mod consul_rpc;
mod dc_calls;
mod dcstate_calls;
mod dns_calls;
mod federation_states;
mod keyring_calls;
mod mesh_calls;
mod native_tls;
mod peer_snapshot_calls;
mod query_calls;
mod snapshot_stream;
mod ui_calls;
mod wan;

/// A dev agent whose server port requires client certificates (`verify_incoming`), with
/// `extra_hcl` added to its TLS configuration, and the arguments an independent client
/// (`tests/python/*_rpc.py tls`) takes to reach it: the agent's address, the CA, and a
/// client certificate and key. The PKI lives in the returned directory.
fn verify_incoming_dev_agent(
    extra_hcl: &str,
) -> (crate::common::TempDir, crate::common::Agent, Vec<String>) {
    use crate::common::{praetor_in, Agent, TempDir};
    let pki = TempDir::new("rpc-tls-pki");
    praetor_in(pki.path(), &["tls", "ca", "create"]);
    praetor_in(pki.path(), &["tls", "cert", "create", "-server"]);
    praetor_in(pki.path(), &["tls", "cert", "create", "-client"]);
    let file = |name: &str| pki.path().join(name).display().to_string();
    let tls = format!(
        "tls {{ defaults {{ ca_file = \"{}\" cert_file = \"{}\" key_file = \"{}\" }} \
         internal_rpc {{ verify_incoming = true }} }} {extra_hcl}",
        file("consul-agent-ca.pem"),
        file("dc1-server-consul-0.pem"),
        file("dc1-server-consul-0-key.pem"),
    );
    let agent = Agent::dev(&["-hcl", &tls]);
    let client_args = vec![
        "tls".to_string(),
        agent.ip.to_string(),
        file("consul-agent-ca.pem"),
        file("dc1-client-consul-0.pem"),
        file("dc1-client-consul-0-key.pem"),
    ];
    (pki, agent, client_args)
}

/// The node name an agent goes by.
fn node_name(agent: &crate::common::Agent) -> String {
    let me = agent.get("/v1/agent/self").json();
    me["Config"]["NodeName"].as_str().unwrap().to_string()
}

/// `path` with `?dc=dc2` (or `&dc=dc2`) added.
fn in_dc2(path: &str) -> String {
    let separator = if path.contains('?') { '&' } else { '?' };
    format!("{path}{separator}dc=dc2")
}

/// Each GET of `reads` answers alike on `client` and on its `server`, and with `?dc=dc2` on
/// both of them as on dc2's `remote` (status, body, query headers), with a status among
/// `statuses`.
fn reads_agree_here_and_in_dc2(
    client: &crate::common::Agent,
    server: &crate::common::Agent,
    remote: &crate::common::Agent,
    reads: &[String],
    statuses: &[u16],
) {
    use crate::acl_common::same_answer;
    for path in reads {
        let local = same_answer(client, server, ("GET", path, b""), None, true);
        assert!(statuses.contains(&local.status), "{path}: {}", local.text());
        let far = in_dc2(path);
        for agent in [server, client] {
            let answer = same_answer(agent, remote, ("GET", &far, b""), None, true);
            assert!(
                statuses.contains(&answer.status),
                "{far}: {}",
                answer.text()
            );
        }
    }
}
