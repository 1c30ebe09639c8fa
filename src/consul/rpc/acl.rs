//! ACL resolution: `ACL.TokenRead` (`ACLTokenGetRequest`) and its `ACLTokenResponse`, with
//! the token as Consul's `ACLToken` (policy and role links named, times in Go's binary
//! form) and, for an `Expanded` read, Consul's `ExpandedTokenInfo` (the token's policies,
//! synthesized ones included, and its roles). A client agent resolves a request's token
//! with an expanded read by the token's own secret ([`read_resolved_token`]).

use super::{
    each_field, go_time_binary, read_reply, string_list, write_string_list, Fields, QueryMeta,
    QueryOptions,
};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::acl::{NodeIdentity, Policy, Role, ServiceIdentity, Token};
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
fn write_policy(w: &mut Writer, policy: &Policy) {
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
fn write_role(w: &mut Writer, role: &Role, policies: &[(&str, &str)]) {
    let mut f = Fields::new(w, 9);
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

/// `ACLToken`.
pub fn write_token(w: &mut Writer, view: &TokenView) {
    let token = view.token;
    let mut f = Fields::new(w, 15);
    f.field("AccessorID").str(&token.accessor_id);
    f.field("AuthMethod").str(&token.auth_method);
    f.field("CreateIndex").uint(token.create_index);
    f.field("CreateTime")
        .bytes(&go_time_binary(token.create_time_ns));
    f.field("Description").str(&token.description);
    f.field("ExpirationTTL").int(0);
    match token.expiration_time_ns {
        Some(ns) => f.field("ExpirationTime").bytes(&go_time_binary(ns)),
        None => f.field("ExpirationTime").nil(),
    }
    f.field("Hash")
        .opt_bytes((!token.hash.is_empty()).then_some(&token.hash[..]));
    f.field("Local").bool(token.local);
    f.field("ModifyIndex").uint(token.modify_index);
    write_node_identities(f.field("NodeIdentities"), &token.node_identities);
    write_links(f.field("Policies"), &view.policies);
    write_links(f.field("Roles"), &view.roles);
    f.field("SecretID").str(&token.secret_id);
    write_service_identities(f.field("ServiceIdentities"), &token.service_identities);
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
}
