//! A client agent's UI, federation-state and coordinate-datacenter reads as Consul's typed
//! calls — `Internal.NodeDump` and `NodeInfo` (`/v1/internal/ui/nodes`, `node/<n>`),
//! `FederationState.List`, `ListMeshGateways` and `Get`, `Coordinate.ListDatacenters` — and
//! the same reads naming another datacenter (`?dc=`), on a client agent or a server.
//!
//! As for the catalog (`client_catalog`): the HTTP handler checks the request as a server's
//! would, the typed request carries the token and the query options, and the reply is
//! rendered by the functions that render the server's own HTTP answer
//! (`api::ui`, `api::federation_state`), so the body is the server's byte for byte (a UI
//! answer gzip-coded as the server's is); the headers come
//! from the reply's `QueryMeta`. The ACL rules (`operator:read`, the row filtering of the
//! mesh gateways) are the server's to check.

use super::client::{bad_reply, call, meta_of, query_options, read_timeout, CALL_TIMEOUT};
use super::client_catalog::headers;
use crate::api::authz::request_secret;
use crate::api::federation_state::{get_answer, list_body, mesh_gateways_body, send};
use crate::api::{ApiError, Context, Outcome, Request};
use crate::cluster::servers::Retry;
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::federation_state::{
    read_mesh_gateways_reply, read_state_reply, read_states_reply, StateQuery,
};
use crate::consul::rpc::rows::read_indexed_node_dump;

/// The federation-state reads naming another datacenter (`?dc=`), as their typed calls
/// naming it; `None` for other requests.
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    if request.method != crate::proto::http::Method::Get {
        return None;
    }
    let path = request.path;
    let options = match crate::api::query_options_in(ctx, &request.query) {
        Ok(options) => options,
        Err(error) => return Some(Err(error)),
    };
    if path == "/v1/internal/federation-states" {
        return Some(Ok(federation_states(ctx, request, options, datacenter)));
    }
    if path == "/v1/internal/federation-states/mesh-gateways" {
        return Some(Ok(mesh_gateways(ctx, request, options, datacenter)));
    }
    if path == "/v1/internal/ui/nodes" {
        return Some(
            crate::api::catalog::parse_filter(request, crate::api::ui::NODE_INFO)
                .map(|_| ui_nodes(ctx, request, None, options, datacenter)),
        );
    }
    if let Some(node) = path.strip_prefix("/v1/internal/ui/node/") {
        if node.is_empty() {
            return Some(Err(ApiError::bad_request("Missing node name")));
        }
        return Some(Ok(ui_nodes(ctx, request, Some(node), options, datacenter)));
    }
    if let Some(target) = path.strip_prefix("/v1/internal/federation-state/") {
        if target.is_empty() {
            return Some(Err(ApiError::bad_request("Missing datacenter name")));
        }
        return Some(Ok(federation_state(
            ctx, request, target, options, datacenter,
        )));
    }
    None
}

/// A `DCSpecificRequest` of `datacenter` with the request's token and options.
fn dc_request(
    ctx: &Context,
    request: &Request,
    options: &crate::api::QueryOptions,
    datacenter: &str,
) -> (Vec<u8>, String) {
    let secret = request_secret(ctx, request).into_owned();
    let body = DcSpecificRequest {
        datacenter,
        node_meta_filters: Vec::new(),
        options: query_options(options, &secret),
    }
    .encode();
    (body, secret)
}

/// `GET /v1/internal/federation-states`: `FederationState.List`.
pub fn federation_states(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let (body, _) = dc_request(ctx, request, &options, datacenter);
    call(
        ctx,
        datacenter,
        "FederationState.List",
        body,
        read_timeout(&options),
        Retry::Always,
        |body, reply| {
            let (meta, states) = read_states_reply(body).map_err(bad_reply)?;
            send(reply, meta_of(&meta), None, list_body(states.iter()));
            Ok(())
        },
    )
}

/// `GET /v1/internal/federation-states/mesh-gateways`: `FederationState.ListMeshGateways`.
pub fn mesh_gateways(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let (body, secret) = dc_request(ctx, request, &options, datacenter);
    call(
        ctx,
        datacenter,
        "FederationState.ListMeshGateways",
        body,
        read_timeout(&options),
        Retry::Always,
        move |body, reply| {
            let (meta, datacenters) = read_mesh_gateways_reply(body).map_err(bad_reply)?;
            let shown: Vec<(&str, Vec<&crate::store::federation::MeshGateway>)> = datacenters
                .iter()
                .map(|(datacenter, gateways)| (*datacenter, gateways.iter().collect()))
                .collect();
            let headers = headers(&meta, &secret);
            send(
                reply,
                meta_of(&meta),
                Some(headers),
                mesh_gateways_body(&shown),
            );
            Ok(())
        },
    )
}

/// `GET /v1/internal/federation-state/<target>`: `FederationState.Get`.
pub fn federation_state(
    ctx: &Context,
    request: &Request,
    target: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = StateQuery {
        datacenter,
        target_datacenter: target,
        options: query_options(&options, &secret),
    }
    .encode();
    call(
        ctx,
        datacenter,
        "FederationState.Get",
        body,
        read_timeout(&options),
        Retry::Always,
        |body, reply| {
            let (meta, state) = read_state_reply(body).map_err(bad_reply)?;
            get_answer(state.as_ref(), meta_of(&meta), reply);
            Ok(())
        },
    )
}

/// `GET /v1/coordinate/datacenters` on a client agent: `Coordinate.ListDatacenters`, whose
/// request is Consul's empty struct, the server's `[]DatacenterMap` answered as it came.
pub fn coordinate_datacenters(ctx: &Context) -> Outcome {
    call(
        ctx,
        "",
        "Coordinate.ListDatacenters",
        vec![0x80],
        CALL_TIMEOUT,
        Retry::Always,
        |body, reply| {
            let mut reader = crate::proto::msgpack::Reader::new(body);
            let maps = crate::consul::rpc::read_json(&mut reader).map_err(bad_reply)?;
            reply.json(200, b"", &maps);
            Ok(())
        },
    )
}

/// `GET /v1/internal/ui/nodes` (`Internal.NodeDump`, `?filter` as its `Filter`) and
/// `/v1/internal/ui/node/<n>` (`node`: `Internal.NodeInfo`; an unknown node, or one the
/// token may not read, is the server's bare 404).
pub fn ui_nodes(
    ctx: &Context,
    request: &Request,
    node: Option<&str>,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let gzip = crate::api::ui::accepts_gzip(request.header("Accept-Encoding"));
    let rpc_options = query_options(&options, &secret);
    let (method, body) = match node {
        None => (
            "Internal.NodeDump",
            DcSpecificRequest {
                datacenter,
                node_meta_filters: Vec::new(),
                options: rpc_options,
            }
            .encode(),
        ),
        Some(node) => (
            "Internal.NodeInfo",
            crate::consul::rpc::catalog::NodeSpecificRequest {
                datacenter,
                node,
                options: rpc_options,
                ..Default::default()
            }
            .encode(),
        ),
    };
    let one = node.is_some();
    call(
        ctx,
        datacenter,
        method,
        body,
        read_timeout(&options),
        Retry::Always,
        move |body, reply| {
            let (meta, dump) = read_indexed_node_dump(body).map_err(bad_reply)?;
            if one && dump.is_empty() {
                let mut headers = Vec::with_capacity(160);
                meta_of(&meta).write_headers(&mut headers);
                reply.send(404, None, &headers, b"");
                return Ok(());
            }
            let mut out = Vec::with_capacity(64 + dump.len() * 1024);
            let mut w = crate::consul::json::JsonWriter::new(&mut out, reply.pretty);
            if !one {
                w.begin_array();
            }
            for (node, services, checks) in &dump {
                crate::api::ui::write_node_info(&mut w, node, services.iter(), checks.iter());
            }
            if !one {
                w.end_array();
            }
            w.finish();
            crate::api::ui::send_with_headers(reply, headers(&meta, &secret), &out, gzip);
            Ok(())
        },
    )
}
