//! The web UI's summaries as Consul's typed calls, on a client agent and for another
//! datacenter (`?dc=`, on a client agent or a server):
//!
//! - `/v1/internal/ui/services`: `Internal.ServiceDump` of every kind (`?filter` as its
//!   `Filter`), whose instances and gateway-service rows the agent summarizes;
//! - `/v1/internal/ui/gateway-services-nodes/<g>`: `Internal.GatewayServiceDump`, the
//!   gateway's links and their instances, summarized with the addresses an ingress gateway
//!   exposes;
//! - `/v1/internal/ui/service-topology/<s>?kind=`: `Internal.ServiceTopology`, the
//!   neighbours' instances with where each came from and its intention decision;
//! - `/v1/internal/ui/catalog-overview`: `Internal.CatalogOverview`, the catalog's health
//!   counts, rendered as the server renders them;
//! - `/v1/internal/ui/exported-services?peer=`: `Internal.ExportedServicesForPeer`;
//! - `/v1/internal/ui/metrics-proxy/…` names no datacenter a server could answer for: as in
//!   Consul, the agent proxies to its own configured backend (or refuses), whatever `?dc=`
//!   says, and no server is asked.
//!
//! Invariants: the HTTP handler's checks run first (a bad `?filter` or kind is the same
//! 400 before any call); the server selects the rows, filters them by the token and
//! reports whether it did (`QueryMeta`'s `ResultsFilteredByACLs`); the agent summarizes the
//! rows with the functions the server's own handler uses (`api::ui`, `api::ui_summary`,
//! `api::ui_topology`), so the body is the server's byte for byte (gzip-coded as the
//! server's is); the headers come from the reply's `QueryMeta`.

use super::client::{bad_reply, call, read_timeout};
use super::client_catalog::headers;
use crate::api::authz::request_secret;
use crate::api::{ApiError, Context, Outcome, QueryOptions, Request};
use crate::cluster::servers::Retry;
use crate::consul::rpc::catalog::ServiceSpecificRequest;
use crate::consul::rpc::internal::{
    decode_catalog_summary, decode_exported_services, read_gateway_service_dump, read_service_dump,
    ServiceDumpRequest,
};
use crate::store::catalog::rows::fold;

/// The UI's requests naming another datacenter (`?dc=`), as their typed calls naming it;
/// `None` for other requests (the node reads are `client_internal`'s).
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    let rest = request.path.strip_prefix("/v1/internal/ui/")?;
    if request.method != crate::proto::http::Method::Get {
        return None;
    }
    if rest == "metrics-proxy" || rest.starts_with("metrics-proxy/") {
        // Consul's metrics proxy is the agent's own: `?dc=` travels to the backend.
        return Some(crate::api::ui::metrics_proxy(ctx));
    }
    let options = match crate::api::query_options_in(ctx, &request.query) {
        Ok(options) => options,
        Err(error) => return Some(Err(error)),
    };
    if rest == "services" {
        return Some(services(ctx, request, options, datacenter));
    }
    if rest == "catalog-overview" {
        return Some(Ok(catalog_overview(ctx, request, options, datacenter)));
    }
    if rest == "exported-services" {
        return Some(
            crate::api::ui::exported_services_peer(request)
                .map(|peer| exported_services(ctx, request, peer, options, datacenter)),
        );
    }
    if let Some(gateway) = rest.strip_prefix("gateway-services-nodes/") {
        if gateway.is_empty() {
            return Some(Err(ApiError::bad_request("Missing gateway name")));
        }
        return Some(Ok(gateway_services_nodes(
            ctx, request, gateway, options, datacenter,
        )));
    }
    if let Some(service) = rest.strip_prefix("service-topology/") {
        if service.is_empty() {
            return Some(Err(ApiError::bad_request("Missing service name")));
        }
        return Some(
            crate::api::ui_topology::TopologyKind::parse(request.query.get("kind"))
                .map(|kind| service_topology(ctx, request, service, kind, options, datacenter)),
        );
    }
    None
}

/// `GET /v1/internal/ui/catalog-overview`: `Internal.CatalogOverview` (`operator:read`,
/// checked by the server), its summary rendered by the server handler's own function.
pub fn catalog_overview(
    ctx: &Context,
    request: &Request,
    options: QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = crate::consul::rpc::catalog::DcSpecificRequest {
        datacenter,
        node_meta_filters: Vec::new(),
        options: super::client::query_options(&options, &secret),
    }
    .encode();
    call(
        ctx,
        datacenter,
        "Internal.CatalogOverview",
        body,
        read_timeout(&options),
        Retry::Always,
        move |body, reply| {
            let (meta, summary) = decode_catalog_summary(body).map_err(bad_reply)?;
            let answer = crate::api::ui::overview_body(&summary, reply.pretty);
            crate::api::ui::send_with_headers(reply, headers(&meta, &secret), &answer, false);
            Ok(())
        },
    )
}

/// `GET /v1/internal/ui/exported-services?peer=`: `Internal.ExportedServicesForPeer`,
/// the names rendered as the server's handler renders its list.
pub fn exported_services(
    ctx: &Context,
    request: &Request,
    peer: &str,
    options: QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = ServiceDumpRequest {
        datacenter,
        service_kind: None,
        peer_name: peer,
        options: super::client::query_options(&options, &secret),
    }
    .encode();
    call(
        ctx,
        datacenter,
        "Internal.ExportedServicesForPeer",
        body,
        read_timeout(&options),
        Retry::Always,
        move |body, reply| {
            let (meta, names) = decode_exported_services(body).map_err(bad_reply)?;
            let answer = crate::api::ui::exported_services_body(&names, reply.pretty);
            crate::api::ui::send_with_headers(reply, headers(&meta, &secret), &answer, false);
            Ok(())
        },
    )
}

/// The datacenter an answer describes: the one named, else this agent's.
fn answering(ctx: &Context, datacenter: &str) -> String {
    if datacenter.is_empty() {
        ctx.config().datacenter.clone()
    } else {
        datacenter.to_string()
    }
}

/// `GET /v1/internal/ui/services` (`?filter`, `?peer`): `Internal.ServiceDump` of every
/// kind. Nothing is imported without peering, so a `?peer` list is empty at the dump's
/// index, as the server's own handler answers it.
pub fn services(
    ctx: &Context,
    request: &Request,
    options: QueryOptions,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    crate::api::catalog::parse_filter(request, crate::consul::filter::CHECK_SERVICE_NODE)?;
    let secret = request_secret(ctx, request).into_owned();
    let peer = request.query.get("peer").is_some_and(|p| !p.is_empty());
    let gzip = crate::api::ui::accepts_gzip(request.header("Accept-Encoding"));
    let body = ServiceDumpRequest {
        datacenter,
        service_kind: None,
        peer_name: "",
        options: super::client::query_options(&options, &secret),
    }
    .encode();
    Ok(call(
        ctx,
        datacenter,
        "Internal.ServiceDump",
        body,
        read_timeout(&options),
        Retry::Always,
        move |body, reply| {
            let (mut meta, rows, links) = read_service_dump(body).map_err(bad_reply)?;
            let answer = if peer {
                meta.results_filtered_by_acls = false;
                crate::api::ui::services_body(Vec::new(), &[], reply.pretty)
            } else {
                let mut hidden = false;
                let summaries = crate::api::ui_summary::summarize(
                    rows.iter().map(|row| row.as_row()),
                    None,
                    &crate::api::authz::RowFilter::default(),
                    &mut hidden,
                );
                let links: Vec<_> = links.iter().collect();
                crate::api::ui::services_body(summaries, &links, reply.pretty)
            };
            crate::api::ui::send_with_headers(reply, headers(&meta, &secret), &answer, gzip);
            Ok(())
        },
    ))
}

/// `GET /v1/internal/ui/gateway-services-nodes/<gateway>`: `Internal.GatewayServiceDump`
/// (`service:read` on the gateway, checked by the server). The dump repeats a service's
/// instances for each of its links (an ingress gateway may link it on several ports); the
/// summary counts them once, as the server's handler does.
pub fn gateway_services_nodes(
    ctx: &Context,
    request: &Request,
    gateway: &str,
    options: QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let gzip = crate::api::ui::accepts_gzip(request.header("Accept-Encoding"));
    let described = answering(ctx, datacenter);
    let domains = crate::api::ui::ingress_domains(ctx.config());
    let body = ServiceSpecificRequest {
        datacenter,
        service_name: gateway,
        options: super::client::query_options(&options, &secret),
        ..ServiceSpecificRequest::default()
    }
    .encode();
    call(
        ctx,
        datacenter,
        "Internal.GatewayServiceDump",
        body,
        read_timeout(&options),
        Retry::Always,
        move |body, reply| {
            let (meta, dump) = read_gateway_service_dump(body).map_err(bad_reply)?;
            let mut links = Vec::new();
            let mut instances = Vec::new();
            // The link each run of entries belongs to, and whether its service's instances
            // are counted (only under its first link).
            let mut current: Option<(String, u16, bool)> = None;
            for (instance, link) in &dump {
                let name = fold(&link.service).into_owned();
                let same = current
                    .as_ref()
                    .is_some_and(|(n, port, _)| *n == name && *port == link.port);
                if !same {
                    let first = !links
                        .iter()
                        .any(|l: &&crate::store::gateways::GatewayService| {
                            *fold(&l.service) == *name
                        });
                    links.push(link);
                    current = Some((name, link.port, first));
                }
                let counted = current.as_ref().is_some_and(|(_, _, first)| *first);
                if let (Some(row), true) = (instance, counted) {
                    instances.push(row.as_row());
                }
            }
            let answer = crate::api::ui::gateway_services_nodes_body(
                &links,
                instances.into_iter(),
                &described,
                &domains,
                reply.pretty,
            );
            crate::api::ui::send_with_headers(reply, headers(&meta, &secret), &answer, gzip);
            Ok(())
        },
    )
}

/// `GET /v1/internal/ui/service-topology/<service>?kind=`: `Internal.ServiceTopology`
/// (`service:read` on the service, checked by the server).
pub fn service_topology(
    ctx: &Context,
    request: &Request,
    service: &str,
    kind: crate::api::ui_topology::TopologyKind,
    options: QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let described = answering(ctx, datacenter);
    let body = ServiceSpecificRequest {
        datacenter,
        service_name: service,
        service_kind: kind.as_str(),
        options: super::client::query_options(&options, &secret),
        ..ServiceSpecificRequest::default()
    }
    .encode();
    call(
        ctx,
        datacenter,
        "Internal.ServiceTopology",
        body,
        read_timeout(&options),
        Retry::Always,
        move |body, reply| {
            let topology =
                crate::consul::rpc::internal::read_service_topology(body).map_err(bad_reply)?;
            let view = crate::api::ui_topology::view_of(&topology);
            let answer = crate::api::ui_topology::topology_body(&view, &described, reply.pretty);
            reply.json_bytes(200, &headers(&topology.meta, &secret), &answer);
            Ok(())
        },
    )
}
