//! `/v1/acl/*` and `/v1/agent/token/<type>`: Consul's ACL API over the replicated tables.
//!
//! Reads answer from the shard's version through [`run_query`] (so they block on `?index`
//! precisely, on the row's or the table's watch key) in Consul's JSON shapes; writes carry an
//! [`AclOp`] through Raft, stamped here (on the leader) with the UUIDs and the time the
//! command needs, and answer with the row as the applied version holds it. Validation and its
//! error texts live in the apply (`store::acl::apply`), so racing writes cannot both pass.
//!
//! With `acl.enabled = false` every ACL endpoint answers Consul's 401 `ACL support
//! disabled`. Errors from the apply are 403 when Consul's are (`Permission denied…`, `ACL
//! not found`) and 500 otherwise, as Consul's RPC errors are.

use super::authz;
use super::context::now_unix_ns;
use super::rpc::client_acl;
use super::{
    query_options, run_query, ApiError, Context, DatacenterHandler, Outcome, Query, QueryMeta,
    Reply, Request, WriteOp,
};
use crate::consul::bodies;
use crate::consul::body::{parse_strict, Obj, Schema};
use crate::consul::filter::{Filter, BINDING_RULE_SELECTOR};
use crate::consul::rpc::acl::{Object, ReplicationStatus};
use crate::proto::duration::{format_go_duration, parse_go_duration_nanos};
use crate::proto::http::Method;
use crate::shard::watch::WatchSet;
use crate::store::acl::apply::{
    AuthMethodWrite, BindingRuleWrite, LinkRef, PolicyWrite, RoleWrite, TokenWrite,
};
use crate::store::acl::{
    self, builtin, jwt, login, rules, AclOp, AuthMethod, BindingRule, NodeIdentity, Policy, Role,
    ServiceIdentity, TemplatedPolicy, Token, TokenFilter,
};
use crate::store::{Command, CommandResult, StoreVersion, Table, Tables};
use base64::Engine;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The file in the data directory that allows one more bootstrap (Consul's name).
pub const BOOTSTRAP_RESET_FILE: &str = "acl-bootstrap-reset";
/// Longest reset-index file read, in bytes.
const BOOTSTRAP_RESET_FILE_BYTES_MAX: u64 = 64;

fn disabled() -> ApiError {
    ApiError::Status(401, "ACL support disabled".to_string())
}

fn require_enabled(ctx: &Context) -> Result<(), ApiError> {
    if ctx.acl_enabled() {
        Ok(())
    } else {
        Err(disabled())
    }
}

/// An apply error as Consul's HTTP layer maps it.
fn apply_error(reason: String) -> ApiError {
    if reason == "ACL not found" || reason.contains("Permission denied") {
        ApiError::Status(403, reason)
    } else {
        ApiError::Internal(reason)
    }
}

// ---- Consul's JSON shapes ----

/// RFC 3339 in UTC with nanoseconds trimmed as Go's `time.RFC3339Nano` does.
pub fn format_time(unix_ns: i64) -> String {
    crate::proto::rfc3339::format_ns(unix_ns)
}

/// Parses RFC 3339 (`2024-01-02T03:04:05.5Z`, or with a `±hh:mm` offset) to Unix ns.
pub fn parse_time(text: &str) -> Option<i64> {
    crate::proto::rfc3339::parse_ns(text)
}

fn links_json(links: Vec<(Arc<str>, Arc<str>)>) -> Value {
    Value::Array(
        links
            .into_iter()
            .map(|(id, name)| json!({"ID": &*id, "Name": &*name}))
            .collect(),
    )
}

fn identities_json(
    object: &mut Map<String, Value>,
    services: &[ServiceIdentity],
    nodes: &[NodeIdentity],
    templated: &[TemplatedPolicy],
) {
    if !services.is_empty() {
        let list: Vec<Value> = services
            .iter()
            .map(|s| {
                let mut o = json!({"ServiceName": s.service_name});
                if !s.datacenters.is_empty() {
                    o["Datacenters"] = json!(s.datacenters);
                }
                o
            })
            .collect();
        object.insert("ServiceIdentities".into(), Value::Array(list));
    }
    if !nodes.is_empty() {
        let list: Vec<Value> = nodes
            .iter()
            .map(|n| json!({"NodeName": n.node_name, "Datacenter": n.datacenter}))
            .collect();
        object.insert("NodeIdentities".into(), Value::Array(list));
    }
    if !templated.is_empty() {
        let list: Vec<Value> = templated
            .iter()
            .map(|t| {
                let mut o = json!({"TemplateName": t.template_name});
                if let Some(name) = &t.name {
                    o["TemplateVariables"] = json!({ "Name": name });
                }
                if !t.datacenters.is_empty() {
                    o["Datacenters"] = json!(t.datacenters);
                }
                o
            })
            .collect();
        object.insert("TemplatedPolicies".into(), Value::Array(list));
    }
}

fn hash_json(hash: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(hash))
}

/// Consul's `ACLToken` (and, with `stub`, its list form `ACLTokenListStub`).
pub fn token_json(tables: &Tables, token: &Token, stub: bool) -> Value {
    let policies = acl::policy_links(tables, &token.policies);
    let roles = acl::role_links(tables, &token.roles);
    token_json_linked(token, policies, roles, stub)
}

/// [`token_json`] with the token's policy and role links already named (`(id, name)`, in
/// the token's order): what a client agent renders from a server's typed reply.
pub fn token_json_linked(
    token: &Token,
    policies: Vec<(Arc<str>, Arc<str>)>,
    roles: Vec<(Arc<str>, Arc<str>)>,
    stub: bool,
) -> Value {
    let mut o = Map::new();
    o.insert("AccessorID".into(), json!(token.accessor_id_shown()));
    o.insert("SecretID".into(), json!(&*token.secret_id));
    o.insert("Description".into(), json!(token.description));
    if !policies.is_empty() {
        o.insert("Policies".into(), links_json(policies));
    }
    if !roles.is_empty() {
        o.insert("Roles".into(), links_json(roles));
    }
    identities_json(
        &mut o,
        &token.service_identities,
        &token.node_identities,
        &token.templated_policies,
    );
    o.insert("Local".into(), json!(token.local));
    if !token.auth_method.is_empty() {
        o.insert("AuthMethod".into(), json!(token.auth_method));
    }
    if let Some(expires) = token.expiration_time_ns {
        o.insert("ExpirationTime".into(), json!(format_time(expires)));
    }
    o.insert(
        "CreateTime".into(),
        json!(format_time(token.create_time_ns)),
    );
    o.insert("Hash".into(), hash_json(&token.hash));
    o.insert("CreateIndex".into(), json!(token.create_index));
    o.insert("ModifyIndex".into(), json!(token.modify_index));
    if stub {
        o.insert("Legacy".into(), json!(false));
    }
    Value::Object(o)
}

/// Consul's `ACLPolicy` (with `stub`, `ACLPolicyListStub`, which has no `Rules`).
pub fn policy_json(policy: &Policy, stub: bool) -> Value {
    let mut o = Map::new();
    o.insert("ID".into(), json!(&*policy.id));
    o.insert("Name".into(), json!(&*policy.name));
    o.insert("Description".into(), json!(policy.description));
    if !stub {
        o.insert("Rules".into(), json!(policy.rules));
    }
    if !policy.datacenters.is_empty() {
        o.insert("Datacenters".into(), json!(policy.datacenters));
    }
    o.insert("Hash".into(), hash_json(&policy.hash));
    o.insert("CreateIndex".into(), json!(policy.create_index));
    o.insert("ModifyIndex".into(), json!(policy.modify_index));
    Value::Object(o)
}

pub fn role_json(tables: &Tables, role: &Role) -> Value {
    role_json_linked(role, acl::policy_links(tables, &role.policies))
}

/// [`role_json`] with the role's policy links already named.
pub fn role_json_linked(role: &Role, policies: Vec<(Arc<str>, Arc<str>)>) -> Value {
    let mut o = Map::new();
    o.insert("ID".into(), json!(&*role.id));
    o.insert("Name".into(), json!(&*role.name));
    o.insert("Description".into(), json!(role.description));
    if !policies.is_empty() {
        o.insert("Policies".into(), links_json(policies));
    }
    identities_json(
        &mut o,
        &role.service_identities,
        &role.node_identities,
        &role.templated_policies,
    );
    o.insert("Hash".into(), hash_json(&role.hash));
    o.insert("CreateIndex".into(), json!(role.create_index));
    o.insert("ModifyIndex".into(), json!(role.modify_index));
    Value::Object(o)
}

pub fn auth_method_json(method: &AuthMethod, stub: bool) -> Value {
    let mut o = Map::new();
    o.insert("Name".into(), json!(&*method.name));
    o.insert("Type".into(), json!(method.method_type));
    if !method.display_name.is_empty() {
        o.insert("DisplayName".into(), json!(method.display_name));
    }
    o.insert("Description".into(), json!(method.description));
    if method.max_token_ttl_ns != 0 {
        o.insert(
            "MaxTokenTTL".into(),
            json!(format_go_duration(method.max_token_ttl_ns)),
        );
    }
    if !method.token_locality.is_empty() {
        o.insert("TokenLocality".into(), json!(method.token_locality));
    }
    if !stub {
        let config: Value = serde_json::from_str(&method.config_json).unwrap_or(json!({}));
        o.insert("Config".into(), config);
    }
    o.insert("CreateIndex".into(), json!(method.create_index));
    o.insert("ModifyIndex".into(), json!(method.modify_index));
    Value::Object(o)
}

pub fn binding_rule_json(rule: &BindingRule) -> Value {
    let mut o = Map::new();
    o.insert("ID".into(), json!(&*rule.id));
    o.insert("Description".into(), json!(rule.description));
    o.insert("AuthMethod".into(), json!(&*rule.auth_method));
    o.insert("Selector".into(), json!(rule.selector));
    o.insert("BindType".into(), json!(rule.bind_type));
    o.insert("BindName".into(), json!(rule.bind_name));
    if let Some(name) = &rule.bind_vars_name {
        o.insert("BindVars".into(), json!({ "Name": name }));
    }
    o.insert("CreateIndex".into(), json!(rule.create_index));
    o.insert("ModifyIndex".into(), json!(rule.modify_index));
    Value::Object(o)
}

// ---- reads ----

type Render = Box<dyn Fn(&Tables) -> Result<Value, ApiError>>;

/// A read of the ACL tables: the index and watch key of what it reads, and its answer.
struct AclQuery {
    watch: Arc<str>,
    index: fn(&Tables) -> u64,
    render: Render,
}

impl Query for AclQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            (self.index)(tables),
            WatchSet::new().key(Table::Acl, self.watch.clone()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        match (self.render)(tables) {
            Ok(value) => {
                let mut headers = Vec::with_capacity(160);
                meta.write_headers(&mut headers);
                reply.json(200, &headers, &value);
            }
            Err(error) => reply.error(&error),
        }
    }
}

fn read(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    watch: Arc<str>,
    index: fn(&Tables) -> u64,
    render: Render,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let options = query_options(ctx, &request.query)?;
    run_query(
        ctx,
        AclQuery {
            watch,
            index,
            render,
        },
        options,
        reply,
    )
}

// ---- writes ----

/// Proposes `op`; once applied, answers with `render` over the new version.
fn write(
    ctx: &Context,
    op: AclOp,
    render: impl FnOnce(&Tables) -> Result<Value, ApiError> + 'static,
) -> Result<Outcome, ApiError> {
    let versions = ctx.version_reader();
    Ok(Outcome::Write(WriteOp {
        command: Command::Acl(op),
        respond: Box::new(move |result, reply: &mut Reply| match result {
            CommandResult::Bool(_) => match render(&versions.current()) {
                Ok(value) => reply.json(200, b"", &value),
                Err(error) => reply.error(&error),
            },
            CommandResult::Error(reason) => reply.error(&apply_error(reason)),
            _ => reply.error(&ApiError::Internal(
                "unexpected result for an ACL write".to_string(),
            )),
        }),
    }))
}

/// A body checked against the Consul struct it decodes into; `refusal` is the words the
/// endpoint's 400 starts with (`Token decoding failed`).
fn decode_body(
    request: &Request,
    refusal: &str,
    schema: &'static Schema,
) -> Result<Value, ApiError> {
    parse_strict(request.body, schema).map_err(|e| ApiError::bad_request(format!("{refusal}: {e}")))
}

fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn links(obj: &Obj, name: &str) -> Result<Vec<LinkRef>, String> {
    match obj.get(&[name]) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(_) => obj
            .obj_list(&[name])?
            .iter()
            .map(|link| {
                Ok(LinkRef {
                    id: link.string(&["id"])?,
                    name: link.string(&["name"])?,
                })
            })
            .collect(),
    }
}

#[allow(clippy::type_complexity)]
fn identities(
    obj: &Obj,
) -> Result<
    (
        Vec<ServiceIdentity>,
        Vec<NodeIdentity>,
        Vec<TemplatedPolicy>,
    ),
    String,
> {
    let list = |name: &str| -> Result<Vec<Obj>, String> {
        match obj.get(&[name]) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(_) => obj.obj_list(&[name]),
        }
    };
    let opt_list = |o: &Obj, name: &str| -> Result<Vec<String>, String> {
        match o.get(&[name]) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(_) => o.str_list(&[name]),
        }
    };
    let services = list("serviceidentities")?
        .iter()
        .map(|s| {
            Ok(ServiceIdentity {
                service_name: s.string(&["servicename"])?,
                datacenters: opt_list(s, "datacenters")?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let nodes = list("nodeidentities")?
        .iter()
        .map(|n| {
            Ok(NodeIdentity {
                node_name: n.string(&["nodename"])?,
                datacenter: n.string(&["datacenter"])?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let templated = list("templatedpolicies")?
        .iter()
        .map(|t| {
            let name = match t.obj(&["templatevariables"])? {
                Some(vars) => vars.opt_string(&["name"])?,
                None => None,
            };
            Ok(TemplatedPolicy {
                template_name: t.string(&["templatename"])?,
                name,
                datacenters: opt_list(t, "datacenters")?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok((services, nodes, templated))
}

// ---- bootstrap, replication, self ----

/// The reset index an operator wrote into `acl-bootstrap-reset`, 0 when there is none.
fn bootstrap_reset_index(ctx: &Context) -> u64 {
    use std::io::Read;
    let Some(dir) = &ctx.config().data_dir else {
        return 0;
    };
    let Ok(file) = std::fs::File::open(dir.join(BOOTSTRAP_RESET_FILE)) else {
        return 0;
    };
    let mut text = String::new();
    if file
        .take(BOOTSTRAP_RESET_FILE_BYTES_MAX)
        .read_to_string(&mut text)
        .is_err()
    {
        return 0;
    }
    text.trim().parse().unwrap_or(0)
}

/// Consul's words (`structs.ACLBootstrapNotAllowedErr`, with the reset index) when the
/// bootstrap is done: what `ACL.BootstrapTokens` answers; the HTTP answer prefixes them with
/// "Permission denied: " ([`bootstrap_error`]).
const BOOTSTRAP_NOT_ALLOWED: &str = "ACL bootstrap no longer allowed";

/// The management token's secret a bootstrap asks for (`BootstrapSecret`, checked as a
/// UUID), or a new one when it names none.
pub fn bootstrap_secret(chosen: &str) -> Result<String, ApiError> {
    match chosen {
        "" => Ok(new_uuid()),
        text => uuid::Uuid::parse_str(text)
            .map(|u| u.to_string())
            .map_err(|e| ApiError::bad_request(format!("Invalid BootstrapSecret: {e}"))),
    }
}

/// Whether a bootstrap may run now: the reset index to propose it with (the one the
/// operator wrote into `acl-bootstrap-reset`, 0 for none), or Consul's refusal.
pub fn bootstrap_allowed(ctx: &Context) -> Result<u64, String> {
    let version = ctx.current_version();
    let reset_index = bootstrap_reset_index(ctx);
    let (allowed, index) = acl::can_bootstrap(&version);
    if !allowed && reset_index != index {
        return Err(format!("{BOOTSTRAP_NOT_ALLOWED} (reset index: {index})"));
    }
    Ok(reset_index)
}

/// The bootstrap's store command with a new accessor ID, and that ID.
pub fn bootstrap_op(secret_id: String, reset_index: u64) -> (AclOp, String) {
    let accessor_id = new_uuid();
    let op = AclOp::Bootstrap {
        accessor_id: accessor_id.clone(),
        secret_id,
        now_unix_ns: now_unix_ns(),
        reset_index,
    };
    (op, accessor_id)
}

/// After a bootstrap with a reset index is applied: the reset file is used once, so a later
/// bootstrap needs a new reset index.
pub fn bootstrap_applied(data_dir: Option<&std::path::Path>, reset_index: u64) {
    if reset_index == 0 {
        return;
    }
    if let Some(dir) = data_dir {
        let _ = std::fs::remove_file(dir.join(BOOTSTRAP_RESET_FILE));
    }
}

/// A bootstrap's refusal as Consul's HTTP handler answers it: 403 `Permission denied: ACL
/// bootstrap no longer allowed (reset index: N)`; the apply's other errors as ACL writes'.
pub fn bootstrap_error(reason: String) -> ApiError {
    if reason.starts_with(BOOTSTRAP_NOT_ALLOWED) {
        ApiError::Status(403, format!("Permission denied: {reason}"))
    } else {
        apply_error(reason)
    }
}

/// The bootstrap's answer: the token, and its secret again as `ID` (Consul's legacy field).
pub fn bootstrap_json(mut token: Value) -> Value {
    token["ID"] = token["SecretID"].clone();
    token
}

/// `PUT /v1/acl/bootstrap`: the first management token, once. A client agent sends it as
/// `ACL.BootstrapTokens` once the body is decoded. `?dc` is not read: the bootstrap is
/// always this datacenter's, as Consul's agent names its own datacenter in the request
/// whatever the query says (`api::rpc::client_acl::across_datacenters` runs this handler
/// for a request naming another one).
pub fn bootstrap(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    // The body may choose the management token's secret, as `consul acl bootstrap <file>`
    // does.
    let body = decode_body(request, "Request decoding failed", &bodies::ACL_BOOTSTRAP)?;
    let chosen = Obj::new(&body)
        .and_then(|o| o.string(&["bootstrapsecret"]))
        .map_err(|e| ApiError::bad_request(format!("Request decoding failed: {e}")))?;
    if ctx.writes_by_call() {
        // The reset file and the tables are the servers'; the server checks the secret.
        return Ok(client_acl::bootstrap(ctx, &chosen));
    }
    let secret_id = bootstrap_secret(&chosen)?;
    let reset_index = bootstrap_allowed(ctx).map_err(bootstrap_error)?;
    let (op, accessor_id) = bootstrap_op(secret_id, reset_index);
    let versions = ctx.version_reader();
    let data_dir = ctx.config().data_dir.clone();
    Ok(Outcome::Write(WriteOp {
        command: Command::Acl(op),
        respond: Box::new(move |result, reply: &mut Reply| match result {
            CommandResult::Bool(_) => {
                bootstrap_applied(data_dir.as_deref(), reset_index);
                let tables = versions.current();
                match acl::token_by_accessor(&tables, &accessor_id) {
                    Some(token) => {
                        reply.json(200, b"", &bootstrap_json(token_json(&tables, token, false)))
                    }
                    None => reply.error(&ApiError::Internal(
                        "bootstrap token missing after apply".to_string(),
                    )),
                }
            }
            CommandResult::Error(reason) => reply.error(&bootstrap_error(reason)),
            _ => reply.error(&ApiError::Internal(
                "unexpected result for an ACL write".to_string(),
            )),
        }),
    }))
}

/// This server's ACL replication status, what `ACL.ReplicationStatus` answers: every
/// datacenter keeps its own ACLs (nothing is replicated from the primary), so replication
/// is never enabled and never ran.
pub fn replication_status(ctx: &Context) -> ReplicationStatus {
    let config = ctx.config();
    ReplicationStatus {
        source_datacenter: config
            .acl
            .primary_datacenter
            .clone()
            .unwrap_or_else(|| config.datacenter.clone()),
        ..ReplicationStatus::default()
    }
}

/// A replication status as Consul's `GET /v1/acl/replication` renders it (Go's zero time
/// for a time that never was).
pub fn replication_json(status: &ReplicationStatus) -> Value {
    let time = |unix_ns: Option<i64>| match unix_ns {
        Some(unix_ns) => format_time(unix_ns),
        None => "0001-01-01T00:00:00Z".to_string(),
    };
    json!({
        "Enabled": status.enabled,
        "Running": status.running,
        "SourceDatacenter": status.source_datacenter,
        "ReplicationType": status.replication_type,
        "ReplicatedIndex": status.replicated_index,
        "ReplicatedRoleIndex": status.replicated_role_index,
        "ReplicatedTokenIndex": status.replicated_token_index,
        "LastSuccess": time(status.last_success_unix_ns),
        "LastError": time(status.last_error_unix_ns),
        "LastErrorMessage": status.last_error_message,
    })
}

/// `GET /v1/acl/replication`: the replication status, which a server answers itself and a
/// client agent asks its server for (`ACL.ReplicationStatus`).
pub fn replication(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    replication_in(ctx, request, reply, "")
}

/// [`replication`] in `datacenter` (empty: this one): `ACL.ReplicationStatus` naming it.
fn replication_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    if datacenter.is_empty() {
        super::check_datacenter(ctx, &request.query)?;
        if !ctx.is_client() {
            reply.json(200, b"", &replication_json(&replication_status(ctx)));
            return Ok(Outcome::Done);
        }
    }
    Ok(client_acl::replication(ctx, request, datacenter))
}

/// The ACL requests naming another datacenter (`?dc=`), run by their handlers with that
/// datacenter: parsed and refused as here, then its typed call (a write, the handler's
/// store command, as the typed call naming it). `None` for a path that is no ACL
/// endpoint's. A bootstrap is this datacenter's whatever `?dc` says, as Consul's.
pub fn for_datacenter(path: &str) -> Option<DatacenterHandler> {
    let handler: DatacenterHandler = match path {
        "/v1/acl/bootstrap" => |ctx, request, reply, _| bootstrap(ctx, request, reply),
        "/v1/acl/replication" => replication_in,
        "/v1/acl/login" => login_in,
        "/v1/acl/logout" => |ctx, request, reply, _| logout(ctx, request, reply),
        "/v1/acl/token/self" => token_self_in,
        "/v1/acl/tokens" => token_list_in,
        "/v1/acl/policies" => policy_list_in,
        "/v1/acl/roles" => role_list_in,
        "/v1/acl/auth-methods" => auth_method_list_in,
        "/v1/acl/binding-rules" => binding_rule_list_in,
        "/v1/acl/token" => |ctx, request, reply, _| token_create(ctx, request, reply),
        "/v1/acl/policy" => |ctx, request, reply, _| policy_create(ctx, request, reply),
        "/v1/acl/role" => |ctx, request, reply, _| role_create(ctx, request, reply),
        "/v1/acl/auth-method" => |ctx, request, reply, _| auth_method_create(ctx, request, reply),
        "/v1/acl/binding-rule" => |ctx, request, reply, _| binding_rule_create(ctx, request, reply),
        path if path.starts_with("/v1/acl/policy/name/") => policy_by_name_in,
        path if path.starts_with("/v1/acl/role/name/") => role_by_name_in,
        path if path.starts_with("/v1/acl/token/") => token_in,
        path if path.starts_with("/v1/acl/policy/") => {
            |ctx, request, reply, datacenter| object::<Policies>(ctx, request, reply, datacenter)
        }
        path if path.starts_with("/v1/acl/role/") => {
            |ctx, request, reply, datacenter| object::<Roles>(ctx, request, reply, datacenter)
        }
        path if path.starts_with("/v1/acl/auth-method/") => {
            |ctx, request, reply, datacenter| object::<AuthMethods>(ctx, request, reply, datacenter)
        }
        path if path.starts_with("/v1/acl/binding-rule/") => |ctx, request, reply, datacenter| {
            object::<BindingRules>(ctx, request, reply, datacenter)
        },
        _ => return None,
    };
    Some(handler)
}

/// `GET /v1/acl/token/self`: the token the request carries.
pub fn token_self(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    token_self_in(ctx, request, reply, "")
}

/// [`token_self`] in `datacenter` (empty: this one): `ACL.TokenRead` by the secret there.
fn token_self_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    if by_call(ctx, request, datacenter)? {
        let options = options_in(ctx, request, datacenter)?;
        return Ok(client_acl::token_self(ctx, request, options, datacenter));
    }
    let secret = authz::request_secret(ctx, request);
    // Resolving first gives Consul's 403 for an unknown or expired token.
    authz::resolve(ctx, &secret)?;
    let secret_key = secret.into_owned();
    read(
        ctx,
        request,
        reply,
        Arc::from(acl::TOKENS_KEY),
        Tokens::index,
        Box::new(move |tables| {
            let secret = if secret_key.is_empty() {
                builtin::ANONYMOUS_TOKEN_SECRET_ID
            } else {
                &secret_key
            };
            acl::token_by_secret(tables, secret)
                .filter(|t| !t.is_expired(now_unix_ns()))
                .map(|t| token_json(tables, t, false))
                .ok_or_else(authz::acl_not_found)
        }),
    )
}

// ---- the objects: one set of handlers over every kind ----

/// One kind of ACL object (tokens, policies, roles, auth methods, binding rules), as the
/// generic handlers below serve it: where its rows are, how one renders, how a body
/// decodes, and which command writes or deletes one. The kinds differ only here, so their
/// endpoints answer alike (the same checks, messages and blocking behaviour).
trait AclObject: 'static {
    /// What a create or update carries to the apply.
    type Write;
    /// The name in Consul's messages: `Policy decoding failed`, `Policy ID in URL and
    /// payload do not match`.
    const WHAT: &'static str;
    /// What Consul's "does not exist" answer calls one row (`binding rule`).
    const NOUN: &'static str;
    /// The Consul struct its body decodes into.
    const SCHEMA: &'static Schema;
    /// The name of the ID field in messages (`ID`, `Accessor ID`, `Name`).
    const ID_FIELD: &'static str;
    /// Consul's 400 for an empty ID on a read or delete.
    const MISSING: &'static str;
    /// `Some(message)` when a create may not name its ID.
    const CREATE_WITH_ID: Option<&'static str>;
    /// A create without an ID gets a new UUID (every kind but auth methods, named by the
    /// caller).
    const GENERATES_ID: bool = true;
    /// The table's list watch key.
    const LIST_KEY: &'static str;
    /// Which kind of Consul's typed calls a client agent reads it with (`ACL.TokenRead`,
    /// `ACL.PolicyRead`, …); `None` while the kind still goes as forwarded HTTP.
    const TYPED: Option<Object> = None;

    fn index(tables: &Tables) -> u64;
    /// The watch key of one row, from the ID as the path names it.
    fn row_key(id: &str) -> Arc<str>;
    /// One row as Consul renders it, `None` when it does not exist.
    fn render(tables: &Tables, id: &str) -> Option<Value>;
    fn decode(obj: &Obj, create: bool) -> Result<Self::Write, String>;
    fn id_mut(write: &mut Self::Write) -> &mut String;
    /// Fills in what the server picks for a new row (a token's secret).
    fn prepare_create(_write: &mut Self::Write) {}
    fn set(write: Self::Write) -> AclOp;
    fn delete(id: String, request: &Request) -> AclOp;
    /// The ID as rows are keyed (lowercase UUIDs; names as given).
    fn key_id(id: &str) -> String {
        id.to_lowercase()
    }
}

fn decode_object<O: AclObject>(request: &Request, create: bool) -> Result<O::Write, ApiError> {
    let value = decode_body(request, &format!("{} decoding failed", O::WHAT), O::SCHEMA)?;
    Obj::new(&value)
        .and_then(|obj| O::decode(&obj, create))
        .map_err(|e| ApiError::bad_request(format!("{} decoding failed: {e}", O::WHAT)))
}

/// The answer to a write: the row as the applied version holds it.
fn object_answer<O: AclObject>(id: String) -> impl FnOnce(&Tables) -> Result<Value, ApiError> {
    move |tables| O::render(tables, &id).ok_or_else(authz::acl_not_found)
}

/// `PUT /v1/acl/<kind>`: a new row.
fn create<O: AclObject>(ctx: &Context, request: &Request) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let mut write = decode_object::<O>(request, true)?;
    let key = prepare_create::<O>(&mut write)?;
    self::write(ctx, O::set(write), object_answer::<O>(key))
}

/// What a create picks before it is proposed (a new ID, a token's secret), and refuses (an
/// ID a kind may not be created with); the row's key.
fn prepare_create<O: AclObject>(write: &mut O::Write) -> Result<String, ApiError> {
    let id = O::id_mut(write);
    if !id.is_empty() {
        if let Some(refusal) = O::CREATE_WITH_ID {
            return Err(ApiError::bad_request(refusal));
        }
    } else if O::GENERATES_ID {
        *id = new_uuid();
    }
    let key = O::key_id(id);
    O::prepare_create(write);
    Ok(key)
}

/// [`prepare_create`] of a token, for `ACL.TokenSet` with `Create`.
pub fn prepare_token_create(write: &mut TokenWrite) -> Result<String, ApiError> {
    prepare_create::<Tokens>(write)
}

/// [`prepare_create`] of a policy, for `ACL.PolicySet` without an ID.
pub fn prepare_policy_create(write: &mut PolicyWrite) -> Result<String, ApiError> {
    prepare_create::<Policies>(write)
}

/// [`prepare_create`] of a role, for `ACL.RoleSet` without an ID.
pub fn prepare_role_create(write: &mut RoleWrite) -> Result<String, ApiError> {
    prepare_create::<Roles>(write)
}

/// [`prepare_create`] of a binding rule, for `ACL.BindingRuleSet` without an ID.
pub fn prepare_binding_rule_create(write: &mut BindingRuleWrite) -> Result<String, ApiError> {
    prepare_create::<BindingRules>(write)
}

/// `/v1/acl/<kind>/<id>`: GET, PUT (update) and DELETE of one row; a GET naming another
/// `datacenter` is its typed read there (a write is the handler's command, which the
/// caller sends there).
fn object<O: AclObject>(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let id = request.rest;
    if id.is_empty() && request.method != Method::Put {
        return Err(ApiError::bad_request(O::MISSING));
    }
    let key = O::key_id(id);
    match request.method {
        Method::Get if by_call(ctx, request, datacenter)? && O::TYPED.is_some() => {
            let options = options_in(ctx, request, datacenter)?;
            let object = O::TYPED.expect("checked above");
            Ok(client_acl::read_one(
                ctx, request, object, id, "", options, datacenter,
            ))
        }
        Method::Get => read(
            ctx,
            request,
            reply,
            O::row_key(&key),
            O::index,
            Box::new(move |tables| O::render(tables, &key).ok_or_else(missing::<O>)),
        ),
        Method::Put => {
            let mut write = decode_object::<O>(request, false)?;
            let named = O::id_mut(&mut write);
            if !named.is_empty() && named != id {
                return Err(ApiError::bad_request(format!(
                    "{} {} in URL and payload do not match",
                    O::WHAT,
                    O::ID_FIELD
                )));
            }
            *named = id.to_string();
            self::write(ctx, O::set(write), object_answer::<O>(key))
        }
        _ => write(ctx, O::delete(id.to_string(), request), |_| Ok(json!(true))),
    }
}

/// A list of one kind: `render` builds it from the version (with the list's filters).
fn list<O: AclObject>(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    render: impl Fn(&Tables) -> Vec<Value> + 'static,
) -> Result<Outcome, ApiError> {
    read(
        ctx,
        request,
        reply,
        Arc::from(O::LIST_KEY),
        O::index,
        Box::new(move |tables| Ok(Value::Array(render(tables)))),
    )
}

/// A read of a row that does not exist: Consul's 404 (its clients read it as "no such
/// row"), worded by `acl.ACLResourceNotExistError`.
fn missing<O: AclObject>() -> ApiError {
    not_found(O::NOUN)
}

/// Consul's 404 for a `noun` (`token`, `policy`, `role`) that does not exist.
pub fn not_found(noun: &str) -> ApiError {
    ApiError::NotFound(format!("Requested {noun} does not exist: ACL not found"))
}

/// Whether a read goes as its typed call: always when it names another datacenter
/// (`datacenter` not empty), else as [`super::read_by_call`] decides.
fn by_call(ctx: &Context, request: &Request, datacenter: &str) -> Result<bool, ApiError> {
    if datacenter.is_empty() {
        super::read_by_call(ctx, request)
    } else {
        Ok(true)
    }
}

/// A read's query options: `?dc` checked against this datacenter when the read is this
/// datacenter's (`datacenter` empty), else parsed only (another datacenter answers it).
fn options_in(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Result<super::QueryOptions, ApiError> {
    if datacenter.is_empty() {
        query_options(ctx, &request.query)
    } else {
        super::query_options_in(ctx, &request.query)
    }
}

/// `GET /v1/acl/<kind>/name/<name>`: policies and roles by name.
fn by_name<O: AclObject>(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
    find: fn(&Tables, &str) -> Option<Value>,
) -> Result<Outcome, ApiError> {
    if request.rest.is_empty() {
        require_enabled(ctx)?;
        return Err(ApiError::bad_request(format!(
            "Missing {} Name",
            O::WHAT.to_lowercase()
        )));
    }
    if let (true, Some(object)) = (by_call(ctx, request, datacenter)?, O::TYPED) {
        require_enabled(ctx)?;
        let options = options_in(ctx, request, datacenter)?;
        return Ok(client_acl::read_one(
            ctx,
            request,
            object,
            "",
            request.rest,
            options,
            datacenter,
        ));
    }
    let name = request.rest.to_string();
    read(
        ctx,
        request,
        reply,
        Arc::from(O::LIST_KEY),
        O::index,
        Box::new(move |tables| find(tables, &name).ok_or_else(missing::<O>)),
    )
}

/// A list on a client agent, or naming another datacenter: its typed call
/// (`ACL.TokenList`, `ACL.PolicyList`, `ACL.RoleList`, …) with the list's filters.
fn typed_list(
    ctx: &Context,
    request: &Request,
    object: Object,
    filters: (Option<String>, Option<String>, Option<String>),
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let (policy, role, auth_method) = filters;
    require_enabled(ctx)?;
    let options = options_in(ctx, request, datacenter)?;
    let filters = client_acl::ListFilters {
        policy: policy.unwrap_or_default(),
        role: role.unwrap_or_default(),
        auth_method: auth_method.unwrap_or_default(),
    };
    Ok(client_acl::list(
        ctx, request, object, filters, options, datacenter,
    ))
}

/// A query parameter that filters a list, unset when empty.
fn list_param(request: &Request, name: &str) -> Option<String> {
    request
        .query
        .get(name)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// A Go duration given as text or as nanoseconds; unset, null or empty is zero.
fn duration_field(obj: &Obj, name: &str) -> Result<i64, String> {
    match obj.get(&[name]) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::String(text)) if text.is_empty() => Ok(0),
        Some(Value::String(text)) => parse_go_duration_nanos(text).map_err(|e| e.to_string()),
        Some(_) => obj.i64(&[name]),
    }
}

fn optional_str_list(obj: &Obj, name: &str) -> Result<Vec<String>, String> {
    match obj.get(&[name]) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(_) => obj.str_list(&[name]),
    }
}

// ---- tokens ----

struct Tokens;

impl AclObject for Tokens {
    type Write = TokenWrite;
    const WHAT: &'static str = "Token";
    const NOUN: &'static str = "token";
    const SCHEMA: &'static Schema = &bodies::ACL_TOKEN;
    const ID_FIELD: &'static str = "Accessor ID";
    const MISSING: &'static str = "Missing token ID";
    const CREATE_WITH_ID: Option<&'static str> = None;
    const LIST_KEY: &'static str = acl::TOKENS_KEY;
    const TYPED: Option<Object> = Some(Object::Token);

    fn index(tables: &Tables) -> u64 {
        tables.acl.indexes.tokens
    }
    fn row_key(id: &str) -> Arc<str> {
        acl::token_key(id)
    }
    fn render(tables: &Tables, id: &str) -> Option<Value> {
        acl::token_by_accessor(tables, id)
            .filter(|t| !t.is_expired(now_unix_ns()))
            .map(|t| token_json(tables, t, false))
    }
    fn decode(obj: &Obj, create: bool) -> Result<TokenWrite, String> {
        let (service_identities, node_identities, templated_policies) = identities(obj)?;
        let expiration_time_ns = match obj.opt_string(&["expirationtime"])? {
            None => None,
            Some(text) if text.is_empty() => None,
            Some(text) => Some(
                parse_time(&text)
                    .ok_or_else(|| format!("parsing time {text:?} as RFC 3339: cannot parse"))?,
            ),
        };
        Ok(TokenWrite {
            accessor_id: obj.string(&["accessorid"])?,
            secret_id: obj.string(&["secretid"])?,
            description: obj.string(&["description"])?,
            policies: links(obj, "policies")?,
            roles: links(obj, "roles")?,
            service_identities,
            node_identities,
            templated_policies,
            local: obj.bool(&["local"])?,
            auth_method: String::new(),
            expiration_time_ns,
            expiration_ttl_ns: duration_field(obj, "expirationttl")?,
            now_unix_ns: now_unix_ns(),
            create,
            from_login: false,
        })
    }
    fn id_mut(write: &mut TokenWrite) -> &mut String {
        &mut write.accessor_id
    }
    fn prepare_create(write: &mut TokenWrite) {
        if write.secret_id.is_empty() {
            write.secret_id = new_uuid();
        }
    }
    fn set(write: TokenWrite) -> AclOp {
        AclOp::TokenSet(Box::new(write))
    }
    fn delete(accessor_id: String, request: &Request) -> AclOp {
        // A token may not delete itself: the apply compares with the requester's secret.
        let requester = request
            .acl
            .get()
            .map(|a| a.secret_id.to_string())
            .unwrap_or_default();
        AclOp::TokenDelete {
            accessor_id,
            requester_secret_id: requester,
        }
    }
}

/// `PUT /v1/acl/token`.
pub fn token_create(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    create::<Tokens>(ctx, request)
}

/// `GET /v1/acl/tokens?policy=&role=&authmethod=`.
pub fn token_list(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    token_list_in(ctx, request, reply, "")
}

/// [`token_list`] in `datacenter` (empty: this one).
fn token_list_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let policy = list_param(request, "policy");
    let role = list_param(request, "role");
    let method = list_param(request, "authmethod");
    if by_call(ctx, request, datacenter)? {
        let filters = (policy, role, method);
        return typed_list(ctx, request, Object::Token, filters, datacenter);
    }
    list::<Tokens>(ctx, request, reply, move |tables| {
        let filter = TokenFilter {
            policy: policy.as_deref(),
            role: role.as_deref(),
            auth_method: method.as_deref(),
        };
        acl::token_list(tables, &filter, now_unix_ns())
            .iter()
            .map(|t| token_json(tables, t, true))
            .collect()
    })
}

/// `/v1/acl/token/<accessor>` (GET, PUT, DELETE) and `PUT /v1/acl/token/<accessor>/clone`.
pub fn token(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    token_in(ctx, request, reply, "")
}

/// [`token`] in `datacenter` (empty: this one).
fn token_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let Some(source) = request
        .rest
        .strip_suffix("/clone")
        .filter(|_| request.method == Method::Put)
    else {
        return object::<Tokens>(ctx, request, reply, datacenter);
    };
    let value = decode_body(request, "Token decoding failed", &bodies::ACL_TOKEN)?;
    let description = Obj::new(&value)
        .and_then(|o| o.opt_string(&["description"]))
        .map_err(|e| ApiError::bad_request(format!("Token decoding failed: {e}")))?;
    let accessor_id = new_uuid();
    let op = AclOp::TokenClone {
        source_accessor_id: source.to_string(),
        accessor_id: accessor_id.clone(),
        secret_id: new_uuid(),
        description,
        now_unix_ns: now_unix_ns(),
    };
    write(ctx, op, object_answer::<Tokens>(accessor_id))
}

// ---- policies ----

struct Policies;

impl AclObject for Policies {
    type Write = PolicyWrite;
    const WHAT: &'static str = "Policy";
    const NOUN: &'static str = "policy";
    const SCHEMA: &'static Schema = &bodies::ACL_POLICY;
    const ID_FIELD: &'static str = "ID";
    const MISSING: &'static str = "Missing policy ID";
    const CREATE_WITH_ID: Option<&'static str> =
        Some("Cannot specify the ID when creating a new policy");
    const LIST_KEY: &'static str = acl::POLICIES_KEY;
    const TYPED: Option<Object> = Some(Object::Policy);

    fn index(tables: &Tables) -> u64 {
        tables.acl.indexes.policies
    }
    fn row_key(id: &str) -> Arc<str> {
        acl::policy_key(id)
    }
    fn render(tables: &Tables, id: &str) -> Option<Value> {
        acl::policy_by_id(tables, id).map(|p| policy_json(p, false))
    }
    fn decode(obj: &Obj, create: bool) -> Result<PolicyWrite, String> {
        Ok(PolicyWrite {
            id: obj.string(&["id"])?,
            name: obj.string(&["name"])?,
            description: obj.string(&["description"])?,
            rules: obj.string(&["rules"])?,
            datacenters: optional_str_list(obj, "datacenters")?,
            create,
        })
    }
    fn id_mut(write: &mut PolicyWrite) -> &mut String {
        &mut write.id
    }
    fn set(write: PolicyWrite) -> AclOp {
        AclOp::PolicySet(Box::new(write))
    }
    fn delete(id: String, _: &Request) -> AclOp {
        AclOp::PolicyDelete { id }
    }
}

/// `PUT /v1/acl/policy`.
pub fn policy_create(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    create::<Policies>(ctx, request)
}

/// `GET /v1/acl/policies`.
pub fn policy_list(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    policy_list_in(ctx, request, reply, "")
}

/// [`policy_list`] in `datacenter` (empty: this one).
fn policy_list_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    if by_call(ctx, request, datacenter)? {
        return typed_list(ctx, request, Object::Policy, (None, None, None), datacenter);
    }
    list::<Policies>(ctx, request, reply, |tables| {
        acl::policy_list(tables)
            .map(|p| policy_json(p, true))
            .collect()
    })
}

/// `GET /v1/acl/policy/name/<name>`.
pub fn policy_by_name(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    policy_by_name_in(ctx, request, reply, "")
}

/// [`policy_by_name`] in `datacenter` (empty: this one).
fn policy_by_name_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    by_name::<Policies>(ctx, request, reply, datacenter, |tables, name| {
        acl::policy_by_name(tables, name).map(|p| policy_json(p, false))
    })
}

/// `/v1/acl/policy/<id>`: GET, PUT, DELETE.
pub fn policy(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    object::<Policies>(ctx, request, reply, "")
}

// ---- roles ----

struct Roles;

impl AclObject for Roles {
    type Write = RoleWrite;
    const WHAT: &'static str = "Role";
    const NOUN: &'static str = "role";
    const SCHEMA: &'static Schema = &bodies::ACL_ROLE;
    const ID_FIELD: &'static str = "ID";
    const MISSING: &'static str = "Missing role ID";
    const CREATE_WITH_ID: Option<&'static str> =
        Some("Cannot specify the ID when creating a new role");
    const LIST_KEY: &'static str = acl::ROLES_KEY;
    const TYPED: Option<Object> = Some(Object::Role);

    fn index(tables: &Tables) -> u64 {
        tables.acl.indexes.roles
    }
    fn row_key(id: &str) -> Arc<str> {
        acl::role_key(id)
    }
    fn render(tables: &Tables, id: &str) -> Option<Value> {
        acl::role_by_id(tables, id).map(|r| role_json(tables, r))
    }
    fn decode(obj: &Obj, create: bool) -> Result<RoleWrite, String> {
        let (service_identities, node_identities, templated_policies) = identities(obj)?;
        Ok(RoleWrite {
            id: obj.string(&["id"])?,
            name: obj.string(&["name"])?,
            description: obj.string(&["description"])?,
            policies: links(obj, "policies")?,
            service_identities,
            node_identities,
            templated_policies,
            create,
        })
    }
    fn id_mut(write: &mut RoleWrite) -> &mut String {
        &mut write.id
    }
    fn set(write: RoleWrite) -> AclOp {
        AclOp::RoleSet(Box::new(write))
    }
    fn delete(id: String, _: &Request) -> AclOp {
        AclOp::RoleDelete { id }
    }
}

/// `PUT /v1/acl/role`.
pub fn role_create(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    create::<Roles>(ctx, request)
}

/// `GET /v1/acl/roles?policy=`.
pub fn role_list(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    role_list_in(ctx, request, reply, "")
}

/// [`role_list`] in `datacenter` (empty: this one).
fn role_list_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let policy = list_param(request, "policy");
    if by_call(ctx, request, datacenter)? {
        return typed_list(ctx, request, Object::Role, (policy, None, None), datacenter);
    }
    list::<Roles>(ctx, request, reply, move |tables| {
        acl::role_list(tables, policy.as_deref())
            .into_iter()
            .map(|r| role_json(tables, r))
            .collect()
    })
}

/// `GET /v1/acl/role/name/<name>`.
pub fn role_by_name(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    role_by_name_in(ctx, request, reply, "")
}

/// [`role_by_name`] in `datacenter` (empty: this one).
fn role_by_name_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    by_name::<Roles>(ctx, request, reply, datacenter, |tables, name| {
        acl::role_by_name(tables, name).map(|r| role_json(tables, r))
    })
}

/// `/v1/acl/role/<id>`: GET, PUT, DELETE.
pub fn role(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    object::<Roles>(ctx, request, reply, "")
}

// ---- templated policies ----

fn templated_policy_json(base: &builtin::TemplatedPolicyBase) -> Value {
    let schema = if base.requires_name {
        "{\n\t\"type\": \"object\",\n\t\"properties\": {\n\t\t\"name\": { \"type\": \"string\", \"$ref\": \"#/definitions/min-length-one\" }\n\t},\n\t\"required\": [\"name\"]\n}"
    } else {
        ""
    };
    json!({
        "TemplateName": base.name,
        "Schema": schema,
        "Template": base.template,
        "Description": base.description,
    })
}

/// `GET /v1/acl/templated-policies`: every builtin template by name.
pub fn templated_policies(
    ctx: &Context,
    _: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let all: Map<String, Value> = builtin::TEMPLATED_POLICIES
        .iter()
        .map(|t| (t.name.to_string(), templated_policy_json(t)))
        .collect();
    reply.json(200, b"", &Value::Object(all));
    Ok(Outcome::Done)
}

/// `GET /v1/acl/templated-policy/name/<name>`.
pub fn templated_policy(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let base = builtin::templated_policy(request.rest).ok_or_else(|| {
        ApiError::NotFound(format!("Invalid templated policy Name: {}", request.rest))
    })?;
    reply.json(200, b"", &templated_policy_json(base));
    Ok(Outcome::Done)
}

/// `POST /v1/acl/templated-policy/preview/<name>`: the policy a template renders to with the
/// body's variables (`{"Name": …}`), as the synthetic policy Consul builds from it.
pub fn templated_policy_preview(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let name = request.rest;
    if name.is_empty() {
        return Err(ApiError::bad_request("Missing templated policy Name"));
    }
    let base = builtin::templated_policy(name)
        .ok_or_else(|| ApiError::bad_request(format!("Invalid templated policy Name: {name}")))?;
    let body = parse_strict(request.body, &bodies::ACL_TEMPLATE_VARIABLES)
        .map_err(|e| ApiError::bad_request(format!("Failed to decode request body: {e}")))?;
    let variable = Obj::new(&body)
        .and_then(|o| o.string(&["name"]))
        .map_err(|e| ApiError::bad_request(format!("Failed to decode request body: {e}")))?;
    let invalid = |reason: String| {
        ApiError::bad_request(format!(
            "validation error for templated policy: {}: {reason}",
            rules::go_quote(base.name)
        ))
    };
    if base.requires_name && variable.is_empty() {
        // Consul's JSON-schema check, reported as a one-error list.
        return Err(invalid(
            "1 error occurred:\n\t* name is required\n\n".to_string(),
        ));
    }
    let rendered = builtin::render_templated_policy(base, Some(&variable)).map_err(invalid)?;
    let id = builtin::synthetic_policy_id(&rendered);
    let policy_name = format!("synthetic-policy-{id}");
    let description = format!(
        "synthetic policy generated from templated policy: {}",
        base.name
    );
    let policy = Policy {
        hash: acl::apply::policy_content_hash(&policy_name, &description, &rendered, &[]),
        id: Arc::from(id.as_str()),
        name: Arc::from(policy_name.as_str()),
        description,
        rules: rendered,
        datacenters: Vec::new(),
        create_index: 0,
        modify_index: 0,
    };
    reply.json(200, b"", &policy_json(&policy, false));
    Ok(Outcome::Done)
}

// ---- auth methods and binding rules ----
// ---- auth methods and binding rules ----

struct AuthMethods;

impl AclObject for AuthMethods {
    type Write = AuthMethodWrite;
    const WHAT: &'static str = "AuthMethod";
    const NOUN: &'static str = "auth method";
    const SCHEMA: &'static Schema = &bodies::ACL_AUTH_METHOD;
    const ID_FIELD: &'static str = "Name";
    const MISSING: &'static str = "Missing auth method name";
    const CREATE_WITH_ID: Option<&'static str> = None;
    const GENERATES_ID: bool = false;
    const LIST_KEY: &'static str = acl::AUTH_METHODS_KEY;
    const TYPED: Option<Object> = Some(Object::AuthMethod);

    fn index(tables: &Tables) -> u64 {
        tables.acl.indexes.auth_methods
    }
    fn row_key(name: &str) -> Arc<str> {
        acl::auth_method_key(name)
    }
    fn render(tables: &Tables, name: &str) -> Option<Value> {
        acl::auth_method_by_name(tables, name).map(|m| auth_method_json(m, false))
    }
    fn decode(obj: &Obj, _create: bool) -> Result<AuthMethodWrite, String> {
        let config_json = match obj.get(&["config"]) {
            None | Some(Value::Null) => "{}".to_string(),
            Some(config) => config.to_string(),
        };
        Ok(AuthMethodWrite {
            name: obj.string(&["name"])?,
            method_type: obj.string(&["type"])?,
            display_name: obj.string(&["displayname"])?,
            description: obj.string(&["description"])?,
            max_token_ttl_ns: duration_field(obj, "maxtokenttl")?,
            token_locality: obj.string(&["tokenlocality"])?,
            config_json,
        })
    }
    fn id_mut(write: &mut AuthMethodWrite) -> &mut String {
        &mut write.name
    }
    fn set(write: AuthMethodWrite) -> AclOp {
        AclOp::AuthMethodSet(Box::new(write))
    }
    fn delete(name: String, _: &Request) -> AclOp {
        AclOp::AuthMethodDelete { name }
    }
    /// Auth methods are keyed by their name as given.
    fn key_id(name: &str) -> String {
        name.to_string()
    }
}

/// `PUT /v1/acl/auth-method`.
pub fn auth_method_create(
    ctx: &Context,
    request: &Request,
    _: &mut Reply,
) -> Result<Outcome, ApiError> {
    create::<AuthMethods>(ctx, request)
}

/// `GET /v1/acl/auth-methods`.
pub fn auth_method_list(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    auth_method_list_in(ctx, request, reply, "")
}

/// [`auth_method_list`] in `datacenter` (empty: this one).
fn auth_method_list_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    if by_call(ctx, request, datacenter)? {
        let filters = (None, None, None);
        return typed_list(ctx, request, Object::AuthMethod, filters, datacenter);
    }
    list::<AuthMethods>(ctx, request, reply, |tables| {
        acl::auth_method_list(tables)
            .map(|m| auth_method_json(m, true))
            .collect()
    })
}

/// `/v1/acl/auth-method/<name>`: GET, PUT, DELETE.
pub fn auth_method(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    object::<AuthMethods>(ctx, request, reply, "")
}

struct BindingRules;

impl AclObject for BindingRules {
    type Write = BindingRuleWrite;
    const WHAT: &'static str = "BindingRule";
    const NOUN: &'static str = "binding rule";
    const SCHEMA: &'static Schema = &bodies::ACL_BINDING_RULE;
    const ID_FIELD: &'static str = "ID";
    const MISSING: &'static str = "Missing binding rule ID";
    const CREATE_WITH_ID: Option<&'static str> =
        Some("Cannot specify the ID when creating a new binding rule");
    const LIST_KEY: &'static str = acl::BINDING_RULES_KEY;
    const TYPED: Option<Object> = Some(Object::BindingRule);

    fn index(tables: &Tables) -> u64 {
        tables.acl.indexes.binding_rules
    }
    fn row_key(id: &str) -> Arc<str> {
        acl::binding_rule_key(id)
    }
    fn render(tables: &Tables, id: &str) -> Option<Value> {
        acl::binding_rule_by_id(tables, id).map(|r| binding_rule_json(r))
    }
    fn decode(obj: &Obj, create: bool) -> Result<BindingRuleWrite, String> {
        let bind_vars_name = match obj.obj(&["bindvars"])? {
            Some(vars) => vars.opt_string(&["name"])?,
            None => None,
        };
        Ok(BindingRuleWrite {
            id: obj.string(&["id"])?,
            description: obj.string(&["description"])?,
            auth_method: obj.string(&["authmethod"])?,
            selector: obj.string(&["selector"])?,
            bind_type: obj.string(&["bindtype"])?,
            bind_name: obj.string(&["bindname"])?,
            bind_vars_name,
            create,
        })
    }
    fn id_mut(write: &mut BindingRuleWrite) -> &mut String {
        &mut write.id
    }
    fn set(write: BindingRuleWrite) -> AclOp {
        AclOp::BindingRuleSet(Box::new(write))
    }
    fn delete(id: String, _: &Request) -> AclOp {
        AclOp::BindingRuleDelete { id }
    }
}

/// `PUT /v1/acl/binding-rule`.
pub fn binding_rule_create(
    ctx: &Context,
    request: &Request,
    _: &mut Reply,
) -> Result<Outcome, ApiError> {
    create::<BindingRules>(ctx, request)
}

/// `GET /v1/acl/binding-rules?authmethod=`.
pub fn binding_rule_list(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    binding_rule_list_in(ctx, request, reply, "")
}

/// [`binding_rule_list`] in `datacenter` (empty: this one).
fn binding_rule_list_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let method = list_param(request, "authmethod");
    if by_call(ctx, request, datacenter)? {
        let filters = (None, None, method);
        return typed_list(ctx, request, Object::BindingRule, filters, datacenter);
    }
    list::<BindingRules>(ctx, request, reply, move |tables| {
        acl::binding_rule_list(tables, method.as_deref())
            .into_iter()
            .map(|r| binding_rule_json(r))
            .collect()
    })
}

/// `/v1/acl/binding-rule/<id>`: GET, PUT, DELETE.
pub fn binding_rule(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    object::<BindingRules>(ctx, request, reply, "")
}

// ---- login and logout ----

/// What a login asks for: the auth method's name, the bearer token it is to verify, and
/// the new token's meta.
pub struct LoginAsk {
    pub auth_method: String,
    pub bearer_token: String,
    pub meta: BTreeMap<String, String>,
}

/// Refuses a bearer token longer than the verifier reads (Consul's 400).
fn check_bearer(bearer: &str) -> Result<(), ApiError> {
    if bearer.len() > jwt::JWT_BYTES_MAX {
        return Err(ApiError::bad_request(format!(
            "BearerToken exceeds {} bytes",
            jwt::JWT_BYTES_MAX
        )));
    }
    Ok(())
}

/// A login's token: the bearer token verified by the named auth method, the method's
/// binding rules matched against what it says, and the token they bind, to be written with
/// `AclOp::TokenSet`; also its accessor ID. The HTTP handler and `ACL.Login` share it.
pub fn login_token(ctx: &Context, ask: &LoginAsk) -> Result<(TokenWrite, String), ApiError> {
    check_bearer(&ask.bearer_token)?;
    let version = ctx.current_version();
    let method = acl::auth_method_by_name(&version, &ask.auth_method)
        .ok_or_else(authz::acl_not_found)?
        .clone();
    if method.method_type != jwt::METHOD_TYPE {
        return Err(ApiError::Internal(format!(
            "auth method type {:?} is not supported",
            method.method_type
        )));
    }
    let config = jwt::JwtConfig::from_json(&method.config_json).map_err(ApiError::Internal)?;
    let now = now_unix_ns();
    let identity = jwt::verify(&config, &ask.bearer_token, now.div_euclid(1_000_000_000))
        .map_err(|e| ApiError::Status(403, format!("Permission denied: {e}")))?;
    let selectable = identity.selectable();
    let mut matched: Vec<&BindingRule> = Vec::new();
    for rule in acl::binding_rule_list(&version, Some(&method.name)) {
        let matches = match Filter::parse(&rule.selector, BINDING_RULE_SELECTOR) {
            Ok(None) => true,
            Ok(Some(filter)) => filter.matches(&selectable),
            Err(_) => false,
        };
        if matches {
            matched.push(rule);
        }
    }
    let accessor_id = new_uuid();
    let login_request = login::LoginRequest {
        method: &method,
        identity: &identity,
        datacenter: &ctx.config().datacenter,
        accessor_id: accessor_id.clone(),
        secret_id: new_uuid(),
        now_unix_ns: now,
        meta: &ask.meta,
    };
    let token = login::bind(&version, &matched, &login_request).map_err(apply_error)?;
    Ok((token, accessor_id))
}

/// `POST /v1/acl/login`: trades a bearer token the auth method verifies for an ACL token.
/// A client agent decodes the body, then sends it as `ACL.Login`.
pub fn login(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    login_in(ctx, request, reply, "")
}

/// [`login`] in `datacenter` (empty: this one): `ACL.Login` naming it.
fn login_in(
    ctx: &Context,
    request: &Request,
    _: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let value = decode_body(request, "Failed to decode request body", &bodies::ACL_LOGIN)?;
    let refused = |e: String| ApiError::bad_request(format!("Failed to decode request body: {e}"));
    let obj = Obj::new(&value).map_err(refused)?;
    let ask = LoginAsk {
        auth_method: obj.string(&["authmethod"]).map_err(refused)?,
        bearer_token: obj.string(&["bearertoken"]).map_err(refused)?,
        meta: obj
            .str_map(&["meta"])
            .map_err(refused)?
            .into_iter()
            .collect(),
    };
    check_bearer(&ask.bearer_token)?;
    if !datacenter.is_empty() || ctx.writes_by_call() {
        // The auth methods and binding rules are the servers' (the leader's of that
        // datacenter).
        return Ok(client_acl::login(ctx, &ask, datacenter));
    }
    let (token, accessor_id) = login_token(ctx, &ask)?;
    write(
        ctx,
        AclOp::TokenSet(Box::new(token)),
        object_answer::<Tokens>(accessor_id),
    )
}

/// `POST /v1/acl/logout`: deletes the login token the request carries.
pub fn logout(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let Some(secret) = request.token() else {
        return Err(ApiError::Status(
            401,
            "Supplied token does not exist".to_string(),
        ));
    };
    write(
        ctx,
        AclOp::Logout {
            secret_id: secret.to_string(),
        },
        |_| Ok(json!(true)),
    )
}

// ---- the agent's tokens ----

/// `PUT /v1/agent/token/<type>`: replaces one of the agent's tokens; with
/// `acl.enable_token_persistence` the tokens file is rewritten before the answer (Consul's
/// 500 `Failed to persist tokens - …` when it cannot be), so the token survives a restart.
pub fn agent_token(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let value = decode_body(request, "Request decode failed", &bodies::AGENT_TOKEN)?;
    let token = Obj::new(&value)
        .and_then(|o| o.string(&["token"]))
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    let kind = request.rest;
    let Some(kind) = crate::config::acl::TokenKind::parse(kind) else {
        return Err(ApiError::NotFound(format!("Token {kind:?} is unknown")));
    };
    let token = (!token.is_empty()).then_some(token);
    match ctx.agent_token_file() {
        // The file's lock is held across both changes, so two requests cannot persist in
        // one order and apply in the other.
        Some(file) => {
            let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
            let mut persisted = file.persisted.clone();
            persisted.set(kind, token.clone());
            write_tokens_file(&file.path, &persisted.to_json())
                .map_err(|e| ApiError::Internal(format!("Failed to persist tokens - {e}")))?;
            file.persisted = persisted;
            ctx.set_agent_tokens(|tokens| *kind.slot(tokens) = token);
        }
        None => ctx.set_agent_tokens(|tokens| *kind.slot(tokens) = token),
    }
    reply.send(200, None, b"", b"");
    Ok(Outcome::Done)
}

/// Replaces the tokens file whole: written beside it with mode 0600, synced, then renamed
/// over it, so a crash leaves the old file or the new one, never half of one. A small
/// blocking write on this shard, as rare as an operator setting a token.
fn write_tokens_file(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let temporary = path.with_extension("json.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_and_parse_as_rfc3339() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_time(1_700_000_000_123_000_000),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(
            parse_time("2023-11-14T22:13:20.123Z"),
            Some(1_700_000_000_123_000_000)
        );
        assert_eq!(
            parse_time("2023-11-14T23:13:20+01:00"),
            Some(1_700_000_000_000_000_000)
        );
        assert_eq!(
            parse_time("2024-02-29T00:00:00Z")
                .map(format_time)
                .as_deref(),
            Some("2024-02-29T00:00:00Z")
        );
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(parse_time("2023-13-14T22:13:20Z"), None);
    }

    #[test]
    fn apply_errors_map_to_consuls_statuses() {
        assert_eq!(apply_error("ACL not found".into()).status(), 403);
        assert_eq!(
            apply_error("Permission denied: cannot delete own token".into()).status(),
            403
        );
        assert_eq!(
            apply_error("Invalid Policy: A Policy with Name \"x\" already exists".into()).status(),
            500
        );
    }
}
