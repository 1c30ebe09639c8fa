//! DNS codec costs: the hand-rolled fast path against hickory-proto for the same work.
//!
//! - decode: the query `dig` sends for `web.service.consul A` (RD, EDNS with a cookie).
//! - encode: the response with three A records (and with one SRV plus its glue), hand-rolled
//!   from a cached encoded answer versus built and serialized with hickory-proto.
//! - whole path: `dns::handle_message` for a cache hit.
//!
//! Run: `cargo bench --bench dns_codec`. ARCHITECTURE.md quotes the figures.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use hickory_proto::op::{Message, MessageType, OpCode};
use hickory_proto::rr::rdata::{A, SRV};
use hickory_proto::rr::{Name, RData, Record};
use praetor::config::DnsConfig;
use praetor::dns::answer::{EncodedAnswer, ResponseLimits, ShuffleRng};
use praetor::dns::view::{Health, MemoryCatalog, NodeRecord, ServiceInstance};
use praetor::dns::{self, DnsSettings, ShardDns, Transport, VersionSource};
use praetor::proto::dns::{fast, general, rtype, WireName};
use std::str::FromStr;
use std::sync::Arc;

fn query_bytes(name: &str, qtype: u16) -> Vec<u8> {
    let mut out = vec![0x12, 0x34, 0x01, 0x20, 0, 1, 0, 0, 0, 0, 0, 1];
    out.extend_from_slice(WireName::from_dotted(name).unwrap().as_bytes());
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 12]);
    out.extend_from_slice(&[0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
    out
}

fn catalog() -> MemoryCatalog {
    let mut catalog = MemoryCatalog::default();
    for i in 0..3u8 {
        let node = Arc::new(NodeRecord {
            name: format!("node{i}").into(),
            datacenter: "dc1".into(),
            address: format!("10.0.0.{}", i + 1).into(),
            ..NodeRecord::default()
        });
        catalog.instances.push(ServiceInstance {
            node: node.clone(),
            service_id: format!("web{i}").into(),
            service_name: "web".into(),
            address: "".into(),
            port: 8080,
            tags: Vec::new(),
            tagged_addresses: Vec::new(),
            weight_passing: 1,
            weight_warning: 1,
            health: Health::Passing,
        });
        catalog.nodes.push(node);
    }
    catalog
}

struct Source(Arc<MemoryCatalog>);
impl VersionSource for Source {
    type View = Arc<MemoryCatalog>;
    fn version(&self) -> Arc<MemoryCatalog> {
        self.0.clone()
    }
}

fn hickory_response(query: &Message, srv: bool) -> Vec<u8> {
    let mut response = Message::response(query.metadata.id, OpCode::Query);
    response.metadata.message_type = MessageType::Response;
    response.metadata.authoritative = true;
    response.metadata.recursion_desired = true;
    response.queries = query.queries.clone();
    let name = query.queries[0].name.clone();
    if srv {
        let target = Name::from_str("node0.node.dc1.consul.").unwrap();
        response.answers.push(Record::from_rdata(
            name,
            0,
            RData::SRV(SRV::new(1, 1, 8080, target.clone())),
        ));
        response
            .additionals
            .push(Record::from_rdata(target, 0, RData::A(A::new(10, 0, 0, 1))));
    } else {
        for i in 1..=3 {
            response.answers.push(Record::from_rdata(
                name.clone(),
                0,
                RData::A(A::new(10, 0, 0, i)),
            ));
        }
    }
    response.edns = query.edns.clone();
    response.to_vec().unwrap()
}

fn bench(c: &mut Criterion) {
    let a_query = query_bytes("web.service.consul", rtype::A);
    let srv_query = query_bytes("web.service.consul", rtype::SRV);

    c.bench_function("decode/fast", |b| {
        b.iter(|| fast::decode(black_box(&a_query)).unwrap())
    });
    c.bench_function("decode/hickory", |b| {
        b.iter(|| general::decode(black_box(&a_query)).unwrap())
    });

    let settings = DnsSettings::new(
        DnsConfig::default(),
        dns::resolve::LocalAgent {
            node_name: "server".into(),
            datacenter: "dc1".into(),
            address: "127.0.0.1".parse().unwrap(),
        },
    );
    let source = Source(Arc::new(catalog()));
    let mut state = ShardDns::new(1);
    let mut out = Vec::with_capacity(4096);
    for (label, query) in [("a", &a_query), ("srv", &srv_query)] {
        // Warm the cache, then measure the cache-hit path.
        dns::handle_message(
            &settings,
            &mut state,
            true,
            &source,
            query,
            Transport::Udp,
            &mut out,
        );
        c.bench_function(&format!("handle/cache_hit_{label}"), |b| {
            b.iter(|| {
                dns::handle_message(
                    &settings,
                    &mut state,
                    true,
                    &source,
                    black_box(query),
                    Transport::Udp,
                    &mut out,
                );
            })
        });
    }

    // Encoding alone: splice a cached answer versus build and serialize with hickory.
    for (label, query, srv) in [("a", &a_query, false), ("srv", &srv_query, true)] {
        let decoded = fast::decode(query).unwrap();
        let resolver_settings = &settings;
        let resolver = dns::resolve::Resolver {
            config: &resolver_settings.config,
            domains: &resolver_settings.domains,
            local: &resolver_settings.local,
            serial: 1,
        };
        let mut reads = dns::view::ReadSet::default();
        let lower = decoded.name.to_lowercase();
        let dns::resolve::Resolution::Answer(answer) =
            resolver.resolve(&lower, decoded.qtype, &catalog(), &mut reads)
        else {
            panic!("in-domain question")
        };
        let encoded = EncodedAnswer::encode(&answer, &lower);
        let limits = ResponseLimits {
            message_bytes_max: 1232,
            answers_max: None,
            set_truncated: false,
            recursion_available: false,
        };
        let mut rng = ShuffleRng::new(3);
        let mut order = Vec::new();
        c.bench_function(&format!("encode/hand_{label}"), |b| {
            b.iter(|| {
                encoded.assemble(black_box(&decoded), &limits, &mut rng, &mut order, &mut out)
            })
        });
        let parsed = Message::from_vec(query).unwrap();
        c.bench_function(&format!("encode/hickory_{label}"), |b| {
            b.iter(|| hickory_response(black_box(&parsed), srv))
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
