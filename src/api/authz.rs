//! Request authorization: which token a request carries, what it may do, and the check each
//! route's [`Acl`] rule makes before its handler runs.
//!
//! [`Route::serve`](super::routes::Route::serve) is the only caller of [`authorize`]: with
//! `acl.enabled` it resolves the request's token (`?token`, `X-Consul-Token`,
//! `Authorization: Bearer`; else the agent's `default` token; else anonymous) through the
//! shard's authorizer cache, checks the route's rule, and leaves the resolved token on the
//! request ([`Request::acl`](super::Request)) for handlers that filter rows. With ACLs off
//! nothing here runs, and handlers see no token (and filter nothing).
//!
//! A rule that depends on the body (a catalog registration, a transaction, a service
//! definition) reads the body here, so a handler never runs before its check; the handler
//! decodes the body again, which costs a second parse only when ACLs are on.
//!
//! Errors are Consul's: 403 `ACL not found` for an unknown or expired token, 403
//! `Permission denied: token with AccessorID '…' lacks permission '…' on "…"` for a denial.

use super::{ApiError, Context, Request};
use crate::consul::body::{parse_json, Obj};
use crate::proto::http::Method;
use crate::store::acl::authorizer::{Authorizer, Check, Denial};
use crate::store::catalog::Registration;
use crate::store::{catalog, session};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;

/// The ACL rule a route's requests are checked against ([`check`]).
///
/// Most permissions depend on the request (the key in the path, the service in the body),
/// so the column names a rule rather than a fixed permission; [`Route::serve`] resolves the
/// token and applies the rule before the handler runs, so no handler runs unchecked.
/// Lists Consul filters row by row are `Filtered`: the handler leaves out the rows the
/// request's token may not read ([`authz::RowFilter`]) and says so with
/// `X-Consul-Results-Filtered-By-ACLs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acl {
    /// Anyone: status, the UI, and the ACL endpoints that authenticate by themselves
    /// (bootstrap, login, logout, token/self).
    None,
    /// The handler filters rows by the request's token.
    Filtered,
    /// `acl:read` on GET, `acl:write` otherwise.
    AclByMethod,
    /// `acl:read` whatever the method (a templated policy's preview, a POST).
    AclRead,
    /// `acl:write`, what a management token has: snapshots.
    Management,
    OperatorRead,
    OperatorWrite,
    /// `operator:read` on GET, `operator:write` otherwise.
    OperatorByMethod,
    /// `keyring:read` on GET, `keyring:write` otherwise.
    KeyringByMethod,
    /// KV: `key:read` on GET of a key (listings filtered), `key:write` on PUT and DELETE,
    /// write on the whole prefix for a recursive delete.
    Key,
    /// Each operation needs what the same single request would.
    Txn,
    /// `service:read` on the service in the path.
    ServiceFromRest,
    /// `node:read` on the node in the path.
    NodeFromRest,
    /// `session:write` on the node of the session in the path.
    SessionById,
    /// `session:write` on the body's node (default: the agent's).
    SessionCreate,
    /// `event:write` on the event name in the path.
    EventFromRest,
    /// `agent:read` on this agent's node.
    AgentRead,
    /// `agent:write` on this agent's node.
    AgentWrite,
    /// `service:write` on the body's service `Name`.
    ServiceFromBody,
    /// `node:write` on the body's node and `service:write` on its service.
    CatalogRegister,
    /// `service:write` on the service deregistered, else `node:write` on the node.
    CatalogDeregister,
    /// Prepared queries: `query:write` on the name of a query written (the body's, and the
    /// stored one's on update and delete), `query:read` on one read or explained; lists
    /// and executions filter their rows.
    Query,
    /// `service:write` on the service in the path.
    ServiceWriteFromRest,
    /// `service:read` on the service in the path.
    ServiceReadFromRest,
    /// A rule its handler module writes, for checks that read the handler's own request
    /// shapes (a config entry's body, an intention's destination, a CSR's service).
    Custom(CustomRule),
}

/// An ACL check written beside the handler it guards, named in the route's row. `authz`
/// calls it without knowing the handler module, so the rule of a route is read in one
/// place (the row) and its logic in another (the handler's module), with no edge back.
#[derive(Clone, Copy)]
pub struct CustomRule {
    /// What the rule checks, for the routing table's listing, its tests and `Debug`.
    pub name: &'static str,
    pub check: fn(&Context, &Request, &Authz) -> Result<(), ApiError>,
}

/// Rules are equal when their names are: two rows with one rule share its name, and
/// function addresses are not a stable identity.
impl PartialEq for CustomRule {
    fn eq(&self, other: &CustomRule) -> bool {
        self.name == other.name
    }
}

impl Eq for CustomRule {}

impl std::fmt::Debug for CustomRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Custom({})", self.name)
    }
}

/// Most operations a transaction may hold for the per-operation check (Consul's limit on a
/// transaction's operations is 128; a body over that is refused by the handler anyway).
pub const TXN_CHECKED_OPS_MAX: usize = 1024;

/// A request's resolved token.
#[derive(Clone, Debug)]
pub struct Authz {
    pub accessor_id: Arc<str>,
    /// The secret the request authenticated with (empty for anonymous).
    pub secret_id: Arc<str>,
    pub authorizer: Arc<Authorizer>,
}

impl Authz {
    /// The 403 answer for a denial, in Consul's words.
    pub fn deny(&self, denial: Denial<'_>) -> ApiError {
        ApiError::Status(403, denial.message(Some(&self.accessor_id)))
    }

    /// Turns a check into the request's error.
    pub fn require(&self, check: Check<'_>) -> Result<(), ApiError> {
        check.map_err(|denial| self.deny(denial))
    }
}

/// Row-by-row filtering of a list answer with the request's token, as Consul's `aclFilter`
/// does: a row the token may not read is left out, and the answer says so with
/// `X-Consul-Results-Filtered-By-ACLs: true`.
///
/// Built once per request from the token [`Route::serve`](super::routes::Route::serve)
/// resolved; with ACLs off it keeps every row and never sends the header. Consul sends the
/// header only to requests that carry a token (after the agent's `default` token stands in
/// for a missing one): an anonymous caller must not learn that rows exist.
#[derive(Clone, Debug, Default)]
pub struct RowFilter {
    authorizer: Option<Arc<Authorizer>>,
    reveal: bool,
}

impl RowFilter {
    /// The filter of `request`'s resolved token; keeps everything with ACLs off.
    pub fn of(request: &Request) -> RowFilter {
        match request.acl.get() {
            Some(authz) => RowFilter {
                authorizer: Some(authz.authorizer.clone()),
                reveal: !authz.secret_id.is_empty(),
            },
            None => RowFilter::default(),
        }
    }

    /// The same filter judging rows with `authz`'s rules instead, while the header still
    /// goes only to a caller who sent a token: a prepared query runs with its own token.
    pub fn judged_by(self, authz: &Authz) -> RowFilter {
        RowFilter {
            authorizer: Some(authz.authorizer.clone()),
            reveal: self.reveal,
        }
    }

    /// The filter of a resolved token (a typed call's), or none with ACLs off.
    pub fn of_authz(authz: Option<&Authz>) -> RowFilter {
        match authz {
            Some(authz) => RowFilter {
                authorizer: Some(authz.authorizer.clone()),
                reveal: !authz.secret_id.is_empty(),
            },
            None => RowFilter::default(),
        }
    }

    /// Whether some row may be left out.
    pub fn is_active(&self) -> bool {
        self.authorizer.is_some()
    }

    fn allows<'n>(&self, check: impl FnOnce(&Authorizer) -> Check<'n>) -> bool {
        self.authorizer.as_deref().is_none_or(|a| check(a).is_ok())
    }

    pub fn node(&self, name: &str) -> bool {
        self.allows(|a| a.node_read(name))
    }

    /// `service:read`; a row of no service (a node check) needs nothing here.
    pub fn service(&self, name: &str) -> bool {
        name.is_empty() || self.allows(|a| a.service_read(name))
    }

    /// A prepared query, as Consul's `filterPreparedQueries`: a token that may read ACLs
    /// sees every query; otherwise a query needs `query:read` on its name or template
    /// prefix (`acl_prefix`), and one without a name shows to nobody else.
    pub fn prepared_query(&self, acl_prefix: Option<&str>) -> bool {
        let Some(authorizer) = self.authorizer.as_deref() else {
            return true;
        };
        authorizer.acl_read().is_ok()
            || acl_prefix.is_some_and(|prefix| authorizer.query_read(prefix).is_ok())
    }

    /// A row about a service instance or a check: its node and its service.
    pub fn node_service(&self, node: &str, service: &str) -> bool {
        self.node(node) && self.service(service)
    }

    /// A session, by the node it is bound to.
    pub fn session(&self, node: &str) -> bool {
        self.allows(|a| a.session_read(node))
    }

    pub fn key(&self, key: &str) -> bool {
        self.allows(|a| a.key_read(key))
    }

    pub fn event(&self, name: &str) -> bool {
        self.allows(|a| a.event_read(name))
    }

    /// A config entry, by its kind's read rule.
    pub fn config_entry(
        &self,
        kind: crate::store::mesh::config_entry::ConfigKind,
        name: &str,
    ) -> bool {
        self.allows(|a| config_entry_read(a, kind, name))
    }

    /// An intention, by `intentions:read` on its destination.
    pub fn intention(&self, destination: &str) -> bool {
        self.allows(|a| a.intention_read(destination))
    }

    /// The query metadata headers of a list this filter went over and, when it left rows
    /// out, Consul's filtered header.
    pub fn list_headers(&self, meta: super::QueryMeta, hidden: bool) -> Vec<u8> {
        let mut headers = Vec::with_capacity(160);
        meta.write_headers(&mut headers);
        self.write_header(hidden, &mut headers);
        headers
    }

    /// Consul's header for an answer from which `hidden` rows were left out.
    /// Whether the caller sent a token, so that it is told when rows were left out.
    pub fn reveals(&self) -> bool {
        self.reveal
    }

    pub fn write_header(&self, hidden: bool, headers: &mut Vec<u8>) {
        if hidden && self.reveal {
            headers.extend_from_slice(super::FILTERED_BY_ACLS_HEADER);
        }
    }

    /// Keeps the rows `allowed` lets through; whether any was left out.
    pub fn retain<T>(&self, rows: &mut Vec<T>, allowed: impl Fn(&Self, &T) -> bool) -> bool {
        if !self.is_active() {
            return false;
        }
        let before = rows.len();
        rows.retain(|row| allowed(self, row));
        rows.len() != before
    }
}

/// Consul's 403 for an unknown token.
pub fn acl_not_found() -> ApiError {
    ApiError::Status(403, "ACL not found".to_string())
}

/// The secret a request authenticates with: its own token (borrowed from the request, so
/// the per-request path copies nothing), else the agent's default token, else empty
/// (anonymous).
pub fn request_secret<'r>(ctx: &Context, request: &'r Request) -> Cow<'r, str> {
    if let Some(token) = request.token() {
        return Cow::Borrowed(token);
    }
    Cow::Owned(ctx.agent_default_token().unwrap_or_default())
}

/// On a follower: the resolution of a token this server does not know (yet), for a
/// request its leader checks (see `Route::serve`). It may do nothing; the secret is the
/// request's, which the typed call carries to the leader.
pub fn unknown_here(request: &Request) -> Authz {
    let secret: Arc<str> = Arc::from(request.token().unwrap_or_default());
    Authz {
        accessor_id: Arc::from(""),
        secret_id: secret,
        authorizer: Arc::new(Authorizer::compile(
            &[],
            crate::store::acl::authorizer::DefaultPolicy::Deny,
        )),
    }
}

/// Resolves `secret` against the shard's current version.
pub fn resolve(ctx: &Context, secret: &str) -> Result<Authz, ApiError> {
    let resolved = ctx.resolve_token(secret).map_err(|e| match e {
        crate::store::acl::cache::ResolveError::NotFound => acl_not_found(),
        other => ApiError::Internal(other.message()),
    })?;
    // A cache hit carries the shard's copy of the secret: sharing it spares an allocation
    // per request. Anonymous (the cache resolved the anonymous token's secret for an empty
    // one) and a client agent's answers carry another or none, and get their own copy.
    let secret_id = if *resolved.secret_id == *secret {
        resolved.secret_id
    } else {
        Arc::from(secret)
    };
    Ok(Authz {
        accessor_id: resolved.accessor_id,
        secret_id,
        authorizer: resolved.authorizer,
    })
}

/// Resolves the request's token and checks `rule`; the caller keeps the token on the
/// request for the handler.
pub fn authorize(ctx: &Context, rule: Acl, request: &Request) -> Result<Authz, ApiError> {
    debug_assert!(ctx.acl_enabled(), "authorization runs only with ACLs on");
    let secret = request_secret(ctx, request);
    let authz = resolve(ctx, &secret)?;
    check(ctx, rule, request, &authz)?;
    Ok(authz)
}

/// Consul's `CanRead` of a config entry of `kind` named `name` (the `/v1/config` rule and
/// the lists' row filter share it).
pub fn config_entry_read<'a>(
    a: &Authorizer,
    kind: crate::store::mesh::config_entry::ConfigKind,
    name: &'a str,
) -> Check<'a> {
    use crate::store::mesh::config_entry::ConfigKind;
    match kind {
        ConfigKind::ProxyDefaults | ConfigKind::Mesh => Ok(()),
        ConfigKind::ExportedServices => a.mesh_read(),
        ConfigKind::ServiceIntentions => a.intention_read(name),
        _ => a.service_read(name),
    }
}

fn is_read(request: &Request) -> bool {
    matches!(request.method, Method::Get | Method::Head)
}

/// The check `rule` makes for `request`.
pub fn check(ctx: &Context, rule: Acl, request: &Request, authz: &Authz) -> Result<(), ApiError> {
    let a = &*authz.authorizer;
    let rest = request.rest;
    let node = ctx.config().node_name.as_str();
    match rule {
        Acl::None | Acl::Filtered => Ok(()),
        Acl::AclByMethod => authz.require(if is_read(request) {
            a.acl_read()
        } else {
            a.acl_write()
        }),
        Acl::AclRead => authz.require(a.acl_read()),
        Acl::Management => authz.require(a.snapshot()),
        Acl::OperatorRead => authz.require(a.operator_read()),
        Acl::OperatorWrite => authz.require(a.operator_write()),
        Acl::OperatorByMethod => authz.require(if is_read(request) {
            a.operator_read()
        } else {
            a.operator_write()
        }),
        Acl::KeyringByMethod => authz.require(if is_read(request) {
            a.keyring_read()
        } else {
            a.keyring_write()
        }),
        Acl::Key => check_key(request, authz),
        Acl::Txn => check_txn(request, authz),
        Acl::ServiceFromRest => authz.require(a.service_read(rest)),
        Acl::NodeFromRest => authz.require(a.node_read(rest)),
        Acl::SessionById => check_session_by_id(ctx, request, authz),
        Acl::SessionCreate => check_session_create(ctx, request, authz),
        Acl::EventFromRest => authz.require(a.event_write(rest)),
        Acl::AgentRead => authz.require(a.agent_read(node)),
        Acl::AgentWrite => authz.require(a.agent_write(node)),
        Acl::ServiceFromBody => check_service_body(request, authz),
        Acl::CatalogRegister => check_catalog_register(request, authz),
        Acl::CatalogDeregister => check_catalog_deregister(ctx, request, authz),
        Acl::Query => check_query(ctx, request, authz),
        Acl::Custom(rule) => (rule.check)(ctx, request, authz),
        Acl::ServiceWriteFromRest => authz.require(a.service_write(rest)),
        Acl::ServiceReadFromRest => authz.require(a.service_read(rest)),
    }
}

/// Prepared queries (Consul's `PreparedQuery.Apply`, `Get` and `Explain` checks): a rule
/// applies only to queries with a name or a template (`acl_prefix`); the list and the
/// execution's results are filtered by their handler instead.
fn check_query(ctx: &Context, request: &Request, authz: &Authz) -> Result<(), ApiError> {
    use crate::store::query;
    let a = &*authz.authorizer;
    let version = ctx.current_version();
    if request.rest.is_empty() {
        if request.method != Method::Post {
            return Ok(());
        }
        let Ok(body) = crate::consul::query::decode(request.body) else {
            // The handler answers the decode error.
            return Ok(());
        };
        return match body.acl_prefix() {
            Some(prefix) => authz.require(a.query_write(prefix)),
            None => Ok(()),
        };
    }
    if request.rest.ends_with("/execute") {
        return Ok(());
    }
    if let Some(id_or_name) = request.rest.strip_suffix("/explain") {
        return match query::resolve(&version, id_or_name, "") {
            Ok(Some(found)) => match found.acl_prefix() {
                Some(prefix) => authz.require(a.query_read(prefix)),
                None => Ok(()),
            },
            // The handler answers what resolving says.
            _ => Ok(()),
        };
    }
    let existing = query::get(&version, request.rest);
    if let Some(prefix) = existing.and_then(|q| q.acl_prefix()) {
        if is_read(request) {
            authz.require(a.query_read(prefix))?;
        } else {
            authz.require(a.query_write(prefix))?;
        }
    }
    if request.method == Method::Put && !request.body.iter().all(u8::is_ascii_whitespace) {
        if let Some(prefix) = crate::consul::query::decode(request.body)
            .ok()
            .as_ref()
            .and_then(|q| q.acl_prefix())
        {
            authz.require(a.query_write(prefix))?;
        }
    }
    Ok(())
}

fn check_key(request: &Request, authz: &Authz) -> Result<(), ApiError> {
    let a = &*authz.authorizer;
    let key = request.rest;
    match request.method {
        // Listings are filtered row by row by the handler; a single key needs read.
        Method::Get if request.query.has("recurse") || request.query.has("keys") => Ok(()),
        Method::Get => authz.require(a.key_read(key)),
        Method::Delete if request.query.has("recurse") => authz.require(a.key_write_prefix(key)),
        _ => authz.require(a.key_write(key)),
    }
}

fn body_object(request: &Request) -> Result<Value, ApiError> {
    parse_json(request.body)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))
}

fn text_field(obj: &Obj, names: &[&str]) -> String {
    obj.opt_string(names).ok().flatten().unwrap_or_default()
}

/// Each operation of a transaction needs what the same single request would.
fn check_txn(request: &Request, authz: &Authz) -> Result<(), ApiError> {
    let a = &*authz.authorizer;
    let Ok(Value::Array(ops)) = parse_json(request.body) else {
        // The handler refuses a malformed body with Consul's message.
        return Ok(());
    };
    if ops.len() > TXN_CHECKED_OPS_MAX {
        return Ok(());
    }
    for op in &ops {
        let Ok(op) = Obj::new(op) else { continue };
        if let Ok(Some(kv)) = op.obj(&["kv"]) {
            let verb = text_field(&kv, &["verb"]).to_ascii_lowercase();
            let key = text_field(&kv, &["key"]);
            match verb.as_str() {
                "get" | "check-index" | "check-session" | "check-not-exists" => {
                    authz.require(a.key_read(&key))?
                }
                "get-tree" => authz.require(a.key_list(&key))?,
                "delete-tree" => authz.require(a.key_write_prefix(&key))?,
                _ => authz.require(a.key_write(&key))?,
            }
        }
        if let Ok(Some(node)) = op.obj(&["node"]) {
            let verb = text_field(&node, &["verb"]).to_ascii_lowercase();
            let name = node
                .obj(&["node"])
                .ok()
                .flatten()
                .map(|n| text_field(&n, &["node"]))
                .unwrap_or_default();
            if verb == "get" {
                authz.require(a.node_read(&name))?;
            } else {
                authz.require(a.node_write(&name))?;
            }
        }
        if let Ok(Some(service)) = op.obj(&["service"]) {
            let verb = text_field(&service, &["verb"]).to_ascii_lowercase();
            let name = service
                .obj(&["service"])
                .ok()
                .flatten()
                .map(|s| text_field(&s, &["service"]))
                .unwrap_or_default();
            if verb == "get" {
                authz.require(a.service_read(&name))?;
            } else {
                authz.require(a.service_write(&name))?;
            }
        }
        if let Ok(Some(check)) = op.obj(&["check"]) {
            let verb = text_field(&check, &["verb"]).to_ascii_lowercase();
            let row = check.obj(&["check"]).ok().flatten();
            let node = row
                .as_ref()
                .map(|c| text_field(c, &["node"]))
                .unwrap_or_default();
            if verb == "get" {
                authz.require(a.node_read(&node))?;
            } else {
                authz.require(a.node_write(&node))?;
            }
        }
    }
    Ok(())
}

/// `session:write` on the session's node for destroy and renew (info is filtered).
fn check_session_by_id(ctx: &Context, request: &Request, authz: &Authz) -> Result<(), ApiError> {
    let version = ctx.current_version();
    let Some(found) = session::get(&version, &request.rest.to_ascii_lowercase()) else {
        // Unknown sessions answer as they would without ACLs (`true`, 404).
        return Ok(());
    };
    authz.require(authz.authorizer.session_write(&found.node))
}

fn check_session_create(ctx: &Context, request: &Request, authz: &Authz) -> Result<(), ApiError> {
    let default_node = ctx.config().node_name.clone();
    let node = match parse_json(request.body) {
        Ok(value) => Obj::new(&value)
            .ok()
            .and_then(|o| o.opt_string(&["node"]).ok().flatten())
            .unwrap_or(default_node),
        Err(_) => default_node,
    };
    authz.require(authz.authorizer.session_write(&node))
}

/// A service definition (`/v1/agent/service/register`) needs `service:write` on its name.
fn check_service_body(request: &Request, authz: &Authz) -> Result<(), ApiError> {
    let value = body_object(request)?;
    let Ok(obj) = Obj::new(&value) else {
        return Ok(());
    };
    let name = text_field(&obj, &["name"]);
    authz.require(authz.authorizer.service_write(&name))
}

/// A catalog registration needs `node:write` on the node and `service:write` on its service.
fn check_catalog_register(request: &Request, authz: &Authz) -> Result<(), ApiError> {
    let a = &*authz.authorizer;
    let value = body_object(request)?;
    let Ok(obj) = Obj::new(&value) else {
        return Ok(());
    };
    let node = text_field(&obj, &["node"]);
    authz.require(a.node_write(&node))?;
    if let Ok(Some(service)) = obj.obj(&["service"]) {
        authz.require(a.service_write(&text_field(&service, &["service"])))?;
    }
    Ok(())
}

/// Deregistering a service needs `service:write` on it; a node or a check, `node:write`.
fn check_catalog_deregister(
    ctx: &Context,
    request: &Request,
    authz: &Authz,
) -> Result<(), ApiError> {
    let value = body_object(request)?;
    let Ok(obj) = Obj::new(&value) else {
        return Ok(());
    };
    let node = text_field(&obj, &["node"]);
    let service_id = text_field(&obj, &["serviceid"]);
    check_deregister(ctx, &node, &service_id, authz)
}

pub(crate) fn check_deregister(
    ctx: &Context,
    node: &str,
    service_id: &str,
    authz: &Authz,
) -> Result<(), ApiError> {
    let a = &*authz.authorizer;
    if service_id.is_empty() {
        return authz.require(a.node_write(node));
    }
    let version = ctx.current_version();
    match catalog::read::service_instance(&version, node, service_id) {
        Some(instance) => authz.require(a.service_write(&instance.name)),
        None => authz.require(a.node_write(node)),
    }
}

/// A registration: `node:write` unless it leaves the node alone, `service:write` on its
/// service, and for each check `service:write` on the check's service or `node:write`.
pub(crate) fn check_registration(
    ctx: &Context,
    registration: &Registration,
    authz: &Authz,
) -> Result<(), ApiError> {
    let a = &*authz.authorizer;
    let node = registration.node.as_str();
    if !registration.skip_node_update {
        authz.require(a.node_write(node))?;
    }
    if let Some(service) = &registration.service {
        authz.require(a.service_write(&service.name))?;
    }
    for check in &registration.checks {
        if check.service_id.is_empty() {
            authz.require(a.node_write(node))?;
            continue;
        }
        match registration
            .service
            .as_ref()
            .filter(|s| s.id.eq_ignore_ascii_case(&check.service_id))
        {
            Some(service) => authz.require(a.service_write(&service.name))?,
            None => check_deregister(ctx, node, &check.service_id, authz)?,
        }
    }
    Ok(())
}
