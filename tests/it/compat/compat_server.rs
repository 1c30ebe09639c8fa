//! Server-side behaviours Consul clients rely on, each checked over real sockets against a
//! real `praetor agent -dev`, and each named after the Consul behaviour it reproduces (looked
//! up in hashicorp/consul's source: `agent/http_ce.go`, `agent/agent_endpoint.go`,
//! `agent/agent.go`, `agent/consul/leader.go`, `agent/http.go`).

use crate::common;

use common::{fresh_loopback, parse_one_response, raw_exchange, request, Agent};
use std::time::{Duration, Instant};

/// Longest a fresh agent may take to report a leader.
const LEADER_WAIT: Duration = Duration::from_secs(20);

/// A request (method, path, headers) and the refusal Consul CE gives it.
type RefusalCase<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], String);

/// Consul CE's `parseEntMeta`: a namespace or partition, by header or query parameter, is a
/// 400 naming it, on every endpoint; an empty value names nothing.
#[test]
fn namespaces_and_partitions_are_refused_as_consul_ce_refuses_them() {
    let agent = Agent::dev(&[]);
    let addr = agent.addr();
    let namespace = "Namespaces are a Consul Enterprise feature";
    let partition = "Partitions are a Consul Enterprise feature";
    let cases: &[RefusalCase] = &[
        (
            "GET",
            "/v1/catalog/nodes?ns=team",
            &[],
            format!("Invalid query parameter: \"ns\" - {namespace}"),
        ),
        (
            "PUT",
            "/v1/kv/key?ns=team",
            &[],
            format!("Invalid query parameter: \"ns\" - {namespace}"),
        ),
        (
            "GET",
            "/v1/agent/self",
            &[("X-Consul-Namespace", "team")],
            format!("Invalid header: \"X-Consul-Namespace\" - {namespace}"),
        ),
        (
            "GET",
            "/v1/health/service/web?partition=p1",
            &[],
            format!("Invalid query parameter: \"partition\" - {partition}"),
        ),
        (
            "GET",
            "/v1/agent/services",
            &[("X-Consul-Partition", "p1")],
            format!("Invalid header: \"X-Consul-Partition\" - {partition}"),
        ),
    ];
    for (method, path, headers, message) in cases {
        let response = request(addr, method, path, b"v", headers);
        assert_eq!(response.status, 400, "{method} {path}: {}", response.text());
        assert_eq!(response.text(), *message, "{method} {path}");
    }
    // The refused write did not happen.
    assert_eq!(agent.get("/v1/kv/key").status, 404);
    // An empty namespace names nothing, as in Consul.
    assert_eq!(agent.get("/v1/catalog/nodes?ns=").status, 200);
}

/// Go's HTTP server answers HEAD with the head alone; a body after it would be read by the
/// client as the start of its next response on a kept-alive connection.
#[test]
fn head_requests_get_the_head_only_and_keep_the_connection_framed() {
    let agent = Agent::dev(&[]);
    let pipelined = b"HEAD /v1/status/leader HTTP/1.1\r\nHost: t\r\n\r\n\
HEAD /v1/no/such/endpoint HTTP/1.1\r\nHost: t\r\n\r\n\
GET /v1/status/leader HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let raw = raw_exchange(agent.addr(), pipelined, Duration::from_secs(10));
    let text = String::from_utf8_lossy(&raw).into_owned();
    // Each HEAD answer ends at its blank line: the next answer starts right after it.
    let first_end = text.find("\r\n\r\n").expect("a first head") + 4;
    assert!(text.starts_with("HTTP/1.1 405 "), "{text}");
    assert!(text[first_end..].starts_with("HTTP/1.1 404 "), "{text}");
    let second_end = first_end + text[first_end..].find("\r\n\r\n").unwrap() + 4;
    let (last, used) = parse_one_response(&raw[second_end..]).expect("the GET's answer");
    assert_eq!(last.status, 200, "{text}");
    assert_eq!(
        second_end + used,
        raw.len(),
        "nothing after the last answer: {text}"
    );
    assert!(last.text().contains(":8300"), "{}", last.text());
}

/// Consul's `Agent.ForceLeave` refuses a node that is not a member with a plain error,
/// which its HTTP layer answers 500, with or without `?prune`.
#[test]
fn force_leave_of_an_unknown_node_fails_as_consul_does() {
    let agent = Agent::dev(&[]);
    for path in [
        "/v1/agent/force-leave/nobody",
        "/v1/agent/force-leave/nobody?prune",
    ] {
        let response = agent.put(path, b"");
        assert_eq!(response.status, 500, "{path}");
        assert_eq!(response.text(), "agent: No node found with name 'nobody'");
    }
}

/// A registration naming another datacenter is forwarded there by Consul, which has no
/// path to it: 500 "No path to datacenter", and nothing is written here.
#[test]
fn catalog_register_in_an_unknown_datacenter_fails_as_consul_does() {
    let agent = Agent::dev(&[]);
    let body = br#"{"Datacenter":"elsewhere","Node":"far","Address":"10.9.9.9"}"#;
    let response = agent.put("/v1/catalog/register", body);
    assert_eq!(response.status, 500);
    assert_eq!(response.text(), "No path to datacenter");
    assert_eq!(agent.get("/v1/catalog/node/far").text().trim(), "null");
}

/// Consul's `/v1/agent/self` (`agent_endpoint.go`'s `Self`): `DebugConfig` with the keys tools
/// read, `Stats.consul` with the leader's address, `Stats.raft` with raft's own keys, `Coord`
/// (serf's coordinate of this node), and a `Member` identical to this node's entry in
/// `/v1/agent/members`.
#[test]
fn agent_self_reports_what_consul_reports() {
    // gRPC off (a dev agent serves it on 8502), to see Consul's `Self` without `xDS`.
    let agent = Agent::dev(&["-node", "selfie", "-grpc-port=-1"]);
    let this = agent.get("/v1/agent/self").json();
    let debug = &this["DebugConfig"];
    for key in [
        "ConnectEnabled",
        "GRPCPort",
        "GRPCTLSPort",
        "HTTPSPort",
        "EnableDebug",
        "Datacenter",
        "NodeName",
        "ServerMode",
        "ACLsEnabled",
        "PrimaryDatacenter",
        "HTTPPort",
        "DNSPort",
    ] {
        assert!(!debug[key].is_null(), "DebugConfig.{key} missing: {debug}");
    }
    assert_eq!(debug["NodeName"], "selfie");
    assert_eq!(debug["ServerMode"], true);
    assert_eq!(debug["Datacenter"], "dc1");
    assert_eq!(debug["HTTPPort"], 8500);
    assert_eq!(debug["HTTPSPort"], -1, "disabled ports are negative");

    let consul = &this["Stats"]["consul"];
    let leader = agent.get("/v1/status/leader").json();
    assert_eq!(consul["leader_addr"], leader, "{consul}");
    assert_eq!(consul["leader"], "true");
    assert_eq!(consul["server"], "true");
    for key in ["bootstrap", "known_datacenters"] {
        assert!(consul[key].is_string(), "Stats.consul.{key}: {consul}");
    }
    let raft = &this["Stats"]["raft"];
    for key in [
        "state",
        "term",
        "last_log_index",
        "commit_index",
        "applied_index",
        "fsm_pending",
        "last_contact",
        "latest_configuration_index",
        "latest_configuration",
        "num_peers",
        "protocol_version",
    ] {
        assert!(raft[key].is_string(), "Stats.raft.{key}: {raft}");
    }
    assert_eq!(raft["state"], "Leader");
    assert!(this["Stats"]["serf_lan"]["members"].is_string());

    let coordinate = &this["Coord"];
    assert_eq!(
        coordinate["Vec"].as_array().map(Vec::len),
        Some(8),
        "{coordinate}"
    );
    assert!(coordinate["Height"].is_number());

    let members = agent.get("/v1/agent/members").json();
    let own = members
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["Name"] == "selfie")
        .expect("this node among the members");
    assert_eq!(&this["Member"], own, "Member equals the members entry");
    // No gRPC port, so no xDS server: Consul leaves `xDS` out.
    assert!(this.get("xDS").is_none());
}

/// With a gRPC port configured Consul's `Self` has an `xDS` section with the proxies it
/// supports and the port to reach it, and the port answers.
#[test]
fn agent_self_has_xds_when_a_grpc_port_is_configured() {
    let agent = Agent::dev(&["-grpc-port", "28502"]);
    assert!(
        std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::new(agent.ip, 28502),
            std::time::Duration::from_secs(2)
        )
        .is_ok(),
        "the gRPC port listens"
    );
    let this = agent.get("/v1/agent/self").json();
    let xds = &this["xDS"];
    assert_eq!(xds["Port"], 28502, "{this}");
    assert!(xds["SupportedProxies"]["envoy"]
        .as_array()
        .is_some_and(|versions| !versions.is_empty()));
    assert_eq!(this["DebugConfig"]["GRPCPort"], 28502);
}

/// Consul's leader registers itself (node, `serfHealth`, the `consul` service) as it
/// establishes leadership; a client that sees a leader and at once creates a session must
/// never get "Missing check 'serfHealth' registration".
#[test]
fn a_reported_leader_has_registered_itself() {
    let ip = fresh_loopback();
    let agent = Agent::spawn(
        ip,
        8500,
        vec![
            "agent".into(),
            "-dev".into(),
            "-bind".into(),
            ip.to_string(),
            "-client".into(),
            ip.to_string(),
            "-dns-port=-1".into(),
            "-node".into(),
            "early".into(),
        ],
    );
    let addr = agent.addr();
    let deadline = Instant::now() + LEADER_WAIT;
    // Poll without pausing, so the first answer naming a leader is the one acted on.
    loop {
        assert!(Instant::now() < deadline, "no leader reported");
        if let Ok(r) = common::try_request(addr, "GET", "/v1/status/leader", b"", &[]) {
            if r.status == 200 && r.body.trim_ascii() != b"\"\"" && !r.body.is_empty() {
                break;
            }
        }
    }
    let session = request(addr, "PUT", "/v1/session/create", b"{}", &[]);
    assert_eq!(session.status, 200, "{}", session.text());
    assert!(session.json()["ID"].is_string());
    let any = request(addr, "GET", "/v1/health/state/any", b"", &[]).json();
    assert!(
        any.as_array()
            .unwrap()
            .iter()
            .any(|c| c["CheckID"] == "serfHealth" && c["Node"] == "early"),
        "{any}"
    );
    let consul = request(addr, "GET", "/v1/catalog/service/consul", b"", &[]).json();
    assert_eq!(consul[0]["Node"], "early", "{consul}");
}

/// `?near=` on `/v1/catalog/nodes` sorts by network coordinates (Consul's `parseSource` +
/// `sortNodesByDistanceFrom`): with `_agent`, this agent's own node comes first, and nodes
/// without a coordinate keep their order after it.
#[test]
fn catalog_nodes_near_the_agent_lists_the_agent_first() {
    let agent = Agent::dev(&["-node", "zulu"]);
    for name in ["alpha", "bravo"] {
        let body = format!(r#"{{"Node":"{name}","Address":"10.1.1.1"}}"#);
        assert_eq!(
            agent.put("/v1/catalog/register", body.as_bytes()).status,
            200
        );
    }
    let names = |path: &str| -> Vec<String> {
        agent
            .get(path)
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["Node"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("/v1/catalog/nodes"), ["alpha", "bravo", "zulu"]);
    assert_eq!(
        names("/v1/catalog/nodes?near=_agent"),
        ["zulu", "alpha", "bravo"]
    );
    assert_eq!(
        names("/v1/catalog/nodes?near=zulu"),
        ["zulu", "alpha", "bravo"]
    );
    // An unknown node has no coordinate: the order is left alone.
    assert_eq!(
        names("/v1/catalog/nodes?near=nobody"),
        ["alpha", "bravo", "zulu"]
    );
}

/// Waits (bounded) until the agent's check `id` has `status`; returns its output.
fn wait_check_status(agent: &Agent, id: &str, status: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let checks = agent.get("/v1/agent/checks").json();
        let check = &checks[id];
        if check["Status"] == status {
            return check["Output"].as_str().unwrap_or("").to_string();
        }
        assert!(
            Instant::now() < deadline,
            "check {id} never {status}: {check}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Consul's alias check (`agent/checks/alias.go`) on the same agent follows the aliased
/// service's checks (worst status wins), and a service that exists without checks of its
/// own is passing, "No checks found."; only a missing service is critical. (Node-level
/// checks count too, so each alias check here belongs to a service of its own.)
#[test]
fn alias_checks_follow_a_local_service() {
    let agent = Agent::dev(&[]);
    let web = br#"{"ID":"web","Name":"web","Port":80,"Check":{"CheckID":"web-ttl","TTL":"60s"}}"#;
    assert_eq!(agent.put("/v1/agent/service/register", web).status, 200);
    let bare = br#"{"ID":"bare","Name":"bare","Port":81}"#;
    assert_eq!(agent.put("/v1/agent/service/register", bare).status, 200);
    for (id, service) in [
        ("web-alias", "web"),
        ("bare-alias", "bare"),
        ("gone-alias", "gone"),
    ] {
        let body = format!(
            r#"{{"ID":"{id}","Name":"{id}","Port":90,"Check":{{"CheckID":"{id}","AliasService":"{service}"}}}}"#
        );
        let response = agent.put("/v1/agent/service/register", body.as_bytes());
        assert_eq!(response.status, 200, "{}", response.text());
    }
    assert_eq!(
        agent
            .put("/v1/agent/check/pass/web-ttl?note=fine", b"")
            .status,
        200
    );
    assert_eq!(
        wait_check_status(&agent, "web-alias", "passing"),
        "All checks passing."
    );
    assert_eq!(
        agent
            .put("/v1/agent/check/fail/web-ttl?note=down", b"")
            .status,
        200
    );
    let output = wait_check_status(&agent, "web-alias", "critical");
    assert!(output.contains("failing: down"), "{output}");
    assert_eq!(
        wait_check_status(&agent, "bare-alias", "passing"),
        "No checks found."
    );
    let output = wait_check_status(&agent, "gone-alias", "critical");
    assert!(output.contains("could not be found"), "{output}");
}

/// Consul's `PUT /v1/coordinate/update` (`agent/coordinate_endpoint.go`, the server's
/// `Coordinate.Update`): the coordinate of a catalog node — here external nodes, as
/// consul-esm reports them — is stored and answered by `/v1/coordinate/node/<n>` and
/// `/v1/coordinate/nodes`, and `?near=` sorts by it. An update for a node the catalog does
/// not hold is accepted and dropped; a coordinate of another dimensionality is
/// "incompatible coordinate" and one without `Coord` "invalid coordinate" (500); a node's
/// deregistration deletes its coordinate.
#[test]
fn coordinate_update_stores_coordinates_of_catalog_nodes() {
    let agent = Agent::dev(&["-node", "center"]);
    for name in ["esm-near", "esm-far"] {
        let body = format!(r#"{{"Node":"{name}","Address":"10.2.0.1"}}"#);
        assert_eq!(
            agent.put("/v1/catalog/register", body.as_bytes()).status,
            200
        );
    }
    for (name, x) in [("esm-near", 0.0005), ("esm-far", 5.0)] {
        let body =
            serde_json::json!({"Node": name, "Segment": "", "Coord": common::coordinate_at(x)});
        let response = agent.put("/v1/coordinate/update", body.to_string().as_bytes());
        assert_eq!(response.status, 200, "{}", response.text());
        assert!(response.body.is_empty(), "{}", response.text());
    }
    let far = agent.get("/v1/coordinate/node/esm-far");
    assert_eq!(far.status, 200);
    let far = far.json();
    assert_eq!(far[0]["Node"], "esm-far");
    assert_eq!(far[0]["Coord"]["Vec"][0], 5.0, "{far}");
    assert_eq!(far[0]["Coord"]["Error"], 0.2);
    let listed: Vec<String> = agent
        .get("/v1/coordinate/nodes")
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Node"].as_str().unwrap().to_string())
        .collect();
    for name in ["center", "esm-far", "esm-near"] {
        assert!(listed.iter().any(|n| n == name), "{name} in {listed:?}");
    }
    let order = |near: &str| -> Vec<String> {
        agent
            .get(&format!("/v1/catalog/nodes?near={near}"))
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["Node"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(order("esm-far")[0], "esm-far");
    assert_eq!(
        order("esm-near").last().map(String::as_str),
        Some("esm-far")
    );

    let wrong = serde_json::json!({"Node": "esm-far", "Coord": {"Vec": [1.0, 2.0, 3.0]}});
    let response = agent.put("/v1/coordinate/update", wrong.to_string().as_bytes());
    assert_eq!(
        (response.status, response.text().as_str()),
        (500, "incompatible coordinate")
    );
    let response = agent.put("/v1/coordinate/update", br#"{"Node":"esm-far"}"#);
    assert_eq!(
        (response.status, response.text().as_str()),
        (500, "invalid coordinate")
    );
    let response = agent.put("/v1/coordinate/update", b"{not json");
    assert_eq!(response.status, 400);

    let stranger = serde_json::json!({"Node": "nobody", "Coord": common::coordinate_at(1.0)});
    let response = agent.put("/v1/coordinate/update", stranger.to_string().as_bytes());
    assert_eq!(response.status, 200);
    assert_eq!(agent.get("/v1/coordinate/node/nobody").status, 404);

    let body = br#"{"Node":"esm-far"}"#;
    assert_eq!(agent.put("/v1/catalog/deregister", body).status, 200);
    assert_eq!(agent.get("/v1/coordinate/node/esm-far").status, 404);
}

/// Consul's `/v1/operator/raft/configuration` reports as `Index` the Raft index of the
/// latest configuration (`future.Index()` of `raft.GetConfiguration`); a dev agent
/// bootstraps its one-server configuration as the first log entry, so it reports 1 however
/// many writes follow.
#[test]
fn raft_configuration_index_is_the_configurations_entry() {
    let agent = Agent::dev(&[]);
    for i in 0..3 {
        assert_eq!(agent.put(&format!("/v1/kv/k{i}"), b"v").status, 200);
    }
    let configuration = agent.get("/v1/operator/raft/configuration").json();
    assert_eq!(configuration["Index"], 1, "{configuration}");
    let servers = configuration["Servers"].as_array().unwrap();
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0]["Leader"], true);
    assert_eq!(servers[0]["Voter"], true);
}

/// `?peer=` as Consul CE answers it for a peer that exported nothing here
/// (`agent/health_endpoint.go` and `catalog_endpoint.go` pass the peer to the state store,
/// which holds no rows of it): the empty answer of each read, with an index. Listing
/// service names from a peer is refused ("listing service names imported from a peer is
/// not supported"), and so is a registration naming a peer ("cannot register requests
/// with PeerName in them"), both 500. An empty `peer` names nothing.
#[test]
fn peer_reads_answer_as_consul_ce_does_without_peerings() {
    let agent = Agent::dev(&["-node", "local"]);
    let body = br#"{"Node":"n1","Address":"10.3.0.1","Service":{"Service":"web","Port":80},
        "Check":{"CheckID":"web-ok","Name":"web","ServiceID":"web","Status":"passing"}}"#;
    assert_eq!(agent.put("/v1/catalog/register", body).status, 200);
    for path in [
        "/v1/health/service/web?peer=other",
        "/v1/health/connect/web?peer=other",
        "/v1/health/checks/web?peer=other",
        "/v1/health/node/n1?peer=other",
        "/v1/health/state/any?peer=other",
        "/v1/catalog/service/web?peer=other",
        "/v1/catalog/nodes?peer=other",
    ] {
        let response = agent.get(path);
        assert_eq!(response.status, 200, "{path}: {}", response.text());
        assert_eq!(response.json(), serde_json::json!([]), "{path}");
        assert!(response.index() >= 1, "{path}");
    }
    assert_eq!(
        agent.get("/v1/catalog/node/n1?peer=other").json(),
        serde_json::Value::Null
    );
    assert_eq!(
        agent.get("/v1/catalog/node-services/n1?peer=other").json(),
        serde_json::json!({"Node": null, "Services": []})
    );
    let response = agent.get("/v1/catalog/services?peer=other");
    assert_eq!(response.status, 500);
    assert_eq!(
        response.text(),
        "listing service names imported from a peer is not supported"
    );
    // An empty peer is the local catalog.
    let local = agent.get("/v1/health/service/web?peer=").json();
    assert_eq!(local.as_array().map(Vec::len), Some(1), "{local}");

    for body in [
        r#"{"Node":"p1","Address":"10.3.0.2","PeerName":"other"}"#,
        r#"{"Node":"p1","Address":"10.3.0.2","Service":{"Service":"s","PeerName":"other"}}"#,
        r#"{"Node":"p1","Address":"10.3.0.2","Checks":[{"CheckID":"c","PeerName":"other"}]}"#,
    ] {
        let response = agent.put("/v1/catalog/register", body.as_bytes());
        assert_eq!(response.status, 500, "{body}");
        assert_eq!(
            response.text(),
            "cannot register requests with PeerName in them"
        );
    }
    assert_eq!(
        agent.get("/v1/catalog/node/p1").json(),
        serde_json::Value::Null
    );

    // A blocking read of a peer's service waits like the local one and answers empty.
    let index = agent.get("/v1/health/service/web?peer=other").index();
    let started = Instant::now();
    let response = agent.get(&format!(
        "/v1/health/service/web?peer=other&index={index}&wait=1s"
    ));
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(response.json(), serde_json::json!([]));
}

/// Consul's agent cache behind `?cached` (`agent/http.go` `setCacheMeta` and
/// `parseCacheControl`): `X-Cache: MISS` the first time, `HIT` with `Age` in seconds after;
/// `Cache-Control: max-age=N` older than the entry, or `max-age=0`, is a miss; a change to
/// what is read refreshes the entry in the background, so the answer is current with a
/// small age; `?cached` with `?consistent` and a malformed `Cache-Control` are 400s; a read
/// without `?cached` carries no cache headers.
#[test]
fn cached_reads_carry_x_cache_and_age() {
    let agent = Agent::dev(&[]);
    let register = |id: &str| {
        let body = format!(
            r#"{{"Node":"c1","Address":"10.4.0.1","Service":{{"ID":"{id}","Service":"web"}}}}"#
        );
        assert_eq!(
            agent.put("/v1/catalog/register", body.as_bytes()).status,
            200
        );
    };
    register("web-1");
    let cached = |path: &str, headers: &[(&str, &str)]| {
        common::request(agent.addr(), "GET", path, b"", headers)
    };
    for path in [
        "/v1/health/service/web?cached",
        "/v1/catalog/service/web?cached",
        "/v1/catalog/services?cached",
    ] {
        let first = cached(path, &[]);
        assert_eq!(first.status, 200, "{path}");
        assert_eq!(first.header("X-Cache"), Some("MISS"), "{path}");
        assert_eq!(first.header("Age"), None, "{path}: no Age on a miss");
        let second = cached(path, &[]);
        assert_eq!(second.header("X-Cache"), Some("HIT"), "{path}");
        assert_eq!(second.header("Age"), Some("0"), "{path}");
        assert_eq!(second.body, first.body, "{path}");
    }
    std::thread::sleep(Duration::from_millis(2200));
    let aged = cached("/v1/health/service/web?cached", &[]);
    assert_eq!(aged.header("X-Cache"), Some("HIT"));
    let age: u64 = aged.header("Age").unwrap().parse().unwrap();
    assert!((2..=4).contains(&age), "Age {age}");
    let stale = cached(
        "/v1/health/service/web?cached",
        &[("Cache-Control", "max-age=1")],
    );
    assert_eq!(stale.header("X-Cache"), Some("MISS"));
    let fresh = cached(
        "/v1/health/service/web?cached",
        &[("Cache-Control", "max-age=60")],
    );
    assert_eq!(fresh.header("X-Cache"), Some("HIT"));
    let revalidate = cached(
        "/v1/health/service/web?cached",
        &[("Cache-Control", "max-age=0")],
    );
    assert_eq!(revalidate.header("X-Cache"), Some("MISS"));

    // A change is picked up by the background refresh: a hit, current, young.
    std::thread::sleep(Duration::from_millis(1100));
    register("web-2");
    let refreshed = cached("/v1/health/service/web?cached", &[]);
    assert_eq!(refreshed.header("X-Cache"), Some("HIT"));
    assert_eq!(refreshed.header("Age"), Some("0"));
    assert_eq!(refreshed.json().as_array().map(Vec::len), Some(2));

    let both = cached("/v1/health/service/web?cached&consistent", &[]);
    assert_eq!(both.status, 400);
    assert_eq!(
        both.text(),
        "Cannot specify ?cached with ?consistent, conflicting semantics."
    );
    let bad = cached(
        "/v1/health/service/web?cached",
        &[("Cache-Control", "max-age=soon")],
    );
    assert_eq!(bad.status, 400);
    assert_eq!(bad.text(), "Invalid Cache-Control header.");
    let plain = agent.get("/v1/health/service/web");
    assert_eq!(plain.header("X-Cache"), None);
}

/// `http_config { use_cache = false }` turns the agent cache off; Consul then ignores
/// `?cached` (`parseConsistency` reads it only when `HTTPUseCache` is on).
#[test]
fn cached_is_ignored_with_use_cache_off() {
    let agent = Agent::dev(&["-hcl", "http_config { use_cache = false }"]);
    let response = agent.get("/v1/catalog/services?cached");
    assert_eq!(response.status, 200);
    assert_eq!(response.header("X-Cache"), None);
}
