//! The ACL endpoints naming another datacenter (`?dc=dc2`) as typed calls, and
//! `/v1/acl/replication` as `ACL.ReplicationStatus`: dc1 and dc2 with ACLs on (dc1 the
//! primary, dc2 configured to replicate tokens, which praetor accepts and does not act on:
//! each datacenter keeps its own ACLs), and a client agent in dc1. On dc1's server and on
//! the client agent, every ACL read naming dc2 answers exactly as dc2's server answers it
//! itself (status, body, the query headers); tokens, policies, roles, auth methods and
//! binding rules written naming dc2 land in dc2 and not in dc1, as do a login and its
//! logout; refusals are dc2's, in its words; a bootstrap naming dc2 is dc1's, as Consul's
//! agent ignores `?dc` there. A raw msgpack-rpc call of `ACL.ReplicationStatus` on dc1's server port, for
//! dc1 and for dc2, checks its shape (`tests/python/acl_dc_calls.py`). A second test has a
//! dc2 without ACLs: its refusal (`ACL support disabled`, 401) reaches dc1's agents as dc2
//! answers it itself.

use crate::acl_common::{call, same_answer, wait_for_token};
use crate::common;

use super::consul_rpc::{wait_for_log, TwoDatacenters};
use base64::Engine as _;
use common::{Agent, HttpResponse};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const MANAGEMENT: &str = "6d1e3a9c-82a4-4b1f-9c3e-0a1b2c3d4e5f";
/// A token no datacenter has.
const UNKNOWN: &str = "00000000-0000-4000-8000-00000000dead";

/// The ACL configuration of a datacenter's agents: ACLs on, dc1 the primary; `replicating`
/// adds the token replication a secondary asks for. The default policy allows, so that the
/// test support's readiness probes pass; the refusals come from a token whose policy denies
/// `acl`.
fn acl_hcl(replicating: bool) -> String {
    let replication = if replicating {
        "\n enable_token_replication = true"
    } else {
        ""
    };
    format!(
        "primary_datacenter = \"dc1\"\nacl {{\n enabled = true\n default_policy = \"allow\"{replication}\n tokens {{\n  initial_management = \"{MANAGEMENT}\"\n  agent = \"{MANAGEMENT}\"\n }}\n}}"
    )
}

/// `method path body` as the management token on `agent`, which must answer 200; its JSON.
fn ok(agent: &Agent, method: &str, path: &str, body: Value) -> Value {
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let answer = call(agent, method, path, &body, Some(MANAGEMENT));
    assert_eq!(answer.status, 200, "{method} {path}: {}", answer.text());
    serde_json::from_slice(&answer.body).unwrap_or(Value::Null)
}

/// A read both `asked` and dc2's `remote` answer alike as `token`, query headers included.
fn same_get(asked: &Agent, remote: &Agent, path: &str, token: &str) -> HttpResponse {
    same_answer(asked, remote, ("GET", path, b""), Some(token), true)
}

/// `GET path` (this datacenter's) on `agent` as the management token: its status.
fn status_of(agent: &Agent, path: &str) -> u16 {
    call(agent, "GET", path, b"", Some(MANAGEMENT)).status
}

fn text(value: &Value) -> String {
    value.as_str().expect("a string").to_string()
}

/// An ES256 key pair made here, and its public key as the PEM a `jwt` auth method is
/// configured with.
fn es256_key() -> (EcdsaKeyPair, String) {
    let rng = SystemRandom::new();
    let algorithm = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(algorithm, &rng).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(algorithm, pkcs8.as_ref(), &rng).unwrap();
    // A P-256 SubjectPublicKeyInfo: the fixed algorithm identifiers, then the point.
    let mut der = vec![
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    der.extend_from_slice(pair.public_key().as_ref());
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = body
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    let pem = format!(
        "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
        lines.join("\n")
    );
    (pair, pem)
}

/// A compact JWT of `claims` signed with `key` (ES256).
fn sign(key: &EcdsaKeyPair, claims: &Value) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = b64.encode(json!({"alg": "ES256", "typ": "JWT"}).to_string());
    let message = format!("{header}.{}", b64.encode(claims.to_string()));
    let signature = key.sign(&SystemRandom::new(), message.as_bytes()).unwrap();
    format!("{message}.{}", b64.encode(signature.as_ref()))
}

/// Waits until dc1's server and the client agent reach dc2 (the WAN pool converged).
fn wait_for_dc2(agents: &[&Agent], path: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for agent in agents {
        while call(agent, "GET", path, b"", Some(MANAGEMENT)).text() == "No path to datacenter" {
            assert!(Instant::now() < deadline, "dc1 never reached dc2");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[test]
fn another_datacenters_acls_are_reached_through_typed_calls() {
    let (dc1_acl, dc2_acl) = (acl_hcl(false), acl_hcl(true));
    let dc1_args = ["-hcl", &dc1_acl, "-hcl", common::PROMETHEUS_HCL];
    let dc2_args = ["-hcl", &dc2_acl, "-hcl", common::PROMETHEUS_HCL];
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start_with("acl-dc-calls", &dc1_args, &dc2_args);
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    for agent in [server, remote, client] {
        wait_for_token(agent, MANAGEMENT);
    }
    let agents = [server, client];
    wait_for_dc2(&agents, "/v1/acl/policies?dc=dc2");
    let (key, pem) = es256_key();

    // The replication status: the client agent asks its server (`ACL.ReplicationStatus`)
    // and answers as it; naming dc2, dc2's own.
    let here = same_answer(
        client,
        server,
        ("GET", "/v1/acl/replication", b""),
        None,
        true,
    );
    assert_eq!(here.json()["SourceDatacenter"], "dc1", "{}", here.text());
    assert_eq!(here.json()["Enabled"], false);
    assert_eq!(here.json()["LastSuccess"], "0001-01-01T00:00:00Z");

    for (i, agent) in agents.iter().copied().enumerate() {
        let far = |path: &str| format!("{path}?dc=dc2");
        // A policy written naming dc2 lands there, not here; updated there too.
        let name = format!("far-policy-{i}");
        let rules = "acl = \"deny\"\nnode_prefix \"\" { policy = \"read\" }";
        let policy = ok(
            agent,
            "PUT",
            &far("/v1/acl/policy"),
            json!({"Name": name, "Rules": rules}),
        );
        let policy_id = text(&policy["ID"]);
        let policy_path = format!("/v1/acl/policy/{policy_id}");
        assert_eq!(status_of(remote, &policy_path), 200);
        assert_eq!(status_of(server, &policy_path), 404, "dc1 holds the policy");
        let body = json!({"Name": name, "Rules": rules, "Description": "updated"});
        let updated = ok(agent, "PUT", &far(&policy_path), body);
        assert_eq!(updated["Description"], "updated");
        assert_eq!(
            ok(remote, "GET", &policy_path, Value::Null)["Description"],
            "updated"
        );

        // A role, and a local token linked to the policy, then the token updated and cloned.
        let role_name = format!("far-role-{i}");
        let role = ok(
            agent,
            "PUT",
            &far("/v1/acl/role"),
            json!({"Name": role_name, "Policies": [{"ID": policy_id}]}),
        );
        let role_id = text(&role["ID"]);
        let role_path = format!("/v1/acl/role/{role_id}");
        assert_eq!(status_of(remote, &role_path), 200);
        assert_eq!(status_of(server, &role_path), 404, "dc1 holds the role");
        let body = json!({"Description": "far", "Local": true, "Policies": [{"ID": policy_id}]});
        let token = ok(agent, "PUT", &far("/v1/acl/token"), body);
        let (accessor, secret) = (text(&token["AccessorID"]), text(&token["SecretID"]));
        let token_path = format!("/v1/acl/token/{accessor}");
        assert_eq!(status_of(remote, &token_path), 200);
        assert_eq!(status_of(server, &token_path), 404, "dc1 holds the token");
        let body = json!({"Description": "farther", "Local": true, "Roles": [{"ID": role_id}]});
        let token = ok(agent, "PUT", &far(&token_path), body);
        assert_eq!(token["Roles"][0]["Name"], role_name.as_str(), "{token}");
        let clone = ok(
            agent,
            "PUT",
            &far(&format!("{token_path}/clone")),
            json!({"Description": "a clone"}),
        );
        let clone_path = format!("/v1/acl/token/{}", text(&clone["AccessorID"]));
        assert_eq!(
            ok(remote, "GET", &clone_path, Value::Null)["Description"],
            "a clone"
        );

        // An auth method and a binding rule written naming dc2.
        let method = format!("far-jwt-{i}");
        let config = json!({
            "JWTValidationPubKeys": [pem],
            "BoundIssuer": "https://ci.example",
            "BoundAudiences": ["praetor"],
            "ClaimMappings": {"sub": "name"},
        });
        let body = json!({"Name": method, "Type": "jwt", "Config": config});
        ok(agent, "PUT", &far("/v1/acl/auth-method"), body);
        let method_path = format!("/v1/acl/auth-method/{method}");
        assert_eq!(status_of(remote, &method_path), 200);
        assert_eq!(status_of(server, &method_path), 404, "dc1 holds the method");
        let body = json!({"Name": method, "Type": "jwt", "Config": config, "Description": "two"});
        ok(agent, "PUT", &far(&method_path), body);
        let body =
            json!({"AuthMethod": method, "BindType": "service", "BindName": "svc-${value.name}"});
        let rule = ok(agent, "PUT", &far("/v1/acl/binding-rule"), body);
        let rule_path = format!("/v1/acl/binding-rule/{}", text(&rule["ID"]));
        assert_eq!(status_of(remote, &rule_path), 200);
        let body =
            json!({"AuthMethod": method, "BindType": "service", "BindName": "api-${value.name}"});
        ok(agent, "PUT", &far(&rule_path), body);

        // Every read naming dc2 is dc2's own answer, headers and all.
        let reads = [
            far(&token_path),
            far(&clone_path),
            far("/v1/acl/tokens"),
            format!("/v1/acl/tokens?dc=dc2&policy={policy_id}"),
            format!("/v1/acl/tokens?dc=dc2&role={role_id}"),
            far("/v1/acl/token/self"),
            far("/v1/acl/policies"),
            far(&policy_path),
            far(&format!("/v1/acl/policy/name/{name}")),
            far("/v1/acl/roles"),
            format!("/v1/acl/roles?dc=dc2&policy={policy_id}"),
            far(&role_path),
            far(&format!("/v1/acl/role/name/{role_name}")),
            far("/v1/acl/auth-methods"),
            far(&method_path),
            far("/v1/acl/binding-rules"),
            format!("/v1/acl/binding-rules?dc=dc2&authmethod={method}"),
            far(&rule_path),
            far("/v1/acl/replication"),
            // Not there: Consul's 404 in dc2's words.
            far("/v1/acl/policy/00000000-0000-4000-8000-000000000000"),
            far("/v1/acl/role/name/nothing"),
            far("/v1/acl/auth-method/nothing"),
        ];
        for path in &reads {
            same_get(agent, remote, path, MANAGEMENT);
        }
        let listed = same_get(agent, remote, &far("/v1/acl/policies"), MANAGEMENT).json();
        assert!(listed
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["ID"] == policy_id.as_str()));
        let blocking = "/v1/acl/policies?dc=dc2&index=1&wait=1s";
        same_get(agent, remote, blocking, MANAGEMENT);

        // The token made in dc2 is dc2's: it reads itself there and is refused what its
        // policy does not grant, in dc2's words; a token no datacenter has is refused alike.
        let me = same_get(agent, remote, &far("/v1/acl/token/self"), &secret).json();
        assert_eq!(me["AccessorID"], accessor.as_str(), "{me}");
        let refusals: [(&str, String, &[u8], &str); 5] = [
            ("GET", far("/v1/acl/policies"), b"", &secret),
            ("GET", far(&token_path), b"", &secret),
            (
                "PUT",
                far("/v1/acl/policy"),
                b"{\"Name\": \"refused\"}",
                &secret,
            ),
            ("DELETE", far(&role_path), b"", &secret),
            ("GET", far("/v1/acl/token/self"), b"", UNKNOWN),
        ];
        for (method, path, body, token) in refusals {
            let refused = same_answer(agent, remote, (method, &path, body), Some(token), true);
            assert_eq!(refused.status, 403, "{method} {path}: {}", refused.text());
        }
        // A bad body is refused here before any call, as dc2 refuses it.
        let bad = same_answer(
            agent,
            remote,
            ("PUT", &far("/v1/acl/policy"), b"{\"Name\": 7}"),
            Some(MANAGEMENT),
            false,
        );
        assert_eq!(bad.status, 400, "{}", bad.text());

        // A login naming dc2 verifies the JWT with dc2's method and makes a dc2 token;
        // its logout naming dc2 deletes it there.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let claims = json!({"iss": "https://ci.example", "aud": "praetor", "sub": "deployer",
            "iat": now, "exp": now + 600});
        let login = json!({"AuthMethod": method, "BearerToken": sign(&key, &claims)});
        let logged_in = call(
            agent,
            "POST",
            &far("/v1/acl/login"),
            login.to_string().as_bytes(),
            None,
        );
        assert_eq!(logged_in.status, 200, "{}", logged_in.text());
        let login_token = logged_in.json();
        assert_eq!(
            login_token["ServiceIdentities"][0]["ServiceName"],
            "api-deployer"
        );
        let login_path = format!("/v1/acl/token/{}", text(&login_token["AccessorID"]));
        assert_eq!(status_of(remote, &login_path), 200);
        assert_eq!(
            status_of(server, &login_path),
            404,
            "dc1 holds the login token"
        );
        let login_secret = text(&login_token["SecretID"]);
        let out = call(
            agent,
            "POST",
            &far("/v1/acl/logout"),
            b"",
            Some(&login_secret),
        );
        assert_eq!(
            (out.status, out.text().trim()),
            (200, "true"),
            "{}",
            out.text()
        );
        assert_eq!(status_of(remote, &login_path), 404);
        // A logout without a token is refused here, as dc2 refuses it.
        let refused = same_answer(
            agent,
            remote,
            ("POST", &far("/v1/acl/logout"), b""),
            None,
            false,
        );
        assert_eq!(refused.status, 401);

        // Deletes naming dc2 remove each object there.
        for path in [
            &clone_path,
            &token_path,
            &rule_path,
            &method_path,
            &role_path,
            &policy_path,
        ] {
            let deleted = call(agent, "DELETE", &far(path), b"", Some(MANAGEMENT));
            assert_eq!(
                (deleted.status, deleted.text().trim()),
                (200, "true"),
                "{path}"
            );
            assert_eq!(status_of(remote, path), 404, "{path} is still in dc2");
        }

        // A bootstrap naming dc2 is this datacenter's, as Consul's agent ignores `?dc`
        // there: refused with dc1's reset index.
        let bootstrap = call(agent, "PUT", &far("/v1/acl/bootstrap"), b"", None);
        let own = call(server, "PUT", "/v1/acl/bootstrap", b"", None);
        assert_eq!(
            (bootstrap.status, bootstrap.text()),
            (own.status, own.text())
        );
        assert_eq!(bootstrap.status, 403, "{}", bootstrap.text());

        // A datacenter no one knows: Consul's 500.
        let unknown = call(
            agent,
            "GET",
            "/v1/acl/policies?dc=dc9",
            b"",
            Some(MANAGEMENT),
        );
        assert_eq!(
            (unknown.status, unknown.text()),
            (500, "No path to datacenter".to_string())
        );
    }
    for method in [
        "ACL.PolicySet",
        "ACL.TokenClone",
        "ACL.BindingRuleList",
        "ACL.Login",
        "ACL.Logout",
        "ACL.ReplicationStatus",
    ] {
        wait_for_log(remote, &[&format!("rpc: call {method}")]);
    }

    // Raw calls of `ACL.ReplicationStatus` (and `ACL.PolicyList`) on dc1's server port, for
    // dc1 and naming dc2 (where alone a policy was just made).
    ok(
        remote,
        "PUT",
        "/v1/acl/policy",
        json!({"Name": "only-in-dc2"}),
    );
    let printed = common::run_python(
        "acl_dc_calls.py",
        &[&server.ip.to_string(), MANAGEMENT],
        &[server, remote],
    );
    let raw: Value = serde_json::from_str(printed.trim()).unwrap();
    for datacenter in ["dc1", "dc2"] {
        let status = &raw[format!("status-{datacenter}")];
        assert_eq!(status["Enabled"], false, "{raw}");
        assert_eq!(status["SourceDatacenter"], "dc1", "{raw}");
    }
    assert_eq!(raw["dc9"], "No path to datacenter", "{raw}");
    let names = |datacenter: &str| raw[format!("policies-{datacenter}")].to_string();
    assert!(names("dc2").contains("\"only-in-dc2\""), "{raw}");
    assert!(!names("dc1").contains("\"only-in-dc2\""), "{raw}");
}

#[test]
fn a_datacenter_without_acls_refuses_as_it_does_itself() {
    let dc1_acl = acl_hcl(false);
    let dc1_args = ["-hcl", &dc1_acl, "-hcl", common::PROMETHEUS_HCL];
    let dc2_args = ["-hcl", common::PROMETHEUS_HCL];
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start_with("acl-dc-off", &dc1_args, &dc2_args);
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    for agent in [server, client] {
        wait_for_token(agent, MANAGEMENT);
    }
    let agents = [server, client];
    wait_for_dc2(&agents, "/v1/acl/policies?dc=dc2");
    let login = json!({"AuthMethod": "m", "BearerToken": "x.y.z"}).to_string();
    for agent in agents {
        let requests: [(&str, &str, &[u8], Option<&str>); 8] = [
            ("GET", "/v1/acl/policies?dc=dc2", b"", Some(MANAGEMENT)),
            ("GET", "/v1/acl/token/self?dc=dc2", b"", Some(MANAGEMENT)),
            ("GET", "/v1/acl/role/name/r?dc=dc2", b"", Some(MANAGEMENT)),
            ("GET", "/v1/acl/binding-rules?dc=dc2", b"", Some(MANAGEMENT)),
            (
                "PUT",
                "/v1/acl/policy?dc=dc2",
                b"{\"Name\": \"p\"}",
                Some(MANAGEMENT),
            ),
            (
                "DELETE",
                "/v1/acl/auth-method/m?dc=dc2",
                b"",
                Some(MANAGEMENT),
            ),
            ("POST", "/v1/acl/login?dc=dc2", login.as_bytes(), None),
            ("POST", "/v1/acl/logout?dc=dc2", b"", Some(MANAGEMENT)),
        ];
        for (method, path, body, token) in requests {
            let answer = same_answer(agent, remote, (method, path, body), token, false);
            assert_eq!(
                (answer.status, answer.text()),
                (401, "ACL support disabled".to_string()),
                "{method} {path}"
            );
        }
        // The replication status needs no ACLs on the server that answers it (Consul's
        // `ACL.ReplicationStatus` checks none): dc2's, though dc2's own HTTP endpoint
        // refuses it, as Consul's agent there does.
        let status = ok(agent, "GET", "/v1/acl/replication?dc=dc2", Value::Null);
        assert_eq!(status["SourceDatacenter"], "dc2", "{status}");
        assert_eq!(status["Enabled"], false);
        assert_eq!(remote.get("/v1/acl/replication").status, 401);
    }
}
