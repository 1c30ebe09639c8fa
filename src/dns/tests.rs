//! End-to-end tests of `handle_message` over an in-memory catalog, with hickory-proto as the
//! oracle that parses every response.

use super::view::{Health, MemoryCatalog, NodeRecord, ServiceInstance};
use super::*;
use crate::config::DnsConfig;
use crate::proto::dns::fast::tests::build_query;
use crate::store::{Change, ChangeKey, Table};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

struct Source(RefCell<Arc<MemoryCatalog>>);

impl VersionSource for Source {
    type View = Arc<MemoryCatalog>;
    fn version(&self) -> Arc<MemoryCatalog> {
        self.0.borrow().clone()
    }
}

fn node(name: &str, address: &str) -> Arc<NodeRecord> {
    Arc::new(NodeRecord {
        name: name.into(),
        datacenter: "dc1".into(),
        address: address.into(),
        tagged_addresses: Vec::new(),
        meta: vec![("rack".into(), "r1".into())],
    })
}

fn instance(node: &Arc<NodeRecord>, service: &str, port: u16, health: Health) -> ServiceInstance {
    ServiceInstance {
        node: node.clone(),
        service_id: format!("{service}-{}", node.name).into(),
        service_name: service.into(),
        address: "".into(),
        port,
        tags: vec!["v1".into()],
        tagged_addresses: Vec::new(),
        weight_passing: 1,
        weight_warning: 1,
        health,
    }
}

/// `count` instances of `web` on nodes n0.. with addresses 10.0.x.y, all passing.
fn catalog_with_web(count: usize) -> MemoryCatalog {
    let mut catalog = MemoryCatalog::default();
    for i in 0..count {
        let n = node(
            &format!("n{i}"),
            &format!("10.0.{}.{}", i / 250, i % 250 + 1),
        );
        catalog
            .instances
            .push(instance(&n, "web", 8000 + i as u16, Health::Passing));
        catalog.nodes.push(n);
    }
    catalog
}

struct Fixture {
    settings: DnsSettings,
    state: ShardDns,
    source: Source,
}

impl Fixture {
    fn new(catalog: MemoryCatalog, config: DnsConfig) -> Fixture {
        Fixture {
            settings: DnsSettings::new(
                config,
                resolve::LocalAgent {
                    node_name: "server-1".into(),
                    datacenter: "dc1".into(),
                    address: "192.0.2.1".parse().unwrap(),
                },
            ),
            state: ShardDns::new(7),
            source: Source(RefCell::new(Arc::new(catalog))),
        }
    }

    fn raw(&mut self, message: &[u8], transport: Transport) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        match handle_message(
            &self.settings,
            &mut self.state,
            true,
            &self.source,
            message,
            transport,
            &mut out,
        ) {
            Handled::Reply => Some(out),
            Handled::Drop => None,
            Handled::Recurse(_) => panic!("unexpected recursion"),
            Handled::Fetch(..) => panic!("a store version lacks nothing"),
        }
    }

    fn ask(&mut self, name: &str, qtype: u16, edns: Option<u16>, transport: Transport) -> Message {
        let bytes = self
            .raw(&build_query(0x4242, name, qtype, edns), transport)
            .expect("a reply");
        let message = Message::from_vec(&bytes).expect("hickory parses the response");
        assert_eq!(message.metadata.id, 0x4242);
        message
    }

    fn udp(&mut self, name: &str, qtype: u16) -> Message {
        self.ask(name, qtype, None, Transport::Udp)
    }
}

fn a_records(message: &Message) -> Vec<Ipv4Addr> {
    message
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

#[test]
fn service_a_records_honour_health_and_the_udp_limit() {
    let mut catalog = catalog_with_web(3);
    let sick = node("sick", "10.9.9.9");
    let warn = node("warn", "10.8.8.8");
    catalog
        .instances
        .push(instance(&sick, "web", 1, Health::Critical));
    catalog
        .instances
        .push(instance(&warn, "web", 1, Health::Warning));
    let mut fixture = Fixture::new(catalog.clone(), DnsConfig::default());
    let response = fixture.udp("web.service.consul", rtype::A);
    assert_eq!(response.metadata.response_code, ResponseCode::NoError);
    assert!(response.metadata.authoritative);
    assert_eq!(response.answers.len(), 3, "udp_answer_limit 3 without EDNS");
    assert!(
        !response.metadata.truncation,
        "enable_truncate is off by default"
    );
    let edns = fixture.ask("web.service.consul", rtype::A, Some(4096), Transport::Udp);
    let mut ips = a_records(&edns);
    ips.sort();
    let expected: Vec<Ipv4Addr> = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.8.8.8"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(ips, expected, "warning included, critical excluded");
    let opt = edns.edns.expect("OPT echoed");
    assert_eq!(opt.max_payload(), 4096);

    let only_passing = DnsConfig {
        only_passing: true,
        ..DnsConfig::default()
    };
    let mut fixture = Fixture::new(catalog, only_passing);
    let response = fixture.ask(
        "web.service.dc1.consul",
        rtype::A,
        Some(4096),
        Transport::Udp,
    );
    assert_eq!(a_records(&response).len(), 3);
    assert!(!a_records(&response).contains(&"10.8.8.8".parse().unwrap()));
}

#[test]
fn srv_answers_carry_target_addresses() {
    let mut fixture = Fixture::new(catalog_with_web(3), DnsConfig::default());
    for name in [
        "web.service.consul",
        "_web._tcp.service.consul",
        "_web._v1.service.consul",
        "v1.web.service.consul",
    ] {
        let response = fixture.ask(name, rtype::SRV, Some(1232), Transport::Udp);
        assert_eq!(response.answers.len(), 3, "{name}");
        for answer in &response.answers {
            let RData::SRV(srv) = &answer.data else {
                panic!("not SRV: {answer:?}")
            };
            assert_eq!(srv.priority, 1);
            assert_eq!(srv.weight, 1);
            let target = srv.target.to_ascii();
            assert!(target.ends_with(".node.dc1.consul."), "{target}");
            let glue = response
                .additionals
                .iter()
                .find(|r| r.name == srv.target)
                .unwrap_or_else(|| panic!("no glue for {target}"));
            assert_eq!(glue.record_type(), RecordType::A);
            let node_index: u16 = target[1..target.find('.').unwrap()].parse().unwrap();
            assert_eq!(srv.port, 8000 + node_index);
        }
    }
    let missing = fixture.udp("_web._v2.service.consul", rtype::SRV);
    assert_eq!(missing.metadata.response_code, ResponseCode::NXDomain);
}

#[test]
fn nodes_addr_and_negative_answers() {
    let mut fixture = Fixture::new(catalog_with_web(2), DnsConfig::default());
    let response = fixture.udp("n1.node.consul", rtype::A);
    assert_eq!(
        a_records(&response),
        vec!["10.0.0.2".parse::<Ipv4Addr>().unwrap()]
    );
    assert!(
        response
            .additionals
            .iter()
            .any(|r| matches!(&r.data, RData::TXT(t) if t.to_string() == "rack=r1")),
        "node meta as TXT in additional: {:?}",
        response.additionals
    );
    let txt = fixture.udp("n1.node.dc1.consul", rtype::TXT);
    assert_eq!(txt.answers.len(), 1);

    let missing = fixture.udp("nope.node.consul", rtype::A);
    assert_eq!(missing.metadata.response_code, ResponseCode::NXDomain);
    let soa = &missing.authorities[0];
    assert_eq!(soa.record_type(), RecordType::SOA);
    assert_eq!(soa.name.to_ascii(), "consul.");
    let RData::SOA(soa) = &soa.data else { panic!() };
    assert_eq!(soa.mname.to_ascii(), "ns.consul.");
    assert_eq!(soa.rname.to_ascii(), "hostmaster.consul.");
    assert_eq!(
        (soa.refresh, soa.retry, soa.expire, soa.minimum),
        (3600, 600, 86400, 0)
    );

    let other_dc = fixture.udp("web.service.dc9.consul", rtype::A);
    assert_eq!(other_dc.metadata.response_code, ResponseCode::NXDomain);
    let query = fixture.udp("anything.query.consul", rtype::A);
    assert_eq!(query.metadata.response_code, ResponseCode::NXDomain);

    let addr = fixture.udp("c0000201.addr.dc1.consul", rtype::A);
    assert_eq!(
        a_records(&addr),
        vec!["192.0.2.1".parse::<Ipv4Addr>().unwrap()]
    );
    let addr6 = fixture.udp("20010db8000000000000000000000001.addr.consul", rtype::AAAA);
    assert!(
        matches!(&addr6.answers[0].data, RData::AAAA(a) if a.0 == "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap())
    );
    let mismatch = fixture.udp("c0000201.addr.consul", rtype::AAAA);
    assert!(mismatch.answers.is_empty());
    assert_eq!(mismatch.additionals.len(), 1);
}

#[test]
fn apex_soa_and_ns() {
    let mut fixture = Fixture::new(catalog_with_web(1), DnsConfig::default());
    let soa = fixture.udp("consul", rtype::SOA);
    assert_eq!(soa.answers[0].record_type(), RecordType::SOA);
    assert_eq!(soa.authorities[0].record_type(), RecordType::NS);
    let ns = fixture.udp("CONSUL", rtype::NS);
    assert_eq!(
        ns.queries[0].name.to_ascii(),
        "CONSUL.",
        "question echoed as sent"
    );
    let RData::NS(target) = &ns.answers[0].data else {
        panic!()
    };
    assert_eq!(target.0.to_ascii(), "server-1.node.dc1.consul.");
    assert_eq!(ns.additionals[0].name, target.0);
    assert!(matches!(&ns.additionals[0].data, RData::A(a) if a.0 == Ipv4Addr::new(192, 0, 2, 1)));
    let apex_a = fixture.udp("consul", rtype::A);
    assert_eq!(apex_a.metadata.response_code, ResponseCode::NoError);
    assert!(apex_a.answers.is_empty());
    assert_eq!(apex_a.authorities[0].record_type(), RecordType::SOA);
}

#[test]
fn reverse_lookups_find_nodes_then_services() {
    let mut catalog = catalog_with_web(1);
    let n = node("db-host", "10.1.1.1");
    let mut db = instance(&n, "db", 5432, Health::Passing);
    db.address = "10.2.2.2".into();
    catalog.instances.push(db);
    catalog.nodes.push(n);
    let mut fixture = Fixture::new(catalog, DnsConfig::default());
    let ptr = fixture.udp("1.1.1.10.in-addr.arpa", rtype::PTR);
    let RData::PTR(name) = &ptr.answers[0].data else {
        panic!()
    };
    assert_eq!(name.0.to_ascii(), "db-host.node.dc1.consul.");
    let ptr = fixture.udp("2.2.2.10.in-addr.arpa", rtype::PTR);
    let RData::PTR(name) = &ptr.answers[0].data else {
        panic!()
    };
    assert_eq!(name.0.to_ascii(), "db.service.dc1.consul.");
    let missing = fixture.udp("9.9.9.10.in-addr.arpa", rtype::PTR);
    assert_eq!(missing.metadata.response_code, ResponseCode::NXDomain);
}

#[test]
fn truncation_over_udp_and_full_answers_over_tcp() {
    let config = DnsConfig {
        enable_truncate: true,
        ..DnsConfig::default()
    };
    let mut fixture = Fixture::new(catalog_with_web(20), config);
    let udp = fixture.udp("web.service.consul", rtype::A);
    assert_eq!(udp.answers.len(), 3);
    assert!(udp.metadata.truncation);
    let tcp = fixture.ask("web.service.consul", rtype::A, None, Transport::Tcp);
    assert_eq!(tcp.answers.len(), 20);
    assert!(!tcp.metadata.truncation);
    // SRV without EDNS: the answer limit, then the 512-byte limit.
    let srv = fixture.udp("web.service.consul", rtype::SRV);
    assert!(srv.metadata.truncation);
    let srv_edns = fixture.ask("web.service.consul", rtype::SRV, Some(700), Transport::Udp);
    let bytes = fixture
        .raw(
            &build_query(1, "web.service.consul", rtype::SRV, Some(700)),
            Transport::Udp,
        )
        .unwrap();
    assert!(bytes.len() <= 700, "{} bytes", bytes.len());
    assert!(srv_edns.metadata.truncation && srv_edns.answers.len() < 20);
    assert_eq!(
        srv_edns.additionals.len(),
        srv_edns.answers.len(),
        "glue per answer"
    );
    assert!(srv_edns.edns.is_some());
    let srv_tcp = fixture.ask("web.service.consul", rtype::SRV, None, Transport::Tcp);
    assert_eq!(srv_tcp.answers.len(), 20);
    assert_eq!(srv_tcp.additionals.len(), 20);
}

#[test]
fn five_thousand_srv_instances_fill_one_tcp_message() {
    let mut fixture = Fixture::new(catalog_with_web(5000), DnsConfig::default());
    let bytes = fixture
        .raw(
            &build_query(9, "web.service.consul", rtype::SRV, None),
            Transport::Tcp,
        )
        .unwrap();
    assert!(bytes.len() <= 65_535);
    let message = Message::from_vec(&bytes).unwrap();
    assert!(
        message.answers.len() > 900,
        "{} answers",
        message.answers.len()
    );
    assert_eq!(message.answers.len(), message.additionals.len());
    for (answer, glue) in message.answers.iter().zip(&message.additionals) {
        let RData::SRV(srv) = &answer.data else {
            panic!()
        };
        assert_eq!(&glue.name, &srv.target, "glue follows its answer");
    }
}

#[test]
fn answers_are_shuffled_per_response() {
    let mut fixture = Fixture::new(catalog_with_web(5), DnsConfig::default());
    let mut firsts = std::collections::HashSet::new();
    for _ in 0..100 {
        let response = fixture.ask("web.service.consul", rtype::A, Some(4096), Transport::Udp);
        assert_eq!(response.answers.len(), 5);
        firsts.insert(a_records(&response)[0]);
    }
    assert_eq!(firsts.len(), 5, "every instance comes first sometimes");
}

#[test]
fn cache_entries_drop_on_exactly_the_changes_they_read() {
    let mut fixture = Fixture::new(catalog_with_web(3), DnsConfig::default());
    let ask_web = |f: &mut Fixture| {
        a_records(&f.ask("web.service.consul", rtype::A, Some(4096), Transport::Udp)).len()
    };
    assert_eq!(ask_web(&mut fixture), 3);
    assert_eq!(fixture.state.cache.len(), 1);
    // Flip one instance to critical in a new version.
    let mut next = (**fixture.source.0.borrow()).clone();
    next.instances[1].health = Health::Critical;
    *fixture.source.0.borrow_mut() = Arc::new(next);
    // An unrelated change keeps the (now stale) entry: proof that invalidation is precise.
    fixture.state.cache.invalidate(&[Change {
        table: Table::Services,
        key: ChangeKey::Key("db".into()),
    }]);
    assert_eq!(ask_web(&mut fixture), 3);
    // The change to `web` (in any letter case) evicts it; the next answer is fresh.
    fixture.state.cache.invalidate(&[Change {
        table: Table::Services,
        key: ChangeKey::Key("WEB".into()),
    }]);
    assert_eq!(fixture.state.cache.len(), 0);
    assert_eq!(ask_web(&mut fixture), 2);
    // Whole-table changes evict everything that read the table.
    fixture.udp("1.0.0.10.in-addr.arpa", rtype::PTR);
    assert!(fixture.state.cache.indexes_table(Table::Nodes));
    fixture.state.cache.invalidate(&[Change {
        table: Table::Nodes,
        key: ChangeKey::All,
    }]);
    assert!(!fixture.state.cache.indexes_table(Table::Nodes));
}

#[test]
fn question_case_is_echoed_and_shares_the_cache_entry() {
    let mut fixture = Fixture::new(catalog_with_web(2), DnsConfig::default());
    let lower = fixture.ask("web.service.consul", rtype::SRV, Some(4096), Transport::Udp);
    let upper = fixture.ask("WeB.SERVICE.Consul", rtype::SRV, Some(4096), Transport::Udp);
    assert_eq!(upper.queries[0].name.to_ascii(), "WeB.SERVICE.Consul.");
    assert_eq!(upper.answers.len(), lower.answers.len());
    assert_eq!(fixture.state.cache.len(), 1);
    assert_eq!(fixture.state.cache.stats(), (1, 1));
}

#[test]
fn bad_and_unsupported_queries_get_error_codes() {
    let mut fixture = Fixture::new(catalog_with_web(1), DnsConfig::default());
    let rcode_of = |bytes: &[u8]| bytes[3] & 0xF;
    // Garbage after a header: FORMERR.
    let mut garbage = build_query(5, "web.service.consul", rtype::A, None);
    garbage.truncate(20);
    assert_eq!(rcode_of(&fixture.raw(&garbage, Transport::Udp).unwrap()), 1);
    // Two questions: FORMERR.
    let mut two = build_query(5, "web.service.consul", rtype::A, None);
    two[5] = 2;
    assert_eq!(rcode_of(&fixture.raw(&two, Transport::Udp).unwrap()), 1);
    // NOTIFY: NOTIMP.
    let mut notify = build_query(5, "consul", rtype::SOA, None);
    notify[2] |= 4 << 3;
    assert_eq!(rcode_of(&fixture.raw(&notify, Transport::Udp).unwrap()), 4);
    // AXFR: NOTIMP.
    let axfr = fixture.udp("consul", rtype::AXFR);
    assert_eq!(axfr.metadata.response_code, ResponseCode::NotImp);
    // CHAOS class: REFUSED.
    let mut chaos = build_query(5, "version.bind", rtype::TXT, None);
    let at = chaos.len() - 2;
    chaos[at..].copy_from_slice(&class::CH.to_be_bytes());
    assert_eq!(rcode_of(&fixture.raw(&chaos, Transport::Udp).unwrap()), 5);
    // Outside the domain with no recursors: REFUSED, not authoritative.
    let outside = fixture.udp("example.org", rtype::A);
    assert_eq!(outside.metadata.response_code, ResponseCode::Refused);
    assert!(!outside.metadata.authoritative);
    // EDNS version 1: BADVERS.
    let mut v1 = build_query(5, "web.service.consul", rtype::A, Some(1232));
    let opt_version = v1.len() - 14 - 3;
    v1[opt_version] = 1;
    let bytes = fixture.raw(&v1, Transport::Udp).unwrap();
    let message = Message::from_vec(&bytes).unwrap();
    // 16 is both BADSIG and BADVERS; hickory names it the former.
    assert_eq!(u16::from(message.metadata.response_code), rcode::BADVERS);
    // Responses and runts are dropped.
    let mut response = build_query(5, "consul", rtype::A, None);
    response[2] |= 0x80;
    assert!(fixture.raw(&response, Transport::Udp).is_none());
    assert!(fixture.raw(&[1, 2, 3], Transport::Udp).is_none());
}

#[test]
fn outside_names_go_to_recursors_when_configured() {
    let config = DnsConfig {
        recursors: vec!["127.0.0.1:53".parse().unwrap()],
        ..DnsConfig::default()
    };
    let mut fixture = Fixture::new(catalog_with_web(1), config);
    let mut out = Vec::new();
    let handled = handle_message(
        &fixture.settings,
        &mut fixture.state,
        true,
        &fixture.source,
        &build_query(5, "example.org", rtype::A, None),
        Transport::Udp,
        &mut out,
    );
    assert!(matches!(handled, Handled::Recurse(q) if q.name.to_dotted() == "example.org"));
    let response = fixture.udp("web.service.consul", rtype::A);
    assert!(response.metadata.recursion_available);
}

#[test]
fn alt_domain_answers_in_the_domain_asked() {
    let config = DnsConfig {
        alt_domain: Some("alt.test".into()),
        ..DnsConfig::default()
    };
    let mut fixture = Fixture::new(catalog_with_web(1), config);
    let response = fixture.udp("web.service.alt.test", rtype::SRV);
    let RData::SRV(srv) = &response.answers[0].data else {
        panic!()
    };
    assert_eq!(srv.target.to_ascii(), "n0.node.dc1.alt.test.");
    let missing = fixture.udp("nope.service.alt.test", rtype::A);
    assert_eq!(missing.authorities[0].name.to_ascii(), "alt.test.");
}

#[test]
fn ttls_follow_the_config() {
    let config = DnsConfig {
        node_ttl: std::time::Duration::from_secs(11),
        service_ttl_prefix: vec![("w".into(), std::time::Duration::from_secs(22))],
        ..DnsConfig::default()
    };
    let mut fixture = Fixture::new(catalog_with_web(1), config);
    assert_eq!(
        fixture.udp("web.service.consul", rtype::A).answers[0].ttl,
        22
    );
    assert_eq!(fixture.udp("n0.node.consul", rtype::A).answers[0].ttl, 11);
    let _ = IpAddr::V4(Ipv4Addr::LOCALHOST);
}

/// A client agent's shard in miniature: its answer cache, the rows it fetched, and how
/// many lookup requests it sent to the "server" (`catalog`, answered as a server answers
/// `remote::LOOKUP_METHOD`).
struct ClientFixture {
    settings: DnsSettings,
    state: ShardDns,
    rows: RefCell<client::RemoteRows>,
    requests: usize,
}

impl ClientFixture {
    fn new() -> ClientFixture {
        ClientFixture {
            settings: Fixture::new(MemoryCatalog::default(), DnsConfig::default()).settings,
            state: ShardDns::new(7),
            rows: RefCell::new(client::RemoteRows::default()),
            requests: 0,
        }
    }

    fn ask(&mut self, catalog: &MemoryCatalog, name: &str, qtype: u16) -> Message {
        let message = build_query(0x4242, name, qtype, None);
        let mut fetched = Vec::new();
        for _ in 0..client::FETCH_ROUNDS_MAX {
            let mut out = Vec::new();
            let source = client::ClientSource {
                rows: &self.rows,
                fetched: &fetched,
                caching: true,
            };
            match handle_message(
                &self.settings,
                &mut self.state,
                true,
                &source,
                &message,
                Transport::Udp,
                &mut out,
            ) {
                Handled::Reply => return Message::from_vec(&out).expect("hickory parses it"),
                Handled::Fetch(_, lookups) => {
                    self.requests += 1;
                    // Lookups for other datacenters find none here: their names are
                    // NXDOMAIN, as the server (which has no route either) answers, and they
                    // are never cached.
                    let (lookups, elsewhere): (Vec<_>, Vec<_>) =
                        lookups.into_iter().partition(remote::Lookup::is_local);
                    for lookup in elsewhere {
                        let result = lookup.not_found();
                        fetched.push((lookup, result));
                    }
                    if lookups.is_empty() {
                        continue;
                    }
                    let bytes = remote::encode_lookups(&lookups);
                    let asked = remote::decode_lookups(&bytes).unwrap();
                    let answer = remote::answer_lookups(catalog, 1, &asked);
                    let reply = remote::decode_lookup_reply(&answer, &lookups).unwrap();
                    for (lookup, result) in lookups.into_iter().zip(reply.results) {
                        self.rows
                            .borrow_mut()
                            .insert(lookup.clone(), result.clone());
                        fetched.push((lookup, result));
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        panic!(
            "{name}: still missing rows after {} rounds",
            client::FETCH_ROUNDS_MAX
        );
    }

    /// What the change feed does with a change set.
    fn feed(&mut self, changes: &[Change]) {
        self.state.cache.invalidate(changes);
        self.rows.borrow_mut().invalidate(changes);
    }
}

/// A response with its shuffled sections sorted and the SOA serial (the clock) blanked, so
/// two agents' answers compare equal exactly when they say the same.
fn normalized(message: &Message) -> String {
    let section = |records: &[hickory_proto::rr::Record]| {
        let mut lines: Vec<String> = records
            .iter()
            .map(|r| match &r.data {
                RData::SOA(soa) => format!("{} SOA {} {}", r.name, soa.mname, soa.rname),
                _ => r.to_string(),
            })
            .collect();
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

#[test]
fn a_client_answers_as_the_server_does_from_fetched_rows_and_the_feed_keeps_them_exact() {
    // Three instances: as many as a plain UDP answer carries, so no random subset is drawn.
    let mut catalog = catalog_with_web(3);
    let db = node("db1", "10.9.0.1");
    catalog.nodes.push(db.clone());
    let mut api = instance(&db, "api", 9000, Health::Passing);
    api.address = "10.9.0.7".into();
    catalog.instances.push(api);
    catalog
        .instances
        .push(instance(&db, "consul", 8300, Health::Passing));
    let mut server = Fixture::new(catalog.clone(), DnsConfig::default());
    let mut client = ClientFixture::new();
    let questions = [
        ("web.service.consul", rtype::A),
        ("web.service.consul", rtype::SRV),
        ("v1.web.service.consul", rtype::A),
        ("_web._v1.service.consul", rtype::SRV),
        ("web.service.dc1.consul", rtype::AAAA),
        ("nope.service.consul", rtype::A),
        ("n2.node.consul", rtype::A),
        ("n2.node.consul", rtype::TXT),
        ("db1.node.dc1.consul", rtype::ANY),
        ("missing.node.consul", rtype::A),
        ("0a000001.addr.dc1.consul", rtype::A),
        ("consul.service.consul", rtype::A),
        ("consul", rtype::NS),
        ("consul", rtype::SOA),
        ("1.0.0.10.in-addr.arpa", rtype::PTR),
        ("7.0.9.10.in-addr.arpa", rtype::PTR),
        ("web.service.dc2.consul", rtype::A),
    ];
    for (name, qtype) in questions {
        assert_eq!(
            normalized(&client.ask(&catalog, name, qtype)),
            normalized(&server.udp(name, qtype)),
            "{name} {qtype}"
        );
    }
    // Asked again, every question about this datacenter is a hit: the only request that
    // leaves the client is the one about dc2, whose answers are never cached.
    let sent = client.requests;
    assert!(sent > 0);
    for (name, qtype) in questions {
        client.ask(&catalog, name, qtype);
    }
    assert_eq!(client.requests, sent + 1);
    let sent = client.requests;
    // A change to another service keeps the cached `web` answer; a health flip of a `web`
    // instance, through the feed, drops it and the next answer shows the flip.
    client.feed(&[Change {
        table: Table::ServiceIndex,
        key: ChangeKey::Key(Arc::from("api")),
    }]);
    assert_eq!(
        a_records(&client.ask(&catalog, "web.service.consul", rtype::A)).len(),
        3
    );
    assert_eq!(client.requests, sent);
    assert!(!client.rows.borrow().is_empty());
    catalog.instances[0].health = Health::Critical;
    client.feed(&[Change {
        table: Table::ServiceIndex,
        key: ChangeKey::Key(Arc::from("web")),
    }]);
    let mut server = Fixture::new(catalog.clone(), DnsConfig::default());
    let flipped = client.ask(&catalog, "web.service.consul", rtype::SRV);
    assert_eq!(client.requests, sent + 1);
    assert_eq!(
        normalized(&flipped),
        normalized(&server.udp("web.service.consul", rtype::SRV))
    );
    assert!(!normalized(&flipped).contains("n0.node"));
}

#[test]
fn a_row_fetched_but_not_cached_answers_once_and_is_asked_again() {
    let catalog = catalog_with_web(2);
    let mut client = ClientFixture::new();
    let rows = RefCell::new(client::RemoteRows::default());
    let lookup = remote::Lookup::service_instances("web");
    let mut reads = view::ReadSet::new();
    let fetched = vec![(lookup.clone(), lookup.run(&catalog, &mut reads))];
    let source = client::ClientSource {
        rows: &rows,
        fetched: &fetched,
        caching: true,
    };
    let mut out = Vec::new();
    let message = build_query(1, "web.service.consul", rtype::A, None);
    let handled = handle_message(
        &client.settings,
        &mut client.state,
        true,
        &source,
        &message,
        Transport::Udp,
        &mut out,
    );
    assert!(matches!(handled, Handled::Reply));
    assert_eq!(a_records(&Message::from_vec(&out).unwrap()).len(), 2);
    assert!(
        client.state.cache.is_empty(),
        "an uncached row's answer is not cached"
    );
    let source = client::ClientSource {
        rows: &rows,
        fetched: &[],
        caching: true,
    };
    let handled = handle_message(
        &client.settings,
        &mut client.state,
        true,
        &source,
        &message,
        Transport::Udp,
        &mut out,
    );
    assert!(matches!(handled, Handled::Fetch(_, ref l) if *l == [lookup]));
}
