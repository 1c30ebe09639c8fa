//! ACLs: the replicated tables (tokens, policies, roles, auth methods, binding rules), the
//! rule language, the compiled authorizer and its per-shard cache, and the pure half of
//! auth-method login.
//!
//! Layout:
//! - this file: the rows, [`AclTables`] with its secondary indexes, the reads the serving
//!   layer answers from, and the watch keys;
//! - `apply.rs`: [`AclOp`], the writes, with Consul's validation and error texts;
//! - `rules.rs`: rules text → [`rules::PolicyRules`]; `authorizer.rs`: policies →
//!   [`authorizer::Authorizer`]; `cache.rs`: SecretID → shared authorizer, invalidated by
//!   change sets; `builtin.rs`: reserved IDs, builtin policies, identities, templated policies;
//!   `jwt.rs` and `login.rs`: the `jwt` auth method and binding rules.
//!
//! Invariants:
//! - `token_secrets[secret_key(t.secret_id)] == t.accessor_id` for every token `t`, and nothing else is
//!   in `token_secrets`; the same holds for `policy_names`, `role_names` (folded names) and the
//!   link indexes (`tokens_by_policy`, `tokens_by_role`, `tokens_by_auth_method`,
//!   `roles_by_policy`, `binding_rules_by_method`) and `token_expiry`.
//! - Links are stored by ID; a link to a deleted policy or role stays in the row (as in Consul)
//!   and is skipped when read ([`policy_links`]) or compiled.
//! - Every write emits `Key(Acl, <row key>)` for each row touched and `Key(Acl, <list key>)`
//!   for its table, so a watcher of one token wakes only for that token.
//!
//! Time never comes from a clock here: creation and expiry times are Unix nanoseconds stamped
//! by the proposer inside the command.

pub mod apply;
pub mod authorizer;
pub mod builtin;
pub mod cache;
pub mod jwt;
pub mod login;
pub mod rules;

#[cfg(test)]
mod tests;

pub use apply::AclOp;

use super::{Change, Table, Tables};
use imbl::{OrdMap, OrdSet};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A service identity on a token or role: the rights to register and discover as `service`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServiceIdentity {
    pub service_name: String,
    /// Where the synthesized policy applies; empty for everywhere.
    pub datacenters: Vec<String>,
}

/// A node identity: the rights of the agent of node `node_name` in `datacenter`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeIdentity {
    pub node_name: String,
    pub datacenter: String,
}

/// A builtin templated policy applied with its variables.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TemplatedPolicy {
    pub template_name: String,
    /// `TemplateVariables.name`; `None` when the template takes no variables.
    pub name: Option<String>,
    pub datacenters: Vec<String>,
}

/// One row of the tokens table: Consul's `ACLToken`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    pub accessor_id: Arc<str>,
    pub secret_id: Arc<str>,
    pub description: String,
    /// Policy IDs (names are looked up when read).
    pub policies: Vec<Arc<str>>,
    /// Role IDs.
    pub roles: Vec<Arc<str>>,
    pub service_identities: Vec<ServiceIdentity>,
    pub node_identities: Vec<NodeIdentity>,
    pub templated_policies: Vec<TemplatedPolicy>,
    pub local: bool,
    /// The auth method that created the token at login; empty otherwise.
    pub auth_method: String,
    /// Unix nanoseconds after which the token no longer exists for requests.
    pub expiration_time_ns: Option<i64>,
    pub create_time_ns: i64,
    pub hash: Vec<u8>,
    pub create_index: u64,
    pub modify_index: u64,
    /// The AccessorID as its creator wrote it, when that differs from `accessor_id` (the
    /// row's key, lower-cased so any spelling finds it): Consul matches UUIDs in any case
    /// but answers with the ID as written. Last, with a default, so rows of snapshots
    /// written before it decode.
    #[serde(default)]
    pub accessor_id_as_written: Option<Arc<str>>,
}

impl Token {
    /// A token with no field set: what a decoder fills, and the base of the builtin ones.
    pub fn empty() -> Token {
        Token {
            accessor_id: Arc::from(""),
            secret_id: Arc::from(""),
            description: String::new(),
            policies: Vec::new(),
            roles: Vec::new(),
            service_identities: Vec::new(),
            node_identities: Vec::new(),
            templated_policies: Vec::new(),
            local: false,
            auth_method: String::new(),
            expiration_time_ns: None,
            create_time_ns: 0,
            hash: Vec::new(),
            create_index: 0,
            modify_index: 0,
            accessor_id_as_written: None,
        }
    }

    /// The AccessorID as answers show it: as its creator wrote it.
    pub fn accessor_id_shown(&self) -> &str {
        self.accessor_id_as_written
            .as_deref()
            .unwrap_or(&self.accessor_id)
    }

    /// Consul's `IsExpired`: expired strictly before `now`.
    pub fn is_expired(&self, now_unix_ns: i64) -> bool {
        self.expiration_time_ns.is_some_and(|t| t < now_unix_ns)
    }
}

/// One row of the policies table: Consul's `ACLPolicy`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub id: Arc<str>,
    pub name: Arc<str>,
    pub description: String,
    pub rules: String,
    pub datacenters: Vec<String>,
    pub hash: Vec<u8>,
    pub create_index: u64,
    pub modify_index: u64,
}

/// One row of the roles table: Consul's `ACLRole`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    pub id: Arc<str>,
    pub name: Arc<str>,
    pub description: String,
    pub policies: Vec<Arc<str>>,
    pub service_identities: Vec<ServiceIdentity>,
    pub node_identities: Vec<NodeIdentity>,
    pub templated_policies: Vec<TemplatedPolicy>,
    pub hash: Vec<u8>,
    pub create_index: u64,
    pub modify_index: u64,
}

/// One row of the auth methods table: Consul's `ACLAuthMethod`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthMethod {
    pub name: Arc<str>,
    /// `Type`: only `jwt` is implemented.
    pub method_type: String,
    pub display_name: String,
    pub description: String,
    /// Lifetime of tokens created by login; 0 for none.
    pub max_token_ttl_ns: i64,
    /// `local` (or empty) or `global`.
    pub token_locality: String,
    /// `Config` as JSON text, validated for the method's type when written.
    pub config_json: String,
    pub create_index: u64,
    pub modify_index: u64,
}

/// One row of the binding rules table: Consul's `ACLBindingRule`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindingRule {
    pub id: Arc<str>,
    pub description: String,
    pub auth_method: Arc<str>,
    /// A bexpr over the login's claims (`value.x`, `list.y`); empty matches every login.
    pub selector: String,
    /// `service`, `node`, `role`, `policy` or `templated-policy`.
    pub bind_type: String,
    /// The target's name with `${value.x}` interpolations.
    pub bind_name: String,
    /// `BindVars.name` for `templated-policy` bindings, also interpolated.
    pub bind_vars_name: Option<String>,
    pub create_index: u64,
    pub modify_index: u64,
}

/// The index Consul reports per ACL table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclIndexes {
    pub tokens: u64,
    pub policies: u64,
    pub roles: u64,
    pub auth_methods: u64,
    pub binding_rules: u64,
}

type IdSet = OrdSet<Arc<str>>;

/// Every ACL table and its secondary indexes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AclTables {
    /// AccessorID → token.
    pub tokens: OrdMap<Arc<str>, Arc<Token>>,
    /// SecretID → AccessorID.
    pub token_secrets: OrdMap<Arc<str>, Arc<str>>,
    /// Policy ID → accessors of tokens linking it.
    pub tokens_by_policy: OrdMap<Arc<str>, IdSet>,
    /// Role ID → accessors of tokens linking it.
    pub tokens_by_role: OrdMap<Arc<str>, IdSet>,
    /// Folded auth method name → accessors of tokens it created.
    pub tokens_by_auth_method: OrdMap<Arc<str>, IdSet>,
    /// `(expiration, accessor)` for every token that expires, soonest first.
    pub token_expiry: OrdSet<(i64, Arc<str>)>,
    /// Policy ID → policy.
    pub policies: OrdMap<Arc<str>, Arc<Policy>>,
    /// Folded policy name → policy ID.
    pub policy_names: OrdMap<Arc<str>, Arc<str>>,
    /// Role ID → role.
    pub roles: OrdMap<Arc<str>, Arc<Role>>,
    /// Folded role name → role ID.
    pub role_names: OrdMap<Arc<str>, Arc<str>>,
    /// Policy ID → IDs of roles linking it.
    pub roles_by_policy: OrdMap<Arc<str>, IdSet>,
    /// Folded auth method name → method.
    pub auth_methods: OrdMap<Arc<str>, Arc<AuthMethod>>,
    /// Binding rule ID → rule.
    pub binding_rules: OrdMap<Arc<str>, Arc<BindingRule>>,
    /// Folded auth method name → IDs of its binding rules.
    pub binding_rules_by_method: OrdMap<Arc<str>, IdSet>,
    pub indexes: AclIndexes,
    /// Raft index of the bootstrap (Consul's `acl-token-bootstrap` index entry): the reset
    /// index an operator must name to bootstrap again.
    pub bootstrap_index: Option<u64>,
}

/// Names and IDs are matched case-insensitively, as Consul's indexes fold them.
pub fn fold(text: &str) -> Arc<str> {
    Arc::from(text.to_lowercase())
}

/// Watch key of one token (by AccessorID).
pub fn token_key(accessor_id: &str) -> Arc<str> {
    Arc::from(format!("token:{accessor_id}"))
}
/// Watch key of one policy (by ID).
pub fn policy_key(id: &str) -> Arc<str> {
    Arc::from(format!("policy:{id}"))
}
/// Watch key of one role (by ID).
pub fn role_key(id: &str) -> Arc<str> {
    Arc::from(format!("role:{id}"))
}
/// Watch key of one auth method (by folded name).
pub fn auth_method_key(name: &str) -> Arc<str> {
    Arc::from(format!("auth-method:{}", name.to_lowercase()))
}
/// Watch key of one binding rule (by ID).
pub fn binding_rule_key(id: &str) -> Arc<str> {
    Arc::from(format!("binding-rule:{id}"))
}
/// Watch keys of the whole tables, for list queries.
pub const TOKENS_KEY: &str = "tokens";
pub const POLICIES_KEY: &str = "policies";
pub const ROLES_KEY: &str = "roles";
pub const AUTH_METHODS_KEY: &str = "auth-methods";
pub const BINDING_RULES_KEY: &str = "binding-rules";

/// A row key within [`Table::Acl`] turned into the row it names, for cache invalidation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclRowKey<'a> {
    Token(&'a str),
    Policy(&'a str),
    Role(&'a str),
    AuthMethod(&'a str),
    BindingRule(&'a str),
    /// A whole-table key (`tokens`, `policies`, …).
    List,
}

impl AclRowKey<'_> {
    pub fn parse(key: &str) -> AclRowKey<'_> {
        if let Some(id) = key.strip_prefix("token:") {
            AclRowKey::Token(id)
        } else if let Some(id) = key.strip_prefix("policy:") {
            AclRowKey::Policy(id)
        } else if let Some(id) = key.strip_prefix("role:") {
            AclRowKey::Role(id)
        } else if let Some(name) = key.strip_prefix("auth-method:") {
            AclRowKey::AuthMethod(name)
        } else if let Some(id) = key.strip_prefix("binding-rule:") {
            AclRowKey::BindingRule(id)
        } else {
            AclRowKey::List
        }
    }
}

/// Consul's UUID check (`go-uuid`'s `ParseUUID`): 36 characters, hex with dashes at 8, 13, 18
/// and 23.
pub fn is_uuid(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

// ---- reads ----

pub fn token_by_accessor<'a>(tables: &'a Tables, accessor_id: &str) -> Option<&'a Arc<Token>> {
    tables.acl.tokens.get(&*accessor_id.to_lowercase())
}

pub fn token_by_secret<'a>(tables: &'a Tables, secret_id: &str) -> Option<&'a Arc<Token>> {
    let accessor = tables.acl.token_secrets.get(&*secret_key(secret_id))?;
    tables.acl.tokens.get(accessor)
}

/// The key a SecretID is filed and found under in `token_secrets`: a UUID in lower case, as
/// Consul's UUID index matches one written in any case; any other secret (an initial
/// management token need not be a UUID) exactly as written. The row keeps the secret as its
/// creator wrote it.
pub fn secret_key(secret_id: &str) -> std::borrow::Cow<'_, str> {
    if secret_id.bytes().any(|b| b.is_ascii_uppercase()) && is_uuid(secret_id) {
        std::borrow::Cow::Owned(secret_id.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(secret_id)
    }
}

/// [`secret_key`] for a row's own secret, sharing its `Arc` when it is already the key.
fn secret_key_of(secret_id: &Arc<str>) -> Arc<str> {
    match secret_key(secret_id) {
        std::borrow::Cow::Borrowed(_) => secret_id.clone(),
        std::borrow::Cow::Owned(folded) => Arc::from(folded),
    }
}

/// Which tokens a list returns (`/v1/acl/tokens?policy=&role=&authmethod=`).
#[derive(Clone, Debug, Default)]
pub struct TokenFilter<'a> {
    pub policy: Option<&'a str>,
    pub role: Option<&'a str>,
    pub auth_method: Option<&'a str>,
}

/// Tokens matching `filter` and not expired at `now_unix_ns`, ordered by AccessorID.
pub fn token_list<'a>(
    tables: &'a Tables,
    filter: &TokenFilter<'_>,
    now_unix_ns: i64,
) -> Vec<&'a Arc<Token>> {
    let acl = &tables.acl;
    let candidates: Box<dyn Iterator<Item = &'a Arc<Token>> + 'a> =
        if let Some(policy) = filter.policy {
            Box::new(
                acl.tokens_by_policy
                    .get(&*policy.to_lowercase())
                    .into_iter()
                    .flatten()
                    .filter_map(|a| acl.tokens.get(a)),
            )
        } else if let Some(role) = filter.role {
            Box::new(
                acl.tokens_by_role
                    .get(&*role.to_lowercase())
                    .into_iter()
                    .flatten()
                    .filter_map(|a| acl.tokens.get(a)),
            )
        } else if let Some(method) = filter.auth_method {
            Box::new(
                acl.tokens_by_auth_method
                    .get(&*fold(method))
                    .into_iter()
                    .flatten()
                    .filter_map(|a| acl.tokens.get(a)),
            )
        } else {
            Box::new(acl.tokens.values())
        };
    candidates
        .filter(|t| {
            filter
                .role
                .is_none_or(|r| t.roles.iter().any(|id| id.eq_ignore_ascii_case(r)))
        })
        .filter(|t| {
            filter
                .auth_method
                .is_none_or(|m| t.auth_method.eq_ignore_ascii_case(m))
        })
        .filter(|t| !t.is_expired(now_unix_ns))
        .collect()
}

pub fn policy_by_id<'a>(tables: &'a Tables, id: &str) -> Option<&'a Arc<Policy>> {
    tables.acl.policies.get(&*id.to_lowercase())
}

pub fn policy_by_name<'a>(tables: &'a Tables, name: &str) -> Option<&'a Arc<Policy>> {
    let id = tables.acl.policy_names.get(&*fold(name))?;
    tables.acl.policies.get(id)
}

/// Every policy, ordered by ID.
pub fn policy_list(tables: &Tables) -> impl Iterator<Item = &Arc<Policy>> {
    tables.acl.policies.values()
}

pub fn role_by_id<'a>(tables: &'a Tables, id: &str) -> Option<&'a Arc<Role>> {
    tables.acl.roles.get(&*id.to_lowercase())
}

pub fn role_by_name<'a>(tables: &'a Tables, name: &str) -> Option<&'a Arc<Role>> {
    let id = tables.acl.role_names.get(&*fold(name))?;
    tables.acl.roles.get(id)
}

/// Roles, optionally only those linking `policy` (`/v1/acl/roles?policy=`), ordered by ID.
pub fn role_list<'a>(tables: &'a Tables, policy: Option<&str>) -> Vec<&'a Arc<Role>> {
    match policy {
        None => tables.acl.roles.values().collect(),
        Some(policy) => tables
            .acl
            .roles_by_policy
            .get(&*policy.to_lowercase())
            .into_iter()
            .flatten()
            .filter_map(|id| tables.acl.roles.get(id))
            .collect(),
    }
}

pub fn auth_method_by_name<'a>(tables: &'a Tables, name: &str) -> Option<&'a Arc<AuthMethod>> {
    tables.acl.auth_methods.get(&*fold(name))
}

/// Every auth method, ordered by folded name.
pub fn auth_method_list(tables: &Tables) -> impl Iterator<Item = &Arc<AuthMethod>> {
    tables.acl.auth_methods.values()
}

pub fn binding_rule_by_id<'a>(tables: &'a Tables, id: &str) -> Option<&'a Arc<BindingRule>> {
    tables.acl.binding_rules.get(&*id.to_lowercase())
}

/// Binding rules, optionally only those of `auth_method`, ordered by ID.
pub fn binding_rule_list<'a>(
    tables: &'a Tables,
    auth_method: Option<&str>,
) -> Vec<&'a Arc<BindingRule>> {
    match auth_method {
        None => tables.acl.binding_rules.values().collect(),
        Some(method) => tables
            .acl
            .binding_rules_by_method
            .get(&*fold(method))
            .into_iter()
            .flatten()
            .filter_map(|id| tables.acl.binding_rules.get(id))
            .collect(),
    }
}

/// `(ID, current name)` of each linked policy that still exists, in link order.
pub fn policy_links(tables: &Tables, ids: &[Arc<str>]) -> Vec<(Arc<str>, Arc<str>)> {
    ids.iter()
        .filter_map(|id| tables.acl.policies.get(id))
        .map(|p| (p.id.clone(), p.name.clone()))
        .collect()
}

/// `(ID, current name)` of each linked role that still exists, in link order.
pub fn role_links(tables: &Tables, ids: &[Arc<str>]) -> Vec<(Arc<str>, Arc<str>)> {
    ids.iter()
        .filter_map(|id| tables.acl.roles.get(id))
        .map(|r| (r.id.clone(), r.name.clone()))
        .collect()
}

/// Whether `/v1/acl/bootstrap` may run, and the reset index to name when it may not.
pub fn can_bootstrap(tables: &Tables) -> (bool, u64) {
    match tables.acl.bootstrap_index {
        None => (true, 0),
        Some(index) => (false, index),
    }
}

/// Tokens expired at `now_unix_ns`, soonest first, at most `max` (for the leader's reaper).
pub fn expired_tokens(tables: &Tables, now_unix_ns: i64, max: usize) -> Vec<Arc<str>> {
    tables
        .acl
        .token_expiry
        .iter()
        .take_while(|(expires, _)| *expires < now_unix_ns)
        .take(max)
        .map(|(_, accessor)| accessor.clone())
        .collect()
}

// ---- row maintenance shared by the writes ----

fn push_changes(changes: &mut Vec<Change>, row: Arc<str>, list: &str) {
    changes.push(Change::key(Table::Acl, &row));
    changes.push(Change::key(Table::Acl, &Arc::from(list)));
}

fn link(index: &mut OrdMap<Arc<str>, IdSet>, key: &Arc<str>, member: &Arc<str>) {
    index.entry(key.clone()).or_default().insert(member.clone());
}

fn unlink(index: &mut OrdMap<Arc<str>, IdSet>, key: &Arc<str>, member: &Arc<str>) {
    let now_empty = match index.get_mut(key) {
        Some(set) => {
            set.remove(member);
            set.is_empty()
        }
        None => false,
    };
    if now_empty {
        index.remove(key);
    }
}

impl AclTables {
    /// Inserts or replaces a token, keeping every index in step.
    fn put_token(&mut self, token: Token) {
        let accessor = token.accessor_id.clone();
        self.remove_token_row(&accessor);
        self.token_secrets
            .insert(secret_key_of(&token.secret_id), accessor.clone());
        for policy in &token.policies {
            link(&mut self.tokens_by_policy, policy, &accessor);
        }
        for role in &token.roles {
            link(&mut self.tokens_by_role, role, &accessor);
        }
        if !token.auth_method.is_empty() {
            link(
                &mut self.tokens_by_auth_method,
                &fold(&token.auth_method),
                &accessor,
            );
        }
        if let Some(expires) = token.expiration_time_ns {
            self.token_expiry.insert((expires, accessor.clone()));
        }
        self.tokens.insert(accessor, Arc::new(token));
    }

    /// Removes a token row and its index entries; returns it.
    fn remove_token_row(&mut self, accessor: &Arc<str>) -> Option<Arc<Token>> {
        let token = self.tokens.remove(accessor)?;
        let removed = self.token_secrets.remove(&*secret_key(&token.secret_id));
        debug_assert_eq!(removed.as_deref(), Some(&*token.accessor_id));
        for policy in &token.policies {
            unlink(&mut self.tokens_by_policy, policy, accessor);
        }
        for role in &token.roles {
            unlink(&mut self.tokens_by_role, role, accessor);
        }
        if !token.auth_method.is_empty() {
            unlink(
                &mut self.tokens_by_auth_method,
                &fold(&token.auth_method),
                accessor,
            );
        }
        if let Some(expires) = token.expiration_time_ns {
            self.token_expiry.remove(&(expires, accessor.clone()));
        }
        Some(token)
    }

    fn put_policy(&mut self, policy: Policy) {
        if let Some(old) = self.policies.get(&policy.id) {
            let old_name = fold(&old.name);
            self.policy_names.remove(&old_name);
        }
        self.policy_names
            .insert(fold(&policy.name), policy.id.clone());
        self.policies.insert(policy.id.clone(), Arc::new(policy));
    }

    fn remove_policy_row(&mut self, id: &Arc<str>) -> Option<Arc<Policy>> {
        let policy = self.policies.remove(id)?;
        self.policy_names.remove(&fold(&policy.name));
        Some(policy)
    }

    fn put_role(&mut self, role: Role) {
        self.remove_role_row(&role.id.clone());
        self.role_names.insert(fold(&role.name), role.id.clone());
        for policy in &role.policies {
            link(&mut self.roles_by_policy, policy, &role.id);
        }
        self.roles.insert(role.id.clone(), Arc::new(role));
    }

    fn remove_role_row(&mut self, id: &Arc<str>) -> Option<Arc<Role>> {
        let role = self.roles.remove(id)?;
        self.role_names.remove(&fold(&role.name));
        for policy in &role.policies {
            unlink(&mut self.roles_by_policy, policy, id);
        }
        Some(role)
    }

    fn put_binding_rule(&mut self, rule: BindingRule) {
        self.remove_binding_rule_row(&rule.id.clone());
        link(
            &mut self.binding_rules_by_method,
            &fold(&rule.auth_method),
            &rule.id,
        );
        self.binding_rules.insert(rule.id.clone(), Arc::new(rule));
    }

    fn remove_binding_rule_row(&mut self, id: &Arc<str>) -> Option<Arc<BindingRule>> {
        let rule = self.binding_rules.remove(id)?;
        unlink(
            &mut self.binding_rules_by_method,
            &fold(&rule.auth_method),
            id,
        );
        Some(rule)
    }

    /// Checks every secondary index against the rows (tests and debug assertions).
    pub fn check_indexes(&self) -> Result<(), String> {
        if self.token_secrets.len() != self.tokens.len() {
            return Err("token_secrets and tokens differ in size".into());
        }
        let mut links = 0;
        for (accessor, token) in &self.tokens {
            if &token.accessor_id != accessor {
                return Err(format!("token {accessor} filed under the wrong key"));
            }
            if self.token_secrets.get(&*secret_key(&token.secret_id)) != Some(accessor) {
                return Err(format!("token {accessor} missing from token_secrets"));
            }
            for policy in &token.policies {
                links += 1;
                if !self
                    .tokens_by_policy
                    .get(policy)
                    .is_some_and(|s| s.contains(accessor))
                {
                    return Err(format!("token {accessor} missing from tokens_by_policy"));
                }
            }
        }
        let indexed: usize = self.tokens_by_policy.values().map(|s| s.len()).sum();
        if indexed != links {
            return Err("tokens_by_policy holds stale entries".into());
        }
        if self.policy_names.len() != self.policies.len()
            || self.role_names.len() != self.roles.len()
        {
            return Err("a name index differs from its table".into());
        }
        let rules_indexed: usize = self.binding_rules_by_method.values().map(|s| s.len()).sum();
        if rules_indexed != self.binding_rules.len() {
            return Err("binding_rules_by_method differs from binding_rules".into());
        }
        let expiring = self
            .tokens
            .values()
            .filter(|t| t.expiration_time_ns.is_some())
            .count();
        if expiring != self.token_expiry.len() {
            return Err("token_expiry differs from the tokens that expire".into());
        }
        Ok(())
    }
}
