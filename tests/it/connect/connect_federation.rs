//! The Connect CA across datacenters, with real processes on loopback: two `-dev` servers,
//! dc1 the primary and dc2 a secondary (`primary_datacenter = "dc1"`) joined over the WAN
//! pool, and `openssl` checking every certificate chain.
//!
//! - dc2 starts before dc1 exists: it serves without a CA and keeps retrying; once dc1 is
//!   up it catches up — its roots are dc1's (same IDs, trust domain and cluster), its
//!   active root carries an intermediate signed by dc1's root.
//! - A dc2 leaf verifies against dc1's roots (through its intermediate, not without it) and a
//!   dc1 leaf against dc2's; dc2 authorizes a dc1 service's SPIFFE ID.
//! - A root rotation in dc1 reaches dc2: dc2's active root becomes dc1's new one, the old
//!   one stays listed (rotated out), the next dc2 leaf verifies against dc1's new root and
//!   the old dc2 leaf still against dc2's roots.
//!
//! Bounded: every wait has a deadline.

use crate::agent_support;
use crate::common;

use agent_support::wait_for;
use common::{fresh_loopback, Agent, TempDir};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long dc2 may take to replicate dc1's roots once dc1 is up: the WAN join's retry
/// backoff, the router's refresh, and the replication's own retry backoff (at most 30 s).
const CATCH_UP_LIMIT: Duration = Duration::from_secs(90);
/// How long a rotation in dc1 may take to show in dc2: one blocking read's wake-up and a
/// signature, or a retry when dc2 asked while dc1 rotated.
const ROTATION_LIMIT: Duration = Duration::from_secs(60);

fn roots(agent: &Agent) -> Value {
    let r = agent.get("/v1/connect/ca/roots");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn active(roots: &Value) -> Value {
    roots["Roots"]
        .as_array()
        .and_then(|list| list.iter().find(|r| r["Active"] == true))
        .cloned()
        .unwrap_or(Value::Null)
}

fn root_ids(roots: &Value) -> Vec<String> {
    let mut ids: Vec<String> = roots["Roots"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|r| r["ID"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
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

/// The agent's leaf for `service`, blocking past `index`: `(index, leaf)`.
fn leaf(agent: &Agent, service: &str, index: u64) -> (u64, Value) {
    let r = agent.get(&format!(
        "/v1/agent/connect/ca/leaf/{service}?index={index}&wait=30s"
    ));
    assert_eq!(r.status, 200, "{}\n{}", r.text(), agent.log());
    (r.index(), r.json())
}

/// Writes a leaf and the rest of its chain as two files: `(leaf, untrusted chain)`.
fn leaf_files(dir: &Path, name: &str, leaf: &Value) -> (PathBuf, PathBuf) {
    let blocks = pem_blocks(leaf["CertPEM"].as_str().expect("CertPEM"));
    assert!(!blocks.is_empty(), "{leaf}");
    let leaf_file = dir.join(format!("{name}-leaf.pem"));
    std::fs::write(&leaf_file, format!("{}\n", blocks[0])).unwrap();
    let chain_file = dir.join(format!("{name}-chain.pem"));
    let mut chain = String::new();
    for block in &blocks[1..] {
        chain.push_str(block);
        chain.push('\n');
    }
    std::fs::write(&chain_file, chain).unwrap();
    (leaf_file, chain_file)
}

/// The datacenter's trusted roots as one PEM file (`?pem=true`).
fn roots_file(dir: &Path, name: &str, agent: &Agent) -> PathBuf {
    let r = agent.get("/v1/connect/ca/roots?pem=true");
    assert_eq!(r.status, 200, "{}", r.text());
    let file = dir.join(format!("{name}-roots.pem"));
    std::fs::write(&file, &r.body).unwrap();
    file
}

/// `openssl verify` of `leaf` against `roots`, with `chain` as untrusted intermediates.
fn verifies(roots: &Path, chain: Option<&Path>, leaf: &Path) -> (bool, String) {
    let mut args = vec!["verify", "-CAfile", roots.to_str().unwrap()];
    if let Some(chain) = chain {
        if std::fs::metadata(chain).is_ok_and(|m| m.len() > 0) {
            args.extend(["-untrusted", chain.to_str().unwrap()]);
        }
    }
    args.push(leaf.to_str().unwrap());
    openssl(&args)
}

#[test]
fn a_secondary_datacenter_chains_its_leaves_to_the_primary_roots() {
    let dir = TempDir::new("connect-federation");
    let dc1_ip = fresh_loopback();
    let primary = "primary_datacenter = \"dc1\"";
    let join_wan = format!("retry_join_wan = [\"{dc1_ip}\"]");

    // dc2 first, its primary not there yet: it serves, with no roots, and keeps trying.
    let dc2 = Agent::dev_at(
        fresh_loopback(),
        &["-datacenter", "dc2", "-hcl", primary, "-hcl", &join_wan],
    );
    wait_for(
        Duration::from_secs(20),
        "dc2's first replication attempt",
        || {
            dc2.log()
                .contains("CA root replication failed, will retry")
                .then_some(())
        },
    );
    let lonely = roots(&dc2);
    assert!(lonely["Roots"].is_null(), "dc2 made no root: {lonely}");
    assert_eq!(
        dc2.get("/v1/kv/probe").status,
        404,
        "dc2 serves without its primary"
    );

    // dc1 arrives; dc2 catches up with its roots.
    let dc1 = Agent::dev_at(dc1_ip, &["-datacenter", "dc1", "-hcl", primary]);
    let dc1_roots = wait_for(Duration::from_secs(20), "dc1's CA", || {
        let r = roots(&dc1);
        (!active(&r).is_null()).then_some(r)
    });
    let trust_domain = dc1_roots["TrustDomain"].as_str().unwrap().to_string();
    let dc2_roots = wait_for(CATCH_UP_LIMIT, "dc2 replicating dc1's roots", || {
        let r = roots(&dc2);
        (r["ActiveRootID"] == dc1_roots["ActiveRootID"]).then_some(r)
    });
    assert_eq!(dc2_roots["TrustDomain"], trust_domain.as_str());
    assert_eq!(root_ids(&dc2_roots), root_ids(&dc1_roots));
    let (dc1_active, dc2_active) = (active(&dc1_roots), active(&dc2_roots));
    assert_eq!(dc2_active["RootCert"], dc1_active["RootCert"]);
    let dc2_intermediates = dc2_active["IntermediateCerts"].as_array().unwrap();
    assert_eq!(dc2_intermediates.len(), 1, "{dc2_active}");
    assert_ne!(
        dc2_active["SigningKeyID"], dc1_active["SigningKeyID"],
        "dc2 signs with its own key"
    );
    let intermediate_file = dir.path().join("dc2-intermediate.pem");
    std::fs::write(&intermediate_file, dc2_intermediates[0].as_str().unwrap()).unwrap();
    let dc1_roots_file = roots_file(dir.path(), "dc1", &dc1);
    let (ok, out) = verifies(&dc1_roots_file, None, &intermediate_file);
    assert!(ok, "dc2's intermediate hangs from dc1's root: {out}");
    let (ok, text) = openssl(&[
        "x509",
        "-noout",
        "-text",
        "-in",
        intermediate_file.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("CA:TRUE, pathlen:0"), "{text}");
    assert!(
        text.contains(&format!("URI:spiffe://{trust_domain}")),
        "{text}"
    );
    assert!(
        text.contains("CN=sec-") || text.contains("CN = sec-"),
        "{text}"
    );

    // Leaves of each datacenter verify against the other's roots.
    let (dc2_index, db_leaf) = leaf(&dc2, "db", 0);
    assert_eq!(
        db_leaf["ServiceURI"],
        format!("spiffe://{trust_domain}/ns/default/dc/dc2/svc/db").as_str()
    );
    let (db_file, db_chain) = leaf_files(dir.path(), "db", &db_leaf);
    let (ok, out) = verifies(&dc1_roots_file, Some(&db_chain), &db_file);
    assert!(ok, "a dc2 leaf verifies against dc1's roots: {out}");
    let (ok, _) = verifies(&dc1_roots_file, None, &db_file);
    assert!(
        !ok,
        "a dc2 leaf is signed by dc2's intermediate, not dc1's root"
    );
    let (_, web_leaf) = leaf(&dc1, "web", 0);
    let (web_file, web_chain) = leaf_files(dir.path(), "web", &web_leaf);
    let dc2_roots_file = roots_file(dir.path(), "dc2", &dc2);
    let (ok, out) = verifies(&dc2_roots_file, Some(&web_chain), &web_file);
    assert!(ok, "a dc1 leaf verifies against dc2's roots: {out}");
    let authorized = common::request(
        dc2.addr(),
        "POST",
        "/v1/agent/connect/authorize",
        json!({"Target": "db", "ClientCertURI": web_leaf["ServiceURI"]})
            .to_string()
            .as_bytes(),
        &[],
    );
    assert_eq!(authorized.status, 200, "{}", authorized.text());
    assert_eq!(
        authorized.json()["Authorized"],
        true,
        "{}",
        authorized.text()
    );

    // A rotation in dc1 reaches dc2.
    let old_id = dc1_roots["ActiveRootID"].as_str().unwrap().to_string();
    let set = dc1.put(
        "/v1/connect/ca/configuration",
        json!({"Provider": "consul", "Config": {"PrivateKeyType": "ec", "PrivateKeyBits": 384}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(set.status, 200, "{}", set.text());
    let rotated = roots(&dc1);
    let new_id = rotated["ActiveRootID"].as_str().unwrap().to_string();
    assert_ne!(new_id, old_id);
    let dc2_rotated = wait_for(ROTATION_LIMIT, "dc2 following dc1's rotation", || {
        let r = roots(&dc2);
        (r["ActiveRootID"] == new_id.as_str()).then_some(r)
    });
    assert_eq!(root_ids(&dc2_rotated), root_ids(&rotated));
    let kept = dc2_rotated["Roots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ID"] == old_id.as_str())
        .expect("dc2 keeps the rotated-out root");
    assert_eq!(kept["Active"], false);
    let new_active = active(&dc2_rotated);
    assert_eq!(new_active["RootCert"], active(&rotated)["RootCert"]);
    // The primary's cross-signed certificate, then dc2's new intermediate.
    assert_eq!(
        new_active["IntermediateCerts"].as_array().unwrap().len(),
        2,
        "{new_active}"
    );
    let (_, new_db_leaf) = leaf(&dc2, "db", dc2_index);
    assert_ne!(new_db_leaf["SerialNumber"], db_leaf["SerialNumber"]);
    let (new_db_file, new_db_chain) = leaf_files(dir.path(), "db-new", &new_db_leaf);
    let new_root_file = dir.path().join("dc1-new-root.pem");
    std::fs::write(
        &new_root_file,
        active(&rotated)["RootCert"].as_str().unwrap(),
    )
    .unwrap();
    let (ok, out) = verifies(&new_root_file, Some(&new_db_chain), &new_db_file);
    assert!(ok, "the new dc2 leaf hangs from dc1's new root: {out}");
    let dc2_roots_after = roots_file(dir.path(), "dc2-after", &dc2);
    let (ok, out) = verifies(&dc2_roots_after, Some(&db_chain), &db_file);
    assert!(ok, "the old dc2 leaf still verifies in dc2: {out}");
}
