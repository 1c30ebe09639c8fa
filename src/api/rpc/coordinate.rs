//! `Coordinate.Update`, `Coordinate.ListNodes` and `Coordinate.Node`. As the HTTP
//! endpoints do, a gossip member's coordinate comes from the agent's pool and any other
//! catalog node's from what `Coordinate.Update` stored.

use super::{
    authorize, decode_error, elsewhere, propose_typed, read, read_here, require, rows, Answer,
    Placement, Read,
};
use crate::api::authz::RowFilter;
use crate::api::server::Server;
use crate::consul::rpc::catalog::{DcSpecificRequest, NodeSpecificRequest};
use crate::consul::rpc::coordinate::{write_indexed_coordinates, NodeCoordinate, UpdateRequest};
use crate::consul::rpc::QueryMeta;
use crate::gossip::coordinate::Coordinate;
use crate::proto::msgpack::Writer;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::catalog::CatalogOp;
use crate::store::{CatalogResult, Command, StoreVersion, Table, Tables};

/// `Coordinate.Update`: stores one node's coordinate.
pub async fn update(server: &Server, call: &TypedCall) -> Answer {
    let request = UpdateRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let ctx = server.context();
    let dimensions = match ctx.lan() {
        Some(handle) => handle.local_coordinate().vec.len(),
        None => crate::gossip::coordinate::VivaldiConfig::default().dimensionality,
    };
    request.validate(dimensions)?;
    let authz = authorize(server, request.token)?;
    require(&authz, |a| a.node_write(&request.update.node))?;
    let command = Command::Catalog(CatalogOp::Coordinates(vec![request.update]));
    match propose_typed(server, command).await? {
        CatalogResult::Refused(reason) => Err(reason),
        CatalogResult::Written => Ok(vec![0x80]),
    }
}

struct Coordinates {
    /// One node, or every node.
    node: Option<String>,
    known: Vec<(String, Coordinate)>,
    rows: RowFilter,
}

impl Read for Coordinates {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            tables
                .table_index(Table::Coordinates)
                .max(tables.table_index(Table::Nodes)),
            WatchSet::new().table(Table::Coordinates),
        )
    }

    fn reply(&self, _: &StoreVersion, meta: &QueryMeta) -> Answer {
        let mut hidden = false;
        let selected: Vec<NodeCoordinate> = self
            .known
            .iter()
            .filter(|(name, _)| {
                self.node
                    .as_deref()
                    .is_none_or(|wanted| wanted.eq_ignore_ascii_case(name))
            })
            .filter(|(name, _)| {
                let readable = self.rows.node(name);
                hidden |= !readable;
                readable
            })
            .map(|(name, c)| NodeCoordinate {
                node: name,
                segment: "",
                vec: &c.vec,
                error: c.error,
                adjustment: c.adjustment,
                height: c.height,
            })
            .collect();
        let meta = QueryMeta {
            results_filtered_by_acls: hidden && self.node.is_none(),
            ..meta.clone()
        };
        let mut w = Writer::new();
        write_indexed_coordinates(&mut w, &meta, &selected);
        Ok(w.into_inner())
    }
}

fn known_coordinates(server: &Server) -> Vec<(String, Coordinate)> {
    let ctx = server.context();
    match ctx.lan() {
        Some(handle) => crate::api::coordinate::all_coordinates(ctx, handle),
        None => Vec::new(),
    }
}

/// `Coordinate.ListNodes`.
pub async fn list_nodes(server: &Server, call: &TypedCall) -> Answer {
    let request = DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let query = Coordinates {
        node: None,
        known: known_coordinates(server),
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

/// `Coordinate.Node`: one node's coordinate (none when unknown).
pub async fn node(server: &Server, call: &TypedCall) -> Answer {
    let request = NodeSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    require(&authz, |a| a.node_read(request.node))?;
    let query = Coordinates {
        node: Some(request.node.to_string()),
        known: known_coordinates(server),
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

/// `Coordinate.ListDatacenters`: every datacenter's servers with their WAN coordinates
/// (Consul's `[]DatacenterMap`, the values `/v1/coordinate/datacenters` answers). Its
/// request is Consul's empty struct: nothing in it is read, and no ACL applies.
pub fn list_datacenters(server: &Server) -> Answer {
    let maps = crate::api::coordinate::datacenter_maps(server.context())
        .map_err(|e| super::error_text(&e))?;
    let mut w = Writer::new();
    crate::consul::rpc::write_json(&mut w, &maps);
    Ok(w.into_inner())
}
