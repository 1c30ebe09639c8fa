//! ACL writes as replicated commands, with Consul's validation and error texts.
//!
//! Consul validates most ACL writes in its RPC endpoint before Raft and again, partly, in the
//! state store. Here the whole validation runs inside the apply, against the exact version the
//! write lands on, so two racing writes can never both pass a uniqueness check. The proposer
//! only generates what must be random or timed (UUIDs, the creation time) and puts it in the
//! command; the error a client sees is the text returned in [`CommandResult::Error`].
//!
//! Every path is all-or-nothing: validation happens before the first mutation.

use super::builtin::{self, is_reserved_id, RESERVED_ID_PREFIX};
use super::{
    auth_method_key, binding_rule_key, policy_key, role_key, token_key, AUTH_METHODS_KEY,
    BINDING_RULES_KEY, POLICIES_KEY, ROLES_KEY, TOKENS_KEY,
};
use super::{
    fold, is_uuid, push_changes, rules, AclTables, AuthMethod, BindingRule, NodeIdentity, Policy,
    Role, ServiceIdentity, TemplatedPolicy, Token,
};
use crate::proto::duration::format_go_duration;
use crate::store::{Change, CommandResult, Table, Tables};
use imbl::OrdMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Shortest token lifetime accepted (Consul's `acl_token_min_expiration_ttl` default).
pub const TOKEN_EXPIRATION_TTL_MIN_NS: i64 = 60_000_000_000;
/// Longest token lifetime accepted (Consul's `acl_token_max_expiration_ttl` default, 24 h).
pub const TOKEN_EXPIRATION_TTL_MAX_NS: i64 = 86_400_000_000_000;
/// Longest description, rules excluded, accepted on any ACL object.
pub const DESCRIPTION_BYTES_MAX: usize = 64 * 1024;
/// Most links (policies, roles, identities, templated policies) one token or role may carry.
pub const LINKS_MAX: usize = 1024;
/// Most tokens one reap command deletes, so a backlog is cleared in bounded entries.
pub const REAP_TOKENS_MAX: u32 = 4096;

/// A link as a client names it: by ID, or by name when the ID is empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRef {
    pub id: String,
    pub name: String,
}

/// A token create or update, as the HTTP layer decoded it plus what the proposer stamped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenWrite {
    /// On create, the client's or a freshly generated UUID.
    pub accessor_id: String,
    /// On create, the client's or a freshly generated UUID; on update, empty keeps it.
    pub secret_id: String,
    pub description: String,
    pub policies: Vec<LinkRef>,
    pub roles: Vec<LinkRef>,
    pub service_identities: Vec<ServiceIdentity>,
    pub node_identities: Vec<NodeIdentity>,
    pub templated_policies: Vec<TemplatedPolicy>,
    pub local: bool,
    pub auth_method: String,
    pub expiration_time_ns: Option<i64>,
    /// `ExpirationTTL`; only valid on create.
    pub expiration_ttl_ns: i64,
    /// The proposer's clock: the creation time on create, "now" for expiry checks.
    pub now_unix_ns: i64,
    /// `PUT /v1/acl/token` (create) rather than `PUT /v1/acl/token/<accessor>`.
    pub create: bool,
    /// Created by `/v1/acl/login`: links to missing roles are kept, but a token granting
    /// nothing is refused.
    pub from_login: bool,
}

/// A policy create or update.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyWrite {
    pub id: String,
    pub name: String,
    pub description: String,
    pub rules: String,
    pub datacenters: Vec<String>,
    pub create: bool,
}

/// A role create or update.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleWrite {
    pub id: String,
    pub name: String,
    pub description: String,
    pub policies: Vec<LinkRef>,
    pub service_identities: Vec<ServiceIdentity>,
    pub node_identities: Vec<NodeIdentity>,
    pub templated_policies: Vec<TemplatedPolicy>,
    pub create: bool,
}

/// An auth method create or update (by name).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthMethodWrite {
    pub name: String,
    pub method_type: String,
    pub display_name: String,
    pub description: String,
    pub max_token_ttl_ns: i64,
    pub token_locality: String,
    pub config_json: String,
}

/// A binding rule create or update.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindingRuleWrite {
    pub id: String,
    pub description: String,
    pub auth_method: String,
    pub selector: String,
    pub bind_type: String,
    pub bind_name: String,
    pub bind_vars_name: Option<String>,
    pub create: bool,
}

/// An ACL write, as carried in a Raft entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AclOp {
    /// The leader, on taking office: create or upgrade the builtin policies and create the
    /// anonymous token where missing.
    Initialize {
        now_unix_ns: i64,
    },
    /// `/v1/acl/bootstrap`: the first management token, once (or again with the reset index
    /// an operator put in the data directory; 0 for none).
    Bootstrap {
        accessor_id: String,
        secret_id: String,
        now_unix_ns: i64,
        reset_index: u64,
    },
    /// `acl.tokens.initial_management`: bootstraps with the configured secret while bootstrap
    /// is still possible, otherwise creates the token if no token has that secret.
    InitialManagement {
        accessor_id: String,
        secret_id: String,
        now_unix_ns: i64,
    },
    TokenSet(Box<TokenWrite>),
    /// `/v1/acl/token/<accessor>/clone`.
    TokenClone {
        source_accessor_id: String,
        accessor_id: String,
        secret_id: String,
        description: Option<String>,
        now_unix_ns: i64,
    },
    /// `DELETE /v1/acl/token/<accessor>`; `requester_secret_id` is the token the request
    /// authenticated with (deleting it is refused).
    TokenDelete {
        accessor_id: String,
        requester_secret_id: String,
    },
    /// `/v1/acl/logout`: deletes a token created by login, by its secret.
    Logout {
        secret_id: String,
    },
    PolicySet(Box<PolicyWrite>),
    PolicyDelete {
        id: String,
    },
    RoleSet(Box<RoleWrite>),
    RoleDelete {
        id: String,
    },
    AuthMethodSet(Box<AuthMethodWrite>),
    /// Deletes the method, its binding rules and every token it created.
    AuthMethodDelete {
        name: String,
    },
    BindingRuleSet(Box<BindingRuleWrite>),
    BindingRuleDelete {
        id: String,
    },
    /// The leader's token reaper: deletes up to `tokens_max` tokens expired at `now_unix_ns`.
    ReapExpiredTokens {
        now_unix_ns: i64,
        tokens_max: u32,
    },
}

type ApplyResult = Result<(), String>;

pub(crate) fn apply(
    tables: &mut Tables,
    index: u64,
    op: &AclOp,
    changes: &mut Vec<Change>,
) -> CommandResult {
    let before = changes.len();
    let result = match op {
        AclOp::Initialize { now_unix_ns } => initialize(tables, index, *now_unix_ns, changes),
        AclOp::Bootstrap {
            accessor_id,
            secret_id,
            now_unix_ns,
            reset_index,
        } => bootstrap(
            tables,
            index,
            accessor_id,
            secret_id,
            builtin::BOOTSTRAP_TOKEN_DESCRIPTION,
            *now_unix_ns,
            *reset_index,
            changes,
        ),
        AclOp::InitialManagement {
            accessor_id,
            secret_id,
            now_unix_ns,
        } => initial_management(tables, index, accessor_id, secret_id, *now_unix_ns, changes),
        AclOp::TokenSet(write) => token_set(tables, index, write, changes),
        AclOp::TokenClone {
            source_accessor_id,
            accessor_id,
            secret_id,
            description,
            now_unix_ns,
        } => token_clone(
            tables,
            index,
            source_accessor_id,
            accessor_id,
            secret_id,
            description.as_deref(),
            *now_unix_ns,
            changes,
        ),
        AclOp::TokenDelete {
            accessor_id,
            requester_secret_id,
        } => token_delete(tables, index, accessor_id, requester_secret_id, changes),
        AclOp::Logout { secret_id } => logout(tables, index, secret_id, changes),
        AclOp::PolicySet(write) => policy_set(tables, index, write, changes),
        AclOp::PolicyDelete { id } => policy_delete(tables, index, id, changes),
        AclOp::RoleSet(write) => role_set(tables, index, write, changes),
        AclOp::RoleDelete { id } => role_delete(tables, index, id, changes),
        AclOp::AuthMethodSet(write) => auth_method_set(tables, index, write, changes),
        AclOp::AuthMethodDelete { name } => auth_method_delete(tables, index, name, changes),
        AclOp::BindingRuleSet(write) => binding_rule_set(tables, index, write, changes),
        AclOp::BindingRuleDelete { id } => binding_rule_delete(tables, index, id, changes),
        AclOp::ReapExpiredTokens {
            now_unix_ns,
            tokens_max,
        } => reap(tables, index, *now_unix_ns, *tokens_max, changes),
    };
    match result {
        Ok(()) => {
            if changes.len() > before {
                tables.bump_table(Table::Acl, index);
            }
            debug_assert!(tables.acl.check_indexes().is_ok());
            CommandResult::Bool(true)
        }
        Err(reason) => {
            // A refused write touches nothing.
            debug_assert_eq!(changes.len(), before);
            CommandResult::Error(reason)
        }
    }
}

// ---- hashing (Consul uses BLAKE2b; the hash only detects changes, so SHA-256 serves) ----

fn hash_fields(parts: &[&[u8]]) -> Vec<u8> {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().to_vec()
}

fn identities_bytes(
    services: &[ServiceIdentity],
    nodes: &[NodeIdentity],
    templated: &[TemplatedPolicy],
) -> Vec<u8> {
    let mut out = Vec::new();
    for s in services {
        out.extend_from_slice(s.service_name.as_bytes());
        for dc in &s.datacenters {
            out.push(0);
            out.extend_from_slice(dc.as_bytes());
        }
        out.push(1);
    }
    for n in nodes {
        out.extend_from_slice(n.node_name.as_bytes());
        out.push(0);
        out.extend_from_slice(n.datacenter.as_bytes());
        out.push(1);
    }
    for t in templated {
        out.extend_from_slice(t.template_name.as_bytes());
        out.push(0);
        out.extend_from_slice(t.name.as_deref().unwrap_or("").as_bytes());
        for dc in &t.datacenters {
            out.push(0);
            out.extend_from_slice(dc.as_bytes());
        }
        out.push(1);
    }
    out
}

fn token_hash(token: &Token) -> Vec<u8> {
    let policies = token.policies.join("\0");
    let roles = token.roles.join("\0");
    let identities = identities_bytes(
        &token.service_identities,
        &token.node_identities,
        &token.templated_policies,
    );
    hash_fields(&[
        token.description.as_bytes(),
        if token.local { b"local" } else { b"global" },
        policies.as_bytes(),
        roles.as_bytes(),
        &identities,
    ])
}

fn policy_hash(policy: &Policy) -> Vec<u8> {
    policy_content_hash(
        &policy.name,
        &policy.description,
        &policy.rules,
        &policy.datacenters,
    )
}

/// A policy's `Hash` from what it says (also the hash of a templated policy's preview,
/// which no table holds).
pub fn policy_content_hash(
    name: &str,
    description: &str,
    rules: &str,
    datacenters: &[String],
) -> Vec<u8> {
    hash_fields(&[
        name.as_bytes(),
        description.as_bytes(),
        rules.as_bytes(),
        datacenters.join("\0").as_bytes(),
    ])
}

fn role_hash(role: &Role) -> Vec<u8> {
    let identities = identities_bytes(
        &role.service_identities,
        &role.node_identities,
        &role.templated_policies,
    );
    hash_fields(&[
        role.name.as_bytes(),
        role.description.as_bytes(),
        role.policies.join("\0").as_bytes(),
        &identities,
    ])
}

// ---- shared validation ----

fn check_description(description: &str) -> ApplyResult {
    if description.len() > DESCRIPTION_BYTES_MAX {
        return Err(format!("Description exceeds {DESCRIPTION_BYTES_MAX} bytes"));
    }
    Ok(())
}

/// Consul's `validateTokenID` for client-chosen IDs on create.
fn check_new_token_id(acl: &AclTables, field: &str, id: &str) -> ApplyResult {
    if is_reserved_id(id) {
        return Err(format!(
            "Invalid Token: {field} - UUIDs with the prefix {} are reserved",
            rules::go_quote(RESERVED_ID_PREFIX)
        ));
    }
    if !is_uuid(id) {
        return Err(format!("Invalid Token: {field} - not a valid UUID"));
    }
    let in_use = acl.tokens.contains_key(&*id.to_lowercase())
        || acl.token_secrets.contains_key(&*super::secret_key(id));
    if in_use {
        return Err(format!("Invalid Token: {field} is already in use"));
    }
    Ok(())
}

/// Resolves policy links to IDs (names looked up), deduplicated in order.
fn resolve_policy_links(
    acl: &AclTables,
    links: &[LinkRef],
    allow_missing: bool,
) -> Result<Vec<Arc<str>>, String> {
    resolve_links(
        "policy",
        &acl.policy_names,
        |id| acl.policies.contains_key(id),
        links,
        allow_missing,
    )
}

/// Resolves role links to IDs (names looked up), deduplicated in order.
fn resolve_role_links(
    acl: &AclTables,
    links: &[LinkRef],
    allow_missing: bool,
) -> Result<Vec<Arc<str>>, String> {
    resolve_links(
        "role",
        &acl.role_names,
        |id| acl.roles.contains_key(id),
        links,
        allow_missing,
    )
}

/// Links to IDs for one kind of ACL object: a link by name must name an existing object; a
/// link by ID must too unless `allow_missing` (the callers' rule: tokens written by a
/// login). IDs come out lowercase, each once, in link order.
fn resolve_links(
    kind: &str,
    names: &OrdMap<Arc<str>, Arc<str>>,
    exists: impl Fn(&Arc<str>) -> bool,
    links: &[LinkRef],
    allow_missing: bool,
) -> Result<Vec<Arc<str>>, String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for link in links {
        let id: Arc<str> = if link.id.is_empty() {
            names.get(&*fold(&link.name)).cloned().ok_or_else(|| {
                format!(
                    "No such ACL {kind} with name {}",
                    rules::go_quote(&link.name)
                )
            })?
        } else {
            let id: Arc<str> = Arc::from(link.id.to_lowercase());
            if !exists(&id) && !allow_missing {
                return Err(format!(
                    "No such ACL {kind} with ID {}",
                    rules::go_quote(&link.id)
                ));
            }
            id
        };
        if seen.insert(id.clone()) {
            out.push(id);
        }
    }
    Ok(out)
}

/// Validates and deduplicates service identities (same name: datacenters merged).
fn normalize_service_identities(
    identities: &[ServiceIdentity],
    local_token: bool,
    on: &str,
) -> Result<Vec<ServiceIdentity>, String> {
    let mut out: Vec<ServiceIdentity> = Vec::new();
    for identity in identities {
        if identity.service_name.is_empty() {
            return Err(format!(
                "Service identity is missing the service name field on this {on}"
            ));
        }
        if local_token && !identity.datacenters.is_empty() {
            return Err(format!(
                "Service identity {} cannot specify a list of datacenters on a local token",
                rules::go_quote(&identity.service_name)
            ));
        }
        if !builtin::is_valid_identity_name(&identity.service_name) {
            return Err(format!(
                "Service identity {} has an invalid name. Only lowercase alphanumeric characters, '-' and '_' are allowed",
                rules::go_quote(&identity.service_name)
            ));
        }
        match out
            .iter_mut()
            .find(|o| o.service_name == identity.service_name)
        {
            Some(existing) => {
                let mut dcs: BTreeSet<String> = existing.datacenters.drain(..).collect();
                dcs.extend(identity.datacenters.iter().cloned());
                existing.datacenters = dcs.into_iter().collect();
            }
            None => {
                let mut identity = identity.clone();
                identity.datacenters.sort();
                identity.datacenters.dedup();
                out.push(identity);
            }
        }
    }
    Ok(out)
}

fn normalize_node_identities(
    identities: &[NodeIdentity],
    on: &str,
) -> Result<Vec<NodeIdentity>, String> {
    let mut out: Vec<NodeIdentity> = Vec::new();
    for identity in identities {
        if identity.node_name.is_empty() {
            return Err(format!(
                "Node identity is missing the node name field on this {on}"
            ));
        }
        if identity.datacenter.is_empty() {
            return Err(format!(
                "Node identity is missing the datacenter field on this {on}"
            ));
        }
        if !builtin::is_valid_identity_name(&identity.node_name) {
            return Err("Node identity has an invalid name. Only lowercase alphanumeric characters, '-' and '_' are allowed".to_string());
        }
        if !out.contains(identity) {
            out.push(identity.clone());
        }
    }
    Ok(out)
}

fn normalize_templated_policies(
    templated: &[TemplatedPolicy],
) -> Result<Vec<TemplatedPolicy>, String> {
    let mut out: Vec<TemplatedPolicy> = Vec::new();
    for policy in templated {
        let base = builtin::templated_policy(&policy.template_name).ok_or_else(|| {
            format!(
                "acl templated policy does not exist: {}",
                policy.template_name
            )
        })?;
        builtin::render_templated_policy(base, policy.name.as_deref())?;
        let mut policy = policy.clone();
        if !base.requires_name {
            policy.name = None;
        }
        let duplicate = out.iter().any(|o| {
            o.template_name == policy.template_name
                && (!base.requires_name || o.name == policy.name)
        });
        if !duplicate {
            out.push(policy);
        }
    }
    Ok(out)
}

fn check_link_count(count: usize) -> ApplyResult {
    if count > LINKS_MAX {
        return Err(format!(
            "Too many links: at most {LINKS_MAX} policies, roles and identities"
        ));
    }
    Ok(())
}

// ---- tokens ----

/// Who a token is and when it lives: the fields a write either sets at creation or must
/// leave as they were on an update.
struct TokenIdentity {
    accessor: Arc<str>,
    secret: Arc<str>,
    auth_method: String,
    expiration: Option<i64>,
    create_time: i64,
    create_index: u64,
}

fn token_set(
    tables: &mut Tables,
    index: u64,
    write: &TokenWrite,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    check_description(&write.description)?;
    check_link_count(
        write.policies.len()
            + write.roles.len()
            + write.service_identities.len()
            + write.node_identities.len()
            + write.templated_policies.len(),
    )?;
    let acl = &tables.acl;
    let identity = if write.create {
        new_token_identity(acl, write, index)?
    } else {
        updated_token_identity(acl, write)?
    };
    // An update keeps the spelling the token was created with.
    let accessor_id_as_written = match acl.tokens.get(&*identity.accessor) {
        Some(existing) if !write.create => existing.accessor_id_as_written.clone(),
        _ => (*write.accessor_id != *identity.accessor)
            .then(|| Arc::from(write.accessor_id.as_str())),
    };
    let roles = resolve_role_links(acl, &write.roles, write.from_login)?;
    let policies = resolve_policy_links(acl, &write.policies, write.from_login)?;
    let service_identities =
        normalize_service_identities(&write.service_identities, write.local, "token")?;
    let node_identities = normalize_node_identities(&write.node_identities, "token")?;
    let templated_policies = normalize_templated_policies(&write.templated_policies)?;
    if write.from_login {
        // Consul's ProhibitUnprivileged: role links to missing roles grant nothing.
        let granted = policies.iter().any(|p| acl.policies.contains_key(p))
            || roles.iter().any(|r| acl.roles.contains_key(r))
            || !service_identities.is_empty()
            || !node_identities.is_empty()
            || !templated_policies.is_empty();
        if !granted {
            return Err("token has no privileges".to_string());
        }
    }
    let mut token = Token {
        accessor_id: identity.accessor,
        secret_id: identity.secret,
        description: write.description.clone(),
        policies,
        roles,
        service_identities,
        node_identities,
        templated_policies,
        local: write.local,
        auth_method: identity.auth_method,
        expiration_time_ns: identity.expiration,
        create_time_ns: identity.create_time,
        hash: Vec::new(),
        create_index: identity.create_index,
        modify_index: index,
        accessor_id_as_written,
    };
    token.hash = token_hash(&token);
    store_token(tables, index, token, changes);
    Ok(())
}

/// A created token's identity: fresh IDs, an expiration inside Consul's bounds, and an auth
/// method only when the token comes from a login.
fn new_token_identity(
    acl: &AclTables,
    write: &TokenWrite,
    index: u64,
) -> Result<TokenIdentity, String> {
    check_new_token_id(acl, "AccessorID", &write.accessor_id)?;
    check_new_token_id(acl, "SecretID", &write.secret_id)?;
    let create_time = write.now_unix_ns;
    let expiration = new_token_expiration(write, create_time)?;
    if write.from_login {
        if write.auth_method.is_empty() {
            return Err("AuthMethod field is required during login".to_string());
        }
        if !acl.auth_methods.contains_key(&*fold(&write.auth_method)) {
            return Err(format!(
                "No such auth method with Name: {}",
                write.auth_method
            ));
        }
    } else if !write.auth_method.is_empty() {
        return Err("AuthMethod field is disallowed outside of login".to_string());
    }
    Ok(TokenIdentity {
        accessor: Arc::from(write.accessor_id.to_lowercase()),
        secret: Arc::from(write.secret_id.as_str()),
        auth_method: write.auth_method.clone(),
        expiration,
        create_time,
        create_index: index,
    })
}

/// When a created token expires: from its TTL or its explicit time (not both), never before
/// it is created, and between Consul's minimum and maximum lifetimes.
fn new_token_expiration(write: &TokenWrite, create_time: i64) -> Result<Option<i64>, String> {
    let mut expiration = write.expiration_time_ns;
    if write.expiration_ttl_ns < 0 {
        return Err(format!(
            "Token Expiration TTL '{}' should be > 0",
            format_go_duration(write.expiration_ttl_ns)
        ));
    } else if write.expiration_ttl_ns > 0 {
        if expiration.is_some() {
            return Err("Token Expiration TTL and Expiration Time cannot both be set".to_string());
        }
        expiration = Some(create_time.saturating_add(write.expiration_ttl_ns));
    }
    if let Some(expires) = expiration {
        if expires < create_time {
            return Err("ExpirationTime cannot be before CreateTime".to_string());
        }
        let expires_in = expires - create_time;
        if expires_in > TOKEN_EXPIRATION_TTL_MAX_NS {
            return Err(format!(
                "ExpirationTime cannot be more than {} in the future (was {})",
                format_go_duration(TOKEN_EXPIRATION_TTL_MAX_NS),
                format_go_duration(expires_in)
            ));
        }
        if expires_in < TOKEN_EXPIRATION_TTL_MIN_NS {
            return Err(format!(
                "ExpirationTime cannot be less than {} in the future (was {})",
                format_go_duration(TOKEN_EXPIRATION_TTL_MIN_NS),
                format_go_duration(expires_in)
            ));
        }
    }
    Ok(expiration)
}

/// An updated token's identity: the existing, unexpired token's, which an update may restate
/// but never change (secret, locality, auth method, expiration).
fn updated_token_identity(acl: &AclTables, write: &TokenWrite) -> Result<TokenIdentity, String> {
    if !is_uuid(&write.accessor_id) {
        return Err("AccessorID is not a valid UUID".to_string());
    }
    if matches!(write.secret_id.as_str(), "allow" | "deny" | "manage") {
        return Err("Permission denied: Cannot modify root ACL".to_string());
    }
    let accessor = write.accessor_id.to_lowercase();
    let existing = acl
        .tokens
        .get(accessor.as_str())
        .filter(|t| !t.is_expired(write.now_unix_ns))
        .ok_or_else(|| format!("Cannot find token {}", rules::go_quote(&write.accessor_id)))?;
    if !write.secret_id.is_empty() && *existing.secret_id != *write.secret_id {
        return Err("Changing a token's SecretID is not permitted".to_string());
    }
    if write.local != existing.local {
        return Err(format!("Cannot toggle local mode of {}", write.accessor_id));
    }
    if !write.auth_method.is_empty() && write.auth_method != existing.auth_method {
        return Err(format!("Cannot change AuthMethod of {}", write.accessor_id));
    }
    let unchanged_expiration = match write.expiration_time_ns {
        None => true,
        Some(t) => existing.expiration_time_ns == Some(t),
    };
    if write.expiration_ttl_ns != 0 || !unchanged_expiration {
        return Err(format!(
            "Cannot change expiration time of {}",
            write.accessor_id
        ));
    }
    Ok(TokenIdentity {
        accessor: existing.accessor_id.clone(),
        secret: existing.secret_id.clone(),
        auth_method: existing.auth_method.clone(),
        expiration: existing.expiration_time_ns,
        create_time: existing.create_time_ns,
        create_index: existing.create_index,
    })
}

fn store_token(tables: &mut Tables, index: u64, token: Token, changes: &mut Vec<Change>) {
    let accessor = token.accessor_id.clone();
    tables.acl.put_token(token);
    tables.acl.indexes.tokens = index;
    push_changes(changes, token_key(&accessor), TOKENS_KEY);
}

fn delete_token(tables: &mut Tables, index: u64, accessor: &Arc<str>, changes: &mut Vec<Change>) {
    if tables.acl.remove_token_row(accessor).is_some() {
        tables.acl.indexes.tokens = index;
        push_changes(changes, token_key(accessor), TOKENS_KEY);
    }
}

/// A management token row (global-management linked), for bootstrap and initial management.
fn management_token(
    accessor_id: &str,
    secret_id: &str,
    description: &str,
    now_unix_ns: i64,
    index: u64,
) -> Token {
    let mut token = Token {
        accessor_id: Arc::from(accessor_id.to_lowercase()),
        secret_id: Arc::from(secret_id),
        description: description.to_string(),
        policies: vec![Arc::from(builtin::GLOBAL_MANAGEMENT_POLICY_ID)],
        roles: Vec::new(),
        service_identities: Vec::new(),
        node_identities: Vec::new(),
        templated_policies: Vec::new(),
        local: false,
        auth_method: String::new(),
        expiration_time_ns: None,
        create_time_ns: now_unix_ns,
        hash: Vec::new(),
        create_index: index,
        modify_index: index,
        accessor_id_as_written: None,
    };
    token.hash = token_hash(&token);
    token
}

#[allow(clippy::too_many_arguments)]
fn bootstrap(
    tables: &mut Tables,
    index: u64,
    accessor_id: &str,
    secret_id: &str,
    description: &str,
    now_unix_ns: i64,
    reset_index: u64,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    if let Some(done_at) = tables.acl.bootstrap_index {
        if reset_index == 0 {
            return Err(format!(
                "ACL bootstrap no longer allowed (reset index: {done_at})"
            ));
        }
        if reset_index != done_at {
            return Err(format!(
                "Invalid bootstrap reset index (specified {reset_index}, reset index: {done_at})"
            ));
        }
    }
    let acl = &tables.acl;
    let accessor_taken = acl.tokens.contains_key(&*accessor_id.to_lowercase());
    let secret_taken = acl
        .token_secrets
        .contains_key(&*super::secret_key(secret_id));
    if accessor_id.is_empty() || secret_id.is_empty() || accessor_taken || secret_taken {
        return Err("failed inserting bootstrap token: token IDs are missing or in use".into());
    }
    // The management policy must exist for the token to mean anything.
    initialize(tables, index, now_unix_ns, changes)?;
    let token = management_token(accessor_id, secret_id, description, now_unix_ns, index);
    store_token(tables, index, token, changes);
    tables.acl.bootstrap_index = Some(index);
    Ok(())
}

fn initial_management(
    tables: &mut Tables,
    index: u64,
    accessor_id: &str,
    secret_id: &str,
    now_unix_ns: i64,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    if secret_id.is_empty() {
        return Err("acl.tokens.initial_management is empty".to_string());
    }
    if tables
        .acl
        .token_secrets
        .contains_key(&*super::secret_key(secret_id))
    {
        return Ok(());
    }
    let description = builtin::INITIAL_MANAGEMENT_TOKEN_DESCRIPTION;
    if tables.acl.bootstrap_index.is_none() {
        return bootstrap(
            tables,
            index,
            accessor_id,
            secret_id,
            description,
            now_unix_ns,
            0,
            changes,
        );
    }
    if tables.acl.tokens.contains_key(&*accessor_id.to_lowercase()) {
        return Err("Invalid Token: AccessorID is already in use".to_string());
    }
    initialize(tables, index, now_unix_ns, changes)?;
    let token = management_token(accessor_id, secret_id, description, now_unix_ns, index);
    store_token(tables, index, token, changes);
    Ok(())
}

fn initialize(
    tables: &mut Tables,
    index: u64,
    now_unix_ns: i64,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    for builtin in builtin::BUILTIN_POLICIES {
        let existing = tables.acl.policies.get(builtin.id).cloned();
        if existing.as_ref().is_some_and(|p| p.rules == builtin.rules) {
            continue;
        }
        // An upgrade keeps an operator's rename and description, as Consul does.
        let (name, description, create_index) = match &existing {
            Some(p) => (p.name.clone(), p.description.clone(), p.create_index),
            None => (
                Arc::from(builtin.name),
                builtin.description.to_string(),
                index,
            ),
        };
        let mut policy = Policy {
            id: Arc::from(builtin.id),
            name,
            description,
            rules: builtin.rules.to_string(),
            datacenters: Vec::new(),
            hash: Vec::new(),
            create_index,
            modify_index: index,
        };
        policy.hash = policy_hash(&policy);
        store_policy(tables, index, policy, changes);
    }
    if !tables
        .acl
        .token_secrets
        .contains_key(builtin::ANONYMOUS_TOKEN_SECRET_ID)
    {
        let mut token = Token {
            accessor_id: Arc::from(builtin::ANONYMOUS_TOKEN_ACCESSOR_ID),
            secret_id: Arc::from(builtin::ANONYMOUS_TOKEN_SECRET_ID),
            description: builtin::ANONYMOUS_TOKEN_DESCRIPTION.to_string(),
            policies: Vec::new(),
            roles: Vec::new(),
            service_identities: Vec::new(),
            node_identities: Vec::new(),
            templated_policies: Vec::new(),
            local: false,
            auth_method: String::new(),
            expiration_time_ns: None,
            create_time_ns: now_unix_ns,
            hash: Vec::new(),
            create_index: index,
            modify_index: index,
            accessor_id_as_written: None,
        };
        token.hash = token_hash(&token);
        store_token(tables, index, token, changes);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn token_clone(
    tables: &mut Tables,
    index: u64,
    source_accessor_id: &str,
    accessor_id: &str,
    secret_id: &str,
    description: Option<&str>,
    now_unix_ns: i64,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    let source = tables
        .acl
        .tokens
        .get(&*source_accessor_id.to_lowercase())
        .filter(|t| !t.is_expired(now_unix_ns))
        .cloned()
        .ok_or_else(|| "ACL not found".to_string())?;
    if !source.auth_method.is_empty() {
        return Err("Cannot clone a token created from an auth method".to_string());
    }
    let link = |id: &Arc<str>| LinkRef {
        id: id.to_string(),
        name: String::new(),
    };
    let write = TokenWrite {
        accessor_id: accessor_id.to_string(),
        secret_id: secret_id.to_string(),
        description: description
            .filter(|d| !d.is_empty())
            .unwrap_or(&source.description)
            .to_string(),
        // Links to deleted policies and roles are dropped, as Consul's reads drop them.
        policies: source
            .policies
            .iter()
            .filter(|id| tables.acl.policies.contains_key(*id))
            .map(link)
            .collect(),
        roles: source
            .roles
            .iter()
            .filter(|id| tables.acl.roles.contains_key(*id))
            .map(link)
            .collect(),
        service_identities: source.service_identities.clone(),
        node_identities: source.node_identities.clone(),
        templated_policies: source.templated_policies.clone(),
        local: source.local,
        auth_method: String::new(),
        expiration_time_ns: source.expiration_time_ns,
        expiration_ttl_ns: 0,
        now_unix_ns,
        create: true,
        from_login: false,
    };
    // A clone keeps the source's expiration time, which may be nearer than the minimum TTL
    // by now; Consul does not re-check it either, so the check is bypassed here.
    let mut write = write;
    let expiration = write.expiration_time_ns.take();
    token_set(tables, index, &write, changes)?;
    if let Some(expires) = expiration {
        let accessor: Arc<str> = Arc::from(accessor_id.to_lowercase());
        let mut token = (**tables.acl.tokens.get(&accessor).expect("just created")).clone();
        token.expiration_time_ns = Some(expires);
        token.hash = token_hash(&token);
        tables.acl.put_token(token);
    }
    Ok(())
}

fn token_delete(
    tables: &mut Tables,
    index: u64,
    accessor_id: &str,
    requester_secret_id: &str,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    if !is_uuid(accessor_id) {
        return Err("Accessor ID is missing or an invalid UUID".to_string());
    }
    let accessor: Arc<str> = Arc::from(accessor_id.to_lowercase());
    if &*accessor == builtin::ANONYMOUS_TOKEN_ACCESSOR_ID {
        return Err("Delete operation not permitted on the anonymous token".to_string());
    }
    let Some(token) = tables.acl.tokens.get(&accessor) else {
        return Ok(());
    };
    if !requester_secret_id.is_empty() && *token.secret_id == *requester_secret_id {
        return Err("Deletion of the request's authorization token is not permitted".to_string());
    }
    delete_token(tables, index, &accessor, changes);
    Ok(())
}

fn logout(
    tables: &mut Tables,
    index: u64,
    secret_id: &str,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    let Some(token) = tables
        .acl
        .token_secrets
        .get(&*super::secret_key(secret_id))
        .and_then(|a| tables.acl.tokens.get(a))
    else {
        return Err("ACL not found".to_string());
    };
    if token.auth_method.is_empty() {
        return Err("Permission denied: token wasn't created via login".to_string());
    }
    let accessor = token.accessor_id.clone();
    delete_token(tables, index, &accessor, changes);
    Ok(())
}

fn reap(
    tables: &mut Tables,
    index: u64,
    now_unix_ns: i64,
    tokens_max: u32,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    let max = tokens_max.min(REAP_TOKENS_MAX) as usize;
    for accessor in super::expired_tokens(tables, now_unix_ns, max) {
        delete_token(tables, index, &accessor, changes);
    }
    Ok(())
}

// ---- policies ----

fn is_valid_policy_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn store_policy(tables: &mut Tables, index: u64, policy: Policy, changes: &mut Vec<Change>) {
    let id = policy.id.clone();
    tables.acl.put_policy(policy);
    tables.acl.indexes.policies = index;
    push_changes(changes, policy_key(&id), POLICIES_KEY);
}

fn policy_set(
    tables: &mut Tables,
    index: u64,
    write: &PolicyWrite,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    if write.name.is_empty() {
        return Err("Invalid Policy: no Name is set".to_string());
    }
    let builtin_policy = builtin::BUILTIN_POLICIES
        .iter()
        .find(|b| b.id.eq_ignore_ascii_case(&write.id));
    // Builtin names (`builtin/global-read-only`) predate the name rule.
    let builtin_name_kept = builtin_policy.is_some_and(|b| b.name == write.name);
    if !is_valid_policy_name(&write.name) && !builtin_name_kept {
        return Err(
            "Invalid Policy: invalid Name. Only alphanumeric characters, '-' and '_' are allowed"
                .to_string(),
        );
    }
    check_description(&write.description)?;
    if !is_uuid(&write.id) {
        return Err("Policy ID invalid UUID".to_string());
    }
    let acl = &tables.acl;
    let id: Arc<str> = Arc::from(write.id.to_lowercase());
    let name_match = acl.policy_names.get(&*fold(&write.name)).cloned();
    let create_index = if write.create {
        if acl.policies.contains_key(&id) || is_reserved_id(&id) {
            return Err("Policy ID invalid UUID".to_string());
        }
        if name_match.is_some() {
            return Err(format!(
                "Invalid Policy: A Policy with Name {} already exists",
                rules::go_quote(&write.name)
            ));
        }
        index
    } else {
        let existing = acl
            .policies
            .get(&id)
            .ok_or_else(|| format!("cannot find policy {}", write.id))?;
        if name_match.is_some_and(|other| other != id) {
            return Err(format!(
                "Invalid Policy: A policy with name {} already exists",
                rules::go_quote(&write.name)
            ));
        }
        if let Some(builtin) = builtin_policy {
            if !write.datacenters.is_empty() {
                return Err(format!(
                    "Changing the Datacenters of the builtin {} policy is not permitted",
                    builtin.name
                ));
            }
            if write.rules != existing.rules {
                return Err(format!(
                    "Changing the Rules for the builtin {} policy is not permitted",
                    builtin.name
                ));
            }
        }
        existing.create_index
    };
    rules::parse(&write.rules)?;
    let mut policy = Policy {
        id,
        name: Arc::from(write.name.as_str()),
        description: write.description.clone(),
        rules: write.rules.clone(),
        datacenters: write.datacenters.clone(),
        hash: Vec::new(),
        create_index,
        modify_index: index,
    };
    policy.hash = policy_hash(&policy);
    store_policy(tables, index, policy, changes);
    Ok(())
}

fn policy_delete(
    tables: &mut Tables,
    index: u64,
    id: &str,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    let id: Arc<str> = Arc::from(id.to_lowercase());
    if !tables.acl.policies.contains_key(&id) {
        return Ok(());
    }
    if let Some(builtin) = builtin::BUILTIN_POLICIES.iter().find(|b| *b.id == *id) {
        return Err(format!(
            "Delete operation not permitted on the builtin {} policy",
            builtin.name
        ));
    }
    // Links to the policy stay in tokens and roles (as in Consul) and are skipped on read.
    tables.acl.remove_policy_row(&id);
    tables.acl.indexes.policies = index;
    push_changes(changes, policy_key(&id), POLICIES_KEY);
    Ok(())
}

// ---- roles ----

fn is_valid_role_name(name: &str) -> bool {
    (1..=256).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn role_set(
    tables: &mut Tables,
    index: u64,
    write: &RoleWrite,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    if write.name.is_empty() {
        return Err("Invalid Role: no Name is set".to_string());
    }
    if !is_valid_role_name(&write.name) {
        return Err(
            "Invalid Role: invalid Name. Only alphanumeric characters, '-' and '_' are allowed"
                .to_string(),
        );
    }
    check_description(&write.description)?;
    check_link_count(
        write.policies.len()
            + write.service_identities.len()
            + write.node_identities.len()
            + write.templated_policies.len(),
    )?;
    if !is_uuid(&write.id) {
        return Err("Role ID invalid UUID".to_string());
    }
    let acl = &tables.acl;
    let id: Arc<str> = Arc::from(write.id.to_lowercase());
    let name_match = acl.role_names.get(&*fold(&write.name)).cloned();
    let create_index = if write.create {
        if acl.roles.contains_key(&id) {
            return Err("Role ID invalid UUID".to_string());
        }
        if name_match.is_some() {
            return Err(format!(
                "Invalid Role: A Role with Name {} already exists",
                rules::go_quote(&write.name)
            ));
        }
        index
    } else {
        let existing = acl
            .roles
            .get(&id)
            .ok_or_else(|| format!("cannot find role {}", write.id))?;
        if name_match.is_some_and(|other| other != id) {
            return Err(format!(
                "Invalid Role: A role with name {} already exists",
                rules::go_quote(&write.name)
            ));
        }
        existing.create_index
    };
    let policies = resolve_policy_links(acl, &write.policies, false).map_err(|e| {
        // A role names missing policy IDs in the state store's words.
        match write
            .policies
            .iter()
            .find(|l| !l.id.is_empty() && !acl.policies.contains_key(&*l.id.to_lowercase()))
        {
            Some(missing) if e.starts_with("No such ACL policy with ID") => {
                format!("No such policy with ID: {}", missing.id)
            }
            _ => e,
        }
    })?;
    let service_identities =
        normalize_service_identities(&write.service_identities, false, "role")?;
    let node_identities = normalize_node_identities(&write.node_identities, "role")?;
    let templated_policies = normalize_templated_policies(&write.templated_policies)?;
    let mut role = Role {
        id: id.clone(),
        name: Arc::from(write.name.as_str()),
        description: write.description.clone(),
        policies,
        service_identities,
        node_identities,
        templated_policies,
        hash: Vec::new(),
        create_index,
        modify_index: index,
    };
    role.hash = role_hash(&role);
    tables.acl.put_role(role);
    tables.acl.indexes.roles = index;
    push_changes(changes, role_key(&id), ROLES_KEY);
    Ok(())
}

fn role_delete(
    tables: &mut Tables,
    index: u64,
    id: &str,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    let id: Arc<str> = Arc::from(id.to_lowercase());
    if tables.acl.remove_role_row(&id).is_some() {
        tables.acl.indexes.roles = index;
        push_changes(changes, role_key(&id), ROLES_KEY);
    }
    Ok(())
}

// ---- auth methods and binding rules ----

fn is_valid_auth_method_name(name: &str) -> bool {
    is_valid_policy_name(name)
}

fn auth_method_set(
    tables: &mut Tables,
    index: u64,
    write: &AuthMethodWrite,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    if write.name.is_empty() {
        return Err("Invalid Auth Method: no Name is set".to_string());
    }
    if !is_valid_auth_method_name(&write.name) {
        return Err("Invalid Auth Method: invalid Name. Only alphanumeric characters, '-' and '_' are allowed".to_string());
    }
    check_description(&write.description)?;
    check_description(&write.display_name)?;
    let key = fold(&write.name);
    let existing = tables.acl.auth_methods.get(&key).cloned();
    let method_type = match &existing {
        Some(e) if write.method_type.is_empty() => e.method_type.clone(),
        Some(e) if e.method_type != write.method_type => {
            return Err("the Type field of an Auth Method is immutable".to_string())
        }
        _ => write.method_type.clone(),
    };
    if method_type != super::jwt::METHOD_TYPE {
        return Err(format!(
            "Invalid Auth Method: Type should be one of: [{}]",
            super::jwt::METHOD_TYPE
        ));
    }
    if write.max_token_ttl_ns != 0 {
        if write.max_token_ttl_ns > TOKEN_EXPIRATION_TTL_MAX_NS {
            return Err(format!(
                "MaxTokenTTL {} cannot be more than {}",
                format_go_duration(write.max_token_ttl_ns),
                format_go_duration(TOKEN_EXPIRATION_TTL_MAX_NS)
            ));
        }
        if write.max_token_ttl_ns < TOKEN_EXPIRATION_TTL_MIN_NS {
            return Err(format!(
                "MaxTokenTTL {} cannot be less than {}",
                format_go_duration(write.max_token_ttl_ns),
                format_go_duration(TOKEN_EXPIRATION_TTL_MIN_NS)
            ));
        }
    }
    if !matches!(write.token_locality.as_str(), "" | "local" | "global") {
        return Err(
            "Invalid Auth Method: TokenLocality should be one of 'local' or 'global'".to_string(),
        );
    }
    super::jwt::JwtConfig::from_json(&write.config_json)
        .map_err(|e| format!("Invalid Auth Method: {e}"))?;
    let method = AuthMethod {
        name: Arc::from(write.name.as_str()),
        method_type,
        display_name: write.display_name.clone(),
        description: write.description.clone(),
        max_token_ttl_ns: write.max_token_ttl_ns,
        token_locality: write.token_locality.clone(),
        config_json: write.config_json.clone(),
        create_index: existing.as_ref().map_or(index, |e| e.create_index),
        modify_index: index,
    };
    tables.acl.auth_methods.insert(key, Arc::new(method));
    tables.acl.indexes.auth_methods = index;
    push_changes(changes, auth_method_key(&write.name), AUTH_METHODS_KEY);
    Ok(())
}

fn auth_method_delete(
    tables: &mut Tables,
    index: u64,
    name: &str,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    let key = fold(name);
    if tables.acl.auth_methods.remove(&key).is_none() {
        return Ok(());
    }
    tables.acl.indexes.auth_methods = index;
    push_changes(changes, auth_method_key(name), AUTH_METHODS_KEY);
    let rules: Vec<Arc<str>> = tables
        .acl
        .binding_rules_by_method
        .get(&key)
        .map(|s| s.iter().cloned().collect())
        .unwrap_or_default();
    for id in rules {
        tables.acl.remove_binding_rule_row(&id);
        tables.acl.indexes.binding_rules = index;
        push_changes(changes, binding_rule_key(&id), BINDING_RULES_KEY);
    }
    let tokens: Vec<Arc<str>> = tables
        .acl
        .tokens_by_auth_method
        .get(&key)
        .map(|s| s.iter().cloned().collect())
        .unwrap_or_default();
    for accessor in tokens {
        delete_token(tables, index, &accessor, changes);
    }
    Ok(())
}

fn binding_rule_set(
    tables: &mut Tables,
    index: u64,
    write: &BindingRuleWrite,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    check_description(&write.description)?;
    if !is_uuid(&write.id) {
        return Err("Binding Rule ID invalid UUID".to_string());
    }
    let id: Arc<str> = Arc::from(write.id.to_lowercase());
    let existing = tables.acl.binding_rules.get(&id).cloned();
    let auth_method = if write.create {
        if existing.is_some() {
            return Err("Binding Rule ID invalid UUID".to_string());
        }
        write.auth_method.clone()
    } else {
        let existing = existing
            .as_ref()
            .ok_or_else(|| format!("cannot find binding rule {}", write.id))?;
        if write.auth_method.is_empty() {
            existing.auth_method.to_string()
        } else if !existing
            .auth_method
            .eq_ignore_ascii_case(&write.auth_method)
        {
            return Err("the AuthMethod field of an Binding Rule is immutable".to_string());
        } else {
            write.auth_method.clone()
        }
    };
    if auth_method.is_empty() {
        return Err("Invalid Binding Rule: no AuthMethod is set".to_string());
    }
    let method = tables
        .acl
        .auth_methods
        .get(&*fold(&auth_method))
        .cloned()
        .ok_or_else(|| {
            format!(
                "cannot find auth method with name {}",
                rules::go_quote(&auth_method)
            )
        })?;
    if write.bind_type.is_empty() {
        return Err("Invalid Binding Rule: no BindType is set".to_string());
    }
    if write.bind_name.is_empty() {
        return Err("Invalid Binding Rule: no BindName is set".to_string());
    }
    let config = super::jwt::JwtConfig::from_json(&method.config_json)
        .map_err(|e| format!("Invalid Auth Method: {e}"))?;
    super::login::validate_binding(
        &write.bind_type,
        &write.bind_name,
        write.bind_vars_name.as_deref(),
        &config.projected_variable_names(),
    )?;
    let rule = BindingRule {
        id: id.clone(),
        description: write.description.clone(),
        auth_method: method.name.clone(),
        selector: write.selector.clone(),
        bind_type: write.bind_type.clone(),
        bind_name: write.bind_name.clone(),
        bind_vars_name: write.bind_vars_name.clone(),
        create_index: existing.as_ref().map_or(index, |e| e.create_index),
        modify_index: index,
    };
    tables.acl.put_binding_rule(rule);
    tables.acl.indexes.binding_rules = index;
    push_changes(changes, binding_rule_key(&id), BINDING_RULES_KEY);
    Ok(())
}

fn binding_rule_delete(
    tables: &mut Tables,
    index: u64,
    id: &str,
    changes: &mut Vec<Change>,
) -> ApplyResult {
    let id: Arc<str> = Arc::from(id.to_lowercase());
    if tables.acl.remove_binding_rule_row(&id).is_some() {
        tables.acl.indexes.binding_rules = index;
        push_changes(changes, binding_rule_key(&id), BINDING_RULES_KEY);
    }
    Ok(())
}
