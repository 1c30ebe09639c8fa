//! Feeds arbitrary bytes to the DNS query path as a socket would: both decoders, then the
//! whole `dns::handle_message` (validation, cache, resolution over a small catalog, response
//! assembly) over UDP and TCP. Nothing may panic; a reply must fit the transport's limit,
//! carry the query's ID, and parse as a DNS message; when both decoders accept a message
//! they must agree on the question.
#![no_main]

use libfuzzer_sys::fuzz_target;
use praetor::config::DnsConfig;
use praetor::dns::view::{Health, MemoryCatalog, NodeRecord, ServiceInstance};
use praetor::dns::{self, DnsSettings, Handled, ShardDns, Transport, VersionSource};
use praetor::proto::dns::{fast, general};
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

struct Source(Arc<MemoryCatalog>);
impl VersionSource for Source {
    type View = Arc<MemoryCatalog>;
    fn version(&self) -> Arc<MemoryCatalog> {
        self.0.clone()
    }
}

fn catalog() -> MemoryCatalog {
    let mut catalog = MemoryCatalog::default();
    for (i, address) in ["10.0.0.1", "2001:db8::1", "host.example.org", ""].iter().enumerate() {
        let node = Arc::new(NodeRecord {
            name: format!("n{i}").into(),
            datacenter: "dc1".into(),
            address: (*address).into(),
            meta: vec![("k=`".into(), " v".into())],
            ..NodeRecord::default()
        });
        for (service, health) in [("web", Health::Passing), ("db", Health::Warning), ("web", Health::Critical)] {
            catalog.instances.push(ServiceInstance {
                node: node.clone(),
                service_id: format!("{service}{i}").into(),
                service_name: service.into(),
                address: if i == 3 { "10.9.9.9".into() } else { "".into() },
                port: 80 + i as u16,
                tags: vec!["v1".into()],
                tagged_addresses: Vec::new(),
                weight_passing: 3,
                weight_warning: 1,
                health,
            });
        }
        catalog.nodes.push(node);
    }
    catalog
}

thread_local! {
    static STATE: RefCell<ShardDns> = RefCell::new(ShardDns::new(1));
}

fn settings() -> &'static DnsSettings {
    static SETTINGS: OnceLock<DnsSettings> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        let config = DnsConfig {
            alt_domain: Some("alt.test".into()),
            enable_truncate: true,
            ..DnsConfig::default()
        };
        DnsSettings::new(
            config,
            dns::resolve::LocalAgent {
                node_name: "server".into(),
                datacenter: "dc1".into(),
                address: "127.0.0.1".parse().unwrap(),
            },
        )
    })
}

fuzz_target!(|data: &[u8]| {
    if let (Ok(a), Ok(b)) = (fast::decode(data), general::decode(data)) {
        assert_eq!((a.id, &a.name, a.qtype, a.qclass, a.edns), (b.id, &b.name, b.qtype, b.qclass, b.edns));
    }
    let source = Source(Arc::new(catalog()));
    for transport in [Transport::Udp, Transport::Tcp] {
        let mut out = Vec::new();
        let handled = STATE.with(|state| {
            dns::handle_message(settings(), &mut state.borrow_mut(), true, &source, data, transport, &mut out)
        });
        match handled {
            Handled::Reply => {
                assert!(out.len() >= 12);
                assert_eq!(&out[..2], &data[..2]);
                assert!(out.len() <= 65_535);
                if transport == Transport::Udp {
                    let edns_size = fast::decode(data)
                        .or_else(|_| general::decode(data))
                        .ok()
                        .and_then(|q| q.edns)
                        .map_or(512, |e| (e.udp_payload_bytes as usize).max(512));
                    // The first answer is always sent, so only a one-answer reply may exceed.
                    let answers = u16::from_be_bytes([out[6], out[7]]);
                    assert!(out.len() <= edns_size || answers <= 1, "{} > {edns_size}", out.len());
                }
                hickory_proto::op::Message::from_vec(&out).expect("replies parse");
            }
            Handled::Drop | Handled::Recurse(_) => {}
            // The source is a whole store version: nothing is missing to fetch from a server.
            Handled::Fetch(..) => panic!("a store version lacks nothing"),
        }
    }
});
