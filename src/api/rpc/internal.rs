//! `Internal.NodeInfo`, `Internal.NodeDump`, `Internal.ServiceDump` and
//! `Internal.EventFire`, as Consul's `internal_endpoint.go` serves them.

use super::{
    authorize, decode_error, elsewhere, read, read_here, require, rows, Answer, Placement, Read,
};
use crate::api::authz::RowFilter;
use crate::api::server::Server;
use crate::consul::filter::Filter;
use crate::consul::render;
use crate::consul::rpc::catalog::{DcSpecificRequest, NodeSpecificRequest};
use crate::consul::rpc::internal::{
    write_node_dump, write_service_dump, EventFireRequest, NodeInfo, ServiceDumpRequest,
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
    rows: RowFilter,
}

impl Read for Services {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        whole_catalog(tables)
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
                found.push(CheckServiceNode {
                    node: view.node(),
                    service: &view.service,
                    node_checks: view.node_checks(),
                    service_checks: view.checks(),
                });
            }
        }
        let meta = meta.filtered(hidden);
        let mut w = Writer::new();
        write_service_dump(&mut w, &meta, &found);
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
