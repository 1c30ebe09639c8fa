//! A client agent's ACL endpoints as Consul's typed calls: tokens, policies and roles are
//! read with `ACL.TokenRead`, `ACL.PolicyRead`, `ACL.RoleRead` (by ID, or by name for
//! policies and roles), listed with `ACL.TokenList`, `ACL.PolicyList`, `ACL.RoleList`,
//! and written with `ACL.TokenSet`, `ACL.TokenClone`, `ACL.TokenDelete`, `ACL.PolicySet`,
//! `ACL.PolicyDelete`, `ACL.RoleSet`, `ACL.RoleDelete`, as Consul's `acl_endpoint.go` on the
//! agent sends them; `/v1/acl/token/self` is `ACL.TokenRead` by the request's own secret.
//! Auth methods and binding rules go the same way (`ACL.AuthMethod*`, `ACL.BindingRule*`),
//! as do `/v1/acl/login` ([`login`], `ACL.Login`), `/v1/acl/logout` (`ACL.Logout` with the
//! request's token) and `/v1/acl/bootstrap` ([`bootstrap`], `ACL.BootstrapTokens`).
//!
//! The HTTP handler (`api::acl`) decodes and checks the request as it does on a server, so a
//! bad body gets the same 400 before any call; the handler's store command becomes the
//! call ([`write`]). A reply comes back as the store's rows with their links named and is
//! rendered by the server's own JSON renderers (`api::acl::token_json_linked`,
//! `policy_json`, `role_json_linked`), so the body is the server's byte for byte; a read's
//! headers come from the reply's `QueryMeta`. The server checks the token (`acl:read`,
//! `acl:write`) as its HTTP route does, and its refusals come back in its words.

use super::client::{
    bad_reply, call_mapped, error_of, meta_of, query_options, read_call, read_timeout,
    write as write_here, write_error, CALL_TIMEOUT,
};
use crate::api::acl::{
    auth_method_json, binding_rule_json, bootstrap_error, bootstrap_json, not_found, policy_json,
    replication_json, role_json_linked, token_json_linked, LoginAsk,
};
use crate::api::authz::{acl_not_found, request_secret};
use crate::api::{ApiError, Context, Outcome, Request};
use crate::cluster::servers::Retry;
use crate::consul::rpc::acl::{
    read_auth_method, read_binding_rule, read_objects, read_policy, read_role, read_token,
    read_token_response, write_auth_method, write_binding_rule, write_policy, write_role,
    write_token_record, BootstrapRequest, DeleteRequest, GetRequest, Links, ListRequest,
    LoginRequest, LogoutRequest, Object, ReplicationStatus, SetRequest, TokenGetRequest,
    TokenRecord,
};
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::{QueryMeta as RpcQueryMeta, QueryOptions as RpcQueryOptions};
use crate::proto::msgpack::Reader;
use crate::shard::rpc_client::CallError;
use crate::store::acl::apply::{
    AuthMethodWrite, BindingRuleWrite, LinkRef, PolicyWrite, RoleWrite, TokenWrite,
};
use crate::store::acl::{builtin, AclOp, AuthMethod, BindingRule, Policy, Role, Token};
use serde_json::Value;
use std::sync::Arc;

/// A read's headers, from the reply's metadata, as the server's HTTP read writes them.
fn read_headers(meta: &RpcQueryMeta) -> Vec<u8> {
    let mut headers = Vec::with_capacity(160);
    meta_of(meta).write_headers(&mut headers);
    headers
}

/// A typed reply that does not decode.
fn malformed(error: crate::proto::msgpack::WireError) -> ApiError {
    bad_reply(error)
}

/// The answer of another datacenter's server with ACLs off (`ACL.*`'s `ACL support
/// disabled`): the 401 that server's own HTTP endpoint gives, so a request naming that
/// datacenter gets its answer. (In this datacenter the agent's own ACL setting answers
/// 401 before any call, and a server that disagrees with it is answered 500, as Consul's
/// agent answers it.)
fn disabled_there(error: &CallError) -> Option<ApiError> {
    match error {
        CallError::Remote(text) if text == crate::api::rpc::acl::ACL_DISABLED => {
            Some(ApiError::Status(401, text.clone()))
        }
        _ => None,
    }
}

/// A failed read, as Consul's agent answers it ([`error_of`]), ACLs off there aside.
fn read_error(error: CallError) -> ApiError {
    disabled_there(&error).unwrap_or_else(|| error_of(error))
}

/// A failed write, typed as the proposal ended ([`write_error`]), ACLs off there aside.
fn failed_write(error: CallError) -> ApiError {
    disabled_there(&error).unwrap_or_else(|| write_error(error))
}

/// A read made after the handler returned, in `datacenter` (empty: this one): sent again
/// on another server if one cannot be reached, waiting as long as its blocking query may.
fn read_in(
    ctx: &Context,
    datacenter: &str,
    method: &'static str,
    body: Vec<u8>,
    options: &crate::api::QueryOptions,
    respond: impl FnOnce(&[u8], &mut crate::api::Reply) -> Result<(), ApiError> + 'static,
) -> Outcome {
    if datacenter.is_empty() {
        return read_call(ctx, method, body, options, respond);
    }
    call_mapped(
        ctx,
        datacenter,
        method,
        body,
        read_timeout(options),
        Retry::Always,
        read_error,
        respond,
    )
}

/// A write made after the handler returned, in `datacenter` (empty: this one): sent once
/// unless it certainly never left.
fn write_in(
    ctx: &Context,
    datacenter: &str,
    method: &'static str,
    body: Vec<u8>,
    respond: impl FnOnce(&[u8], &mut crate::api::Reply) -> Result<(), ApiError> + 'static,
) -> Outcome {
    if datacenter.is_empty() {
        return write_here(ctx, method, body, respond);
    }
    call_mapped(
        ctx,
        datacenter,
        method,
        body,
        CALL_TIMEOUT,
        Retry::NotSent,
        failed_write,
        respond,
    )
}

/// The JSON of a token record, as the server's handler renders the row.
fn token_value(record: TokenRecord, stub: bool) -> Value {
    token_json_linked(&record.token, record.policies, record.roles, stub)
}

/// `GET /v1/acl/token/<accessor>`, `/v1/acl/policy/<id>`, `/v1/acl/policy/name/<name>`,
/// `/v1/acl/role/<id>` and `/v1/acl/role/name/<name>`: one object by ID (or by `name`,
/// when `id` is empty); Consul's 404 when there is none. In `datacenter` (empty: this one).
pub fn read_one(
    ctx: &Context,
    request: &Request,
    object: Object,
    id: &str,
    name: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let rpc_options = query_options(&options, &secret);
    let (method, body) = match object {
        Object::Token => (
            "ACL.TokenRead",
            TokenGetRequest {
                datacenter,
                token_id: id,
                token_id_type: "accessor",
                expanded: false,
                options: rpc_options,
            }
            .encode(),
        ),
        Object::Policy => (
            "ACL.PolicyRead",
            GetRequest {
                datacenter,
                id,
                name,
                options: rpc_options,
            }
            .encode(object),
        ),
        Object::Role | Object::AuthMethod | Object::BindingRule => (
            match object {
                Object::Role => "ACL.RoleRead",
                Object::AuthMethod => "ACL.AuthMethodRead",
                _ => "ACL.BindingRuleRead",
            },
            GetRequest {
                datacenter,
                id,
                name,
                options: rpc_options,
            }
            .encode(object),
        ),
    };
    read_in(
        ctx,
        datacenter,
        method,
        body,
        &options,
        move |body, reply| {
            let (meta, value) = match object {
                Object::Token => {
                    let (meta, token) = read_token_response(body).map_err(malformed)?;
                    (meta, token.map(|t| token_value(t, false)))
                }
                Object::Policy => {
                    let (meta, policies) =
                        read_objects(body, "Policy", read_policy).map_err(malformed)?;
                    let value = policies.first().map(|p| policy_json(p, false));
                    (meta, value)
                }
                Object::Role => {
                    let (meta, roles) = read_objects(body, "Role", read_role).map_err(malformed)?;
                    let value = roles
                        .into_iter()
                        .next()
                        .map(|r| role_json_linked(&r.role, r.policies));
                    (meta, value)
                }
                Object::AuthMethod => {
                    let (meta, methods) =
                        read_objects(body, "AuthMethod", read_auth_method).map_err(malformed)?;
                    let value = methods.first().map(|m| auth_method_json(m, false));
                    (meta, value)
                }
                Object::BindingRule => {
                    let (meta, rules) =
                        read_objects(body, "BindingRule", read_binding_rule).map_err(malformed)?;
                    (meta, rules.first().map(binding_rule_json))
                }
            };
            let noun = match object {
                Object::Token => "token",
                Object::Policy => "policy",
                Object::Role => "role",
                Object::AuthMethod => "auth method",
                Object::BindingRule => "binding rule",
            };
            let value = value.ok_or_else(|| not_found(noun))?;
            reply.json(200, &read_headers(&meta), &value);
            Ok(())
        },
    )
}

/// A list's filters, as its query parameters gave them (empty: unset).
#[derive(Clone, Debug, Default)]
pub struct ListFilters {
    pub policy: String,
    pub role: String,
    pub auth_method: String,
}

/// `GET /v1/acl/tokens`, `/v1/acl/policies`, `/v1/acl/roles`, `/v1/acl/auth-methods`,
/// `/v1/acl/binding-rules`, in `datacenter` (empty: this one).
pub fn list(
    ctx: &Context,
    request: &Request,
    object: Object,
    filters: ListFilters,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = ListRequest {
        datacenter,
        policy: &filters.policy,
        role: &filters.role,
        auth_method: &filters.auth_method,
        // What Consul's agent asks for a list: every token, local or global.
        include_local: true,
        include_global: true,
        options: query_options(&options, &secret),
    }
    .encode(object);
    let method = match object {
        Object::Token => "ACL.TokenList",
        Object::Policy => "ACL.PolicyList",
        Object::Role => "ACL.RoleList",
        Object::AuthMethod => "ACL.AuthMethodList",
        Object::BindingRule => "ACL.BindingRuleList",
    };
    read_in(
        ctx,
        datacenter,
        method,
        body,
        &options,
        move |body, reply| {
            let (meta, values): (_, Vec<Value>) = match object {
                Object::Token => {
                    let (meta, tokens) =
                        read_objects(body, "Tokens", read_token).map_err(malformed)?;
                    (
                        meta,
                        tokens.into_iter().map(|t| token_value(t, true)).collect(),
                    )
                }
                Object::Policy => {
                    let (meta, policies) =
                        read_objects(body, "Policies", read_policy).map_err(malformed)?;
                    (
                        meta,
                        policies.iter().map(|p| policy_json(p, true)).collect(),
                    )
                }
                Object::Role => {
                    let (meta, roles) =
                        read_objects(body, "Roles", read_role).map_err(malformed)?;
                    (
                        meta,
                        roles
                            .into_iter()
                            .map(|r| role_json_linked(&r.role, r.policies))
                            .collect(),
                    )
                }
                Object::AuthMethod => {
                    let (meta, methods) =
                        read_objects(body, "AuthMethods", read_auth_method).map_err(malformed)?;
                    (
                        meta,
                        methods.iter().map(|m| auth_method_json(m, true)).collect(),
                    )
                }
                Object::BindingRule => {
                    let (meta, rules) =
                        read_objects(body, "BindingRules", read_binding_rule).map_err(malformed)?;
                    (meta, rules.iter().map(binding_rule_json).collect())
                }
            };
            reply.json(200, &read_headers(&meta), &Value::Array(values));
            Ok(())
        },
    )
}

/// `GET /v1/acl/token/self`: `ACL.TokenRead` by the request's own secret (the anonymous
/// token's when it has none); Consul's 403 `ACL not found` for a secret no token has. In
/// `datacenter` (empty: this one), whose tokens are its own.
pub fn token_self(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let secret = if secret.is_empty() {
        builtin::ANONYMOUS_TOKEN_SECRET_ID.to_string()
    } else {
        secret
    };
    let body = TokenGetRequest {
        datacenter,
        token_id: &secret,
        token_id_type: "secret",
        expanded: false,
        options: query_options(&options, &secret),
    }
    .encode();
    let method = "ACL.TokenRead";
    read_in(
        ctx,
        datacenter,
        method,
        body,
        &options,
        move |body, reply| {
            let (meta, token) = read_token_response(body).map_err(malformed)?;
            let token = token.ok_or_else(acl_not_found)?;
            reply.json(200, &read_headers(&meta), &token_value(token, false));
            Ok(())
        },
    )
}

fn arc_links(links: &[LinkRef]) -> Links {
    links
        .iter()
        .map(|l| (Arc::from(l.id.as_str()), Arc::from(l.name.as_str())))
        .collect()
}

/// The `ACLToken` a token write carries.
pub fn token_record(write: &TokenWrite) -> TokenRecord {
    let policies = arc_links(&write.policies);
    let roles = arc_links(&write.roles);
    TokenRecord {
        token: Token {
            accessor_id: Arc::from(write.accessor_id.as_str()),
            secret_id: Arc::from(write.secret_id.as_str()),
            description: write.description.clone(),
            policies: policies.iter().map(|(id, _)| id.clone()).collect(),
            roles: roles.iter().map(|(id, _)| id.clone()).collect(),
            service_identities: write.service_identities.clone(),
            node_identities: write.node_identities.clone(),
            templated_policies: write.templated_policies.clone(),
            local: write.local,
            auth_method: write.auth_method.clone(),
            expiration_time_ns: write.expiration_time_ns,
            create_time_ns: write.now_unix_ns,
            ..crate::store::acl::Token::empty()
        },
        policies,
        roles,
        expiration_ttl_ns: write.expiration_ttl_ns,
    }
}

/// The `ACLPolicy` a policy write carries; a create carries no ID (the server picks it, as
/// Consul's `ACL.PolicySet` creates a policy without one).
fn policy_of(write: &PolicyWrite) -> Policy {
    Policy {
        id: Arc::from(if write.create { "" } else { write.id.as_str() }),
        name: Arc::from(write.name.as_str()),
        description: write.description.clone(),
        rules: write.rules.clone(),
        datacenters: write.datacenters.clone(),
        hash: Vec::new(),
        create_index: 0,
        modify_index: 0,
    }
}

/// The `ACLRole` a role write carries (a create without an ID, as for policies) and its
/// policy links.
fn role_of(write: &RoleWrite) -> (Role, Links) {
    let links = arc_links(&write.policies);
    let role = Role {
        id: Arc::from(if write.create { "" } else { write.id.as_str() }),
        name: Arc::from(write.name.as_str()),
        description: write.description.clone(),
        policies: links.iter().map(|(id, _)| id.clone()).collect(),
        service_identities: write.service_identities.clone(),
        node_identities: write.node_identities.clone(),
        templated_policies: write.templated_policies.clone(),
        hash: Vec::new(),
        create_index: 0,
        modify_index: 0,
    };
    (role, links)
}

/// An ACL write the handler decided on, as its typed call: the reply (the object as the
/// leader applied it) rendered as the server's handler answers, `true` for a delete or a
/// logout. The leader's own commands never come from a handler (a bootstrap and a login
/// are sent by [`bootstrap`] and [`login`] before any command is made).
pub fn write(ctx: &Context, request: &Request, op: &AclOp) -> Outcome {
    write_op_in(ctx, request, op, "")
}

/// [`write`] in `datacenter` (empty: this one): the call names it, and that datacenter's
/// leader applies it.
fn write_op_in(ctx: &Context, request: &Request, op: &AclOp, datacenter: &str) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let Some((method, body, answer)) = write_call(op, datacenter, &secret) else {
        return super::client::no_call_for_write();
    };
    write_in(ctx, datacenter, method, body, move |body, reply| {
        reply.json(200, b"", &answer(body)?);
        Ok(())
    })
}

/// The typed call that carries `op` to `datacenter` with the caller's `secret`: Consul's
/// method, its msgpack body, and how its reply is rendered. `None` for the leader's own
/// commands, which no handler makes for a typed call.
fn write_call(
    op: &AclOp,
    datacenter: &str,
    secret: &str,
) -> Option<(&'static str, Vec<u8>, RenderReply)> {
    let set = |create: bool| SetRequest {
        datacenter,
        object: &[],
        create,
        token: secret,
    };
    let delete = |id: &str, object: Object| {
        DeleteRequest {
            datacenter,
            id,
            token: secret,
        }
        .encode(object)
    };
    let call: (&'static str, Vec<u8>, RenderReply) = match op {
        AclOp::TokenSet(write) => (
            "ACL.TokenSet",
            set(write.create).encode(Object::Token, |w| {
                write_token_record(w, &token_record(write))
            }),
            token_answer,
        ),
        AclOp::TokenClone {
            source_accessor_id,
            description,
            ..
        } => (
            "ACL.TokenClone",
            clone_body(set(false), source_accessor_id, description.as_deref()),
            token_answer,
        ),
        AclOp::TokenDelete { accessor_id, .. } => (
            "ACL.TokenDelete",
            delete(accessor_id, Object::Token),
            deleted,
        ),
        AclOp::PolicySet(write) => (
            "ACL.PolicySet",
            set(write.create).encode(Object::Policy, |w| write_policy(w, &policy_of(write))),
            policy_answer,
        ),
        AclOp::PolicyDelete { id } => ("ACL.PolicyDelete", delete(id, Object::Policy), deleted),
        AclOp::RoleSet(write) => {
            let (role, links) = role_of(write);
            let links: Vec<(&str, &str)> = links.iter().map(|(i, n)| (&**i, &**n)).collect();
            (
                "ACL.RoleSet",
                set(write.create).encode(Object::Role, |w| write_role(w, &role, &links)),
                role_answer,
            )
        }
        AclOp::RoleDelete { id } => ("ACL.RoleDelete", delete(id, Object::Role), deleted),
        AclOp::AuthMethodSet(write) => (
            "ACL.AuthMethodSet",
            set(false).encode(Object::AuthMethod, |w| {
                write_auth_method(w, &auth_method_of(write), false)
            }),
            auth_method_answer,
        ),
        AclOp::AuthMethodDelete { name } => (
            "ACL.AuthMethodDelete",
            delete(name, Object::AuthMethod),
            deleted,
        ),
        AclOp::BindingRuleSet(write) => (
            "ACL.BindingRuleSet",
            set(false).encode(Object::BindingRule, |w| {
                write_binding_rule(w, &binding_rule_of(write))
            }),
            binding_rule_answer,
        ),
        AclOp::BindingRuleDelete { id } => (
            "ACL.BindingRuleDelete",
            delete(id, Object::BindingRule),
            deleted,
        ),
        // The login token to delete is the call's own token (`WriteRequest.Token`).
        AclOp::Logout { secret_id } => (
            "ACL.Logout",
            LogoutRequest {
                datacenter,
                token: secret_id,
            }
            .encode(),
            deleted,
        ),
        // The leader's own commands: no handler makes one for a typed call (a bootstrap
        // goes as [`bootstrap`] before its command is made), so one here is a bug.
        AclOp::Initialize { .. }
        | AclOp::InitialManagement { .. }
        | AclOp::ReapExpiredTokens { .. }
        | AclOp::Bootstrap { .. } => return None,
    };
    Some(call)
}

/// Consul's clone request: the source token's accessor and the new token's description.
fn clone_body(request: SetRequest, source_accessor_id: &str, description: Option<&str>) -> Vec<u8> {
    let write = TokenWrite {
        accessor_id: source_accessor_id.to_string(),
        description: description.unwrap_or_default().to_string(),
        ..TokenWrite::default()
    };
    request.encode(Object::Token, |w| {
        write_token_record(w, &token_record(&write))
    })
}

/// The `ACLAuthMethod` an auth method write carries.
fn auth_method_of(write: &AuthMethodWrite) -> AuthMethod {
    AuthMethod {
        name: Arc::from(write.name.as_str()),
        method_type: write.method_type.clone(),
        display_name: write.display_name.clone(),
        description: write.description.clone(),
        max_token_ttl_ns: write.max_token_ttl_ns,
        token_locality: write.token_locality.clone(),
        config_json: write.config_json.clone(),
        create_index: 0,
        modify_index: 0,
    }
}

/// The `ACLBindingRule` a binding rule write carries; a create carries no ID (the server
/// picks it, as Consul's `ACL.BindingRuleSet` creates a rule without one).
fn binding_rule_of(write: &BindingRuleWrite) -> BindingRule {
    BindingRule {
        id: Arc::from(if write.create { "" } else { write.id.as_str() }),
        description: write.description.clone(),
        auth_method: Arc::from(write.auth_method.as_str()),
        selector: write.selector.clone(),
        bind_type: write.bind_type.clone(),
        bind_name: write.bind_name.clone(),
        bind_vars_name: write.bind_vars_name.clone(),
        create_index: 0,
        modify_index: 0,
    }
}

/// `POST /v1/acl/login` once the handler decoded it: `ACL.Login` (on the leader, which
/// verifies the bearer token with the auth method and writes the token its binding rules
/// bind); the new token rendered as the server's handler answers it. In `datacenter`
/// (empty: this one), whose auth methods verify it and whose token it is.
pub fn login(ctx: &Context, ask: &LoginAsk, datacenter: &str) -> Outcome {
    let body = LoginRequest {
        datacenter,
        auth_method: &ask.auth_method,
        bearer_token: &ask.bearer_token,
        meta: ask
            .meta
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        // A login carries no token, as Consul's agent sends it.
        token: "",
    }
    .encode();
    write_in(ctx, datacenter, "ACL.Login", body, move |body, reply| {
        reply.json(200, b"", &token_answer(body)?);
        Ok(())
    })
}

/// `PUT /v1/acl/bootstrap` once the handler decoded it: `ACL.BootstrapTokens` with the
/// secret the body chose (checked by the server); the token rendered with its secret as
/// `ID`, as the server's handler answers, and the server's refusal as Consul's agent
/// answers it (403 `Permission denied: ACL bootstrap no longer allowed (reset index: N)`).
pub fn bootstrap(ctx: &Context, chosen_secret: &str) -> Outcome {
    let body = BootstrapRequest {
        bootstrap_secret: chosen_secret,
        datacenter: "",
        options: RpcQueryOptions::default(),
    }
    .encode();
    let refusal = |error: CallError| match error {
        CallError::Remote(text) => bootstrap_error(text),
        other => write_error(other),
    };
    call_mapped(
        ctx,
        "",
        "ACL.BootstrapTokens",
        body,
        CALL_TIMEOUT,
        Retry::NotSent,
        refusal,
        move |body, reply| {
            reply.json(200, b"", &bootstrap_json(token_answer(body)?));
            Ok(())
        },
    )
}

/// `GET /v1/acl/replication` on a client agent, or naming another datacenter:
/// `ACL.ReplicationStatus` (a `DCSpecificRequest`; the server needs no token for it, as
/// Consul's), rendered as the server's handler renders its own status.
pub fn replication(ctx: &Context, request: &Request, datacenter: &str) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = DcSpecificRequest {
        datacenter,
        options: RpcQueryOptions {
            token: &secret,
            // The leader's status, as Consul's endpoint asks for it.
            require_consistent: true,
            ..RpcQueryOptions::default()
        },
        ..DcSpecificRequest::default()
    }
    .encode();
    let options = crate::api::QueryOptions {
        min_index: 0,
        wait: std::time::Duration::ZERO,
        consistency: crate::shard::runtime::Consistency::Consistent,
        max_stale: None,
        filter: None,
    };
    let method = "ACL.ReplicationStatus";
    read_in(ctx, datacenter, method, body, &options, |body, reply| {
        let status = ReplicationStatus::decode(body).map_err(malformed)?;
        reply.json(200, b"", &replication_json(&status));
        Ok(())
    })
}

/// The ACL requests naming another datacenter (`?dc=`), as their typed calls naming it
/// ([`super::client::across_datacenters`]): run by their handlers with that datacenter
/// (`api::acl::for_datacenter`), so they are parsed and refused as in this one; a write
/// the handler decided on becomes its typed call naming the datacenter, whose leader
/// applies it. A bootstrap is this datacenter's whatever `?dc` says, as Consul's.
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    let handler = crate::api::acl::for_datacenter(request.path)?;
    let outcome = crate::api::run_for_datacenter(ctx, request, datacenter, handler);
    if request.path == "/v1/acl/bootstrap" {
        return Some(outcome);
    }
    Some(outcome.and_then(|outcome| match outcome {
        Outcome::Write(op) => match &op.command {
            crate::store::Command::Acl(acl_op) => Ok(write_op_in(ctx, request, acl_op, datacenter)),
            _ => Err(ApiError::Internal("not an ACL write".to_string())),
        },
        other => Ok(other),
    }))
}

/// How a write's reply becomes the handler's JSON answer.
type RenderReply = fn(&[u8]) -> Result<Value, ApiError>;

fn token_answer(body: &[u8]) -> Result<Value, ApiError> {
    let record = read_token(&mut Reader::new(body)).map_err(malformed)?;
    Ok(token_value(record, false))
}

fn policy_answer(body: &[u8]) -> Result<Value, ApiError> {
    let policy = read_policy(&mut Reader::new(body)).map_err(malformed)?;
    Ok(policy_json(&policy, false))
}

fn role_answer(body: &[u8]) -> Result<Value, ApiError> {
    let record = read_role(&mut Reader::new(body)).map_err(malformed)?;
    Ok(role_json_linked(&record.role, record.policies))
}

fn auth_method_answer(body: &[u8]) -> Result<Value, ApiError> {
    let method = read_auth_method(&mut Reader::new(body)).map_err(malformed)?;
    Ok(auth_method_json(&method, false))
}

fn binding_rule_answer(body: &[u8]) -> Result<Value, ApiError> {
    let rule = read_binding_rule(&mut Reader::new(body)).map_err(malformed)?;
    Ok(binding_rule_json(&rule))
}

/// A delete's (or logout's) answer: the server's reply (the object's ID or name, or a bool)
/// is not shown; the handler answers `true`.
fn deleted(_: &[u8]) -> Result<Value, ApiError> {
    Ok(Value::Bool(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::msgpack::Writer;

    #[test]
    fn a_token_write_travels_as_the_acl_token_it_sets() {
        let write = TokenWrite {
            accessor_id: "AbC-1".into(),
            secret_id: "s".into(),
            description: "d".into(),
            policies: vec![LinkRef {
                id: String::new(),
                name: "by-name".into(),
            }],
            expiration_ttl_ns: 5_000_000_000,
            create: true,
            ..TokenWrite::default()
        };
        let body = set_body(&write);
        let request = SetRequest::decode(Object::Token, &body).unwrap();
        assert!(request.create);
        assert_eq!(request.token, "t");
        let record = read_token(&mut Reader::new(request.object)).unwrap();
        assert_eq!(&*record.token.accessor_id, "AbC-1");
        assert_eq!(record.policies, vec![(Arc::from(""), Arc::from("by-name"))]);
        assert_eq!(record.expiration_ttl_ns, 5_000_000_000);
    }

    fn set_body(write: &TokenWrite) -> Vec<u8> {
        SetRequest {
            datacenter: "",
            object: &[],
            create: write.create,
            token: "t",
        }
        .encode(Object::Token, |w: &mut Writer| {
            write_token_record(w, &token_record(write))
        })
    }
}
