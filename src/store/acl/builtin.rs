//! Consul's built-in ACL objects: the reserved IDs, the `global-management` and
//! `builtin/global-read-only` policies, the anonymous token, the rules synthesized for
//! service and node identities, and the builtin templated policies with their variables.
//!
//! The rule texts are Consul's (community edition) so that `/v1/acl/policy` shows what an
//! operator of Consul expects, and identities grant exactly what they grant in Consul.

/// IDs whose first 30 characters are these are reserved for builtins.
pub const RESERVED_ID_PREFIX: &str = "00000000-0000-0000-0000-0000000000";

pub const GLOBAL_MANAGEMENT_POLICY_ID: &str = "00000000-0000-0000-0000-000000000001";
pub const GLOBAL_MANAGEMENT_POLICY_NAME: &str = "global-management";
pub const GLOBAL_MANAGEMENT_POLICY_DESCRIPTION: &str =
    "Builtin Policy that grants unlimited access";
pub const GLOBAL_MANAGEMENT_RULES: &str = r#"
acl = "write"
agent_prefix "" {
	policy = "write"
}
event_prefix "" {
	policy = "write"
}
key_prefix "" {
	policy = "write"
}
keyring = "write"
node_prefix "" {
	policy = "write"
}
operator = "write"
mesh = "write"
peering = "write"
query_prefix "" {
	policy = "write"
}
service_prefix "" {
	policy = "write"
	intentions = "write"
}
session_prefix "" {
	policy = "write"
}"#;

pub const GLOBAL_READ_ONLY_POLICY_ID: &str = "00000000-0000-0000-0000-000000000002";
pub const GLOBAL_READ_ONLY_POLICY_NAME: &str = "builtin/global-read-only";
pub const GLOBAL_READ_ONLY_POLICY_DESCRIPTION: &str =
    "Builtin Policy that grants unlimited read-only access to all components";
pub const GLOBAL_READ_ONLY_RULES: &str = r#"
acl = "read"
agent_prefix "" {
	policy = "read"
}
event_prefix "" {
	policy = "read"
}
key_prefix "" {
	policy = "read"
}
keyring = "read"
node_prefix "" {
	policy = "read"
}
operator = "read"
mesh = "read"
peering = "read"
query_prefix "" {
	policy = "read"
}
service_prefix "" {
	policy = "read"
	intentions = "read"
}
session_prefix "" {
	policy = "read"
}"#;

/// A builtin policy row's fixed content.
pub struct BuiltinPolicy {
    pub id: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub rules: &'static str,
}

pub const BUILTIN_POLICIES: [BuiltinPolicy; 2] = [
    BuiltinPolicy {
        id: GLOBAL_MANAGEMENT_POLICY_ID,
        name: GLOBAL_MANAGEMENT_POLICY_NAME,
        description: GLOBAL_MANAGEMENT_POLICY_DESCRIPTION,
        rules: GLOBAL_MANAGEMENT_RULES,
    },
    BuiltinPolicy {
        id: GLOBAL_READ_ONLY_POLICY_ID,
        name: GLOBAL_READ_ONLY_POLICY_NAME,
        description: GLOBAL_READ_ONLY_POLICY_DESCRIPTION,
        rules: GLOBAL_READ_ONLY_RULES,
    },
];

/// The anonymous token: used for requests that carry no token.
pub const ANONYMOUS_TOKEN_ACCESSOR_ID: &str = "00000000-0000-0000-0000-000000000002";
pub const ANONYMOUS_TOKEN_SECRET_ID: &str = "anonymous";
pub const ANONYMOUS_TOKEN_DESCRIPTION: &str = "Anonymous Token";

/// Description of the token `/v1/acl/bootstrap` creates.
pub const BOOTSTRAP_TOKEN_DESCRIPTION: &str = "Bootstrap Token (Global Management)";
/// Description of the token created from `acl.tokens.initial_management`.
pub const INITIAL_MANAGEMENT_TOKEN_DESCRIPTION: &str = "Initial Management Token";

/// The rules Consul synthesizes for a service identity.
pub fn service_identity_rules(service: &str) -> String {
    format!(
        r#"
service "{service}" {{
	policy = "write"
}}
service "{service}-sidecar-proxy" {{
	policy = "write"
}}
service_prefix "" {{
	policy = "read"
}}
node_prefix "" {{
	policy = "read"
}}"#
    )
}

/// The rules Consul synthesizes for a node identity.
pub fn node_identity_rules(node: &str) -> String {
    format!(
        r#"
node "{node}" {{
	policy = "write"
}}
service_prefix "" {{
	policy = "read"
}}"#
    )
}

/// A builtin templated policy: Consul's name, reserved ID, whether it takes the `name`
/// variable, and its rules with `{{.Name}}` where the variable goes.
pub struct TemplatedPolicyBase {
    pub name: &'static str,
    pub id: &'static str,
    pub description: &'static str,
    /// `true` when `TemplateVariables.name` is required (Consul's JSON schema).
    pub requires_name: bool,
    pub template: &'static str,
}

pub const TEMPLATED_POLICIES: [TemplatedPolicyBase; 6] = [
    TemplatedPolicyBase {
        name: "builtin/service",
        id: "00000000-0000-0000-0000-000000000003",
        description: "Gives the token or role permissions to register a service and discover services in the Consul catalog. It also gives the specified service's sidecar proxy the permission to discover and route traffic to other services.",
        requires_name: true,
        template: "\nservice \"{{.Name}}\" {\n\tpolicy = \"write\"\n}\nservice \"{{.Name}}-sidecar-proxy\" {\n\tpolicy = \"write\"\n}\nservice_prefix \"\" {\n\tpolicy = \"read\"\n}\nnode_prefix \"\" {\n\tpolicy = \"read\"\n}",
    },
    TemplatedPolicyBase {
        name: "builtin/node",
        id: "00000000-0000-0000-0000-000000000004",
        description: "Gives the token or role permissions for a register an agent/node into the catalog. A node is typically a consul agent but can also be a physical server, cloud instance or a container.",
        requires_name: true,
        template: "\nnode \"{{.Name}}\" {\n\tpolicy = \"write\"\n}\nservice_prefix \"\" {\n\tpolicy = \"read\"\n}",
    },
    TemplatedPolicyBase {
        name: "builtin/dns",
        id: "00000000-0000-0000-0000-000000000005",
        description: "Gives the token or role permissions for the Consul DNS to query services in the network.",
        requires_name: false,
        template: "\nnode_prefix \"\" {\n\tpolicy = \"read\"\n}\nservice_prefix \"\" {\n\tpolicy = \"read\"\n}\nquery_prefix \"\" {\n\tpolicy = \"read\"\n}",
    },
    TemplatedPolicyBase {
        name: "builtin/nomad-server",
        id: "00000000-0000-0000-0000-000000000006",
        description: "Gives the token or role permissions required for integration with a nomad server.",
        requires_name: false,
        template: "\nacl = \"write\"\nagent_prefix \"\" {\n  policy = \"read\"\n}\nnode_prefix \"\" {\n  policy = \"read\"\n}\nservice_prefix \"\" {\n  policy = \"write\"\n}",
    },
    // ID 7 was the workload identity template, which Consul 1.22 no longer has.
    TemplatedPolicyBase {
        name: "builtin/api-gateway",
        id: "00000000-0000-0000-0000-000000000008",
        description: "Gives the token or role permissions for a Consul api gateway",
        requires_name: true,
        template: "mesh = \"read\"\nnode_prefix \"\" {\n\tpolicy = \"read\"\n}\nservice_prefix \"\" {\n\tpolicy = \"read\"\n}\nservice \"{{.Name}}\" {\n\tpolicy = \"write\"\n}",
    },
    TemplatedPolicyBase {
        name: "builtin/nomad-client",
        id: "00000000-0000-0000-0000-000000000009",
        description: "Gives the token or role permissions required for integration with a nomad client.",
        requires_name: false,
        template: "agent_prefix \"\" {\n  policy = \"read\"\n}\nnode_prefix \"\" {\n  policy = \"read\"\n}\nservice_prefix \"\" {\n  policy = \"write\"\n}\nkey_prefix \"\" {\n  policy = \"read\"\n}",
    },
];

/// FNV-1a 128's offset basis: the sum of nothing, which Go's `hasher.Sum(b)` appends to `b`.
const FNV128A_EMPTY_SUM: &str = "6c62272e07bb014262b821756295c58d";

/// The ID Consul gives the synthetic policy of a rendered template: its
/// `fmt.Sprintf("%x", fnv.New128a().Sum([]byte(rules)))` hashes nothing and appends the
/// empty sum to the rules, so the ID is the rules in hex followed by that sum.
pub fn synthetic_policy_id(rules: &str) -> String {
    let mut id = String::with_capacity(rules.len() * 2 + FNV128A_EMPTY_SUM.len());
    for byte in rules.bytes() {
        id.push_str(&format!("{byte:02x}"));
    }
    id.push_str(FNV128A_EMPTY_SUM);
    id
}

/// The builtin templated policy named `name`.
pub fn templated_policy(name: &str) -> Option<&'static TemplatedPolicyBase> {
    TEMPLATED_POLICIES.iter().find(|t| t.name == name)
}

/// Longest service or node identity name (Consul: 256).
pub const IDENTITY_NAME_BYTES_MAX: usize = 256;

/// Consul's `IsValidServiceIdentityName` / `IsValidNodeIdentityName`: lowercase letters,
/// digits, `-` and `_`, starting and ending with a letter or digit.
pub fn is_valid_identity_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'_';
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= IDENTITY_NAME_BYTES_MAX
        && bytes.iter().all(inner)
        && edge(&bytes[0])
        && edge(&bytes[bytes.len() - 1])
}

/// Renders a templated policy's rules, after validating its variables as Consul's schema
/// does. The errors are Consul's.
pub fn render_templated_policy(
    base: &TemplatedPolicyBase,
    name_variable: Option<&str>,
) -> Result<String, String> {
    if base.requires_name {
        let name = name_variable.unwrap_or("");
        if name.is_empty() {
            return Err("name: name is required".to_string());
        }
        if !is_valid_identity_name(name) {
            let kind = if base.name == "builtin/node" {
                "node"
            } else {
                "service"
            };
            return Err(format!(
                "{kind} identity {} has an invalid name. Only lowercase alphanumeric characters, '-' and '_' are allowed",
                super::rules::go_quote(name)
            ));
        }
        return Ok(base.template.replace("{{.Name}}", name));
    }
    Ok(base.template.to_string())
}

/// Whether `id` is in the reserved builtin range.
pub fn is_reserved_id(id: &str) -> bool {
    id.starts_with(RESERVED_ID_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::acl::rules::parse;

    #[test]
    fn every_builtin_text_parses() {
        for policy in BUILTIN_POLICIES {
            let rules = parse(policy.rules).unwrap();
            assert!(!rules.is_empty(), "{}", policy.name);
            assert!(is_reserved_id(policy.id));
        }
        for base in TEMPLATED_POLICIES {
            let text = render_templated_policy(&base, Some("web")).unwrap();
            assert!(!parse(&text).unwrap().is_empty(), "{}", base.name);
        }
        assert_eq!(
            parse(&service_identity_rules("web"))
                .unwrap()
                .segments
                .len(),
            4
        );
        assert_eq!(parse(&node_identity_rules("n1")).unwrap().segments.len(), 2);
    }

    #[test]
    fn templated_policies_render_their_variables() {
        let service = templated_policy("builtin/service").unwrap();
        let text = render_templated_policy(service, Some("api")).unwrap();
        assert!(text.contains("service \"api\" {"));
        assert!(text.contains("service \"api-sidecar-proxy\" {"));
        assert_eq!(text, service_identity_rules("api"));
        assert_eq!(
            render_templated_policy(templated_policy("builtin/node").unwrap(), Some("n1")).unwrap(),
            node_identity_rules("n1")
        );
        let dns = templated_policy("builtin/dns").unwrap();
        assert!(!dns.requires_name);
        assert!(render_templated_policy(dns, None)
            .unwrap()
            .contains("query_prefix"));
        assert_eq!(
            render_templated_policy(service, None).unwrap_err(),
            "name: name is required"
        );
        assert_eq!(
            render_templated_policy(service, Some("Web")).unwrap_err(),
            "service identity \"Web\" has an invalid name. Only lowercase alphanumeric characters, '-' and '_' are allowed"
        );
        assert!(templated_policy("builtin/nope").is_none());
    }

    #[test]
    fn identity_names_follow_consul() {
        for good in ["web", "a", "web-1", "w_b", "0db"] {
            assert!(is_valid_identity_name(good), "{good}");
        }
        for bad in ["", "Web", "-web", "web-", "we b", "wéb", &"a".repeat(257)] {
            assert!(!is_valid_identity_name(bad), "{bad}");
        }
    }
}
