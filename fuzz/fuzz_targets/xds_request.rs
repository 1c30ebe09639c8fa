//! Feeds arbitrary bytes to the ADS request path as the gRPC server sees it. The input is
//! cut into gRPC messages (a compression flag, a 4-byte big-endian length, the message);
//! each is decoded by prost as tonic decodes it, as a delta request (flag byte even) or a
//! state-of-the-world request (odd), and drives one stream's protocol state over a proxy's
//! resources, which a length of zero switches between two builds (a snapshot change).
//!
//! Decoding and the protocol must never panic, and what they send must hold Consul's rules:
//! one delta response in flight at a time, every resource sent exists in the current build
//! with the version sent, nonces grow, a state-of-the-world response carries only its type.
#![no_main]

use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use libfuzzer_sys::fuzz_target;
use praetor::xds::delta::DeltaStream;
use praetor::xds::resources::{self, ResourceType, Resources};
use praetor::xds::snapshot::{ChainNode, Endpoint, Inbound, Snapshot, Target, Upstream};
use praetor::xds::sotw::SotwStream;
use prost::Message;
use std::sync::OnceLock;

/// Most messages one input is cut into.
const MESSAGES_MAX: usize = 64;

fn snapshot(healthy: bool) -> Snapshot {
    let td = "11111111-2222-3333-4444-555555555555.consul";
    let target = Target {
        id: "db.default.default.dc1".into(),
        service: "db".into(),
        subset: String::new(),
        datacenter: "dc1".into(),
        sni: format!("db.default.dc1.internal.{td}"),
        spiffe_id: format!("spiffe://{td}/ns/default/dc/dc1/svc/db"),
        connect_timeout_ms: 5000,
        endpoints: vec![Endpoint {
            address: "10.0.0.1".into(),
            port: 21000,
            healthy,
            weight: 1,
        }],
    };
    let upstream = |protocol: &str, port: u16| Upstream {
        id: format!("db-{protocol}"),
        destination: "db".into(),
        datacenter: "dc1".into(),
        bind_address: "127.0.0.1".into(),
        bind_port: port,
        protocol: protocol.into(),
        start: "resolver:db.default.default.dc1".into(),
        nodes: [(
            "resolver:db.default.default.dc1".to_string(),
            ChainNode::Resolver {
                target: target.id.clone(),
                failover: Vec::new(),
            },
        )]
        .into_iter()
        .collect(),
        targets: [(target.id.clone(), target.clone())].into_iter().collect(),
    };
    Snapshot {
        proxy_id: "web-sidecar-proxy".into(),
        service: "web-sidecar-proxy".into(),
        destination: "web".into(),
        datacenter: "dc1".into(),
        trust_domain: td.into(),
        leaf_cert_pem: "CERT".into(),
        leaf_key_pem: "KEY".into(),
        roots_pem: vec!["ROOT".into()],
        inbound: Inbound {
            bind_address: "0.0.0.0".into(),
            bind_port: 21000,
            local_address: "127.0.0.1".into(),
            local_port: 8080,
            local_connect_timeout_ms: 5000,
            protocol: if healthy { "tcp" } else { "http" }.into(),
            default_allow: healthy,
            sources: Vec::new(),
        },
        upstreams: vec![upstream("tcp", 9191), upstream("http", 9192)],
    }
}

fn builds() -> &'static [Resources; 2] {
    static BUILDS: OnceLock<[Resources; 2]> = OnceLock::new();
    BUILDS.get_or_init(|| {
        [
            resources::build(&snapshot(true)).expect("the first build"),
            resources::build(&snapshot(false)).expect("the second build"),
        ]
    })
}

fn check_delta(
    response: &envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryResponse,
    current: &Resources,
    last_nonce: &mut u64,
) {
    let kind = ResourceType::from_type_url(&response.type_url).expect("a served type");
    for resource in &response.resources {
        let have = current
            .of(kind)
            .get(&resource.name)
            .expect("a resource of the build");
        assert_eq!(have.version, resource.version, "the build's version");
    }
    let nonce = u64::from_str_radix(&response.nonce, 16).expect("a hex nonce");
    assert!(nonce > *last_nonce, "nonces grow");
    *last_nonce = nonce;
}

fuzz_target!(|data: &[u8]| {
    let builds = builds();
    let mut delta = DeltaStream::new();
    let mut sotw = SotwStream::new();
    let mut current = 0usize;
    let mut last_nonce = 0u64;
    let mut rest = data;
    for _ in 0..MESSAGES_MAX {
        if rest.len() < 5 {
            break;
        }
        let flag = rest[0];
        let length = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        rest = &rest[5..];
        if length == 0 {
            current ^= 1;
        }
        let length = length.min(rest.len());
        let (message, tail) = rest.split_at(length);
        rest = tail;
        if flag % 2 == 0 {
            let Ok(request) = DeltaDiscoveryRequest::decode(message) else {
                continue;
            };
            if delta.receive(&request).is_err() {
                return;
            }
        } else {
            let Ok(request) = DiscoveryRequest::decode(message) else {
                continue;
            };
            if sotw.receive(&request).is_err() {
                return;
            }
        }
        let resources = &builds[current];
        let was_in_flight = delta.in_flight();
        match delta.next_response(resources) {
            Some(response) => {
                assert!(!was_in_flight, "a second response while one is in flight");
                assert!(delta.in_flight());
                check_delta(&response, resources, &mut last_nonce);
                assert!(delta.next_response(resources).is_none(), "one in flight");
            }
            None => assert_eq!(delta.in_flight(), was_in_flight),
        }
        for response in sotw.responses(resources) {
            let kind = ResourceType::from_type_url(&response.type_url).expect("a served type");
            assert!(response.resources.iter().all(|r| !r.type_url.is_empty()
                && resources.of(kind).values().any(|have| have.any == *r)));
        }
    }
});
