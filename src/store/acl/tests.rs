//! Apply paths, snapshot round trip, the authorizer cache and login bindings, over real
//! `Tables::apply` calls.

use super::apply::*;
use super::authorizer::DefaultPolicy;
use super::builtin::*;
use super::cache::{AuthorizerCache, CacheLimits, CompileSettings, ResolveError};
use super::*;
use crate::store::{ChangeKey, Command, CommandResult};

const NOW: i64 = 1_700_000_000_000_000_000;
const A1: &str = "11111111-1111-1111-1111-111111111111";
const S1: &str = "22222222-2222-2222-2222-222222222222";
const A2: &str = "33333333-3333-3333-3333-333333333333";
const S2: &str = "44444444-4444-4444-4444-444444444444";
const P1: &str = "55555555-5555-5555-5555-555555555555";
const R1: &str = "66666666-6666-6666-6666-666666666666";
const B1: &str = "77777777-7777-7777-7777-777777777777";

struct Harness {
    tables: Tables,
    index: u64,
    changes: Vec<Change>,
}

impl Harness {
    fn new() -> Harness {
        let mut h = Harness {
            tables: Tables::default(),
            index: 0,
            changes: Vec::new(),
        };
        h.ok(AclOp::Initialize { now_unix_ns: NOW });
        h
    }

    fn apply(&mut self, op: AclOp) -> CommandResult {
        self.index += 1;
        self.changes.clear();
        let result = self
            .tables
            .apply(self.index, &Command::Acl(op), &mut self.changes);
        self.tables.acl.check_indexes().unwrap();
        result
    }

    fn ok(&mut self, op: AclOp) {
        let result = self.apply(op.clone());
        assert_eq!(result, CommandResult::Bool(true), "{op:?}");
    }

    fn err(&mut self, op: AclOp) -> String {
        let before = self.tables.acl.tokens.len() + self.tables.acl.policies.len();
        match self.apply(op.clone()) {
            CommandResult::Error(text) => {
                assert!(self.changes.is_empty(), "a refused write emits no change");
                let after = self.tables.acl.tokens.len() + self.tables.acl.policies.len();
                assert_eq!(before, after);
                text
            }
            other => panic!("{op:?} answered {other:?}"),
        }
    }

    fn touched(&self, key: &str) -> bool {
        self.changes
            .iter()
            .any(|c| c.table == Table::Acl && c.key == ChangeKey::Key(Arc::from(key)))
    }
}

fn policy(id: &str, name: &str, rules: &str, create: bool) -> AclOp {
    AclOp::PolicySet(Box::new(PolicyWrite {
        id: id.into(),
        name: name.into(),
        rules: rules.into(),
        create,
        ..PolicyWrite::default()
    }))
}

fn token(accessor: &str, secret: &str, policies: &[&str]) -> TokenWrite {
    TokenWrite {
        accessor_id: accessor.into(),
        secret_id: secret.into(),
        policies: policies
            .iter()
            .map(|name| LinkRef {
                id: String::new(),
                name: name.to_string(),
            })
            .collect(),
        now_unix_ns: NOW,
        create: true,
        ..TokenWrite::default()
    }
}

fn create(write: TokenWrite) -> AclOp {
    AclOp::TokenSet(Box::new(write))
}

#[test]
fn initialize_creates_the_builtins_once() {
    let mut h = Harness::new();
    let management = policy_by_id(&h.tables, GLOBAL_MANAGEMENT_POLICY_ID).unwrap();
    assert_eq!(&*management.name, "global-management");
    assert!(policy_by_name(&h.tables, "builtin/global-read-only").is_some());
    let anonymous = token_by_secret(&h.tables, "anonymous").unwrap();
    assert_eq!(&*anonymous.accessor_id, ANONYMOUS_TOKEN_ACCESSOR_ID);
    assert!(anonymous.policies.is_empty());
    // Again: nothing changes, nobody wakes.
    h.ok(AclOp::Initialize { now_unix_ns: NOW });
    assert!(h.changes.is_empty());
    // A renamed builtin keeps its name when the leader re-initializes.
    let mut renamed = (**policy_by_id(&h.tables, GLOBAL_MANAGEMENT_POLICY_ID).unwrap()).clone();
    renamed.name = Arc::from("root");
    renamed.rules = "acl = \"read\"".into();
    h.tables.acl.put_policy(renamed);
    h.ok(AclOp::Initialize { now_unix_ns: NOW });
    let upgraded = policy_by_id(&h.tables, GLOBAL_MANAGEMENT_POLICY_ID).unwrap();
    assert_eq!(&*upgraded.name, "root");
    assert_eq!(upgraded.rules, GLOBAL_MANAGEMENT_RULES);
}

#[test]
fn bootstrap_works_once_and_then_names_the_reset_index() {
    let mut h = Harness::new();
    assert_eq!(can_bootstrap(&h.tables), (true, 0));
    h.ok(AclOp::Bootstrap {
        accessor_id: A1.into(),
        secret_id: S1.into(),
        now_unix_ns: NOW,
        reset_index: 0,
    });
    let at = h.index;
    let root = token_by_secret(&h.tables, S1).unwrap();
    assert_eq!(root.description, BOOTSTRAP_TOKEN_DESCRIPTION);
    assert_eq!(&*root.policies[0], GLOBAL_MANAGEMENT_POLICY_ID);
    assert_eq!(can_bootstrap(&h.tables), (false, at));
    let again = AclOp::Bootstrap {
        accessor_id: A2.into(),
        secret_id: S2.into(),
        now_unix_ns: NOW,
        reset_index: 0,
    };
    assert_eq!(
        h.err(again),
        format!("ACL bootstrap no longer allowed (reset index: {at})")
    );
    let wrong = AclOp::Bootstrap {
        accessor_id: A2.into(),
        secret_id: S2.into(),
        now_unix_ns: NOW,
        reset_index: at + 7,
    };
    assert_eq!(
        h.err(wrong),
        format!(
            "Invalid bootstrap reset index (specified {}, reset index: {at})",
            at + 7
        )
    );
    // With the right reset index a second bootstrap succeeds and moves the index.
    h.ok(AclOp::Bootstrap {
        accessor_id: A2.into(),
        secret_id: S2.into(),
        now_unix_ns: NOW,
        reset_index: at,
    });
    assert_eq!(can_bootstrap(&h.tables), (false, h.index));
}

#[test]
fn initial_management_bootstraps_or_creates_once() {
    let mut h = Harness::new();
    let op = AclOp::InitialManagement {
        accessor_id: A1.into(),
        secret_id: "not-a-uuid-but-allowed".into(),
        now_unix_ns: NOW,
    };
    h.ok(op.clone());
    assert!(!can_bootstrap(&h.tables).0, "it used the bootstrap");
    let token = token_by_secret(&h.tables, "not-a-uuid-but-allowed").unwrap();
    assert_eq!(token.description, INITIAL_MANAGEMENT_TOKEN_DESCRIPTION);
    h.ok(op);
    assert!(h.changes.is_empty(), "present already: no write");
}

/// A harness holding one policy, `readers` (ID `P1`), for tokens to link.
fn harness_with_readers() -> Harness {
    let mut h = Harness::new();
    h.ok(policy(
        P1,
        "readers",
        "key_prefix \"\" { policy = \"read\" }",
        true,
    ));
    h
}

#[test]
fn token_create_refuses_bad_ids_links_and_expiry_with_consuls_messages() {
    let mut h = harness_with_readers();
    let reserved = "00000000-0000-0000-0000-000000000099";
    for (write, expected) in [
        (token("nope", S1, &[]), "Invalid Token: AccessorID - not a valid UUID".to_string()),
        (
            token(reserved, S1, &[]),
            format!("Invalid Token: AccessorID - UUIDs with the prefix \"{RESERVED_ID_PREFIX}\" are reserved"),
        ),
        (token(A1, "nope", &[]), "Invalid Token: SecretID - not a valid UUID".to_string()),
        (token(A1, S1, &["missing"]), "No such ACL policy with name \"missing\"".to_string()),
        (
            TokenWrite {
                policies: vec![LinkRef { id: A2.into(), name: String::new() }],
                ..token(A1, S1, &[])
            },
            format!("No such ACL policy with ID \"{A2}\""),
        ),
        (
            TokenWrite { roles: vec![LinkRef { id: String::new(), name: "r".into() }], ..token(A1, S1, &[]) },
            "No such ACL role with name \"r\"".to_string(),
        ),
        (
            TokenWrite { expiration_ttl_ns: -1, ..token(A1, S1, &[]) },
            "Token Expiration TTL '-1ns' should be > 0".to_string(),
        ),
        (
            TokenWrite { expiration_ttl_ns: 120_000_000_000, expiration_time_ns: Some(NOW), ..token(A1, S1, &[]) },
            "Token Expiration TTL and Expiration Time cannot both be set".to_string(),
        ),
        (
            TokenWrite { expiration_time_ns: Some(NOW - 1), ..token(A1, S1, &[]) },
            "ExpirationTime cannot be before CreateTime".to_string(),
        ),
        (
            TokenWrite { expiration_ttl_ns: 30_000_000_000, ..token(A1, S1, &[]) },
            "ExpirationTime cannot be less than 1m0s in the future (was 30s)".to_string(),
        ),
        (
            TokenWrite { expiration_ttl_ns: 25 * 3_600_000_000_000, ..token(A1, S1, &[]) },
            "ExpirationTime cannot be more than 24h0m0s in the future (was 25h0m0s)".to_string(),
        ),
    ] {
        assert_eq!(h.err(create(write)), expected);
    }
}

#[test]
fn token_create_refuses_bad_login_fields_and_identities_with_consuls_messages() {
    let mut h = harness_with_readers();
    for (write, expected) in [
        (
            TokenWrite { auth_method: "m".into(), ..token(A1, S1, &[]) },
            "AuthMethod field is disallowed outside of login".to_string(),
        ),
        (
            TokenWrite { from_login: true, ..token(A1, S1, &[]) },
            "AuthMethod field is required during login".to_string(),
        ),
        (
            TokenWrite {
                service_identities: vec![ServiceIdentity { service_name: String::new(), datacenters: vec![] }],
                ..token(A1, S1, &[])
            },
            "Service identity is missing the service name field on this token".to_string(),
        ),
        (
            TokenWrite {
                service_identities: vec![ServiceIdentity { service_name: "Web".into(), datacenters: vec![] }],
                ..token(A1, S1, &[])
            },
            "Service identity \"Web\" has an invalid name. Only lowercase alphanumeric characters, '-' and '_' are allowed".to_string(),
        ),
        (
            TokenWrite {
                local: true,
                service_identities: vec![ServiceIdentity { service_name: "web".into(), datacenters: vec!["dc2".into()] }],
                ..token(A1, S1, &[])
            },
            "Service identity \"web\" cannot specify a list of datacenters on a local token".to_string(),
        ),
        (
            TokenWrite {
                node_identities: vec![NodeIdentity { node_name: "n1".into(), datacenter: String::new() }],
                ..token(A1, S1, &[])
            },
            "Node identity is missing the datacenter field on this token".to_string(),
        ),
        (
            TokenWrite {
                node_identities: vec![NodeIdentity { node_name: String::new(), datacenter: "dc1".into() }],
                ..token(A1, S1, &[])
            },
            "Node identity is missing the node name field on this token".to_string(),
        ),
        (
            TokenWrite {
                templated_policies: vec![TemplatedPolicy { template_name: "builtin/nope".into(), name: None, datacenters: vec![] }],
                ..token(A1, S1, &[])
            },
            "acl templated policy does not exist: builtin/nope".to_string(),
        ),
    ] {
        assert_eq!(h.err(create(write)), expected);
    }
}

/// Creates token `A1`/`S1` linking `readers` by name and by ID, with one service identity
/// given twice and an hour's expiry.
fn create_token_with_duplicate_links(h: &mut Harness) {
    h.ok(create(TokenWrite {
        policies: vec![
            LinkRef {
                id: String::new(),
                name: "READERS".into(),
            },
            LinkRef {
                id: P1.into(),
                name: String::new(),
            },
        ],
        service_identities: vec![
            ServiceIdentity {
                service_name: "web".into(),
                datacenters: vec!["b".into()],
            },
            ServiceIdentity {
                service_name: "web".into(),
                datacenters: vec!["a".into()],
            },
        ],
        expiration_ttl_ns: 3_600_000_000_000,
        ..token(A1, S1, &[])
    }));
}

#[test]
fn a_valid_token_create_resolves_names_to_ids_dedupes_and_indexes() {
    let mut h = harness_with_readers();
    create_token_with_duplicate_links(&mut h);
    assert!(h.touched(&format!("token:{A1}")) && h.touched(TOKENS_KEY));
    let t = token_by_accessor(&h.tables, A1).unwrap();
    assert_eq!(t.policies, vec![Arc::<str>::from(P1)]);
    assert_eq!(t.service_identities[0].datacenters, vec!["a", "b"]);
    assert_eq!(t.expiration_time_ns, Some(NOW + 3_600_000_000_000));
    assert_eq!(t.create_index, h.index);
    assert_eq!(
        policy_links(&h.tables, &t.policies)[0].1.as_ref(),
        "readers"
    );
    assert_eq!(h.tables.acl.indexes.tokens, h.index);
    assert_eq!(h.tables.table_index(Table::Acl), h.index);
}

#[test]
fn token_ids_in_use_by_either_field_are_refused() {
    let mut h = harness_with_readers();
    create_token_with_duplicate_links(&mut h);
    assert_eq!(
        h.err(create(token(A1, S2, &[]))),
        "Invalid Token: AccessorID is already in use"
    );
    assert_eq!(
        h.err(create(token(S1, S2, &[]))),
        "Invalid Token: AccessorID is already in use"
    );
    assert_eq!(
        h.err(create(token(A2, S1, &[]))),
        "Invalid Token: SecretID is already in use"
    );
}

#[test]
fn token_update_keeps_what_may_not_change() {
    let mut h = Harness::new();
    h.ok(create(TokenWrite {
        expiration_ttl_ns: 600_000_000_000,
        ..token(A1, S1, &[])
    }));
    let created_at = h.index;
    let update = |f: &dyn Fn(&mut TokenWrite)| {
        let mut w = TokenWrite {
            accessor_id: A1.into(),
            now_unix_ns: NOW,
            create: false,
            ..TokenWrite::default()
        };
        f(&mut w);
        create(w)
    };
    for (op, expected) in [
        (
            update(&|w| w.accessor_id = "x".into()),
            "AccessorID is not a valid UUID".to_string(),
        ),
        (
            update(&|w| w.accessor_id = A2.into()),
            format!("Cannot find token \"{A2}\""),
        ),
        (
            update(&|w| w.secret_id = S2.into()),
            "Changing a token's SecretID is not permitted".to_string(),
        ),
        (
            update(&|w| w.secret_id = "manage".into()),
            "Permission denied: Cannot modify root ACL".to_string(),
        ),
        (
            update(&|w| w.local = true),
            format!("Cannot toggle local mode of {A1}"),
        ),
        (
            update(&|w| w.auth_method = "m".into()),
            format!("Cannot change AuthMethod of {A1}"),
        ),
        (
            update(&|w| w.expiration_ttl_ns = 1),
            format!("Cannot change expiration time of {A1}"),
        ),
        (
            update(&|w| w.expiration_time_ns = Some(1)),
            format!("Cannot change expiration time of {A1}"),
        ),
    ] {
        assert_eq!(h.err(op), expected);
    }
    h.ok(update(&|w| w.description = "renamed".into()));
    let t = token_by_accessor(&h.tables, A1).unwrap();
    assert_eq!(t.description, "renamed");
    assert_eq!(&*t.secret_id, S1);
    assert_eq!(t.create_index, created_at);
    assert_eq!(t.modify_index, h.index);
    assert_eq!(t.expiration_time_ns, Some(NOW + 600_000_000_000));
    // An expired token cannot be updated.
    let late = TokenWrite {
        accessor_id: A1.into(),
        now_unix_ns: NOW + 700_000_000_000,
        ..TokenWrite::default()
    };
    assert_eq!(h.err(create(late)), format!("Cannot find token \"{A1}\""));
    // The anonymous token can be given policies.
    h.ok(policy(
        P1,
        "dns",
        "node_prefix \"\" { policy = \"read\" }",
        true,
    ));
    h.ok(create(TokenWrite {
        accessor_id: ANONYMOUS_TOKEN_ACCESSOR_ID.into(),
        policies: vec![LinkRef {
            id: String::new(),
            name: "dns".into(),
        }],
        now_unix_ns: NOW,
        ..TokenWrite::default()
    }));
    assert_eq!(
        token_by_secret(&h.tables, "anonymous")
            .unwrap()
            .policies
            .len(),
        1
    );
}

#[test]
fn token_delete_clone_logout_and_reap() {
    let mut h = Harness::new();
    h.ok(policy(P1, "p", "", true));
    h.ok(create(TokenWrite {
        description: "orig".into(),
        ..token(A1, S1, &["p"])
    }));
    assert_eq!(
        h.err(AclOp::TokenDelete {
            accessor_id: "x".into(),
            requester_secret_id: String::new()
        }),
        "Accessor ID is missing or an invalid UUID"
    );
    assert_eq!(
        h.err(AclOp::TokenDelete {
            accessor_id: ANONYMOUS_TOKEN_ACCESSOR_ID.into(),
            requester_secret_id: String::new()
        }),
        "Delete operation not permitted on the anonymous token"
    );
    assert_eq!(
        h.err(AclOp::TokenDelete {
            accessor_id: A1.into(),
            requester_secret_id: S1.into()
        }),
        "Deletion of the request's authorization token is not permitted"
    );
    let clone = AclOp::TokenClone {
        source_accessor_id: A1.into(),
        accessor_id: A2.into(),
        secret_id: S2.into(),
        description: None,
        now_unix_ns: NOW,
    };
    h.ok(clone);
    let copy = token_by_accessor(&h.tables, A2).unwrap();
    assert_eq!(copy.description, "orig");
    assert_eq!(copy.policies, vec![Arc::<str>::from(P1)]);
    assert_eq!(
        h.err(AclOp::TokenClone {
            source_accessor_id: "99999999-9999-9999-9999-999999999999".into(),
            accessor_id: B1.into(),
            secret_id: R1.into(),
            description: None,
            now_unix_ns: NOW,
        }),
        "ACL not found"
    );
    h.ok(AclOp::TokenDelete {
        accessor_id: A2.into(),
        requester_secret_id: S1.into(),
    });
    assert!(token_by_accessor(&h.tables, A2).is_none());
    assert!(h.touched(&format!("token:{A2}")));
    h.ok(AclOp::TokenDelete {
        accessor_id: A2.into(),
        requester_secret_id: S1.into(),
    });
    assert!(h.changes.is_empty(), "deleting a missing token is a no-op");
    assert_eq!(
        h.err(AclOp::Logout {
            secret_id: S2.into()
        }),
        "ACL not found"
    );
    assert_eq!(
        h.err(AclOp::Logout {
            secret_id: S1.into()
        }),
        "Permission denied: token wasn't created via login"
    );
    // Reaping removes only what expired, soonest first, bounded.
    h.ok(create(TokenWrite {
        expiration_ttl_ns: 120_000_000_000,
        ..token(A2, S2, &[])
    }));
    h.ok(AclOp::ReapExpiredTokens {
        now_unix_ns: NOW + 60_000_000_000,
        tokens_max: 10,
    });
    assert!(token_by_accessor(&h.tables, A2).is_some());
    assert_eq!(
        expired_tokens(&h.tables, NOW + 121_000_000_000, 10).len(),
        1
    );
    h.ok(AclOp::ReapExpiredTokens {
        now_unix_ns: NOW + 121_000_000_000,
        tokens_max: 10,
    });
    assert!(token_by_accessor(&h.tables, A2).is_none());
    assert!(token_by_accessor(&h.tables, A1).is_some());
}

#[test]
fn policies_validate_and_builtins_are_immutable() {
    let mut h = Harness::new();
    assert_eq!(
        h.err(policy(P1, "", "", true)),
        "Invalid Policy: no Name is set"
    );
    assert_eq!(
        h.err(policy(P1, "bad name", "", true)),
        "Invalid Policy: invalid Name. Only alphanumeric characters, '-' and '_' are allowed"
    );
    assert_eq!(h.err(policy("x", "p", "", true)), "Policy ID invalid UUID");
    assert_eq!(
        h.err(policy(P1, "p", "key \"a\" { policy = \"nope\" }", true)),
        "Invalid key policy: &acl.KeyRule{Prefix:\"a\", Policy:\"nope\", EnterpriseRule:acl.EnterpriseRule{}}"
    );
    assert_eq!(
        h.err(policy(P1, "Global-Management", "", true)),
        "Invalid Policy: A Policy with Name \"Global-Management\" already exists"
    );
    h.ok(policy(P1, "p", "", true));
    assert!(h.touched(&format!("policy:{P1}")) && h.touched(POLICIES_KEY));
    assert_eq!(
        h.err(policy(A1, "q", "", false)),
        format!("cannot find policy {A1}")
    );
    assert_eq!(
        h.err(policy(P1, "global-management", "", false)),
        "Invalid Policy: A policy with name \"global-management\" already exists"
    );
    h.ok(policy(P1, "p-renamed", "acl = \"read\"", false));
    assert!(policy_by_name(&h.tables, "p").is_none());
    assert_eq!(
        policy_by_name(&h.tables, "P-RENAMED").unwrap().rules,
        "acl = \"read\""
    );
    let gm = GLOBAL_MANAGEMENT_POLICY_ID;
    assert_eq!(
        h.err(policy(gm, "global-management", "acl = \"read\"", false)),
        "Changing the Rules for the builtin global-management policy is not permitted"
    );
    let mut dcs = PolicyWrite {
        id: gm.into(),
        name: "global-management".into(),
        rules: GLOBAL_MANAGEMENT_RULES.into(),
        datacenters: vec!["dc1".into()],
        ..PolicyWrite::default()
    };
    assert_eq!(
        h.err(AclOp::PolicySet(Box::new(dcs.clone()))),
        "Changing the Datacenters of the builtin global-management policy is not permitted"
    );
    // Renaming it is allowed.
    dcs.datacenters.clear();
    dcs.name = "root".into();
    h.ok(AclOp::PolicySet(Box::new(dcs)));
    assert_eq!(
        h.err(AclOp::PolicyDelete { id: gm.into() }),
        "Delete operation not permitted on the builtin global-management policy"
    );
    // Deleting a linked policy leaves a dangling link that reads skip.
    h.ok(create(token(A1, S1, &["p-renamed"])));
    h.ok(AclOp::PolicyDelete { id: P1.into() });
    let t = token_by_accessor(&h.tables, A1).unwrap();
    assert_eq!(t.policies.len(), 1);
    assert!(policy_links(&h.tables, &t.policies).is_empty());
    h.ok(AclOp::PolicyDelete { id: P1.into() });
    assert!(h.changes.is_empty());
}

#[test]
fn roles_validate_link_and_filter() {
    let mut h = Harness::new();
    h.ok(policy(P1, "p", "", true));
    let role = |id: &str, name: &str, policies: Vec<LinkRef>, create: bool| {
        AclOp::RoleSet(Box::new(RoleWrite {
            id: id.into(),
            name: name.into(),
            policies,
            create,
            ..RoleWrite::default()
        }))
    };
    let by_name = |n: &str| {
        vec![LinkRef {
            id: String::new(),
            name: n.into(),
        }]
    };
    assert_eq!(
        h.err(role(R1, "", vec![], true)),
        "Invalid Role: no Name is set"
    );
    assert_eq!(
        h.err(role(R1, "a b", vec![], true)),
        "Invalid Role: invalid Name. Only alphanumeric characters, '-' and '_' are allowed"
    );
    assert_eq!(h.err(role("x", "r", vec![], true)), "Role ID invalid UUID");
    assert_eq!(
        h.err(role(R1, "r", by_name("nope"), true)),
        "No such ACL policy with name \"nope\""
    );
    assert_eq!(
        h.err(role(
            R1,
            "r",
            vec![LinkRef {
                id: A1.into(),
                name: String::new()
            }],
            true
        )),
        format!("No such policy with ID: {A1}")
    );
    h.ok(role(R1, "r", by_name("p"), true));
    assert_eq!(
        h.err(role(B1, "R", vec![], true)),
        "Invalid Role: A Role with Name \"R\" already exists"
    );
    assert_eq!(
        h.err(role(B1, "s", vec![], false)),
        format!("cannot find role {B1}")
    );
    assert_eq!(role_list(&h.tables, Some(P1)).len(), 1);
    h.ok(create(TokenWrite {
        roles: vec![LinkRef {
            id: String::new(),
            name: "r".into(),
        }],
        ..token(A1, S1, &[])
    }));
    let filter = TokenFilter {
        role: Some(R1),
        ..TokenFilter::default()
    };
    assert_eq!(token_list(&h.tables, &filter, NOW).len(), 1);
    let filter = TokenFilter {
        policy: Some(P1),
        ..TokenFilter::default()
    };
    assert!(
        token_list(&h.tables, &filter, NOW).is_empty(),
        "linked via a role, not directly"
    );
    h.ok(role(R1, "r2", vec![], false));
    assert!(role_list(&h.tables, Some(P1)).is_empty());
    assert!(role_by_name(&h.tables, "r2").is_some());
    h.ok(AclOp::RoleDelete { id: R1.into() });
    assert!(h.touched(&format!("role:{R1}")));
    assert!(role_by_id(&h.tables, R1).is_none());
}

fn jwt_method(h: &mut Harness, pem: &str) {
    let config = serde_json::json!({
        "JWTValidationPubKeys": [pem],
        "ClaimMappings": {"sub": "name"},
        "ListClaimMappings": {"groups": "groups"},
    });
    h.ok(AclOp::AuthMethodSet(Box::new(AuthMethodWrite {
        name: "jwt-a".into(),
        method_type: "jwt".into(),
        max_token_ttl_ns: 600_000_000_000,
        config_json: config.to_string(),
        ..AuthMethodWrite::default()
    })));
}

fn rule(id: &str, bind_type: &str, bind_name: &str, create: bool) -> AclOp {
    AclOp::BindingRuleSet(Box::new(BindingRuleWrite {
        id: id.into(),
        auth_method: "jwt-a".into(),
        bind_type: bind_type.into(),
        bind_name: bind_name.into(),
        create,
        ..BindingRuleWrite::default()
    }))
}

/// An auth-method write with the fields its validation looks at.
fn method(name: &str, method_type: &str, ttl: i64, locality: &str, config: &str) -> AclOp {
    AclOp::AuthMethodSet(Box::new(AuthMethodWrite {
        name: name.into(),
        method_type: method_type.into(),
        max_token_ttl_ns: ttl,
        token_locality: locality.into(),
        config_json: config.into(),
        ..AuthMethodWrite::default()
    }))
}

#[test]
fn auth_method_writes_validate_like_consul() {
    let mut h = Harness::new();
    let (_, pem) = super::jwt::tests::p256_key();
    let good = serde_json::json!({"JWTValidationPubKeys": [&pem]}).to_string();
    assert_eq!(
        h.err(method("", "jwt", 0, "", &good)),
        "Invalid Auth Method: no Name is set"
    );
    assert_eq!(
        h.err(method("a b", "jwt", 0, "", &good)),
        "Invalid Auth Method: invalid Name. Only alphanumeric characters, '-' and '_' are allowed"
    );
    assert_eq!(
        h.err(method("m", "kubernetes", 0, "", &good)),
        "Invalid Auth Method: Type should be one of: [jwt]"
    );
    assert_eq!(
        h.err(method("m", "jwt", 1, "", &good)),
        "MaxTokenTTL 1ns cannot be less than 1m0s"
    );
    assert_eq!(
        h.err(method("m", "jwt", 25 * 3_600_000_000_000, "", &good)),
        "MaxTokenTTL 25h0m0s cannot be more than 24h0m0s"
    );
    assert_eq!(
        h.err(method("m", "jwt", 0, "everywhere", &good)),
        "Invalid Auth Method: TokenLocality should be one of 'local' or 'global'"
    );
    assert!(h
        .err(method("m", "jwt", 0, "", "{}"))
        .starts_with("Invalid Auth Method: exactly one of"));
    jwt_method(&mut h, &pem);
    assert!(h.touched("auth-method:jwt-a") && h.touched(AUTH_METHODS_KEY));
    // The type of a method is immutable.
    assert_eq!(
        h.err(method("jwt-a", "oidc", 0, "", &good)),
        "the Type field of an Auth Method is immutable"
    );
}

#[test]
fn binding_rule_writes_validate_like_consul() {
    let mut h = Harness::new();
    let (_, pem) = super::jwt::tests::p256_key();
    jwt_method(&mut h, &pem);
    assert_eq!(
        h.err(rule("x", "service", "a", true)),
        "Binding Rule ID invalid UUID"
    );
    let mut no_method = rule(B1, "service", "a", true);
    if let AclOp::BindingRuleSet(w) = &mut no_method {
        w.auth_method.clear();
    }
    assert_eq!(
        h.err(no_method),
        "Invalid Binding Rule: no AuthMethod is set"
    );
    let mut unknown = rule(B1, "service", "a", true);
    if let AclOp::BindingRuleSet(w) = &mut unknown {
        w.auth_method = "other".into();
    }
    assert_eq!(
        h.err(unknown),
        "cannot find auth method with name \"other\""
    );
    assert_eq!(
        h.err(rule(B1, "", "a", true)),
        "Invalid Binding Rule: no BindType is set"
    );
    assert_eq!(
        h.err(rule(B1, "service", "", true)),
        "Invalid Binding Rule: no BindName is set"
    );
    assert_eq!(
        h.err(rule(B1, "x", "a", true)),
        "Invalid Binding Rule: unknown BindType \"x\""
    );
    assert!(h
        .err(rule(B1, "service", "${value.missing}", true))
        .contains("unknown variable accessed: value.missing"));
    h.ok(rule(B1, "service", "svc-${value.name}", true));
    assert_eq!(binding_rule_list(&h.tables, Some("JWT-A")).len(), 1);
    assert_eq!(
        h.err(rule(A1, "service", "a", false)),
        format!("cannot find binding rule {A1}")
    );
}

#[test]
fn deleting_an_auth_method_deletes_its_rules_and_login_tokens() {
    let mut h = Harness::new();
    let (_, pem) = super::jwt::tests::p256_key();
    jwt_method(&mut h, &pem);
    h.ok(rule(B1, "service", "svc-${value.name}", true));
    h.ok(create(TokenWrite {
        auth_method: "jwt-a".into(),
        from_login: true,
        service_identities: vec![ServiceIdentity {
            service_name: "web".into(),
            datacenters: vec![],
        }],
        ..token(A1, S1, &[])
    }));
    let filter = TokenFilter {
        auth_method: Some("jwt-a"),
        ..TokenFilter::default()
    };
    assert_eq!(token_list(&h.tables, &filter, NOW).len(), 1);
    h.ok(AclOp::AuthMethodDelete {
        name: "JWT-A".into(),
    });
    assert!(auth_method_by_name(&h.tables, "jwt-a").is_none());
    assert!(binding_rule_by_id(&h.tables, B1).is_none());
    assert!(token_by_accessor(&h.tables, A1).is_none());
    assert!(h.touched(&format!("token:{A1}")) && h.touched(&format!("binding-rule:{B1}")));
}

#[test]
fn login_binds_matching_rules_into_a_token() {
    let mut h = Harness::new();
    let (pair, pem) = super::jwt::tests::p256_key();
    jwt_method(&mut h, &pem);
    h.ok(policy(P1, "ops", "operator = \"read\"", true));
    h.ok(AclOp::RoleSet(Box::new(RoleWrite {
        id: R1.into(),
        name: "admins".into(),
        create: true,
        ..RoleWrite::default()
    })));
    h.ok(rule(B1, "service", "svc-${value.name}", true));
    h.ok(rule(A2, "role", "admins", true));
    h.ok(rule(S2, "policy", "ops", true));
    h.ok(rule(
        P1.replace('5', "8").as_str(),
        "role",
        "missing-role",
        true,
    ));
    let config = super::jwt::JwtConfig::from_json(
        &auth_method_by_name(&h.tables, "jwt-a").unwrap().config_json,
    )
    .unwrap();
    let jwt = super::jwt::tests::sign_es256(
        &pair,
        &serde_json::json!({"sub": "Web", "groups": ["dev"], "exp": NOW / 1_000_000_000 + 60}),
    );
    let identity = super::jwt::verify(&config, &jwt, NOW / 1_000_000_000).unwrap();
    let rules: Vec<&Arc<BindingRule>> = binding_rule_list(&h.tables, Some("jwt-a"));
    let matched: Vec<&BindingRule> = rules.iter().map(|r| &***r).collect();
    let method = auth_method_by_name(&h.tables, "jwt-a").unwrap().clone();
    let meta = std::collections::BTreeMap::from([("pod".to_string(), "p1".to_string())]);
    let request = login::LoginRequest {
        method: &method,
        identity: &identity,
        datacenter: "dc1",
        accessor_id: A1.into(),
        secret_id: S1.into(),
        now_unix_ns: NOW,
        meta: &meta,
    };
    let write = login::bind(&h.tables, &matched, &request).unwrap();
    assert_eq!(write.service_identities[0].service_name, "svc-web");
    assert_eq!(write.roles.len(), 1, "the missing role is skipped");
    assert_eq!(write.policies.len(), 1);
    assert_eq!(
        write.description,
        "token created via login: {\"pod\":\"p1\"}"
    );
    assert!(write.local);
    h.ok(create(write));
    let t = token_by_secret(&h.tables, S1).unwrap();
    assert_eq!(t.auth_method, "jwt-a");
    assert_eq!(t.expiration_time_ns, Some(NOW + 600_000_000_000));
    // No rule matched: nothing bound, Consul's plain permission denied.
    assert_eq!(
        login::bind(&h.tables, &[], &request).unwrap_err(),
        "Permission denied"
    );
    // Logout deletes it.
    h.ok(AclOp::Logout {
        secret_id: S1.into(),
    });
    assert!(token_by_secret(&h.tables, S1).is_none());
}

#[test]
fn acl_state_survives_a_snapshot_round_trip() {
    let mut h = Harness::new();
    let (_, pem) = super::jwt::tests::p256_key();
    jwt_method(&mut h, &pem);
    h.ok(rule(B1, "node", "${value.name}", true));
    h.ok(policy(
        P1,
        "p",
        "key_prefix \"a/\" { policy = \"write\" }",
        true,
    ));
    h.ok(create(TokenWrite {
        expiration_ttl_ns: 120_000_000_000,
        ..token(A1, S1, &["p"])
    }));
    h.ok(AclOp::Bootstrap {
        accessor_id: A2.into(),
        secret_id: S2.into(),
        now_unix_ns: NOW,
        reset_index: 0,
    });
    let restored = Tables::from_snapshot_bytes(&h.tables.to_snapshot_bytes()).unwrap();
    restored.acl.check_indexes().unwrap();
    assert_eq!(restored.acl.tokens.len(), h.tables.acl.tokens.len());
    assert_eq!(
        token_by_secret(&restored, S1).unwrap(),
        token_by_secret(&h.tables, S1).unwrap()
    );
    assert_eq!(
        policy_by_name(&restored, "p").unwrap().rules,
        policy_by_id(&h.tables, P1).unwrap().rules
    );
    assert_eq!(restored.acl.bootstrap_index, h.tables.acl.bootstrap_index);
    assert_eq!(restored.acl.indexes, h.tables.acl.indexes);
    assert!(binding_rule_by_id(&restored, B1).is_some());
    assert_eq!(
        expired_tokens(&restored, NOW + 200_000_000_000, 10).len(),
        1
    );
    // The ACL commands themselves survive the log encoding.
    let op = Command::Acl(AclOp::TokenSet(Box::new(token(A1, S1, &["p"]))));
    assert_eq!(Command::decode(&op.encode()).unwrap(), op);
}

fn settings() -> CompileSettings {
    CompileSettings {
        datacenter: "dc1".into(),
        default_policy: DefaultPolicy::Deny,
    }
}

#[test]
fn the_cache_shares_compiles_and_invalidates_precisely() {
    let mut h = Harness::new();
    h.ok(policy(
        P1,
        "kv",
        "key_prefix \"app/\" { policy = \"write\" }",
        true,
    ));
    h.ok(create(token(A1, S1, &["kv"])));
    h.ok(create(token(A2, S2, &["kv"])));
    let mut cache = AuthorizerCache::new(settings());
    let one = cache.resolve(&h.tables, S1, NOW).unwrap();
    let two = cache.resolve(&h.tables, S2, NOW).unwrap();
    assert!(one.authorizer.key_write("app/x").is_ok());
    assert!(
        Arc::ptr_eq(&one.authorizer, &two.authorizer),
        "same policy set, one compile"
    );
    assert_eq!(cache.stats().compiles, 1);
    assert_eq!(cache.stats().parses, 1);
    assert_eq!(&*one.accessor_id, A1);
    // A hit costs no compile.
    cache.resolve(&h.tables, S1, NOW).unwrap();
    assert_eq!(cache.stats().hits, 1);
    // Unknown secrets are `ACL not found`; empty is the anonymous token (default deny).
    assert_eq!(
        cache.resolve(&h.tables, "nope", NOW).unwrap_err(),
        ResolveError::NotFound
    );
    assert_eq!(ResolveError::NotFound.message(), "ACL not found");
    let anonymous = cache.resolve(&h.tables, "", NOW).unwrap();
    assert_eq!(&*anonymous.accessor_id, ANONYMOUS_TOKEN_ACCESSOR_ID);
    assert!(anonymous.authorizer.key_read("app/x").is_err());
    // A change to token A2 drops only A2.
    let len = cache.len();
    h.ok(create(TokenWrite {
        accessor_id: A2.into(),
        description: "changed".into(),
        now_unix_ns: NOW,
        ..TokenWrite::default()
    }));
    cache.invalidate(&h.changes);
    assert_eq!(cache.len(), len - 1);
    let two = cache.resolve(&h.tables, S2, NOW).unwrap();
    assert!(
        two.authorizer.key_write("app/x").is_err(),
        "the update dropped the policy"
    );
    // A policy change drops every token depending on it, and the next request sees it.
    h.ok(policy(
        P1,
        "kv",
        "key_prefix \"app/\" { policy = \"read\" }",
        false,
    ));
    cache.invalidate(&h.changes);
    let one = cache.resolve(&h.tables, S1, NOW).unwrap();
    assert!(one.authorizer.key_write("app/x").is_err());
    assert!(one.authorizer.key_read("app/x").is_ok());
    // A restore (whole-table change) empties the cache.
    cache.invalidate(&crate::store::changes_everywhere());
    assert!(cache.is_empty());
    // Expiry is checked on every hit with the caller's clock.
    h.ok(create(TokenWrite {
        expiration_ttl_ns: 120_000_000_000,
        ..token(B1, R1, &[])
    }));
    assert!(cache.resolve(&h.tables, R1, NOW).is_ok());
    assert_eq!(
        cache
            .resolve(&h.tables, R1, NOW + 121_000_000_000)
            .unwrap_err(),
        ResolveError::NotFound
    );
}

#[test]
fn identities_roles_and_datacenters_shape_the_compiled_set() {
    let mut h = Harness::new();
    h.ok(policy(
        P1,
        "elsewhere",
        "key_prefix \"\" { policy = \"write\" }",
        true,
    ));
    let mut p = policy_by_id(&h.tables, P1).unwrap().as_ref().clone();
    p.datacenters = vec!["dc2".into()];
    h.tables.acl.put_policy(p);
    h.ok(AclOp::RoleSet(Box::new(RoleWrite {
        id: R1.into(),
        name: "svc".into(),
        service_identities: vec![ServiceIdentity {
            service_name: "web".into(),
            datacenters: vec![],
        }],
        create: true,
        ..RoleWrite::default()
    })));
    h.ok(create(TokenWrite {
        roles: vec![LinkRef {
            id: R1.into(),
            name: String::new(),
        }],
        node_identities: vec![
            NodeIdentity {
                node_name: "n1".into(),
                datacenter: "dc1".into(),
            },
            NodeIdentity {
                node_name: "n2".into(),
                datacenter: "dc2".into(),
            },
        ],
        templated_policies: vec![TemplatedPolicy {
            template_name: "builtin/dns".into(),
            name: None,
            datacenters: vec![],
        }],
        ..token(A1, S1, &["elsewhere"])
    }));
    let mut cache = AuthorizerCache::new(settings());
    let a = cache.resolve(&h.tables, S1, NOW).unwrap().authorizer;
    assert!(
        a.key_write("x").is_err(),
        "the dc2-only policy does not apply in dc1"
    );
    assert!(a.service_write("web").is_ok() && a.service_write("web-sidecar-proxy").is_ok());
    assert!(a.service_write("api").is_err() && a.service_read("api").is_ok());
    assert!(a.node_write("n1").is_ok());
    assert!(
        a.node_write("n2").is_err(),
        "node identity of another datacenter"
    );
    assert!(a.query_read("q").is_ok(), "builtin/dns");
    // Changing the role invalidates the token through it.
    h.ok(AclOp::RoleSet(Box::new(RoleWrite {
        id: R1.into(),
        name: "svc".into(),
        ..RoleWrite::default()
    })));
    cache.invalidate(&h.changes);
    let a = cache.resolve(&h.tables, S1, NOW).unwrap().authorizer;
    assert!(a.service_write("web").is_err());
}

/// A UUID-shaped ID, distinct for each `(kind, n)`.
fn uuid(kind: u32, n: usize) -> String {
    format!("{kind:08x}-0000-4000-8000-{n:012x}")
}

#[test]
fn a_full_cache_evicts_one_token_and_keeps_the_ones_in_use() {
    let mut h = Harness::new();
    h.ok(policy(
        P1,
        "kv",
        "key \"bench/get\" { policy = \"read\" }",
        true,
    ));
    let secrets: Vec<String> = (0..8).map(|n| uuid(2, n)).collect();
    for (n, secret) in secrets.iter().enumerate() {
        h.ok(create(token(&uuid(1, n), secret, &["kv"])));
    }
    let limits = CacheLimits {
        tokens_max: 4,
        bytes_max: usize::MAX,
    };
    let mut cache = AuthorizerCache::with_limits(settings(), limits);
    for secret in &secrets[..4] {
        cache.resolve(&h.tables, secret, NOW).unwrap();
    }
    assert_eq!(cache.len(), 4);
    // Token 0 is in use; a fifth token evicts one other token, not the whole cache.
    cache.resolve(&h.tables, &secrets[0], NOW).unwrap();
    cache.resolve(&h.tables, &secrets[4], NOW).unwrap();
    cache.check_invariants();
    assert_eq!(cache.len(), 4);
    assert_eq!(cache.stats().evictions, 1);
    let hits = cache.stats().hits;
    cache.resolve(&h.tables, &secrets[0], NOW).unwrap();
    cache.resolve(&h.tables, &secrets[4], NOW).unwrap();
    assert_eq!(
        cache.stats().hits,
        hits + 2,
        "the used token and the new one stayed"
    );
    assert_eq!(
        cache.stats().compiles,
        1,
        "the shared authorizer was never dropped"
    );
    // Cycling through twice as many tokens as fit: one eviction per miss, never more
    // than the bound held, and every answer right.
    for round in 0..50 {
        for secret in &secrets {
            let resolved = cache.resolve(&h.tables, secret, NOW).unwrap();
            assert!(resolved.authorizer.key_read("bench/get").is_ok());
            assert!(cache.len() <= 4, "round {round}");
        }
        cache.check_invariants();
    }
    let stats = cache.stats();
    assert_eq!(stats.evictions, stats.misses - 4);
    // Invalidation stays exact after evictions: a policy change reaches every cached token.
    h.ok(policy(
        P1,
        "kv",
        "key \"bench/get\" { policy = \"deny\" }",
        false,
    ));
    cache.invalidate(&h.changes);
    cache.check_invariants();
    assert!(
        cache.is_empty(),
        "every cached token depended on the policy"
    );
    for secret in &secrets {
        let resolved = cache.resolve(&h.tables, secret, NOW).unwrap();
        assert!(resolved.authorizer.key_read("bench/get").is_err());
    }
    // A token's own change drops it from the ring too.
    let n = 0;
    cache.resolve(&h.tables, &secrets[n], NOW).unwrap();
    h.ok(create(TokenWrite {
        accessor_id: uuid(1, n),
        description: "changed".into(),
        now_unix_ns: NOW,
        ..TokenWrite::default()
    }));
    let len = cache.len();
    cache.invalidate(&h.changes);
    cache.check_invariants();
    assert_eq!(cache.len(), len - 1);
}

#[test]
fn distinct_authorizers_stay_within_the_byte_bound() {
    let mut h = Harness::new();
    let sets = 12;
    for n in 0..sets {
        let rules = format!("key_prefix \"app{n:02}/\" {{ policy = \"write\" }}");
        h.ok(policy(&uuid(3, n), &format!("p{n:02}"), &rules, true));
        h.ok(create(token(
            &uuid(1, n),
            &uuid(2, n),
            &[&format!("p{n:02}")],
        )));
    }
    // Every authorizer here has the same shape, so the same size: measure one.
    let mut probe = AuthorizerCache::new(settings());
    probe.resolve(&h.tables, &uuid(2, 0), NOW).unwrap();
    let one = probe.authorizer_bytes();
    assert!(one > 0);
    let limits = CacheLimits {
        tokens_max: 1000,
        bytes_max: 3 * one + one / 2,
    };
    let mut cache = AuthorizerCache::with_limits(settings(), limits);
    for round in 0..3 {
        for n in 0..sets {
            let resolved = cache.resolve(&h.tables, &uuid(2, n), NOW).unwrap();
            assert!(resolved
                .authorizer
                .key_write(&format!("app{n:02}/x"))
                .is_ok());
            assert!(resolved.authorizer.key_write("elsewhere").is_err());
            assert!(
                cache.authorizer_bytes() <= limits.bytes_max,
                "round {round}"
            );
            assert!(cache.distinct_authorizers() <= 3);
            cache.check_invariants();
        }
    }
    assert_eq!(cache.len(), 3, "three authorizers fit, one token each");
    assert_eq!(cache.stats().evictions, cache.stats().misses - 3);
    // An authorizer larger than the whole bound is still served, alone.
    let mut tiny = AuthorizerCache::with_limits(
        settings(),
        CacheLimits {
            tokens_max: 1000,
            bytes_max: 1,
        },
    );
    for n in 0..3 {
        tiny.resolve(&h.tables, &uuid(2, n), NOW).unwrap();
        assert_eq!(tiny.len(), 1);
        tiny.check_invariants();
    }
}

#[test]
fn an_expanded_token_lists_its_stored_and_synthesized_policies_with_their_datacenters() {
    let mut h = Harness::new();
    h.ok(policy(
        P1,
        "kv",
        "key_prefix \"app/\" { policy = \"write\" }",
        true,
    ));
    h.ok(create(TokenWrite {
        service_identities: vec![ServiceIdentity {
            service_name: "web".into(),
            datacenters: vec!["dc2".into()],
        }],
        ..token(A1, S1, &["kv"])
    }));
    let token = token_by_secret(&h.tables, S1).unwrap().clone();
    let (policies, roles) = super::cache::expanded_policies(&h.tables, &token);
    assert!(roles.is_empty());
    assert_eq!(policies.len(), 2, "{policies:?}");
    assert_eq!(&*policies[0].id, P1);
    assert!(policies[0].datacenters.is_empty());
    let synthetic = &policies[1];
    let rules = service_identity_rules("web");
    assert_eq!(&*synthetic.id, synthetic_policy_id(&rules).as_str());
    assert_eq!(
        &*synthetic.name,
        format!("synthetic-policy-{}", synthetic.id).as_str()
    );
    assert_eq!(synthetic.rules, rules);
    assert_eq!(synthetic.datacenters, vec!["dc2".to_string()]);
}
