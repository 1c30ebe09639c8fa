//! The DNS interface of a real agent, asked by real clients (`dig`, `kdig`) and by raw
//! messages parsed with hickory-proto: zone apex, negative answers, `<hex>.addr`, EDNS, TCP
//! framing, error rcodes and recursor forwarding to an upstream this test starts.

use crate::common;
use crate::dns_common;

use common::Agent;
use dns_common::*;
use hickory_proto::op::{OpCode, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use std::io::Write;
use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

#[test]
fn apex_negative_answers_addr_and_edns() {
    let agent = Agent::dev_with_dns(&["-node", "dns-node"]);
    let server = agent.dns_addr();

    let soa = dig(server, &["consul", "SOA"]);
    assert!(soa.contains("status: NOERROR"), "{soa}");
    assert!(soa.contains(" aa"), "authoritative: {soa}");
    assert!(
        squash(&soa).contains("IN SOA ns.consul. hostmaster.consul."),
        "{soa}"
    );

    let ns = dig(server, &["CONSUL.", "NS"]);
    assert!(ns.contains("dns-node.node.dc1.consul."), "{ns}");
    assert!(
        squash(&ns).contains(&format!("dns-node.node.dc1.consul. 0 IN A {}", agent.ip)),
        "glue for the name server: {ns}"
    );

    let missing = dig(server, &["nothing.node.consul", "A"]);
    assert!(missing.contains("status: NXDOMAIN"), "{missing}");
    assert!(missing.contains("AUTHORITY SECTION"), "{missing}");
    assert!(squash(&missing).contains("IN SOA ns.consul."), "{missing}");

    let addr = kdig(server, &["c0000201.addr.dc1.consul", "A", "+short"]);
    assert_eq!(addr.trim(), "192.0.2.1");
    let addr6 = dig(
        server,
        &[
            "20010db8000000000000000000000001.addr.consul",
            "AAAA",
            "+short",
        ],
    );
    assert_eq!(addr6.trim(), "2001:db8::1");

    // EDNS: the client's size is echoed in the OPT record; without EDNS there is none.
    let with_edns = dig(server, &["consul", "SOA", "+bufsize=1232"]);
    assert!(with_edns.contains("OPT PSEUDOSECTION"), "{with_edns}");
    assert!(with_edns.contains("udp: 1232"), "{with_edns}");
    let without = dig(server, &["consul", "SOA", "+noedns"]);
    assert!(!without.contains("OPT PSEUDOSECTION"), "{without}");
    let (reply, _) = udp_exchange(server, &query("consul.", RecordType::SOA, Some(4000)));
    assert_eq!(reply.edns.expect("OPT echoed").max_payload(), 4000);

    // The question comes back exactly as asked, in its letter case.
    let mixed = dig(server, &["CoNsUl.", "NS"]);
    assert!(mixed.contains(";CoNsUl.\t"), "{mixed}");
    let (reply, _) = udp_exchange(server, &query("consul.", RecordType::NS, None));
    assert!(matches!(&reply.answers[0].data, RData::NS(_)));

    // PTR for an address nobody has, no recursors: NXDOMAIN.
    let ptr = dig(server, &["-x", "203.0.113.9"]);
    assert!(ptr.contains("status: NXDOMAIN"), "{ptr}");
}

#[test]
fn tcp_framing_and_pipelining() {
    let agent = Agent::dev_with_dns(&[]);
    let server = agent.dns_addr();
    let over_tcp = kdig(server, &["+tcp", "c0a80001.addr.consul", "A"]);
    assert!(over_tcp.contains("192.168.0.1"), "{over_tcp}");
    assert!(over_tcp.contains("TCP"), "{over_tcp}");

    // Two queries written back to back on one connection are both answered, in order.
    let mut stream = TcpStream::connect(server).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let first = query("0a000001.addr.consul.", RecordType::A, None);
    let second = query("0a000002.addr.consul.", RecordType::A, None);
    let mut bytes = Vec::new();
    for message in [&first, &second] {
        let encoded = message.to_vec().unwrap();
        bytes.extend_from_slice(&(encoded.len() as u16).to_be_bytes());
        bytes.extend_from_slice(&encoded);
    }
    stream.write_all(&bytes).unwrap();
    let one = read_tcp_message(&mut stream).unwrap();
    let two = read_tcp_message(&mut stream).unwrap();
    assert_eq!(one.metadata.id, first.metadata.id);
    assert_eq!(a_records(&one), vec![Ipv4Addr::new(10, 0, 0, 1)]);
    assert_eq!(two.metadata.id, second.metadata.id);
    assert_eq!(a_records(&two), vec![Ipv4Addr::new(10, 0, 0, 2)]);
}

#[test]
fn bad_or_unsupported_queries_get_error_rcodes() {
    let agent = Agent::dev_with_dns(&[]);
    let server = agent.dns_addr();
    let rcode_of = |bytes: &[u8]| bytes[3] & 0x0F;

    // A header announcing a question that is not there: FORMERR.
    let formerr = udp_exchange_raw(server, &[0xab, 0xcd, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, b'w'])
        .expect("a reply to a malformed query");
    assert_eq!(&formerr[..2], &[0xab, 0xcd]);
    assert_eq!(rcode_of(&formerr), 1);
    // A datagram longer than any query praetor reads (4 KiB): FORMERR, ID kept.
    let mut oversized = vec![0x0b, 0xad, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    oversized.resize(5000, 7);
    let reply = udp_exchange_raw(server, &oversized).expect("a reply to an oversized query");
    assert_eq!((&reply[..2], rcode_of(&reply)), (&[0x0b, 0xad][..], 1));
    // Two questions: FORMERR.
    let mut two = query("consul.", RecordType::SOA, None);
    two.queries.push(two.queries[0].clone());
    let reply = udp_exchange_raw(server, &two.to_vec().unwrap()).unwrap();
    assert_eq!(rcode_of(&reply), 1);
    // NOTIFY: NOTIMP.
    let mut notify = query("consul.", RecordType::SOA, None);
    notify.metadata.op_code = OpCode::Notify;
    let reply = udp_exchange_raw(server, &notify.to_vec().unwrap()).unwrap();
    assert_eq!(rcode_of(&reply), 4);
    // AXFR over TCP: NOTIMP.
    let axfr = tcp_exchange(server, &query("consul.", RecordType::AXFR, None));
    assert_eq!(axfr.metadata.response_code, ResponseCode::NotImp);
    // CHAOS class: REFUSED.
    let chaos = dig(server, &["version.bind", "TXT", "CH"]);
    assert!(chaos.contains("status: REFUSED"), "{chaos}");
    // Outside the domain without recursors: REFUSED.
    let outside = dig(server, &["example.org", "A"]);
    assert!(outside.contains("status: REFUSED"), "{outside}");
    // EDNS version 1: BADVERS.
    let badvers = dig(server, &["consul", "SOA", "+edns=1", "+noednsnegotiation"]);
    assert!(badvers.contains("status: BADVERS"), "{badvers}");
    // A response sent to the server is ignored, and the server keeps answering.
    let mut response = query("consul.", RecordType::SOA, None);
    response.metadata.message_type = hickory_proto::op::MessageType::Response;
    assert!(udp_exchange_raw(server, &response.to_vec().unwrap()).is_none());
    let still = dig(server, &["consul", "SOA"]);
    assert!(still.contains("status: NOERROR"), "{still}");
}

#[test]
fn recursors_answer_names_outside_the_domain() {
    let upstream = Upstream::start();
    let recursor = upstream.addr.to_string();
    let agent = Agent::dev_with_dns(&["-recursor", &recursor]);
    let server = agent.dns_addr();

    let forwarded = dig(server, &["example.org", "A"]);
    assert!(forwarded.contains("status: NOERROR"), "{forwarded}");
    assert!(forwarded.contains("192.0.2.10"), "{forwarded}");
    assert!(
        forwarded.contains(" ra"),
        "recursion available: {forwarded}"
    );

    // The upstream truncates over UDP; praetor retries over TCP, and since 40 records do not
    // fit a 512-byte UDP reply it tells the client to retry over TCP, where all 40 arrive.
    let (reply, _) = udp_exchange(server, &query("big.example.org.", RecordType::A, None));
    assert!(reply.metadata.truncation, "TC for a reply too big for UDP");
    let full = tcp_exchange(server, &query("big.example.org.", RecordType::A, None));
    assert_eq!(full.answers.len(), 40);
    let via_dig = dig(server, &["big.example.org", "A", "+short"]);
    assert_eq!(
        via_dig.lines().count(),
        40,
        "dig retries over TCP: {via_dig}"
    );
    let (large_edns, _) = udp_exchange(
        server,
        &query("big.example.org.", RecordType::A, Some(4096)),
    );
    assert_eq!(large_edns.answers.len(), 40, "fits a 4096-byte EDNS reply");

    let nx = dig(server, &["nothing.example.org", "A"]);
    assert!(nx.contains("status: NXDOMAIN"), "{nx}");
    let failed = dig(server, &["fail.example.org", "A"]);
    assert!(failed.contains("status: SERVFAIL"), "{failed}");
    // Reverse names nobody in the catalog owns go upstream too.
    let ptr = dig(server, &["-x", "203.0.113.9"]);
    assert!(ptr.contains("status: NXDOMAIN"), "{ptr}");

    // Names inside the domain are never forwarded.
    let inside = dig(server, &["nothing.node.consul", "A"]);
    assert!(
        inside.contains("status: NXDOMAIN") && inside.contains(" aa"),
        "{inside}"
    );
    drop(upstream);
    // With the upstream gone, forwarding fails within recursor_timeout: SERVFAIL.
    let gone = dig(server, &["example.org", "A"]);
    assert!(gone.contains("status: SERVFAIL"), "{gone}");
}

#[test]
fn domain_and_alt_domain_flags() {
    let agent = Agent::dev_with_dns(&["-domain", "Mesh.", "-alt-domain", "alt.test"]);
    let server = agent.dns_addr();
    let soa = squash(&dig(server, &["mesh", "SOA"]));
    assert!(soa.contains("IN SOA ns.mesh. hostmaster.mesh."), "{soa}");
    let alt = kdig(server, &["0a000001.addr.alt.test", "A", "+short"]);
    assert_eq!(alt.trim(), "10.0.0.1");
    let missing = squash(&dig(server, &["nothing.node.alt.test", "A"]));
    assert!(missing.contains("status: NXDOMAIN"), "{missing}");
    assert!(
        missing.contains("IN SOA ns.alt.test. hostmaster.alt.test."),
        "{missing}"
    );
    // `consul` is no longer ours: without recursors it is refused.
    let old = dig(server, &["consul", "SOA"]);
    assert!(old.contains("status: REFUSED"), "{old}");
}
