//! ACL resolution: `ACL.TokenRead` (`ACLTokenGetRequest`) and its `ACLTokenResponse`, with
//! the token as Consul's `ACLToken` (policy and role links named, times in Go's binary
//! form) and, for an `Expanded` read, Consul's `ExpandedTokenInfo` (the token's policies,
//! synthesized ones included, and its roles). A client agent resolves a request's token
//! with an expanded read by the token's own secret ([`read_resolved_token`]).
//!
//! Below those, the requests and objects of the other ACL calls: tokens, policies, roles,
//! auth methods (`ACLAuthMethod`, its `Config` the stored JSON as a msgpack map) and
//! binding rules (`ACLBindingRule`), each read and written with its get, list, set and
//! delete request; `ACLLoginRequest`, `ACLLogoutRequest` and
//! `ACLInitialTokenBootstrapRequest`; and `ACLReplicationStatus`, what
//! `ACL.ReplicationStatus` answers ([`ReplicationStatus`]).

use super::{
    each_field, go_time_binary, read_json, read_reply, string_list, string_map, write_json,
    write_string_list, write_string_map, Fields, QueryMeta, QueryOptions,
};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::acl::{
    AuthMethod, BindingRule, NodeIdentity, Policy, Role, ServiceIdentity, TemplatedPolicy, Token,
};
use std::sync::Arc;

/// `ACLTokenGetRequest`: a token by its accessor ID, or by its secret (`TokenIDType`
/// `secret`), which is how an agent resolves the token a request carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenGetRequest<'a> {
    pub datacenter: &'a str,
    pub token_id: &'a str,
    pub token_id_type: &'a str,
    pub expanded: bool,
    pub options: QueryOptions<'a>,
}

impl<'a> TokenGetRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<TokenGetRequest<'a>, WireError> {
        let mut request = TokenGetRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "TokenID" => request.token_id = r.str()?,
                "TokenIDType" => request.token_id_type = r.str()?,
                "Expanded" => request.expanded = r.bool()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options.write_request(
            &mut w,
            &["Datacenter", "Expanded", "TokenID", "TokenIDType"],
            |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                "Expanded" => w.bool(self.expanded),
                "TokenID" => w.str(self.token_id),
                _ => w.str(self.token_id_type),
            },
        );
        w.into_inner()
    }

    /// Whether the token is asked for by its secret.
    pub fn by_secret(&self) -> bool {
        self.token_id_type == "secret"
    }
}

/// A link to a policy or role: `{ID, Name}`.
fn write_links<'l>(w: &mut Writer, links: &[(&'l str, &'l str)]) {
    if links.is_empty() {
        w.nil();
        return;
    }
    w.array_len(links.len());
    for (id, name) in links {
        let mut f = Fields::new(w, 2);
        f.field("ID").str(id);
        f.field("Name").str(name);
        f.finish();
    }
}

/// `[]*ACLNodeIdentity`; nil when empty.
fn write_node_identities(w: &mut Writer, identities: &[NodeIdentity]) {
    if identities.is_empty() {
        w.nil();
        return;
    }
    w.array_len(identities.len());
    for identity in identities {
        let mut n = Fields::new(w, 2);
        n.field("Datacenter").str(&identity.datacenter);
        n.field("NodeName").str(&identity.node_name);
        n.finish();
    }
}

/// `[]*ACLServiceIdentity`; nil when empty.
fn write_service_identities(w: &mut Writer, identities: &[ServiceIdentity]) {
    if identities.is_empty() {
        w.nil();
        return;
    }
    w.array_len(identities.len());
    for identity in identities {
        let mut s = Fields::new(w, 2);
        write_string_list(
            s.field("Datacenters"),
            identity.datacenters.iter().map(String::as_str),
            true,
        );
        s.field("ServiceName").str(&identity.service_name);
        s.finish();
    }
}

/// `ACLPolicy`.
pub fn write_policy(w: &mut Writer, policy: &Policy) {
    let mut f = Fields::new(w, 8);
    f.field("CreateIndex").uint(policy.create_index);
    write_string_list(
        f.field("Datacenters"),
        policy.datacenters.iter().map(String::as_str),
        true,
    );
    f.field("Description").str(&policy.description);
    f.field("Hash")
        .opt_bytes((!policy.hash.is_empty()).then_some(&policy.hash[..]));
    f.field("ID").str(&policy.id);
    f.field("ModifyIndex").uint(policy.modify_index);
    f.field("Name").str(&policy.name);
    f.field("Rules").str(&policy.rules);
    f.finish();
}

/// `ACLRole`, its policy links named (`(id, name)`, in the role's order).
pub fn write_role(w: &mut Writer, role: &Role, policies: &[(&str, &str)]) {
    let mut f = Fields::new(w, 10);
    f.field("CreateIndex").uint(role.create_index);
    f.field("Description").str(&role.description);
    f.field("Hash")
        .opt_bytes((!role.hash.is_empty()).then_some(&role.hash[..]));
    f.field("ID").str(&role.id);
    f.field("ModifyIndex").uint(role.modify_index);
    f.field("Name").str(&role.name);
    write_node_identities(f.field("NodeIdentities"), &role.node_identities);
    write_links(f.field("Policies"), policies);
    write_service_identities(f.field("ServiceIdentities"), &role.service_identities);
    write_templated_policies(f.field("TemplatedPolicies"), &role.templated_policies);
    f.finish();
}

/// Consul's `ExpandedTokenInfo`, answered to an `Expanded` read: every policy that applies
/// to the token (synthesized ones included), its roles with their policy links, and the
/// answering agent's ACL settings.
pub struct ExpandedView<'e> {
    pub policies: &'e [Arc<Policy>],
    pub roles: Vec<(&'e Role, Vec<(&'e str, &'e str)>)>,
    /// `acl.default_policy` and `acl.down_policy` as configured (`allow`, `extend-cache`, …).
    pub default_policy: &'static str,
    pub down_policy: &'static str,
    /// The answering server's node name.
    pub resolved_by: &'e str,
}

/// A token with its policies' and roles' names (`(id, name)`, in the token's order).
pub struct TokenView<'t> {
    pub token: &'t Token,
    pub policies: Vec<(&'t str, &'t str)>,
    pub roles: Vec<(&'t str, &'t str)>,
}

/// `[]*ACLTemplatedPolicy`; nil when empty.
fn write_templated_policies(w: &mut Writer, templated: &[TemplatedPolicy]) {
    if templated.is_empty() {
        w.nil();
        return;
    }
    w.array_len(templated.len());
    for policy in templated {
        let mut t = Fields::new(w, 3);
        write_string_list(
            t.field("Datacenters"),
            policy.datacenters.iter().map(String::as_str),
            true,
        );
        t.field("TemplateName").str(&policy.template_name);
        let variables = t.field("TemplateVariables");
        match &policy.name {
            Some(name) => {
                let mut v = Fields::new(variables, 1);
                v.field("Name").str(name);
                v.finish();
            }
            None => variables.nil(),
        }
        t.finish();
    }
}

/// `ACLToken`.
pub fn write_token(w: &mut Writer, view: &TokenView) {
    write_token_as(w, view, false, 0);
}

/// `ACLTokenListStub`, a token as a list shows it.
pub fn write_token_stub(w: &mut Writer, view: &TokenView) {
    write_token_as(w, view, true, 0);
}

/// `ACLToken` (with `ExpirationTTL`, which only a create carries) or, with `stub`,
/// `ACLTokenListStub` (with `Legacy`, always false). The AccessorID is the one its creator
/// wrote, as answers show it.
fn write_token_as(w: &mut Writer, view: &TokenView, stub: bool, expiration_ttl_ns: i64) {
    let token = view.token;
    let mut f = Fields::new(w, 16);
    f.field("AccessorID").str(token.accessor_id_shown());
    f.field("AuthMethod").str(&token.auth_method);
    f.field("CreateIndex").uint(token.create_index);
    f.field("CreateTime")
        .bytes(&go_time_binary(token.create_time_ns));
    f.field("Description").str(&token.description);
    if !stub {
        f.field("ExpirationTTL").int(expiration_ttl_ns);
    }
    match token.expiration_time_ns {
        Some(ns) => f.field("ExpirationTime").bytes(&go_time_binary(ns)),
        None => f.field("ExpirationTime").nil(),
    }
    f.field("Hash")
        .opt_bytes((!token.hash.is_empty()).then_some(&token.hash[..]));
    if stub {
        f.field("Legacy").bool(false);
    }
    f.field("Local").bool(token.local);
    f.field("ModifyIndex").uint(token.modify_index);
    write_node_identities(f.field("NodeIdentities"), &token.node_identities);
    write_links(f.field("Policies"), &view.policies);
    write_links(f.field("Roles"), &view.roles);
    f.field("SecretID").str(&token.secret_id);
    write_service_identities(f.field("ServiceIdentities"), &token.service_identities);
    write_templated_policies(f.field("TemplatedPolicies"), &token.templated_policies);
    f.finish();
}

/// `ACLTokenResponse`: the token (nil when none), where it came from, and the embedded
/// `ExpandedTokenInfo` (zero values unless the read was `Expanded`).
pub fn write_token_response(
    w: &mut Writer,
    meta: &QueryMeta,
    token: Option<&TokenView>,
    source_datacenter: &str,
    expanded: Option<&ExpandedView>,
) {
    meta.write_reply(
        w,
        &[
            "AgentACLDefaultPolicy",
            "AgentACLDownPolicy",
            "ExpandedPolicies",
            "ExpandedRoles",
            "NamespaceDefaultPolicyIDs",
            "NamespaceDefaultRoleIDs",
            "Redacted",
            "ResolvedByAgent",
            "SourceDatacenter",
            "Token",
        ],
        |name, w| match name {
            "AgentACLDefaultPolicy" => w.str(expanded.map_or("", |e| e.default_policy)),
            "AgentACLDownPolicy" => w.str(expanded.map_or("", |e| e.down_policy)),
            "ExpandedPolicies" => match expanded {
                Some(e) if !e.policies.is_empty() => {
                    w.array_len(e.policies.len());
                    for policy in e.policies {
                        write_policy(w, policy);
                    }
                }
                _ => w.nil(),
            },
            "ExpandedRoles" => match expanded {
                Some(e) if !e.roles.is_empty() => {
                    w.array_len(e.roles.len());
                    for (role, links) in &e.roles {
                        write_role(w, role, links);
                    }
                }
                _ => w.nil(),
            },
            // Namespaces are Consul Enterprise's: CE answers none.
            "NamespaceDefaultPolicyIDs" | "NamespaceDefaultRoleIDs" => w.nil(),
            "Redacted" => w.bool(false),
            "ResolvedByAgent" => w.str(expanded.map_or("", |e| e.resolved_by)),
            "SourceDatacenter" => w.str(source_datacenter),
            _ => match token {
                Some(view) => write_token(w, view),
                None => w.nil(),
            },
        },
    );
}

/// One policy of an expanded token read, as a client agent compiles it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExpandedPolicy<'a> {
    pub rules: &'a str,
    /// Where it applies; empty for everywhere.
    pub datacenters: Vec<&'a str>,
}

/// What a client agent reads of an expanded `ACLTokenResponse`: the token's accessor
/// (`None` when the server has no such token) and its expanded policies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvedToken<'a> {
    pub accessor_id: Option<&'a str>,
    pub policies: Vec<ExpandedPolicy<'a>>,
}

/// Reads an expanded `ACLTokenResponse` (what `ACL.TokenRead` with `Expanded` answers).
pub fn read_resolved_token(body: &[u8]) -> Result<ResolvedToken<'_>, WireError> {
    let mut resolved = ResolvedToken::default();
    read_reply(body, |name, r| {
        match name {
            "Token" => {
                if r.try_nil()? {
                    resolved.accessor_id = None;
                } else {
                    let mut accessor = "";
                    each_field(r, |name, r| {
                        if name != "AccessorID" {
                            return Ok(false);
                        }
                        accessor = r.str()?;
                        Ok(true)
                    })?;
                    resolved.accessor_id = Some(accessor);
                }
            }
            "ExpandedPolicies" => {
                let count = r.array_len()?;
                for _ in 0..count {
                    let mut policy = ExpandedPolicy::default();
                    each_field(r, |name, r| {
                        match name {
                            "Rules" => policy.rules = r.str()?,
                            "Datacenters" => policy.datacenters = string_list(r)?,
                            _ => return Ok(false),
                        }
                        Ok(true)
                    })?;
                    resolved.policies.push(policy);
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(resolved)
}

// ---- the ACL objects' own calls: tokens, policies, roles ----

/// Policy or role links with their names, `(id, name)`, in the row's order.
pub type Links = Vec<(Arc<str>, Arc<str>)>;

/// An owned `ACLToken` (or `ACLTokenListStub`) as a call carries it: the row, its policy
/// and role links with their names, and `ExpirationTTL` (which only a create carries).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRecord {
    pub token: Token,
    pub policies: Links,
    pub roles: Links,
    pub expiration_ttl_ns: i64,
}

impl TokenRecord {
    /// The view [`write_token`] writes.
    pub fn view(&self) -> TokenView<'_> {
        TokenView {
            token: &self.token,
            policies: borrowed_links(&self.policies),
            roles: borrowed_links(&self.roles),
        }
    }
}

/// `(id, name)` pairs borrowed.
pub fn borrowed_links(links: &[(Arc<str>, Arc<str>)]) -> Vec<(&str, &str)> {
    links.iter().map(|(i, n)| (&**i, &**n)).collect()
}

/// Unix nanoseconds of Go's `time.Time` binary form (version 1, or 2 with a seconds
/// offset). A time beyond what nanoseconds since 1970 hold in an `i64` (Go's zero time,
/// year 1, which an unset field carries) reads as 0.
pub fn go_time_unix_ns(bytes: &[u8]) -> Result<i64, WireError> {
    /// Seconds from 0001-01-01 to 1970-01-01 (Go's `unixToInternal`).
    const UNIX_TO_INTERNAL_SECONDS: i64 = 62_135_596_800;
    if !(bytes.len() == 15 || bytes.len() == 16) || !matches!(bytes[0], 1 | 2) {
        return Err(WireError::Invalid("a time that is not Go's binary form"));
    }
    let seconds = i64::from_be_bytes(bytes[1..9].try_into().expect("eight bytes"));
    let nanos = i32::from_be_bytes(bytes[9..13].try_into().expect("four bytes"));
    Ok((seconds - UNIX_TO_INTERNAL_SECONDS)
        .checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(i64::from(nanos)))
        .unwrap_or(0))
}

/// `[]ACLTokenPolicyLink` / `[]ACLTokenRoleLink` / `[]ACLRolePolicyLink`.
fn read_links(r: &mut Reader) -> Result<Links, WireError> {
    let count = r.array_len()?;
    let mut links = Vec::with_capacity(count);
    for _ in 0..count {
        let (mut id, mut name) = ("", "");
        each_field(r, |field, r| {
            match field {
                "ID" => id = r.str()?,
                "Name" => name = r.str()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        links.push((Arc::from(id), Arc::from(name)));
    }
    Ok(links)
}

fn owned_strings(r: &mut Reader) -> Result<Vec<String>, WireError> {
    Ok(string_list(r)?.into_iter().map(str::to_string).collect())
}

fn read_service_identities(r: &mut Reader) -> Result<Vec<ServiceIdentity>, WireError> {
    let count = r.array_len()?;
    let mut identities = Vec::with_capacity(count);
    for _ in 0..count {
        let mut identity = ServiceIdentity {
            service_name: String::new(),
            datacenters: Vec::new(),
        };
        each_field(r, |field, r| {
            match field {
                "ServiceName" => identity.service_name = r.str()?.to_string(),
                "Datacenters" => identity.datacenters = owned_strings(r)?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        identities.push(identity);
    }
    Ok(identities)
}

fn read_node_identities(r: &mut Reader) -> Result<Vec<NodeIdentity>, WireError> {
    let count = r.array_len()?;
    let mut identities = Vec::with_capacity(count);
    for _ in 0..count {
        let mut identity = NodeIdentity {
            node_name: String::new(),
            datacenter: String::new(),
        };
        each_field(r, |field, r| {
            match field {
                "NodeName" => identity.node_name = r.str()?.to_string(),
                "Datacenter" => identity.datacenter = r.str()?.to_string(),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        identities.push(identity);
    }
    Ok(identities)
}

fn read_templated_policies(r: &mut Reader) -> Result<Vec<TemplatedPolicy>, WireError> {
    let count = r.array_len()?;
    let mut templated = Vec::with_capacity(count);
    for _ in 0..count {
        let mut policy = TemplatedPolicy {
            template_name: String::new(),
            name: None,
            datacenters: Vec::new(),
        };
        each_field(r, |field, r| {
            match field {
                "TemplateName" => policy.template_name = r.str()?.to_string(),
                "Datacenters" => policy.datacenters = owned_strings(r)?,
                "TemplateVariables" => {
                    if !r.try_nil()? {
                        let mut name = String::new();
                        each_field(r, |field, r| {
                            if field != "Name" {
                                return Ok(false);
                            }
                            name = r.str()?.to_string();
                            Ok(true)
                        })?;
                        policy.name = Some(name);
                    }
                }
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        templated.push(policy);
    }
    Ok(templated)
}

/// Reads an `ACLToken` or `ACLTokenListStub`.
pub fn read_token(r: &mut Reader) -> Result<TokenRecord, WireError> {
    let mut record = TokenRecord {
        token: Token::empty(),
        policies: Vec::new(),
        roles: Vec::new(),
        expiration_ttl_ns: 0,
    };
    let token = &mut record.token;
    each_field(r, |field, r| {
        match field {
            "AccessorID" => token.accessor_id = Arc::from(r.str()?),
            "SecretID" => token.secret_id = Arc::from(r.str()?),
            "Description" => token.description = r.str()?.to_string(),
            "Policies" => record.policies = read_links(r)?,
            "Roles" => record.roles = read_links(r)?,
            "ServiceIdentities" => token.service_identities = read_service_identities(r)?,
            "NodeIdentities" => token.node_identities = read_node_identities(r)?,
            "TemplatedPolicies" => token.templated_policies = read_templated_policies(r)?,
            "Local" => token.local = r.bool()?,
            "AuthMethod" => token.auth_method = r.str()?.to_string(),
            "ExpirationTime" => {
                token.expiration_time_ns = match r.opt_bytes()? {
                    Some(bytes) => Some(go_time_unix_ns(bytes)?),
                    None => None,
                }
            }
            "ExpirationTTL" => record.expiration_ttl_ns = r.i64("ExpirationTTL")?,
            "CreateTime" => {
                token.create_time_ns = match r.opt_bytes()? {
                    Some(bytes) => go_time_unix_ns(bytes)?,
                    None => 0,
                }
            }
            "Hash" => token.hash = r.bytes()?.to_vec(),
            "CreateIndex" => token.create_index = r.u64("CreateIndex")?,
            "ModifyIndex" => token.modify_index = r.u64("ModifyIndex")?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    record.token.policies = record.policies.iter().map(|(id, _)| id.clone()).collect();
    record.token.roles = record.roles.iter().map(|(id, _)| id.clone()).collect();
    Ok(record)
}

/// Reads an `ACLPolicy` or `ACLPolicyListStub` (which has no `Rules`).
pub fn read_policy(r: &mut Reader) -> Result<Policy, WireError> {
    let mut policy = Policy {
        id: Arc::from(""),
        name: Arc::from(""),
        description: String::new(),
        rules: String::new(),
        datacenters: Vec::new(),
        hash: Vec::new(),
        create_index: 0,
        modify_index: 0,
    };
    each_field(r, |field, r| {
        match field {
            "ID" => policy.id = Arc::from(r.str()?),
            "Name" => policy.name = Arc::from(r.str()?),
            "Description" => policy.description = r.str()?.to_string(),
            "Rules" => policy.rules = r.str()?.to_string(),
            "Datacenters" => policy.datacenters = owned_strings(r)?,
            "Hash" => policy.hash = r.bytes()?.to_vec(),
            "CreateIndex" => policy.create_index = r.u64("CreateIndex")?,
            "ModifyIndex" => policy.modify_index = r.u64("ModifyIndex")?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(policy)
}

/// `ACLPolicyListStub`: a policy without its rules.
pub fn write_policy_stub(w: &mut Writer, policy: &Policy) {
    let mut f = Fields::new(w, 7);
    f.field("CreateIndex").uint(policy.create_index);
    write_string_list(
        f.field("Datacenters"),
        policy.datacenters.iter().map(String::as_str),
        true,
    );
    f.field("Description").str(&policy.description);
    f.field("Hash")
        .opt_bytes((!policy.hash.is_empty()).then_some(&policy.hash[..]));
    f.field("ID").str(&policy.id);
    f.field("ModifyIndex").uint(policy.modify_index);
    f.field("Name").str(&policy.name);
    f.finish();
}

/// An owned `ACLRole` with its policy links named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleRecord {
    pub role: Role,
    pub policies: Links,
}

/// Reads an `ACLRole`.
pub fn read_role(r: &mut Reader) -> Result<RoleRecord, WireError> {
    let mut record = RoleRecord {
        role: Role {
            id: Arc::from(""),
            name: Arc::from(""),
            description: String::new(),
            policies: Vec::new(),
            service_identities: Vec::new(),
            node_identities: Vec::new(),
            templated_policies: Vec::new(),
            hash: Vec::new(),
            create_index: 0,
            modify_index: 0,
        },
        policies: Vec::new(),
    };
    let role = &mut record.role;
    each_field(r, |field, r| {
        match field {
            "ID" => role.id = Arc::from(r.str()?),
            "Name" => role.name = Arc::from(r.str()?),
            "Description" => role.description = r.str()?.to_string(),
            "Policies" => record.policies = read_links(r)?,
            "ServiceIdentities" => role.service_identities = read_service_identities(r)?,
            "NodeIdentities" => role.node_identities = read_node_identities(r)?,
            "TemplatedPolicies" => role.templated_policies = read_templated_policies(r)?,
            "Hash" => role.hash = r.bytes()?.to_vec(),
            "CreateIndex" => role.create_index = r.u64("CreateIndex")?,
            "ModifyIndex" => role.modify_index = r.u64("ModifyIndex")?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    record.role.policies = record.policies.iter().map(|(id, _)| id.clone()).collect();
    Ok(record)
}

/// The ACL objects the calls below carry, by the field their requests name them with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Object {
    Token,
    Policy,
    Role,
    AuthMethod,
    BindingRule,
}

impl Object {
    /// The set request's field holding the object (`ACLTokenSetRequest.ACLToken`).
    fn set_field(self) -> &'static str {
        match self {
            Object::Token => "ACLToken",
            Object::Policy => "Policy",
            Object::Role => "Role",
            Object::AuthMethod => "AuthMethod",
            Object::BindingRule => "BindingRule",
        }
    }

    /// The delete request's ID field (`ACLTokenDeleteRequest.TokenID`).
    fn id_field(self) -> &'static str {
        match self {
            Object::Token => "TokenID",
            Object::Policy => "PolicyID",
            Object::Role => "RoleID",
            Object::AuthMethod => "AuthMethodName",
            Object::BindingRule => "BindingRuleID",
        }
    }

    /// The get request's name field (`ACLPolicyGetRequest.PolicyName`); tokens, auth
    /// methods (named by their ID field) and binding rules have none.
    fn name_field(self) -> &'static str {
        match self {
            Object::Policy => "PolicyName",
            Object::Role => "RoleName",
            Object::Token | Object::AuthMethod | Object::BindingRule => "",
        }
    }

    /// The get request's own fields, sorted as go-msgpack writes them.
    fn get_fields(self) -> &'static [&'static str] {
        match self {
            Object::Token => &["Datacenter", "TokenID"],
            Object::Policy => &["Datacenter", "PolicyID", "PolicyName"],
            Object::Role => &["Datacenter", "RoleID", "RoleName"],
            Object::AuthMethod => &["AuthMethodName", "Datacenter"],
            Object::BindingRule => &["BindingRuleID", "Datacenter"],
        }
    }
}

/// `ACLTokenSetRequest`, `ACLPolicySetRequest`, `ACLRoleSetRequest`: the object as raw
/// msgpack (read with [`read_token`], [`read_policy`] or [`read_role`]), `Create` (tokens
/// only; the others say a create by an empty ID), the datacenter and the write's token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetRequest<'a> {
    pub datacenter: &'a str,
    pub object: &'a [u8],
    pub create: bool,
    pub token: &'a str,
}

impl<'a> SetRequest<'a> {
    pub fn decode(object: Object, body: &'a [u8]) -> Result<SetRequest<'a>, WireError> {
        let mut request = SetRequest::default();
        let field = object.set_field();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Create" => request.create = r.bool()?,
                "Token" => request.token = r.str()?,
                _ if name == field => {
                    let start = r.position();
                    r.skip()?;
                    request.object = &body[start..r.position()];
                }
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    /// The request as a client sends it; `write_object` writes the object.
    pub fn encode(&self, object: Object, write_object: impl FnOnce(&mut Writer)) -> Vec<u8> {
        let mut w = Writer::new();
        let with_create = object == Object::Token;
        let mut f = Fields::new(&mut w, if with_create { 4 } else { 3 });
        let field = object.set_field();
        if with_create {
            write_object(f.field("ACLToken"));
            f.field("Create").bool(self.create);
            f.field("Datacenter").str(self.datacenter);
        } else if field < "Datacenter" {
            // `AuthMethod`, `BindingRule`.
            write_object(f.field(field));
            f.field("Datacenter").str(self.datacenter);
        } else {
            f.field("Datacenter").str(self.datacenter);
            write_object(f.field(field));
        }
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// Writes an `ACLToken` as a set request carries it.
pub fn write_token_record(w: &mut Writer, record: &TokenRecord) {
    write_token_as(w, &record.view(), false, record.expiration_ttl_ns);
}

/// `ACLTokenDeleteRequest`, `ACLPolicyDeleteRequest`, `ACLRoleDeleteRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteRequest<'a> {
    pub datacenter: &'a str,
    pub id: &'a str,
    pub token: &'a str,
}

impl<'a> DeleteRequest<'a> {
    pub fn decode(object: Object, body: &'a [u8]) -> Result<DeleteRequest<'a>, WireError> {
        let mut request = DeleteRequest::default();
        let id_field = object.id_field();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Token" => request.token = r.str()?,
                _ if name == id_field => request.id = r.str()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self, object: Object) -> Vec<u8> {
        let mut w = Writer::new();
        let id_field = object.id_field();
        let mut fields = [
            ("Datacenter", self.datacenter),
            (id_field, self.id),
            ("Token", self.token),
        ];
        // `AuthMethodName` and `BindingRuleID` sort first, `TokenID` last.
        fields.sort_unstable_by_key(|(name, _)| *name);
        let mut f = Fields::new(&mut w, fields.len());
        for (name, value) in fields {
            f.field(name).str(value);
        }
        f.finish();
        w.into_inner()
    }
}

/// `ACLPolicyGetRequest`, `ACLRoleGetRequest`: one object by ID or by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GetRequest<'a> {
    pub datacenter: &'a str,
    pub id: &'a str,
    pub name: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> GetRequest<'a> {
    pub fn decode(object: Object, body: &'a [u8]) -> Result<GetRequest<'a>, WireError> {
        let mut request = GetRequest::default();
        let (id_field, name_field) = (object.id_field(), object.name_field());
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                _ if name == id_field => request.id = r.str()?,
                _ if !name_field.is_empty() && name == name_field => request.name = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self, object: Object) -> Vec<u8> {
        let mut w = Writer::new();
        let id_field = object.id_field();
        self.options
            .write_request(&mut w, object.get_fields(), |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                _ if name == id_field => w.str(self.id),
                _ => w.str(self.name),
            });
        w.into_inner()
    }
}

/// `ACLTokenListRequest`, `ACLPolicyListRequest` and `ACLRoleListRequest`: the list's
/// filters (tokens: `Policy`, `Role`, `AuthMethod`, `IncludeLocal`, `IncludeGlobal`;
/// roles: `Policy`; policies: none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListRequest<'a> {
    pub datacenter: &'a str,
    pub policy: &'a str,
    pub role: &'a str,
    pub auth_method: &'a str,
    pub include_local: bool,
    pub include_global: bool,
    pub options: QueryOptions<'a>,
}

impl<'a> ListRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<ListRequest<'a>, WireError> {
        let mut request = ListRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Policy" => request.policy = r.str()?,
                "Role" => request.role = r.str()?,
                "AuthMethod" => request.auth_method = r.str()?,
                "IncludeLocal" => request.include_local = r.bool()?,
                "IncludeGlobal" => request.include_global = r.bool()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self, object: Object) -> Vec<u8> {
        let own: &[&'static str] = match object {
            Object::Token => &[
                "AuthMethod",
                "Datacenter",
                "IncludeGlobal",
                "IncludeLocal",
                "Policy",
                "Role",
            ],
            Object::Policy | Object::AuthMethod => &["Datacenter"],
            Object::Role => &["Datacenter", "Policy"],
            Object::BindingRule => &["AuthMethod", "Datacenter"],
        };
        let mut w = Writer::new();
        self.options
            .write_request(&mut w, own, |name, w| match name {
                "AuthMethod" => w.str(self.auth_method),
                "Datacenter" => w.str(self.datacenter),
                "IncludeGlobal" => w.bool(self.include_global),
                "IncludeLocal" => w.bool(self.include_local),
                "Policy" => w.str(self.policy),
                _ => w.str(self.role),
            });
        w.into_inner()
    }
}

/// Reads an `ACLTokenResponse`: its metadata and token (`None` when there is none).
pub fn read_token_response(body: &[u8]) -> Result<(QueryMeta, Option<TokenRecord>), WireError> {
    let mut token = None;
    let meta = read_reply(body, |name, r| {
        if name != "Token" {
            return Ok(false);
        }
        if !r.try_nil()? {
            token = Some(read_token(r)?);
        }
        Ok(true)
    })?;
    Ok((meta, token))
}

/// Reads a reply that embeds `QueryMeta` next to one object or a list of them (`field`:
/// `Policy`, `Roles`, `Tokens`, …), each read with `read`; a nil object is no object.
pub fn read_objects<T>(
    body: &[u8],
    field: &str,
    mut read: impl FnMut(&mut Reader) -> Result<T, WireError>,
) -> Result<(QueryMeta, Vec<T>), WireError> {
    let mut objects = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != field {
            return Ok(false);
        }
        match r.peek()? {
            0xc0 => r.skip()?,
            0x90..=0x9f | 0xdc | 0xdd => {
                let count = r.array_len()?;
                objects.reserve(count);
                for _ in 0..count {
                    objects.push(read(r)?);
                }
            }
            _ => objects.push(read(r)?),
        }
        Ok(true)
    })?;
    Ok((meta, objects))
}

// ---- auth methods, binding rules, login, logout and bootstrap ----

/// `ACLAuthMethod` (with `stub`, `ACLAuthMethodListStub`, which has no `Config`): the
/// method's `Config` is the JSON object praetor stores, written as the
/// `map[string]interface{}` Consul carries.
pub fn write_auth_method(w: &mut Writer, method: &AuthMethod, stub: bool) {
    let mut f = Fields::new(w, if stub { 8 } else { 9 });
    if !stub {
        let config: serde_json::Value =
            serde_json::from_str(&method.config_json).unwrap_or_default();
        match config {
            serde_json::Value::Null => f.field("Config").nil(),
            config => write_json(f.field("Config"), &config),
        }
    }
    f.field("CreateIndex").uint(method.create_index);
    f.field("Description").str(&method.description);
    f.field("DisplayName").str(&method.display_name);
    f.field("MaxTokenTTL").int(method.max_token_ttl_ns);
    f.field("ModifyIndex").uint(method.modify_index);
    f.field("Name").str(&method.name);
    f.field("TokenLocality").str(&method.token_locality);
    f.field("Type").str(&method.method_type);
    f.finish();
}

/// Reads an `ACLAuthMethod` or `ACLAuthMethodListStub`; a nil or missing `Config` is the
/// empty object praetor stores for none.
pub fn read_auth_method(r: &mut Reader) -> Result<AuthMethod, WireError> {
    let mut method = AuthMethod {
        name: Arc::from(""),
        method_type: String::new(),
        display_name: String::new(),
        description: String::new(),
        max_token_ttl_ns: 0,
        token_locality: String::new(),
        config_json: "{}".to_string(),
        create_index: 0,
        modify_index: 0,
    };
    each_field(r, |field, r| {
        match field {
            "Name" => method.name = Arc::from(r.str()?),
            "Type" => method.method_type = r.str()?.to_string(),
            "DisplayName" => method.display_name = r.str()?.to_string(),
            "Description" => method.description = r.str()?.to_string(),
            "MaxTokenTTL" => method.max_token_ttl_ns = r.i64("MaxTokenTTL")?,
            "TokenLocality" => method.token_locality = r.str()?.to_string(),
            "Config" => {
                method.config_json = match read_json(r)? {
                    serde_json::Value::Null => "{}".to_string(),
                    config => config.to_string(),
                }
            }
            "CreateIndex" => method.create_index = r.u64("CreateIndex")?,
            "ModifyIndex" => method.modify_index = r.u64("ModifyIndex")?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(method)
}

/// `ACLBindingRule`; `BindVars` (`*ACLTemplatedPolicyVariables`) nil when unset.
pub fn write_binding_rule(w: &mut Writer, rule: &BindingRule) {
    let mut f = Fields::new(w, 9);
    f.field("AuthMethod").str(&rule.auth_method);
    f.field("BindName").str(&rule.bind_name);
    f.field("BindType").str(&rule.bind_type);
    let vars = f.field("BindVars");
    match &rule.bind_vars_name {
        Some(name) => {
            let mut v = Fields::new(vars, 1);
            v.field("Name").str(name);
            v.finish();
        }
        None => vars.nil(),
    }
    f.field("CreateIndex").uint(rule.create_index);
    f.field("Description").str(&rule.description);
    f.field("ID").str(&rule.id);
    f.field("ModifyIndex").uint(rule.modify_index);
    f.field("Selector").str(&rule.selector);
    f.finish();
}

/// Reads an `ACLBindingRule`.
pub fn read_binding_rule(r: &mut Reader) -> Result<BindingRule, WireError> {
    let mut rule = BindingRule {
        id: Arc::from(""),
        description: String::new(),
        auth_method: Arc::from(""),
        selector: String::new(),
        bind_type: String::new(),
        bind_name: String::new(),
        bind_vars_name: None,
        create_index: 0,
        modify_index: 0,
    };
    each_field(r, |field, r| {
        match field {
            "ID" => rule.id = Arc::from(r.str()?),
            "Description" => rule.description = r.str()?.to_string(),
            "AuthMethod" => rule.auth_method = Arc::from(r.str()?),
            "Selector" => rule.selector = r.str()?.to_string(),
            "BindType" => rule.bind_type = r.str()?.to_string(),
            "BindName" => rule.bind_name = r.str()?.to_string(),
            "BindVars" => {
                if !r.try_nil()? {
                    let mut name = String::new();
                    each_field(r, |field, r| {
                        if field != "Name" {
                            return Ok(false);
                        }
                        name = r.str()?.to_string();
                        Ok(true)
                    })?;
                    rule.bind_vars_name = Some(name);
                }
            }
            "CreateIndex" => rule.create_index = r.u64("CreateIndex")?,
            "ModifyIndex" => rule.modify_index = r.u64("ModifyIndex")?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(rule)
}

/// `ACLLoginRequest`: `Auth` (`*ACLLoginParams`: the auth method's name, the bearer token
/// it verifies, the token's meta), the datacenter, and the write's token (which a login
/// must not carry).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoginRequest<'a> {
    pub datacenter: &'a str,
    pub auth_method: &'a str,
    pub bearer_token: &'a str,
    pub meta: Vec<(&'a str, &'a str)>,
    pub token: &'a str,
}

impl<'a> LoginRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<LoginRequest<'a>, WireError> {
        let mut request = LoginRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Token" => request.token = r.str()?,
                "Auth" => {
                    if r.try_nil()? {
                        return Ok(true);
                    }
                    each_field(r, |name, r| {
                        match name {
                            "AuthMethod" => request.auth_method = r.str()?,
                            "BearerToken" => request.bearer_token = r.str()?,
                            "Meta" => {
                                request.meta = if r.try_nil()? {
                                    Vec::new()
                                } else {
                                    string_map(r)?
                                }
                            }
                            _ => return Ok(false),
                        }
                        Ok(true)
                    })?;
                }
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 3);
        let mut auth = Fields::new(f.field("Auth"), 3);
        auth.field("AuthMethod").str(self.auth_method);
        auth.field("BearerToken").str(self.bearer_token);
        write_string_map(auth.field("Meta"), self.meta.iter().copied(), true);
        auth.finish();
        f.field("Datacenter").str(self.datacenter);
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// `ACLLogoutRequest`: the datacenter and the write's token, which is the login token to
/// delete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogoutRequest<'a> {
    pub datacenter: &'a str,
    pub token: &'a str,
}

impl<'a> LogoutRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<LogoutRequest<'a>, WireError> {
        let mut request = LogoutRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Token" => request.token = r.str()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 2);
        f.field("Datacenter").str(self.datacenter);
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// `ACLInitialTokenBootstrapRequest` (`BootstrapSecret`, the secret the management token
/// is to have, empty for a new one; what older agents send, a `DCSpecificRequest`, reads
/// as one without it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BootstrapRequest<'a> {
    pub bootstrap_secret: &'a str,
    pub datacenter: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> BootstrapRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<BootstrapRequest<'a>, WireError> {
        let mut request = BootstrapRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "BootstrapSecret" => request.bootstrap_secret = r.str()?,
                "Datacenter" => request.datacenter = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options.write_request(
            &mut w,
            &["BootstrapSecret", "Datacenter"],
            |name, w| match name {
                "BootstrapSecret" => w.str(self.bootstrap_secret),
                _ => w.str(self.datacenter),
            },
        );
        w.into_inner()
    }
}

/// `ACLReplicationStatus`, what `ACL.ReplicationStatus` answers (a `DCSpecificRequest`):
/// whether this datacenter replicates ACLs from its primary, and how far it got. Its two
/// times are `None` for Go's zero time (never), which an unset status carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicationStatus {
    pub enabled: bool,
    pub running: bool,
    pub source_datacenter: String,
    pub replication_type: String,
    pub replicated_index: u64,
    pub replicated_role_index: u64,
    pub replicated_token_index: u64,
    pub last_success_unix_ns: Option<i64>,
    pub last_error_unix_ns: Option<i64>,
    pub last_error_message: String,
}

/// Go's `time.Time{}.MarshalBinary()`: version 1, second 0 of year 1, UTC.
const GO_ZERO_TIME: [u8; 15] = [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];

/// A time of the status as Go's binary form: the zero time for `None`.
fn write_status_time(w: &mut Writer, unix_ns: Option<i64>) {
    match unix_ns {
        Some(unix_ns) => w.bytes(&go_time_binary(unix_ns)),
        None => w.bytes(&GO_ZERO_TIME),
    }
}

/// A time of the status: `None` for Go's zero time (any zone), else its Unix nanoseconds.
fn read_status_time(r: &mut Reader) -> Result<Option<i64>, WireError> {
    let bytes = r.bytes()?;
    // Seconds and nanoseconds all zero: year 1, what an unset `time.Time` holds.
    if bytes.len() >= 13 && bytes[1..13].iter().all(|b| *b == 0) {
        go_time_unix_ns(bytes)?;
        return Ok(None);
    }
    go_time_unix_ns(bytes).map(Some)
}

impl ReplicationStatus {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 10);
        f.field("Enabled").bool(self.enabled);
        write_status_time(f.field("LastError"), self.last_error_unix_ns);
        f.field("LastErrorMessage").str(&self.last_error_message);
        write_status_time(f.field("LastSuccess"), self.last_success_unix_ns);
        f.field("ReplicatedIndex").uint(self.replicated_index);
        f.field("ReplicatedRoleIndex")
            .uint(self.replicated_role_index);
        f.field("ReplicatedTokenIndex")
            .uint(self.replicated_token_index);
        f.field("ReplicationType").str(&self.replication_type);
        f.field("Running").bool(self.running);
        f.field("SourceDatacenter").str(&self.source_datacenter);
        f.finish();
        w.into_inner()
    }

    pub fn decode(body: &[u8]) -> Result<ReplicationStatus, WireError> {
        let mut status = ReplicationStatus::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Enabled" => status.enabled = r.bool()?,
                "Running" => status.running = r.bool()?,
                "SourceDatacenter" => status.source_datacenter = r.str()?.to_string(),
                "ReplicationType" => status.replication_type = r.str()?.to_string(),
                "ReplicatedIndex" => status.replicated_index = r.u64("ReplicatedIndex")?,
                "ReplicatedRoleIndex" => {
                    status.replicated_role_index = r.u64("ReplicatedRoleIndex")?
                }
                "ReplicatedTokenIndex" => {
                    status.replicated_token_index = r.u64("ReplicatedTokenIndex")?
                }
                "LastSuccess" => status.last_success_unix_ns = read_status_time(r)?,
                "LastError" => status.last_error_unix_ns = read_status_time(r)?,
                "LastErrorMessage" => status.last_error_message = r.str()?.to_string(),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(id: &str, rules: &str, datacenters: &[&str]) -> Arc<Policy> {
        Arc::new(Policy {
            id: Arc::from(id),
            name: Arc::from(format!("p-{id}")),
            description: String::new(),
            rules: rules.to_string(),
            datacenters: datacenters.iter().map(|d| d.to_string()).collect(),
            hash: Vec::new(),
            create_index: 3,
            modify_index: 4,
        })
    }

    #[test]
    fn a_replication_status_crosses_with_its_zero_times_as_go_writes_them() {
        let status = ReplicationStatus {
            source_datacenter: "dc1".into(),
            replicated_token_index: 7,
            last_success_unix_ns: Some(1_700_000_000_123_000_000),
            ..ReplicationStatus::default()
        };
        let body = status.encode();
        // Go's zero time for the error that never happened.
        let zero = [0xaf, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
        assert!(body.windows(zero.len()).any(|w| w == zero));
        assert_eq!(ReplicationStatus::decode(&body).unwrap(), status);
        assert!(ReplicationStatus::decode(&body[..body.len() - 1]).is_err());
    }

    #[test]
    fn an_expanded_token_read_carries_every_policy_to_the_client_agent() {
        let token = Token {
            accessor_id: Arc::from("acc"),
            secret_id: Arc::from("sec"),
            description: String::new(),
            policies: vec![Arc::from("p1")],
            roles: vec![Arc::from("r1")],
            service_identities: vec![ServiceIdentity {
                service_name: "web".into(),
                datacenters: vec!["dc2".into()],
            }],
            node_identities: Vec::new(),
            templated_policies: Vec::new(),
            local: false,
            auth_method: String::new(),
            expiration_time_ns: None,
            create_time_ns: 0,
            hash: Vec::new(),
            create_index: 1,
            modify_index: 2,
            accessor_id_as_written: None,
        };
        let role = Role {
            id: Arc::from("r1"),
            name: Arc::from("role"),
            description: String::new(),
            policies: vec![Arc::from("p2")],
            service_identities: Vec::new(),
            node_identities: vec![NodeIdentity {
                node_name: "n1".into(),
                datacenter: "dc1".into(),
            }],
            templated_policies: Vec::new(),
            hash: Vec::new(),
            create_index: 5,
            modify_index: 6,
        };
        let policies = vec![
            policy("p1", "key \"a\" { policy = \"read\" }", &[]),
            policy("p2", "key \"b\" { policy = \"read\" }", &["dc1"]),
        ];
        let view = TokenView {
            token: &token,
            policies: vec![("p1", "p-p1")],
            roles: vec![("r1", "role")],
        };
        let expanded = ExpandedView {
            policies: &policies,
            roles: vec![(&role, vec![("p2", "p-p2")])],
            default_policy: "deny",
            down_policy: "extend-cache",
            resolved_by: "server-1",
        };
        let meta = QueryMeta {
            index: 9,
            known_leader: true,
            consistency_level: "stale",
            ..QueryMeta::default()
        };
        let mut w = Writer::new();
        write_token_response(&mut w, &meta, Some(&view), "dc1", Some(&expanded));
        let body = w.into_inner();
        let resolved = read_resolved_token(&body).unwrap();
        assert_eq!(resolved.accessor_id, Some("acc"));
        assert_eq!(
            resolved.policies,
            vec![
                ExpandedPolicy {
                    rules: "key \"a\" { policy = \"read\" }",
                    datacenters: Vec::new(),
                },
                ExpandedPolicy {
                    rules: "key \"b\" { policy = \"read\" }",
                    datacenters: vec!["dc1"],
                },
            ]
        );
        // Without a token (unknown secret) the answer says so, and the expanded fields are
        // Consul's zero values.
        let mut w = Writer::new();
        write_token_response(&mut w, &meta, None, "dc1", None);
        let body = w.into_inner();
        assert_eq!(
            read_resolved_token(&body).unwrap(),
            ResolvedToken::default()
        );
        let mut r = Reader::new(&body);
        let mut names = Vec::new();
        each_field(&mut r, |name, _| {
            names.push(name);
            Ok(false)
        })
        .unwrap();
        assert!(names.windows(2).all(|p| p[0] < p[1]), "{names:?}");
        assert_eq!(names.len(), 17, "{names:?}");
    }

    fn field_names(body: &[u8]) -> Vec<&str> {
        let mut names = Vec::new();
        each_field(&mut Reader::new(body), |name, _| {
            names.push(name);
            Ok(false)
        })
        .unwrap();
        names
    }

    #[test]
    fn auth_methods_binding_rules_and_logins_travel_as_consuls_structs() {
        let method = AuthMethod {
            name: Arc::from("ci"),
            method_type: "jwt".into(),
            display_name: "CI".into(),
            description: "d".into(),
            max_token_ttl_ns: 600_000_000_000,
            token_locality: "global".into(),
            config_json: r#"{"BoundAudiences":["a"],"ClockSkewLeeway":-1,"Ratio":0.5}"#.into(),
            create_index: 3,
            modify_index: 4,
        };
        for stub in [false, true] {
            let mut w = Writer::new();
            write_auth_method(&mut w, &method, stub);
            let body = w.into_inner();
            let names = field_names(&body);
            assert!(names.windows(2).all(|p| p[0] < p[1]), "{names:?}");
            assert_eq!(names.contains(&"Config"), !stub);
            let back = read_auth_method(&mut Reader::new(&body)).unwrap();
            let config: serde_json::Value = serde_json::from_str(&back.config_json).unwrap();
            let expected: serde_json::Value = if stub {
                serde_json::json!({})
            } else {
                serde_json::from_str(&method.config_json).unwrap()
            };
            assert_eq!(config, expected);
            assert_eq!(
                AuthMethod {
                    config_json: method.config_json.clone(),
                    ..back
                },
                method
            );
        }
        let rule = BindingRule {
            id: Arc::from("r1"),
            description: String::new(),
            auth_method: Arc::from("ci"),
            selector: "value.name == \"x\"".into(),
            bind_type: "templated-policy".into(),
            bind_name: "builtin/service".into(),
            bind_vars_name: Some("${value.name}".into()),
            create_index: 5,
            modify_index: 6,
        };
        let mut w = Writer::new();
        write_binding_rule(&mut w, &rule);
        let body = w.into_inner();
        let names = field_names(&body);
        assert!(names.windows(2).all(|p| p[0] < p[1]), "{names:?}");
        assert_eq!(read_binding_rule(&mut Reader::new(&body)).unwrap(), rule);

        // A set request writes the object before `Datacenter` (`AuthMethod` < `Datacenter`)
        // and a delete names the object by its own ID field.
        let set = SetRequest {
            datacenter: "dc1",
            object: &[],
            create: false,
            token: "t",
        }
        .encode(Object::BindingRule, |w| write_binding_rule(w, &rule));
        assert_eq!(field_names(&set), ["BindingRule", "Datacenter", "Token"]);
        let decoded = SetRequest::decode(Object::BindingRule, &set).unwrap();
        assert_eq!(
            read_binding_rule(&mut Reader::new(decoded.object)).unwrap(),
            rule
        );
        let delete = DeleteRequest {
            datacenter: "",
            id: "ci",
            token: "t",
        }
        .encode(Object::AuthMethod);
        assert_eq!(
            field_names(&delete),
            ["AuthMethodName", "Datacenter", "Token"]
        );
        assert_eq!(
            DeleteRequest::decode(Object::AuthMethod, &delete)
                .unwrap()
                .id,
            "ci"
        );
        let get = GetRequest {
            id: "r1",
            ..GetRequest::default()
        }
        .encode(Object::BindingRule);
        let names = field_names(&get);
        assert!(names.windows(2).all(|p| p[0] < p[1]), "{names:?}");
        assert_eq!(
            GetRequest::decode(Object::BindingRule, &get).unwrap().id,
            "r1"
        );

        let login = LoginRequest {
            datacenter: "dc1",
            auth_method: "ci",
            bearer_token: "a.b.c",
            meta: vec![("run", "7")],
            token: "",
        };
        assert_eq!(LoginRequest::decode(&login.encode()).unwrap(), login);
        let logout = LogoutRequest {
            datacenter: "",
            token: "secret",
        };
        assert_eq!(LogoutRequest::decode(&logout.encode()).unwrap(), logout);
        let bootstrap = BootstrapRequest {
            bootstrap_secret: "s",
            ..BootstrapRequest::default()
        };
        assert_eq!(
            BootstrapRequest::decode(&bootstrap.encode()).unwrap(),
            bootstrap
        );
        // What older agents send, a `DCSpecificRequest`, is a bootstrap with a new secret.
        let older = crate::consul::rpc::catalog::DcSpecificRequest::default().encode();
        assert_eq!(
            BootstrapRequest::decode(&older).unwrap().bootstrap_secret,
            ""
        );
    }
}
