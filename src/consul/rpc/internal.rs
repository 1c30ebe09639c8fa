//! The `Internal` endpoint's structs: `NodeInfo` rows of `IndexedNodeDump`
//! (`Internal.NodeInfo`, `Internal.NodeDump`), the `CheckServiceNodes` of
//! `IndexedNodesWithGateways` (`Internal.ServiceDump`), and `EventFireRequest`.

use super::catalog::{
    write_check_service_node, write_health_checks, write_node_service, write_str_map,
};
use super::{each_field, Fields, QueryMeta, QueryOptions};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::catalog::read::CheckServiceNode;
use crate::store::catalog::{HealthCheck, Node, ServiceInstance};

/// One node with its services and checks.
pub struct NodeInfo<'a> {
    pub node: &'a Node,
    pub services: Vec<&'a ServiceInstance>,
    pub checks: Vec<&'a HealthCheck>,
}

fn write_node_info(w: &mut Writer, info: &NodeInfo) {
    let node = info.node;
    let mut f = Fields::new(w, 9);
    f.field("Address").str(&node.address);
    write_health_checks(f.field("Checks"), info.checks.iter().copied());
    f.field("ID").str(&node.id);
    write_str_map(f.field("Meta"), &node.meta, false);
    f.field("Node").str(&node.name);
    f.field("Partition").str("");
    f.field("PeerName").str("");
    {
        let w = f.field("Services");
        if info.services.is_empty() {
            w.nil();
        } else {
            w.array_len(info.services.len());
            for service in &info.services {
                write_node_service(w, service);
            }
        }
    }
    write_str_map(f.field("TaggedAddresses"), &node.tagged_addresses, true);
    f.finish();
}

/// `IndexedNodeDump`; nothing imported from peers.
pub fn write_node_dump(w: &mut Writer, meta: &QueryMeta, dump: &[NodeInfo]) {
    meta.write_reply(w, &["Dump", "ImportedDump"], |name, w| {
        if name == "ImportedDump" || dump.is_empty() {
            w.nil();
            return;
        }
        w.array_len(dump.len());
        for info in dump {
            write_node_info(w, info);
        }
    });
}

/// `IndexedNodesWithGateways` (`Internal.ServiceDump`): no gateways, nothing imported.
pub fn write_service_dump(w: &mut Writer, meta: &QueryMeta, rows: &[CheckServiceNode]) {
    meta.write_reply(w, &["Gateways", "ImportedNodes", "Nodes"], |name, w| {
        if name != "Nodes" || rows.is_empty() {
            w.nil();
            return;
        }
        w.array_len(rows.len());
        for row in rows {
            write_check_service_node(w, row);
        }
    });
}

/// `EventFireRequest`: a user event to broadcast.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventFireRequest<'a> {
    pub datacenter: &'a str,
    pub name: &'a str,
    pub payload: Option<&'a [u8]>,
    pub options: QueryOptions<'a>,
}

impl<'a> EventFireRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<EventFireRequest<'a>, WireError> {
        let mut request = EventFireRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Name" => request.name = r.str()?,
                "Payload" => request.payload = r.opt_bytes()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }
}

/// `ServiceDumpRequest`: every service instance, or those of one kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceDumpRequest<'a> {
    pub datacenter: &'a str,
    /// The kind asked for when `UseServiceKind` is set.
    pub service_kind: Option<&'a str>,
    pub options: QueryOptions<'a>,
}

impl<'a> ServiceDumpRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<ServiceDumpRequest<'a>, WireError> {
        let mut request = ServiceDumpRequest::default();
        let (mut kind, mut use_kind) = ("", false);
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "ServiceKind" => kind = r.str()?,
                "UseServiceKind" => use_kind = r.bool()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        request.service_kind = use_kind.then_some(kind);
        Ok(request)
    }

    /// The request as a client sends it (`UseServiceKind` set when a kind is asked for).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options.write_request(
            &mut w,
            &["Datacenter", "ServiceKind", "UseServiceKind"],
            |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                "ServiceKind" => w.str(self.service_kind.unwrap_or_default()),
                _ => w.bool(self.service_kind.is_some()),
            },
        );
        w.into_inner()
    }
}
