//! What the peering tests share: dev agents with gRPC over TLS (token generation needs
//! `ports.grpc_tls`, as Consul's does) and an initialized Connect CA, and the requests.

use crate::common::{praetor_in, request, Agent, HttpResponse, TempDir};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The gRPC TLS port of every test agent; each agent has an address of its own.
pub const GRPC_TLS_PORT: u16 = 8503;

/// A directory with an agent CA and a server certificate for the agents' `tls.grpc`.
pub fn certificates(name: &str) -> TempDir {
    let dir = TempDir::new(name);
    praetor_in(dir.path(), &["tls", "ca", "create"]);
    praetor_in(dir.path(), &["tls", "cert", "create", "-server"]);
    dir
}

/// A dev agent of `datacenter` serving gRPC over TLS with the certificates in `dir`, once
/// its Connect CA has a root.
pub fn peering_agent(dir: &TempDir, datacenter: &str, extra: &str) -> Agent {
    let d = dir.path().display();
    let hcl = format!(
        "datacenter = \"{datacenter}\" tls {{ defaults {{ ca_file = \"{d}/consul-agent-ca.pem\" cert_file = \"{d}/dc1-server-consul-0.pem\" key_file = \"{d}/dc1-server-consul-0-key.pem\" }} grpc {{ verify_incoming = false }} }} ports {{ grpc = -1 grpc_tls = {GRPC_TLS_PORT} }} {extra}"
    );
    let agent = Agent::dev(&["-hcl", &hcl]);
    trust_domain(&agent);
    agent
}

/// The agent's Connect CA trust domain, waiting (bounded) for the CA to have a root.
pub fn trust_domain(agent: &Agent) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let roots = agent.get("/v1/connect/ca/roots");
        if roots.status == 200 {
            let roots = roots.json();
            let domain = roots["TrustDomain"].as_str().unwrap_or_default();
            if !domain.is_empty() && roots["Roots"].as_array().is_some_and(|r| !r.is_empty()) {
                return domain.to_string();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the Connect CA never initialized"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The root certificates the agent's Connect CA trusts, each ending in a newline.
pub fn root_pems(agent: &Agent) -> Vec<String> {
    agent.get("/v1/connect/ca/roots").json()["Roots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut pem = r["RootCert"].as_str().unwrap().to_string();
            if !pem.ends_with('\n') {
                pem.push('\n');
            }
            pem
        })
        .collect()
}

pub fn post(agent: &Agent, path: &str, body: &Value, token: Option<&str>) -> HttpResponse {
    let headers: Vec<(&str, &str)> = token.map(|t| ("X-Consul-Token", t)).into_iter().collect();
    request(
        agent.addr(),
        "POST",
        path,
        body.to_string().as_bytes(),
        &headers,
    )
}

/// A token for `peer` generated on `agent`, which must succeed.
pub fn generate_token(agent: &Agent, peer: &str, body_extra: Value) -> String {
    let mut body = serde_json::json!({ "PeerName": peer });
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), body_extra) {
        body.extend(extra);
    }
    let answer = post(agent, "/v1/peering/token", &body, None);
    assert_eq!(answer.status, 200, "generate token: {}", answer.text());
    answer.json()["PeeringToken"].as_str().unwrap().to_string()
}

/// The JSON document inside a token.
pub fn decode(token: &str) -> (String, Value) {
    use base64::Engine as _;
    let json = base64::engine::general_purpose::STANDARD
        .decode(token)
        .expect("a token is standard base64");
    let text = String::from_utf8(json).unwrap();
    let value = serde_json::from_str(&text).unwrap();
    (text, value)
}
