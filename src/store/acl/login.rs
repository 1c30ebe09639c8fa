//! Binding rules: from a verified login identity to the token `/v1/acl/login` creates.
//!
//! Login runs in three steps; this module holds the first and the last, which are pure over
//! a store version:
//! 1. [`super::jwt::verify`] checks the bearer token and maps its claims to an
//!    [`Identity`];
//! 2. the serving layer keeps the method's binding rules whose `Selector` matches
//!    [`Identity::selectable`] (a bexpr, evaluated by the HTTP layer's filter with the
//!    `BINDING_RULE_SELECTOR` schema; an empty selector matches every login);
//! 3. [`bind`] turns the matching rules into a [`TokenWrite`]: `BindName`s interpolated with
//!    `${value.x}` (values lowercased, as Consul does), roles and policies looked up by name,
//!    identities and templated policies checked as Consul checks them.

use super::apply::{LinkRef, TokenWrite};
use super::builtin;
use super::jwt::Identity;
use super::{
    policy_by_name, role_by_name, AuthMethod, BindingRule, NodeIdentity, ServiceIdentity,
    TemplatedPolicy,
};
use crate::store::Tables;
use std::collections::BTreeMap;

/// Longest `BindName` after interpolation, in bytes.
pub const BIND_NAME_BYTES_MAX: usize = 1024;

/// The bind types Consul knows.
const BIND_TYPES: [&str; 5] = ["service", "node", "role", "policy", "templated-policy"];

/// Interpolates `${name}` references (HIL's variable syntax; `$${` is a literal `${`).
/// Values are lowercased, as Consul's login does. An unknown variable is an error.
pub fn interpolate(template: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    if !template.contains("${") {
        return Ok(template.to_string());
    }
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('$') {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        if let Some(escaped) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = escaped;
        } else if let Some(inner) = after.strip_prefix("${") {
            let end = inner
                .find('}')
                .ok_or_else(|| "parse error: unterminated interpolation \"${\"".to_string())?;
            let name = inner[..end].trim();
            let valid = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
            if !valid {
                return Err(format!(
                    "parse error: invalid interpolation {}",
                    super::rules::go_quote(&inner[..end])
                ));
            }
            let value = vars
                .get(name)
                .ok_or_else(|| format!("unknown variable accessed: {name}"))?;
            out.push_str(&value.to_lowercase());
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
        if out.len() > BIND_NAME_BYTES_MAX {
            return Err(format!("bind name exceeds {BIND_NAME_BYTES_MAX} bytes"));
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn is_valid_role_or_policy_name(name: &str) -> bool {
    (1..=256).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What one matching rule binds.
enum Bound {
    Service(String),
    Node(String),
    Role(String),
    Policy(String),
    Templated(TemplatedPolicy),
}

/// Computes a rule's binding with `vars` (Consul's `computeBindNameAndVars`).
fn compute(
    bind_type: &str,
    bind_name: &str,
    bind_vars_name: Option<&str>,
    vars: &BTreeMap<String, String>,
) -> Result<Bound, String> {
    let name = interpolate(bind_name, vars).map_err(|e| {
        format!("cannot compute {bind_type:?} bind name for bind target: error interpreting template: {e}")
    })?;
    let invalid =
        || format!("computed {bind_type:?} bind name for bind target is invalid: {name:?}");
    Ok(match bind_type {
        "service" if builtin::is_valid_identity_name(&name) => Bound::Service(name),
        "node" if builtin::is_valid_identity_name(&name) => Bound::Node(name),
        "role" if is_valid_role_or_policy_name(&name) => Bound::Role(name),
        "policy" if is_valid_role_or_policy_name(&name) => Bound::Policy(name),
        "service" | "node" | "role" | "policy" => return Err(invalid()),
        "templated-policy" => {
            let base = builtin::templated_policy(&name).ok_or_else(|| {
                format!("Bind name for templated-policy bind type does not match existing template name: {name}")
            })?;
            let variable =
                match bind_vars_name.filter(|v| !v.is_empty()) {
                    Some(template) => Some(interpolate(template, vars).map_err(|e| {
                        format!("failed to interpret templated policy variables: {e}")
                    })?),
                    None => None,
                };
            builtin::render_templated_policy(base, variable.as_deref())
                .map_err(|e| format!("templated policy failed validation. Error: {e}"))?;
            Bound::Templated(TemplatedPolicy {
                template_name: name,
                name: variable.filter(|_| base.requires_name),
                datacenters: Vec::new(),
            })
        }
        other => return Err(format!("unknown binding rule bind type: {other}")),
    })
}

/// Consul's binding rule validation at write time: the type is known and the name computes
/// to a valid target with every variable the method can project set to `fake`.
pub fn validate_binding(
    bind_type: &str,
    bind_name: &str,
    bind_vars_name: Option<&str>,
    available: &[String],
) -> Result<(), String> {
    if !BIND_TYPES.contains(&bind_type) {
        return Err(format!(
            "Invalid Binding Rule: unknown BindType {}",
            super::rules::go_quote(bind_type)
        ));
    }
    let fake: BTreeMap<String, String> = available
        .iter()
        .map(|v| (v.clone(), "fake".to_string()))
        .collect();
    match compute(bind_type, bind_name, bind_vars_name, &fake) {
        Ok(_) => Ok(()),
        Err(e) if e.starts_with("computed") => {
            Err("Invalid Binding Rule: invalid BindName".to_string())
        }
        Err(e) => Err(format!("Invalid Binding Rule: invalid BindName: {e}")),
    }
}

/// Everything a login needs besides the store version and the matched rules.
pub struct LoginRequest<'a> {
    pub method: &'a AuthMethod,
    pub identity: &'a Identity,
    /// This server's datacenter, for node identities.
    pub datacenter: &'a str,
    pub accessor_id: String,
    pub secret_id: String,
    pub now_unix_ns: i64,
    /// `Meta` of the login request, appended to the description as JSON.
    pub meta: &'a BTreeMap<String, String>,
}

/// Turns the binding rules that matched a login into the token to create. A login that
/// binds nothing is refused with Consul's `Permission denied`.
pub fn bind(
    tables: &Tables,
    matched: &[&BindingRule],
    request: &LoginRequest<'_>,
) -> Result<TokenWrite, String> {
    let vars = request.identity.projected_vars();
    let mut write = TokenWrite {
        accessor_id: request.accessor_id.clone(),
        secret_id: request.secret_id.clone(),
        description: "token created via login".to_string(),
        local: request.method.token_locality != "global",
        auth_method: request.method.name.to_string(),
        expiration_ttl_ns: request.method.max_token_ttl_ns,
        now_unix_ns: request.now_unix_ns,
        create: true,
        from_login: true,
        ..TokenWrite::default()
    };
    if !request.meta.is_empty() {
        let meta = serde_json::to_string(request.meta).expect("a string map encodes");
        write.description.push_str(": ");
        write.description.push_str(&meta);
    }
    for rule in matched {
        debug_assert!(rule.auth_method.eq_ignore_ascii_case(&request.method.name));
        match compute(
            &rule.bind_type,
            &rule.bind_name,
            rule.bind_vars_name.as_deref(),
            &vars,
        )? {
            Bound::Service(name) => write.service_identities.push(ServiceIdentity {
                service_name: name,
                datacenters: Vec::new(),
            }),
            Bound::Node(name) => write.node_identities.push(NodeIdentity {
                node_name: name,
                datacenter: request.datacenter.to_string(),
            }),
            // A role or policy that does not exist is skipped, as in Consul.
            Bound::Role(name) => {
                if let Some(role) = role_by_name(tables, &name) {
                    write.roles.push(LinkRef {
                        id: role.id.to_string(),
                        name: String::new(),
                    });
                }
            }
            Bound::Policy(name) => {
                if let Some(policy) = policy_by_name(tables, &name) {
                    write.policies.push(LinkRef {
                        id: policy.id.to_string(),
                        name: String::new(),
                    });
                }
            }
            Bound::Templated(templated) => write.templated_policies.push(templated),
        }
    }
    let binds_nothing = write.service_identities.is_empty()
        && write.node_identities.is_empty()
        && write.roles.is_empty()
        && write.policies.is_empty()
        && write.templated_policies.is_empty();
    if binds_nothing {
        return Err("Permission denied".to_string());
    }
    Ok(write)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn interpolation_follows_hil() {
        let v = vars(&[("value.name", "Web"), ("value.team", "blue")]);
        assert_eq!(interpolate("svc-${value.name}", &v).unwrap(), "svc-web");
        assert_eq!(
            interpolate("${value.team}-${ value.name }", &v).unwrap(),
            "blue-web"
        );
        assert_eq!(interpolate("plain", &v).unwrap(), "plain");
        assert_eq!(interpolate("$${literal}", &v).unwrap(), "${literal}");
        assert_eq!(interpolate("a$b", &v).unwrap(), "a$b");
        assert_eq!(
            interpolate("${value.nope}", &v).unwrap_err(),
            "unknown variable accessed: value.nope"
        );
        assert!(interpolate("${value.name", &v)
            .unwrap_err()
            .contains("unterminated"));
        assert!(interpolate("${a+b}", &v).unwrap_err().contains("invalid"));
        let long = vars(&[("value.x", &"y".repeat(2000))]);
        assert!(interpolate("${value.x}", &long).is_err());
    }

    #[test]
    fn bindings_are_validated_when_written() {
        let available = vec!["value.name".to_string()];
        assert!(validate_binding("service", "${value.name}", None, &available).is_ok());
        assert!(validate_binding("role", "admins", None, &available).is_ok());
        assert!(validate_binding(
            "templated-policy",
            "builtin/service",
            Some("${value.name}"),
            &available
        )
        .is_ok());
        assert_eq!(
            validate_binding("bogus", "x", None, &available).unwrap_err(),
            "Invalid Binding Rule: unknown BindType \"bogus\""
        );
        assert_eq!(
            validate_binding("service", "Bad Name", None, &available).unwrap_err(),
            "Invalid Binding Rule: invalid BindName"
        );
        assert!(
            validate_binding("service", "${value.other}", None, &available)
                .unwrap_err()
                .contains("unknown variable accessed: value.other")
        );
        assert!(
            validate_binding("templated-policy", "builtin/nope", None, &available)
                .unwrap_err()
                .contains("does not match existing template name")
        );
        assert!(
            validate_binding("templated-policy", "builtin/service", None, &available)
                .unwrap_err()
                .contains("name is required")
        );
    }
}
