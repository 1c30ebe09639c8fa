//! The gossip keyring through a server, as Consul's agent asks for it: a client agent's
//! `/v1/operator/keyring` is `Internal.KeyringOperation` on its server, which runs serf's
//! key query over its WAN pool and its LAN pool and hands the operation to every other
//! datacenter's server. A client agent therefore lists the WAN pool and both datacenters'
//! LAN pools, exactly as its server answers; a key installed, made primary and removed
//! from the client agent changes every member's keyring in both datacenters; the server
//! checks the token (`keyring:read`, `keyring:write`) and refuses an anonymous request
//! with `default_policy = deny`; an independent msgpack client makes the raw call.

use crate::acl_common::{call, token_with_rules, wait_for_token};
use crate::common;

use super::consul_rpc::{wait_for_log, TwoDatacenters};
use common::{cli, Agent, Cluster, TempDir};
use serde_json::Value;
use std::time::{Duration, Instant};

/// A fresh gossip key from `praetor keygen`.
fn keygen() -> String {
    let (code, key, err) = cli(&["keygen"], None);
    assert_eq!(code, 0, "{err}");
    key.trim().to_string()
}

/// `GET /v1/operator/keyring` on `agent`, which must answer 200.
fn list(agent: &Agent, query: &str) -> Value {
    let answer = agent.get(&format!("/v1/operator/keyring{query}"));
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.json()
}

/// The pools of a listing as (WAN, datacenter) with their member counts.
fn pools(listing: &Value) -> Vec<(bool, String, u64)> {
    listing
        .as_array()
        .expect("a list of KeyringResponse")
        .iter()
        .map(|pool| {
            (
                pool["WAN"].as_bool().unwrap(),
                pool["Datacenter"].as_str().unwrap().to_string(),
                pool["NumNodes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Whether every pool of `listing` has exactly `installed` on all its members, and
/// `primary` as every member's primary key.
fn every_member_has(listing: &Value, installed: &[&str], primary: &str) -> bool {
    listing.as_array().unwrap().iter().all(|pool| {
        let members = &pool["NumNodes"];
        let keys = pool["Keys"].as_object().unwrap();
        keys.len() == installed.len()
            && installed.iter().all(|key| &keys[*key] == members)
            && pool["PrimaryKeys"].as_object().unwrap().len() == 1
            && &pool["PrimaryKeys"][primary] == members
    })
}

/// Waits until `agent` lists `expected` pools and every member holds `installed`.
fn wait_for_keys(
    agent: &Agent,
    expected: &[(bool, String, u64)],
    installed: &[&str],
    primary: &str,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let answer = agent.get("/v1/operator/keyring");
        if answer.status == 200 {
            let listing = answer.json();
            if pools(&listing) == expected && every_member_has(&listing, installed, primary) {
                return listing;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{}: {} {}",
            agent.ip,
            answer.status,
            answer.text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_client_agents_keyring_goes_through_its_server_to_every_pool_and_datacenter() {
    let first = keygen();
    let encrypt = ["-encrypt", first.as_str()];
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start_with("keyring-calls", &encrypt, &encrypt);
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    // The WAN pool (both servers), dc1's LAN pool (its server and the client agent), then
    // dc2's LAN pool, forwarded there.
    let expected = vec![
        (true, "dc1".to_string(), 2),
        (false, "dc1".to_string(), 2),
        (false, "dc2".to_string(), 1),
    ];
    let from_server = wait_for_keys(server, &expected, &[&first], &first);
    // The client agent lists the WAN pool too, as its server answers.
    assert_eq!(
        wait_for_keys(client, &expected, &[&first], &first),
        from_server
    );
    let from_client = client.get("/v1/operator/keyring");
    let direct = server.get("/v1/operator/keyring");
    assert_eq!(
        (from_client.status, from_client.text()),
        (direct.status, direct.text())
    );
    wait_for_log(server, &["rpc: call Internal.KeyringOperation"]);
    wait_for_log(remote, &["rpc: call Internal.KeyringOperation"]);
    // dc2's server lists the WAN pool and its own LAN pool, then dc1's.
    let theirs = pools(&list(remote, ""));
    assert_eq!(
        theirs,
        vec![
            (true, "dc2".to_string(), 2),
            (false, "dc2".to_string(), 1),
            (false, "dc1".to_string(), 2),
        ]
    );
    // `?local-only` lists this datacenter's LAN pool alone; `?relay-factor` is checked.
    assert_eq!(
        pools(&list(client, "?local-only=true")),
        vec![(false, "dc1".to_string(), 2)]
    );
    assert_eq!(pools(&list(client, "?relay-factor=2")), expected);
    // `praetor keyring` passes both on.
    let http = client.http_addr();
    let (code, out, err) = cli(
        &[
            "keyring",
            "-list",
            "-local-only",
            "-relay-factor=1",
            "-http-addr",
            &http,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("dc1 (LAN):\n  {first} [2/2]")),
        "{out}"
    );
    assert!(!out.contains("WAN:") && !out.contains("dc2"), "{out}");
    let (code, out, _) = cli(&["keyring", "-list", "-http-addr", &http], None);
    assert_eq!(code, 0);
    assert!(out.contains("WAN:") && out.contains("dc2 (LAN):"), "{out}");
    let (code, _, err) = cli(
        &[
            "keyring",
            "-install",
            &first,
            "-local-only",
            "-http-addr",
            &http,
        ],
        None,
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("local-only can only be set for list requests"),
        "{err}"
    );
    for (method, query, words) in [
        (
            "POST",
            "?local-only=true",
            "Invalid use of local-only: local-only can only be set for list requests",
        ),
        (
            "GET",
            "?relay-factor=9",
            "Invalid relay-factor: Relay factor must be in range: [0, 5]",
        ),
        (
            "GET",
            "?local-only=maybe",
            "Error parsing local-only: strconv.ParseBool: parsing \"maybe\": invalid syntax",
        ),
    ] {
        let body = format!("{{\"Key\":\"{first}\"}}");
        let answer = call(
            client,
            method,
            &format!("/v1/operator/keyring{query}"),
            body.as_bytes(),
            None,
        );
        assert_eq!((answer.status, answer.text().as_str()), (400, words));
    }

    // Install, use and remove from the client agent: every member of every pool in both
    // datacenters follows.
    let second = keygen();
    let body = format!("{{\"Key\":\"{second}\"}}");
    let installed = call(
        client,
        "POST",
        "/v1/operator/keyring",
        body.as_bytes(),
        None,
    );
    assert_eq!((installed.status, installed.text().as_str()), (200, ""));
    wait_for_keys(server, &expected, &[&first, &second], &first);
    let used = call(client, "PUT", "/v1/operator/keyring", body.as_bytes(), None);
    assert_eq!((used.status, used.text().as_str()), (200, ""));
    wait_for_keys(client, &expected, &[&first, &second], &second);
    // The primary key cannot be removed: every pool reports its members' refusals, in
    // Consul's multi-error words.
    let refused = call(
        client,
        "DELETE",
        "/v1/operator/keyring",
        body.as_bytes(),
        None,
    );
    assert_eq!(refused.status, 500, "{}", refused.text());
    let text = refused.text();
    assert!(
        text.starts_with("8 errors occurred:\n\t* WAN error: 2/2 nodes reported failure"),
        "{text}"
    );
    for pool in ["dc1 (LAN) error: 2/2", "dc2 (LAN) error: 1/1"] {
        assert!(text.contains(pool), "{text}");
    }
    let old = format!("{{\"Key\":\"{first}\"}}");
    let removed = call(
        client,
        "DELETE",
        "/v1/operator/keyring",
        old.as_bytes(),
        None,
    );
    assert_eq!((removed.status, removed.text().as_str()), (200, ""));
    wait_for_keys(client, &expected, &[&second], &second);
    let theirs = list(remote, "");
    assert!(every_member_has(&theirs, &[&second], &second), "{theirs}");
}

const MANAGEMENT: &str = "5d1e4b0c-7f3a-4c2e-9b8d-2a6f0e1c3b4d";

#[test]
fn a_client_agents_keyring_is_checked_by_its_server() {
    let key = keygen();
    let acl = format!(
        "acl {{\n enabled = true\n default_policy = \"deny\"\n tokens {{\n  initial_management = \"{MANAGEMENT}\"\n  agent = \"{MANAGEMENT}\"\n }}\n}}"
    );
    let flags = ["-encrypt", key.as_str(), "-hcl", acl.as_str()];
    let cluster = Cluster::spawn(1, &flags);
    let server = &cluster.servers[0];
    server.wait_ready();
    wait_for_token(server, MANAGEMENT);
    let data = TempDir::new("keyring-calls-acl");
    let client = cluster.start_client(&data, &flags);
    client.wait_ready();
    let (reader, _, _) = token_with_rules(server, MANAGEMENT, "keyring-read", "keyring = \"read\"");
    let path = "/v1/operator/keyring";
    let body = format!("{{\"Key\":\"{key}\"}}");

    // Anonymous: refused, by the server, in its words; the server's own answer is the same.
    let anonymous = call(&client, "GET", path, b"", None);
    assert_eq!(anonymous.status, 403, "{}", anonymous.text());
    assert!(
        anonymous.text().contains("lacks permission 'keyring:read'"),
        "{}",
        anonymous.text()
    );
    let direct = call(server, "GET", path, b"", None);
    assert_eq!(
        (anonymous.status, anonymous.text()),
        (direct.status, direct.text())
    );
    wait_for_log(server, &["rpc: call Internal.KeyringOperation"]);
    // A token that may read lists (the client agent's pool included once it has joined),
    // and may not write.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = call(&client, "GET", path, b"", Some(&reader));
        assert_eq!(listed.status, 200, "{}", listed.text());
        let lan = listed.json()[1].clone();
        if lan["NumNodes"] == 2 && lan["Keys"][&key] == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "{lan}");
        std::thread::sleep(Duration::from_millis(250));
    }
    let write = call(&client, "POST", path, body.as_bytes(), Some(&reader));
    assert_eq!(write.status, 403, "{}", write.text());
    assert!(
        write.text().contains("lacks permission 'keyring:write'"),
        "{}",
        write.text()
    );
    // A token the server does not know.
    let unknown = call(
        &client,
        "GET",
        path,
        b"",
        Some("00000000-dead-beef-0000-000000000000"),
    );
    assert_eq!(
        (unknown.status, unknown.text().as_str()),
        (403, "ACL not found")
    );
    // The management token may write.
    let installed = call(&client, "POST", path, body.as_bytes(), Some(MANAGEMENT));
    assert_eq!((installed.status, installed.text().as_str()), (200, ""));
}

#[test]
fn an_independent_client_lists_the_keyring_with_a_raw_call() {
    let key = keygen();
    let agent = Agent::dev(&["-encrypt", &key]);
    common::run_python("keyring_rpc.py", &[&agent.ip.to_string(), &key], &[&agent]);
}
