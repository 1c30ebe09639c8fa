//! The ACL rule language: a policy's `Rules` text (HCL or JSON) decoded into [`PolicyRules`].
//!
//! Parsing has two stages so that the syntax can change without touching the semantics:
//! [`hcl_to_tree`] and [`json_to_tree`] turn text into one generic [`RuleValue`] tree (ordered
//! key/value pairs, duplicates kept), and [`decode_tree`] turns that tree into rules with
//! Consul's validation and error texts. HCL goes through `proto::hcl`, the HCL1 reader the
//! config loader uses. Text that starts with `{` is JSON, as Consul's HCL decoder decides.
//!
//! The grammar Consul accepts, and so this module:
//!
//! ```text
//! acl | keyring | operator | mesh | peering = "<access>"
//! <kind> "<name>" { policy = "<access>" [intentions = "<access>"] }
//!     kind: key key_prefix service service_prefix node node_prefix session session_prefix
//!           event event_prefix query query_prefix agent agent_prefix
//! access: read | write | deny, and list for key rules only (case-insensitive)
//! ```
//!
//! Keys Consul's decoder ignores (enterprise sections, `sentinel` blocks) are ignored here too
//! and reported in [`PolicyRules::ignored`] so the caller can warn about them.
//!
//! Limits, checked before and during decoding so that hostile text costs bounded time and
//! memory: [`RULES_BYTES_MAX`], [`RULES_NESTING_DEPTH_MAX`], [`RULES_COUNT_MAX`],
//! [`RULE_NAME_BYTES_MAX`], [`RULES_IGNORED_KEYS_MAX`].

use serde::{Deserialize, Serialize};

/// Longest rules text accepted, in bytes.
pub const RULES_BYTES_MAX: usize = 128 * 1024;
/// Deepest nesting of `{`/`[`/`(` accepted. A rule needs three levels; the margin covers JSON
/// lists of rule objects.
pub const RULES_NESTING_DEPTH_MAX: usize = 16;
/// Most rules (segment rules plus global ones) one policy may hold.
pub const RULES_COUNT_MAX: usize = 4096;
/// Longest segment name a rule may name (a KV key prefix, a service name, …), in bytes; the
/// same bound as a KV key.
pub const RULE_NAME_BYTES_MAX: usize = 16 * 1024;
/// Most ignored keys remembered for the caller's warning.
pub const RULES_IGNORED_KEYS_MAX: usize = 16;

/// An access level a rule grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Access {
    Deny,
    Read,
    List,
    Write,
}

impl Access {
    /// Parses Consul's access level names, ignoring case as Consul does.
    pub fn parse(text: &str) -> Option<Access> {
        match text.to_ascii_lowercase().as_str() {
            "deny" => Some(Access::Deny),
            "read" => Some(Access::Read),
            "list" => Some(Access::List),
            "write" => Some(Access::Write),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Access::Deny => "deny",
            Access::Read => "read",
            Access::List => "list",
            Access::Write => "write",
        }
    }

    /// Rank used when two policies name the same segment: deny beats write beats list beats
    /// read (Consul's `takesPrecedenceOver`).
    fn precedence(self) -> u8 {
        match self {
            Access::Read => 1,
            Access::List => 2,
            Access::Write => 3,
            Access::Deny => 4,
        }
    }

    /// Whether `self` replaces `other` when both name the same segment.
    pub fn takes_precedence_over(self, other: Option<Access>) -> bool {
        other.is_none_or(|other| self.precedence() > other.precedence())
    }
}

/// The kinds of rule that name a segment (a key, a service, a node, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(u8)]
pub enum SegmentKind {
    Agent = 0,
    Key = 1,
    Node = 2,
    Service = 3,
    Session = 4,
    Event = 5,
    Query = 6,
}

impl SegmentKind {
    /// Every kind, in the order Consul validates them.
    pub const ALL: [SegmentKind; 7] = [
        SegmentKind::Agent,
        SegmentKind::Key,
        SegmentKind::Node,
        SegmentKind::Service,
        SegmentKind::Session,
        SegmentKind::Event,
        SegmentKind::Query,
    ];

    /// The rule keyword, `key` or `key_prefix`.
    pub fn keyword(self, prefix: bool) -> &'static str {
        match (self, prefix) {
            (SegmentKind::Agent, false) => "agent",
            (SegmentKind::Agent, true) => "agent_prefix",
            (SegmentKind::Key, false) => "key",
            (SegmentKind::Key, true) => "key_prefix",
            (SegmentKind::Node, false) => "node",
            (SegmentKind::Node, true) => "node_prefix",
            (SegmentKind::Service, false) => "service",
            (SegmentKind::Service, true) => "service_prefix",
            (SegmentKind::Session, false) => "session",
            (SegmentKind::Session, true) => "session_prefix",
            (SegmentKind::Event, false) => "event",
            (SegmentKind::Event, true) => "event_prefix",
            (SegmentKind::Query, false) => "query",
            (SegmentKind::Query, true) => "query_prefix",
        }
    }

    fn from_keyword(word: &str) -> Option<(SegmentKind, bool)> {
        SegmentKind::ALL.iter().find_map(|kind| {
            [false, true]
                .into_iter()
                .find(|prefix| kind.keyword(*prefix) == word)
                .map(|prefix| (*kind, prefix))
        })
    }
}

/// One segment rule: `key_prefix "app/" { policy = "write" }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentRule {
    pub kind: SegmentKind,
    /// `true` for the `_prefix` form.
    pub prefix: bool,
    pub name: String,
    pub access: Access,
    /// Service rules only: the access to intentions whose destination this names; `None`
    /// derives it from `access` when the authorizer is compiled.
    pub intentions: Option<Access>,
}

/// The resources governed by one access level and no segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum GlobalKind {
    Acl = 0,
    Keyring = 1,
    Operator = 2,
    Mesh = 3,
    Peering = 4,
}

impl GlobalKind {
    /// Every kind, in the order Consul validates them.
    pub const ALL: [GlobalKind; 5] = [
        GlobalKind::Acl,
        GlobalKind::Keyring,
        GlobalKind::Operator,
        GlobalKind::Mesh,
        GlobalKind::Peering,
    ];

    pub fn keyword(self) -> &'static str {
        match self {
            GlobalKind::Acl => "acl",
            GlobalKind::Keyring => "keyring",
            GlobalKind::Operator => "operator",
            GlobalKind::Mesh => "mesh",
            GlobalKind::Peering => "peering",
        }
    }
}

/// A decoded, validated policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRules {
    pub segments: Vec<SegmentRule>,
    /// Indexed by [`GlobalKind`]; `None` where the policy says nothing.
    pub globals: [Option<Access>; 5],
    /// Keys Consul's decoder would ignore, for a warning (at most [`RULES_IGNORED_KEYS_MAX`]).
    pub ignored: Vec<String>,
}

impl PolicyRules {
    pub fn global(&self, kind: GlobalKind) -> Option<Access> {
        self.globals[kind as usize]
    }

    /// Number of rules, global ones included.
    pub fn len(&self) -> usize {
        self.segments.len() + self.globals.iter().flatten().count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A generic value tree: what both HCL and JSON rules text become before decoding. Objects
/// keep their pairs in order and keep duplicates, since HCL allows repeating a block.
#[derive(Clone, Debug, PartialEq)]
pub enum RuleValue {
    Null,
    Bool(bool),
    Number(f64),
    Str(String),
    List(Vec<RuleValue>),
    Object(Vec<(String, RuleValue)>),
}

impl RuleValue {
    fn type_name(&self) -> &'static str {
        match self {
            RuleValue::Null => "null",
            RuleValue::Bool(_) => "bool",
            RuleValue::Number(_) => "number",
            RuleValue::Str(_) => "string",
            RuleValue::List(_) => "list",
            RuleValue::Object(_) => "object",
        }
    }
}

/// Parses and validates a policy's rules text; empty text is an empty policy.
pub fn parse(text: &str) -> Result<PolicyRules, String> {
    if text.trim().is_empty() {
        return Ok(PolicyRules::default());
    }
    let tree = if text.trim_start().starts_with('{') {
        json_to_tree(text)?
    } else {
        hcl_to_tree(text)?
    };
    decode_tree(&tree)
}

/// Refuses text too long or too deeply nested to hand to a parser: the HCL reader and serde_json
/// recurse per nesting level, so depth is bounded before they see the text. Brackets inside
/// double-quoted strings and comments do not count.
fn check_shape(text: &str) -> Result<(), String> {
    if text.len() > RULES_BYTES_MAX {
        return Err(format!(
            "Failed to parse ACL rules: rules exceed {RULES_BYTES_MAX} bytes"
        ));
    }
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < bytes.len() && !(bytes[i] == b'*' && bytes[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            b'{' | b'[' | b'(' => {
                depth += 1;
                if depth > RULES_NESTING_DEPTH_MAX {
                    return Err(format!(
                        "Failed to parse ACL rules: nesting deeper than {RULES_NESTING_DEPTH_MAX} levels"
                    ));
                }
            }
            b'}' | b']' | b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// HCL rules text → value tree, through the HCL1 parser the config loader uses (Consul
/// parses rules with HCL1 too): `kind "name" { … }` blocks become `kind = { name = { … } }`,
/// the shape JSON rules spell.
pub fn hcl_to_tree(text: &str) -> Result<RuleValue, String> {
    check_shape(text)?;
    let body = crate::proto::hcl::parse_keeping_repeats(text)
        .map_err(|e| format!("Failed to parse ACL rules: {e}"))?;
    json_value(&serde_json::Value::Object(body), 0)
}

/// JSON rules text → value tree.
pub fn json_to_tree(text: &str) -> Result<RuleValue, String> {
    check_shape(text)?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("Failed to parse ACL rules: {e}"))?;
    json_value(&value, 0)
}

fn json_value(value: &serde_json::Value, depth: usize) -> Result<RuleValue, String> {
    if depth > RULES_NESTING_DEPTH_MAX {
        return Err(too_deep());
    }
    Ok(match value {
        serde_json::Value::Null => RuleValue::Null,
        serde_json::Value::Bool(b) => RuleValue::Bool(*b),
        serde_json::Value::Number(n) => RuleValue::Number(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => RuleValue::Str(s.clone()),
        serde_json::Value::Array(items) => RuleValue::List(
            items
                .iter()
                .map(|item| json_value(item, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        serde_json::Value::Object(map) => RuleValue::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), json_value(v, depth + 1)?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}

fn too_deep() -> String {
    format!("Failed to parse ACL rules: nesting deeper than {RULES_NESTING_DEPTH_MAX} levels")
}

/// A rule as decoded, before validation: the access text is kept so that an invalid one
/// can be quoted back exactly as Consul quotes it.
struct RawRule {
    kind: SegmentKind,
    prefix: bool,
    name: String,
    policy: String,
    intentions: String,
}

/// Decodes a value tree into validated rules.
pub fn decode_tree(tree: &RuleValue) -> Result<PolicyRules, String> {
    let RuleValue::Object(pairs) = tree else {
        return Err(format!(
            "Failed to parse ACL rules: the top level must be an object, not a {}",
            tree.type_name()
        ));
    };
    let mut raw_rules: Vec<RawRule> = Vec::new();
    let mut globals: [Option<String>; 5] = Default::default();
    let mut ignored = Vec::new();
    for (key, value) in pairs {
        if let Some(global) = GlobalKind::ALL.iter().find(|g| g.keyword() == key) {
            // A repeated global keeps the strongest value, as merging would. HCL hands a
            // repeated global over as a list, like a list literal, so both are refused: a
            // policy that says `acl` twice is an error rather than a guess.
            let text = match value {
                RuleValue::Str(s) => s.clone(),
                other => {
                    return Err(format!(
                        "Failed to parse ACL rules: {key}: expected a string, got a {}",
                        other.type_name()
                    ))
                }
            };
            let slot = &mut globals[*global as usize];
            let stronger = match (Access::parse(&text), slot.as_deref().map(Access::parse)) {
                (Some(new), Some(Some(old))) => new.takes_precedence_over(Some(old)),
                (_, Some(None)) => false,
                _ => true,
            };
            if slot.is_none() || stronger {
                *slot = Some(text);
            }
        } else if let Some((kind, prefix)) = SegmentKind::from_keyword(key) {
            decode_segment_rules(kind, prefix, key, value, &mut raw_rules, &mut ignored)?;
        } else if ignored.len() < RULES_IGNORED_KEYS_MAX {
            ignored.push(key.clone());
        }
        if raw_rules.len() > RULES_COUNT_MAX {
            return Err(format!(
                "Failed to parse ACL rules: more than {RULES_COUNT_MAX} rules"
            ));
        }
    }
    validate(raw_rules, globals, ignored)
}

fn decode_segment_rules(
    kind: SegmentKind,
    prefix: bool,
    key: &str,
    value: &RuleValue,
    out: &mut Vec<RawRule>,
    ignored: &mut Vec<String>,
) -> Result<(), String> {
    match value {
        // JSON may give a list of `{ name: body }` objects.
        RuleValue::List(items) => {
            for item in items {
                decode_segment_rules(kind, prefix, key, item, out, ignored)?;
            }
            Ok(())
        }
        RuleValue::Object(named) => {
            for (name, body) in named {
                if name.len() > RULE_NAME_BYTES_MAX {
                    return Err(format!(
                        "Failed to parse ACL rules: {key} name exceeds {RULE_NAME_BYTES_MAX} bytes"
                    ));
                }
                let mut rule = RawRule {
                    kind,
                    prefix,
                    name: name.clone(),
                    policy: String::new(),
                    intentions: String::new(),
                };
                decode_rule_body(&mut rule, key, body, ignored)?;
                out.push(rule);
                if out.len() > RULES_COUNT_MAX {
                    return Err(format!(
                        "Failed to parse ACL rules: more than {RULES_COUNT_MAX} rules"
                    ));
                }
            }
            Ok(())
        }
        other => Err(format!(
            "Failed to parse ACL rules: {key}: expected a block, got a {}",
            other.type_name()
        )),
    }
}

fn decode_rule_body(
    rule: &mut RawRule,
    key: &str,
    body: &RuleValue,
    ignored: &mut Vec<String>,
) -> Result<(), String> {
    let fields = match body {
        RuleValue::Object(fields) => fields,
        // A list of bodies for one name: later fields win, as HCL1 decoding does.
        RuleValue::List(items) => {
            for item in items {
                decode_rule_body(rule, key, item, ignored)?;
            }
            return Ok(());
        }
        other => {
            return Err(format!(
                "Failed to parse ACL rules: {key} {:?}: expected a block, got a {}",
                rule.name,
                other.type_name()
            ))
        }
    };
    for (field, value) in fields {
        let slot = match field.as_str() {
            "policy" => &mut rule.policy,
            "intentions" if rule.kind == SegmentKind::Service => &mut rule.intentions,
            other => {
                if ignored.len() < RULES_IGNORED_KEYS_MAX {
                    ignored.push(format!("{key}.{other}"));
                }
                continue;
            }
        };
        match value {
            RuleValue::Str(s) => *slot = s.clone(),
            other => {
                return Err(format!(
                    "Failed to parse ACL rules: {key} {:?}: {field}: expected a string, got a {}",
                    rule.name,
                    other.type_name()
                ))
            }
        }
    }
    Ok(())
}

/// Consul's validation, in Consul's order (globals first, then kind by kind), with its
/// error texts: the rule rendered as Go's `%#v` does.
fn validate(
    raw_rules: Vec<RawRule>,
    globals: [Option<String>; 5],
    ignored: Vec<String>,
) -> Result<PolicyRules, String> {
    let mut rules = PolicyRules {
        ignored,
        ..PolicyRules::default()
    };
    // `acl` is checked first; the others after the segment rules, as Consul does.
    let check_global = |kind: GlobalKind, rules: &mut PolicyRules| -> Result<(), String> {
        match globals[kind as usize].as_deref() {
            None | Some("") => Ok(()),
            Some(text) => match Access::parse(text).filter(|a| *a != Access::List) {
                Some(access) => {
                    rules.globals[kind as usize] = Some(access);
                    Ok(())
                }
                None => Err(format!(
                    "Invalid {} policy: {}",
                    kind.keyword(),
                    go_quote(text)
                )),
            },
        }
    };
    check_global(GlobalKind::Acl, &mut rules)?;
    for kind in SegmentKind::ALL {
        for prefix in [false, true] {
            for raw in raw_rules
                .iter()
                .filter(|r| r.kind == kind && r.prefix == prefix)
            {
                let allow_list = kind == SegmentKind::Key;
                let access = Access::parse(&raw.policy)
                    .filter(|a| allow_list || *a != Access::List)
                    .ok_or_else(|| invalid_rule(raw, ""))?;
                let intentions = if raw.intentions.is_empty() {
                    None
                } else {
                    Some(
                        Access::parse(&raw.intentions)
                            .filter(|a| *a != Access::List)
                            .ok_or_else(|| invalid_rule(raw, "intentions "))?,
                    )
                };
                rules.segments.push(SegmentRule {
                    kind,
                    prefix,
                    name: raw.name.clone(),
                    access,
                    intentions,
                });
            }
        }
    }
    for kind in [
        GlobalKind::Keyring,
        GlobalKind::Operator,
        GlobalKind::Mesh,
        GlobalKind::Peering,
    ] {
        check_global(kind, &mut rules)?;
    }
    debug_assert!(rules.segments.len() == raw_rules.len());
    Ok(rules)
}

/// `Invalid key_prefix policy: &acl.KeyRule{Prefix:"a/", Policy:"nope", …}`.
fn invalid_rule(raw: &RawRule, what: &str) -> String {
    let name = go_quote(&raw.name);
    let policy = go_quote(&raw.policy);
    let rendered = match raw.kind {
        SegmentKind::Agent => format!("&acl.AgentRule{{Node:{name}, Policy:{policy}}}"),
        SegmentKind::Key => format!(
            "&acl.KeyRule{{Prefix:{name}, Policy:{policy}, EnterpriseRule:acl.EnterpriseRule{{}}}}"
        ),
        SegmentKind::Node => format!(
            "&acl.NodeRule{{Name:{name}, Policy:{policy}, EnterpriseRule:acl.EnterpriseRule{{}}}}"
        ),
        SegmentKind::Service => format!(
            "&acl.ServiceRule{{Name:{name}, Policy:{policy}, Intentions:{}, EnterpriseRule:acl.EnterpriseRule{{}}}}",
            go_quote(&raw.intentions)
        ),
        SegmentKind::Session => format!("&acl.SessionRule{{Node:{name}, Policy:{policy}}}"),
        SegmentKind::Event => format!("&acl.EventRule{{Event:{name}, Policy:{policy}}}"),
        SegmentKind::Query => format!("&acl.PreparedQueryRule{{Prefix:{name}, Policy:{policy}}}"),
    };
    format!(
        "Invalid {} {what}policy: {rendered}",
        raw.kind.keyword(raw.prefix)
    )
}

/// A string quoted as Go's `%q`/`%#v` quotes it for printable text.
pub fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(kind: SegmentKind, prefix: bool, name: &str, access: Access) -> SegmentRule {
        SegmentRule {
            kind,
            prefix,
            name: name.into(),
            access,
            intentions: None,
        }
    }

    #[test]
    fn hcl_and_json_decode_to_the_same_rules() {
        let hcl = r#"
            # comments are fine
            acl = "read"
            key_prefix "app/" { policy = "write" }
            key "app/secret" { policy = "deny" }
            key_prefix "" { policy = "list" }
            service "web" {
              policy = "write"
              intentions = "read"
            }
            service_prefix "" { policy = "READ" }
            node_prefix "" { policy = "read" }
            session "n1" { policy = "write" }
            event_prefix "deploy" { policy = "write" }
            query_prefix "" { policy = "read" }
            agent "n1" { policy = "read" }
            agent_prefix "" { policy = "deny" }
            keyring = "write"
            operator = "read"
            mesh = "write"
            peering = "deny"
        "#;
        let json = r#"{
            "acl": "read",
            "key_prefix": {"app/": {"policy": "write"}, "": {"policy": "list"}},
            "key": {"app/secret": {"policy": "deny"}},
            "service": {"web": {"policy": "write", "intentions": "read"}},
            "service_prefix": {"": {"policy": "READ"}},
            "node_prefix": [{"": {"policy": "read"}}],
            "session": {"n1": {"policy": "write"}},
            "event_prefix": {"deploy": {"policy": "write"}},
            "query_prefix": {"": {"policy": "read"}},
            "agent": {"n1": {"policy": "read"}},
            "agent_prefix": {"": {"policy": "deny"}},
            "keyring": "write", "operator": "read", "mesh": "write", "peering": "deny"
        }"#;
        let from_hcl = parse(hcl).unwrap();
        let mut from_json = parse(json).unwrap();
        let mut sorted_hcl = from_hcl.clone();
        for rules in [&mut sorted_hcl, &mut from_json] {
            rules
                .segments
                .sort_by(|a, b| (a.kind, a.prefix, &a.name).cmp(&(b.kind, b.prefix, &b.name)));
        }
        assert_eq!(sorted_hcl, from_json);
        assert_eq!(from_hcl.global(GlobalKind::Acl), Some(Access::Read));
        assert_eq!(from_hcl.global(GlobalKind::Peering), Some(Access::Deny));
        assert_eq!(from_hcl.segments.len(), 11);
        assert_eq!(from_hcl.len(), 16);
        assert!(from_hcl
            .segments
            .contains(&rule(SegmentKind::Key, true, "", Access::List)));
        let web = from_hcl
            .segments
            .iter()
            .find(|r| r.kind == SegmentKind::Service && !r.prefix)
            .unwrap();
        assert_eq!(web.intentions, Some(Access::Read));
        assert!(from_hcl.ignored.is_empty());
    }

    #[test]
    fn empty_rules_are_an_empty_policy() {
        for text in ["", "  \n", "{}"] {
            let rules = parse(text).unwrap();
            assert!(rules.is_empty(), "{text:?}");
        }
        // An empty global level means "no rule", as in Consul.
        let rules = parse("keyring = \"\"\noperator = \"\"").unwrap();
        assert!(rules.is_empty());
    }

    #[test]
    fn every_invalid_policy_is_refused_with_consuls_text() {
        let cases = [
            (r#"acl = "list""#, r#"Invalid acl policy: "list""#),
            (
                r#"agent "foo" { policy = "nope" }"#,
                r#"Invalid agent policy: &acl.AgentRule{Node:"foo", Policy:"nope"}"#,
            ),
            (
                r#"agent_prefix "foo" { policy = "nope" }"#,
                r#"Invalid agent_prefix policy: &acl.AgentRule{Node:"foo", Policy:"nope"}"#,
            ),
            (
                r#"key "foo" { policy = "nope" }"#,
                r#"Invalid key policy: &acl.KeyRule{Prefix:"foo", Policy:"nope", EnterpriseRule:acl.EnterpriseRule{}}"#,
            ),
            (
                r#"key_prefix "foo" { policy = "nope" }"#,
                r#"Invalid key_prefix policy: &acl.KeyRule{Prefix:"foo", Policy:"nope", EnterpriseRule:acl.EnterpriseRule{}}"#,
            ),
            (
                r#"node "foo" { policy = "list" }"#,
                r#"Invalid node policy: &acl.NodeRule{Name:"foo", Policy:"list", EnterpriseRule:acl.EnterpriseRule{}}"#,
            ),
            (
                r#"node_prefix "foo" { policy = "nope" }"#,
                r#"Invalid node_prefix policy: &acl.NodeRule{Name:"foo", Policy:"nope", EnterpriseRule:acl.EnterpriseRule{}}"#,
            ),
            (
                r#"service "foo" { policy = "nope" }"#,
                r#"Invalid service policy: &acl.ServiceRule{Name:"foo", Policy:"nope", Intentions:"", EnterpriseRule:acl.EnterpriseRule{}}"#,
            ),
            (
                "service \"foo\" {\n policy = \"read\"\n intentions = \"nope\"\n}",
                r#"Invalid service intentions policy: &acl.ServiceRule{Name:"foo", Policy:"read", Intentions:"nope", EnterpriseRule:acl.EnterpriseRule{}}"#,
            ),
            (
                r#"service_prefix "foo" { policy = "nope" }"#,
                r#"Invalid service_prefix policy: &acl.ServiceRule{Name:"foo", Policy:"nope", Intentions:"", EnterpriseRule:acl.EnterpriseRule{}}"#,
            ),
            (
                "service_prefix \"foo\" {\n policy = \"read\"\n intentions = \"list\"\n}",
                r#"Invalid service_prefix intentions policy: &acl.ServiceRule{Name:"foo", Policy:"read", Intentions:"list", EnterpriseRule:acl.EnterpriseRule{}}"#,
            ),
            (
                r#"session "foo" { policy = "nope" }"#,
                r#"Invalid session policy: &acl.SessionRule{Node:"foo", Policy:"nope"}"#,
            ),
            (
                r#"session_prefix "foo" { policy = "nope" }"#,
                r#"Invalid session_prefix policy: &acl.SessionRule{Node:"foo", Policy:"nope"}"#,
            ),
            (
                r#"event "foo" { policy = "nope" }"#,
                r#"Invalid event policy: &acl.EventRule{Event:"foo", Policy:"nope"}"#,
            ),
            (
                r#"event_prefix "foo" { policy = "nope" }"#,
                r#"Invalid event_prefix policy: &acl.EventRule{Event:"foo", Policy:"nope"}"#,
            ),
            (
                r#"query "foo" { policy = "nope" }"#,
                r#"Invalid query policy: &acl.PreparedQueryRule{Prefix:"foo", Policy:"nope"}"#,
            ),
            (
                r#"query_prefix "foo" { policy = "nope" }"#,
                r#"Invalid query_prefix policy: &acl.PreparedQueryRule{Prefix:"foo", Policy:"nope"}"#,
            ),
            (r#"keyring = "nope""#, r#"Invalid keyring policy: "nope""#),
            (r#"operator = "nope""#, r#"Invalid operator policy: "nope""#),
            (r#"mesh = "nope""#, r#"Invalid mesh policy: "nope""#),
            (r#"peering = "nope""#, r#"Invalid peering policy: "nope""#),
            (
                r#"key "k" { }"#,
                r#"Invalid key policy: &acl.KeyRule{Prefix:"k", Policy:"", EnterpriseRule:acl.EnterpriseRule{}}"#,
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text).unwrap_err(), expected, "{text}");
        }
        // The JSON spelling reports the same.
        assert_eq!(
            parse(r#"{"query": {"foo": {"policy": "nope"}}}"#).unwrap_err(),
            r#"Invalid query policy: &acl.PreparedQueryRule{Prefix:"foo", Policy:"nope"}"#
        );
    }

    #[test]
    fn validation_follows_consuls_order_not_the_texts() {
        // Consul checks acl, then segment kinds in a fixed order, then keyring/operator.
        let text = r#"
            operator = "nope"
            query "q" { policy = "nope" }
            key "k" { policy = "nope" }
        "#;
        assert!(parse(text).unwrap_err().starts_with("Invalid key policy"));
    }

    #[test]
    fn malformed_text_is_a_parse_error() {
        for text in [
            "key \"a\" { policy = ",
            "key = 5",
            "key \"a\" { policy = 5 }",
            "acl = [\"write\"]",
            "{\"key\": 1}",
            "{not json",
            "[1, 2]",
            "key \"a\" { policy = upper(\"read\") }",
        ] {
            let err = parse(text).unwrap_err();
            assert!(
                err.starts_with("Failed to parse ACL rules"),
                "{text:?}: {err}"
            );
        }
        // HCL1 does not interpolate: `${…}` is plain text, so it is an unknown access level.
        let err = parse("key \"a\" { policy = \"${var.x}\" }").unwrap_err();
        assert!(err.starts_with("Invalid key policy"), "{err}");
    }

    #[test]
    fn limits_are_enforced() {
        let long = "#".repeat(RULES_BYTES_MAX + 1);
        assert!(parse(&long).unwrap_err().contains("exceed"));
        let deep = format!("a = {}1{}", "[".repeat(100), "]".repeat(100));
        assert!(parse(&deep).unwrap_err().contains("nesting"));
        let deep_json = format!("{}{}", "{\"a\":".repeat(100), "}".repeat(100));
        assert!(parse(&deep_json).unwrap_err().contains("nesting"));
        // Brackets inside strings and comments do not count toward the depth.
        let quoted = format!(
            "key \"{}\" {{ policy = \"read\" }} # {}",
            "{".repeat(40),
            "[".repeat(40)
        );
        assert_eq!(parse(&quoted).unwrap().segments.len(), 1);
        let mut many = String::new();
        for i in 0..=RULES_COUNT_MAX {
            many.push_str(&format!("key \"k{i}\" {{ policy = \"read\" }}\n"));
        }
        assert!(parse(&many).unwrap_err().contains("more than"));
        let long_name = format!(
            "key \"{}\" {{ policy = \"read\" }}",
            "k".repeat(RULE_NAME_BYTES_MAX + 1)
        );
        assert!(parse(&long_name).unwrap_err().contains("name exceeds"));
    }

    #[test]
    fn unknown_keys_are_ignored_and_reported() {
        let rules = parse(
            r#"
            namespace "team" { policy = "write" }
            key "a" {
              policy = "read"
              sentinel { code = "x" }
            }
            "#,
        )
        .unwrap();
        assert_eq!(rules.segments.len(), 1);
        let mut ignored = rules.ignored.clone();
        ignored.sort();
        assert_eq!(ignored, vec!["key.sentinel", "namespace"]);
    }

    #[test]
    fn repeated_rules_are_all_kept_for_merging() {
        let rules = parse(
            r#"
            key "a" { policy = "read" }
            key "a" { policy = "deny" }
            "#,
        )
        .unwrap();
        assert_eq!(rules.segments.len(), 2);
        // The order does not decide: a deny before a read is still two rules for the merger.
        let rules = parse(
            r#"
            key "a" { policy = "deny" }
            key "a" { policy = "read" }
            "#,
        )
        .unwrap();
        assert_eq!(rules.segments.len(), 2);
        // For a repeated global (possible in the tree, from HCL1) the strongest value is kept,
        // as merging would pick it.
        let tree = RuleValue::Object(vec![
            ("acl".into(), RuleValue::Str("write".into())),
            ("acl".into(), RuleValue::Str("read".into())),
        ]);
        assert_eq!(
            decode_tree(&tree).unwrap().global(GlobalKind::Acl),
            Some(Access::Write)
        );
    }

    #[test]
    fn precedence_matches_consul() {
        use Access::*;
        assert!(Deny.takes_precedence_over(Some(Write)));
        assert!(Write.takes_precedence_over(Some(List)));
        assert!(List.takes_precedence_over(Some(Read)));
        assert!(Read.takes_precedence_over(None));
        assert!(!Read.takes_precedence_over(Some(Read)));
        assert!(!Write.takes_precedence_over(Some(Deny)));
        assert_eq!(Access::parse("WRITE"), Some(Write));
        assert_eq!(Access::parse("manage"), None);
    }

    #[test]
    fn go_quote_escapes_like_go() {
        assert_eq!(go_quote("a\"b\\c\n"), r#""a\"b\\c\n""#);
        assert_eq!(go_quote("é\u{1}"), "\"é\\x01\"");
    }
}
