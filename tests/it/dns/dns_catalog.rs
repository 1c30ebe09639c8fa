//! Service and node names over real DNS against a real agent whose catalog is filled through
//! the HTTP API: every name form with `dig`/`kdig` and hickory-proto as the oracle, health
//! filtering and a health flip seen by the very next query, truncation over UDP with the full
//! answer over TCP, PTR, ANY.

use crate::common;
use crate::dns_common;

use common::Agent;
use dns_common::*;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use serde_json::{json, Value};
use std::net::Ipv4Addr;

fn register(agent: &Agent, body: Value) {
    let r = agent.put("/v1/catalog/register", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "register {body}: {}", r.text());
}

/// Registers `service` instance `id` on `node` at `address` with one service check.
fn instance(
    agent: &Agent,
    node: &str,
    address: &str,
    service: &str,
    id: &str,
    tags: &[&str],
    status: &str,
) {
    register(
        agent,
        json!({
            "Node": node,
            "Address": address,
            "NodeMeta": {"rack": "r1"},
            "Service": {"Service": service, "ID": id, "Port": 8080, "Tags": tags},
            "Check": {"CheckID": format!("{id}-check"), "Name": "http", "Status": status, "ServiceID": id},
        }),
    );
}

fn ip(text: &str) -> Ipv4Addr {
    text.parse().unwrap()
}

#[test]
fn every_name_form_answers_from_the_catalog() {
    let agent = Agent::dev_with_dns(&[]);
    let server = agent.dns_addr();
    instance(
        &agent,
        "web1",
        "10.1.0.1",
        "web",
        "web-a",
        &["v1", "primary"],
        "passing",
    );
    instance(
        &agent,
        "web2",
        "10.1.0.2",
        "web",
        "web-b",
        &["v1"],
        "passing",
    );
    instance(
        &agent,
        "web3",
        "10.1.0.3",
        "web",
        "web-c",
        &["v2"],
        "warning",
    );
    instance(
        &agent,
        "web4",
        "10.1.0.4",
        "web",
        "web-d",
        &["v1"],
        "critical",
    );

    // <svc>.service[.<dc>].consul: healthy instances (warning included), critical excluded.
    for name in [
        "web.service.consul.",
        "web.service.dc1.consul.",
        "WEB.Service.Consul.",
    ] {
        let (reply, _) = udp_exchange(server, &query(name, RecordType::A, Some(4096)));
        assert_eq!(
            reply.metadata.response_code,
            ResponseCode::NoError,
            "{name}"
        );
        assert!(reply.metadata.authoritative);
        assert_eq!(
            a_records(&reply),
            vec![ip("10.1.0.1"), ip("10.1.0.2"), ip("10.1.0.3")],
            "{name}"
        );
    }
    let short = dig(server, &["web.service.consul", "A", "+short"]);
    let mut lines: Vec<&str> = short.lines().collect();
    lines.sort();
    assert_eq!(lines, vec!["10.1.0.1", "10.1.0.2", "10.1.0.3"], "{short}");

    // <tag>.<svc>.service.consul
    let (tagged, _) = udp_exchange(
        server,
        &query("v1.web.service.consul.", RecordType::A, None),
    );
    assert_eq!(a_records(&tagged), vec![ip("10.1.0.1"), ip("10.1.0.2")]);
    let primary = kdig(server, &["primary.web.service.consul", "A", "+short"]);
    assert_eq!(primary.trim(), "10.1.0.1");

    // RFC 2782 SRV, with the target's address in the additional section.
    for (name, count) in [
        ("_web._tcp.service.consul.", 3),
        ("_web._v1.service.consul.", 2),
        ("_web._v2.service.dc1.consul.", 1),
        ("web.service.consul.", 3),
    ] {
        let (reply, _) = udp_exchange(server, &query(name, RecordType::SRV, Some(4096)));
        assert_eq!(reply.answers.len(), count, "{name}");
        for answer in &reply.answers {
            let RData::SRV(srv) = &answer.data else {
                panic!("{name}: {answer:?}")
            };
            assert_eq!((srv.priority, srv.port), (1, 8080));
            assert!(srv.target.to_ascii().ends_with(".node.dc1.consul."));
            assert!(
                reply.additionals.iter().any(|g| g.name == srv.target),
                "{name}: glue for {}",
                srv.target
            );
        }
    }
    let srv = squash(&dig(server, &["_web._v2.service.consul", "SRV"]));
    assert!(srv.contains("1 1 8080 web3.node.dc1.consul."), "{srv}");
    assert!(
        srv.contains("web3.node.dc1.consul. 0 IN A 10.1.0.3"),
        "{srv}"
    );

    // <node>.node[.<dc>].consul with node metadata as TXT.
    let node = squash(&dig(server, &["web2.node.consul", "A"]));
    assert!(node.contains("web2.node.consul. 0 IN A 10.1.0.2"), "{node}");
    assert!(
        node.contains("\"rack=r1\""),
        "meta TXT in additional: {node}"
    );
    let (node_dc, _) = udp_exchange(server, &query("web2.node.dc1.consul.", RecordType::A, None));
    assert_eq!(a_records(&node_dc), vec![ip("10.1.0.2")]);
    let txt = kdig(server, &["web2.node.consul", "TXT", "+short"]);
    assert_eq!(txt.trim(), "\"rack=r1\"");

    // ANY on a service returns its addresses.
    let (any, _) = udp_exchange(
        server,
        &query("web.service.consul.", RecordType::ANY, Some(4096)),
    );
    assert_eq!(a_records(&any).len(), 3);

    // PTR: node addresses name the node.
    let ptr = dig(server, &["-x", "10.1.0.2", "+short"]);
    assert_eq!(ptr.trim(), "web2.node.dc1.consul.");

    // NS lists the agent (the `consul` service it registers for itself) with glue.
    let ns = dig(server, &["consul", "NS"]);
    assert!(ns.contains(".node.dc1.consul."), "{ns}");

    // Unknown service, unknown tag, other datacenter: NXDOMAIN with the SOA.
    for name in [
        "nope.service.consul",
        "v9.web.service.consul",
        "web.service.dc2.consul",
    ] {
        let reply = dig(server, &[name, "A"]);
        assert!(reply.contains("status: NXDOMAIN"), "{name}: {reply}");
        assert!(
            squash(&reply).contains("IN SOA ns.consul."),
            "{name}: {reply}"
        );
    }
    // An existing service asked for a type it has no records of: NODATA with the SOA.
    let (mx, _) = udp_exchange(server, &query("web.service.consul.", RecordType::MX, None));
    assert_eq!(mx.metadata.response_code, ResponseCode::NoError);
    assert!(mx.answers.is_empty());
    assert_eq!(mx.authorities[0].record_type(), RecordType::SOA);
}

#[test]
fn service_addresses_and_ptr() {
    let agent = Agent::dev_with_dns(&[]);
    let server = agent.dns_addr();
    register(
        &agent,
        json!({
            "Node": "db-host",
            "Address": "10.2.0.1",
            "Service": {"Service": "db", "ID": "db1", "Address": "10.2.0.99", "Port": 5432},
        }),
    );
    let a = dig(server, &["db.service.consul", "A", "+short"]);
    assert_eq!(a.trim(), "10.2.0.99");
    let (srv, _) = udp_exchange(server, &query("db.service.consul.", RecordType::SRV, None));
    let RData::SRV(record) = &srv.answers[0].data else {
        panic!()
    };
    assert_eq!(record.target.to_ascii(), "0a020063.addr.dc1.consul.");
    assert_eq!(record.port, 5432);
    let glue = &srv.additionals[0];
    assert_eq!(glue.name, record.target);
    assert!(matches!(&glue.data, RData::A(a) if a.0 == ip("10.2.0.99")));
    let ptr = kdig(server, &["-x", "10.2.0.99", "+short"]);
    assert_eq!(ptr.trim(), "db.service.dc1.consul.");
    let node_ptr = kdig(server, &["-x", "10.2.0.1", "+short"]);
    assert_eq!(node_ptr.trim(), "db-host.node.dc1.consul.");
}

#[test]
fn a_health_flip_shows_in_the_next_answer() {
    let agent = Agent::dev_with_dns(&[]);
    let server = agent.dns_addr();
    for i in 1..=3 {
        instance(
            &agent,
            &format!("n{i}"),
            &format!("10.3.0.{i}"),
            "web",
            &format!("web{i}"),
            &[],
            "passing",
        );
    }
    let ask = || {
        a_records(
            &udp_exchange(
                server,
                &query("web.service.consul.", RecordType::A, Some(4096)),
            )
            .0,
        )
    };
    // Ask enough times that every shard has the answer cached.
    for _ in 0..20 {
        assert_eq!(ask().len(), 3);
    }
    instance(&agent, "n2", "10.3.0.2", "web", "web2", &[], "critical");
    // The very next query, on whichever shard, no longer lists the critical instance.
    for _ in 0..20 {
        assert_eq!(ask(), vec![ip("10.3.0.1"), ip("10.3.0.3")]);
    }
    instance(&agent, "n2", "10.3.0.2", "web", "web2", &[], "passing");
    assert_eq!(ask().len(), 3);
    // Deregistering the last instances makes the name disappear.
    for i in 1..=3 {
        let r = agent.put(
            "/v1/catalog/deregister",
            json!({"Node": format!("n{i}")}).to_string().as_bytes(),
        );
        assert_eq!(r.status, 200);
    }
    let (gone, _) = udp_exchange(server, &query("web.service.consul.", RecordType::A, None));
    assert_eq!(gone.metadata.response_code, ResponseCode::NXDomain);
}

#[test]
fn twenty_instances_truncate_over_udp_and_arrive_whole_over_tcp() {
    let agent = Agent::dev_with_dns(&["-hcl", "dns_config { enable_truncate = true }"]);
    let server = agent.dns_addr();
    for i in 1..=20 {
        instance(
            &agent,
            &format!("m{i}"),
            &format!("10.4.0.{i}"),
            "many",
            &format!("many{i}"),
            &[],
            "passing",
        );
    }
    // Plain UDP: udp_answer_limit (3) answers and the TC bit.
    let (udp, size) = udp_exchange(server, &query("many.service.consul.", RecordType::A, None));
    assert_eq!(udp.answers.len(), 3);
    assert!(udp.metadata.truncation);
    assert!(size <= 512);
    let ignored = dig(server, &["many.service.consul", "A", "+ignore", "+noedns"]);
    assert!(ignored.contains(" tc"), "{ignored}");
    // dig retries over TCP on TC and gets all twenty.
    let retried = dig(server, &["many.service.consul", "A", "+noedns", "+short"]);
    assert_eq!(retried.lines().count(), 20, "{retried}");
    let tcp = tcp_exchange(server, &query("many.service.consul.", RecordType::A, None));
    assert_eq!(tcp.answers.len(), 20);
    assert!(!tcp.metadata.truncation);
    // SRV over TCP: twenty answers, twenty glue records.
    let tcp_srv = tcp_exchange(
        server,
        &query("many.service.consul.", RecordType::SRV, None),
    );
    assert_eq!((tcp_srv.answers.len(), tcp_srv.additionals.len()), (20, 20));
    // EDNS raises the UDP limit: 20 A records fit in 1232 bytes.
    let (edns, size) = udp_exchange(
        server,
        &query("many.service.consul.", RecordType::A, Some(1232)),
    );
    assert_eq!(edns.answers.len(), 20);
    assert!(size <= 1232);
    // SRV with glue in 700 bytes of EDNS: some answers, each with its glue, and TC.
    let (srv, size) = udp_exchange(
        server,
        &query("many.service.consul.", RecordType::SRV, Some(700)),
    );
    assert!(size <= 700, "{size}");
    assert!(srv.metadata.truncation);
    assert!(!srv.answers.is_empty() && srv.answers.len() < 20);
    assert_eq!(srv.additionals.len(), srv.answers.len());
}
