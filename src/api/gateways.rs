//! The gateways' side of the catalog: `GET /v1/catalog/gateway-services/<gateway>` (the
//! services an ingress or terminating gateway links, Consul's `GatewayService` rows from
//! `store::gateways`), and the helpers through which the health and Connect views
//! (`/v1/health/ingress/<s>`, the terminating gateways `/v1/health/connect/<s>` and
//! `/v1/catalog/connect/<s>` append, DNS aside) and the UI's `gateway-services-nodes` read
//! the gateways linking a service.
//!
//! ACLs as Consul checks them: `service:read` on the gateway (the route's rule), and each
//! row shown only to a token that may read its service. Reads are blocking-capable and
//! watch exactly the gateway's (or the service's) rows and the linked gateways' instances.

use super::authz::RowFilter;
use super::{
    query_options, run_query, ApiError, Context, Outcome, Query, QueryMeta, Reply, Request,
};
use crate::consul::json::JsonWriter;
use crate::shard::watch::WatchSet;
use crate::store::catalog::read;
use crate::store::catalog::InstanceView;
use crate::store::gateways::{self, GatewayKind, GatewayService};
use crate::store::{StoreVersion, Table, Tables};
use std::sync::Arc;

/// The instances of the gateways of `kind` that link `service` (each gateway once, however
/// many listeners expose the service).
pub fn linked_instances<'t>(
    tables: &'t Tables,
    service: &str,
    kind: GatewayKind,
) -> Vec<&'t InstanceView> {
    let mut views = Vec::new();
    for gateway in gateways::linked_gateway_names(tables, service, kind) {
        if let Some(group) = tables.catalog.group(&gateway) {
            views.extend(
                group
                    .instances
                    .values()
                    .filter(|view| view.service.kind() == kind.as_str()),
            );
        }
    }
    views
}

/// Adds to `watch` what a read of the gateways of `kind` linking `service` depends on — the
/// rows linking the service and each linked gateway's instances — and returns the index
/// such a read reports: the last change to those rows (the table's when there are none,
/// so it never goes back) and the linked gateways' service indexes.
pub fn watch_linked(
    tables: &Tables,
    service: &str,
    kind: GatewayKind,
    mut watch: WatchSet,
) -> (u64, WatchSet) {
    watch = watch.key(Table::GatewayServices, gateways::service_key(service));
    let mut index = gateways::service_index(tables, service);
    for gateway in gateways::linked_gateway_names(tables, service, kind) {
        index = index.max(read::service_index(tables, &gateway));
        watch = watch.key(Table::ServiceIndex, Arc::<str>::from(gateway.as_str()));
    }
    (index, watch)
}

/// One row as Consul's `GatewayService` JSON (empty fields left out, as Go's `omitempty`).
pub fn write_row(w: &mut JsonWriter, row: &GatewayService) {
    w.begin_object();
    w.field_object("Gateway");
    w.field_str("Name", &row.gateway);
    w.end_object();
    w.field_object("Service");
    w.field_str("Name", &row.service);
    w.end_object();
    w.field_str("GatewayKind", row.gateway_kind.as_str());
    if row.port != 0 {
        w.field_u64("Port", u64::from(row.port));
    }
    if !row.protocol.is_empty() {
        w.field_str("Protocol", &row.protocol);
    }
    if !row.hosts.is_empty() {
        w.field_str_array("Hosts", row.hosts.iter().map(|h| &**h));
    }
    for (name, value) in [
        ("CAFile", &row.ca_file),
        ("CertFile", &row.cert_file),
        ("KeyFile", &row.key_file),
        ("SNI", &row.sni),
    ] {
        if !value.is_empty() {
            w.field_str(name, value);
        }
    }
    if row.from_wildcard {
        w.field_bool("FromWildcard", true);
    }
    if !row.service_kind.is_empty() {
        w.field_str("ServiceKind", &row.service_kind);
    }
    w.field_u64("CreateIndex", row.create_index);
    w.field_u64("ModifyIndex", row.modify_index);
    w.end_object();
}

/// `GET /v1/catalog/gateway-services/<gateway>`.
struct GatewayServicesQuery {
    gateway: Arc<str>,
    rows: RowFilter,
}

/// The index of a read of the rows `gateway` links and what it depends on.
pub fn gateway_read(tables: &Tables, gateway: &str) -> (u64, WatchSet) {
    (
        gateways::gateway_index(tables, gateway),
        WatchSet::new().key(Table::GatewayServices, gateways::gateway_key(gateway)),
    )
}

/// The rows `gateway` links whose service `rows` may read, and whether any was left out.
pub fn readable_rows<'t>(
    tables: &'t Tables,
    gateway: &str,
    rows: &RowFilter,
) -> (Vec<&'t Arc<GatewayService>>, bool) {
    let mut hidden = false;
    let shown = gateways::gateway_rows(tables, gateway)
        .into_iter()
        .filter(|row| {
            let readable = rows.service(&row.service);
            hidden |= !readable;
            readable
        })
        .collect();
    (shown, hidden)
}

/// A gateway's rows as `GET /v1/catalog/gateway-services/<gateway>` answers them: `null`
/// for none (Consul's nil list), else the list of `GatewayService`s.
pub fn gateway_services_body(shown: &[&GatewayService], pretty: bool) -> Vec<u8> {
    let mut body = Vec::with_capacity(64 + shown.len() * 256);
    if shown.is_empty() {
        body.extend_from_slice(if pretty { b"null\n" } else { b"null" });
        return body;
    }
    let mut w = JsonWriter::new(&mut body, pretty);
    w.begin_array();
    for row in shown {
        write_row(&mut w, row);
    }
    w.end_array();
    w.finish();
    body
}

impl Query for GatewayServicesQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        gateway_read(tables, &self.gateway)
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let (shown, hidden) = readable_rows(tables, &self.gateway, &self.rows);
        let shown: Vec<&GatewayService> = shown.into_iter().map(|row| &**row).collect();
        let body = gateway_services_body(&shown, reply.pretty);
        reply.json_bytes(200, &self.rows.list_headers(meta, hidden), &body);
    }
}

/// `GET /v1/catalog/gateway-services/<gateway>` (`service:read` on the gateway, checked by
/// the route).
pub fn catalog_gateway_services(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let gateway = request.rest;
    let options = query_options(ctx, &request.query)?;
    if gateway.is_empty() {
        return Err(ApiError::bad_request("Missing gateway name"));
    }
    if super::rpc::client_catalog::typed(ctx, request, &options, &[]) {
        return Ok(super::rpc::client_catalog::gateway_services(
            ctx, request, gateway, options, "",
        ));
    }
    let query = GatewayServicesQuery {
        gateway: Arc::from(gateway),
        rows: RowFilter::of(request),
    };
    run_query(ctx, query, options, reply)
}
