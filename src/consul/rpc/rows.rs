//! The catalog's and health's read replies as a client reads them: `IndexedNodes`,
//! `IndexedServices`, `IndexedServiceNodes`, `IndexedNodeServices`, `IndexedHealthChecks`
//! and `IndexedCheckServiceNodes`, each with its `QueryMeta`.
//!
//! The rows come back as the store's own rows (`Node`, `ServiceInstance`, `HealthCheck`),
//! built by the same constructors a registration uses, so that a client agent renders a
//! server's typed reply with the very functions (`consul::render`) that render the
//! server's HTTP answer: the two answers cannot drift apart field by field. The invariant
//! is the round trip — a row written by `catalog::write_*` and read back here renders the
//! same JSON — which the tests below check for every row kind.
//!
//! Bounded as every decoder here: by the body's size (each count is checked against the
//! bytes left) and the reader's nesting limit.

use super::catalog::{check_field, service_field};
use super::{each_field, read_reply, string_list, string_map, value_bytes, QueryMeta};
use crate::proto::msgpack::{Reader, WireError};
use crate::store::catalog::apply::{check_row, instance_row};
use crate::store::catalog::rows::{arc_str, RowArc, StrMap, Tags};
use crate::store::catalog::{
    CheckRegistration, HealthCheck, Node, Registration, ServiceInstance, ServiceRegistration,
};
use std::sync::Arc;

/// A `CheckServiceNode` read back: the node, the instance and all their checks (the
/// node's and the instance's, in the order the server sent them).
pub struct CheckServiceNodeRow {
    pub node: Arc<Node>,
    pub service: RowArc<ServiceInstance>,
    pub checks: Vec<RowArc<HealthCheck>>,
}

impl CheckServiceNodeRow {
    /// The row as the catalog's reads give it (its checks all count as the node's: the
    /// renderers list node checks, then the instance's, which is the order they came in).
    pub fn as_row(&self) -> crate::store::catalog::read::CheckServiceNode<'_> {
        crate::store::catalog::read::CheckServiceNode {
            node: &self.node,
            service: &self.service,
            node_checks: &self.checks,
            service_checks: &[],
        }
    }
}

/// `IndexedServices`' rows: each service's name and tags.
pub type ServiceTagList<'a> = Vec<(&'a str, Vec<&'a str>)>;

/// `IndexedNodeServices`' row: the node and its services.
pub type NodeWithServices = (Node, Vec<ServiceInstance>);

/// A `map[string]string` as the store keeps it.
fn str_map(r: &mut Reader) -> Result<StrMap, WireError> {
    Ok(StrMap::from_pairs(
        string_map(r)?
            .into_iter()
            .map(|(k, v)| (arc_str(k), arc_str(v)))
            .collect(),
    ))
}

/// One field of a `Node` (or of a `ServiceNode`'s node columns) into `node`.
fn node_field(node: &mut Node, name: &str, r: &mut Reader) -> Result<bool, WireError> {
    match name {
        "ID" => node.id = arc_str(r.str()?),
        "Node" => node.name = arc_str(r.str()?),
        "Address" => node.address = arc_str(r.str()?),
        "Datacenter" => node.datacenter = arc_str(r.str()?),
        "TaggedAddresses" => node.tagged_addresses = str_map(r)?,
        "Meta" => node.meta = str_map(r)?,
        _ => return Ok(false),
    }
    Ok(true)
}

fn empty_node() -> Node {
    Node {
        id: arc_str(""),
        name: arc_str(""),
        address: arc_str(""),
        datacenter: arc_str(""),
        tagged_addresses: StrMap::default(),
        meta: StrMap::default(),
        create_index: 0,
        modify_index: 0,
    }
}

/// A `Node`.
pub fn read_node(r: &mut Reader) -> Result<Node, WireError> {
    let mut node = empty_node();
    each_field(r, |name, r| {
        match name {
            "CreateIndex" => node.create_index = r.u64("CreateIndex")?,
            "ModifyIndex" => node.modify_index = r.u64("ModifyIndex")?,
            _ => return node_field(&mut node, name, r),
        }
        Ok(true)
    })?;
    Ok(node)
}

/// The instance row of a service read back, with the indexes the server sent.
fn instance(
    service: &ServiceRegistration,
    node: &Node,
    create_index: u64,
    modify_index: u64,
) -> ServiceInstance {
    let mut row = instance_row(service, node.name.clone(), None, None, modify_index);
    row.create_index = create_index;
    row
}

/// A `NodeService` of `node`.
pub fn read_node_service(r: &mut Reader, node: &Node) -> Result<ServiceInstance, WireError> {
    let mut service = ServiceRegistration::default();
    let (mut create_index, mut modify_index) = (0, 0);
    let mut peer = false;
    each_field(r, |name, r| {
        match name {
            "CreateIndex" => create_index = r.u64("CreateIndex")?,
            "ModifyIndex" => modify_index = r.u64("ModifyIndex")?,
            _ => return service_field(&mut service, name, r, &mut peer),
        }
        Ok(true)
    })?;
    Ok(instance(&service, node, create_index, modify_index))
}

/// The `NodeService` field a `ServiceNode`'s `Service…` column holds.
fn service_column(name: &str) -> Option<&str> {
    match name.strip_prefix("Service")? {
        "ID" => Some("ID"),
        "Name" => Some("Service"),
        "" => None,
        other => Some(other),
    }
}

/// A `ServiceNode`: the node's columns and the instance (its indexes are the instance's).
pub fn read_service_node(r: &mut Reader) -> Result<(Node, ServiceInstance), WireError> {
    let mut node = empty_node();
    let mut service = ServiceRegistration::default();
    let (mut create_index, mut modify_index) = (0, 0);
    let mut peer = false;
    each_field(r, |name, r| {
        match name {
            "CreateIndex" => create_index = r.u64("CreateIndex")?,
            "ModifyIndex" => modify_index = r.u64("ModifyIndex")?,
            "NodeMeta" => node.meta = str_map(r)?,
            _ => {
                return match service_column(name) {
                    Some(field) => service_field(&mut service, field, r, &mut peer),
                    None => node_field(&mut node, name, r),
                }
            }
        }
        Ok(true)
    })?;
    let row = instance(&service, &node, create_index, modify_index);
    Ok((node, row))
}

/// A `HealthCheck`.
pub fn read_health_check(r: &mut Reader) -> Result<HealthCheck, WireError> {
    let mut check = CheckRegistration::default();
    let (mut service_name, mut service_tags) = ("", Vec::new());
    let (mut create_index, mut modify_index) = (0, 0);
    let mut peer = false;
    each_field(r, |name, r| {
        match name {
            "ServiceName" => service_name = r.str()?,
            "ServiceTags" => service_tags = string_list(r)?,
            "CreateIndex" => create_index = r.u64("CreateIndex")?,
            "ModifyIndex" => modify_index = r.u64("ModifyIndex")?,
            _ => return check_field(&mut check, name, r, &mut peer),
        }
        Ok(true)
    })?;
    // The row is built as a registration's is; the service columns come from the reply,
    // not from a service row.
    let mut row = check_row(&check, arc_str(&check.node), None, None, modify_index);
    row.service_id = arc_str(&check.service_id);
    row.service_name = arc_str(service_name);
    row.service_tags = Tags::new(service_tags.into_iter().map(arc_str).collect());
    row.create_index = create_index;
    Ok(row)
}

/// A list that may be nil, each element read by `item`.
fn read_list<'a, T>(
    r: &mut Reader<'a>,
    mut item: impl FnMut(&mut Reader<'a>) -> Result<T, WireError>,
) -> Result<Vec<T>, WireError> {
    let count = r.array_len()?;
    let mut items = Vec::with_capacity(count);
    for _ in 0..count {
        items.push(item(r)?);
    }
    Ok(items)
}

/// A reply made of `QueryMeta` and one list, `field`, each element read by `item`.
fn read_indexed_list<'a, T>(
    body: &'a [u8],
    field: &str,
    mut item: impl FnMut(&mut Reader<'a>) -> Result<T, WireError>,
) -> Result<(QueryMeta, Vec<T>), WireError> {
    let mut items = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != field {
            return Ok(false);
        }
        items = read_list(r, &mut item)?;
        Ok(true)
    })?;
    Ok((meta, items))
}

/// `IndexedNodes` (`Catalog.ListNodes`).
pub fn read_indexed_nodes(body: &[u8]) -> Result<(QueryMeta, Vec<Node>), WireError> {
    read_indexed_list(body, "Nodes", read_node)
}

/// `IndexedServices` (`Catalog.ListServices`): each service's tags, by name in Go's
/// sorted-key order.
pub fn read_indexed_services(body: &[u8]) -> Result<(QueryMeta, ServiceTagList<'_>), WireError> {
    let mut services = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != "Services" {
            return Ok(false);
        }
        let count = r.map_len()?;
        services = Vec::with_capacity(count);
        for _ in 0..count {
            let name = r.str()?;
            services.push((name, string_list(r)?));
        }
        Ok(true)
    })?;
    services.sort_by(|a, b| a.0.cmp(b.0));
    Ok((meta, services))
}

/// `IndexedServiceNodes` (`Catalog.ServiceNodes`).
pub fn read_indexed_service_nodes(
    body: &[u8],
) -> Result<(QueryMeta, Vec<(Node, ServiceInstance)>), WireError> {
    read_indexed_list(body, "ServiceNodes", read_service_node)
}

/// How a node's services travel: Consul's `NodeServices` keys them by ID,
/// `NodeServiceList` lists them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ServicesShape {
    ById,
    List,
}

/// `IndexedNodeServices` (`Catalog.NodeServices`): the node and its services (nil for a
/// node that does not exist).
pub fn read_indexed_node_services(
    body: &[u8],
) -> Result<(QueryMeta, Option<NodeWithServices>), WireError> {
    read_node_with_services(body, ServicesShape::ById)
}

/// `IndexedNodeServiceList` (`Catalog.NodeServiceList`): the node and the list of its
/// services; `None` for a node that does not exist (the struct's nil `Node`).
pub fn read_indexed_node_service_list(
    body: &[u8],
) -> Result<(QueryMeta, Option<NodeWithServices>), WireError> {
    read_node_with_services(body, ServicesShape::List)
}

fn read_node_with_services(
    body: &[u8],
    shape: ServicesShape,
) -> Result<(QueryMeta, Option<NodeWithServices>), WireError> {
    let mut found = None;
    let meta = read_reply(body, |name, r| {
        if name != "NodeServices" {
            return Ok(false);
        }
        if r.try_nil()? {
            return Ok(true);
        }
        // The node comes first in go-msgpack's order; services read before it (from
        // another encoder) are attached once it is known.
        let mut node = None;
        let mut service_bodies: Vec<&[u8]> = Vec::new();
        each_field(r, |name, r| {
            match name {
                "Node" => {
                    if !r.try_nil()? {
                        node = Some(read_node(r)?);
                    }
                }
                "Services" => {
                    if r.try_nil()? {
                        return Ok(true);
                    }
                    let count = match shape {
                        ServicesShape::ById => r.map_len()?,
                        ServicesShape::List => r.array_len()?,
                    };
                    for _ in 0..count {
                        if shape == ServicesShape::ById {
                            r.str()?;
                        }
                        service_bodies.push(value_bytes(r)?);
                    }
                }
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        if let Some(node) = node {
            let services = service_bodies
                .into_iter()
                .map(|body| read_node_service(&mut Reader::new(body), &node))
                .collect::<Result<Vec<_>, _>>()?;
            found = Some((node, services));
        }
        Ok(true)
    })?;
    Ok((meta, found))
}

/// A `NodeInfo` read back (`Internal.NodeInfo`, `NodeDump`): the node, its services and
/// its checks, in the order the server sent them.
pub type NodeInfoRow = (Node, Vec<ServiceInstance>, Vec<HealthCheck>);

/// `IndexedNodeDump` (`Internal.NodeInfo`, `Internal.NodeDump`): each `NodeInfo`, whose
/// node's fields sit beside its `Services` and `Checks`.
pub fn read_indexed_node_dump(body: &[u8]) -> Result<(QueryMeta, Vec<NodeInfoRow>), WireError> {
    let mut dump = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != "Dump" {
            return Ok(false);
        }
        dump = read_list(r, |r| {
            let mut node = empty_node();
            let mut services: Vec<&[u8]> = Vec::new();
            let mut checks = Vec::new();
            each_field(r, |name, r| {
                match name {
                    "Services" => {
                        if r.try_nil()? {
                            return Ok(true);
                        }
                        let count = r.array_len()?;
                        for _ in 0..count {
                            services.push(value_bytes(r)?);
                        }
                    }
                    "Checks" => checks = read_list(r, read_health_check)?,
                    _ => return node_field(&mut node, name, r),
                }
                Ok(true)
            })?;
            // The services are the node's: read once its fields are all known.
            let services = services
                .into_iter()
                .map(|body| read_node_service(&mut Reader::new(body), &node))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((node, services, checks))
        })?;
        Ok(true)
    })?;
    Ok((meta, dump))
}

/// `IndexedHealthChecks` (`Health.NodeChecks`, `ServiceChecks`, `ChecksInState`).
pub fn read_indexed_health_checks(body: &[u8]) -> Result<(QueryMeta, Vec<HealthCheck>), WireError> {
    read_indexed_list(body, "HealthChecks", read_health_check)
}

/// A `CheckServiceNode`.
/// A `CheckServiceNode`.
pub fn read_check_service_node(r: &mut Reader) -> Result<CheckServiceNodeRow, WireError> {
    let mut node = None;
    let mut service_body: &[u8] = &[];
    let mut checks = Vec::new();
    each_field(r, |name, r| {
        match name {
            "Node" => node = Some(read_node(r)?),
            "Service" => {
                service_body = value_bytes(r)?;
            }
            "Checks" => checks = read_list(r, |r| read_health_check(r).map(RowArc::new))?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let node = node.unwrap_or_else(empty_node);
    let service = read_node_service(&mut Reader::new(service_body), &node)?;
    Ok(CheckServiceNodeRow {
        node: Arc::new(node),
        service: RowArc::new(service),
        checks,
    })
}

/// `IndexedCheckServiceNodes` (`Health.ServiceNodes`).
pub fn read_indexed_check_service_nodes(
    body: &[u8],
) -> Result<(QueryMeta, Vec<CheckServiceNodeRow>), WireError> {
    read_indexed_list(body, "Nodes", read_check_service_node)
}

/// A `CheckServiceNode` read back as the catalog registration that would make it: the
/// node, the instance and the checks, with the fields a registration carries (a client
/// agent's xDS mirror applies these to a store of its own).
pub fn read_check_service_node_registration(r: &mut Reader) -> Result<Registration, WireError> {
    let mut node = None;
    let mut service = ServiceRegistration::default();
    let mut checks = Vec::new();
    let mut peer = false;
    each_field(r, |name, r| {
        match name {
            "Node" => node = Some(read_node(r)?),
            "Service" => {
                each_field(r, |name, r| service_field(&mut service, name, r, &mut peer))?;
            }
            "Checks" => {
                checks = read_list(r, |r| {
                    let mut check = CheckRegistration::default();
                    each_field(r, |name, r| check_field(&mut check, name, r, &mut peer))?;
                    Ok(check)
                })?
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let node = node.unwrap_or_else(empty_node);
    let pairs = |map: &StrMap| -> Vec<(String, String)> {
        map.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    Ok(Registration {
        id: node.id.to_string(),
        node: node.name.to_string(),
        address: node.address.to_string(),
        datacenter: node.datacenter.to_string(),
        tagged_addresses: pairs(&node.tagged_addresses),
        node_meta: pairs(&node.meta),
        service: Some(service),
        checks,
        skip_node_update: false,
        keep_node_meta: false,
    })
}

/// `IndexedCheckServiceNodes` (`Health.ServiceNodes`) read as registrations
/// ([`read_check_service_node_registration`]).
pub fn read_indexed_check_service_node_registrations(
    body: &[u8],
) -> Result<(QueryMeta, Vec<Registration>), WireError> {
    read_indexed_list(body, "Nodes", read_check_service_node_registration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::rpc::catalog::{
        write_check_service_node, write_health_check, write_node, write_node_service,
        write_service_node,
    };
    use crate::proto::msgpack::Writer;
    use crate::store::catalog::read::CheckServiceNode;
    use crate::store::catalog::CheckDefinition;

    fn node() -> Node {
        Node {
            id: arc_str("8f2a07c4-0d2f-4b8e-9f37-1c1f0e6f2a11"),
            name: arc_str("ext"),
            address: arc_str("10.0.0.9"),
            datacenter: arc_str("dc1"),
            tagged_addresses: StrMap::from_pairs(vec![(arc_str("wan"), arc_str("192.0.2.9"))]),
            meta: StrMap::from_pairs(vec![(arc_str("rack"), arc_str("r1"))]),
            create_index: 5,
            modify_index: 9,
        }
    }

    fn service(node: &Node) -> ServiceInstance {
        let registration = ServiceRegistration {
            kind: "connect-proxy".into(),
            id: "web-proxy".into(),
            name: "web-proxy".into(),
            tags: vec!["v1".into(), "blue".into()],
            address: "10.0.0.9".into(),
            tagged_addresses: vec![("lan".into(), "10.0.0.9".into(), 21000)],
            meta: vec![("version".into(), "1".into())],
            port: 21000,
            weights: Some(crate::store::catalog::Weights {
                passing: 3,
                warning: 2,
            }),
            enable_tag_override: true,
            socket_path: String::new(),
            proxy_json: Some(r#"{"DestinationServiceName":"web","LocalServicePort":8080}"#.into()),
            connect_native: false,
        };
        instance(&registration, node, 7, 11)
    }

    fn check(node: &Node) -> HealthCheck {
        let registration = CheckRegistration {
            node: node.name.to_string(),
            check_id: "web-alive".into(),
            name: "alive".into(),
            status: "warning".into(),
            notes: "slow".into(),
            output: "HTTP GET: 429".into(),
            service_id: "web-proxy".into(),
            kind: "http".into(),
            interval: "10s".into(),
            definition: Some(CheckDefinition {
                http: "http://10.0.0.9:8080/health".into(),
                header: vec![("X-Probe".into(), vec!["1".into()])],
                interval_ns: 10_000_000_000,
                ..CheckDefinition::default()
            }),
            ..CheckRegistration::default()
        };
        let mut row = check_row(&registration, node.name.clone(), None, None, 12);
        row.service_id = arc_str("web-proxy");
        row.service_name = arc_str("web-proxy");
        row.service_tags = Tags::new(vec![arc_str("v1")]);
        row.create_index = 8;
        row
    }

    fn encoded(write: impl FnOnce(&mut Writer)) -> Vec<u8> {
        let mut w = Writer::new();
        write(&mut w);
        w.into_inner()
    }

    #[test]
    fn every_row_reads_back_as_written() {
        let node = node();
        let service = service(&node);
        let check = check(&node);
        let body = encoded(|w| write_node(w, &node));
        assert_eq!(read_node(&mut Reader::new(&body)), Ok(node.clone()));
        let body = encoded(|w| write_node_service(w, &service));
        assert_eq!(
            read_node_service(&mut Reader::new(&body), &node),
            Ok(service.clone())
        );
        let body = encoded(|w| write_service_node(w, &node, &service));
        let (read_node_columns, read_service) = read_service_node(&mut Reader::new(&body)).unwrap();
        assert_eq!(read_service, service);
        // A `ServiceNode` carries the node's columns, not its indexes.
        assert_eq!(
            (read_node_columns.name, read_node_columns.meta),
            (node.name.clone(), node.meta.clone())
        );
        let body = encoded(|w| write_health_check(w, &check));
        assert_eq!(
            read_health_check(&mut Reader::new(&body)),
            Ok(check.clone())
        );
        let shared = (
            Arc::new(node.clone()),
            RowArc::new(service.clone()),
            vec![RowArc::new(check.clone())],
        );
        let row = CheckServiceNode {
            node: &shared.0,
            service: &shared.1,
            node_checks: &[],
            service_checks: &shared.2,
        };
        let body = encoded(|w| write_check_service_node(w, &row));
        let read = read_check_service_node(&mut Reader::new(&body)).unwrap();
        assert_eq!(
            (&*read.node, &*read.service, &*read.checks[0]),
            (&node, &service, &check)
        );
    }

    #[test]
    fn a_reply_that_is_not_the_struct_is_an_error() {
        assert!(read_indexed_nodes(&[0x81, 0xa5, b'N', b'o', b'd', b'e', b's', 0x01]).is_err());
        assert!(read_indexed_health_checks(&[0x92]).is_err());
        assert!(read_indexed_node_services(&[]).is_err());
    }
}
