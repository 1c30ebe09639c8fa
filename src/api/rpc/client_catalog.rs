//! A client agent's catalog and health reads as Consul's typed calls: `Catalog.ListNodes`,
//! `ListServices`, `ServiceNodes` (with `Connect` for `/v1/catalog/connect`),
//! `NodeServices`, `NodeServiceList` and `GatewayServices`, `Health.ServiceNodes` (with
//! `Connect` or `Ingress` for `/v1/health/connect|ingress`), `NodeChecks`, `ServiceChecks`
//! and `ChecksInState`, as Consul's `catalog_endpoint.go` and `health_endpoint.go` on the
//! agent send them; and the catalog's writes naming another datacenter.
//!
//! The HTTP handler parses and checks the request as a server's would (so a bad `?filter`
//! or state is the same 400), then hands it here; the typed request carries the token and
//! the query options (blocking, consistency, filter) and the endpoint's own fields (tags,
//! node-meta, `?near` as the `Source` node — `_agent` is this agent's node, resolved here
//! as Consul's agent resolves it). The server's rows come back as the store's rows
//! (`consul::rpc::rows`) and are rendered by the functions that render a server's own HTTP
//! answer, so the body is the server's byte for byte; the headers come from the reply's
//! `QueryMeta`. `?passing` is applied here, as Consul's agent filters a health answer
//! itself; `?cached` goes through this agent's cache bookkeeping (`api::agent_cache`), which
//! adds `X-Cache` and `Age` as the locally answered read does.
//!
//! `?peer` reads make the local read's call and answer its empty form at the reply's
//! index (`api::peer`); `/v1/catalog/nodes?near` carries the
//! node as its `DCSpecificRequest`'s `Source`.

use super::client::{bad_reply, call, meta_of, query_options, read_timeout};
use crate::api::agent_cache::CacheLookup;
use crate::api::authz::request_secret;
use crate::api::catalog::{node_meta_filters, ServiceView};
use crate::api::{ApiError, Outcome, Reply, Request};
use crate::cluster::servers::Retry;
use crate::consul::json::JsonWriter;
use crate::consul::render;
use crate::consul::rpc::catalog::{
    read_indexed_gateway_services, ChecksInStateRequest, DcSpecificRequest, NodeSpecificRequest,
    QuerySource, ServiceSpecificRequest,
};
use crate::consul::rpc::rows::{
    read_indexed_check_service_nodes, read_indexed_health_checks, read_indexed_node_service_list,
    read_indexed_node_services, read_indexed_nodes, read_indexed_service_nodes,
    read_indexed_services,
};
use crate::consul::rpc::QueryMeta as RpcQueryMeta;
use crate::store::catalog::read::CheckServiceNode;
use crate::store::catalog::HealthCheck;

/// A catalog or health read naming another datacenter (`?dc=`), as its typed call naming
/// that datacenter (a client agent's server, or this server, hands it there); checked as
/// the handler checks it. `None` for the requests that still go as HTTP.
pub fn across_datacenters(
    ctx: &crate::api::Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    use crate::consul::filter;
    let path = request.path;
    if request.method == crate::proto::http::Method::Put {
        // A registration or deregistration: the handler's own parsing and command, sent
        // as `Catalog.Register` / `Deregister` naming the datacenter.
        return match path {
            "/v1/catalog/register" => Some(crate::api::catalog::register_in(
                ctx,
                request,
                Some(datacenter),
            )),
            "/v1/catalog/deregister" => Some(crate::api::catalog::deregister_in(
                ctx,
                request,
                Some(datacenter),
            )),
            _ => None,
        };
    }
    if request.method != crate::proto::http::Method::Get {
        return None;
    }
    let (name, missing) = (request.rest, |what: &str| {
        Err(ApiError::bad_request(format!("Missing {what} name")))
    });
    let filtered = |schema| crate::api::catalog::parse_filter(request, schema).map(|_| ());
    let options = match crate::api::query_options_in(ctx, &request.query) {
        Ok(options) => options,
        Err(error) => return Some(Err(error)),
    };
    let outcome = if path == "/v1/catalog/nodes" {
        filtered(filter::NODE).map(|()| nodes(ctx, request, options, datacenter))
    } else if path == "/v1/catalog/services" {
        filtered(filter::SERVICE_NODE).and_then(|()| services(ctx, request, options, datacenter))
    } else if let Some(view) = service_view(path) {
        if name.is_empty() {
            return Some(missing("service"));
        }
        match view {
            ServiceView::Catalog | ServiceView::Connect => filtered(filter::SERVICE_NODE)
                .and_then(|()| service_nodes(ctx, request, name, view, options, datacenter)),
            ServiceView::Checks => filtered(filter::HEALTH_CHECK)
                .map(|()| service_checks(ctx, request, name, options, datacenter)),
            _ => crate::api::health::passing_param(request).and_then(|passing| {
                filtered(filter::CHECK_SERVICE_NODE).and_then(|()| {
                    service_health(ctx, request, name, view, passing, options, datacenter)
                })
            }),
        }
    } else if let Some(as_list) = node_services_path(path) {
        if name.is_empty() {
            return Some(missing("node"));
        }
        filtered(filter::NODE_SERVICE)
            .map(|()| node_services(ctx, request, name, as_list, options, datacenter))
    } else if path.starts_with("/v1/catalog/gateway-services/") {
        if name.is_empty() {
            return Some(missing("gateway"));
        }
        Ok(gateway_services(ctx, request, name, options, datacenter))
    } else if path.starts_with("/v1/health/node/") {
        if name.is_empty() {
            return Some(missing("node"));
        }
        filtered(filter::HEALTH_CHECK)
            .map(|()| node_checks(ctx, request, name, options, datacenter))
    } else if path.starts_with("/v1/health/state/") {
        crate::api::health::check_state(name).and_then(|_| {
            filtered(filter::HEALTH_CHECK)
                .map(|()| checks_in_state(ctx, request, name, options, datacenter))
        })
    } else {
        return None;
    };
    Some(outcome)
}

/// Whether a path reads one node's services as a list (`/v1/catalog/node-services/`) or
/// as a map (`/v1/catalog/node/`); `None` for other paths.
fn node_services_path(path: &str) -> Option<bool> {
    if path.starts_with("/v1/catalog/node-services/") {
        Some(true)
    } else {
        path.starts_with("/v1/catalog/node/").then_some(false)
    }
}

/// The service view of a path that reads one service's instances or checks.
fn service_view(path: &str) -> Option<ServiceView> {
    [
        ("/v1/catalog/service/", ServiceView::Catalog),
        ("/v1/catalog/connect/", ServiceView::Connect),
        ("/v1/health/service/", ServiceView::Health),
        ("/v1/health/connect/", ServiceView::HealthConnect),
        ("/v1/health/ingress/", ServiceView::HealthIngress),
        ("/v1/health/checks/", ServiceView::Checks),
    ]
    .into_iter()
    .find_map(|(prefix, view)| path.starts_with(prefix).then_some(view))
}

/// Whether a read goes as its typed call (a client agent's, or a follower's read for the
/// leader): not when the request has one of the parameters named in `also`.
pub fn typed(
    ctx: &crate::api::Context,
    request: &Request,
    options: &crate::api::QueryOptions,
    also: &[&str],
) -> bool {
    ctx.reads_by_call(options) && !also.iter().any(|name| request.query.has(name))
}

/// The headers of a reply: `QueryMeta`'s, and Consul's filtered header when the token hid
/// rows and the request carried a token (an anonymous caller must not learn rows exist).
pub(super) fn headers(meta: &RpcQueryMeta, secret: &str) -> Vec<u8> {
    headers_with(meta, secret, None)
}

/// [`headers`], with the agent cache's `X-Cache` and `Age` for a `?cached` read.
fn headers_with(meta: &RpcQueryMeta, secret: &str, cache: Option<&CacheLookup>) -> Vec<u8> {
    let mut headers = Vec::with_capacity(192);
    let mut http_meta = meta_of(meta);
    http_meta.cache = cache.map(|cache| cache.meta(http_meta.index));
    http_meta.write_headers(&mut headers);
    if meta.results_filtered_by_acls && !secret.is_empty() {
        headers.extend_from_slice(crate::api::FILTERED_BY_ACLS_HEADER);
    }
    headers
}

/// Renders a JSON body with the request's layout and answers it with `headers`.
fn answer(reply: &mut Reply, headers: &[u8], write: impl FnOnce(&mut JsonWriter)) {
    let mut body = Vec::with_capacity(1024);
    let mut w = JsonWriter::new(&mut body, reply.pretty);
    write(&mut w);
    w.finish();
    reply.json_bytes(200, headers, &body);
}

/// What a reply's rendering needs of its request: the token (for the filtered header) and
/// the `?cached` read's cache entry.
struct Answering {
    secret: String,
    cache: Option<CacheLookup>,
}

impl Answering {
    fn headers(&self, meta: &RpcQueryMeta) -> Vec<u8> {
        headers_with(meta, &self.secret, self.cache.as_ref())
    }
}

/// The pieces every typed read shares: the token, the options, the node-meta filters, the
/// `?near` node and the cache entry.
struct Read<'r> {
    secret: String,
    options: crate::api::QueryOptions,
    node_meta: Vec<(String, String)>,
    /// `?near`, `_agent` resolved to this agent's node (empty: none).
    near: String,
    /// This agent's datacenter, the `Source`'s.
    here: String,
    cache: Option<CacheLookup>,
    /// `?peer`: nothing is imported from a peer, so the answer is the read's empty form
    /// at the reply's index ([`crate::api::peer`]).
    peer_empty: Option<crate::api::peer::Empty>,
    request: &'r Request<'r>,
}

impl<'r> Read<'r> {
    fn new(
        ctx: &crate::api::Context,
        request: &'r Request<'r>,
        options: crate::api::QueryOptions,
    ) -> Read<'r> {
        let config = ctx.config();
        let near = match request.query.get("near").unwrap_or("") {
            "_agent" => config.node_name.clone(),
            near => near.to_string(),
        };
        Read {
            secret: request_secret(ctx, request).into_owned(),
            options,
            node_meta: node_meta_filters(request),
            near,
            here: config.datacenter.clone(),
            cache: None,
            // A gateway's services take no `?peer` (their server handler reads none).
            peer_empty: crate::api::peer::named(request)
                .filter(|_| !request.path.starts_with("/v1/catalog/gateway-services/"))
                .map(|_| crate::api::peer::Empty::of_path(request.path)),
            request,
        }
    }

    /// The same read through the agent's cache when the request asks for it (`?cached`;
    /// the endpoints Consul's agent caches).
    fn cached(mut self, ctx: &crate::api::Context) -> Result<Read<'r>, ApiError> {
        self.cache = CacheLookup::of(ctx, self.request, &self.options)?;
        Ok(self)
    }

    fn meta_pairs(&self) -> Vec<(&str, &str)> {
        self.node_meta
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    fn rpc_options(&self) -> crate::consul::rpc::QueryOptions<'_> {
        let mut options = query_options(&self.options, &self.secret);
        options.use_cache = self.cache.is_some();
        options
    }

    /// A list of the datacenter, with the request's node-meta filters.
    fn dc_request<'s>(&'s self, datacenter: &'s str) -> Vec<u8> {
        DcSpecificRequest {
            datacenter,
            node_meta_filters: self.meta_pairs(),
            options: self.rpc_options(),
        }
        .encode()
    }

    /// [`Read::dc_request`] with the `?near` node as its `Source` (`Catalog.ListNodes`).
    fn nodes_request(&self, datacenter: &str) -> Vec<u8> {
        let request = DcSpecificRequest {
            datacenter,
            node_meta_filters: self.meta_pairs(),
            options: self.rpc_options(),
        };
        if self.near.is_empty() {
            return request.encode();
        }
        request.encode_with_source(&QuerySource {
            datacenter: &self.here,
            node: &self.near,
        })
    }

    /// One node's rows.
    fn node_request(&self, datacenter: &str, node: &str) -> Vec<u8> {
        NodeSpecificRequest {
            datacenter,
            node,
            options: self.rpc_options(),
            ..NodeSpecificRequest::default()
        }
        .encode()
    }

    /// The instances of `service`, with the request's `tag`s and `?near`.
    fn service_request<'s>(
        &'s self,
        datacenter: &'s str,
        service: &'s str,
    ) -> ServiceSpecificRequest<'s> {
        let tags: Vec<&str> = self.request.query.get_all("tag").collect();
        ServiceSpecificRequest {
            datacenter,
            service_name: service,
            node_meta_filters: self.meta_pairs(),
            tag_filter: !tags.is_empty(),
            service_tags: tags,
            source: QuerySource {
                datacenter: &self.here,
                node: &self.near,
            },
            options: self.rpc_options(),
            ..ServiceSpecificRequest::default()
        }
    }

    /// Makes the call; `respond` renders the reply's body given its headers.
    fn call(
        self,
        ctx: &crate::api::Context,
        datacenter: &str,
        method: &'static str,
        body: Vec<u8>,
        respond: impl FnOnce(&[u8], &Answering, &mut Reply) -> Result<(), ApiError> + 'static,
    ) -> Outcome {
        let timeout = read_timeout(&self.options);
        if let Some(empty) = self.peer_empty {
            return call(
                ctx,
                datacenter,
                method,
                body,
                timeout,
                Retry::Always,
                move |body, reply| {
                    // Only the reply's `QueryMeta` counts: its rows are the local ones.
                    let meta = crate::consul::rpc::read_reply(body, |_, _| Ok(false))
                        .map_err(bad_reply)?;
                    let mut headers = Vec::with_capacity(160);
                    super::client::meta_of(&meta).write_headers(&mut headers);
                    reply.json_bytes(200, &headers, &empty.body(reply.pretty));
                    Ok(())
                },
            );
        }
        let answering = Answering {
            secret: self.secret,
            cache: self.cache,
        };
        call(
            ctx,
            datacenter,
            method,
            body,
            timeout,
            Retry::Always,
            move |body, reply| respond(body, &answering, reply),
        )
    }
}

/// `GET /v1/catalog/nodes` (`?near` as the `Source`): `Catalog.ListNodes`.
pub fn nodes(
    ctx: &crate::api::Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let read = Read::new(ctx, request, options);
    let body = read.nodes_request(datacenter);
    read.call(
        ctx,
        datacenter,
        "Catalog.ListNodes",
        body,
        |body, answering, reply| {
            let (meta, nodes) = read_indexed_nodes(body).map_err(bad_reply)?;
            answer(reply, &answering.headers(&meta), |w| {
                w.begin_array();
                for node in &nodes {
                    render::node(w, node);
                }
                w.end_array();
            });
            Ok(())
        },
    )
}

/// `GET /v1/catalog/services` (`?cached`, `?filter`): `Catalog.ListServices`.
pub fn services(
    ctx: &crate::api::Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let read = Read::new(ctx, request, options).cached(ctx)?;
    let body = read.dc_request(datacenter);
    Ok(read.call(
        ctx,
        datacenter,
        "Catalog.ListServices",
        body,
        |body, answering, reply| {
            let (meta, services) = read_indexed_services(body).map_err(bad_reply)?;
            answer(reply, &answering.headers(&meta), |w| {
                w.begin_object();
                for (name, tags) in &services {
                    w.field_str_array(name, tags.iter().copied());
                }
                w.end_object();
            });
            Ok(())
        },
    ))
}

/// `GET /v1/catalog/service/<s>` and `/v1/catalog/connect/<s>` (`view`, `?cached`):
/// `Catalog.ServiceNodes`, with `Connect` for the latter.
pub fn service_nodes(
    ctx: &crate::api::Context,
    request: &Request,
    service: &str,
    view: ServiceView,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let read = Read::new(ctx, request, options).cached(ctx)?;
    let body = ServiceSpecificRequest {
        connect: view == ServiceView::Connect,
        ..read.service_request(datacenter, service)
    }
    .encode();
    Ok(read.call(
        ctx,
        datacenter,
        "Catalog.ServiceNodes",
        body,
        |body, answering, reply| {
            let (meta, rows) = read_indexed_service_nodes(body).map_err(bad_reply)?;
            answer(reply, &answering.headers(&meta), |w| {
                w.begin_array();
                for (node, service) in &rows {
                    render::service_node(w, node, service);
                }
                w.end_array();
            });
            Ok(())
        },
    ))
}

/// `GET /v1/catalog/node/<n>`: `Catalog.NodeServices`, the services keyed by ID (`null`
/// for a node that does not exist); `/v1/catalog/node-services/<n>` (`as_list`):
/// `Catalog.NodeServiceList`, the services as a list (`{"Node":null,"Services":[]}` for a
/// node that does not exist).
pub fn node_services(
    ctx: &crate::api::Context,
    request: &Request,
    node: &str,
    as_list: bool,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let read = Read::new(ctx, request, options);
    let body = read.node_request(datacenter, node);
    if as_list {
        return read.call(
            ctx,
            datacenter,
            "Catalog.NodeServiceList",
            body,
            |body, answering, reply| {
                let (meta, found) = read_indexed_node_service_list(body).map_err(bad_reply)?;
                answer(reply, &answering.headers(&meta), |w| {
                    w.begin_object();
                    match &found {
                        None => {
                            w.field_null("Node");
                            w.field_array("Services");
                            w.end_array();
                        }
                        Some((node, services)) => {
                            w.field_object("Node");
                            render::node_fields(w, node);
                            w.end_object();
                            w.field_array("Services");
                            for service in services {
                                render::node_service(w, service);
                            }
                            w.end_array();
                        }
                    }
                    w.end_object();
                });
                Ok(())
            },
        );
    }
    read.call(
        ctx,
        datacenter,
        "Catalog.NodeServices",
        body,
        |body, answering, reply| {
            let (meta, found) = read_indexed_node_services(body).map_err(bad_reply)?;
            let headers = answering.headers(&meta);
            let Some((node, mut services)) = found else {
                let body: &[u8] = if reply.pretty { b"null\n" } else { b"null" };
                reply.json_bytes(200, &headers, body);
                return Ok(());
            };
            // Keyed by service ID, in Go's sorted-key order.
            services.sort_by(|a, b| a.id.cmp(&b.id));
            answer(reply, &headers, |w| {
                w.begin_object();
                w.field_object("Node");
                render::node_fields(w, &node);
                w.end_object();
                w.field_object("Services");
                for service in &services {
                    w.field_object(&service.id);
                    render::node_service_fields(w, service);
                    w.end_object();
                }
                w.end_object();
                w.end_object();
            });
            Ok(())
        },
    )
}

/// `GET /v1/catalog/gateway-services/<gateway>`: `Catalog.GatewayServices` (the
/// `service:read` on the gateway is the server's to check).
pub fn gateway_services(
    ctx: &crate::api::Context,
    request: &Request,
    gateway: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let read = Read::new(ctx, request, options);
    let body = ServiceSpecificRequest {
        datacenter,
        service_name: gateway,
        options: read.rpc_options(),
        ..ServiceSpecificRequest::default()
    }
    .encode();
    read.call(
        ctx,
        datacenter,
        "Catalog.GatewayServices",
        body,
        |body, answering, reply| {
            let (meta, rows) = read_indexed_gateway_services(body).map_err(bad_reply)?;
            let rows: Vec<&crate::store::gateways::GatewayService> = rows.iter().collect();
            let body = crate::api::gateways::gateway_services_body(&rows, reply.pretty);
            reply.json_bytes(200, &answering.headers(&meta), &body);
            Ok(())
        },
    )
}

/// `GET /v1/health/service/<s>`, `/v1/health/connect/<s>` and `/v1/health/ingress/<s>`
/// (`view`, `?cached`): `Health.ServiceNodes`, with `Connect` or `Ingress` for the latter
/// two; `?passing` leaves out here the instances with a check that is not passing.
pub fn service_health(
    ctx: &crate::api::Context,
    request: &Request,
    service: &str,
    view: ServiceView,
    passing: bool,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let read = Read::new(ctx, request, options).cached(ctx)?;
    let body = ServiceSpecificRequest {
        connect: view == ServiceView::HealthConnect,
        ingress: view == ServiceView::HealthIngress,
        ..read.service_request(datacenter, service)
    }
    .encode();
    Ok(read.call(
        ctx,
        datacenter,
        "Health.ServiceNodes",
        body,
        move |body, answering, reply| {
            let (meta, rows) = read_indexed_check_service_nodes(body).map_err(bad_reply)?;
            answer(reply, &answering.headers(&meta), |w| {
                w.begin_array();
                for row in &rows {
                    let row = CheckServiceNode {
                        node: &row.node,
                        service: &row.service,
                        node_checks: &row.checks,
                        service_checks: &[],
                    };
                    if !passing || row.all_passing() {
                        render::check_service_node(w, &row);
                    }
                }
                w.end_array();
            });
            Ok(())
        },
    ))
}

/// Answers an `IndexedHealthChecks` reply as a list of checks.
fn checks_answer(body: &[u8], answering: &Answering, reply: &mut Reply) -> Result<(), ApiError> {
    let (meta, checks) = read_indexed_health_checks(body).map_err(bad_reply)?;
    answer(reply, &answering.headers(&meta), |w| {
        w.begin_array();
        for check in &checks {
            render::health_check(w, check as &HealthCheck);
        }
        w.end_array();
    });
    Ok(())
}

/// `GET /v1/health/node/<n>`: `Health.NodeChecks`.
pub fn node_checks(
    ctx: &crate::api::Context,
    request: &Request,
    node: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let read = Read::new(ctx, request, options);
    let body = read.node_request(datacenter, node);
    read.call(ctx, datacenter, "Health.NodeChecks", body, checks_answer)
}

/// `GET /v1/health/checks/<s>` (`?tag` as `ServiceTags`): `Health.ServiceChecks`.
pub fn service_checks(
    ctx: &crate::api::Context,
    request: &Request,
    service: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let read = Read::new(ctx, request, options);
    let body = read.service_request(datacenter, service).encode();
    read.call(ctx, datacenter, "Health.ServiceChecks", body, checks_answer)
}

/// `GET /v1/health/state/<state>`: `Health.ChecksInState` (the state already checked).
pub fn checks_in_state(
    ctx: &crate::api::Context,
    request: &Request,
    state: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let read = Read::new(ctx, request, options);
    let body = ChecksInStateRequest {
        datacenter,
        state,
        node_meta_filters: read.meta_pairs(),
        options: read.rpc_options(),
    }
    .encode();
    read.call(ctx, datacenter, "Health.ChecksInState", body, checks_answer)
}
