//! A client agent's catalog and health reads as Consul's typed calls: `Catalog.ListNodes`,
//! `ListServices`, `ServiceNodes` and `NodeServices`, `Health.ServiceNodes`, `NodeChecks`,
//! `ServiceChecks` and `ChecksInState`, as Consul's `catalog_endpoint.go` and
//! `health_endpoint.go` on the agent send them.
//!
//! The HTTP handler parses and checks the request as a server's would (so a bad `?filter`
//! or state is the same 400), then hands it here; the typed request carries the token and
//! the query options (blocking, consistency, filter) and the endpoint's own fields (tags,
//! node-meta). The server's rows come back as the store's rows (`consul::rpc::rows`) and
//! are rendered by the functions that render a server's own HTTP answer, so the body is
//! the server's byte for byte; the headers come from the reply's `QueryMeta`. `?passing`
//! is applied here, as Consul's agent filters a health answer itself.
//!
//! Reads a server answers differently from these calls stay forwarded as HTTP for now (the
//! handlers decide, [`typed`]): `?near` (the typed requests carry no `Source` yet),
//! `?cached` (the agent cache), `?peer`, the Connect and ingress views.

use super::client::{bad_reply, call, meta_of, query_options, read_timeout};
use crate::api::authz::request_secret;
use crate::api::catalog::node_meta_filters;
use crate::api::{ApiError, Outcome, Reply, Request};
use crate::cluster::servers::Retry;
use crate::consul::json::JsonWriter;
use crate::consul::render;
use crate::consul::rpc::catalog::{
    ChecksInStateRequest, DcSpecificRequest, NodeSpecificRequest, ServiceSpecificRequest,
};
use crate::consul::rpc::rows::{
    read_indexed_check_service_nodes, read_indexed_health_checks, read_indexed_node_services,
    read_indexed_nodes, read_indexed_service_nodes, read_indexed_services,
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
    let untyped = ["near", "cached", "peer"]
        .iter()
        .any(|name| request.query.has(name));
    if request.method != crate::proto::http::Method::Get || untyped {
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
        if request.query.has("filter") {
            return None;
        }
        Ok(services(ctx, request, options, datacenter))
    } else if path.starts_with("/v1/catalog/service/") {
        if name.is_empty() {
            return Some(missing("service"));
        }
        filtered(filter::SERVICE_NODE)
            .map(|()| service_nodes(ctx, request, name, options, datacenter))
    } else if path.starts_with("/v1/catalog/node/") {
        if name.is_empty() {
            return Some(missing("node"));
        }
        filtered(filter::NODE_SERVICE)
            .map(|()| node_services(ctx, request, name, options, datacenter))
    } else if path.starts_with("/v1/health/service/") {
        if name.is_empty() {
            return Some(missing("service"));
        }
        crate::api::health::passing_param(request).and_then(|passing| {
            filtered(filter::CHECK_SERVICE_NODE)
                .map(|()| service_health(ctx, request, name, passing, options, datacenter))
        })
    } else if path.starts_with("/v1/health/node/") {
        if name.is_empty() {
            return Some(missing("node"));
        }
        filtered(filter::HEALTH_CHECK)
            .map(|()| node_checks(ctx, request, name, options, datacenter))
    } else if path.starts_with("/v1/health/checks/") {
        if request.query.has("tag") {
            return None;
        }
        if name.is_empty() {
            return Some(missing("service"));
        }
        filtered(filter::HEALTH_CHECK)
            .map(|()| service_checks(ctx, request, name, options, datacenter))
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

/// Whether a read goes as its typed call (a client agent's, or a follower's read for the
/// leader): not for the parameters the typed requests do not carry yet (`near`, `cached`,
/// `peer`), nor the ones named in `also`.
pub fn typed(
    ctx: &crate::api::Context,
    request: &Request,
    options: &crate::api::QueryOptions,
    also: &[&str],
) -> bool {
    ctx.reads_by_call(options)
        && !["near", "cached", "peer"]
            .iter()
            .chain(also)
            .any(|name| request.query.has(name))
}

/// The headers of a reply: `QueryMeta`'s, and Consul's filtered header when the token hid
/// rows and the request carried a token (an anonymous caller must not learn rows exist).
pub(super) fn headers(meta: &RpcQueryMeta, secret: &str) -> Vec<u8> {
    let mut headers = Vec::with_capacity(192);
    meta_of(meta).write_headers(&mut headers);
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

/// The pieces every typed read shares: the token, the options, the node-meta filters.
struct Read<'r> {
    secret: String,
    options: crate::api::QueryOptions,
    node_meta: Vec<(String, String)>,
    request: &'r Request<'r>,
}

impl<'r> Read<'r> {
    fn new(
        ctx: &crate::api::Context,
        request: &'r Request<'r>,
        options: crate::api::QueryOptions,
    ) -> Read<'r> {
        Read {
            secret: request_secret(ctx, request).into_owned(),
            options,
            node_meta: node_meta_filters(request),
            request,
        }
    }

    fn meta_pairs(&self) -> Vec<(&str, &str)> {
        self.node_meta
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    fn rpc_options(&self) -> crate::consul::rpc::QueryOptions<'_> {
        query_options(&self.options, &self.secret)
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

    /// The instances of `service`, with the request's `tag`s.
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
        respond: impl FnOnce(&[u8], String, &mut Reply) -> Result<(), ApiError> + 'static,
    ) -> Outcome {
        let timeout = read_timeout(&self.options);
        let secret = self.secret;
        call(
            ctx,
            datacenter,
            method,
            body,
            timeout,
            Retry::Always,
            move |body, reply| respond(body, secret, reply),
        )
    }
}

/// `GET /v1/catalog/nodes`: `Catalog.ListNodes`.
pub fn nodes(
    ctx: &crate::api::Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let read = Read::new(ctx, request, options);
    let body = read.dc_request(datacenter);
    read.call(
        ctx,
        datacenter,
        "Catalog.ListNodes",
        body,
        |body, secret, reply| {
            let (meta, nodes) = read_indexed_nodes(body).map_err(bad_reply)?;
            answer(reply, &headers(&meta, &secret), |w| {
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

/// `GET /v1/catalog/services`: `Catalog.ListServices`.
pub fn services(
    ctx: &crate::api::Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let read = Read::new(ctx, request, options);
    let body = read.dc_request(datacenter);
    read.call(
        ctx,
        datacenter,
        "Catalog.ListServices",
        body,
        |body, secret, reply| {
            let (meta, services) = read_indexed_services(body).map_err(bad_reply)?;
            answer(reply, &headers(&meta, &secret), |w| {
                w.begin_object();
                for (name, tags) in &services {
                    w.field_str_array(name, tags.iter().copied());
                }
                w.end_object();
            });
            Ok(())
        },
    )
}

/// `GET /v1/catalog/service/<s>`: `Catalog.ServiceNodes`.
pub fn service_nodes(
    ctx: &crate::api::Context,
    request: &Request,
    service: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let read = Read::new(ctx, request, options);
    let body = read.service_request(datacenter, service).encode();
    read.call(
        ctx,
        datacenter,
        "Catalog.ServiceNodes",
        body,
        |body, secret, reply| {
            let (meta, rows) = read_indexed_service_nodes(body).map_err(bad_reply)?;
            answer(reply, &headers(&meta, &secret), |w| {
                w.begin_array();
                for (node, service) in &rows {
                    render::service_node(w, node, service);
                }
                w.end_array();
            });
            Ok(())
        },
    )
}

/// `GET /v1/catalog/node/<n>`: `Catalog.NodeServices`, the services keyed by ID (`null`
/// for a node that does not exist).
pub fn node_services(
    ctx: &crate::api::Context,
    request: &Request,
    node: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let read = Read::new(ctx, request, options);
    let body = read.node_request(datacenter, node);
    read.call(
        ctx,
        datacenter,
        "Catalog.NodeServices",
        body,
        |body, secret, reply| {
            let (meta, found) = read_indexed_node_services(body).map_err(bad_reply)?;
            let headers = headers(&meta, &secret);
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

/// `GET /v1/health/service/<s>`: `Health.ServiceNodes`; `?passing` leaves out here the
/// instances with a check that is not passing.
pub fn service_health(
    ctx: &crate::api::Context,
    request: &Request,
    service: &str,
    passing: bool,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let read = Read::new(ctx, request, options);
    let body = read.service_request(datacenter, service).encode();
    read.call(
        ctx,
        datacenter,
        "Health.ServiceNodes",
        body,
        move |body, secret, reply| {
            let (meta, rows) = read_indexed_check_service_nodes(body).map_err(bad_reply)?;
            answer(reply, &headers(&meta, &secret), |w| {
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
    )
}

/// Answers an `IndexedHealthChecks` reply as a list of checks.
fn checks_answer(body: &[u8], secret: &str, reply: &mut Reply) -> Result<(), ApiError> {
    let (meta, checks) = read_indexed_health_checks(body).map_err(bad_reply)?;
    answer(reply, &headers(&meta, secret), |w| {
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
    read.call(
        ctx,
        datacenter,
        "Health.NodeChecks",
        body,
        |body, secret, reply| checks_answer(body, &secret, reply),
    )
}

/// `GET /v1/health/checks/<s>`: `Health.ServiceChecks`.
pub fn service_checks(
    ctx: &crate::api::Context,
    request: &Request,
    service: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let read = Read::new(ctx, request, options);
    let body = read.service_request(datacenter, service).encode();
    read.call(
        ctx,
        datacenter,
        "Health.ServiceChecks",
        body,
        |body, secret, reply| checks_answer(body, &secret, reply),
    )
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
    read.call(
        ctx,
        datacenter,
        "Health.ChecksInState",
        body,
        |body, secret, reply| checks_answer(body, &secret, reply),
    )
}
