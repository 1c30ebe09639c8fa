//! The routing table: every endpoint of the HTTP API in one place.
//!
//! Each [`Route`] declares its path (exact, or a prefix whose remainder the handler gets as
//! [`Request::rest`]), the methods it serves, the body it accepts, whether it reads through
//! [`run_query`](super::run_query) and so may block, the ACL permission it needs, and its
//! handler. [`Route::serve`] is the one place that enforces the declarations: OPTIONS is
//! answered and other methods refused (405 with `Allow`) from the method list, and the
//! server loop sizes the body from [`body_limit`] before reading it.
//!
//! Lookup is a scan in table order, first match wins, so an exact path sits above any
//! prefix that would take it (`/v1/agent/service/register` above `/v1/agent/service/`), and
//! the busiest families come first, as they did in the chain of `if`s this table replaced.
//! The table's own tests check that no route is hidden behind an earlier one.

use super::authz::Acl;
use super::{
    acl, agent, agent_local, authz, catalog, config, connect, coordinate, debug, event,
    federation_state, gateways, health, host, intentions, keyring, kv, members, monitor, operator,
    peering, query, session, snapshot, status, txn, ui, ApiError, Context, Outcome, Reply, Request,
};
use crate::config::AgentConfig;
use crate::proto::http::{HttpLimits, Method};

/// What serves a route once its method is allowed.
pub type Handler = fn(&Context, &Request, &mut Reply) -> Result<Outcome, ApiError>;

/// Which request paths a route serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Exactly this path.
    Exact(&'static str),
    /// Every path that starts with this; the remainder (a KV key, a service name, an ID) is
    /// the request's `rest`.
    Prefix(&'static str),
}

impl Path {
    pub fn matches(self, path: &str) -> bool {
        match self {
            Path::Exact(exact) => path == exact,
            Path::Prefix(prefix) => path.starts_with(prefix),
        }
    }

    /// What follows the prefix in a matching `path`; empty for an exact path.
    pub fn rest(self, path: &str) -> &str {
        debug_assert!(
            self.matches(path),
            "rest of a path the route does not serve"
        );
        match self {
            Path::Exact(_) => "",
            Path::Prefix(prefix) => &path[prefix.len()..],
        }
    }

    fn text(self) -> &'static str {
        match self {
            Path::Exact(text) | Path::Prefix(text) => text,
        }
    }
}

/// The body a route accepts, decided from the request head before the body is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// Up to the agent's HTTP body limit.
    Standard,
    /// On PUT a KV value: up to `kv_max_value_size`, refused with Consul's KV message.
    KvValue,
    /// On PUT a snapshot archive: up to [`snapshot::SNAPSHOT_UPLOAD_BYTES_MAX`].
    Snapshot,
    /// A transaction: up to `txn_max_req_len`.
    Txn,
}

/// The first `api.http` series of each route (one series per method it serves), by its
/// position in [`ROUTES`].
fn metric_bases() -> &'static [usize] {
    static BASES: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    BASES.get_or_init(|| {
        let mut next = 0;
        ROUTES
            .iter()
            .map(|route| {
                let base = next;
                next += route.methods.len();
                base
            })
            .collect()
    })
}

/// Names every route's `api.http` series as Consul does: the method, and the route's
/// pattern without its leading `/` and with `/` as `_` (`/v1/kv/` is `v1_kv_`). Called once
/// at start, before requests are timed.
pub fn register_metric_series() {
    let mut series = Vec::new();
    for route in ROUTES {
        let label = route.path.text()[1..].replace('/', "_");
        for method in route.methods {
            series.push((method.as_str(), label.clone()));
        }
    }
    crate::telemetry::set_http_series(series);
}

/// The `api.http` series of a request a route serves, `None` for a method it does not.
pub fn metric_slot(route: &'static Route, method: Method) -> Option<usize> {
    // SAFETY: every route `find` returns is an element of `ROUTES`.
    let position = unsafe { (route as *const Route).offset_from(ROUTES.as_ptr()) } as usize;
    debug_assert!(std::ptr::eq(&ROUTES[position], route));
    let offset = route.methods.iter().position(|m| *m == method)?;
    Some(metric_bases()[position] + offset)
}

/// One endpoint: what it serves and what it needs.
#[derive(Debug)]
pub struct Route {
    pub path: Path,
    /// Methods served, in the order `Allow` lists them after `OPTIONS`.
    pub methods: &'static [Method],
    pub body: Body,
    /// The handler reads through `run_query`: it may answer later, parked in the watch
    /// registry (a blocking `?index` read, or a `?consistent` one waiting for its quorum
    /// round). No other route returns `Outcome::Block`.
    pub blocking: bool,
    pub acl: Acl,
    pub handler: Handler,
}

const GET: &[Method] = &[Method::Get];
const PUT: &[Method] = &[Method::Put];
const DELETE: &[Method] = &[Method::Delete];
const POST: &[Method] = &[Method::Post];
const GET_PUT: &[Method] = &[Method::Get, Method::Put];
const POST_PUT: &[Method] = &[Method::Post, Method::Put];
const GET_PUT_DELETE: &[Method] = &[Method::Get, Method::Put, Method::Delete];
const GET_POST_PUT_DELETE: &[Method] = &[Method::Get, Method::Post, Method::Put, Method::Delete];
const GET_DELETE: &[Method] = &[Method::Get, Method::Delete];
const GET_POST: &[Method] = &[Method::Get, Method::Post];

use Acl::{
    AclByMethod, AclRead, AgentRead, AgentWrite, CatalogDeregister, CatalogRegister, EventFromRest,
    Filtered, Key, KeyringByMethod, Management, NodeFromRest, OperatorByMethod, OperatorRead,
    OperatorWrite, ServiceFromBody, ServiceFromRest, SessionById, SessionCreate,
};
use Body::{KvValue, Snapshot, Standard, Txn};
use Path::{Exact, Prefix};

const BLOCKS: bool = true;
const ANSWERS: bool = false;

const fn route(
    path: Path,
    methods: &'static [Method],
    body: Body,
    blocking: bool,
    acl: Acl,
    handler: Handler,
) -> Route {
    Route {
        path,
        methods,
        body,
        blocking,
        acl,
        handler,
    }
}

/// Every route, in lookup order.
#[rustfmt::skip]
pub static ROUTES: &[Route] = &[
    //    path                                          methods              body      blocking acl         handler
    route(Prefix("/v1/kv/"),                            GET_PUT_DELETE,      KvValue,  BLOCKS,  Key,        kv::handle),
    route(Exact("/v1/kv"),                              GET_PUT_DELETE,      Standard, BLOCKS,  Key,        kv::handle),

    route(Exact("/v1/catalog/register"),                PUT,                 Standard, ANSWERS, CatalogRegister, catalog::register),
    route(Exact("/v1/catalog/deregister"),              PUT,                 Standard, ANSWERS, CatalogDeregister, catalog::deregister),
    route(Exact("/v1/catalog/nodes"),                   GET,                 Standard, BLOCKS,  Filtered,   catalog::nodes),
    route(Exact("/v1/catalog/services"),                GET,                 Standard, BLOCKS,  Filtered,   catalog::services),
    route(Prefix("/v1/catalog/service/"),               GET,                 Standard, BLOCKS,  Filtered,   catalog::service),
    route(Prefix("/v1/catalog/connect/"),               GET,                 Standard, BLOCKS,  Filtered,   catalog::connect),
    route(Prefix("/v1/catalog/node/"),                  GET,                 Standard, BLOCKS,  Filtered,   catalog::node),
    route(Prefix("/v1/catalog/node-services/"),         GET,                 Standard, BLOCKS,  Filtered,   catalog::node_services),
    route(Prefix("/v1/health/service/"),                GET,                 Standard, BLOCKS,  Filtered,   health::service),
    route(Prefix("/v1/health/connect/"),                GET,                 Standard, BLOCKS,  Filtered,   health::connect),
    route(Prefix("/v1/health/ingress/"),                GET,                 Standard, BLOCKS,  ServiceFromRest, health::ingress),
    route(Prefix("/v1/catalog/gateway-services/"),      GET,                 Standard, BLOCKS,  ServiceFromRest, gateways::catalog_gateway_services),
    route(Prefix("/v1/health/checks/"),                 GET,                 Standard, BLOCKS,  Filtered,   health::service_checks),
    route(Prefix("/v1/health/node/"),                   GET,                 Standard, BLOCKS,  Filtered,   health::node),
    route(Prefix("/v1/health/state/"),                  GET,                 Standard, BLOCKS,  Filtered,   health::state),

    route(Exact("/v1/agent/members"),                   GET,                 Standard, ANSWERS, Filtered,   members::members),
    route(Prefix("/v1/agent/join/"),                    PUT,                 Standard, ANSWERS, AgentWrite, members::join),
    route(Exact("/v1/agent/leave"),                     PUT,                 Standard, ANSWERS, AgentWrite, members::leave),
    route(Prefix("/v1/agent/force-leave/"),             PUT,                 Standard, ANSWERS, OperatorWrite, members::force_leave),
    route(Prefix("/v1/event/fire/"),                    PUT,                 Standard, ANSWERS, EventFromRest, event::fire),
    route(Exact("/v1/event/fire"),                      PUT,                 Standard, ANSWERS, EventFromRest, event::fire),
    route(Exact("/v1/event/list"),                      GET,                 Standard, ANSWERS, Filtered,   event::list),
    route(Exact("/v1/operator/keyring"),                GET_POST_PUT_DELETE, Standard, ANSWERS, KeyringByMethod, keyring::keyring),
    route(Prefix("/v1/coordinate/node/"),               GET,                 Standard, ANSWERS, NodeFromRest, coordinate::node),
    route(Exact("/v1/coordinate/nodes"),                GET,                 Standard, ANSWERS, Filtered,   coordinate::nodes),
    route(Exact("/v1/coordinate/datacenters"),          GET,                 Standard, ANSWERS, Acl::None,  coordinate::datacenters),
    // `node:write` on the body's `Node`, the rule of a registration without a service.
    route(Exact("/v1/coordinate/update"),               PUT,                 Standard, ANSWERS, CatalogRegister, coordinate::update),

    route(Exact("/v1/session/create"),                  PUT,                 Standard, ANSWERS, SessionCreate, session::create),
    route(Prefix("/v1/session/destroy/"),               PUT,                 Standard, ANSWERS, SessionById, session::destroy),
    route(Exact("/v1/session/destroy"),                 PUT,                 Standard, ANSWERS, SessionById, session::destroy),
    route(Prefix("/v1/session/renew/"),                 PUT,                 Standard, ANSWERS, SessionById, session::renew),
    route(Exact("/v1/session/renew"),                   PUT,                 Standard, ANSWERS, SessionById, session::renew),
    route(Prefix("/v1/session/info/"),                  GET,                 Standard, BLOCKS,  Filtered,   session::info),
    route(Exact("/v1/session/info"),                    GET,                 Standard, BLOCKS,  Filtered,   session::info),
    route(Prefix("/v1/session/node/"),                  GET,                 Standard, BLOCKS,  Filtered,   session::node_sessions),
    route(Exact("/v1/session/node"),                    GET,                 Standard, BLOCKS,  Filtered,   session::node_sessions),
    route(Exact("/v1/session/list"),                    GET,                 Standard, BLOCKS,  Filtered,   session::list),

    route(Exact("/v1/txn"),                             PUT,                 Txn,      BLOCKS,  Acl::Txn,   txn::handle),

    route(Exact("/v1/query"),                           GET_POST,            Standard, BLOCKS,  Acl::Query, query::general),
    route(Prefix("/v1/query/"),                         GET_PUT_DELETE,      Standard, BLOCKS,  Acl::Query, query::specific),

    route(Exact("/v1/agent/services"),                  GET,                 Standard, ANSWERS, Filtered,   agent_local::services),
    route(Exact("/v1/agent/checks"),                    GET,                 Standard, ANSWERS, Filtered,   agent_local::checks),
    route(Exact("/v1/agent/service/register"),          PUT,                 Standard, ANSWERS, ServiceFromBody, agent_local::register_service),
    route(Exact("/v1/agent/check/register"),            PUT,                 Standard, ANSWERS, AgentWrite, agent_local::register_check),
    route(Exact("/v1/agent/maintenance"),               PUT,                 Standard, ANSWERS, AgentWrite, agent_local::node_maintenance),
    route(Exact("/v1/agent/reload"),                    PUT,                 Standard, ANSWERS, AgentWrite, agent_local::reload),
    route(Exact("/v1/agent/metrics"),                   GET,                 Standard, ANSWERS, AgentRead,  agent_local::metrics),
    route(Exact("/v1/agent/metrics/stream"),            GET,                 Standard, ANSWERS, AgentRead,  agent_local::metrics_stream),
    route(Prefix("/v1/agent/service/deregister/"),      GET_PUT,             Standard, ANSWERS, AgentWrite, agent_local::deregister_service),
    route(Prefix("/v1/agent/service/maintenance/"),     PUT,                 Standard, ANSWERS, AgentWrite, agent_local::service_maintenance),
    route(Prefix("/v1/agent/service/"),                 GET,                 Standard, ANSWERS, AgentRead,  agent_local::service),
    route(Prefix("/v1/agent/check/deregister/"),        GET_PUT,             Standard, ANSWERS, AgentWrite, agent_local::deregister_check),
    route(Prefix("/v1/agent/check/update/"),            PUT,                 Standard, ANSWERS, AgentWrite, agent_local::update_check),
    route(Prefix("/v1/agent/check/pass/"),              GET_PUT,             Standard, ANSWERS, AgentWrite, agent_local::pass_check),
    route(Prefix("/v1/agent/check/warn/"),              GET_PUT,             Standard, ANSWERS, AgentWrite, agent_local::warn_check),
    route(Prefix("/v1/agent/check/fail/"),              GET_PUT,             Standard, ANSWERS, AgentWrite, agent_local::fail_check),
    route(Prefix("/v1/agent/health/service/name/"),     GET,                 Standard, ANSWERS, ServiceFromRest, agent_local::health_by_name),
    route(Prefix("/v1/agent/health/service/id/"),       GET,                 Standard, ANSWERS, AgentRead,  agent_local::health_by_id),

    route(Exact("/v1/status/leader"),                   GET,                 Standard, ANSWERS, Acl::None,  status::leader),
    route(Exact("/v1/status/peers"),                    GET,                 Standard, ANSWERS, Acl::None,  status::peers),
    route(Exact("/v1/agent/self"),                      GET,                 Standard, ANSWERS, AgentRead,  agent::agent_self),
    route(Exact("/v1/agent/monitor"),                   GET,                 Standard, ANSWERS, AgentRead,  monitor::monitor),
    route(Exact("/v1/agent/host"),                      GET,                 Standard, ANSWERS, OperatorRead, host::host),
    route(Exact("/v1/agent/version"),                   GET,                 Standard, ANSWERS, Acl::None,  host::version),
    route(Exact("/v1/catalog/datacenters"),             GET,                 Standard, ANSWERS, Acl::None,  status::datacenters),
    route(Exact("/v1/operator/raft/configuration"),     GET,                 Standard, ANSWERS, OperatorRead, operator::configuration),
    route(Exact("/v1/operator/autopilot/health"),       GET,                 Standard, ANSWERS, OperatorRead, operator::autopilot_health),
    route(Exact("/v1/operator/autopilot/state"),        GET,                 Standard, ANSWERS, OperatorRead, operator::autopilot_state),
    route(Exact("/v1/operator/autopilot/configuration"), GET_PUT,            Standard, ANSWERS, OperatorByMethod, operator::autopilot_configuration),
    route(Exact("/v1/operator/usage"),                  GET,                 Standard, BLOCKS,  OperatorRead, operator::usage),
    route(Exact("/v1/operator/raft/peer"),              DELETE,              Standard, ANSWERS, OperatorWrite, operator::remove_peer),
    route(Exact("/v1/operator/raft/transfer-leader"),   POST_PUT,            Standard, ANSWERS, OperatorWrite, operator::transfer_leader),
    route(Exact("/v1/snapshot"),                        GET_PUT,             Snapshot, ANSWERS, Management, snapshot::handle),
    route(Exact("/v1/agent/debug/faults"),              GET_PUT,             Standard, ANSWERS, OperatorByMethod, debug::faults),
    route(Prefix("/v1/internal/ui/"),                   GET,                 Standard, BLOCKS,  Filtered,   ui::handle),

    // Federation states (`api::federation_state`): Consul's three reads, and the primary's
    // carrier for a secondary leader's `FederationState.Apply`.
    route(Exact("/v1/internal/federation-states"),      GET,                 Standard, BLOCKS,  OperatorRead, federation_state::list),
    route(Exact("/v1/internal/federation-states/mesh-gateways"), GET,        Standard, BLOCKS,  Filtered,   federation_state::mesh_gateways),
    route(Prefix("/v1/internal/federation-state/"),     GET,                 Standard, BLOCKS,  OperatorRead, federation_state::get),

    // ACLs (`api::acl`): the endpoints decide their own checks where Consul's do.
    route(Exact("/v1/acl/bootstrap"),                   PUT,                 Standard, ANSWERS, Acl::None,  acl::bootstrap),
    route(Exact("/v1/acl/replication"),                 GET,                 Standard, ANSWERS, Acl::None,  acl::replication),
    route(Exact("/v1/acl/login"),                       POST_PUT,            Standard, ANSWERS, Acl::None,  acl::login),
    route(Exact("/v1/acl/logout"),                      POST_PUT,            Standard, ANSWERS, Acl::None,  acl::logout),
    route(Exact("/v1/acl/token/self"),                  GET,                 Standard, BLOCKS,  Acl::None,  acl::token_self),
    route(Exact("/v1/acl/token"),                       PUT,                 Standard, ANSWERS, AclByMethod, acl::token_create),
    route(Exact("/v1/acl/tokens"),                      GET,                 Standard, BLOCKS,  AclByMethod, acl::token_list),
    route(Prefix("/v1/acl/token/"),                     GET_PUT_DELETE,      Standard, BLOCKS,  AclByMethod, acl::token),
    route(Exact("/v1/acl/policy"),                      PUT,                 Standard, ANSWERS, AclByMethod, acl::policy_create),
    route(Exact("/v1/acl/policies"),                    GET,                 Standard, BLOCKS,  AclByMethod, acl::policy_list),
    route(Prefix("/v1/acl/policy/name/"),               GET,                 Standard, BLOCKS,  AclByMethod, acl::policy_by_name),
    route(Prefix("/v1/acl/policy/"),                    GET_PUT_DELETE,      Standard, BLOCKS,  AclByMethod, acl::policy),
    route(Exact("/v1/acl/role"),                        PUT,                 Standard, ANSWERS, AclByMethod, acl::role_create),
    route(Exact("/v1/acl/roles"),                       GET,                 Standard, BLOCKS,  AclByMethod, acl::role_list),
    route(Prefix("/v1/acl/role/name/"),                 GET,                 Standard, BLOCKS,  AclByMethod, acl::role_by_name),
    route(Prefix("/v1/acl/role/"),                      GET_PUT_DELETE,      Standard, BLOCKS,  AclByMethod, acl::role),
    route(Exact("/v1/acl/templated-policies"),          GET,                 Standard, ANSWERS, AclByMethod, acl::templated_policies),
    route(Prefix("/v1/acl/templated-policy/name/"),     GET,                 Standard, ANSWERS, AclByMethod, acl::templated_policy),
    route(Prefix("/v1/acl/templated-policy/preview/"),  POST,                Standard, ANSWERS, AclRead,    acl::templated_policy_preview),
    route(Exact("/v1/acl/auth-method"),                 PUT,                 Standard, ANSWERS, AclByMethod, acl::auth_method_create),
    route(Exact("/v1/acl/auth-methods"),                GET,                 Standard, BLOCKS,  AclByMethod, acl::auth_method_list),
    route(Prefix("/v1/acl/auth-method/"),               GET_PUT_DELETE,      Standard, BLOCKS,  AclByMethod, acl::auth_method),
    route(Exact("/v1/acl/binding-rule"),                PUT,                 Standard, ANSWERS, AclByMethod, acl::binding_rule_create),
    route(Exact("/v1/acl/binding-rules"),               GET,                 Standard, BLOCKS,  AclByMethod, acl::binding_rule_list),
    route(Prefix("/v1/acl/binding-rule/"),              GET_PUT_DELETE,      Standard, BLOCKS,  AclByMethod, acl::binding_rule),
    route(Prefix("/v1/agent/token/"),                   PUT,                 Standard, ANSWERS, AgentWrite, acl::agent_token),

    // The service mesh: config entries, intentions, the CA, leaf certificates.
    route(Exact("/v1/config"),                          PUT,                 Standard, ANSWERS, Acl::Custom(config::ACL_RULE), config::apply),
    route(Prefix("/v1/config/"),                        GET_DELETE,          Standard, BLOCKS,  Acl::Custom(config::ACL_RULE), config::handle),
    route(Exact("/v1/connect/intentions"),              GET_POST,            Standard, BLOCKS,  Acl::Custom(intentions::ACL_RULE), intentions::intentions),
    route(Exact("/v1/connect/intentions/exact"),        GET_PUT_DELETE,      Standard, BLOCKS,  Acl::Custom(intentions::ACL_RULE), intentions::exact),
    route(Exact("/v1/connect/intentions/match"),        GET,                 Standard, BLOCKS,  Acl::Custom(intentions::ACL_RULE), intentions::match_intentions),
    route(Exact("/v1/connect/intentions/check"),        GET,                 Standard, BLOCKS,  Acl::Custom(intentions::ACL_RULE), intentions::check),
    route(Prefix("/v1/connect/intentions/"),            GET_PUT_DELETE,      Standard, BLOCKS,  Acl::Custom(intentions::ACL_RULE), intentions::by_id),
    route(Exact("/v1/connect/ca/roots"),                GET,                 Standard, BLOCKS,  Acl::None,  connect::roots),
    route(Exact("/v1/connect/ca/configuration"),        GET_PUT,             Standard, BLOCKS,  OperatorByMethod, connect::configuration),
    route(Exact("/v1/agent/connect/ca/roots"),          GET,                 Standard, BLOCKS,  Acl::None,  connect::roots),
    route(Exact("/v1/agent/connect/authorize"),         POST_PUT,            Standard, ANSWERS, Acl::Custom(connect::AUTHORIZE_ACL_RULE), connect::authorize),
    route(Prefix("/v1/agent/connect/ca/leaf/"),         GET,                 Standard, ANSWERS, Acl::ServiceWriteFromRest, agent_local::connect_leaf),
    // Cluster peering (`api::peering`): `peering:read` on GET, `peering:write` otherwise.
    route(Exact("/v1/peering/token"),                   POST,                Standard, ANSWERS, Acl::Custom(peering::ACL_RULE), peering::generate_token),
    route(Exact("/v1/peering/establish"),               POST,                Standard, ANSWERS, Acl::Custom(peering::ACL_RULE), peering::establish),
    route(Exact("/v1/peerings"),                        GET,                 Standard, BLOCKS,  Acl::Custom(peering::ACL_RULE), peering::list),
    route(Prefix("/v1/peering/"),                       GET_DELETE,          Standard, BLOCKS,  Acl::Custom(peering::ACL_RULE), peering::by_name),
    route(Exact("/v1/exported-services"),               GET,                 Standard, BLOCKS,  Acl::Custom(peering::EXPORTED_SERVICES_RULE), peering::exported_services),
    route(Prefix("/v1/discovery-chain/"),               GET_POST,            Standard, BLOCKS,  Acl::ServiceReadFromRest, config::discovery_chain),
];

/// The route serving `path`, if any: the first in [`ROUTES`] that matches.
///
/// A path no route serves is offered to the web UI's files (`/`, `/robots.txt` and the
/// configurable content path, [`ui_assets::serve`](super::ui_assets::serve)) before it is a
/// 404; they need no permission, as Consul serves its UI's files without a token.
pub fn find(path: &str) -> Option<&'static Route> {
    ROUTES.iter().find(|route| route.path.matches(path))
}

/// The body limit for a request, decided from its head before the body is read.
pub struct BodyLimit {
    pub bytes_max: usize,
    /// Consul's message for a KV value over `kv_max_value_size`.
    pub kv_value: bool,
}

/// The body limit of a request for `route` (found on the raw path; none for a path no
/// route serves, whose request is refused once read).
pub fn body_limit(
    route: Option<&Route>,
    method: Method,
    config: &AgentConfig,
    limits: &HttpLimits,
) -> BodyLimit {
    let (bytes_max, kv_value) = match route.map(|r| r.body) {
        Some(KvValue) if method == Method::Put => (config.kv_max_value_size, true),
        Some(Snapshot) if method == Method::Put => (snapshot::SNAPSHOT_UPLOAD_BYTES_MAX, false),
        Some(Txn) => (config.txn_max_req_len, false),
        _ => (limits.body_bytes_max, false),
    };
    BodyLimit {
        bytes_max,
        kv_value,
    }
}

/// The 413 message for an oversized body, Consul's wording for KV values.
pub fn body_too_large_message(limit: &BodyLimit, body_bytes: u64) -> String {
    if limit.kv_value {
        format!(
            "Request body({body_bytes} bytes) too large, max size: {} bytes. See https://developer.hashicorp.com/docs/agent/config/config-files#kv_max_value_size.",
            limit.bytes_max
        )
    } else {
        format!(
            "Request body({body_bytes} bytes) too large, max size: {} bytes.",
            limit.bytes_max
        )
    }
}

/// Answers OPTIONS with `methods` (`Ok(false)`: the request is done) and refuses any other
/// method not among them with Consul's 405; `Ok(true)` lets the request through.
pub fn allow_method(
    methods: &'static [Method],
    request: &Request,
    reply: &mut Reply,
) -> Result<bool, ApiError> {
    if request.method == Method::Options {
        let mut headers = b"Allow: OPTIONS".to_vec();
        for method in methods {
            headers.push(b',');
            headers.extend_from_slice(method.as_str().as_bytes());
        }
        headers.extend_from_slice(b"\r\n");
        reply.send(200, None, &headers, b"");
        return Ok(false);
    }
    if !methods.contains(&request.method) {
        let range = &request.head.method_range;
        let method = std::str::from_utf8(&request.buf[range.start as usize..range.end as usize])
            .unwrap_or("?")
            .to_string();
        return Err(ApiError::MethodNotAllowed {
            method,
            allow: methods,
        });
    }
    Ok(true)
}

/// Refuses a namespace or admin partition, as Consul's community edition does on every
/// endpoint that reads them (`parseEntMeta` in its `agent/http_ce.go`): 400 naming the header
/// or parameter. The header is looked at before the parameter and namespaces before
/// partitions, so a request naming several gets the same message Consul gives. An empty value
/// names nothing and passes, as it does there.
pub fn refuse_enterprise_scope(request: &Request) -> Result<(), ApiError> {
    const NAMESPACES: &str = "Namespaces are a Consul Enterprise feature";
    const PARTITIONS: &str = "Partitions are a Consul Enterprise feature";
    let named = |value: Option<&str>| value.is_some_and(|v| !v.is_empty());
    let refusal = if named(request.header("X-Consul-Namespace")) {
        format!("Invalid header: \"X-Consul-Namespace\" - {NAMESPACES}")
    } else if named(request.query.get("ns")) {
        format!("Invalid query parameter: \"ns\" - {NAMESPACES}")
    } else if named(request.header("X-Consul-Partition")) {
        format!("Invalid header: \"X-Consul-Partition\" - {PARTITIONS}")
    } else if named(request.query.get("partition")) {
        format!("Invalid query parameter: \"partition\" - {PARTITIONS}")
    } else {
        return Ok(());
    };
    Err(ApiError::BadRequest(refusal))
}

/// Routes that answer `?dc=` with this datacenter's view or refuse another one, as Consul's
/// do: the agent's own endpoints aside (never forwarded), the lists that are the same from
/// every datacenter and the keyring (whose server hands it to every datacenter itself).
const ANSWERED_IN_THIS_DATACENTER: &[&str] = &[
    "/v1/event/list",
    "/v1/catalog/datacenters",
    "/v1/coordinate/datacenters",
    "/v1/operator/keyring",
];

impl Route {
    /// Answered from the agent's own state and gossip, never forwarded to a server:
    /// `/v1/agent/*`, user events and coordinates. On a client agent these are the
    /// requests checked there, with a token its servers resolved. (The gossip keyring is
    /// not one: it goes to a server as `Internal.KeyringOperation`, which checks it.)
    pub fn answered_by_agent(&self) -> bool {
        let path = self.path.text();
        [
            "/v1/agent/",
            "/v1/event/",
            "/v1/coordinate/",
            // Built into the agent, read from no server's tables; still `acl:read`, which
            // the agent checks as Consul's does.
            "/v1/acl/templated-polic",
        ]
        .iter()
        .any(|prefix| path.starts_with(prefix))
    }

    /// Whether a request naming another datacenter (`?dc=`) is answered by that
    /// datacenter's servers, as Consul forwards its RPC: everything but the agent's own
    /// endpoints and [`ANSWERED_IN_THIS_DATACENTER`].
    pub fn forwards_across_datacenters(&self) -> bool {
        !self.answered_by_agent() && !ANSWERED_IN_THIS_DATACENTER.contains(&self.path.text())
    }

    /// Answers OPTIONS with the allowed methods, refuses any other method the route does not
    /// declare and any namespace or partition, and runs the handler for the rest.
    pub fn serve(
        &self,
        ctx: &Context,
        request: &Request,
        reply: &mut Reply,
    ) -> Result<Outcome, ApiError> {
        debug_assert!(
            self.path.matches(request.path),
            "routed to a route that serves the path"
        );
        debug_assert_eq!(
            request.rest,
            self.path.rest(request.path),
            "rest from this route"
        );
        if !allow_method(self.methods, request, reply)? {
            return Ok(Outcome::Done);
        }
        refuse_enterprise_scope(request)?;
        if self.forwards_across_datacenters() {
            // Another datacenter's servers check and answer it, as Consul forwards the RPC
            // before it resolves the token.
            if let Some(datacenter) = super::other_datacenter(ctx, &request.query) {
                // Every route answered across datacenters has its family's typed call.
                let Some(outcome) =
                    super::rpc::client::across_datacenters(ctx, request, &datacenter)
                else {
                    return Err(ApiError::Internal(format!(
                        "rpc error: no call carries {} to datacenter {datacenter}",
                        self.path.text()
                    )));
                };
                return outcome.map(|outcome| {
                    super::translate::translate_typed(ctx, request.path, &datacenter, outcome)
                });
            }
        }
        // The one place a request's token is checked: no handler runs before its rule.
        // A client agent holds no ACL tables: what it forwards is checked by the server
        // that answers, and what it answers itself needs the agent's own permissions.
        if ctx.acl_enabled() && (!ctx.is_client() || self.answered_by_agent()) {
            let resolved = match authz::authorize(ctx, self.acl, request) {
                // A follower may not have applied a token the leader just created (through
                // this very server, a moment ago). Consul checks a forwarded call on the
                // leader; here too: the follower sends every write and every read that is
                // not `?stale` to the leader as its typed call, carrying the token, and the
                // leader — which knows every committed token — checks it and answers `ACL
                // not found` itself if it is unknown there too. Meanwhile the request holds
                // a token that may do nothing, so that nothing this server still answered
                // itself could grant more than the token. Stale reads and the agent's own
                // endpoints stay local, as in Consul.
                Err(error)
                    if error == authz::acl_not_found()
                        && !ctx.is_client()
                        && !ctx.is_leader()
                        && !self.answered_by_agent()
                        && !request.query.has("stale") =>
                {
                    log::debug!(
                        "acl: a token unknown here goes to the leader with {}",
                        self.path.text()
                    );
                    authz::unknown_here(request)
                }
                other => other?,
            };
            let previous = request.acl.set(resolved);
            debug_assert!(previous.is_ok(), "a request is authorized once");
        }
        debug_assert!(
            !ctx.acl_enabled() || request.acl.get().is_some() || ctx.is_client(),
            "{}: a handler runs only after its check",
            self.path.text()
        );
        let outcome = (self.handler)(ctx, request, reply);
        debug_assert!(
            self.blocking || !matches!(outcome, Ok(Outcome::Block(_))),
            "{} parked a query without declaring that it blocks",
            self.path.text()
        );
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_route_is_hidden_behind_an_earlier_one() {
        for (i, later) in ROUTES.iter().enumerate() {
            for earlier in &ROUTES[..i] {
                let hidden = match (earlier.path, later.path) {
                    (Exact(a), Exact(b)) => a == b,
                    (Exact(_), Prefix(_)) => false,
                    (Prefix(a), Exact(b) | Prefix(b)) => b.starts_with(a),
                };
                assert!(
                    !hidden,
                    "{:?} can never match: {:?} comes first",
                    later.path, earlier.path
                );
            }
        }
    }

    #[test]
    fn every_route_is_well_formed() {
        for route in ROUTES {
            let text = route.path.text();
            assert!(text.starts_with('/'), "{text}: paths are absolute");
            assert!(!route.methods.is_empty(), "{text}: serves some method");
            assert!(
                !route.methods.contains(&Method::Options),
                "{text}: OPTIONS is answered from the table, never declared"
            );
            if let Prefix(prefix) = route.path {
                assert!(
                    prefix.ends_with('/'),
                    "{prefix}: a prefix ends at a segment"
                );
            }
            if matches!(route.body, KvValue | Snapshot) {
                assert!(
                    route.methods.contains(&Method::Put),
                    "{text}: a PUT-only body limit on a route that takes no PUT"
                );
            }
        }
    }

    /// Routes anyone may call. A new route with `Acl::None` fails here until it is added
    /// deliberately, so no endpoint ships unchecked by accident.
    const OPEN_ROUTES: &[&str] = &[
        "/v1/status/leader",
        "/v1/status/peers",
        "/v1/catalog/datacenters",
        "/v1/coordinate/datacenters",
        "/v1/acl/bootstrap",
        "/v1/acl/replication",
        "/v1/acl/login",
        "/v1/acl/logout",
        "/v1/acl/token/self",
        // Consul's `AgentVersion` checks no ACL: the version is what clients negotiate with.
        "/v1/agent/version",
        "/v1/connect/ca/roots",
        "/v1/agent/connect/ca/roots",
    ];

    #[test]
    fn every_route_declares_its_acl_rule_and_open_routes_are_listed() {
        for route in ROUTES {
            let text = route.path.text();
            assert_eq!(
                route.acl == Acl::None,
                OPEN_ROUTES.contains(&text),
                "{text}: open to anyone only when listed in OPEN_ROUTES"
            );
            if text.starts_with("/v1/acl/") && route.acl != Acl::None {
                assert!(
                    matches!(route.acl, AclByMethod | AclRead),
                    "{text}: ACL objects need acl:*"
                );
            }
            if route.acl == Filtered {
                assert!(route.methods == GET, "{text}: only reads filter rows");
            }
        }
        assert_eq!(find("/v1/snapshot").map(|r| r.acl), Some(Management));
        assert_eq!(find("/v1/kv/a").map(|r| r.acl), Some(Key));
    }

    #[test]
    fn lookup_takes_exact_paths_before_prefixes_and_hands_over_the_rest() {
        let register = find("/v1/agent/service/register").expect("routed");
        assert_eq!(register.path, Exact("/v1/agent/service/register"));
        let service = find("/v1/agent/service/web-1").expect("routed");
        assert_eq!(service.path.rest("/v1/agent/service/web-1"), "web-1");
        let key = find("/v1/kv/a/b%2Fc").expect("routed");
        assert_eq!(key.path.rest("/v1/kv/a/b%2Fc"), "a/b%2Fc");
        assert_eq!(find("/v1/kv").map(|r| r.path), Some(Exact("/v1/kv")));
        assert!(find("/v1/kvx").is_none());
        assert!(find("/v1/agent/unknown").is_none());
        assert!(find("").is_none());
    }

    #[test]
    fn body_limits_follow_the_route_and_the_method() {
        let sources = crate::config::ConfigSources {
            dev: true,
            ..Default::default()
        };
        let config = crate::config::build(&sources).expect("dev defaults");
        let limits = HttpLimits::default();
        let limit = |path: &str, method| body_limit(find(path), method, &config, &limits);
        let kv = limit("/v1/kv/k", Method::Put);
        assert_eq!(
            (kv.bytes_max, kv.kv_value),
            (config.kv_max_value_size, true)
        );
        assert_eq!(
            limit("/v1/kv/k", Method::Get).bytes_max,
            limits.body_bytes_max
        );
        assert_eq!(
            limit("/v1/kv", Method::Put).bytes_max,
            limits.body_bytes_max
        );
        assert_eq!(
            limit("/v1/snapshot", Method::Put).bytes_max,
            snapshot::SNAPSHOT_UPLOAD_BYTES_MAX
        );
        assert_eq!(
            limit("/v1/snapshot", Method::Get).bytes_max,
            limits.body_bytes_max
        );
        assert_eq!(
            limit("/v1/txn", Method::Post).bytes_max,
            config.txn_max_req_len
        );
        assert_eq!(
            limit("/nowhere", Method::Put).bytes_max,
            limits.body_bytes_max
        );
        assert!(!limit("/v1/txn", Method::Put).kv_value);
    }
}
