//! The `Internal` endpoint's structs: `NodeInfo` rows of `IndexedNodeDump`
//! (`Internal.NodeInfo`, `Internal.NodeDump`), the `CheckServiceNodes` and
//! `GatewayServices` of `IndexedNodesWithGateways` (`Internal.ServiceDump`), the
//! `ServiceInfo` rows of `IndexedServiceDump` (`Internal.GatewayServiceDump`), and
//! `EventFireRequest`.

use super::catalog::{
    read_gateway_service, write_check_service_node, write_gateway_service, write_health_check,
    write_health_checks, write_node, write_node_service, write_str_map,
};
use super::rows::CheckServiceNodeRow;
use super::rows::{read_check_service_node, read_health_check, read_node, read_node_service};
use super::{each_field, read_reply, value_bytes, Fields, QueryMeta, QueryOptions};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::catalog::read::CheckServiceNode;
use crate::store::catalog::{HealthCheck, Node, RowArc, ServiceInstance};
use crate::store::gateways::GatewayService;
use std::sync::Arc;

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

/// `IndexedNodesWithGateways` (`Internal.ServiceDump`): the instances and, for a dump of
/// every kind, the gateway-service rows (nil for none); nothing imported.
pub fn write_service_dump(
    w: &mut Writer,
    meta: &QueryMeta,
    rows: &[CheckServiceNode],
    gateways: &[&GatewayService],
) {
    meta.write_reply(
        w,
        &["Gateways", "ImportedNodes", "Nodes"],
        |name, w| match name {
            "Nodes" if !rows.is_empty() => {
                w.array_len(rows.len());
                for row in rows {
                    write_check_service_node(w, row);
                }
            }
            "Gateways" if !gateways.is_empty() => {
                w.array_len(gateways.len());
                for row in gateways {
                    write_gateway_service(w, row);
                }
            }
            _ => w.nil(),
        },
    );
}

/// `IndexedNodesWithGateways` read back: the instances and the gateway-service rows.
pub type ServiceDump = (QueryMeta, Vec<CheckServiceNodeRow>, Vec<GatewayService>);

/// Reads `IndexedNodesWithGateways` (`Internal.ServiceDump`'s reply); `ImportedNodes` is
/// skipped (nothing is imported without peering).
pub fn read_service_dump(body: &[u8]) -> Result<ServiceDump, WireError> {
    let (mut rows, mut gateways) = (Vec::new(), Vec::new());
    let meta = read_reply(body, |name, r| {
        match name {
            "Nodes" => rows = read_nil_or_list(r, read_check_service_node)?,
            "Gateways" => gateways = read_nil_or_list(r, read_gateway_service)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok((meta, rows, gateways))
}

/// A msgpack list, or nil as an empty one; each element read by `item`.
fn read_nil_or_list<'a, T>(
    r: &mut Reader<'a>,
    mut item: impl FnMut(&mut Reader<'a>) -> Result<T, WireError>,
) -> Result<Vec<T>, WireError> {
    if r.try_nil()? {
        return Ok(Vec::new());
    }
    let count = r.array_len()?;
    // The count is bounded by the reader's container limit; the bytes left bound it again.
    let mut items = Vec::with_capacity(count.min(r.rest().len()));
    for _ in 0..count {
        items.push(item(r)?);
    }
    Ok(items)
}

/// One `ServiceInfo` of `Internal.GatewayServiceDump`: an instance of a service the
/// gateway links (`None` for a linked service without instances) and the link.
pub struct ServiceInfo<'a> {
    pub instance: Option<CheckServiceNode<'a>>,
    pub link: &'a GatewayService,
}

/// `IndexedServiceDump` (`Internal.GatewayServiceDump`): one `ServiceInfo` per instance of
/// each linked service, its `Node`, `Service` and `Checks` nil for a service without one.
pub fn write_gateway_service_dump(w: &mut Writer, meta: &QueryMeta, dump: &[ServiceInfo]) {
    meta.write_reply(w, &["Dump"], |_, w| {
        if dump.is_empty() {
            w.nil();
            return;
        }
        w.array_len(dump.len());
        for info in dump {
            let mut f = Fields::new(w, 4);
            match &info.instance {
                Some(row) => {
                    let w = f.field("Checks");
                    w.array_len(row.node_checks.len() + row.service_checks.len());
                    for check in row.checks() {
                        write_health_check(w, check);
                    }
                }
                None => f.field("Checks").nil(),
            }
            write_gateway_service(f.field("GatewayService"), info.link);
            match &info.instance {
                Some(row) => write_node(f.field("Node"), row.node),
                None => f.field("Node").nil(),
            }
            match &info.instance {
                Some(row) => write_node_service(f.field("Service"), row.service),
                None => f.field("Service").nil(),
            }
            f.finish();
        }
    });
}

/// A `ServiceInfo` read back: the instance (when it has a node) and the link.
pub type ServiceInfoRow = (Option<CheckServiceNodeRow>, GatewayService);

/// Reads `IndexedServiceDump`; an entry without a `GatewayService` is refused (the
/// gateway's dump always names the link).
pub fn read_gateway_service_dump(
    body: &[u8],
) -> Result<(QueryMeta, Vec<ServiceInfoRow>), WireError> {
    let mut dump = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != "Dump" {
            return Ok(false);
        }
        dump = read_nil_or_list(r, read_service_info)?;
        Ok(true)
    })?;
    Ok((meta, dump))
}

fn read_service_info(r: &mut Reader) -> Result<ServiceInfoRow, WireError> {
    let (mut node, mut service_body, mut checks, mut link) = (None, None, Vec::new(), None);
    each_field(r, |name, r| {
        match name {
            "Node" if !r.try_nil()? => node = Some(read_node(r)?),
            "Service" if !r.try_nil()? => service_body = Some(value_bytes(r)?),
            "Checks" => checks = read_nil_or_list(r, |r| read_health_check(r).map(RowArc::new))?,
            "GatewayService" if !r.try_nil()? => link = Some(read_gateway_service(r)?),
            "Node" | "Service" | "GatewayService" => {}
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let link = link.ok_or(WireError::Invalid("ServiceInfo without its GatewayService"))?;
    let instance = match (node, service_body) {
        (Some(node), Some(body)) => {
            let service = read_node_service(&mut Reader::new(body), &node)?;
            Some(CheckServiceNodeRow {
                node: Arc::new(node),
                service: RowArc::new(service),
                checks,
            })
        }
        _ => None,
    };
    Ok((instance, link))
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
    /// The peer whose exported services `Internal.ExportedServicesForPeer` lists.
    pub peer_name: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> ServiceDumpRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<ServiceDumpRequest<'a>, WireError> {
        let mut request = ServiceDumpRequest::default();
        let (mut kind, mut use_kind) = ("", false);
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "PeerName" => request.peer_name = r.str()?,
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
            &["Datacenter", "PeerName", "ServiceKind", "UseServiceKind"],
            |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                "PeerName" => w.str(self.peer_name),
                "ServiceKind" => w.str(self.service_kind.unwrap_or_default()),
                _ => w.bool(self.service_kind.is_some()),
            },
        );
        w.into_inner()
    }
}

/// Consul's `IntentionDecisionSummary`: the decision for one connection of a topology.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntentionDecision<'a> {
    pub allowed: bool,
    pub default_allow: bool,
    pub external_source: &'a str,
    pub has_exact: bool,
    pub has_permissions: bool,
}

impl<'a> IntentionDecision<'a> {
    fn write(&self, w: &mut Writer) {
        let mut f = Fields::new(w, 5);
        f.field("Allowed").bool(self.allowed);
        f.field("DefaultAllow").bool(self.default_allow);
        f.field("ExternalSource").str(self.external_source);
        f.field("HasExact").bool(self.has_exact);
        f.field("HasPermissions").bool(self.has_permissions);
        f.finish();
    }

    fn read(r: &mut Reader<'a>) -> Result<IntentionDecision<'a>, WireError> {
        let mut decision = IntentionDecision::default();
        each_field(r, |name, r| {
            match name {
                "Allowed" => decision.allowed = r.bool()?,
                "DefaultAllow" => decision.default_allow = r.bool()?,
                "ExternalSource" => decision.external_source = r.str()?,
                "HasExact" => decision.has_exact = r.bool()?,
                "HasPermissions" => decision.has_permissions = r.bool()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(decision)
    }
}

/// One side's maps of a `ServiceTopology`: each neighbour's name with its decision, and
/// with the label of why it is a neighbour.
#[derive(Debug, Default)]
pub struct TopologySide<'a> {
    pub decisions: Vec<(&'a str, IntentionDecision<'a>)>,
    pub sources: Vec<(&'a str, &'a str)>,
}

/// `IndexedServiceTopology` (`Internal.ServiceTopology`) as a server writes it: the
/// neighbours' rows the token may read, each side's maps, the service's metrics protocol
/// and whether every proxy of it is transparent.
pub struct ServiceTopology<'a> {
    pub upstreams: &'a [CheckServiceNode<'a>],
    pub downstreams: &'a [CheckServiceNode<'a>],
    pub up: TopologySide<'a>,
    pub down: TopologySide<'a>,
    pub metrics_protocol: &'a str,
    pub transparent_proxy: bool,
    pub filtered_by_acls: bool,
}

fn write_check_service_nodes(w: &mut Writer, rows: &[CheckServiceNode]) {
    if rows.is_empty() {
        w.nil();
        return;
    }
    w.array_len(rows.len());
    for row in rows {
        write_check_service_node(w, row);
    }
}

fn write_decisions(w: &mut Writer, decisions: &[(&str, IntentionDecision)]) {
    w.map_len(decisions.len());
    for (name, decision) in decisions {
        w.str(name);
        decision.write(w);
    }
}

fn write_labels(w: &mut Writer, labels: &[(&str, &str)]) {
    w.map_len(labels.len());
    for (name, label) in labels {
        w.str(name);
        w.str(label);
    }
}

/// Writes `IndexedServiceTopology`.
pub fn write_service_topology(w: &mut Writer, meta: &QueryMeta, topology: &ServiceTopology) {
    meta.write_reply(w, &["FilteredByACLs", "ServiceTopology"], |name, w| {
        if name == "FilteredByACLs" {
            w.bool(topology.filtered_by_acls);
            return;
        }
        let mut f = Fields::new(w, 8);
        write_decisions(f.field("DownstreamDecisions"), &topology.down.decisions);
        write_labels(f.field("DownstreamSources"), &topology.down.sources);
        write_check_service_nodes(f.field("Downstreams"), topology.downstreams);
        f.field("MetricsProtocol").str(topology.metrics_protocol);
        f.field("TransparentProxy").bool(topology.transparent_proxy);
        write_decisions(f.field("UpstreamDecisions"), &topology.up.decisions);
        write_labels(f.field("UpstreamSources"), &topology.up.sources);
        write_check_service_nodes(f.field("Upstreams"), topology.upstreams);
        f.finish();
    });
}

/// `IndexedServiceTopology` read back.
#[derive(Default)]
pub struct ServiceTopologyReply<'a> {
    pub meta: QueryMeta,
    pub filtered_by_acls: bool,
    pub upstreams: Vec<CheckServiceNodeRow>,
    pub downstreams: Vec<CheckServiceNodeRow>,
    pub up: TopologySide<'a>,
    pub down: TopologySide<'a>,
    pub metrics_protocol: &'a str,
    pub transparent_proxy: bool,
}

/// A `map[string]T`, or nil as an empty one; each value read by `value`.
fn read_nil_or_map<'a, T>(
    r: &mut Reader<'a>,
    mut value: impl FnMut(&mut Reader<'a>) -> Result<T, WireError>,
) -> Result<Vec<(&'a str, T)>, WireError> {
    if r.try_nil()? {
        return Ok(Vec::new());
    }
    let count = r.map_len()?;
    let mut entries = Vec::with_capacity(count.min(r.rest().len()));
    for _ in 0..count {
        let key = r.str()?;
        entries.push((key, value(r)?));
    }
    Ok(entries)
}

/// Reads `IndexedServiceTopology`; a nil `ServiceTopology` is an empty one.
pub fn read_service_topology(body: &[u8]) -> Result<ServiceTopologyReply<'_>, WireError> {
    let mut reply = ServiceTopologyReply::default();
    let mut topology: &[u8] = &[];
    let meta = read_reply(body, |name, r| {
        match name {
            "FilteredByACLs" => reply.filtered_by_acls = r.bool()?,
            "ServiceTopology" => topology = value_bytes(r)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    reply.meta = meta;
    let mut r = Reader::new(topology);
    if topology.is_empty() || r.try_nil()? {
        return Ok(reply);
    }
    each_field(&mut r, |name, r| {
        match name {
            "DownstreamDecisions" => {
                reply.down.decisions = read_nil_or_map(r, IntentionDecision::read)?
            }
            "DownstreamSources" => reply.down.sources = read_nil_or_map(r, |r| r.str())?,
            "Downstreams" => reply.downstreams = read_nil_or_list(r, read_check_service_node)?,
            "MetricsProtocol" => reply.metrics_protocol = r.str()?,
            "TransparentProxy" => reply.transparent_proxy = r.bool()?,
            "UpstreamDecisions" => {
                reply.up.decisions = read_nil_or_map(r, IntentionDecision::read)?
            }
            "UpstreamSources" => reply.up.sources = read_nil_or_map(r, |r| r.str())?,
            "Upstreams" => reply.upstreams = read_nil_or_list(r, read_check_service_node)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(reply)
}

/// `Internal.ExportedServicesForPeer`'s reply, Consul's `IndexedServiceList`: the
/// services exported to the peer (`ServiceName`s) with the read's `QueryMeta`.
pub fn encode_exported_services(meta: &QueryMeta, services: &[&str]) -> Vec<u8> {
    let mut w = Writer::new();
    meta.write_reply(&mut w, &["Services"], |_, w| {
        if services.is_empty() {
            w.nil();
            return;
        }
        w.array_len(services.len());
        for name in services {
            let mut f = Fields::new(w, 3);
            f.field("Name").str(name);
            f.field("Namespace").str("");
            f.field("Partition").str("");
            f.finish();
        }
    });
    w.into_inner()
}

/// Reads [`encode_exported_services`]'s reply back: its `QueryMeta` and the names.
pub fn decode_exported_services(body: &[u8]) -> Result<(QueryMeta, Vec<String>), WireError> {
    let mut names = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != "Services" {
            return Ok(false);
        }
        if r.try_nil()? {
            return Ok(true);
        }
        let count = r.array_len()?;
        names.reserve(count.min(1024));
        for _ in 0..count {
            let mut service = String::new();
            each_field(r, |name, r| {
                if name != "Name" {
                    return Ok(false);
                }
                service = r.str()?.to_string();
                Ok(true)
            })?;
            names.push(service);
        }
        Ok(true)
    })?;
    Ok((meta, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topology_reads_back_as_it_was_written() {
        let meta = QueryMeta {
            index: 7,
            known_leader: true,
            consistency_level: "leader",
            ..QueryMeta::default()
        };
        let decision = IntentionDecision {
            allowed: true,
            default_allow: true,
            external_source: "kubernetes",
            has_exact: false,
            has_permissions: false,
        };
        let topology = ServiceTopology {
            upstreams: &[],
            downstreams: &[],
            up: TopologySide {
                decisions: vec![("db", decision)],
                sources: vec![("db", "proxy-registration")],
            },
            down: TopologySide::default(),
            metrics_protocol: "http",
            transparent_proxy: true,
            filtered_by_acls: true,
        };
        let mut w = Writer::new();
        write_service_topology(&mut w, &meta, &topology);
        let body = w.into_inner();
        let reply = read_service_topology(&body).unwrap();
        assert_eq!(reply.meta.index, 7);
        assert!(reply.filtered_by_acls && reply.transparent_proxy);
        assert_eq!(reply.metrics_protocol, "http");
        assert_eq!(reply.up.decisions, vec![("db", decision)]);
        assert_eq!(reply.up.sources, vec![("db", "proxy-registration")]);
        assert!(reply.down.sources.is_empty() && reply.upstreams.is_empty());
    }

    #[test]
    fn a_catalog_summary_reads_back_as_it_was_written_and_empty_lists_are_nil() {
        let summary = CatalogSummary {
            nodes: vec![HealthSummary {
                total: 3,
                passing: 2,
                critical: 1,
                ..HealthSummary::default()
            }],
            services: vec![HealthSummary {
                name: "web".to_string(),
                total: 1,
                warning: 1,
                ..HealthSummary::default()
            }],
            checks: Vec::new(),
        };
        let meta = QueryMeta {
            index: 9,
            ..QueryMeta::default()
        };
        let body = encode_catalog_summary(&meta, &summary);
        let (read_meta, read_summary) = decode_catalog_summary(&body).unwrap();
        assert_eq!((read_meta.index, read_summary), (9, summary));
        // `Checks` went as Go's nil slice.
        let mut r = Reader::new(&body);
        let mut checks_nil = false;
        each_field(&mut r, |name, r| {
            if name == "Checks" {
                checks_nil = r.try_nil()?;
                return Ok(true);
            }
            Ok(false)
        })
        .unwrap();
        assert!(checks_nil);
    }

    #[test]
    fn a_gateway_dump_without_links_is_nil_and_an_info_needs_its_link() {
        let mut w = Writer::new();
        write_gateway_service_dump(&mut w, &QueryMeta::default(), &[]);
        let (_, dump) = read_gateway_service_dump(&w.into_inner()).unwrap();
        assert!(dump.is_empty());
        // A `ServiceInfo` with no `GatewayService` is refused.
        let mut w = Writer::new();
        QueryMeta::default().write_reply(&mut w, &["Dump"], |_, w| {
            w.array_len(1);
            let mut f = Fields::new(w, 1);
            f.field("GatewayService").nil();
            f.finish();
        });
        assert!(read_gateway_service_dump(&w.into_inner()).is_err());
    }
}

/// One `structs.HealthSummary` of `Internal.CatalogOverview`: what it counts (empty for
/// the nodes' summary) and how many of those are passing, warning and critical.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthSummary {
    pub name: String,
    pub total: u64,
    pub passing: u64,
    pub warning: u64,
    pub critical: u64,
}

/// `structs.CatalogSummary`: the nodes' health (one summary, none without nodes), each
/// service's instances by health and each check name's checks by health, names in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CatalogSummary {
    pub nodes: Vec<HealthSummary>,
    pub services: Vec<HealthSummary>,
    pub checks: Vec<HealthSummary>,
}

fn write_health_summaries(w: &mut Writer, summaries: &[HealthSummary]) {
    // Go's nil slice for an empty list, as Consul's reply carries it.
    if summaries.is_empty() {
        w.nil();
        return;
    }
    w.array_len(summaries.len());
    for summary in summaries {
        let mut f = Fields::new(w, 7);
        f.field("Critical").uint(summary.critical);
        f.field("Name").str(&summary.name);
        f.field("Namespace").str("");
        f.field("Partition").str("");
        f.field("Passing").uint(summary.passing);
        f.field("Total").uint(summary.total);
        f.field("Warning").uint(summary.warning);
        f.finish();
    }
}

fn read_health_summaries(r: &mut Reader) -> Result<Vec<HealthSummary>, WireError> {
    if r.try_nil()? {
        return Ok(Vec::new());
    }
    let count = r.array_len()?;
    let mut summaries = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let mut summary = HealthSummary::default();
        each_field(r, |name, r| {
            match name {
                "Name" => summary.name = r.str()?.to_string(),
                "Total" => summary.total = r.u64("Total")?,
                "Passing" => summary.passing = r.u64("Passing")?,
                "Warning" => summary.warning = r.u64("Warning")?,
                "Critical" => summary.critical = r.u64("Critical")?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        summaries.push(summary);
    }
    Ok(summaries)
}

/// `Internal.CatalogOverview`'s reply: the [`CatalogSummary`] with the read's `QueryMeta`
/// embedded, as Consul's `structs.CatalogSummary` carries it.
pub fn encode_catalog_summary(meta: &QueryMeta, summary: &CatalogSummary) -> Vec<u8> {
    let mut w = Writer::new();
    meta.write_reply(&mut w, &["Checks", "Nodes", "Services"], |name, w| {
        let list = match name {
            "Checks" => &summary.checks,
            "Nodes" => &summary.nodes,
            _ => &summary.services,
        };
        write_health_summaries(w, list);
    });
    w.into_inner()
}

/// Reads [`encode_catalog_summary`]'s reply back.
pub fn decode_catalog_summary(body: &[u8]) -> Result<(QueryMeta, CatalogSummary), WireError> {
    let mut summary = CatalogSummary::default();
    let meta = read_reply(body, |name, r| {
        match name {
            "Nodes" => summary.nodes = read_health_summaries(r)?,
            "Services" => summary.services = read_health_summaries(r)?,
            "Checks" => summary.checks = read_health_summaries(r)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok((meta, summary))
}
