//! `/v1/peering/*` and `praetor peering` between two dev clusters: the token's shape,
//! rotation, establishment, single use, Consul's errors, blocking lists, deletion (which
//! terminates the other side's peering), ACLs and snapshots.

use super::support::{
    certificates, decode, generate_token, peering_agent, post, root_pems, trust_domain,
    GRPC_TLS_PORT,
};
use crate::common::{cli, request, Agent};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The acceptor's token is Consul's document: CA roots, server addresses at the gRPC TLS
/// port, `server.<dc>.peering.<trust domain>`, the peering's ID, a secret and `Remote`; a
/// second token keeps the ID and rotates the secret.
fn check_token_shape(acceptor: &Agent) -> (String, String) {
    let first = generate_token(
        acceptor,
        "cluster-b",
        json!({"Meta": {"env": "test"}, "ServerExternalAddresses": ["lb.example:8503"]}),
    );
    let (text, token) = decode(&first);
    let order = [
        "\"CA\"",
        "\"ManualServerAddresses\"",
        "\"ServerAddresses\"",
        "\"ServerName\"",
        "\"PeerID\"",
        "\"EstablishmentSecret\"",
        "\"Remote\"",
    ];
    let positions: Vec<usize> = order.iter().map(|k| text.find(k).unwrap()).collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "Consul's field order: {text}"
    );
    assert_eq!(token["CA"], json!(root_pems(acceptor)));
    assert_eq!(
        token["ServerAddresses"],
        json!([format!("{}:{GRPC_TLS_PORT}", acceptor.ip)])
    );
    assert_eq!(token["ManualServerAddresses"], json!(["lb.example:8503"]));
    assert_eq!(
        token["ServerName"],
        format!("server.dc1.peering.{}", trust_domain(acceptor))
    );
    assert_eq!(
        token["Remote"],
        json!({"Partition": "default", "Datacenter": "dc1", "Locality": null})
    );
    let stored = acceptor.get("/v1/peering/cluster-b");
    assert_eq!(stored.status, 200, "{}", stored.text());
    let stored = stored.json();
    assert_eq!(stored["State"], "PENDING");
    assert_eq!(
        stored["PeerID"],
        Value::Null,
        "an acceptor has no peer ID yet"
    );
    assert_eq!(stored["Meta"], json!({"env": "test"}));
    assert_eq!(token["PeerID"], stored["ID"]);
    let secret = token["EstablishmentSecret"].as_str().unwrap().to_string();
    assert_eq!(secret.len(), 36, "a UUID");

    let second = generate_token(acceptor, "cluster-b", json!({}));
    let (_, rotated) = decode(&second);
    assert_eq!(rotated["PeerID"], token["PeerID"], "the same peering");
    assert_ne!(
        rotated["EstablishmentSecret"],
        secret.as_str(),
        "a new secret"
    );
    assert_eq!(rotated["ManualServerAddresses"], Value::Null);
    (second, token["PeerID"].as_str().unwrap().to_string())
}

fn assert_refused(answer: crate::common::HttpResponse, status: u16, text: &str) {
    assert_eq!(answer.status, status, "{}", answer.text());
    assert!(
        answer.text().contains(text),
        "expected {text:?} in {:?}",
        answer.text()
    );
}

/// Bad bodies and tokens get Consul's texts.
fn check_bad_requests(dialer: &Agent, acceptor: &Agent, acceptor_token: &str) {
    let establish = |body: Value| post(dialer, "/v1/peering/establish", &body, None);
    assert_refused(
        establish(json!({"PeeringToken": acceptor_token})),
        400,
        "PeerName is required in the payload when establishing a peering.",
    );
    assert_refused(
        establish(json!({"PeerName": "x"})),
        400,
        "PeeringToken is required in the payload when establishing a peering.",
    );
    assert_refused(
        establish(json!({"PeerName": "x", "PeeringToken": "not base64!"})),
        400,
        "failed to decode token: illegal base64 data at input byte 3",
    );
    assert_refused(
        establish(json!({"PeerName": "x", "PeeringToken": "eyJDQSI6"})),
        400,
        "unexpected end of JSON input",
    );
    assert_refused(
        establish(json!({"PeerName": "x", "PeeringToken": "e30="})),
        400,
        "peering token server addresses value is empty",
    );
    assert_refused(
        establish(json!({"PeerName": "Bad_Name", "PeeringToken": acceptor_token})),
        400,
        "Bad_Name is not a valid peer name",
    );
    assert_refused(
        post(acceptor, "/v1/peering/token", &json!({"Meta": {}}), None),
        400,
        "PeerName is required in the payload when generating a new peering token.",
    );
    assert_refused(
        post(
            acceptor,
            "/v1/peering/token",
            &json!({"PeerName": "x", "Meta": {"consul-x": "1"}}),
            None,
        ),
        400,
        "meta tags failed validation",
    );
    // A cluster's own token.
    assert_refused(
        post(
            acceptor,
            "/v1/peering/establish",
            &json!({"PeerName": "self", "PeeringToken": acceptor_token}),
            None,
        ),
        400,
        "cannot create a peering within the same cluster",
    );
}

#[test]
fn a_token_establishes_an_establishing_peering_once_and_deletion_removes_it() {
    let dir = certificates("peering-http");
    let acceptor = peering_agent(&dir, "dc1", "");
    let dialer = peering_agent(&dir, "dc2", "");
    let (token, acceptor_id) = check_token_shape(&acceptor);
    check_bad_requests(&dialer, &acceptor, &token);

    let body = json!({"PeerName": "cluster-a", "PeeringToken": token, "Meta": {"team": "x"}});
    let answer = post(&dialer, "/v1/peering/establish", &body, None);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.json(), json!({}));
    let stored = dialer.get("/v1/peering/cluster-a").json();
    let (_, fields) = decode(&token);
    // The stream may already be up (`stream.rs` follows it).
    assert!(
        stored["State"] == "ESTABLISHING" || stored["State"] == "ACTIVE",
        "{stored}"
    );
    assert_eq!(stored["PeerID"], acceptor_id.as_str());
    assert_eq!(stored["PeerServerName"], fields["ServerName"]);
    assert_eq!(stored["PeerServerAddresses"], fields["ServerAddresses"]);
    assert_eq!(stored["PeerCAPems"], fields["CA"]);
    assert_eq!(
        stored["Remote"],
        json!({"Partition": "default", "Datacenter": "dc1"})
    );
    assert_eq!(stored["Meta"], json!({"team": "x"}));

    // Single use: the same token again, under this name or another.
    for name in ["cluster-a", "other"] {
        let body = json!({"PeerName": name, "PeeringToken": token});
        assert_refused(
            post(&dialer, "/v1/peering/establish", &body, None),
            403,
            "a new peering token must be generated",
        );
    }
    // A name the acceptor gave a peering it accepts cannot dial.
    let dialer_token = generate_token(&dialer, "reverse", json!({}));
    let body = json!({"PeerName": "cluster-b", "PeeringToken": dialer_token});
    assert_refused(
        post(&acceptor, "/v1/peering/establish", &body, None),
        500,
        "there is an existing peering expecting to be dialed",
    );
    // A name that dials cannot accept.
    assert_refused(
        post(
            &dialer,
            "/v1/peering/token",
            &json!({"PeerName": "cluster-a"}),
            None,
        ),
        500,
        "there is already an established peering",
    );

    // Deleting on the dialer, once the stream is up, terminates the acceptor's peering.
    wait_state(&dialer, "cluster-a", "ACTIVE");
    wait_state(&acceptor, "cluster-b", "ACTIVE");
    check_list_blocks_and_delete(&dialer);
    wait_state(&acceptor, "cluster-b", "TERMINATED");
    check_snapshot_keeps_peerings(&acceptor, &acceptor_id);
}

/// A blocking list wakes when a peering is deleted; the peering is gone afterwards and a
/// second delete still answers 200.
fn check_list_blocks_and_delete(dialer: &Agent) {
    let list = dialer.get("/v1/peerings");
    assert_eq!(list.status, 200);
    let names: Vec<_> = list
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["Name"].clone())
        .collect();
    assert_eq!(names, [json!("cluster-a"), json!("reverse")]);
    let index = list.index();
    let addr = dialer.addr();
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let path = format!("/v1/peerings?index={index}&wait=20s");
        let answer = request(addr, "GET", &path, b"", &[]);
        (answer, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    let deleted = dialer.delete("/v1/peering/cluster-a");
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    let (woken, waited) = waiter.join().unwrap();
    assert!(
        waited < Duration::from_secs(10),
        "woken by the delete, not the timeout"
    );
    assert!(woken.index() > index);
    let missing = dialer.get("/v1/peering/cluster-a");
    assert_eq!(missing.status, 404);
    assert_eq!(missing.text().trim(), "Peering not found for \"cluster-a\"");
    assert_eq!(dialer.delete("/v1/peering/cluster-a").status, 200);
    let left: Vec<_> = dialer
        .get("/v1/peerings")
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["Name"].clone())
        .collect();
    assert_eq!(left, [json!("reverse")]);
}

/// Waits (bounded: 30 s) until `agent`'s peering `name` is in `state`.
fn wait_state(agent: &Agent, name: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let read = agent.get(&format!("/v1/peering/{name}"));
        if read.status == 200 && read.json()["State"] == state {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "peering {name} never became {state}: {}\nlog:\n{}",
            read.text(),
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A snapshot taken with a peering restores it, ID and all, after it was deleted.
fn check_snapshot_keeps_peerings(acceptor: &Agent, acceptor_id: &str) {
    let snapshot = acceptor.get("/v1/snapshot");
    assert_eq!(snapshot.status, 200);
    assert_eq!(acceptor.delete("/v1/peering/cluster-b").status, 200);
    assert_eq!(acceptor.get("/v1/peering/cluster-b").status, 404);
    let restored = acceptor.put("/v1/snapshot", &snapshot.body);
    assert_eq!(restored.status, 200, "{}", restored.text());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let read = acceptor.get("/v1/peering/cluster-b");
        if read.status == 200 {
            assert_eq!(read.json()["ID"], acceptor_id);
            assert_eq!(read.json()["State"], "TERMINATED");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restored peering never showed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn peering_writes_need_peering_write_and_reads_peering_read() {
    let dir = certificates("peering-acl");
    let acl =
        "acl { enabled = true default_policy = \"deny\" tokens { initial_management = \"root\" } }";
    let agent = peering_agent(&dir, "dc1", acl);
    crate::acl_common::wait_for_token(&agent, "root");
    let (reader, _, _) =
        crate::acl_common::token_with_rules(&agent, "root", "peer-reader", "peering = \"read\"");
    let (writer, _, _) =
        crate::acl_common::token_with_rules(&agent, "root", "peer-writer", "peering = \"write\"");
    let body = json!({"PeerName": "remote"});
    let denied = post(&agent, "/v1/peering/token", &body, Some(&reader));
    assert_refused(denied, 403, "Permission denied");
    let anonymous = post(&agent, "/v1/peering/token", &body, None);
    assert_eq!(anonymous.status, 403, "{}", anonymous.text());
    let made = post(&agent, "/v1/peering/token", &body, Some(&writer));
    assert_eq!(made.status, 200, "{}", made.text());
    let get = |token: Option<&str>| {
        let headers: Vec<(&str, &str)> = token.map(|t| ("X-Consul-Token", t)).into_iter().collect();
        request(agent.addr(), "GET", "/v1/peering/remote", b"", &headers)
    };
    assert_eq!(get(Some(&reader)).status, 200);
    assert_eq!(get(None).status, 403);
    let delete = |token: &str| {
        request(
            agent.addr(),
            "DELETE",
            "/v1/peering/remote",
            b"",
            &[("X-Consul-Token", token)],
        )
    };
    assert_eq!(delete(&reader).status, 403);
    assert_eq!(delete(&writer).status, 200);
}

#[test]
fn the_peering_commands_round_trip() {
    let dir = certificates("peering-cli");
    let acceptor = peering_agent(&dir, "dc1", "");
    let dialer = peering_agent(&dir, "dc2", "");
    let a = acceptor.http_addr();
    let b = dialer.http_addr();
    let run = |args: &[&str]| cli(args, None);

    let (code, _, err) = run(&["peering", "generate-token", "-http-addr", &a]);
    assert_eq!((code, err.trim()), (1, "Missing the required -name flag"));
    let (code, out, err) = run(&[
        "peering",
        "generate-token",
        "-http-addr",
        &a,
        "-name",
        "dc2-peer",
        "-meta",
        "env=ci",
        "-server-external-addresses",
        "10.0.0.1:8503,10.0.0.2:8503",
    ]);
    assert_eq!(code, 0, "{err}");
    let token = out.trim().to_string();
    let (_, fields) = decode(&token);
    assert_eq!(
        fields["ManualServerAddresses"],
        json!(["10.0.0.1:8503", "10.0.0.2:8503"])
    );
    let (code, out, _) = run(&[
        "peering",
        "generate-token",
        "-http-addr",
        &a,
        "-name",
        "dc2-peer",
        "-format",
        "json",
    ]);
    assert_eq!(code, 0);
    let answer: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(answer["PeeringToken"].is_string());

    let (code, out, err) = run(&[
        "peering",
        "establish",
        "-http-addr",
        &b,
        "-name",
        "dc1-peer",
        "-peering-token",
        &token,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim(),
        "Successfully established peering connection with dc1-peer"
    );
    let (code, _, err) = run(&["peering", "establish", "-http-addr", &b, "-name", "x"]);
    assert_eq!(
        (code, err.trim()),
        (1, "Missing the required -peering-token flag")
    );

    let (code, out, _) = run(&["peering", "list", "-http-addr", &b]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("Name") && lines[0].contains("Imported Svcs"),
        "{out}"
    );
    assert!(
        lines[1].starts_with("dc1-peer") && lines[1].contains("ESTABLISHING"),
        "{out}"
    );
    let (code, out, _) = run(&["peering", "read", "-http-addr", &b, "-name", "dc1-peer"]);
    assert_eq!(code, 0);
    assert!(out.contains("Name:         dc1-peer"), "{out}");
    assert!(out.contains("State:        ESTABLISHING"), "{out}");
    assert!(out.contains("Peer CA Pems:          1"), "{out}");
    let (code, out, _) = run(&[
        "peering",
        "read",
        "-http-addr",
        &b,
        "-name",
        "dc1-peer",
        "-format",
        "json",
    ]);
    assert_eq!(code, 0);
    let read: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(read["PeerID"], fields["PeerID"]);

    let (code, out, _) = run(&["peering", "delete", "-http-addr", &b, "-name", "dc1-peer"]);
    assert_eq!(code, 0);
    assert_eq!(
        out.trim(),
        "Successfully submitted peering connection, dc1-peer, for deletion"
    );
    let (code, _, err) = run(&["peering", "read", "-http-addr", &b, "-name", "dc1-peer"]);
    assert_eq!(
        (code, err.trim()),
        (1, "No peering with name dc1-peer found.")
    );
    let (code, out, _) = run(&["peering", "list", "-http-addr", &b]);
    assert_eq!((code, out.trim()), (0, "There are no peering connections."));
}

/// `exported-services` entries are stored and read back, and refused with Consul CE's
/// reasons.
#[test]
fn exported_services_entries_are_validated_as_consul_ce() {
    let agent = Agent::dev(&[]);
    let entry = json!({
        "Kind": "exported-services",
        "Name": "default",
        "Services": [{"Name": "web", "Consumers": [{"Peer": "cluster-b"}]}],
    });
    let written = agent.put("/v1/config", entry.to_string().as_bytes());
    assert_eq!(written.status, 200, "{}", written.text());
    let read = agent.get("/v1/config/exported-services/default");
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(read.json()["Services"], entry["Services"]);
    let refused = |body: Value, reason: &str| {
        let answer = agent.put("/v1/config", body.to_string().as_bytes());
        assert_ne!(answer.status, 200, "{body}");
        assert!(
            answer.text().contains(reason),
            "{reason:?} in {}",
            answer.text()
        );
    };
    refused(
        json!({"Kind": "exported-services", "Name": "web"}),
        "exported-services Name must be \"default\"",
    );
    refused(
        json!({"Kind": "exported-services", "Name": "default", "Services": [{"Name": "web"}]}),
        "Services[0]: must have at least one consumer",
    );
    refused(
        json!({"Kind": "exported-services", "Name": "default",
               "Services": [{"Name": "web", "Consumers": [{"Peer": "a", "Partition": "default"}]}]}),
        "must define at most one of Peer, Partition, or SamenessGroup",
    );
    refused(
        json!({"Kind": "exported-services", "Name": "default",
               "Services": [{"Name": "web", "Consumers": [{"Peer": "*"}]}]}),
        "exporting to all peers (wildcard) is not supported",
    );
}
