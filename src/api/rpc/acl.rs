//! Consul's `ACL.*` endpoints of `acl_endpoint.go`:
//!
//! - `ACL.TokenRead`: a token by accessor ID (`acl:read` needed) or by its own secret (what
//!   an agent resolving a request's token asks); with `Expanded`, also every policy that
//!   applies to it (its own, its roles', and those its identities and templated policies
//!   synthesize) and its roles — all a client agent needs to compile the token
//!   (`api::client_tokens`);
//! - the tokens, policies and roles a client agent's `/v1/acl/*` endpoints read and write
//!   (`client_acl`): `ACL.TokenList|TokenSet|TokenClone|TokenDelete`,
//!   `ACL.PolicyRead|PolicyList|PolicySet|PolicyDelete`, `ACL.RoleRead|RoleList|RoleSet|
//!   RoleDelete`. They check `acl:read` or `acl:write`, as the HTTP routes do
//!   (`api::authz`'s `AclByMethod`); writes run on the leader, prepared by the HTTP
//!   handlers' own code (`api::acl::prepare_*_create`) and applied as the same store
//!   commands, so validation and its words are the apply's; a set answers the object as
//!   the applied version holds it, a delete its ID (tokens) or name (policies, roles);
//! - the auth methods and binding rules (`ACL.AuthMethodRead|List|Set|Delete`,
//!   `ACL.BindingRuleRead|List|Set|Delete`), checked and applied as the tokens' are; their
//!   deletes answer a bool, `false` without writing anything when there is no such row, as
//!   Consul's do;
//! - `ACL.Login`, `ACL.Logout` and `ACL.BootstrapTokens`, on the leader, with the HTTP
//!   handlers' own code (`api::acl::login_token`, `bootstrap_allowed`, …): a login and a
//!   bootstrap answer the new `ACLToken`, a logout `true`; they need no ACL rule (a login
//!   carries no token, a logout's token is the one it deletes);
//! - `ACL.ReplicationStatus` (a `DCSpecificRequest`), on the leader: the status
//!   `GET /v1/acl/replication` renders (`api::acl::replication_status`), with no ACL rule
//!   and whether ACLs are on or off, as Consul's (it leaks nothing, and health checks read
//!   it without a management token).

use super::{
    authorize, decode_error, elsewhere, error_text, propose, read, require, Answer, Placement, Read,
};
use crate::api::acl::{
    bootstrap_allowed, bootstrap_applied, bootstrap_op, bootstrap_secret, login_token,
    prepare_binding_rule_create, prepare_policy_create, prepare_role_create, prepare_token_create,
    LoginAsk,
};
use crate::api::authz::Authz;
use crate::api::server::Server;
use crate::config::acl::DownPolicy;
use crate::consul::rpc::acl::{
    borrowed_links, read_auth_method, read_binding_rule, read_policy, read_role, read_token,
    write_auth_method, write_binding_rule, write_policy, write_policy_stub, write_role,
    write_token, write_token_response, write_token_stub, BootstrapRequest, DeleteRequest,
    ExpandedView, GetRequest, ListRequest, LoginRequest, LogoutRequest, Object, SetRequest,
    TokenGetRequest, TokenView,
};
use crate::consul::rpc::QueryMeta;
use crate::proto::msgpack::{Reader, Writer};
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::acl::apply::{
    AuthMethodWrite, BindingRuleWrite, LinkRef, PolicyWrite, RoleWrite, TokenWrite,
};
use crate::store::acl::authorizer::DefaultPolicy;
use crate::store::acl::{self as acl_store, cache, Token};
use crate::store::acl::{AclOp, Role, TokenFilter};
use crate::store::{Command, CommandResult};
use crate::store::{StoreVersion, Table, Tables};
use std::sync::Arc;

/// Consul's answer when ACLs are off.
pub const ACL_DISABLED: &str = "ACL support disabled";
/// Consul's answer for an object that is not there (`acl.ErrNotFound`).
const ACL_NOT_FOUND: &str = "ACL not found";

struct TokenQuery {
    id: String,
    by_secret: bool,
    expanded: bool,
    datacenter: String,
    now_unix_ns: i64,
    default_policy: &'static str,
    down_policy: &'static str,
    node_name: String,
}

impl TokenQuery {
    fn find(&self, tables: &Tables) -> Option<Arc<Token>> {
        if self.by_secret {
            // The anonymous token answers by its secret even before the leader has
            // written its row, as it does for the server's own requests.
            if self.id.is_empty() {
                return None;
            }
            return cache::token_for_secret(tables, &self.id, self.now_unix_ns);
        }
        acl_store::token_by_accessor(tables, &self.id)
            .filter(|t| !t.is_expired(self.now_unix_ns))
            .cloned()
    }
}

impl Read for TokenQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        // The tokens' index, as Consul's `ACLTokenGet` answers and the HTTP read's
        // `X-Consul-Index` shows.
        (tables.acl.indexes.tokens, WatchSet::new().table(Table::Acl))
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let token = self.find(version);
        let policies = token
            .as_ref()
            .map(|t| acl_store::policy_links(version, &t.policies))
            .unwrap_or_default();
        let roles = token
            .as_ref()
            .map(|t| acl_store::role_links(version, &t.roles))
            .unwrap_or_default();
        let view = token.as_ref().map(|token| TokenView {
            token,
            policies: policies.iter().map(|(i, n)| (&**i, &**n)).collect(),
            roles: roles.iter().map(|(i, n)| (&**i, &**n)).collect(),
        });
        let (expanded_policies, expanded_roles) = match (&token, self.expanded) {
            (Some(token), true) => cache::expanded_policies(version, token),
            _ => Default::default(),
        };
        let role_policy_links: Vec<_> = expanded_roles
            .iter()
            .map(|role| acl_store::policy_links(version, &role.policies))
            .collect();
        let expanded = (self.expanded && token.is_some()).then(|| ExpandedView {
            policies: &expanded_policies,
            roles: expanded_roles
                .iter()
                .zip(&role_policy_links)
                .map(|(role, links)| {
                    let links = links.iter().map(|(i, n)| (&**i, &**n)).collect();
                    (&**role, links)
                })
                .collect(),
            default_policy: self.default_policy,
            down_policy: self.down_policy,
            resolved_by: &self.node_name,
        });
        let mut w = Writer::new();
        write_token_response(
            &mut w,
            meta,
            view.as_ref(),
            &self.datacenter,
            expanded.as_ref(),
        );
        Ok(w.into_inner())
    }
}

/// `ACL.TokenRead`.
pub async fn token_read(server: &Server, call: &TypedCall) -> Answer {
    let request = TokenGetRequest::decode(&call.body).map_err(decode_error)?;
    let wait = super::blocking_wait(server, &request.options);
    if let Some(answer) =
        elsewhere(server, call, request.datacenter, Placement::Anywhere, wait).await
    {
        return answer;
    }
    let ctx = server.context();
    if !ctx.acl_enabled() {
        return Err(ACL_DISABLED.to_string());
    }
    let by_secret = request.by_secret();
    // Reading a token by its own secret needs nothing more than knowing it.
    if !(by_secret && request.token_id == request.options.token) {
        let authz = authorize(server, request.options.token)?;
        require(&authz, |a| a.acl_read())?;
    }
    let config = ctx.config();
    let query = TokenQuery {
        id: request.token_id.to_string(),
        by_secret,
        expanded: request.expanded,
        datacenter: config.datacenter.clone(),
        now_unix_ns: crate::api::context::now_unix_ns(),
        default_policy: match config.acl.default_policy {
            DefaultPolicy::Allow => "allow",
            DefaultPolicy::Deny => "deny",
        },
        down_policy: match config.acl.down_policy {
            DownPolicy::Allow => "allow",
            DownPolicy::Deny => "deny",
            DownPolicy::ExtendCache => "extend-cache",
            DownPolicy::AsyncCache => "async-cache",
        },
        node_name: config.node_name.clone(),
    };
    read(server, call, &request.options, query).await
}

// ---- tokens, policies and roles ----

/// Whether ACLs are on and the call's token may read (or, with `write`, write) ACLs.
fn acl_access(server: &Server, token: &str, write: bool) -> Result<Option<Authz>, String> {
    if !server.context().acl_enabled() {
        return Err(ACL_DISABLED.to_string());
    }
    let authz = authorize(server, token)?;
    require(&authz, |a| if write { a.acl_write() } else { a.acl_read() })?;
    Ok(authz)
}

/// The index of `object`'s table: what its HTTP reads answer in `X-Consul-Index`.
fn object_index(object: Object, tables: &Tables) -> u64 {
    match object {
        Object::Token => tables.acl.indexes.tokens,
        Object::Policy => tables.acl.indexes.policies,
        Object::Role => tables.acl.indexes.roles,
        Object::AuthMethod => tables.acl.indexes.auth_methods,
        Object::BindingRule => tables.acl.indexes.binding_rules,
    }
}

/// Writes a token as the tables hold it (`stub`: as a list shows it).
fn write_token_row(w: &mut Writer, tables: &Tables, token: &Token, stub: bool) {
    let policies = acl_store::policy_links(tables, &token.policies);
    let roles = acl_store::role_links(tables, &token.roles);
    let view = TokenView {
        token,
        policies: borrowed_links(&policies),
        roles: borrowed_links(&roles),
    };
    if stub {
        write_token_stub(w, &view);
    } else {
        write_token(w, &view);
    }
}

/// Writes a role as the tables hold it, its policy links named.
fn write_role_row(w: &mut Writer, tables: &Tables, role: &Role) {
    let links = acl_store::policy_links(tables, &role.policies);
    write_role(w, role, &borrowed_links(&links));
}

/// `ACL.PolicyRead`, `ACL.RoleRead`: one object by ID or name.
struct One {
    object: Object,
    id: String,
    name: String,
}

impl Read for One {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            object_index(self.object, tables),
            WatchSet::new().table(Table::Acl),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let mut w = Writer::new();
        match self.object {
            Object::Policy => {
                let policy = if self.id.is_empty() {
                    acl_store::policy_by_name(version, &self.name)
                } else {
                    acl_store::policy_by_id(version, &self.id)
                };
                meta.write_reply(&mut w, &["Policy"], |_, w| match policy {
                    Some(policy) => write_policy(w, policy),
                    None => w.nil(),
                });
            }
            Object::AuthMethod => {
                let method = acl_store::auth_method_by_name(version, &self.id);
                meta.write_reply(&mut w, &["AuthMethod"], |_, w| match method {
                    Some(method) => write_auth_method(w, method, false),
                    None => w.nil(),
                });
            }
            Object::BindingRule => {
                let rule = acl_store::binding_rule_by_id(version, &self.id);
                meta.write_reply(&mut w, &["BindingRule"], |_, w| match rule {
                    Some(rule) => write_binding_rule(w, rule),
                    None => w.nil(),
                });
            }
            Object::Role | Object::Token => {
                let role = if self.id.is_empty() {
                    acl_store::role_by_name(version, &self.name)
                } else {
                    acl_store::role_by_id(version, &self.id)
                };
                meta.write_reply(&mut w, &["Role"], |_, w| match role {
                    Some(role) => write_role_row(w, version, role),
                    None => w.nil(),
                });
            }
        }
        Ok(w.into_inner())
    }
}

/// `ACL.PolicyRead`, `ACL.RoleRead`, `ACL.AuthMethodRead` or `ACL.BindingRuleRead`
/// (`ACLPolicyGetRequest`, `ACLRoleGetRequest`, `ACLAuthMethodGetRequest`,
/// `ACLBindingRuleGetRequest`); a missing object is a nil one.
pub async fn read_one(server: &Server, call: &TypedCall, object: Object) -> Answer {
    let request = GetRequest::decode(object, &call.body).map_err(decode_error)?;
    let wait = super::blocking_wait(server, &request.options);
    if let Some(answer) =
        elsewhere(server, call, request.datacenter, Placement::Anywhere, wait).await
    {
        return answer;
    }
    acl_access(server, request.options.token, false)?;
    let query = One {
        object,
        id: request.id.to_string(),
        name: request.name.to_string(),
    };
    read(server, call, &request.options, query).await
}

/// `ACL.TokenList`, `ACL.PolicyList`, `ACL.RoleList`.
struct List {
    object: Object,
    policy: Option<String>,
    role: Option<String>,
    auth_method: Option<String>,
    now_unix_ns: i64,
}

impl Read for List {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            object_index(self.object, tables),
            WatchSet::new().table(Table::Acl),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let mut w = Writer::new();
        match self.object {
            Object::Token => {
                let filter = TokenFilter {
                    policy: self.policy.as_deref(),
                    role: self.role.as_deref(),
                    auth_method: self.auth_method.as_deref(),
                };
                let tokens = acl_store::token_list(version, &filter, self.now_unix_ns);
                meta.write_reply(&mut w, &["Tokens"], |_, w| {
                    w.array_len(tokens.len());
                    for token in &tokens {
                        write_token_row(w, version, token, true);
                    }
                });
            }
            Object::Policy => {
                let policies: Vec<_> = acl_store::policy_list(version).collect();
                meta.write_reply(&mut w, &["Policies"], |_, w| {
                    w.array_len(policies.len());
                    for policy in &policies {
                        write_policy_stub(w, policy);
                    }
                });
            }
            Object::Role => {
                let roles = acl_store::role_list(version, self.policy.as_deref());
                meta.write_reply(&mut w, &["Roles"], |_, w| {
                    w.array_len(roles.len());
                    for role in &roles {
                        write_role_row(w, version, role);
                    }
                });
            }
            Object::AuthMethod => {
                let methods: Vec<_> = acl_store::auth_method_list(version).collect();
                meta.write_reply(&mut w, &["AuthMethods"], |_, w| {
                    w.array_len(methods.len());
                    for method in &methods {
                        write_auth_method(w, method, true);
                    }
                });
            }
            Object::BindingRule => {
                let rules = acl_store::binding_rule_list(version, self.auth_method.as_deref());
                meta.write_reply(&mut w, &["BindingRules"], |_, w| {
                    w.array_len(rules.len());
                    for rule in &rules {
                        write_binding_rule(w, rule);
                    }
                });
            }
        }
        Ok(w.into_inner())
    }
}

/// `ACL.TokenList`, `ACL.PolicyList`, `ACL.RoleList`, `ACL.AuthMethodList` or
/// `ACL.BindingRuleList`, with the list's filters.
pub async fn list(server: &Server, call: &TypedCall, object: Object) -> Answer {
    let request = ListRequest::decode(&call.body).map_err(decode_error)?;
    let wait = super::blocking_wait(server, &request.options);
    if let Some(answer) =
        elsewhere(server, call, request.datacenter, Placement::Anywhere, wait).await
    {
        return answer;
    }
    acl_access(server, request.options.token, false)?;
    let filter = |text: &str| (!text.is_empty()).then(|| text.to_string());
    let query = List {
        object,
        policy: filter(request.policy),
        role: filter(request.role),
        auth_method: filter(request.auth_method),
        now_unix_ns: crate::api::context::now_unix_ns(),
    };
    read(server, call, &request.options, query).await
}

/// Proposes an ACL command on the leader; the apply's refusal is the call's error.
async fn apply(server: &Server, op: AclOp) -> Result<(), String> {
    match propose(server, Command::Acl(op)).await? {
        CommandResult::Error(reason) => Err(reason),
        _ => Ok(()),
    }
}

/// The start every ACL write shares: handed to the leader (or another datacenter) when it
/// does not run here, then its token checked for `acl:write`. `Err` carries the answer.
async fn write_here(
    server: &Server,
    call: &TypedCall,
    datacenter: &str,
    token: &str,
) -> Result<Option<Authz>, Answer> {
    if let Some(answer) = elsewhere(server, call, datacenter, Placement::Leader, None).await {
        return Err(answer);
    }
    acl_access(server, token, true).map_err(Err)
}

/// A set's answer: the token as the applied version holds it.
fn token_reply(server: &Server, accessor_id: &str) -> Answer {
    let version = server.context().current_version();
    let token = acl_store::token_by_accessor(&version, accessor_id)
        .ok_or_else(|| ACL_NOT_FOUND.to_string())?;
    let mut w = Writer::new();
    write_token_row(&mut w, &version, token, false);
    Ok(w.into_inner())
}

fn link_refs(links: &[(Arc<str>, Arc<str>)]) -> Vec<LinkRef> {
    links
        .iter()
        .map(|(id, name)| LinkRef {
            id: id.to_string(),
            name: name.to_string(),
        })
        .collect()
}

/// `ACL.TokenSet` (`ACLTokenSetRequest`): a create (`Create`) or an update of the token
/// the request carries.
pub async fn token_set(server: &Server, call: &TypedCall) -> Answer {
    let request = SetRequest::decode(Object::Token, &call.body).map_err(decode_error)?;
    if let Err(answer) = write_here(server, call, request.datacenter, request.token).await {
        return answer;
    }
    let record = read_token(&mut Reader::new(request.object)).map_err(decode_error)?;
    let token = record.token;
    let mut write = TokenWrite {
        accessor_id: token.accessor_id.to_string(),
        secret_id: token.secret_id.to_string(),
        description: token.description,
        policies: link_refs(&record.policies),
        roles: link_refs(&record.roles),
        service_identities: token.service_identities,
        node_identities: token.node_identities,
        templated_policies: token.templated_policies,
        local: token.local,
        // Only a login names the token's auth method, as on the HTTP path.
        auth_method: String::new(),
        expiration_time_ns: token.expiration_time_ns,
        expiration_ttl_ns: record.expiration_ttl_ns,
        now_unix_ns: crate::api::context::now_unix_ns(),
        create: request.create,
        from_login: false,
    };
    let key = if write.create {
        prepare_token_create(&mut write).map_err(|e| error_text(&e))?
    } else {
        write.accessor_id.to_lowercase()
    };
    apply(server, AclOp::TokenSet(Box::new(write))).await?;
    token_reply(server, &key)
}

/// `ACL.TokenClone`: a new token with the source's links and identities, and the request's
/// description (the source's when empty).
pub async fn token_clone(server: &Server, call: &TypedCall) -> Answer {
    let request = SetRequest::decode(Object::Token, &call.body).map_err(decode_error)?;
    if let Err(answer) = write_here(server, call, request.datacenter, request.token).await {
        return answer;
    }
    let record = read_token(&mut Reader::new(request.object)).map_err(decode_error)?;
    let accessor_id = uuid::Uuid::new_v4().to_string();
    let description = record.token.description;
    let op = AclOp::TokenClone {
        source_accessor_id: record.token.accessor_id.to_string(),
        accessor_id: accessor_id.clone(),
        secret_id: uuid::Uuid::new_v4().to_string(),
        description: (!description.is_empty()).then_some(description),
        now_unix_ns: crate::api::context::now_unix_ns(),
    };
    apply(server, op).await?;
    token_reply(server, &accessor_id)
}

/// `ACL.PolicySet` (`ACLPolicySetRequest`): a create when the policy has no ID.
pub async fn policy_set(server: &Server, call: &TypedCall) -> Answer {
    let request = SetRequest::decode(Object::Policy, &call.body).map_err(decode_error)?;
    if let Err(answer) = write_here(server, call, request.datacenter, request.token).await {
        return answer;
    }
    let policy = read_policy(&mut Reader::new(request.object)).map_err(decode_error)?;
    let mut write = PolicyWrite {
        id: policy.id.to_string(),
        name: policy.name.to_string(),
        description: policy.description,
        rules: policy.rules,
        datacenters: policy.datacenters,
        create: policy.id.is_empty(),
    };
    let key = if write.create {
        prepare_policy_create(&mut write).map_err(|e| error_text(&e))?
    } else {
        write.id.to_lowercase()
    };
    apply(server, AclOp::PolicySet(Box::new(write))).await?;
    let version = server.context().current_version();
    let policy =
        acl_store::policy_by_id(&version, &key).ok_or_else(|| ACL_NOT_FOUND.to_string())?;
    let mut w = Writer::new();
    write_policy(&mut w, policy);
    Ok(w.into_inner())
}

/// `ACL.RoleSet` (`ACLRoleSetRequest`): a create when the role has no ID.
pub async fn role_set(server: &Server, call: &TypedCall) -> Answer {
    let request = SetRequest::decode(Object::Role, &call.body).map_err(decode_error)?;
    if let Err(answer) = write_here(server, call, request.datacenter, request.token).await {
        return answer;
    }
    let record = read_role(&mut Reader::new(request.object)).map_err(decode_error)?;
    let role = record.role;
    let mut write = RoleWrite {
        id: role.id.to_string(),
        name: role.name.to_string(),
        description: role.description,
        policies: link_refs(&record.policies),
        service_identities: role.service_identities,
        node_identities: role.node_identities,
        templated_policies: role.templated_policies,
        create: role.id.is_empty(),
    };
    let key = if write.create {
        prepare_role_create(&mut write).map_err(|e| error_text(&e))?
    } else {
        write.id.to_lowercase()
    };
    apply(server, AclOp::RoleSet(Box::new(write))).await?;
    let version = server.context().current_version();
    let role = acl_store::role_by_id(&version, &key).ok_or_else(|| ACL_NOT_FOUND.to_string())?;
    let mut w = Writer::new();
    write_role_row(&mut w, &version, role);
    Ok(w.into_inner())
}

/// `ACL.TokenDelete`, `ACL.PolicyDelete`, `ACL.RoleDelete`: answers the token's accessor,
/// or the policy's or role's name, as Consul's do. A token may not delete itself (the
/// apply compares the requester's secret, as for the HTTP delete).
pub async fn delete(server: &Server, call: &TypedCall, object: Object) -> Answer {
    let request = DeleteRequest::decode(object, &call.body).map_err(decode_error)?;
    let authz = match write_here(server, call, request.datacenter, request.token).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let id = request.id.to_string();
    let answer = {
        let version = server.context().current_version();
        match object {
            Object::Token => id.clone(),
            Object::Policy => acl_store::policy_by_id(&version, &id)
                .map(|p| p.name.to_string())
                .unwrap_or_default(),
            Object::Role => acl_store::role_by_id(&version, &id)
                .map(|r| r.name.to_string())
                .unwrap_or_default(),
            Object::AuthMethod | Object::BindingRule => {
                // Consul's answer is a bool: false, and nothing written, when there is no
                // such row.
                let exists = if object == Object::AuthMethod {
                    acl_store::auth_method_by_name(&version, &id).is_some()
                } else {
                    acl_store::binding_rule_by_id(&version, &id).is_some()
                };
                if !exists {
                    let mut w = Writer::new();
                    w.bool(false);
                    return Ok(w.into_inner());
                }
                String::new()
            }
        }
    };
    let op = match object {
        Object::Token => AclOp::TokenDelete {
            accessor_id: id,
            requester_secret_id: authz
                .as_ref()
                .map(|a| a.secret_id.to_string())
                .unwrap_or_default(),
        },
        Object::Policy => AclOp::PolicyDelete { id },
        Object::Role => AclOp::RoleDelete { id },
        Object::AuthMethod => AclOp::AuthMethodDelete { name: id },
        Object::BindingRule => AclOp::BindingRuleDelete { id },
    };
    apply(server, op).await?;
    let mut w = Writer::new();
    match object {
        Object::AuthMethod | Object::BindingRule => w.bool(true),
        Object::Token | Object::Policy | Object::Role => w.str(&answer),
    }
    Ok(w.into_inner())
}

// ---- auth methods, binding rules, login, logout, bootstrap ----

/// `ACL.AuthMethodSet` (`ACLAuthMethodSetRequest`): a create, or an update of the method
/// of that name; answers the method as the applied version holds it.
pub async fn auth_method_set(server: &Server, call: &TypedCall) -> Answer {
    let request = SetRequest::decode(Object::AuthMethod, &call.body).map_err(decode_error)?;
    if let Err(answer) = write_here(server, call, request.datacenter, request.token).await {
        return answer;
    }
    let method = read_auth_method(&mut Reader::new(request.object)).map_err(decode_error)?;
    let name = method.name.to_string();
    let write = AuthMethodWrite {
        name: name.clone(),
        method_type: method.method_type,
        display_name: method.display_name,
        description: method.description,
        max_token_ttl_ns: method.max_token_ttl_ns,
        token_locality: method.token_locality,
        config_json: method.config_json,
    };
    apply(server, AclOp::AuthMethodSet(Box::new(write))).await?;
    let version = server.context().current_version();
    let method =
        acl_store::auth_method_by_name(&version, &name).ok_or_else(|| ACL_NOT_FOUND.to_string())?;
    let mut w = Writer::new();
    write_auth_method(&mut w, method, false);
    Ok(w.into_inner())
}

/// `ACL.BindingRuleSet` (`ACLBindingRuleSetRequest`): a create when the rule has no ID
/// (the server picks it, as Consul's), an update otherwise.
pub async fn binding_rule_set(server: &Server, call: &TypedCall) -> Answer {
    let request = SetRequest::decode(Object::BindingRule, &call.body).map_err(decode_error)?;
    if let Err(answer) = write_here(server, call, request.datacenter, request.token).await {
        return answer;
    }
    let rule = read_binding_rule(&mut Reader::new(request.object)).map_err(decode_error)?;
    let mut write = BindingRuleWrite {
        id: rule.id.to_string(),
        description: rule.description,
        auth_method: rule.auth_method.to_string(),
        selector: rule.selector,
        bind_type: rule.bind_type,
        bind_name: rule.bind_name,
        bind_vars_name: rule.bind_vars_name,
        create: rule.id.is_empty(),
    };
    let key = if write.create {
        prepare_binding_rule_create(&mut write).map_err(|e| error_text(&e))?
    } else {
        write.id.to_lowercase()
    };
    apply(server, AclOp::BindingRuleSet(Box::new(write))).await?;
    let version = server.context().current_version();
    let rule =
        acl_store::binding_rule_by_id(&version, &key).ok_or_else(|| ACL_NOT_FOUND.to_string())?;
    let mut w = Writer::new();
    write_binding_rule(&mut w, rule);
    Ok(w.into_inner())
}

/// `ACL.Login` (`ACLLoginRequest`): on the leader, the bearer token verified by the auth
/// method and the token its binding rules bind written (the HTTP handler's own
/// `api::acl::login_token`); answers the new `ACLToken`.
pub async fn login(server: &Server, call: &TypedCall) -> Answer {
    let request = LoginRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    if !server.context().acl_enabled() {
        return Err(ACL_DISABLED.to_string());
    }
    if !request.token.is_empty() {
        // Consul's words: a login is how a token is had, so it carries none.
        return Err("do not provide a token when logging in".to_string());
    }
    let ask = LoginAsk {
        auth_method: request.auth_method.to_string(),
        bearer_token: request.bearer_token.to_string(),
        meta: request
            .meta
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let (token, accessor_id) = login_token(server.context(), &ask).map_err(|e| error_text(&e))?;
    apply(server, AclOp::TokenSet(Box::new(token))).await?;
    token_reply(server, &accessor_id)
}

/// `ACL.Logout` (`ACLLogoutRequest`): deletes the login token the request's own token is;
/// `ACL not found` for an unknown one, Consul's refusal for a token no login made.
pub async fn logout(server: &Server, call: &TypedCall) -> Answer {
    let request = LogoutRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    if !server.context().acl_enabled() {
        return Err(ACL_DISABLED.to_string());
    }
    if request.token.is_empty() {
        return Err(ACL_NOT_FOUND.to_string());
    }
    let op = AclOp::Logout {
        secret_id: request.token.to_string(),
    };
    apply(server, op).await?;
    let mut w = Writer::new();
    w.bool(true);
    Ok(w.into_inner())
}

/// `ACL.BootstrapTokens` (`ACLInitialTokenBootstrapRequest`): on the leader, the first
/// management token (with the request's `BootstrapSecret`, or a new one), once — or again
/// with the reset index the operator wrote into the data directory, as the HTTP handler
/// allows it (`api::acl::bootstrap_allowed`); answers the new `ACLToken`, or Consul's
/// `ACL bootstrap no longer allowed (reset index: N)`.
pub async fn bootstrap(server: &Server, call: &TypedCall) -> Answer {
    let request = BootstrapRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let ctx = server.context();
    if !ctx.acl_enabled() {
        return Err(ACL_DISABLED.to_string());
    }
    let secret_id = bootstrap_secret(request.bootstrap_secret).map_err(|e| error_text(&e))?;
    let reset_index = bootstrap_allowed(ctx)?;
    let (op, accessor_id) = bootstrap_op(secret_id, reset_index);
    apply(server, op).await?;
    bootstrap_applied(ctx.config().data_dir.as_deref(), reset_index);
    token_reply(server, &accessor_id)
}

/// `ACL.ReplicationStatus` (`DCSpecificRequest`): on the leader (Consul's endpoint makes it
/// a consistent read), the datacenter's `ACLReplicationStatus`.
pub async fn replication_status(server: &Server, call: &TypedCall) -> Answer {
    let request =
        crate::consul::rpc::catalog::DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    Ok(crate::api::acl::replication_status(server.context()).encode())
}
