//! Intentions as Envoy RBAC (Consul's `rbac.go`): a network RBAC filter on a TCP public
//! listener, an HTTP RBAC filter with L7 permissions on an HTTP one.
//!
//! One rule set per listener, whose action is the opposite of the default: with a default
//! of allow the policies list what is denied (`DENY`), with a default of deny what is
//! allowed (`ALLOW`). Intentions arrive highest precedence first; each is turned into a
//! principal that matches its source's SPIFFE IDs minus every source decided before it, so
//! a lower-precedence intention never overrides a higher one. An L7 intention's
//! permissions are evaluated in order, the first match deciding; a request none matches
//! gets the default, as Consul documents. On a TCP listener an L7 intention denies, as
//! Consul's authorization of an L4 connection does.
//!
//! Envoy's generated RBAC message keeps its policies in a hash map, whose encoding order
//! changes from one build to the next; the messages here mirror the three RBAC shapes field
//! for field with an ordered map, so the same intentions always encode to the same bytes
//! (and so the same content-hash version).

use super::{regex_escape, safe_regex};
use crate::store::mesh::intentions::Action;
use crate::xds::snapshot::{HeaderMatch, HttpPermission, Inbound, IntentionSource, SourceRule};
use envoy_types::pb::envoy::config::rbac::v3::{
    permission, principal, Permission, Policy, Principal,
};
use envoy_types::pb::envoy::config::route::v3::{
    header_matcher::HeaderMatchSpecifier, HeaderMatcher,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{
    path_matcher, string_matcher::MatchPattern, PathMatcher, StringMatcher,
};
use std::collections::BTreeMap;

/// `envoy.config.rbac.v3.RBAC.Action`.
pub const ACTION_ALLOW: i32 = 0;
pub const ACTION_DENY: i32 = 1;

/// Envoy's filter names.
pub const NETWORK_RBAC_FILTER: &str = "envoy.filters.network.rbac";
pub const HTTP_RBAC_FILTER: &str = "envoy.filters.http.rbac";

/// `envoy.config.rbac.v3.RBAC` with ordered policies.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Rules {
    #[prost(int32, tag = "1")]
    pub action: i32,
    #[prost(btree_map = "string, message", tag = "2")]
    pub policies: BTreeMap<String, Policy>,
}

/// `envoy.extensions.filters.network.rbac.v3.RBAC`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NetworkRbac {
    #[prost(message, optional, tag = "1")]
    pub rules: Option<Rules>,
    #[prost(string, tag = "3")]
    pub stat_prefix: String,
}

impl prost::Name for NetworkRbac {
    const NAME: &'static str = "RBAC";
    const PACKAGE: &'static str = "envoy.extensions.filters.network.rbac.v3";
    fn full_name() -> String {
        "envoy.extensions.filters.network.rbac.v3.RBAC".into()
    }
    fn type_url() -> String {
        "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC".into()
    }
}

/// `envoy.extensions.filters.http.rbac.v3.RBAC`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpRbac {
    #[prost(message, optional, tag = "1")]
    pub rules: Option<Rules>,
}

impl prost::Name for HttpRbac {
    const NAME: &'static str = "RBAC";
    const PACKAGE: &'static str = "envoy.extensions.filters.http.rbac.v3";
    fn full_name() -> String {
        "envoy.extensions.filters.http.rbac.v3.RBAC".into()
    }
    fn type_url() -> String {
        "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC".into()
    }
}

/// The principal of `source`'s certificates: its SPIFFE ID in any datacenter of this trust
/// domain, or any service for `*`.
fn source_principal(trust_domain: &str, source: &str) -> Principal {
    let service = if source == crate::store::mesh::intentions::WILDCARD {
        "[^/]+".to_string()
    } else {
        regex_escape(source)
    };
    let regex = format!(
        "^spiffe://{}/ns/default/dc/[^/]+/svc/{service}$",
        regex_escape(trust_domain)
    );
    Principal {
        identifier: Some(principal::Identifier::Authenticated(
            principal::Authenticated {
                principal_name: Some(StringMatcher {
                    match_pattern: Some(MatchPattern::SafeRegex(safe_regex(regex))),
                    ignore_case: false,
                }),
            },
        )),
    }
}

fn any_permission() -> Permission {
    Permission {
        rule: Some(permission::Rule::Any(true)),
    }
}

fn or_permissions(mut rules: Vec<Permission>) -> Permission {
    if rules.len() == 1 {
        return rules.pop().expect("one rule");
    }
    Permission {
        rule: Some(permission::Rule::OrRules(permission::Set { rules })),
    }
}

fn and_permissions(mut rules: Vec<Permission>) -> Permission {
    if rules.len() == 1 {
        return rules.pop().expect("one rule");
    }
    Permission {
        rule: Some(permission::Rule::AndRules(permission::Set { rules })),
    }
}

fn not_permission(rule: Permission) -> Permission {
    Permission {
        rule: Some(permission::Rule::NotRule(Box::new(rule))),
    }
}

fn string_matcher(pattern: MatchPattern) -> StringMatcher {
    StringMatcher {
        match_pattern: Some(pattern),
        ignore_case: false,
    }
}

/// A header condition as Envoy's matcher (shared with routes).
pub fn header_matcher(header: &HeaderMatch) -> HeaderMatcher {
    let specifier = if header.present {
        HeaderMatchSpecifier::PresentMatch(true)
    } else if !header.exact.is_empty() {
        HeaderMatchSpecifier::StringMatch(string_matcher(MatchPattern::Exact(header.exact.clone())))
    } else if !header.prefix.is_empty() {
        HeaderMatchSpecifier::StringMatch(string_matcher(MatchPattern::Prefix(
            header.prefix.clone(),
        )))
    } else if !header.suffix.is_empty() {
        HeaderMatchSpecifier::StringMatch(string_matcher(MatchPattern::Suffix(
            header.suffix.clone(),
        )))
    } else {
        HeaderMatchSpecifier::StringMatch(string_matcher(MatchPattern::SafeRegex(safe_regex(
            header.regex.clone(),
        ))))
    };
    HeaderMatcher {
        name: header.name.clone(),
        header_match_specifier: Some(specifier),
        invert_match: header.invert,
        ..Default::default()
    }
}

/// What one L7 permission matches.
fn http_permission(p: &HttpPermission) -> Permission {
    let mut parts = Vec::new();
    let path = if !p.path_exact.is_empty() {
        Some(MatchPattern::Exact(p.path_exact.clone()))
    } else if !p.path_prefix.is_empty() {
        Some(MatchPattern::Prefix(p.path_prefix.clone()))
    } else if !p.path_regex.is_empty() {
        Some(MatchPattern::SafeRegex(safe_regex(p.path_regex.clone())))
    } else {
        None
    };
    if let Some(pattern) = path {
        parts.push(Permission {
            rule: Some(permission::Rule::UrlPath(PathMatcher {
                rule: Some(path_matcher::Rule::Path(string_matcher(pattern))),
            })),
        });
    }
    if !p.methods.is_empty() {
        let methods: Vec<String> = p.methods.iter().map(|m| regex_escape(m)).collect();
        parts.push(Permission {
            rule: Some(permission::Rule::Header(HeaderMatcher {
                name: ":method".to_string(),
                header_match_specifier: Some(HeaderMatchSpecifier::StringMatch(string_matcher(
                    MatchPattern::SafeRegex(safe_regex(format!("^({})$", methods.join("|")))),
                ))),
                ..Default::default()
            })),
        });
    }
    for header in &p.headers {
        parts.push(Permission {
            rule: Some(permission::Rule::Header(header_matcher(header))),
        });
    }
    if parts.is_empty() {
        return any_permission();
    }
    and_permissions(parts)
}

/// The requests an L7 intention decides with `action`: those whose first matching
/// permission has that action.
fn l7_permission(permissions: &[HttpPermission], allow: bool) -> Option<Permission> {
    let mut decided: Vec<Permission> = Vec::new();
    let mut chosen = Vec::new();
    for p in permissions {
        let matcher = http_permission(p);
        if p.allow == allow {
            let rule = if decided.is_empty() {
                matcher.clone()
            } else {
                and_permissions(vec![
                    matcher.clone(),
                    not_permission(or_permissions(decided.clone())),
                ])
            };
            chosen.push(rule);
        }
        decided.push(matcher);
    }
    (!chosen.is_empty()).then(|| or_permissions(chosen))
}

/// The rule set of `inbound`'s intentions. `l7` is true for an HTTP listener, where L7
/// permissions are enforced; on a TCP listener an L7 intention denies.
pub fn rules(inbound: &Inbound, trust_domain: &str, l7: bool) -> Rules {
    rules_of(&inbound.sources, inbound.default_allow, trust_domain, l7)
}

/// The rule set of one destination's intentions, `sources` highest precedence first.
pub fn rules_of(
    sources: &[IntentionSource],
    default_allow: bool,
    trust_domain: &str,
    l7: bool,
) -> Rules {
    let rule_allows = !default_allow;
    let mut policies = BTreeMap::new();
    let mut l4_principals = Vec::new();
    // The principals of every source decided so far, in precedence order.
    let mut decided: Vec<Principal> = Vec::new();
    let mut shadowed_by_wildcard = false;
    for (i, source) in sources.iter().enumerate() {
        if shadowed_by_wildcard {
            break;
        }
        let own = source_principal(trust_domain, &source.name);
        let principal = if decided.is_empty() {
            own.clone()
        } else {
            Principal {
                identifier: Some(principal::Identifier::AndIds(principal::Set {
                    ids: vec![
                        own.clone(),
                        Principal {
                            identifier: Some(principal::Identifier::NotId(Box::new(
                                if decided.len() == 1 {
                                    decided[0].clone()
                                } else {
                                    Principal {
                                        identifier: Some(principal::Identifier::OrIds(
                                            principal::Set {
                                                ids: decided.clone(),
                                            },
                                        )),
                                    }
                                },
                            ))),
                        },
                    ],
                })),
            }
        };
        match &source.rule {
            SourceRule::Action(action) => {
                if (*action == Action::Allow) == rule_allows {
                    l4_principals.push(principal);
                }
            }
            SourceRule::Permissions(permissions) if l7 => {
                if let Some(permission) = l7_permission(permissions, rule_allows) {
                    policies.insert(
                        format!("consul-intentions-layer7-{i}"),
                        Policy {
                            permissions: vec![permission],
                            principals: vec![principal],
                            ..Default::default()
                        },
                    );
                }
            }
            SourceRule::Permissions(_) => {
                // An L7 intention on a TCP listener refuses the connection.
                if !rule_allows {
                    l4_principals.push(principal);
                }
            }
        }
        shadowed_by_wildcard = source.name == crate::store::mesh::intentions::WILDCARD;
        decided.push(own);
    }
    if !l4_principals.is_empty() {
        policies.insert(
            "consul-intentions-layer4".to_string(),
            Policy {
                permissions: vec![any_permission()],
                principals: l4_principals,
                ..Default::default()
            },
        );
    }
    Rules {
        action: if rule_allows {
            ACTION_ALLOW
        } else {
            ACTION_DENY
        },
        policies,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::snapshot::IntentionSource;
    use prost::Message;

    fn inbound(default_allow: bool, sources: Vec<IntentionSource>) -> Inbound {
        Inbound {
            bind_address: "0.0.0.0".into(),
            bind_port: 21000,
            local_address: "127.0.0.1".into(),
            local_port: 8080,
            local_connect_timeout_ms: 5000,
            protocol: "tcp".into(),
            default_allow,
            sources,
        }
    }

    fn source(name: &str, action: Action) -> IntentionSource {
        IntentionSource {
            name: name.into(),
            rule: SourceRule::Action(action),
        }
    }

    /// The mirrored messages decode as Envoy's own: same tags, same meaning.
    #[test]
    fn the_ordered_rbac_messages_decode_as_envoys() {
        use envoy_types::pb::envoy::extensions::filters::{http, network};
        let rules = rules(
            &inbound(
                true,
                vec![source("web", Action::Deny), source("*", Action::Allow)],
            ),
            "td.consul",
            false,
        );
        let ours = NetworkRbac {
            rules: Some(rules.clone()),
            stat_prefix: "connect_authz".into(),
        };
        let theirs = network::rbac::v3::Rbac::decode(&*ours.encode_to_vec()).unwrap();
        assert_eq!(theirs.stat_prefix, "connect_authz");
        let decoded = theirs.rules.unwrap();
        assert_eq!(decoded.action, ACTION_DENY);
        assert_eq!(
            decoded.policies.keys().collect::<Vec<_>>(),
            vec!["consul-intentions-layer4"]
        );
        assert_eq!(
            decoded.policies["consul-intentions-layer4"],
            rules.policies["consul-intentions-layer4"]
        );
        let http = HttpRbac { rules: Some(rules) };
        let theirs = http::rbac::v3::Rbac::decode(&*http.encode_to_vec()).unwrap();
        assert_eq!(theirs.rules.unwrap().action, ACTION_DENY);
    }

    fn principal_regexes(principal: &Principal) -> Vec<String> {
        match principal.identifier.as_ref().unwrap() {
            principal::Identifier::Authenticated(a) => match a
                .principal_name
                .as_ref()
                .unwrap()
                .match_pattern
                .as_ref()
                .unwrap()
            {
                MatchPattern::SafeRegex(r) => vec![r.regex.clone()],
                other => panic!("{other:?}"),
            },
            principal::Identifier::AndIds(set) | principal::Identifier::OrIds(set) => {
                set.ids.iter().flat_map(principal_regexes).collect()
            }
            principal::Identifier::NotId(inner) => principal_regexes(inner)
                .into_iter()
                .map(|r| format!("not {r}"))
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn default_allow_lists_the_denied_sources_minus_higher_precedence_ones() {
        let r = rules(
            &inbound(
                true,
                vec![source("web", Action::Allow), source("*", Action::Deny)],
            ),
            "td.consul",
            false,
        );
        assert_eq!(r.action, ACTION_DENY);
        let policy = &r.policies["consul-intentions-layer4"];
        assert_eq!(policy.principals.len(), 1);
        assert_eq!(
            principal_regexes(&policy.principals[0]),
            vec![
                "^spiffe://td\\.consul/ns/default/dc/[^/]+/svc/[^/]+$".to_string(),
                "not ^spiffe://td\\.consul/ns/default/dc/[^/]+/svc/web$".to_string(),
            ]
        );
    }

    #[test]
    fn default_deny_lists_the_allowed_sources_and_nothing_after_a_wildcard() {
        let r = rules(
            &inbound(
                false,
                vec![
                    source("web", Action::Allow),
                    source("*", Action::Deny),
                    source("api", Action::Allow),
                ],
            ),
            "td.consul",
            false,
        );
        assert_eq!(r.action, ACTION_ALLOW);
        let policy = &r.policies["consul-intentions-layer4"];
        assert_eq!(
            policy.principals.len(),
            1,
            "api is shadowed by the wildcard deny"
        );
        // With nothing to allow, the policy map is empty: everything is denied.
        let none = rules(
            &inbound(false, vec![source("*", Action::Deny)]),
            "td",
            false,
        );
        assert!(none.policies.is_empty());
        assert_eq!(none.action, ACTION_ALLOW);
    }

    #[test]
    fn an_l7_intention_denies_on_tcp_and_becomes_permissions_on_http() {
        let l7 = IntentionSource {
            name: "web".into(),
            rule: SourceRule::Permissions(vec![
                HttpPermission {
                    allow: false,
                    path_prefix: "/admin".into(),
                    methods: vec!["DELETE".into()],
                    ..Default::default()
                },
                HttpPermission {
                    allow: true,
                    path_prefix: "/".into(),
                    ..Default::default()
                },
            ]),
        };
        let tcp = rules(&inbound(true, vec![l7.clone()]), "td", false);
        assert!(tcp.policies.contains_key("consul-intentions-layer4"));
        let http = rules(&inbound(true, vec![l7]), "td", true);
        assert_eq!(http.action, ACTION_DENY);
        let policy = &http.policies["consul-intentions-layer7-0"];
        let Some(permission::Rule::AndRules(set)) = &policy.permissions[0].rule else {
            panic!("{:?}", policy.permissions[0]);
        };
        assert_eq!(set.rules.len(), 2, "path and method");
    }

    #[test]
    fn the_same_intentions_encode_to_the_same_bytes() {
        let build = || {
            let l7 = |name: &str| IntentionSource {
                name: name.into(),
                rule: SourceRule::Permissions(vec![HttpPermission {
                    allow: true,
                    path_exact: "/".into(),
                    ..Default::default()
                }]),
            };
            HttpRbac {
                rules: Some(rules(
                    &inbound(false, vec![l7("a"), l7("b"), l7("c")]),
                    "td",
                    true,
                )),
            }
            .encode_to_vec()
        };
        assert_eq!(build(), build());
    }
}
