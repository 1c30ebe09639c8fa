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
use super::{
    query_options, run_query, ApiError, Context, Outcome, Query, QueryMeta, Reply, Request, WriteOp,
};
use crate::consul::body::{parse_json, Obj};
use crate::consul::filter::{Filter, BINDING_RULE_SELECTOR};
use crate::proto::duration::{format_go_duration, parse_go_duration_nanos};
use crate::proto::http::Method;
use crate::shard::watch::WatchSet;
use crate::store::acl::apply::{
    AuthMethodWrite, BindingRuleWrite, LinkRef, PolicyWrite, RoleWrite, TokenWrite,
};
use crate::store::acl::{
    self, builtin, jwt, login, AclOp, AuthMethod, BindingRule, NodeIdentity, Policy, Role,
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
    let mut o = Map::new();
    o.insert("AccessorID".into(), json!(&*token.accessor_id));
    o.insert("SecretID".into(), json!(&*token.secret_id));
    o.insert("Description".into(), json!(token.description));
    let policies = acl::policy_links(tables, &token.policies);
    if !policies.is_empty() {
        o.insert("Policies".into(), links_json(policies));
    }
    let roles = acl::role_links(tables, &token.roles);
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
    let mut o = Map::new();
    o.insert("ID".into(), json!(&*role.id));
    o.insert("Name".into(), json!(&*role.name));
    o.insert("Description".into(), json!(role.description));
    let policies = acl::policy_links(tables, &role.policies);
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

fn tokens_index(t: &Tables) -> u64 {
    t.acl.indexes.tokens
}
fn policies_index(t: &Tables) -> u64 {
    t.acl.indexes.policies
}
fn roles_index(t: &Tables) -> u64 {
    t.acl.indexes.roles
}
fn auth_methods_index(t: &Tables) -> u64 {
    t.acl.indexes.auth_methods
}
fn binding_rules_index(t: &Tables) -> u64 {
    t.acl.indexes.binding_rules
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
            CommandResult::Txn(_) => reply.error(&ApiError::Internal(
                "unexpected transaction result for an ACL write".to_string(),
            )),
        }),
    }))
}

fn decode_body(request: &Request, what: &str) -> Result<Value, ApiError> {
    let body = if request.body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        request.body
    };
    parse_json(body).map_err(|e| ApiError::bad_request(format!("{what} decoding failed: {e}")))
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

/// `PUT /v1/acl/bootstrap`: the first management token, once.
pub fn bootstrap(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    super::check_datacenter(ctx, &request.query)?;
    let version = ctx.current_version();
    let reset_index = bootstrap_reset_index(ctx);
    let (allowed, index) = acl::can_bootstrap(&version);
    if !allowed && reset_index != index {
        return Err(ApiError::Status(
            403,
            format!("Permission denied: ACL bootstrap no longer allowed (reset index: {index})"),
        ));
    }
    let accessor_id = new_uuid();
    let secret_id = new_uuid();
    let op = AclOp::Bootstrap {
        accessor_id: accessor_id.clone(),
        secret_id: secret_id.clone(),
        now_unix_ns: now_unix_ns(),
        reset_index,
    };
    let reset_file = ctx
        .config()
        .data_dir
        .as_ref()
        .map(|d| d.join(BOOTSTRAP_RESET_FILE));
    let versions = ctx.version_reader();
    Ok(Outcome::Write(WriteOp {
        command: Command::Acl(op),
        respond: Box::new(move |result, reply: &mut Reply| match result {
            CommandResult::Bool(_) => {
                if reset_index != 0 {
                    if let Some(path) = reset_file {
                        // Used once: a later bootstrap needs a new reset index.
                        let _ = std::fs::remove_file(path);
                    }
                }
                let tables = versions.current();
                match acl::token_by_accessor(&tables, &accessor_id) {
                    Some(token) => {
                        let mut value = token_json(&tables, token, false);
                        value["ID"] = json!(secret_id);
                        reply.json(200, b"", &value);
                    }
                    None => reply.error(&ApiError::Internal(
                        "bootstrap token missing after apply".to_string(),
                    )),
                }
            }
            CommandResult::Error(reason) if reason.contains("no longer allowed") => reply.error(
                &ApiError::Status(403, format!("Permission denied: {reason}")),
            ),
            CommandResult::Error(reason) => reply.error(&apply_error(reason)),
            CommandResult::Txn(_) => reply.error(&ApiError::Internal(
                "unexpected transaction result for an ACL write".to_string(),
            )),
        }),
    }))
}

/// `GET /v1/acl/replication`: one datacenter, so replication never runs.
pub fn replication(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    super::check_datacenter(ctx, &request.query)?;
    let zero_time = "0001-01-01T00:00:00Z";
    reply.json(
        200,
        b"",
        &json!({
            "Enabled": false,
            "Running": false,
            "SourceDatacenter": ctx.config().acl.primary_datacenter.clone()
                .unwrap_or_else(|| ctx.config().datacenter.clone()),
            "ReplicationType": "",
            "ReplicatedIndex": 0,
            "ReplicatedRoleIndex": 0,
            "ReplicatedTokenIndex": 0,
            "LastSuccess": zero_time,
            "LastError": zero_time,
            "LastErrorMessage": "",
        }),
    );
    Ok(Outcome::Done)
}

/// `GET /v1/acl/token/self`: the token the request carries.
pub fn token_self(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let secret = authz::request_secret(ctx, request);
    // Resolving first gives Consul's 403 for an unknown or expired token.
    authz::resolve(ctx, &secret)?;
    let secret_key = secret.clone();
    read(
        ctx,
        request,
        reply,
        Arc::from(acl::TOKENS_KEY),
        tokens_index,
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

// ---- tokens ----

fn decode_token(request: &Request, create: bool) -> Result<TokenWrite, ApiError> {
    let value = decode_body(request, "Token")?;
    let decode = || -> Result<TokenWrite, String> {
        let obj = Obj::new(&value)?;
        let (service_identities, node_identities, templated_policies) = identities(&obj)?;
        let expiration_time_ns = match obj.opt_string(&["expirationtime"])? {
            None => None,
            Some(text) if text.is_empty() => None,
            Some(text) => Some(
                parse_time(&text)
                    .ok_or_else(|| format!("parsing time {text:?} as RFC 3339: cannot parse"))?,
            ),
        };
        let expiration_ttl_ns = match obj.get(&["expirationttl"]) {
            None | Some(Value::Null) => 0,
            Some(Value::String(text)) => {
                parse_go_duration_nanos(text).map_err(|e| e.to_string())?
            }
            Some(_) => obj.i64(&["expirationttl"])?,
        };
        Ok(TokenWrite {
            accessor_id: obj.string(&["accessorid"])?,
            secret_id: obj.string(&["secretid"])?,
            description: obj.string(&["description"])?,
            policies: links(&obj, "policies")?,
            roles: links(&obj, "roles")?,
            service_identities,
            node_identities,
            templated_policies,
            local: obj.bool(&["local"])?,
            auth_method: String::new(),
            expiration_time_ns,
            expiration_ttl_ns,
            now_unix_ns: now_unix_ns(),
            create,
            from_login: false,
        })
    };
    decode().map_err(|e| ApiError::bad_request(format!("Token decoding failed: {e}")))
}

fn token_answer(accessor_id: String) -> impl FnOnce(&Tables) -> Result<Value, ApiError> {
    move |tables| {
        acl::token_by_accessor(tables, &accessor_id)
            .map(|t| token_json(tables, t, false))
            .ok_or_else(authz::acl_not_found)
    }
}

/// `PUT /v1/acl/token`.
pub fn token_create(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let mut write = decode_token(request, true)?;
    if write.accessor_id.is_empty() {
        write.accessor_id = new_uuid();
    }
    if write.secret_id.is_empty() {
        write.secret_id = new_uuid();
    }
    let accessor = write.accessor_id.to_lowercase();
    self::write(
        ctx,
        AclOp::TokenSet(Box::new(write)),
        token_answer(accessor),
    )
}

/// `GET /v1/acl/tokens?policy=&role=&authmethod=`.
pub fn token_list(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let policy = request
        .query
        .get("policy")
        .filter(|p| !p.is_empty())
        .map(str::to_string);
    let role = request
        .query
        .get("role")
        .filter(|r| !r.is_empty())
        .map(str::to_string);
    let method = request
        .query
        .get("authmethod")
        .filter(|m| !m.is_empty())
        .map(str::to_string);
    read(
        ctx,
        request,
        reply,
        Arc::from(acl::TOKENS_KEY),
        tokens_index,
        Box::new(move |tables| {
            let filter = TokenFilter {
                policy: policy.as_deref(),
                role: role.as_deref(),
                auth_method: method.as_deref(),
            };
            let tokens = acl::token_list(tables, &filter, now_unix_ns());
            Ok(Value::Array(
                tokens.iter().map(|t| token_json(tables, t, true)).collect(),
            ))
        }),
    )
}

/// `/v1/acl/token/<accessor>` (GET, PUT, DELETE) and `PUT /v1/acl/token/<accessor>/clone`.
pub fn token(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let rest = request.rest;
    if let (Some(source), Method::Put) = (rest.strip_suffix("/clone"), request.method) {
        let value = decode_body(request, "Token")?;
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
        return write(ctx, op, token_answer(accessor_id));
    }
    if rest.is_empty() && request.method != Method::Put {
        return Err(ApiError::bad_request("Missing token ID"));
    }
    match request.method {
        Method::Get => {
            let accessor = rest.to_string();
            read(
                ctx,
                request,
                reply,
                acl::token_key(&rest.to_lowercase()),
                tokens_index,
                Box::new(move |tables| {
                    acl::token_by_accessor(tables, &accessor)
                        .filter(|t| !t.is_expired(now_unix_ns()))
                        .map(|t| token_json(tables, t, false))
                        .ok_or_else(authz::acl_not_found)
                }),
            )
        }
        Method::Put => {
            let mut write = decode_token(request, false)?;
            if !write.accessor_id.is_empty() && write.accessor_id != rest {
                return Err(ApiError::bad_request(
                    "Token Accessor ID in URL and payload do not match",
                ));
            }
            write.accessor_id = rest.to_string();
            let accessor = rest.to_lowercase();
            self::write(
                ctx,
                AclOp::TokenSet(Box::new(write)),
                token_answer(accessor),
            )
        }
        _ => {
            let requester = request
                .acl
                .get()
                .map(|a| a.secret_id.to_string())
                .unwrap_or_default();
            let op = AclOp::TokenDelete {
                accessor_id: rest.to_string(),
                requester_secret_id: requester,
            };
            write(ctx, op, |_| Ok(json!(true)))
        }
    }
}

// ---- policies ----

fn decode_policy(request: &Request, create: bool) -> Result<PolicyWrite, ApiError> {
    let value = decode_body(request, "Policy")?;
    let decode = || -> Result<PolicyWrite, String> {
        let obj = Obj::new(&value)?;
        Ok(PolicyWrite {
            id: obj.string(&["id"])?,
            name: obj.string(&["name"])?,
            description: obj.string(&["description"])?,
            rules: obj.string(&["rules"])?,
            datacenters: match obj.get(&["datacenters"]) {
                None | Some(Value::Null) => Vec::new(),
                Some(_) => obj.str_list(&["datacenters"])?,
            },
            create,
        })
    };
    decode().map_err(|e| ApiError::bad_request(format!("Policy decoding failed: {e}")))
}

fn policy_answer(id: String) -> impl FnOnce(&Tables) -> Result<Value, ApiError> {
    move |tables| {
        acl::policy_by_id(tables, &id)
            .map(|p| policy_json(p, false))
            .ok_or_else(authz::acl_not_found)
    }
}

/// `PUT /v1/acl/policy`.
pub fn policy_create(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let mut write = decode_policy(request, true)?;
    if !write.id.is_empty() {
        return Err(ApiError::bad_request(
            "Cannot specify the ID when creating a new policy",
        ));
    }
    write.id = new_uuid();
    let id = write.id.clone();
    self::write(ctx, AclOp::PolicySet(Box::new(write)), policy_answer(id))
}

/// `GET /v1/acl/policies`.
pub fn policy_list(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    read(
        ctx,
        request,
        reply,
        Arc::from(acl::POLICIES_KEY),
        policies_index,
        Box::new(|tables| {
            Ok(Value::Array(
                acl::policy_list(tables)
                    .map(|p| policy_json(p, true))
                    .collect(),
            ))
        }),
    )
}

/// `GET /v1/acl/policy/name/<name>`.
pub fn policy_by_name(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if request.rest.is_empty() {
        require_enabled(ctx)?;
        return Err(ApiError::bad_request("Missing policy Name"));
    }
    let name = request.rest.to_string();
    read(
        ctx,
        request,
        reply,
        Arc::from(acl::POLICIES_KEY),
        policies_index,
        Box::new(move |tables| {
            acl::policy_by_name(tables, &name)
                .map(|p| policy_json(p, false))
                .ok_or_else(authz::acl_not_found)
        }),
    )
}

/// `/v1/acl/policy/<id>`: GET, PUT, DELETE.
pub fn policy(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let id = request.rest;
    if id.is_empty() && request.method != Method::Put {
        return Err(ApiError::bad_request("Missing policy ID"));
    }
    match request.method {
        Method::Get => {
            let wanted = id.to_string();
            read(
                ctx,
                request,
                reply,
                acl::policy_key(&id.to_lowercase()),
                policies_index,
                Box::new(move |tables| {
                    acl::policy_by_id(tables, &wanted)
                        .map(|p| policy_json(p, false))
                        .ok_or_else(authz::acl_not_found)
                }),
            )
        }
        Method::Put => {
            let mut write = decode_policy(request, false)?;
            if !write.id.is_empty() && write.id != id {
                return Err(ApiError::bad_request(
                    "Policy ID in URL and payload do not match",
                ));
            }
            write.id = id.to_string();
            let answer = policy_answer(id.to_lowercase());
            self::write(ctx, AclOp::PolicySet(Box::new(write)), answer)
        }
        _ => write(ctx, AclOp::PolicyDelete { id: id.to_string() }, |_| {
            Ok(json!(true))
        }),
    }
}

// ---- roles ----

fn decode_role(request: &Request, create: bool) -> Result<RoleWrite, ApiError> {
    let value = decode_body(request, "Role")?;
    let decode = || -> Result<RoleWrite, String> {
        let obj = Obj::new(&value)?;
        let (service_identities, node_identities, templated_policies) = identities(&obj)?;
        Ok(RoleWrite {
            id: obj.string(&["id"])?,
            name: obj.string(&["name"])?,
            description: obj.string(&["description"])?,
            policies: links(&obj, "policies")?,
            service_identities,
            node_identities,
            templated_policies,
            create,
        })
    };
    decode().map_err(|e| ApiError::bad_request(format!("Role decoding failed: {e}")))
}

fn role_answer(id: String) -> impl FnOnce(&Tables) -> Result<Value, ApiError> {
    move |tables| {
        acl::role_by_id(tables, &id)
            .map(|r| role_json(tables, r))
            .ok_or_else(authz::acl_not_found)
    }
}

/// `PUT /v1/acl/role`.
pub fn role_create(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let mut write = decode_role(request, true)?;
    if !write.id.is_empty() {
        return Err(ApiError::bad_request(
            "Cannot specify the ID when creating a new role",
        ));
    }
    write.id = new_uuid();
    let id = write.id.clone();
    self::write(ctx, AclOp::RoleSet(Box::new(write)), role_answer(id))
}

/// `GET /v1/acl/roles?policy=`.
pub fn role_list(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let policy = request
        .query
        .get("policy")
        .filter(|p| !p.is_empty())
        .map(str::to_string);
    read(
        ctx,
        request,
        reply,
        Arc::from(acl::ROLES_KEY),
        roles_index,
        Box::new(move |tables| {
            Ok(Value::Array(
                acl::role_list(tables, policy.as_deref())
                    .into_iter()
                    .map(|r| role_json(tables, r))
                    .collect(),
            ))
        }),
    )
}

/// `GET /v1/acl/role/name/<name>`.
pub fn role_by_name(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    if request.rest.is_empty() {
        require_enabled(ctx)?;
        return Err(ApiError::bad_request("Missing role Name"));
    }
    let name = request.rest.to_string();
    read(
        ctx,
        request,
        reply,
        Arc::from(acl::ROLES_KEY),
        roles_index,
        Box::new(move |tables| {
            acl::role_by_name(tables, &name)
                .map(|r| role_json(tables, r))
                .ok_or_else(authz::acl_not_found)
        }),
    )
}

/// `/v1/acl/role/<id>`: GET, PUT, DELETE.
pub fn role(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let id = request.rest;
    if id.is_empty() && request.method != Method::Put {
        return Err(ApiError::bad_request("Missing role ID"));
    }
    match request.method {
        Method::Get => {
            let wanted = id.to_string();
            read(
                ctx,
                request,
                reply,
                acl::role_key(&id.to_lowercase()),
                roles_index,
                Box::new(move |tables| {
                    acl::role_by_id(tables, &wanted)
                        .map(|r| role_json(tables, r))
                        .ok_or_else(authz::acl_not_found)
                }),
            )
        }
        Method::Put => {
            let mut write = decode_role(request, false)?;
            if !write.id.is_empty() && write.id != id {
                return Err(ApiError::bad_request(
                    "Role ID in URL and payload do not match",
                ));
            }
            write.id = id.to_string();
            let answer = role_answer(id.to_lowercase());
            self::write(ctx, AclOp::RoleSet(Box::new(write)), answer)
        }
        _ => write(ctx, AclOp::RoleDelete { id: id.to_string() }, |_| {
            Ok(json!(true))
        }),
    }
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

// ---- auth methods and binding rules ----

fn decode_auth_method(request: &Request) -> Result<AuthMethodWrite, ApiError> {
    let value = decode_body(request, "AuthMethod")?;
    let decode = || -> Result<AuthMethodWrite, String> {
        let obj = Obj::new(&value)?;
        let max_token_ttl_ns = match obj.get(&["maxtokenttl"]) {
            None | Some(Value::Null) => 0,
            Some(Value::String(text)) if text.is_empty() => 0,
            Some(Value::String(text)) => {
                parse_go_duration_nanos(text).map_err(|e| e.to_string())?
            }
            Some(_) => obj.i64(&["maxtokenttl"])?,
        };
        let config_json = match obj.get(&["config"]) {
            None | Some(Value::Null) => "{}".to_string(),
            Some(config) => config.to_string(),
        };
        Ok(AuthMethodWrite {
            name: obj.string(&["name"])?,
            method_type: obj.string(&["type"])?,
            display_name: obj.string(&["displayname"])?,
            description: obj.string(&["description"])?,
            max_token_ttl_ns,
            token_locality: obj.string(&["tokenlocality"])?,
            config_json,
        })
    };
    decode().map_err(|e| ApiError::bad_request(format!("AuthMethod decoding failed: {e}")))
}

fn auth_method_answer(name: String) -> impl FnOnce(&Tables) -> Result<Value, ApiError> {
    move |tables| {
        acl::auth_method_by_name(tables, &name)
            .map(|m| auth_method_json(m, false))
            .ok_or_else(authz::acl_not_found)
    }
}

/// `PUT /v1/acl/auth-method`.
pub fn auth_method_create(
    ctx: &Context,
    request: &Request,
    _: &mut Reply,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let write = decode_auth_method(request)?;
    let name = write.name.clone();
    self::write(
        ctx,
        AclOp::AuthMethodSet(Box::new(write)),
        auth_method_answer(name),
    )
}

/// `GET /v1/acl/auth-methods`.
pub fn auth_method_list(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    read(
        ctx,
        request,
        reply,
        Arc::from(acl::AUTH_METHODS_KEY),
        auth_methods_index,
        Box::new(|tables| {
            Ok(Value::Array(
                acl::auth_method_list(tables)
                    .map(|m| auth_method_json(m, true))
                    .collect(),
            ))
        }),
    )
}

/// `/v1/acl/auth-method/<name>`: GET, PUT, DELETE.
pub fn auth_method(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let name = request.rest;
    if name.is_empty() && request.method != Method::Put {
        return Err(ApiError::bad_request("Missing auth method name"));
    }
    match request.method {
        Method::Get => {
            let wanted = name.to_string();
            read(
                ctx,
                request,
                reply,
                acl::auth_method_key(name),
                auth_methods_index,
                Box::new(move |tables| {
                    acl::auth_method_by_name(tables, &wanted)
                        .map(|m| auth_method_json(m, false))
                        .ok_or_else(authz::acl_not_found)
                }),
            )
        }
        Method::Put => {
            let mut write = decode_auth_method(request)?;
            if !write.name.is_empty() && write.name != name {
                return Err(ApiError::bad_request(
                    "AuthMethod Name in URL and payload do not match",
                ));
            }
            write.name = name.to_string();
            let answer = auth_method_answer(name.to_string());
            self::write(ctx, AclOp::AuthMethodSet(Box::new(write)), answer)
        }
        _ => write(
            ctx,
            AclOp::AuthMethodDelete {
                name: name.to_string(),
            },
            |_| Ok(json!(true)),
        ),
    }
}

fn decode_binding_rule(request: &Request, create: bool) -> Result<BindingRuleWrite, ApiError> {
    let value = decode_body(request, "BindingRule")?;
    let decode = || -> Result<BindingRuleWrite, String> {
        let obj = Obj::new(&value)?;
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
    };
    decode().map_err(|e| ApiError::bad_request(format!("BindingRule decoding failed: {e}")))
}

fn binding_rule_answer(id: String) -> impl FnOnce(&Tables) -> Result<Value, ApiError> {
    move |tables| {
        acl::binding_rule_by_id(tables, &id)
            .map(|r| binding_rule_json(r))
            .ok_or_else(authz::acl_not_found)
    }
}

/// `PUT /v1/acl/binding-rule`.
pub fn binding_rule_create(
    ctx: &Context,
    request: &Request,
    _: &mut Reply,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let mut write = decode_binding_rule(request, true)?;
    if !write.id.is_empty() {
        return Err(ApiError::bad_request(
            "Cannot specify the ID when creating a new binding rule",
        ));
    }
    write.id = new_uuid();
    let id = write.id.clone();
    self::write(
        ctx,
        AclOp::BindingRuleSet(Box::new(write)),
        binding_rule_answer(id),
    )
}

/// `GET /v1/acl/binding-rules?authmethod=`.
pub fn binding_rule_list(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let method = request
        .query
        .get("authmethod")
        .filter(|m| !m.is_empty())
        .map(str::to_string);
    read(
        ctx,
        request,
        reply,
        Arc::from(acl::BINDING_RULES_KEY),
        binding_rules_index,
        Box::new(move |tables| {
            Ok(Value::Array(
                acl::binding_rule_list(tables, method.as_deref())
                    .into_iter()
                    .map(|r| binding_rule_json(r))
                    .collect(),
            ))
        }),
    )
}

/// `/v1/acl/binding-rule/<id>`: GET, PUT, DELETE.
pub fn binding_rule(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let id = request.rest;
    if id.is_empty() && request.method != Method::Put {
        return Err(ApiError::bad_request("Missing binding rule ID"));
    }
    match request.method {
        Method::Get => {
            let wanted = id.to_string();
            read(
                ctx,
                request,
                reply,
                acl::binding_rule_key(&id.to_lowercase()),
                binding_rules_index,
                Box::new(move |tables| {
                    acl::binding_rule_by_id(tables, &wanted)
                        .map(|r| binding_rule_json(r))
                        .ok_or_else(authz::acl_not_found)
                }),
            )
        }
        Method::Put => {
            let mut write = decode_binding_rule(request, false)?;
            if !write.id.is_empty() && write.id != id {
                return Err(ApiError::bad_request(
                    "BindingRule ID in URL and payload do not match",
                ));
            }
            write.id = id.to_string();
            let answer = binding_rule_answer(id.to_lowercase());
            self::write(ctx, AclOp::BindingRuleSet(Box::new(write)), answer)
        }
        _ => write(ctx, AclOp::BindingRuleDelete { id: id.to_string() }, |_| {
            Ok(json!(true))
        }),
    }
}

// ---- login and logout ----

/// `POST /v1/acl/login`: trades a bearer token the auth method verifies for an ACL token.
pub fn login(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let value = decode_body(request, "Login")?;
    let obj = Obj::new(&value)
        .map_err(|e| ApiError::bad_request(format!("Failed to decode request body: {e}")))?;
    let method_name = obj
        .string(&["authmethod"])
        .map_err(|e| ApiError::bad_request(format!("Failed to decode request body: {e}")))?;
    let bearer = obj
        .string(&["bearertoken"])
        .map_err(|e| ApiError::bad_request(format!("Failed to decode request body: {e}")))?;
    let meta: BTreeMap<String, String> = obj
        .str_map(&["meta"])
        .map_err(|e| ApiError::bad_request(format!("Failed to decode request body: {e}")))?
        .into_iter()
        .collect();
    if bearer.len() > jwt::JWT_BYTES_MAX {
        return Err(ApiError::bad_request(format!(
            "BearerToken exceeds {} bytes",
            jwt::JWT_BYTES_MAX
        )));
    }
    let version = ctx.current_version();
    let method = acl::auth_method_by_name(&version, &method_name)
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
    let identity = jwt::verify(&config, &bearer, now.div_euclid(1_000_000_000))
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
        meta: &meta,
    };
    let token = login::bind(&version, &matched, &login_request).map_err(apply_error)?;
    write(
        ctx,
        AclOp::TokenSet(Box::new(token)),
        token_answer(accessor_id),
    )
}

/// `POST /v1/acl/logout`: deletes the login token the request carries.
pub fn logout(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let Some(secret) = request.token() else {
        return Err(authz::acl_not_found());
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

/// `PUT /v1/agent/token/<type>`: replaces one of the agent's tokens until restart.
pub fn agent_token(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    require_enabled(ctx)?;
    let value = decode_body(request, "Token")?;
    let token = Obj::new(&value)
        .and_then(|o| o.string(&["token"]))
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    let kind = request.rest;
    let slot: fn(&mut crate::config::acl::AclTokens) -> &mut Option<String> = match kind {
        "default" | "acl_token" => |t| &mut t.default,
        "agent" | "acl_agent_token" => |t| &mut t.agent,
        "agent_recovery" | "agent_master" | "acl_agent_master_token" => |t| &mut t.agent_recovery,
        "replication" | "acl_replication_token" => |t| &mut t.replication,
        "config_file_service_registration" => |t| &mut t.config_file_service_registration,
        _ => {
            return Err(ApiError::NotFound(format!("Token {kind:?} is unknown")));
        }
    };
    ctx.set_agent_tokens(|tokens| {
        *slot(tokens) = (!token.is_empty()).then_some(token);
    });
    reply.send(200, None, b"", b"");
    Ok(Outcome::Done)
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
