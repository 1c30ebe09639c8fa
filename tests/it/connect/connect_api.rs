//! Intentions, authorization, the built-in CA and leaf certificates over real sockets
//! against real `praetor agent -dev` processes, with `openssl` checking the certificates.

use crate::common;

use common::{cli, request, Agent, TempDir};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

/// Waits until the leader made the CA; returns the roots answer.
fn roots(agent: &Agent) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = agent.get("/v1/connect/ca/roots");
        if r.status == 200 && r.json()["Roots"].as_array().is_some_and(|a| !a.is_empty()) {
            return r.json();
        }
        assert!(
            Instant::now() < deadline,
            "the CA never initialized: {}",
            r.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn post(agent: &Agent, path: &str, body: Value) -> common::HttpResponse {
    request(agent.addr(), "POST", path, body.to_string().as_bytes(), &[])
}

#[test]
fn legacy_and_exact_intentions_follow_consul() {
    let agent = Agent::dev(&[]);
    let created = post(
        &agent,
        "/v1/connect/intentions",
        json!({"SourceName": "web", "DestinationName": "db", "Action": "allow", "Meta": {"team": "a"}}),
    );
    assert_eq!(created.status, 200, "{}", created.text());
    let id = created.json()["ID"].as_str().unwrap().to_string();
    let got = agent.get(&format!("/v1/connect/intentions/{id}")).json();
    assert_eq!(got["SourceName"], "web");
    assert_eq!(got["DestinationName"], "db");
    assert_eq!(got["Action"], "allow");
    assert_eq!(got["Precedence"], 9);
    assert_eq!(got["Meta"]["team"], "a");
    assert_eq!(got["SourceType"], "consul");
    let created_at = got["CreatedAt"].as_str().unwrap().to_string();
    assert!(
        created_at.ends_with('Z') && created_at.len() >= 20,
        "{created_at}"
    );

    let duplicate = post(
        &agent,
        "/v1/connect/intentions",
        json!({"SourceName": "web", "DestinationName": "db", "Action": "deny"}),
    );
    assert_eq!(duplicate.status, 500);
    assert!(
        duplicate.text().contains("more than once"),
        "{}",
        duplicate.text()
    );
    let invalid = post(
        &agent,
        "/v1/connect/intentions",
        json!({"SourceName": "w*", "DestinationName": "db"}),
    );
    assert_eq!(invalid.status, 500);
    assert!(invalid
        .text()
        .contains("wildcard character '*' cannot be used with partial values"));

    let updated = agent.put(
        &format!("/v1/connect/intentions/{id}"),
        json!({"SourceName": "web", "DestinationName": "db", "Action": "deny"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(updated.status, 200, "{}", updated.text());
    let got = agent.get(&format!("/v1/connect/intentions/{id}")).json();
    assert_eq!(got["Action"], "deny");
    assert_eq!(
        got["CreatedAt"],
        created_at.as_str(),
        "the creation time is kept"
    );

    let check = agent
        .get("/v1/connect/intentions/check?source=web&destination=db")
        .json();
    assert_eq!(check, json!({"Allowed": false}));
    let other = agent
        .get("/v1/connect/intentions/check?source=api&destination=db")
        .json();
    assert_eq!(
        other,
        json!({"Allowed": true}),
        "ACLs off: the default allows"
    );
    let matched = agent
        .get("/v1/connect/intentions/match?by=destination&name=db")
        .json();
    assert_eq!(matched["db"].as_array().unwrap().len(), 1);
    let by_source = agent
        .get("/v1/connect/intentions/match?by=source&name=web")
        .json();
    assert_eq!(by_source["web"][0]["DestinationName"], "db");
    assert_eq!(
        agent
            .get("/v1/connect/intentions/match?by=sideways&name=x")
            .text(),
        "'by' parameter must be one of 'source' or 'destination'"
    );

    // The exact API works on config-entry intentions: an upsert turns the destination's
    // entry into a config entry (legacy IDs are gone), a wildcard ranks below exact names.
    let upsert = agent.put(
        "/v1/connect/intentions/exact?source=*&destination=db",
        json!({"Action": "allow"}).to_string().as_bytes(),
    );
    assert_eq!(upsert.text(), "true\n");
    assert_eq!(
        agent.get(&format!("/v1/connect/intentions/{id}")).status,
        404
    );
    let exact = agent.get("/v1/connect/intentions/exact?source=web&destination=db");
    assert_eq!(exact.status, 200);
    assert_eq!(exact.json()["Action"], "deny");
    assert_eq!(
        agent
            .get("/v1/connect/intentions/check?source=api&destination=db")
            .json(),
        json!({"Allowed": true})
    );
    let entry = agent.get("/v1/config/service-intentions/db").json();
    assert_eq!(entry["Sources"][0]["Name"], "web");
    assert_eq!(entry["Sources"][1]["Name"], "*");
    assert_eq!(entry["Sources"][1]["Precedence"], 8);
    assert_eq!(
        agent
            .get("/v1/connect/intentions")
            .json()
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        agent
            .delete("/v1/connect/intentions/exact?source=web&destination=db")
            .text(),
        "true\n"
    );
    assert_eq!(
        agent
            .get("/v1/connect/intentions/exact?source=web&destination=db")
            .status,
        404
    );
    assert_eq!(
        agent
            .delete("/v1/connect/intentions/exact?source=web&destination=db")
            .text(),
        "true\n"
    );
    let missing = agent.delete("/v1/connect/intentions/00000000-0000-0000-0000-000000000000");
    assert_eq!(missing.status, 500);
    assert_eq!(
        missing.text(),
        "Cannot delete non-existent intention: '00000000-0000-0000-0000-000000000000'"
    );
}

#[test]
fn authorize_decides_from_intentions_and_checks_the_trust_domain() {
    let agent = Agent::dev(&[]);
    let trust_domain = roots(&agent)["TrustDomain"].as_str().unwrap().to_string();
    assert!(trust_domain.ends_with(".consul"), "{trust_domain}");
    let uri = |service: &str| format!("spiffe://{trust_domain}/ns/default/dc/dc1/svc/{service}");
    let authorize = |target: &str, client: &str| {
        post(
            &agent,
            "/v1/agent/connect/authorize",
            json!({"Target": target, "ClientCertURI": client}),
        )
    };
    let r = authorize("db", &uri("web"));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["Authorized"], true);
    assert_eq!(r.json()["Reason"], "Default behavior configured by ACLs");
    agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        json!({"Action": "deny"}).to_string().as_bytes(),
    );
    let r = authorize("db", &uri("web")).json();
    assert_eq!(r["Authorized"], false);
    assert!(
        r["Reason"]
            .as_str()
            .unwrap()
            .starts_with("Matched L4 intention: web => db"),
        "{r}"
    );
    assert_eq!(authorize("db", &uri("api")).json()["Authorized"], true);
    let foreign = authorize(
        "db",
        "spiffe://11111111-2222-3333-4444-555555555555.consul/ns/default/dc/dc1/svc/api",
    )
    .json();
    assert_eq!(foreign["Authorized"], false, "{foreign}");
    let bad = authorize("db", "https://example.com/web");
    assert_eq!(
        (bad.status, bad.text().as_str()),
        (400, "ClientCertURI not a valid Connect identifier")
    );
    let agent_uri = authorize(
        "db",
        &format!("spiffe://{trust_domain}/agent/client/dc/dc1/id/x"),
    );
    assert_eq!(
        agent_uri.text(),
        "ClientCertURI not a valid Service identifier"
    );
    let missing = post(
        &agent,
        "/v1/agent/connect/authorize",
        json!({"ClientCertURI": uri("web")}),
    );
    assert_eq!(
        (missing.status, missing.text().as_str()),
        (400, "Target service must be specified")
    );
}

fn openssl(args: &[&str]) -> (bool, String) {
    let output = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl must be installed (tests/run.sh installs it)");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// The PEM blocks of a chain, in order.
fn pem_blocks(chain: &str) -> Vec<String> {
    chain
        .split_inclusive("-----END CERTIFICATE-----")
        .map(|b| b.trim().to_string())
        .filter(|b| b.contains("BEGIN CERTIFICATE"))
        .collect()
}

fn leaf(agent: &Agent, index: u64) -> (u64, Value) {
    let r = agent.get(&format!(
        "/v1/agent/connect/ca/leaf/web?index={index}&wait=30s"
    ));
    assert_eq!(r.status, 200, "{}", r.text());
    (r.index(), r.json())
}

#[test]
fn leaves_verify_with_openssl_and_a_rotation_keeps_old_leaves_valid() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("connect-leaf");
    let first_roots = roots(&agent);
    let trust_domain = first_roots["TrustDomain"].as_str().unwrap().to_string();
    let old_root = first_roots["Roots"][0]["RootCert"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(first_roots["Roots"][0]["PrivateKeyType"], "ec");
    assert_eq!(first_roots["Roots"][0]["PrivateKeyBits"], 256);
    // Consul's serial is unsigned (a random 64-bit one read as signed went negative).
    assert!(
        first_roots["Roots"][0]["SerialNumber"].is_u64(),
        "{}",
        first_roots["Roots"][0]["SerialNumber"]
    );
    // The CA's `Config` is echoed as it was written: Consul's defaults are these strings.
    assert_eq!(
        agent.get("/v1/connect/ca/configuration").json()["Config"],
        json!({"LeafCertTTL": "72h", "IntermediateCertTTL": "8760h", "RootCertTTL": "87600h"})
    );
    assert!(
        first_roots["Roots"][0].get("SigningKey").is_none(),
        "the root's key stays on the servers"
    );
    let old_root_file = dir.path().join("old-root.pem");
    std::fs::write(&old_root_file, &old_root).unwrap();

    let (index, old_leaf) = leaf(&agent, 0);
    assert_eq!(old_leaf["Service"], "web");
    let uri = format!("spiffe://{trust_domain}/ns/default/dc/dc1/svc/web");
    assert_eq!(old_leaf["ServiceURI"], uri.as_str());
    assert!(old_leaf["PrivateKeyPEM"]
        .as_str()
        .unwrap()
        .contains("PRIVATE KEY"));
    let old_leaf_file = dir.path().join("old-leaf.pem");
    std::fs::write(
        &old_leaf_file,
        &pem_blocks(old_leaf["CertPEM"].as_str().unwrap())[0],
    )
    .unwrap();
    let (ok, out) = openssl(&[
        "verify",
        "-CAfile",
        old_root_file.to_str().unwrap(),
        old_leaf_file.to_str().unwrap(),
    ]);
    assert!(ok, "openssl verify: {out}");
    let (ok, text) = openssl(&[
        "x509",
        "-noout",
        "-text",
        "-in",
        old_leaf_file.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    assert!(text.contains(&format!("URI:{uri}")), "{text}");
    assert!(text.contains("DNS:web.svc.default."), "{text}");

    // A blocking read with the current index waits out its wait and answers the same leaf.
    let started = Instant::now();
    let same = agent.get(&format!(
        "/v1/agent/connect/ca/leaf/web?index={index}&wait=1s"
    ));
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(same.json()["SerialNumber"], old_leaf["SerialNumber"]);

    // Rotate: a new key size makes a new root, cross-signed by the old one.
    let set = agent.put(
        "/v1/connect/ca/configuration",
        json!({"Provider": "consul", "Config": {"PrivateKeyType": "ec", "PrivateKeyBits": 384}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(set.status, 200, "{}", set.text());
    let rotated = agent.get("/v1/connect/ca/roots").json();
    let roots_list = rotated["Roots"].as_array().unwrap();
    assert_eq!(roots_list.len(), 2, "{rotated}");
    let active = roots_list.iter().find(|r| r["Active"] == true).unwrap();
    assert_eq!(active["PrivateKeyBits"], 384);
    assert_eq!(rotated["ActiveRootID"], active["ID"]);
    let new_root_file = dir.path().join("new-root.pem");
    std::fs::write(&new_root_file, active["RootCert"].as_str().unwrap()).unwrap();
    let config = agent.get("/v1/connect/ca/configuration").json();
    assert_eq!(config["Provider"], "consul");
    assert_eq!(
        config["Config"],
        json!({"PrivateKeyType": "ec", "PrivateKeyBits": 384})
    );

    // The agent re-signs: a blocking read past the old index gets a leaf of the new root.
    let (_, new_leaf) = leaf(&agent, index);
    assert_ne!(new_leaf["SerialNumber"], old_leaf["SerialNumber"]);
    let blocks = pem_blocks(new_leaf["CertPEM"].as_str().unwrap());
    assert_eq!(blocks.len(), 2, "the leaf comes with the cross-signed root");
    let new_leaf_file = dir.path().join("new-leaf.pem");
    std::fs::write(&new_leaf_file, &blocks[0]).unwrap();
    let cross_file = dir.path().join("cross.pem");
    std::fs::write(&cross_file, &blocks[1]).unwrap();
    let (ok, out) = openssl(&[
        "verify",
        "-CAfile",
        new_root_file.to_str().unwrap(),
        new_leaf_file.to_str().unwrap(),
    ]);
    assert!(ok, "new leaf against the new root: {out}");
    let (ok, out) = openssl(&[
        "verify",
        "-CAfile",
        old_root_file.to_str().unwrap(),
        "-untrusted",
        cross_file.to_str().unwrap(),
        new_leaf_file.to_str().unwrap(),
    ]);
    assert!(
        ok,
        "new leaf through the cross-signed root to the old root: {out}"
    );
    let (ok, out) = openssl(&[
        "verify",
        "-CAfile",
        old_root_file.to_str().unwrap(),
        old_leaf_file.to_str().unwrap(),
    ]);
    assert!(ok, "the old leaf still verifies: {out}");
    let (ok, _) = openssl(&[
        "verify",
        "-CAfile",
        new_root_file.to_str().unwrap(),
        old_leaf_file.to_str().unwrap(),
    ]);
    assert!(!ok, "the old leaf was not signed by the new root");

    let (code, out, err) = cli(
        &[
            "connect",
            "ca",
            "get-config",
            &format!("-http-addr={}", agent.http_addr()),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"PrivateKeyBits\": 384"), "{out}");
    let bad = agent.put(
        "/v1/connect/ca/configuration",
        json!({"Provider": "consul", "Config": {"LeafCertTTL": "1m"}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(bad.status, 500);
    assert!(
        bad.text()
            .contains("leaf cert TTL must be greater or equal than 1h0m0s"),
        "{}",
        bad.text()
    );
}

#[test]
fn the_intention_commands_create_check_get_match_and_delete() {
    let agent = Agent::dev(&[]);
    let addr = format!("-http-addr={}", agent.http_addr());
    let (code, out, err) = cli(&["intention", "create", &addr, "-deny", "web", "db"], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "Created: web => db (deny)");
    let (code, out, _) = cli(&["intention", "check", &addr, "web", "db"], None);
    assert_eq!((code, out.trim()), (1, "Denied"));
    let (code, out, _) = cli(&["intention", "check", &addr, "api", "db"], None);
    assert_eq!((code, out.trim()), (0, "Allowed"));
    let (code, _, err) = cli(
        &[
            "intention",
            "create",
            &addr,
            "-allow",
            "-replace",
            "web",
            "db",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = cli(&["intention", "check", &addr, "web", "db"], None);
    assert_eq!((code, out.trim()), (0, "Allowed"));
    let (code, out, _) = cli(&["intention", "get", &addr, "web", "db"], None);
    assert_eq!(code, 0);
    assert!(
        out.contains("Source:") && out.contains("web") && out.contains("Action:"),
        "{out}"
    );
    let (code, out, _) = cli(&["intention", "match", &addr, "db"], None);
    assert_eq!((code, out.trim()), (0, "web => db (allow)"));
    let (code, out, _) = cli(&["intention", "delete", &addr, "web", "db"], None);
    assert_eq!((code, out.trim()), (0, "Intention deleted."));
    let (code, out, _) = cli(&["intention", "match", &addr, "db"], None);
    assert_eq!((code, out.trim()), (0, ""));
}
