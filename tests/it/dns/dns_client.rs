//! DNS on client agents, against real processes: three servers and two client agents, each
//! serving DNS on its own loopback address. A client has no store: it asks its server for
//! the catalog rows a question needs and keeps its answers exact through the servers'
//! change feed (`dns::client`). Every Consul name form must answer on a client as on a
//! server, over UDP (`dig`, and raw messages parsed by hickory-proto) and TCP; a health flip
//! made through a client's HTTP API must show in its DNS; and killing the server a client
//! uses must not stop its answers.

use crate::common;
use crate::dns_common;

use common::{Agent, Cluster, TempDir};
use dns_common::*;
use hickory_proto::op::Message;
use hickory_proto::rr::{RData, Record, RecordType};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long a catalog write may take to reach a client's DNS answers (replication to the
/// server the client asks, then its change feed).
const DNS_CONVERGE_LIMIT: Duration = Duration::from_secs(10);
/// How long a client may take to answer a new question after its server died: gossip must
/// first declare the server failed so that the agent picks another.
const FAILOVER_LIMIT: Duration = Duration::from_secs(40);

fn dns_address(agent: &Agent) -> SocketAddr {
    SocketAddr::new(agent.ip, 8600)
}

fn register(server: &Agent, body: Value) {
    let r = server.put("/v1/catalog/register", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "register {body}: {}", r.text());
}

/// One record as text, an SOA without its serial: the serial is the second its answer was
/// built, so two answers a second apart differ there and nowhere else.
fn record_text(record: &Record) -> String {
    match &record.data {
        RData::SOA(soa) => format!(
            "{} {} SOA {} {}",
            record.name, record.ttl, soa.mname, soa.rname
        ),
        _ => record.to_string(),
    }
}

/// A response with its shuffled sections sorted, the ID and the SOA serial (the clock)
/// left out: two agents' replies compare equal exactly when they say the same.
fn normalized(message: &Message) -> String {
    let section = |records: &[Record]| {
        let mut lines: Vec<String> = records.iter().map(record_text).collect();
        lines.sort();
        lines.join("\n")
    };
    format!(
        "{:?} tc={} aa={}\n{}\n--\n{}\n--\n{}",
        message.metadata.response_code,
        message.metadata.truncation,
        message.metadata.authoritative,
        section(&message.answers),
        section(&message.authorities),
        section(&message.additionals),
    )
}

/// What a reply says besides which records a random pick chose: code, flags, section sizes.
fn shape(message: &Message) -> (String, bool, bool, usize, usize, usize) {
    (
        format!("{:?}", message.metadata.response_code),
        message.metadata.truncation,
        message.metadata.authoritative,
        message.answers.len(),
        message.authorities.len(),
        message.additionals.len(),
    )
}

/// `dig`'s answer section, sorted (`+short` prints one record per line).
fn dig_short(server: SocketAddr, name: &str, qtype: &str, tcp: bool) -> Vec<String> {
    let mut args = vec![name, qtype, "+short"];
    if tcp {
        args.push("+tcp");
    }
    let mut lines: Vec<String> = dig(server, &args)
        .lines()
        .map(|line| {
            // An SOA's serial is the time its answer was built: blank it.
            let mut fields: Vec<&str> = line.split(' ').collect();
            if qtype == "SOA" && fields.len() == 7 {
                fields[2] = "-";
            }
            fields.join(" ")
        })
        .collect();
    lines.sort();
    lines
}

/// Waits until `check` returns `Some`, bounded by `limit`; panics with `what` otherwise.
fn wait_for<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The catalog every test reads: `web` on three nodes (one critical, one tagged `v2`), a
/// service with its own address, and node metadata for TXT.
fn fill_catalog(server: &Agent) {
    for (i, status) in ["passing", "passing", "critical", "warning"]
        .iter()
        .enumerate()
    {
        let tags = if i == 1 { json!(["v2"]) } else { json!(["v1"]) };
        register(
            server,
            json!({
                "Node": format!("web{i}"),
                "Address": format!("10.7.0.{}", i + 1),
                "NodeMeta": {"rack": format!("r{i}")},
                "Service": {"Service": "web", "ID": format!("web-{i}"), "Port": 8080 + i, "Tags": tags},
                "Check": {"CheckID": format!("web-{i}-check"), "Name": "http", "Status": status,
                          "ServiceID": format!("web-{i}")},
            }),
        );
    }
    register(
        server,
        json!({
            "Node": "db1",
            "Address": "10.7.1.1",
            "Service": {"Service": "db", "ID": "db-1", "Address": "10.7.1.99", "Port": 5432},
        }),
    );
    // Twenty instances: more than a plain UDP answer carries, so truncation rules apply.
    for i in 0..20 {
        register(
            server,
            json!({
                "Node": format!("many{i}"),
                "Address": format!("10.7.2.{}", i + 1),
                "Service": {"Service": "many", "ID": format!("many-{i}"), "Port": 80},
            }),
        );
    }
}

/// Every name form a server answers: services (tags, RFC 2782, datacenter), nodes, `.addr`,
/// the `consul` service, the zone's SOA and NS, PTR for a node and a service address, and
/// the negative answers.
const QUESTIONS: &[(&str, RecordType)] = &[
    ("web.service.consul", RecordType::A),
    ("web.service.consul", RecordType::SRV),
    ("WEB.Service.Consul", RecordType::A),
    ("v2.web.service.consul", RecordType::A),
    ("_web._v1.service.consul", RecordType::SRV),
    ("web.service.dc1.consul", RecordType::AAAA),
    ("web.service.dc2.consul", RecordType::A),
    ("nope.service.consul", RecordType::A),
    ("db.service.consul", RecordType::SRV),
    ("many.service.consul", RecordType::A),
    ("web1.node.consul", RecordType::A),
    ("web1.node.dc1.consul", RecordType::TXT),
    ("web1.node.consul", RecordType::ANY),
    ("missing.node.consul", RecordType::A),
    ("0a070001.addr.dc1.consul", RecordType::A),
    ("consul.service.consul", RecordType::A),
    ("consul.service.consul", RecordType::SRV),
    ("consul", RecordType::NS),
    ("consul", RecordType::SOA),
    ("1.0.7.10.in-addr.arpa", RecordType::PTR),
    ("99.1.7.10.in-addr.arpa", RecordType::PTR),
    ("web.query.consul", RecordType::A),
];

/// Asserts that `client` answers every question as `server` does: UDP plain and with EDNS,
/// TCP, and `dig` over both. Waits (bounded) for the client to see the writes first.
fn assert_same_answers(client: &Agent, server: &Agent) {
    let (c, s) = (dns_address(client), dns_address(server));
    for &(name, qtype) in QUESTIONS {
        // With EDNS and over TCP every record fits: the whole answer must match.
        let message = query(name, qtype, Some(4096));
        let what = format!("{name} {qtype} over UDP with EDNS");
        wait_for(DNS_CONVERGE_LIMIT, &what, || {
            let on_client = normalized(&udp_exchange(c, &message).0);
            let on_server = normalized(&udp_exchange(s, &message).0);
            (on_client == on_server).then_some(())
        });
        let message = query(name, qtype, None);
        let whole = tcp_exchange(c, &message);
        assert_eq!(
            normalized(&whole),
            normalized(&tcp_exchange(s, &message)),
            "{name} {qtype} over TCP"
        );
        // A plain UDP answer is a random pick when more records exist than it may carry:
        // the same shape, and every record one of the whole answer's.
        let (on_client, on_server) = (udp_exchange(c, &message).0, udp_exchange(s, &message).0);
        assert_eq!(
            shape(&on_client),
            shape(&on_server),
            "{name} {qtype} over UDP"
        );
        let whole_answers: Vec<String> = whole.answers.iter().map(record_text).collect();
        for record in &on_client.answers {
            assert!(
                whole_answers.contains(&record_text(record)),
                "{name} {qtype}: {record} is not in the whole answer"
            );
        }
        let text = qtype.to_string();
        assert_eq!(
            dig_short(c, name, &text, true),
            dig_short(s, name, &text, true),
            "dig {name} {text} +tcp"
        );
        assert_eq!(
            dig_short(c, name, &text, false).len(),
            dig_short(s, name, &text, false).len(),
            "dig {name} {text}"
        );
    }
}

fn a_records_of(agent: &Agent, name: &str) -> Vec<std::net::Ipv4Addr> {
    a_records(&udp_exchange(dns_address(agent), &query(name, RecordType::A, None)).0)
}

#[test]
fn client_agents_answer_every_name_form_as_the_servers_do() {
    let cluster = Cluster::start(3, &["-dns-port=8600"]);
    let (data_a, data_b) = (TempDir::new("dns-client-a"), TempDir::new("dns-client-b"));
    let clients = [
        cluster.start_client(&data_a, &["-dns-port=8600"]),
        cluster.start_client(&data_b, &["-dns-port=8600"]),
    ];
    for client in &clients {
        client.wait_ready();
    }
    fill_catalog(&cluster.servers[0]);
    for client in &clients {
        for server in &cluster.servers {
            assert_same_answers(client, server);
        }
    }
    // The truncation rules hold on the client: a plain UDP answer carries at most three
    // records (udp_answer_limit), and dig falls back to TCP on TC for all twenty.
    let many = a_records_of(&clients[0], "many.service.consul");
    assert_eq!(many.len(), 3);
    assert_eq!(
        dig_short(dns_address(&clients[0]), "many.service.consul", "A", true).len(),
        20
    );
}

#[test]
fn a_health_flip_through_a_client_shows_in_its_dns_and_answers_survive_its_server() {
    let mut cluster = Cluster::start(3, &["-dns-port=8600"]);
    let data = TempDir::new("dns-client-flip");
    let client = cluster.start_client(&data, &["-dns-port=8600"]);
    client.wait_ready();
    let r = client.put(
        "/v1/agent/service/register",
        json!({"Name": "api", "ID": "api-1", "Port": 9000,
               "Check": {"CheckID": "api-ttl", "TTL": "300s"}})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let node_address: std::net::Ipv4Addr = client.ip.to_string().parse().unwrap();
    let r = client.put("/v1/agent/check/pass/api-ttl", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(DNS_CONVERGE_LIMIT, "the passing instance in DNS", || {
        (a_records_of(&client, "api.service.consul") == [node_address]).then_some(())
    });
    // Cached now: fail the check through the client's own HTTP API and time how long the
    // client's DNS takes to drop the instance.
    let flipped = Instant::now();
    let r = client.put("/v1/agent/check/fail/api-ttl", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(
        DNS_CONVERGE_LIMIT,
        "the failed instance gone from DNS",
        || {
            a_records_of(&client, "api.service.consul")
                .is_empty()
                .then_some(())
        },
    );
    eprintln!(
        "health flip visible in the client's DNS after {:?}",
        flipped.elapsed()
    );
    let r = client.put("/v1/agent/check/pass/api-ttl", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(DNS_CONVERGE_LIMIT, "the instance back in DNS", || {
        (a_records_of(&client, "api.service.consul") == [node_address]).then_some(())
    });

    // Each shard caches its own answers and datagrams land on shards at random: ask enough
    // times that every shard holds the answer (2^-20 odds that one shard saw none of them).
    for _ in 0..20 {
        assert_eq!(a_records_of(&client, "api.service.consul"), [node_address]);
    }
    // Kill the server this client asks (its `/v1/status/leader` names it) and check that
    // cached answers keep coming at once, and that new questions and changes get through
    // another server.
    let used = client.get("/v1/status/leader").json();
    let used = used.as_str().unwrap().to_string();
    let victim = cluster
        .servers
        .iter()
        .position(|s| used.starts_with(&format!("{}:", s.ip)))
        .unwrap_or_else(|| panic!("no server at {used}"));
    cluster.servers[victim].kill9();
    for _ in 0..20 {
        assert_eq!(
            a_records_of(&client, "api.service.consul"),
            [node_address],
            "a cached answer while the client's server is down"
        );
    }
    let survivor = &cluster.servers[(victim + 1) % 3];
    wait_for(FAILOVER_LIMIT, "a leader after the kill", || {
        let r = survivor.get("/v1/status/leader");
        (r.status == 200 && r.text() != "\"\"").then_some(())
    });
    // The survivors may still name the dead server as leader for a moment: retry.
    let late = json!({"Node": "late", "Address": "10.7.9.9",
                      "Service": {"Service": "late", "ID": "late-1", "Port": 1}});
    wait_for(FAILOVER_LIMIT, "a write after the kill", || {
        let r = survivor.put("/v1/catalog/register", late.to_string().as_bytes());
        (r.status == 200).then_some(())
    });
    wait_for(
        FAILOVER_LIMIT,
        "a new question answered through another server",
        || {
            (a_records_of(&client, "late.service.consul")
                == ["10.7.9.9".parse::<std::net::Ipv4Addr>().unwrap()])
            .then_some(())
        },
    );
    let r = client.put("/v1/agent/check/fail/api-ttl", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(
        FAILOVER_LIMIT,
        "a flip after the failover reaching DNS",
        || {
            a_records_of(&client, "api.service.consul")
                .is_empty()
                .then_some(())
        },
    );
}
