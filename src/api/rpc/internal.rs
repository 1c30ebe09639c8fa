//! `Internal.NodeInfo`, `Internal.NodeDump`, `Internal.ServiceDump`,
//! `Internal.GatewayServiceDump` and `Internal.EventFire`, as Consul's
//! `internal_endpoint.go` serves them. The UI's summaries a client agent renders from
//! these replies are the server's own handler's (`api::ui`): the rows each read selects,
//! its index and its ACL filtering are shared with that handler.

use super::{
    authorize, decode_error, elsewhere, error_text, read, read_here, require, rows, Answer,
    Placement, Read,
};
use crate::api::authz::RowFilter;
use crate::api::server::Server;
use crate::consul::filter::Filter;
use crate::consul::render;
use crate::consul::rpc::catalog::{DcSpecificRequest, NodeSpecificRequest, ServiceSpecificRequest};
use crate::consul::rpc::internal::{
    write_gateway_service_dump, write_node_dump, write_service_dump, EventFireRequest, NodeInfo,
    ServiceDumpRequest, ServiceInfo,
};
use crate::consul::rpc::QueryMeta;
use crate::consul::user_event::EVENT_NAME_PREFIX;
use crate::proto::msgpack::Writer;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::catalog::read::CheckServiceNode;
use crate::store::catalog::rows::fold;
use crate::store::catalog::NodeEntry;
use crate::store::{StoreVersion, Table, Tables};
use std::sync::Arc;

const CATALOG_TABLES: [Table; 3] = [Table::Nodes, Table::Services, Table::Checks];

/// A read of the whole catalog: its index and its tables.
fn whole_catalog(tables: &Tables) -> (u64, WatchSet) {
    (
        tables.max_table_index(&CATALOG_TABLES),
        WatchSet::new()
            .table(Table::Nodes)
            .table(Table::Services)
            .table(Table::Checks),
    )
}

/// A node's info, without what the token may not read; `None` for a node it may not read.
fn info<'t>(entry: &'t NodeEntry, rows: &RowFilter, hidden: &mut bool) -> Option<NodeInfo<'t>> {
    let node = entry.node();
    if !rows.node(&node.name) {
        *hidden = true;
        return None;
    }
    let mut services: Vec<_> = entry.services.values().map(|s| &**s).collect();
    let before = services.len();
    services.retain(|s| rows.service(&s.name));
    let mut checks: Vec<_> = entry.checks.values().map(|c| &**c).collect();
    let before_checks = checks.len();
    checks.retain(|c| rows.service(&c.service_name));
    *hidden |= services.len() != before || checks.len() != before_checks;
    Some(NodeInfo {
        node,
        services,
        checks,
    })
}

struct Dump {
    /// One node (`Internal.NodeInfo`), or all.
    node: Option<(Arc<str>, Arc<str>)>,
    /// `NodeDump`'s `Filter`, over each `NodeInfo` as the UI's `/nodes` renders it.
    filter: Option<Filter>,
    rows: RowFilter,
}

/// Whether `filter` keeps a node's info.
fn matches(filter: &Option<Filter>, info: &NodeInfo) -> bool {
    filter.as_ref().is_none_or(|filter| {
        filter.matches(&render::as_value(|w| {
            crate::api::ui::write_node_info(
                w,
                info.node,
                info.services.iter().copied(),
                info.checks.iter().copied(),
            )
        }))
    })
}

impl Read for Dump {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        match &self.node {
            Some((_, folded)) => (
                tables.max_table_index(&CATALOG_TABLES),
                WatchSet::new()
                    .key(Table::Nodes, folded.clone())
                    .key(Table::NodeServices, folded.clone())
                    .key(Table::Checks, folded.clone()),
            ),
            None => whole_catalog(tables),
        }
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let mut hidden = false;
        let dump: Vec<NodeInfo> = match &self.node {
            Some((name, _)) => version
                .catalog
                .node(name)
                .and_then(|entry| info(entry, &self.rows, &mut hidden))
                .into_iter()
                .collect(),
            None => version
                .catalog
                .nodes
                .values()
                .filter_map(|entry| info(entry, &self.rows, &mut hidden))
                .filter(|info| matches(&self.filter, info))
                .collect(),
        };
        let meta = meta.filtered(hidden);
        let mut w = Writer::new();
        write_node_dump(&mut w, &meta, &dump);
        Ok(w.into_inner())
    }
}

/// `Internal.NodeInfo`: one node with its services and checks.
pub async fn node_info(server: &Server, call: &TypedCall) -> Answer {
    let request = NodeSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let query = Dump {
        node: Some((Arc::from(request.node), Arc::from(&*fold(request.node)))),
        filter: None,
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

/// `Internal.NodeDump`: every node with its services and checks.
pub async fn node_dump(server: &Server, call: &TypedCall) -> Answer {
    let request = DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let query = Dump {
        node: None,
        filter: super::catalog::parse_filter(request.options.filter, crate::api::ui::NODE_INFO)?,
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

struct Services {
    kind: Option<String>,
    /// `Filter`, over each instance as a `CheckServiceNode`.
    filter: Option<Filter>,
    rows: RowFilter,
}

impl Read for Services {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        let (index, watch) = whole_catalog(tables);
        if self.kind.is_some() {
            return (index, watch);
        }
        // A dump of every kind carries the gateway-service rows too, at their index.
        (
            index.max(tables.table_index(Table::GatewayServices)),
            watch.table(Table::GatewayServices),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let mut hidden = false;
        let mut found = Vec::new();
        for group in version.catalog.services.values() {
            for view in group.instances.values() {
                if self
                    .kind
                    .as_deref()
                    .is_some_and(|k| view.service.kind() != k)
                {
                    continue;
                }
                if !self
                    .rows
                    .node_service(&view.node().name, &view.service.name)
                {
                    hidden = true;
                    continue;
                }
                let row = CheckServiceNode {
                    node: view.node(),
                    service: &view.service,
                    node_checks: view.node_checks(),
                    service_checks: view.checks(),
                };
                let kept = self.filter.as_ref().is_none_or(|filter| {
                    filter.matches(&render::as_value(|w| render::check_service_node(w, &row)))
                });
                if kept {
                    found.push(row);
                }
            }
        }
        let gateways = match self.kind {
            Some(_) => Vec::new(),
            None => crate::api::ui::readable_links(
                version.gateways.rows.values(),
                &self.rows,
                &mut hidden,
            ),
        };
        let meta = meta.filtered(hidden);
        let mut w = Writer::new();
        write_service_dump(&mut w, &meta, &found, &gateways);
        Ok(w.into_inner())
    }
}

/// `Internal.ServiceDump`: every service instance with its node and checks.
pub async fn service_dump(server: &Server, call: &TypedCall) -> Answer {
    let request = ServiceDumpRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let query = Services {
        kind: request.service_kind.map(str::to_string),
        filter: super::catalog::parse_filter(
            request.options.filter,
            crate::consul::filter::CHECK_SERVICE_NODE,
        )?,
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

struct GatewayDump {
    gateway: String,
    rows: RowFilter,
}

impl Read for GatewayDump {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        crate::api::ui::gateway_services_nodes_read(tables, &self.gateway)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let mut hidden = false;
        let (links, instances) =
            crate::api::ui::gateway_dump(version, &self.gateway, &self.rows, &mut hidden);
        let mut dump = Vec::new();
        for link in links {
            let folded = fold(&link.service);
            let of_service = instances
                .iter()
                .find(|(name, _)| **name == *folded)
                .map(|(_, rows)| rows.as_slice())
                .unwrap_or_default();
            if of_service.is_empty() {
                dump.push(ServiceInfo {
                    instance: None,
                    link,
                });
            }
            for row in of_service {
                dump.push(ServiceInfo {
                    instance: Some(*row),
                    link,
                });
            }
        }
        let meta = meta.filtered(hidden);
        let mut w = Writer::new();
        write_gateway_service_dump(&mut w, &meta, &dump);
        Ok(w.into_inner())
    }
}

/// `Internal.GatewayServiceDump`: each service a gateway links with its instances (a
/// linked service without instances once, without them); `service:read` on the gateway,
/// as `/v1/internal/ui/gateway-services-nodes/<g>`.
pub async fn gateway_service_dump(server: &Server, call: &TypedCall) -> Answer {
    let request = ServiceSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    if request.service_name.is_empty() {
        return Err("Must provide gateway name".to_string());
    }
    require(&authz, |a| a.service_read(request.service_name))?;
    let query = GatewayDump {
        gateway: request.service_name.to_string(),
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

/// `Internal.EventFire`: broadcasts the event (its payload is the envelope the agent
/// built) on the LAN pool as `consul:event:<name>`; any server may.
pub async fn event_fire(server: &Server, call: &TypedCall) -> Answer {
    let request = EventFireRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) =
        elsewhere(server, call, request.datacenter, Placement::Anywhere, None).await
    {
        return answer;
    }
    let ctx = server.context();
    let authz = authorize(server, request.options.token)?;
    require(&authz, |a| a.event_write(request.name))?;
    let handle = ctx
        .lan()
        .cloned()
        .ok_or_else(|| "gossip is disabled on this agent".to_string())?;
    let name = format!("{EVENT_NAME_PREFIX}{}", request.name);
    handle
        .fire_user_event(&name, request.payload.unwrap_or_default(), false)
        .await
        .map_err(|e| e.to_string())?;
    let index = ctx.local_index().max(1);
    let m = ctx.query_meta(index, crate::shard::runtime::Consistency::Stale);
    let meta = QueryMeta {
        index,
        last_contact_ns: (m.last_contact_ms as i64).saturating_mul(1_000_000),
        known_leader: m.known_leader,
        consistency_level: "stale",
        not_modified: false,
        results_filtered_by_acls: false,
    };
    let mut w = Writer::new();
    meta.write_reply(&mut w, &[], |_, _| {});
    Ok(w.into_inner())
}

struct Topology(crate::api::ui_topology::TopologyQuery);

impl Read for Topology {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        crate::api::ui_topology::topology_read(tables)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let view = self.0.gather(version);
        let mut w = Writer::new();
        crate::api::ui_topology::write_topology_reply(&mut w, meta, &view);
        Ok(w.into_inner())
    }
}

/// `Internal.ServiceTopology`: a service's upstreams and downstreams with their intention
/// decisions (`ServiceKind` empty or `ingress-gateway`); `service:read` on the service, the
/// neighbours' rows filtered by the token, as `/v1/internal/ui/service-topology/<s>`.
pub async fn service_topology(server: &Server, call: &TypedCall) -> Answer {
    use crate::api::ui_topology::{TopologyKind, TopologyQuery};
    let request = ServiceSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    if request.service_name.is_empty() {
        return Err("Must provide a service name".to_string());
    }
    let kind = TopologyKind::parse(Some(request.service_kind)).map_err(|e| error_text(&e))?;
    require(&authz, |a| a.service_read(request.service_name))?;
    let ctx = server.context();
    let query = TopologyQuery {
        service: Arc::from(request.service_name),
        kind,
        rows: rows(&authz),
        default_allow: crate::api::intentions::default_allow(ctx),
        datacenter: Arc::from(ctx.config().datacenter.as_str()),
    };
    read(server, call, &request.options, Topology(query)).await
}

/// The read behind `Internal.CatalogOverview`.
struct Overview;

impl Read for Overview {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            crate::api::ui::catalog_index(tables),
            crate::api::ui::catalog_tables_watch(),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let summary = crate::api::ui::catalog_summary(version);
        Ok(crate::consul::rpc::internal::encode_catalog_summary(
            meta, &summary,
        ))
    }
}

/// `Internal.CatalogOverview`: the catalog's nodes, services and checks counted by health;
/// it counts everything, so it needs `operator:read`, as
/// `/v1/internal/ui/catalog-overview`.
pub async fn catalog_overview(server: &Server, call: &TypedCall) -> Answer {
    let request = DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    require(&authz, |a| a.operator_read())?;
    read(server, call, &request.options, Overview).await
}

/// The read behind `Internal.ExportedServicesForPeer`.
struct Exported;

impl Read for Exported {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        crate::api::ui::exported_services_read(tables)
    }

    fn reply(&self, _version: &StoreVersion, meta: &QueryMeta) -> Answer {
        // The UI's listing of what is exported to a peer is empty here, as the server's
        // own `/v1/internal/ui/exported-services` answers it.
        Ok(crate::consul::rpc::internal::encode_exported_services(
            meta,
            &[],
        ))
    }
}

/// `Internal.ExportedServicesForPeer`: the services exported to `PeerName`, which it
/// requires, as `/v1/internal/ui/exported-services?peer=`.
pub async fn exported_services_for_peer(server: &Server, call: &TypedCall) -> Answer {
    let request = ServiceDumpRequest::decode(&call.body).map_err(decode_error)?;
    if let Err(answer) = read_here(server, call, request.datacenter, &request.options).await {
        return answer;
    }
    if request.peer_name.is_empty() {
        return Err("must provide PeerName".to_string());
    }
    read(server, call, &request.options, Exported).await
}
