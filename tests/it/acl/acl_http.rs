//! ACLs over real sockets: a real `praetor agent -dev` with `acl { enabled = true,
//! default_policy = "deny" }`, driven with plain HTTP requests carrying tokens the way Consul's
//! clients send them (`X-Consul-Token`, `Authorization: Bearer`, `?token=`).

use crate::acl_common;
use crate::common;
use crate::dns_common;

use acl_common::{call, wait_for_token};
use common::{request, Agent};
use serde_json::{json, Value};

const MANAGEMENT: &str = "9f1b1c4e-1111-4e7a-9c59-0123456789ab";

fn acl_agent(default_policy: &str) -> Agent {
    Agent::dev(&[
        "-hcl",
        &format!(
            "acl {{ enabled = true\n default_policy = \"{default_policy}\"\n tokens {{ initial_management = \"{MANAGEMENT}\" }} }}"
        ),
    ])
}

fn create_policy(agent: &Agent, name: &str, rules: &str) -> Value {
    let body = json!({"Name": name, "Rules": rules}).to_string();
    let response = call(
        agent,
        "PUT",
        "/v1/acl/policy",
        body.as_bytes(),
        Some(MANAGEMENT),
    );
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()
}

fn create_token(agent: &Agent, policy: &str) -> String {
    let body = json!({"Description": "test", "Policies": [{"Name": policy}]}).to_string();
    let response = call(
        agent,
        "PUT",
        "/v1/acl/token",
        body.as_bytes(),
        Some(MANAGEMENT),
    );
    assert_eq!(response.status, 200, "{}", response.text());
    let token = response.json();
    assert_eq!(token["Policies"][0]["Name"], policy);
    token["SecretID"].as_str().expect("SecretID").to_string()
}

#[test]
fn default_deny_blocks_anonymous_and_a_key_prefix_policy_allows_only_its_prefix() {
    let agent = acl_agent("deny");
    wait_for_token(&agent, MANAGEMENT);

    // Anonymous: denied everywhere that needs a permission, with Consul's text.
    let denied = call(&agent, "PUT", "/v1/kv/app/x", b"1", None);
    assert_eq!(denied.status, 403, "{}", denied.text());
    assert_eq!(
        denied.text(),
        "Permission denied: token with AccessorID '00000000-0000-0000-0000-000000000002' lacks permission 'key:write' on \"app/x\""
    );
    // Lists are filtered instead: anonymous sees no service, and (without a token) is not
    // told that rows were left out.
    let services = call(&agent, "GET", "/v1/catalog/services", b"", None);
    assert_eq!((services.status, services.json()), (200, json!({})));
    assert_eq!(services.header("X-Consul-Results-Filtered-By-ACLs"), None);
    assert_eq!(call(&agent, "GET", "/v1/agent/self", b"", None).status, 403);
    assert_eq!(call(&agent, "GET", "/v1/snapshot", b"", None).status, 403);
    // Status needs no token.
    assert_eq!(
        call(&agent, "GET", "/v1/status/leader", b"", None).status,
        200
    );

    // An unknown token is refused as Consul refuses it.
    let unknown = call(&agent, "GET", "/v1/kv/app/x", b"", Some("no-such-token"));
    assert_eq!(
        (unknown.status, unknown.text().as_str()),
        (403, "ACL not found")
    );

    create_policy(
        &agent,
        "app-writer",
        "key_prefix \"app/\" {\n  policy = \"write\"\n}",
    );
    let writer = create_token(&agent, "app-writer");
    assert_eq!(
        call(&agent, "PUT", "/v1/kv/app/x", b"1", Some(&writer)).status,
        200
    );
    assert_eq!(
        call(&agent, "PUT", "/v1/kv/other/y", b"1", Some(&writer)).status,
        403
    );
    assert_eq!(
        call(&agent, "PUT", "/v1/kv/other/y", b"2", Some(MANAGEMENT)).status,
        200
    );
    // Every way of sending a token works.
    let bearer = request(
        agent.addr(),
        "GET",
        "/v1/kv/app/x",
        b"",
        &[("Authorization", &format!("Bearer {writer}"))],
    );
    assert_eq!(bearer.status, 200, "{}", bearer.text());
    let query = call(
        &agent,
        "GET",
        &format!("/v1/kv/app/x?token={writer}"),
        b"",
        None,
    );
    assert_eq!(query.status, 200);

    // A recursive read shows only what the token may read, and says so.
    let listed = call(&agent, "GET", "/v1/kv/?recurse", b"", Some(&writer));
    assert_eq!(listed.status, 200, "{}", listed.text());
    let keys: Vec<String> = listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(keys, vec!["app/x".to_string()]);
    assert_eq!(
        listed.header("X-Consul-Results-Filtered-By-ACLs"),
        Some("true")
    );
    let all = call(&agent, "GET", "/v1/kv/?recurse", b"", Some(MANAGEMENT));
    assert_eq!(all.json().as_array().unwrap().len(), 2);
    assert_eq!(all.header("X-Consul-Results-Filtered-By-ACLs"), None);
    let key_list = call(&agent, "GET", "/v1/kv/?keys", b"", Some(&writer));
    assert_eq!(key_list.json(), json!(["app/x"]));

    // Snapshots need management.
    assert_eq!(
        call(&agent, "GET", "/v1/snapshot", b"", Some(&writer)).status,
        403
    );
    assert_eq!(
        call(&agent, "GET", "/v1/snapshot", b"", Some(MANAGEMENT)).status,
        200
    );
}

#[test]
fn a_policy_change_takes_effect_on_the_next_request_on_every_connection() {
    let agent = acl_agent("deny");
    wait_for_token(&agent, MANAGEMENT);
    let policy = create_policy(
        &agent,
        "reader",
        "key_prefix \"a/\" {\n  policy = \"read\"\n}",
    );
    let token = create_token(&agent, "reader");
    assert_eq!(
        call(&agent, "PUT", "/v1/kv/a/1", b"v", Some(MANAGEMENT)).status,
        200
    );
    assert_eq!(
        call(&agent, "PUT", "/v1/kv/b/1", b"v", Some(MANAGEMENT)).status,
        200
    );
    // Several fresh connections land on different shards; each caches the authorizer.
    for _ in 0..8 {
        assert_eq!(
            call(&agent, "GET", "/v1/kv/a/1", b"", Some(&token)).status,
            200
        );
        assert_eq!(
            call(&agent, "GET", "/v1/kv/b/1", b"", Some(&token)).status,
            403
        );
    }
    let id = policy["ID"].as_str().unwrap();
    let update = json!({"Name": "reader", "Rules": "key_prefix \"b/\" {\n  policy = \"read\"\n}"})
        .to_string();
    let updated = call(
        &agent,
        "PUT",
        &format!("/v1/acl/policy/{id}"),
        update.as_bytes(),
        Some(MANAGEMENT),
    );
    assert_eq!(updated.status, 200, "{}", updated.text());
    for _ in 0..8 {
        assert_eq!(
            call(&agent, "GET", "/v1/kv/a/1", b"", Some(&token)).status,
            403
        );
        assert_eq!(
            call(&agent, "GET", "/v1/kv/b/1", b"", Some(&token)).status,
            200
        );
    }
    // Deleting the token makes it unknown at once.
    let accessor = call(&agent, "GET", "/v1/acl/token/self", b"", Some(&token)).json()
        ["AccessorID"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        call(
            &agent,
            "DELETE",
            &format!("/v1/acl/token/{accessor}"),
            b"",
            Some(MANAGEMENT)
        )
        .status,
        200
    );
    for _ in 0..4 {
        let gone = call(&agent, "GET", "/v1/kv/b/1", b"", Some(&token));
        assert_eq!((gone.status, gone.text().as_str()), (403, "ACL not found"));
    }
}

#[test]
fn bootstrap_works_once_and_acl_objects_have_consuls_shapes() {
    let agent = Agent::dev(&["-hcl", "acl { enabled = true\n default_policy = \"deny\" }"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let first = loop {
        let response = call(&agent, "PUT", "/v1/acl/bootstrap", b"", None);
        if response.status == 200 || std::time::Instant::now() > deadline {
            break response;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(first.status, 200, "{}", first.text());
    let token = first.json();
    let secret = token["SecretID"].as_str().unwrap().to_string();
    assert_eq!(token["ID"], token["SecretID"]);
    assert_eq!(token["Description"], "Bootstrap Token (Global Management)");
    assert_eq!(token["Policies"][0]["Name"], "global-management");
    assert_eq!(token["Local"], false);
    for field in [
        "AccessorID",
        "CreateTime",
        "Hash",
        "CreateIndex",
        "ModifyIndex",
    ] {
        assert!(token.get(field).is_some(), "{field} in {token}");
    }
    let again = call(&agent, "PUT", "/v1/acl/bootstrap", b"", None);
    assert_eq!(again.status, 403);
    assert!(
        again
            .text()
            .starts_with("Permission denied: ACL bootstrap no longer allowed (reset index: "),
        "{}",
        again.text()
    );

    // Token self, list with filters, clone, policies by name, roles.
    let me = call(&agent, "GET", "/v1/acl/token/self", b"", Some(&secret)).json();
    assert_eq!(me["AccessorID"], token["AccessorID"]);
    let by_name = call(
        &agent,
        "GET",
        "/v1/acl/policy/name/global-management",
        b"",
        Some(&secret),
    );
    assert_eq!(by_name.status, 200);
    assert_eq!(by_name.json()["ID"], "00000000-0000-0000-0000-000000000001");
    let role_body = json!({"Name": "ops", "Policies": [{"Name": "global-management"}]}).to_string();
    let role = call(
        &agent,
        "PUT",
        "/v1/acl/role",
        role_body.as_bytes(),
        Some(&secret),
    );
    assert_eq!(role.status, 200, "{}", role.text());
    let role_id = role.json()["ID"].as_str().unwrap().to_string();
    let with_role = json!({"Roles": [{"ID": role_id}]}).to_string();
    let role_token = call(
        &agent,
        "PUT",
        "/v1/acl/token",
        with_role.as_bytes(),
        Some(&secret),
    );
    assert_eq!(role_token.status, 200, "{}", role_token.text());
    let listed = call(
        &agent,
        "GET",
        &format!("/v1/acl/tokens?role={role_id}"),
        b"",
        Some(&secret),
    );
    assert_eq!(listed.json().as_array().unwrap().len(), 1);
    let cloned = call(
        &agent,
        "PUT",
        &format!(
            "/v1/acl/token/{}/clone",
            role_token.json()["AccessorID"].as_str().unwrap()
        ),
        b"{\"Description\": \"copy\"}",
        Some(&secret),
    );
    assert_eq!(cloned.status, 200, "{}", cloned.text());
    assert_eq!(cloned.json()["Description"], "copy");
    assert_eq!(cloned.json()["Roles"][0]["Name"], "ops");
    let roles = call(&agent, "GET", "/v1/acl/roles", b"", Some(&secret));
    assert_eq!(roles.json()[0]["Name"], "ops");
    let templated = call(
        &agent,
        "GET",
        "/v1/acl/templated-policies",
        b"",
        Some(&secret),
    );
    assert!(templated.json().get("builtin/service").is_some());
    let replication = call(&agent, "GET", "/v1/acl/replication", b"", Some(&secret));
    assert_eq!(replication.json()["Enabled"], false);

    // Bad policy rules come back with Consul's parse error; ACL writes need acl:write.
    let bad = call(
        &agent,
        "PUT",
        "/v1/acl/policy",
        br#"{"Name": "bad", "Rules": "key_prefix \"a/\" { policy = \"nope\" }"}"#,
        Some(&secret),
    );
    assert!(bad.status >= 400, "{}", bad.text());
    let anonymous_write = call(&agent, "PUT", "/v1/acl/policy", br#"{"Name": "x"}"#, None);
    assert_eq!(anonymous_write.status, 403);
    assert!(anonymous_write
        .text()
        .contains("lacks permission 'acl:write'"));
}

#[test]
fn acl_endpoints_answer_401_when_acls_are_off_and_requests_are_unchecked() {
    let agent = Agent::dev(&[]);
    let response = call(&agent, "PUT", "/v1/acl/bootstrap", b"", None);
    assert_eq!(
        (response.status, response.text().as_str()),
        (401, "ACL support disabled")
    );
    assert_eq!(
        call(&agent, "PUT", "/v1/kv/k", b"v", Some("anything")).status,
        200
    );
    assert!(
        !agent.log().contains("does not enforce ACLs"),
        "no not-enforced warning"
    );
}

/// DNS answers with the agent's `default` token, else the anonymous token, as Consul's DNS
/// does: under default deny a service is invisible until the default token may read it and
/// its node; setting the token at runtime takes effect on the next query (the answer cache
/// is dropped), and so does a change to the token's policy.
#[test]
fn dns_answers_with_the_agents_default_token() {
    let agent = Agent::dev_with_dns(&[
        "-hcl",
        &format!(
            "acl {{ enabled = true\n default_policy = \"deny\"\n tokens {{ initial_management = \"{MANAGEMENT}\" }} }}"
        ),
    ]);
    wait_for_token(&agent, MANAGEMENT);
    let register =
        json!({"Node": "n1", "Address": "10.1.2.3", "Service": {"Service": "web", "Port": 80}});
    let registered = call(
        &agent,
        "PUT",
        "/v1/catalog/register",
        register.to_string().as_bytes(),
        Some(MANAGEMENT),
    );
    assert_eq!(registered.status, 200, "{}", registered.text());
    let answer = || dns_common::dig(agent.dns_addr(), &["+short", "web.service.consul", "A"]);
    // Anonymous: nothing.
    assert_eq!(answer().trim(), "");
    let policy = create_policy(
        &agent,
        "dns",
        "service_prefix \"\" {\n  policy = \"read\"\n}\nnode_prefix \"\" {\n  policy = \"read\"\n}",
    );
    let reader = create_token(&agent, "dns");
    let set = call(
        &agent,
        "PUT",
        "/v1/agent/token/default",
        json!({"Token": reader}).to_string().as_bytes(),
        Some(MANAGEMENT),
    );
    assert_eq!(set.status, 200, "{}", set.text());
    assert_eq!(answer().trim(), "10.1.2.3");
    // The token's policy loses node read: the cached answer goes with it.
    let changed = call(
        &agent,
        "PUT",
        &format!("/v1/acl/policy/{}", policy["ID"].as_str().unwrap()),
        json!({"Name": "dns", "Rules": "service_prefix \"\" {\n  policy = \"read\"\n}"})
            .to_string()
            .as_bytes(),
        Some(MANAGEMENT),
    );
    assert_eq!(changed.status, 200, "{}", changed.text());
    assert_eq!(answer().trim(), "");
}

/// A read of a deleted object is Consul's 404, and the templated policies are listed, read
/// and previewed over HTTP and with `praetor acl templated-policy`.
#[test]
fn missing_objects_are_404_and_templated_policies_have_http_and_cli() {
    let agent = acl_agent("deny");
    wait_for_token(&agent, MANAGEMENT);
    let policy = create_policy(&agent, "gone", "");
    let id = policy["ID"].as_str().unwrap().to_string();
    let path = format!("/v1/acl/policy/{id}");
    assert_eq!(
        call(&agent, "DELETE", &path, b"", Some(MANAGEMENT)).status,
        200
    );
    let missing = call(&agent, "GET", &path, b"", Some(MANAGEMENT));
    assert_eq!(
        (missing.status, missing.text().as_str()),
        (404, "Requested policy does not exist: ACL not found")
    );
    let missing = call(
        &agent,
        "GET",
        "/v1/acl/role/00000000-1111-2222-3333-444444444444",
        b"",
        Some(MANAGEMENT),
    );
    assert_eq!(
        (missing.status, missing.text().as_str()),
        (404, "Requested role does not exist: ACL not found")
    );
    let missing = call(
        &agent,
        "GET",
        "/v1/acl/binding-rule/00000000-1111-2222-3333-444444444444",
        b"",
        Some(MANAGEMENT),
    );
    assert_eq!(missing.status, 404, "{}", missing.text());
    // Without a token in the request, logout is Consul's 401.
    let logout = call(&agent, "POST", "/v1/acl/logout", b"", None);
    assert_eq!(
        (logout.status, logout.text().as_str()),
        (401, "Supplied token does not exist")
    );

    let preview = call(
        &agent,
        "POST",
        "/v1/acl/templated-policy/preview/builtin/node",
        br#"{"Name": "node-1"}"#,
        Some(MANAGEMENT),
    );
    assert_eq!(preview.status, 200, "{}", preview.text());
    let preview = preview.json();
    assert!(preview["Rules"]
        .as_str()
        .unwrap()
        .contains("node \"node-1\""));
    assert_eq!(
        preview["Name"],
        format!("synthetic-policy-{}", preview["ID"].as_str().unwrap())
    );
    let unnamed = call(
        &agent,
        "POST",
        "/v1/acl/templated-policy/preview/builtin/service",
        b"{}",
        Some(MANAGEMENT),
    );
    assert_eq!(
        (unnamed.status, unnamed.text().as_str()),
        (
            400,
            "validation error for templated policy: \"builtin/service\": 1 error occurred:\n\t* name is required\n\n"
        )
    );
    let unknown = call(
        &agent,
        "POST",
        "/v1/acl/templated-policy/preview/builtin/nope",
        b"{}",
        Some(MANAGEMENT),
    );
    assert_eq!(
        (unknown.status, unknown.text().as_str()),
        (400, "Invalid templated policy Name: builtin/nope")
    );

    let http = ["-http-addr", &agent.http_addr(), "-token", MANAGEMENT];
    let acl_cli = |args: &[&str]| {
        let (code, out, err) = common::cli(
            &[&["acl", "templated-policy"][..], args, &http[..]].concat(),
            None,
        );
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    assert_eq!(
        acl_cli(&["list"]),
        "builtin/api-gateway\nbuiltin/dns\nbuiltin/node\nbuiltin/nomad-client\nbuiltin/nomad-server\nbuiltin/service\n"
    );
    let read = acl_cli(&["read", "-name", "builtin/service"]);
    assert!(
        read.starts_with("Name:            builtin/service\n"),
        "{read}"
    );
    assert!(
        read.contains("\tName: String - Required - The name of the service.\n"),
        "{read}"
    );
    assert!(
        read.contains("Raw Template:\n\nservice \"{{.Name}}\""),
        "{read}"
    );
    let read = acl_cli(&["read", "-name=builtin/dns"]);
    assert!(read.contains("Input variables: None\n"), "{read}");
    let preview = acl_cli(&["preview", "-name", "builtin/service", "-var", "name:api"]);
    assert!(preview.contains("synthetic-policy-"), "{preview}");
    assert!(preview.contains("service \"api\" {"), "{preview}");
    let (code, _, err) = common::cli(
        &[&["acl", "templated-policy", "read"][..], &http[..]].concat(),
        None,
    );
    assert_eq!(code, 1);
    assert!(err.contains("Must specify the -name parameter"), "{err}");
}

/// A token created with an AccessorID in upper case is answered with the ID as written and
/// found by any spelling of it, as Consul's UUID indexes match case-insensitively and keep
/// the ID as given; an update through a lower-case URL keeps the spelling.
#[test]
fn a_token_id_written_in_upper_case_is_kept_and_found_in_any_case() {
    let agent = acl_agent("deny");
    wait_for_token(&agent, MANAGEMENT);
    let accessor = "ABCDEF01-2345-6789-ABCD-EF0123456789";
    let secret = "FEDCBA98-7654-3210-FEDC-BA9876543210";
    let created = call(
        &agent,
        "PUT",
        "/v1/acl/token",
        json!({"AccessorID": accessor, "SecretID": secret, "Description": "upper"})
            .to_string()
            .as_bytes(),
        Some(MANAGEMENT),
    );
    assert_eq!(created.status, 200, "{}", created.text());
    let body: Value = serde_json::from_slice(&created.body).unwrap();
    assert_eq!(body["AccessorID"], json!(accessor));
    assert_eq!(body["SecretID"], json!(secret));

    let lower = accessor.to_lowercase();
    let read = call(
        &agent,
        "GET",
        &format!("/v1/acl/token/{lower}"),
        b"",
        Some(MANAGEMENT),
    );
    assert_eq!(read.status, 200, "{}", read.text());
    let body: Value = serde_json::from_slice(&read.body).unwrap();
    assert_eq!(body["AccessorID"], json!(accessor));

    let updated = call(
        &agent,
        "PUT",
        &format!("/v1/acl/token/{lower}"),
        json!({"Description": "still upper"}).to_string().as_bytes(),
        Some(MANAGEMENT),
    );
    assert_eq!(updated.status, 200, "{}", updated.text());
    let body: Value = serde_json::from_slice(&updated.body).unwrap();
    assert_eq!(body["AccessorID"], json!(accessor));
    assert_eq!(body["Description"], json!("still upper"));

    let list = call(&agent, "GET", "/v1/acl/tokens", b"", Some(MANAGEMENT));
    let tokens: Value = serde_json::from_slice(&list.body).unwrap();
    assert!(
        tokens
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["AccessorID"] == json!(accessor)),
        "{tokens}"
    );
    let own = call(&agent, "GET", "/v1/acl/token/self", b"", Some(secret));
    assert_eq!(own.status, 200, "{}", own.text());
    let body: Value = serde_json::from_slice(&own.body).unwrap();
    assert_eq!(body["AccessorID"], json!(accessor));
    // The secret, a UUID, authenticates in any case too, and is answered as written.
    let own = call(
        &agent,
        "GET",
        "/v1/acl/token/self",
        b"",
        Some(&secret.to_lowercase()),
    );
    assert_eq!(own.status, 200, "{}", own.text());
    let body: Value = serde_json::from_slice(&own.body).unwrap();
    assert_eq!(body["SecretID"], json!(secret));
    // A second token may not take the same secret in another case.
    let taken = call(
        &agent,
        "PUT",
        "/v1/acl/token",
        json!({"SecretID": secret.to_lowercase()})
            .to_string()
            .as_bytes(),
        Some(MANAGEMENT),
    );
    // Consul's RPC error, which its HTTP API answers with a 500.
    assert_eq!(
        (
            taken.status,
            taken.text().contains("SecretID is already in use")
        ),
        (500, true),
        "{}",
        taken.text()
    );

    let deleted = call(
        &agent,
        "DELETE",
        &format!("/v1/acl/token/{lower}"),
        b"",
        Some(MANAGEMENT),
    );
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    let gone = call(
        &agent,
        "GET",
        &format!("/v1/acl/token/{accessor}"),
        b"",
        Some(MANAGEMENT),
    );
    assert_eq!(gone.status, 404, "{}", gone.text());
}
