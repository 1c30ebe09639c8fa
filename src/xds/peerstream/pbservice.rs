//! The resources the peer stream replicates, as prost messages with the field numbers of
//! Consul's `pbpeerstream` (`ExportedService`, `ExportedServiceList`) and `pbservice`
//! (`CheckServiceNode`, `Node`, `NodeService`, `HealthCheck`), and their conversion from
//! and to the catalog's rows. Only what a consumer of an imported service reads is carried:
//! node and service identity, addresses, tags, meta, port, weights and checks with their
//! status and output. A service's proxy and Connect settings, localities and a check's
//! definition are left out (mesh over peering is not served; see `docs/peering.md`); protobuf
//! skips the fields a Consul peer sends beyond these.
//!
//! Decoding a peer's rows refuses what the catalog could not hold (an unknown check status)
//! with a reason the stream sends back as a NACK; every string is taken as sent.

use crate::store::catalog::rows::{check_type_code, CheckExtras, ServiceAddress, ServiceExtras};
use crate::store::catalog::{HealthCheck, Node, ServiceInstance, Status, StrMap, Weights};
use crate::store::peering::ImportedInstance;
use arcstr::ArcStr;
use std::collections::HashMap;

/// The type URL of an `ExportedService` resource (one service's instances).
pub const EXPORTED_SERVICE_URL: &str =
    "type.googleapis.com/hashicorp.consul.internal.peerstream.ExportedService";
/// The type URL of an `ExportedServiceList` resource (the names of the services exported).
pub const EXPORTED_SERVICE_LIST_URL: &str =
    "type.googleapis.com/hashicorp.consul.internal.peerstream.ExportedServiceList";
/// The `ResourceID` of the exported-service list (there is one per stream).
pub const EXPORTED_SERVICE_LIST_ID: &str = "exported-service-list";

/// `pbpeerstream.ExportedService`: one service's instances.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportedService {
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<CheckServiceNode>,
}

/// `pbpeerstream.ExportedServiceList`: the services exported to the peer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportedServiceList {
    #[prost(string, repeated, tag = "1")]
    pub services: Vec<String>,
}

/// `pbservice.CheckServiceNode`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CheckServiceNode {
    #[prost(message, optional, tag = "1")]
    pub node: Option<PbNode>,
    #[prost(message, optional, tag = "2")]
    pub service: Option<PbNodeService>,
    #[prost(message, repeated, tag = "3")]
    pub checks: Vec<PbHealthCheck>,
}

/// `pbservice.Node`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbNode {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub node: String,
    #[prost(string, tag = "3")]
    pub address: String,
    #[prost(string, tag = "4")]
    pub datacenter: String,
    #[prost(map = "string, string", tag = "5")]
    pub tagged_addresses: HashMap<String, String>,
    #[prost(map = "string, string", tag = "6")]
    pub meta: HashMap<String, String>,
    #[prost(string, tag = "8")]
    pub partition: String,
    #[prost(string, tag = "9")]
    pub peer_name: String,
}

/// `pbservice.ServiceAddress`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbServiceAddress {
    #[prost(string, tag = "1")]
    pub address: String,
    #[prost(int32, tag = "2")]
    pub port: i32,
}

/// `pbservice.Weights`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbWeights {
    #[prost(int32, tag = "1")]
    pub passing: i32,
    #[prost(int32, tag = "2")]
    pub warning: i32,
}

/// `pbservice.NodeService`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbNodeService {
    #[prost(string, tag = "1")]
    pub kind: String,
    #[prost(string, tag = "2")]
    pub id: String,
    #[prost(string, tag = "3")]
    pub service: String,
    #[prost(string, repeated, tag = "4")]
    pub tags: Vec<String>,
    #[prost(string, tag = "5")]
    pub address: String,
    #[prost(map = "string, string", tag = "6")]
    pub meta: HashMap<String, String>,
    #[prost(int32, tag = "7")]
    pub port: i32,
    #[prost(message, optional, tag = "8")]
    pub weights: Option<PbWeights>,
    #[prost(bool, tag = "9")]
    pub enable_tag_override: bool,
    #[prost(map = "string, message", tag = "15")]
    pub tagged_addresses: HashMap<String, PbServiceAddress>,
    #[prost(string, tag = "17")]
    pub socket_path: String,
    #[prost(string, tag = "18")]
    pub peer_name: String,
}

/// `pbservice.HealthCheck`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbHealthCheck {
    #[prost(string, tag = "1")]
    pub node: String,
    #[prost(string, tag = "2")]
    pub check_id: String,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub status: String,
    #[prost(string, tag = "5")]
    pub notes: String,
    #[prost(string, tag = "6")]
    pub output: String,
    #[prost(string, tag = "7")]
    pub service_id: String,
    #[prost(string, tag = "8")]
    pub service_name: String,
    #[prost(string, repeated, tag = "9")]
    pub service_tags: Vec<String>,
    #[prost(string, tag = "12")]
    pub r#type: String,
    #[prost(int32, tag = "14")]
    pub exposed_port: i32,
    #[prost(string, tag = "15")]
    pub interval: String,
    #[prost(string, tag = "16")]
    pub timeout: String,
    #[prost(string, tag = "17")]
    pub peer_name: String,
}

fn map_of(map: &StrMap) -> HashMap<String, String> {
    map.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn str_map(map: HashMap<String, String>) -> StrMap {
    StrMap::from_pairs(
        map.into_iter()
            .map(|(k, v)| (ArcStr::from(k), ArcStr::from(v)))
            .collect(),
    )
}

/// One local instance as the peer receives it: its node, the service and its checks (the
/// node's checks first, as the catalog's health view lists them).
pub fn check_service_node<'a>(
    node: &Node,
    service: &ServiceInstance,
    checks: impl Iterator<Item = &'a HealthCheck>,
) -> CheckServiceNode {
    CheckServiceNode {
        node: Some(PbNode {
            id: node.id.to_string(),
            node: node.name.to_string(),
            address: node.address.to_string(),
            datacenter: node.datacenter.to_string(),
            tagged_addresses: map_of(&node.tagged_addresses),
            meta: map_of(&node.meta),
            partition: String::new(),
            peer_name: String::new(),
        }),
        service: Some(PbNodeService {
            kind: service.kind().to_string(),
            id: service.id.to_string(),
            service: service.name.to_string(),
            tags: service.tags.iter().map(|t| t.to_string()).collect(),
            address: service.address.to_string(),
            meta: map_of(&service.meta),
            port: service.port,
            weights: Some(PbWeights {
                passing: service.weights.passing.min(i32::MAX as u32) as i32,
                warning: service.weights.warning.min(i32::MAX as u32) as i32,
            }),
            enable_tag_override: service.enable_tag_override,
            tagged_addresses: service
                .tagged_addresses()
                .iter()
                .map(|(tag, a)| {
                    (
                        tag.to_string(),
                        PbServiceAddress {
                            address: a.address.to_string(),
                            port: a.port,
                        },
                    )
                })
                .collect(),
            socket_path: service.socket_path().to_string(),
            peer_name: String::new(),
        }),
        checks: checks
            .map(|c| PbHealthCheck {
                node: c.node.to_string(),
                check_id: c.check_id.to_string(),
                name: c.name.to_string(),
                status: c.status.as_str().to_string(),
                notes: c.notes().to_string(),
                output: c.output.to_string(),
                service_id: c.service_id.to_string(),
                service_name: c.service_name.to_string(),
                service_tags: c.service_tags.iter().map(|t| t.to_string()).collect(),
                r#type: c.kind().to_string(),
                exposed_port: c.exposed_port(),
                interval: c.interval().to_string(),
                timeout: c.timeout().to_string(),
                peer_name: String::new(),
            })
            .collect(),
    }
}

/// A received `CheckServiceNode` as an imported instance of `service` (indexes 0: the
/// store stamps its own), or why it cannot be one.
pub fn imported_instance(row: CheckServiceNode, service: &str) -> Result<ImportedInstance, String> {
    let node = row.node.ok_or("a CheckServiceNode without a Node")?;
    let svc = row.service.ok_or("a CheckServiceNode without a Service")?;
    if svc.service != service {
        return Err(format!(
            "an instance of {:?} in the resource of {service:?}",
            svc.service
        ));
    }
    let node_name = ArcStr::from(node.node);
    let weights = match svc.weights {
        Some(w) => Weights {
            passing: w.passing.max(0) as u32,
            warning: w.warning.max(0) as u32,
        },
        None => Weights::default(),
    };
    let mut tagged: Vec<(ArcStr, ServiceAddress)> = svc
        .tagged_addresses
        .into_iter()
        .map(|(tag, a)| {
            (
                ArcStr::from(tag),
                ServiceAddress {
                    address: ArcStr::from(a.address),
                    port: a.port,
                },
            )
        })
        .collect();
    tagged.sort_by(|a, b| a.0.cmp(&b.0));
    let extras =
        (!svc.kind.is_empty() || !tagged.is_empty() || !svc.socket_path.is_empty()).then(|| {
            Box::new(ServiceExtras {
                kind: ArcStr::from(svc.kind),
                tagged_addresses: tagged.into_boxed_slice(),
                socket_path: ArcStr::from(svc.socket_path),
                proxy_json: None,
                connect_native: false,
            })
        });
    let service_tags: Vec<ArcStr> = svc.tags.into_iter().map(ArcStr::from).collect();
    let instance_service = ServiceInstance {
        node: node_name.clone(),
        id: ArcStr::from(svc.id),
        name: ArcStr::from(svc.service),
        tags: service_tags.into_iter().collect(),
        address: ArcStr::from(svc.address),
        meta: str_map(svc.meta),
        port: svc.port,
        weights,
        enable_tag_override: svc.enable_tag_override,
        extras,
        create_index: 0,
        modify_index: 0,
    };
    let mut checks = Vec::with_capacity(row.checks.len());
    for c in row.checks {
        let status = Status::parse(&c.status).ok_or_else(|| {
            format!(
                "check {:?} has an unknown status {:?}",
                c.check_id, c.status
            )
        })?;
        let kind_code = check_type_code(&c.r#type);
        let other_kind = (kind_code == crate::store::catalog::rows::OTHER_CHECK_TYPE)
            .then(|| ArcStr::from(c.r#type.as_str()));
        let has_extras = !c.notes.is_empty()
            || !c.interval.is_empty()
            || !c.timeout.is_empty()
            || c.exposed_port != 0
            || other_kind.is_some();
        checks.push(HealthCheck {
            node: node_name.clone(),
            check_id: ArcStr::from(c.check_id),
            name: ArcStr::from(c.name),
            status,
            kind_code,
            output: ArcStr::from(c.output),
            service_id: ArcStr::from(c.service_id),
            service_name: ArcStr::from(c.service_name),
            service_tags: c.service_tags.into_iter().map(ArcStr::from).collect(),
            extras: has_extras.then(|| {
                Box::new(CheckExtras {
                    notes: ArcStr::from(c.notes),
                    interval: ArcStr::from(c.interval),
                    timeout: ArcStr::from(c.timeout),
                    exposed_port: c.exposed_port,
                    definition: Default::default(),
                    other_kind,
                })
            }),
            create_index: 0,
            modify_index: 0,
        });
    }
    Ok(ImportedInstance {
        node: Node {
            id: ArcStr::from(node.id),
            name: node_name,
            address: ArcStr::from(node.address),
            datacenter: ArcStr::from(node.datacenter),
            tagged_addresses: str_map(node.tagged_addresses),
            meta: str_map(node.meta),
            create_index: 0,
            modify_index: 0,
        },
        service: instance_service,
        checks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn field_numbers_are_consuls() {
        // CheckServiceNode{Node{Node:"n"}, Service{ID:"w", Service:"web", Port:80},
        // Checks[{CheckID:"c", Status:"passing"}]}.
        let row = CheckServiceNode {
            node: Some(PbNode {
                node: "n".into(),
                ..Default::default()
            }),
            service: Some(PbNodeService {
                id: "w".into(),
                service: "web".into(),
                port: 80,
                ..Default::default()
            }),
            checks: vec![PbHealthCheck {
                check_id: "c".into(),
                status: "passing".into(),
                ..Default::default()
            }],
        };
        let expected = [
            0x0a, 3, 0x12, 1, b'n', // 1: Node{2: "n"}
            0x12, 10, 0x12, 1, b'w', 0x1a, 3, b'w', b'e', b'b', 0x38, 80, // 2: Service{2,3,7}
            0x1a, 12, 0x12, 1, b'c', 0x22, 7, b'p', b'a', b's', b's', b'i', b'n',
            b'g', // 3: Check{2: "c", 4: "passing"}
        ];
        assert_eq!(row.encode_to_vec(), expected);
        let list = ExportedServiceList {
            services: vec!["web".into()],
        };
        assert_eq!(list.encode_to_vec(), [0x0a, 3, b'w', b'e', b'b']);
    }

    #[test]
    fn a_row_crosses_and_bad_input_is_refused() {
        let node = Node {
            id: ArcStr::from("0b5c"),
            name: ArcStr::from("n1"),
            address: ArcStr::from("10.0.0.1"),
            datacenter: ArcStr::from("dc1"),
            tagged_addresses: StrMap::default(),
            meta: StrMap::from_pairs(vec![(ArcStr::from("rack"), ArcStr::from("r1"))]),
            create_index: 3,
            modify_index: 4,
        };
        let service = ServiceInstance {
            node: ArcStr::from("n1"),
            id: ArcStr::from("web-1"),
            name: ArcStr::from("web"),
            tags: vec![ArcStr::from("v1")].into_iter().collect(),
            address: ArcStr::from(""),
            meta: StrMap::default(),
            port: 8080,
            weights: Weights::default(),
            enable_tag_override: false,
            extras: None,
            create_index: 5,
            modify_index: 5,
        };
        let check = HealthCheck {
            node: ArcStr::from("n1"),
            check_id: ArcStr::from("service:web-1"),
            name: ArcStr::from("web alive"),
            status: Status::Critical,
            kind_code: check_type_code("ttl"),
            output: ArcStr::from("down"),
            service_id: ArcStr::from("web-1"),
            service_name: ArcStr::from("web"),
            service_tags: vec![ArcStr::from("v1")].into_iter().collect(),
            extras: None,
            create_index: 6,
            modify_index: 7,
        };
        let wire = check_service_node(&node, &service, [&check].into_iter());
        let decoded = CheckServiceNode::decode(&wire.encode_to_vec()[..]).unwrap();
        let imported = imported_instance(decoded.clone(), "web").unwrap();
        let unindexed = |mut n: Node| {
            n.create_index = 0;
            n.modify_index = 0;
            n
        };
        assert_eq!(imported.node, unindexed(node));
        assert_eq!(imported.service.id, "web-1");
        assert_eq!(imported.service.port, 8080);
        assert_eq!(imported.checks.len(), 1);
        assert!(imported.checks[0].same_as(&check));
        assert!(imported_instance(decoded.clone(), "api").is_err());
        let mut bad = decoded;
        bad.checks[0].status = "sideways".into();
        assert!(imported_instance(bad, "web").is_err());
    }
}
