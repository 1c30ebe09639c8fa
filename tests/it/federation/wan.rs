//! WAN federation with real processes: two datacenters of three servers each, joined
//! through the WAN pool, and a client agent in dc1 serving HTTP and DNS on loopback.
//!
//! - `?dc=dc2` from dc1's client agent reaches dc2: KV writes and reads, catalog and health
//!   reads, session create/info/list; `/v1/catalog/datacenters` lists both, dc1 first, and
//!   `/v1/coordinate/datacenters` carries both datacenters' servers.
//! - A blocking read `?dc=dc2&index=N` stays parked across the hop and wakes on a dc2 write.
//! - DNS on the client: `<svc>.service.dc2.consul`, `<tag>.<svc>.service.dc2.consul`,
//!   `<svc>.connect.dc2.consul` and `<node>.node.dc2.consul` answer dc2's catalog; an
//!   unknown datacenter is NXDOMAIN.
//! - A prepared query with `Failover { Datacenters: ["dc2"] }` answers from dc1 while dc1
//!   has a healthy instance, and from dc2 with `Failovers: 1` once it has none, over HTTP
//!   and DNS (`<query>.query.consul`); one with `Failover { NearestN: 1 }` fails over to
//!   the nearest other datacenter by WAN coordinates (the only one here); a query bound to
//!   a session goes when the session is destroyed.
//! - dc2's leader is killed (SIGKILL) mid-run: `?dc=dc2` keeps working once dc2 re-elects.
//!
//! Bounded: every wait has a deadline; the whole test runs in about a minute.

use crate::agent_support;
use crate::common;
use crate::dns_common;

use agent_support::wait_for;
use common::{request, try_request_timeout, Agent, Cluster, TempDir};
use dns_common::{a_records, query, udp_exchange};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::{json, Value};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// How long the WAN pool may take to show both datacenters to dc1's servers.
const WAN_CONVERGE_LIMIT: Duration = Duration::from_secs(30);
/// How long a write in one datacenter may take to show through the other.
const CONVERGE_LIMIT: Duration = Duration::from_secs(10);
/// How long dc2 may take to elect a new leader and answer `?dc=dc2` again after its leader
/// died (Raft's election plus the WAN router rotating past the dead server).
const REELECTION_LIMIT: Duration = Duration::from_secs(30);
/// Most a parked cross-datacenter blocking read may take to answer once the write landed.
const WAKE_LIMIT: Duration = Duration::from_secs(5);

fn put_json(agent: &Agent, path: &str, body: Value) -> Value {
    let r = agent.put(path, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "PUT {path}: {}\n{}", r.text(), agent.log());
    if r.body.is_empty() {
        Value::Null
    } else {
        r.json()
    }
}

/// `POST /v1/query…`: creates a prepared query; its ID.
fn create_query(agent: &Agent, path: &str, body: Value) -> String {
    let r = request(agent.addr(), "POST", path, body.to_string().as_bytes(), &[]);
    assert_eq!(r.status, 200, "POST {path}: {}", r.text());
    r.json()["ID"].as_str().expect("an ID").to_string()
}

fn get_json(agent: &Agent, path: &str) -> Value {
    let r = agent.get(path);
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    r.json()
}

fn dns_a(server: SocketAddr, name: &str) -> (ResponseCode, Vec<Ipv4Addr>) {
    let (reply, _) = udp_exchange(server, &query(name, RecordType::A, None));
    (reply.metadata.response_code, a_records(&reply))
}

/// A prepared query execution's `(Datacenter, Failovers, node addresses)`; `params` is
/// the query string (with its `?`), if any.
fn execute(agent: &Agent, name: &str, params: &str) -> (String, u64, Vec<String>) {
    let body = get_json(agent, &format!("/v1/query/{name}/execute{params}"));
    let mut addresses: Vec<String> = body["Nodes"]
        .as_array()
        .expect("Nodes is a list")
        .iter()
        .map(|n| {
            n["Node"]["Address"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    addresses.sort();
    (
        body["Datacenter"].as_str().unwrap_or_default().to_string(),
        body["Failovers"].as_u64().expect("Failovers is a number"),
        addresses,
    )
}

fn register_web(agent: &Agent, node: &str, address: &str, status: &str, dc: &str) {
    let path = format!("/v1/catalog/register?dc={dc}");
    put_json(
        agent,
        &path,
        json!({
            "Node": node,
            "Address": address,
            "Service": {"Service": "web", "ID": "web-1", "Port": 8080, "Tags": ["primary"]},
            "Check": {"CheckID": "web-alive", "Name": "alive", "Status": status,
                      "ServiceID": "web-1"},
        }),
    );
}

#[test]
fn two_datacenters_federate_through_the_wan_pool() {
    let dc1 = Cluster::start(3, &["-datacenter", "dc1", "-dns-port", "8600"]);
    let seed = dc1.servers[0].ip;
    let join_wan = format!("retry_join_wan = [\"{seed}\"]");
    let mut dc2 = Cluster::start(3, &["-datacenter", "dc2", "-hcl", &join_wan]);
    let client_data = TempDir::new("federation-client");
    let client = dc1.start_client(&client_data, &["-datacenter", "dc1", "-dns-port", "8600"]);
    client.wait_ready();
    let dns = SocketAddr::new(client.ip, 8600);

    // Both datacenters, through the client: this one first, then dc2.
    let datacenters = wait_for(WAN_CONVERGE_LIMIT, "dc2 in the datacenter list", || {
        let r = client.get("/v1/catalog/datacenters");
        let list: Vec<String> = serde_json::from_slice(&r.body).ok()?;
        (list.len() == 2).then_some(list)
    });
    assert_eq!(datacenters, ["dc1", "dc2"]);
    // The client asked one server; each of dc1's servers learns dc2 from its own WAN pool
    // view, and a server that has not yet answers "no path" for dc2 (DNS: NXDOMAIN), as
    // Consul's does while the WAN pool converges. A server lists dc2 only once it has a
    // route there: the moment the list shows it, `?dc=dc2` reaches it.
    for server in &dc1.servers {
        wait_for(WAN_CONVERGE_LIMIT, "dc2 known to every dc1 server", || {
            let r = server.get("/v1/catalog/datacenters");
            let list: Vec<String> = serde_json::from_slice(&r.body).ok()?;
            (list.len() == 2).then_some(())
        });
        let reached = server.get("/v1/catalog/nodes?dc=dc2");
        assert_eq!(
            reached.status,
            200,
            "listed but not routed: {}",
            reached.text()
        );
    }
    // Both datacenters, each with its servers' WAN coordinates once they were probed.
    let maps = get_json(&client, "/v1/coordinate/datacenters");
    let names: Vec<&str> = maps
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["Datacenter"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["dc1", "dc2"], "{maps}");
    assert!(
        !maps[0]["Coordinates"].as_array().unwrap().is_empty(),
        "{maps}"
    );
    assert_eq!(maps[0]["AreaID"], "wan");

    // KV into dc2 through dc1's client, seen by dc2's own servers and not in dc1.
    wait_for(CONVERGE_LIMIT, "a first ?dc=dc2 write", || {
        let r = client.put("/v1/kv/fed/greeting?dc=dc2", b"hello from dc1");
        (r.status == 200).then_some(())
    });
    let direct = dc2.servers[1].get("/v1/kv/fed/greeting?raw");
    assert_eq!(direct.body, b"hello from dc1");
    let through = client.get("/v1/kv/fed/greeting?dc=dc2&raw");
    assert_eq!(
        (through.status, through.body.as_slice()),
        (200, &b"hello from dc1"[..])
    );
    assert_eq!(client.get("/v1/kv/fed/greeting").status, 404);
    let unknown = client.get("/v1/kv/fed/greeting?dc=nowhere");
    assert_eq!(
        (unknown.status, unknown.text().as_str()),
        (500, "No path to datacenter")
    );

    // Catalog and health of dc2.
    register_web(&dc2.servers[0], "dc2-web", "10.2.0.1", "passing", "dc2");
    // A Connect-native service in dc2 only: `<svc>.connect.dc2.consul` finds it from dc1.
    put_json(
        &dc2.servers[0],
        "/v1/catalog/register",
        json!({
            "Node": "dc2-pay",
            "Address": "10.2.0.7",
            "Service": {"Service": "pay", "ID": "pay-1", "Port": 9443,
                        "Connect": {"Native": true}},
        }),
    );
    let service = get_json(&client, "/v1/catalog/service/web?dc=dc2");
    assert_eq!(service[0]["Datacenter"], "dc2", "{service}");
    assert_eq!(service[0]["Address"], "10.2.0.1");
    let health = get_json(&client, "/v1/health/service/web?dc=dc2&passing");
    assert_eq!(health.as_array().unwrap().len(), 1, "{health}");
    assert_eq!(health[0]["Node"]["Node"], "dc2-web");
    let nodes = get_json(&client, "/v1/catalog/nodes?dc=dc2");
    assert!(nodes
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["Node"] == "dc2-web"));
    assert!(get_json(&client, "/v1/catalog/services")
        .get("web")
        .is_none());

    // Sessions in dc2, on one of its servers' nodes.
    let dc2_node = format!("s0-{}", dc2.servers[0].ip);
    let session = put_json(
        &client,
        "/v1/session/create?dc=dc2",
        json!({"Node": dc2_node, "Name": "fed", "TTL": "60s"}),
    );
    let session_id = session["ID"].as_str().expect("a session ID").to_string();
    let info = get_json(&client, &format!("/v1/session/info/{session_id}?dc=dc2"));
    assert_eq!(info[0]["Node"], dc2_node.as_str());
    let listed = get_json(&client, "/v1/session/list?dc=dc2");
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["ID"] == session_id.as_str()));
    let acquired = client.put(
        &format!("/v1/kv/fed/lock?dc=dc2&acquire={session_id}"),
        b"held",
    );
    assert_eq!(acquired.text().trim(), "true");
    assert!(get_json(&client, "/v1/session/list")
        .as_array()
        .unwrap()
        .is_empty());

    // A blocking read across the hop parks, and wakes on a dc2 write.
    let first = client.get("/v1/kv/fed/watched?dc=dc2");
    let index = first.index();
    let watcher_addr = client.addr();
    let watcher = std::thread::spawn(move || {
        let started = Instant::now();
        let r = request(
            watcher_addr,
            "GET",
            &format!("/v1/kv/fed/watched?dc=dc2&index={index}&wait=30s&raw"),
            b"",
            &[],
        );
        (started.elapsed(), r)
    });
    std::thread::sleep(Duration::from_millis(700));
    let written_at = Instant::now();
    let w = dc2.servers[2].put("/v1/kv/fed/watched", b"changed in dc2");
    assert_eq!(w.status, 200);
    let (parked, woken) = watcher.join().unwrap();
    assert_eq!(woken.status, 200);
    assert_eq!(woken.body, b"changed in dc2");
    assert!(woken.index() > index);
    assert!(
        parked >= Duration::from_millis(600),
        "answered before the write: {parked:?}"
    );
    assert!(
        written_at.elapsed() < WAKE_LIMIT,
        "woke {:?} after the write",
        written_at.elapsed()
    );

    // DNS on dc1's client answers for dc2.
    let (code, addresses) = dns_a(dns, "web.service.dc2.consul.");
    assert_eq!(
        (code, addresses),
        (ResponseCode::NoError, vec![Ipv4Addr::new(10, 2, 0, 1)])
    );
    let (code, addresses) = dns_a(dns, "primary.web.service.dc2.consul.");
    assert_eq!(
        (code, addresses),
        (ResponseCode::NoError, vec![Ipv4Addr::new(10, 2, 0, 1)])
    );
    let (code, addresses) = dns_a(dns, "dc2-web.node.dc2.consul.");
    assert_eq!(
        (code, addresses),
        (ResponseCode::NoError, vec![Ipv4Addr::new(10, 2, 0, 1)])
    );
    let (code, addresses) = dns_a(dns, "pay.connect.dc2.consul.");
    assert_eq!(
        (code, addresses),
        (ResponseCode::NoError, vec![Ipv4Addr::new(10, 2, 0, 7)])
    );
    let (code, _) = dns_a(dns, "pay.connect.consul.");
    assert_eq!(code, ResponseCode::NXDomain, "pay is in dc2 only");
    let (code, _) = dns_a(dns, "web.service.consul.");
    assert_eq!(code, ResponseCode::NXDomain, "no web in dc1 yet");
    let (code, _) = dns_a(dns, "web.service.nowhere.consul.");
    assert_eq!(code, ResponseCode::NXDomain);
    // And on a server of dc1, which asks through its own HTTP API.
    let server_dns = SocketAddr::new(dc1.servers[1].ip, 8600);
    let (code, addresses) = dns_a(server_dns, "web.service.dc2.consul.");
    assert_eq!(
        (code, addresses),
        (ResponseCode::NoError, vec![Ipv4Addr::new(10, 2, 0, 1)])
    );
    let (code, addresses) = dns_a(server_dns, "dc2-web.node.dc2.consul.");
    assert_eq!(
        (code, addresses),
        (ResponseCode::NoError, vec![Ipv4Addr::new(10, 2, 0, 1)])
    );

    // A prepared query that fails over to dc2.
    register_web(&client, "dc1-web", "10.1.0.1", "passing", "dc1");
    let query_id = create_query(
        &client,
        "/v1/query",
        json!({"Name": "web-failover", "Service": {"Service": "web",
               "Failover": {"Datacenters": ["dc2"]}}, "DNS": {"TTL": "5s"}}),
    );
    create_query(
        &client,
        "/v1/query",
        json!({"Name": "web-nearest", "Service": {"Service": "web", "Failover": {"NearestN": 1}}}),
    );
    // Consul creates with POST only.
    assert_eq!(client.put("/v1/query", b"{}").status, 405);
    let stored = get_json(&client, &format!("/v1/query/{query_id}"));
    assert_eq!(stored[0]["Service"]["Failover"]["Datacenters"][0], "dc2");
    assert_eq!(
        execute(&client, "web-failover", ""),
        ("dc1".to_string(), 0, vec!["10.1.0.1".to_string()])
    );
    let (code, addresses) = dns_a(dns, "web-failover.query.consul.");
    assert_eq!(
        (code, addresses),
        (ResponseCode::NoError, vec![Ipv4Addr::new(10, 1, 0, 1)])
    );
    // dc1's only instance goes critical: dc2 answers.
    register_web(&client, "dc1-web", "10.1.0.1", "critical", "dc1");
    let failed_over = wait_for(CONVERGE_LIMIT, "the failover to dc2", || {
        let answer = execute(&client, "web-failover", "");
        (answer.0 == "dc2").then_some(answer)
    });
    assert_eq!(
        failed_over,
        ("dc2".to_string(), 1, vec!["10.2.0.1".to_string()])
    );
    assert_eq!(
        execute(&client, "web-nearest", ""),
        ("dc2".to_string(), 1, vec!["10.2.0.1".to_string()])
    );
    // DNS reads stale (`dns_config.allow_stale`, as Consul's default): a follower answers
    // from what it applied, which may trail the leader's commit by an append round.
    for resolver in [dns, server_dns] {
        let answer = wait_for(CONVERGE_LIMIT, "DNS failing over to dc2", || {
            let answer = dns_a(resolver, "web-failover.query.consul.");
            (answer.1 == vec![Ipv4Addr::new(10, 2, 0, 1)]).then_some(answer)
        });
        assert_eq!(answer.0, ResponseCode::NoError, "{resolver}");
    }
    let (code, _) = dns_a(dns, "no-such-query.query.consul.");
    assert_eq!(code, ResponseCode::NXDomain);
    // The same query defined in dc2, executed there through `?dc=` and `.query.dc2`.
    create_query(
        &client,
        "/v1/query?dc=dc2",
        json!({"Name": "web-in-dc2", "Service": {"Service": "web"}}),
    );
    assert_eq!(
        execute(&client, "web-in-dc2", "?dc=dc2"),
        ("dc2".to_string(), 0, vec!["10.2.0.1".to_string()])
    );
    // DNS reads are stale by default: a dc2 follower may answer before it applied the
    // query's creation, so wait for it.
    let (code, addresses) = wait_for(CONVERGE_LIMIT, "web-in-dc2.query.dc2.consul", || {
        let answer = dns_a(dns, "web-in-dc2.query.dc2.consul.");
        (answer.0 == ResponseCode::NoError).then_some(answer)
    });
    assert_eq!(
        (code, addresses),
        (ResponseCode::NoError, vec![Ipv4Addr::new(10, 2, 0, 1)])
    );
    // A query bound to a session goes with it.
    let local_session = put_json(&client, "/v1/session/create", json!({"Name": "binder"}));
    let local_session = local_session["ID"].as_str().unwrap().to_string();
    let bound_id = create_query(
        &client,
        "/v1/query",
        json!({"Session": local_session, "Service": {"Service": "web"}}),
    );
    assert_eq!(client.get(&format!("/v1/query/{bound_id}")).status, 200);
    put_json(
        &client,
        &format!("/v1/session/destroy/{local_session}"),
        json!({}),
    );
    wait_for(CONVERGE_LIMIT, "the bound query's deletion", || {
        (client.get(&format!("/v1/query/{bound_id}")).status == 404).then_some(())
    });

    // dc2 loses its leader; `?dc=dc2` answers again once dc2 re-elected.
    let leader = dc2.wait_for_leader(Duration::from_secs(10));
    dc2.servers[leader].kill9();
    let killed_at = Instant::now();
    wait_for(REELECTION_LIMIT, "?dc=dc2 after dc2's leader died", || {
        let r = try_request_timeout(
            client.addr(),
            "GET",
            "/v1/kv/fed/greeting?dc=dc2&raw",
            Duration::from_secs(10),
        )
        .ok()?;
        (r.status == 200 && r.body == b"hello from dc1").then_some(())
    });
    wait_for(
        REELECTION_LIMIT,
        "a ?dc=dc2 write after re-election",
        || {
            let r = client.put("/v1/kv/fed/after?dc=dc2", b"still here");
            (r.status == 200).then_some(())
        },
    );
    let survivor = (0..3).find(|i| *i != leader).unwrap();
    let after = dc2.servers[survivor].get("/v1/kv/fed/after?raw");
    assert_eq!(after.body, b"still here");
    eprintln!(
        "dc2 answered again {:?} after its leader was killed",
        killed_at.elapsed()
    );
}
