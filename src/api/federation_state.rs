//! Federation states over HTTP (Consul's `agent/federation_state_endpoint.go` and the
//! `FederationState.*` RPC endpoints behind it):
//!
//! - `GET /v1/internal/federation-states`: every datacenter's state, by name (`[]` when
//!   none); `operator:read`.
//! - `GET /v1/internal/federation-states/mesh-gateways`: `{dc: [CheckServiceNode…]}` for
//!   every datacenter with at least one gateway, each row shown only to a token that may
//!   read its node and its service (Consul's `filterACL`).
//! - `GET /v1/internal/federation-state/<dc>`: `{"State": …}` with the query meta in the
//!   body, as Consul's `FederationStateResponse`; 404 with no body when the datacenter has
//!   none; `operator:read`.
//!
//! Writes have no HTTP endpoint, as in Consul: each secondary's leader sends its own state
//! to the primary as `FederationState.Apply` (`agent::federation`), whose store operation
//! [`apply_op`] builds (`api::rpc::federation_state` serves the call).
//!
//! The reads are blocking-capable on the table's index, and watch the whole table (or the
//! one datacenter's key).

use super::authz::RowFilter;
use super::{
    query_options, run_query, ApiError, Context, Outcome, Query, QueryMeta, Reply, Request,
};
use crate::consul::federation_state::{write_state, write_state_fields};
use crate::consul::json::JsonWriter;
use crate::shard::watch::WatchSet;
use crate::store::federation::{self, FederationState, FederationStateOp};
use crate::store::{StoreVersion, Table, Tables};
use arcstr::ArcStr;
use std::sync::Arc;

/// Sends a compact JSON body as the answer, re-laid out when `?pretty` asked for it.
pub fn send(reply: &mut Reply, meta: QueryMeta, headers: Option<Vec<u8>>, compact: Vec<u8>) {
    let headers = headers.unwrap_or_else(|| {
        let mut headers = Vec::with_capacity(128);
        meta.write_headers(&mut headers);
        headers
    });
    if reply.pretty {
        let value: serde_json::Value =
            serde_json::from_slice(&compact).expect("the JSON writer writes JSON");
        reply.json(200, &headers, &value);
    } else {
        reply.json_bytes(200, &headers, &compact);
    }
}

/// `GET /v1/internal/federation-states`.
struct ListQuery;

impl Query for ListQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            federation::index(tables),
            WatchSet::new().table(Table::FederationStates),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let body = list_body(federation::list(tables).map(|state| &**state));
        send(reply, meta, None, body);
    }
}

/// The compact body of `GET /v1/internal/federation-states`.
pub fn list_body<'s>(states: impl Iterator<Item = &'s FederationState>) -> Vec<u8> {
    let mut body = Vec::with_capacity(256);
    let mut w = JsonWriter::new(&mut body, false);
    w.begin_array();
    for state in states {
        write_state(&mut w, state);
    }
    w.end_array();
    w.finish();
    body
}

pub fn list(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let options = query_options(ctx, &request.query)?;
    if ctx.reads_by_call(&options) {
        return Ok(super::rpc::client_internal::federation_states(
            ctx, request, options, "",
        ));
    }
    run_query(ctx, ListQuery, options, reply)
}

/// `GET /v1/internal/federation-states/mesh-gateways`.
struct MeshGatewaysQuery {
    rows: RowFilter,
}

impl Query for MeshGatewaysQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        ListQuery.evaluate(tables)
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let (shown, hidden) = readable_gateways(tables, &self.rows);
        let headers = self.rows.list_headers(meta, hidden);
        send(reply, meta, Some(headers), mesh_gateways_body(&shown));
    }
}

/// Each datacenter's mesh gateways the token may read (its node and its service, as Consul
/// filters a `CheckServiceNode`), leaving out datacenters with none to show; and whether
/// the token hid any.
pub fn readable_gateways<'t>(
    tables: &'t Tables,
    rows: &RowFilter,
) -> (Vec<(&'t str, Vec<&'t federation::MeshGateway>)>, bool) {
    let mut hidden = false;
    let mut datacenters = Vec::new();
    for state in federation::list(tables) {
        let shown: Vec<_> = state
            .mesh_gateways
            .iter()
            .filter(|gateway| {
                let readable = readable(rows, gateway);
                hidden |= !readable;
                readable
            })
            .collect();
        if !shown.is_empty() {
            datacenters.push((state.datacenter.as_str(), shown));
        }
    }
    (datacenters, hidden)
}

/// The compact body of `GET /v1/internal/federation-states/mesh-gateways`.
pub fn mesh_gateways_body(datacenters: &[(&str, Vec<&federation::MeshGateway>)]) -> Vec<u8> {
    let mut body = Vec::with_capacity(256);
    let mut w = JsonWriter::new(&mut body, false);
    w.begin_object();
    for (datacenter, gateways) in datacenters {
        w.field_array(datacenter);
        for gateway in gateways {
            w.raw_element(gateway.json.as_bytes());
        }
        w.end_array();
    }
    w.end_object();
    w.finish();
    body
}

/// `node:read` on a gateway's node and `service:read` on its service, as Consul filters a
/// `CheckServiceNode`.
fn readable(rows: &RowFilter, gateway: &federation::MeshGateway) -> bool {
    if !rows.is_active() {
        return true;
    }
    let value: serde_json::Value =
        serde_json::from_str(&gateway.json).unwrap_or(serde_json::Value::Null);
    let service = value["Service"]["Service"].as_str().unwrap_or_default();
    rows.node(&gateway.node) && rows.service(service)
}

pub fn mesh_gateways(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let options = query_options(ctx, &request.query)?;
    if ctx.reads_by_call(&options) {
        return Ok(super::rpc::client_internal::mesh_gateways(
            ctx, request, options, "",
        ));
    }
    let query = MeshGatewaysQuery {
        rows: RowFilter::of(request),
    };
    run_query(ctx, query, options, reply)
}

/// `GET /v1/internal/federation-state/<dc>`.
struct GetQuery {
    datacenter: Arc<str>,
}

impl Query for GetQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            federation::index(tables),
            WatchSet::new().key(Table::FederationStates, self.datacenter.clone()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        get_answer(
            federation::get(tables, &self.datacenter).map(|state| &**state),
            meta,
            reply,
        );
    }
}

/// Answers `GET /v1/internal/federation-state/<dc>`: the state with the query's metadata in
/// the body, or 404 with no body when the datacenter has none.
pub fn get_answer(state: Option<&FederationState>, meta: QueryMeta, reply: &mut Reply) {
    let Some(state) = state else {
        let mut headers = Vec::with_capacity(128);
        meta.write_headers(&mut headers);
        reply.send(404, None, &headers, b"");
        return;
    };
    let mut body = Vec::with_capacity(512);
    let mut w = JsonWriter::new(&mut body, false);
    w.begin_object();
    w.field_object("State");
    write_state_fields(&mut w, state);
    w.end_object();
    w.field_u64("Index", meta.index);
    w.field_u64(
        "LastContact",
        meta.last_contact_ms.saturating_mul(1_000_000),
    );
    w.field_bool("KnownLeader", meta.known_leader);
    w.field_str("ConsistencyLevel", meta.consistency.as_str());
    w.field_bool("NotModified", false);
    w.field_u64("Backend", 0);
    w.field_bool("ResultsFilteredByACLs", false);
    w.end_object();
    w.finish();
    send(reply, meta, None, body);
}

pub fn get(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let datacenter = request.rest;
    if datacenter.is_empty() {
        return Err(ApiError::bad_request("Missing datacenter name"));
    }
    let options = query_options(ctx, &request.query)?;
    if ctx.reads_by_call(&options) {
        return Ok(super::rpc::client_internal::federation_state(
            ctx, request, datacenter, options, "",
        ));
    }
    run_query(
        ctx,
        GetQuery {
            datacenter: Arc::from(datacenter),
        },
        options,
        reply,
    )
}

/// Why this server cannot take a federation state write.
pub const NOT_PRIMARY: &str =
    "federation states are written in the primary datacenter; send the write there with ?dc=";

/// The store operation of Consul's `FederationState.Apply` (`op` `"upsert"` or
/// `"delete"`, `api::rpc::federation_state`), refused in a secondary datacenter, without a
/// state, and for another operation, in Consul's words.
pub fn apply_op(
    ctx: &Context,
    op: &str,
    state: Option<FederationState>,
) -> Result<FederationStateOp, ApiError> {
    if crate::api::connect::is_secondary(ctx.config()) {
        return Err(ApiError::Internal(NOT_PRIMARY.to_string()));
    }
    let Some(state) = state else {
        return Err(ApiError::Internal(
            "invalid request: missing federation state datacenter".to_string(),
        ));
    };
    match op {
        "upsert" => Ok(FederationStateOp::Upsert(Box::new(FederationState {
            // The writer's indexes mean nothing here; the primary's own are set by the apply.
            primary_modify_index: 0,
            create_index: 0,
            modify_index: 0,
            ..state
        }))),
        "delete" => Ok(FederationStateOp::Delete {
            datacenter: ArcStr::from(state.datacenter.as_str()),
        }),
        other => Err(ApiError::Internal(format!(
            "Invalid federation state operation: {other}"
        ))),
    }
}
