//! Every JSON write endpoint refuses what Consul's decoder refuses, table-driven over the
//! routing table itself.
//!
//! Consul decodes request bodies with Go's `encoding/json` and `DisallowUnknownFields`: a
//! key its struct does not have, or a value of the wrong JSON type, is a 400 whose text
//! starts with the endpoint's own words (`Request decode failed:`, `Token decoding
//! failed:`, `Failed to parse body:` …). One `praetor agent -dev` with ACLs on serves every
//! case below twice: once with an unknown field and once with a wrong type. Every route that
//! takes a write method is either in the table or listed with the reason it has no JSON
//! body, so a new write endpoint cannot ship without its body being checked here.
//!
//! The spellings Consul accepts keep working: a last test registers through every alias
//! Consul's decoder translates (lowercase names, `enable_tag_override`, `tls_skip_verify`,
//! `deregister_critical_service_after`, `service_id`, `args`, sidecar snake case).

use crate::common;

use common::{request, Agent, HttpResponse};
use praetor::api::routes::{Path, ROUTES};
use serde_json::{json, Value};
use std::collections::BTreeSet;

const MANAGEMENT: &str = "5d2c7a11-3333-4e7a-9c59-0123456789ab";

/// One JSON write: the route it reaches, where to send it, a body Consul accepts, the words
/// the endpoint's 400 starts with, and a field to give the wrong type.
struct Case {
    route: &'static str,
    method: &'static str,
    path: String,
    body: Value,
    refusal: &'static str,
    /// A field of `body`'s top level set to a value of the wrong type, and Go's words for it
    /// after `json: cannot unmarshal `.
    wrong: (&'static str, Value, &'static str),
    /// Whether Consul refuses an unknown key here (a session's decoder ignores them).
    strict: bool,
}

fn case(
    route: &'static str,
    method: &'static str,
    path: &str,
    body: Value,
    refusal: &'static str,
    wrong: (&'static str, Value, &'static str),
) -> Case {
    Case {
        route,
        method,
        path: path.to_string(),
        body,
        refusal,
        wrong,
        strict: true,
    }
}

/// Routes with a write method and no JSON body, and why.
const NOT_JSON: &[(&str, &str)] = &[
    ("/v1/peering/", "DELETE has no body"),
    ("/v1/kv/", "the value is the body's bytes"),
    ("/v1/kv", "the value is the body's bytes"),
    ("/v1/agent/join/", "no body"),
    ("/v1/agent/leave", "no body"),
    ("/v1/agent/force-leave/", "no body"),
    ("/v1/event/fire/", "the payload is the body's bytes"),
    ("/v1/event/fire", "the payload is the body's bytes"),
    ("/v1/session/destroy/", "no body"),
    ("/v1/session/destroy", "no body"),
    ("/v1/session/renew/", "no body"),
    ("/v1/session/renew", "no body"),
    ("/v1/agent/maintenance", "no body"),
    ("/v1/agent/reload", "no body"),
    ("/v1/agent/service/deregister/", "no body"),
    ("/v1/agent/service/maintenance/", "no body"),
    ("/v1/agent/check/deregister/", "no body"),
    ("/v1/agent/check/pass/", "the note is a query parameter"),
    ("/v1/agent/check/warn/", "the note is a query parameter"),
    ("/v1/agent/check/fail/", "the note is a query parameter"),
    ("/v1/operator/raft/peer", "no body"),
    ("/v1/operator/raft/transfer-leader", "no body"),
    ("/v1/snapshot", "the body is a snapshot archive"),
    (
        "/v1/agent/debug/faults",
        "internal: praetor's fault injection",
    ),
    ("/v1/acl/logout", "no body"),
    ("/v1/config/", "DELETE only"),
    (
        "/v1/config",
        "a config entry: Consul's own decoder, checked after the table",
    ),
];

fn route_text(path: Path) -> &'static str {
    match path {
        Path::Exact(text) | Path::Prefix(text) => text,
    }
}

fn send(agent: &Agent, method: &str, path: &str, body: &Value) -> HttpResponse {
    request(
        agent.addr(),
        method,
        path,
        body.to_string().as_bytes(),
        &[("X-Consul-Token", MANAGEMENT)],
    )
}

fn must(agent: &Agent, method: &str, path: &str, body: Value) -> Value {
    let r = send(agent, method, path, &body);
    assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
    serde_json::from_slice(&r.body).unwrap_or(Value::Null)
}

/// `body` with `key` set in its object (a transaction's first operation).
fn with(body: &Value, key: &str, value: Value) -> Value {
    let mut body = body.clone();
    let object = match &mut body {
        Value::Array(items) => items[0].as_object_mut(),
        other => other.as_object_mut(),
    };
    object
        .expect("case bodies are objects or lists of them")
        .insert(key.to_string(), value);
    body
}

#[test]
fn every_json_write_refuses_unknown_fields_and_wrong_types_as_consul_does() {
    let agent = Agent::dev(&[
        "-hcl",
        &format!(
            "acl {{ enabled = true\n default_policy = \"allow\"\n tokens {{ initial_management = \"{MANAGEMENT}\" }} }}"
        ),
    ]);
    agent_support_wait(&agent);
    let key = common::jwt_public_key_pem();

    // Objects the by-ID writes address.
    let policy = must(&agent, "PUT", "/v1/acl/policy", json!({"Name": "p1"}));
    let policy_id = policy["ID"].as_str().unwrap().to_string();
    let role = must(&agent, "PUT", "/v1/acl/role", json!({"Name": "r1"}));
    let role_id = role["ID"].as_str().unwrap().to_string();
    let token = must(&agent, "PUT", "/v1/acl/token", json!({"Description": "t1"}));
    let accessor = token["AccessorID"].as_str().unwrap().to_string();
    must(
        &agent,
        "PUT",
        "/v1/acl/auth-method",
        json!({"Name": "m1", "Type": "jwt", "Config": {"JWTValidationPubKeys": [key]}}),
    );
    let rule = must(
        &agent,
        "PUT",
        "/v1/acl/binding-rule",
        json!({"AuthMethod": "m1", "BindType": "service", "BindName": "web"}),
    );
    let rule_id = rule["ID"].as_str().unwrap().to_string();
    let query = must(
        &agent,
        "POST",
        "/v1/query",
        json!({"Name": "q1", "Service": {"Service": "web"}}),
    );
    let query_id = query["ID"].as_str().unwrap().to_string();
    let intention = must(
        &agent,
        "POST",
        "/v1/connect/intentions",
        json!({"SourceName": "a", "DestinationName": "b", "Action": "allow"}),
    );
    let intention_id = intention["ID"].as_str().unwrap().to_string();
    must(
        &agent,
        "PUT",
        "/v1/agent/check/register",
        json!({"Name": "ttl-check", "TTL": "30s"}),
    );

    let decode = "Request decode failed: ";
    let string_into_int =
        |s: &'static str| -> (&'static str, Value, &'static str) { ("Port", json!("80"), s) };
    let mut cases = vec![
        case(
            "/v1/catalog/register",
            "PUT",
            "/v1/catalog/register",
            json!({"Node": "n1", "Address": "10.0.0.1"}),
            decode,
            (
                "NodeMeta",
                json!(["a"]),
                "array into Go struct field RegisterRequest.NodeMeta of type map[string]string",
            ),
        ),
        case(
            "/v1/catalog/deregister",
            "PUT",
            "/v1/catalog/deregister",
            json!({"Node": "n1"}),
            decode,
            (
                "ServiceID",
                json!(5),
                "number into Go struct field DeregisterRequest.ServiceID of type string",
            ),
        ),
        case(
            "/v1/operator/keyring",
            "POST",
            "/v1/operator/keyring",
            json!({"Key": "pUqJrVyVRj5jsiYEkM/tFQYfWyJIv4s3XkvDwy7Cu5s="}),
            decode,
            (
                "RelayFactor",
                json!("3"),
                "string into Go struct field keyringArgs.RelayFactor of type uint64",
            ),
        ),
        case(
            "/v1/coordinate/update",
            "PUT",
            "/v1/coordinate/update",
            json!({"Node": "n1", "Coord": {"Vec": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], "Error": 1.5, "Height": 0.0001}}),
            decode,
            (
                "Segment",
                json!(true),
                "bool into Go struct field CoordinateUpdateRequest.Segment of type string",
            ),
        ),
        case(
            "/v1/txn",
            "PUT",
            "/v1/txn",
            json!([{"KV": {"Verb": "get", "Key": "a"}}]),
            "Failed to parse body: ",
            (
                "KV",
                json!("get"),
                "string into Go struct field TxnOp.KV of type api.KVTxnOp",
            ),
        ),
        case(
            "/v1/query",
            "POST",
            "/v1/query",
            json!({"Name": "q2", "Service": {"Service": "web"}}),
            decode,
            (
                "Service",
                json!("web"),
                "string into Go struct field PreparedQuery.Service of type structs.ServiceQuery",
            ),
        ),
        case(
            "/v1/query/",
            "PUT",
            &format!("/v1/query/{query_id}"),
            json!({"Name": "q1", "Service": {"Service": "web"}}),
            decode,
            (
                "Name",
                json!(["q1"]),
                "array into Go struct field PreparedQuery.Name of type string",
            ),
        ),
        case(
            "/v1/agent/service/register",
            "PUT",
            "/v1/agent/service/register",
            json!({"Name": "web", "Port": 80}),
            decode,
            string_into_int(
                "string into Go struct field ServiceDefinition.Port of type int",
            ),
        ),
        case(
            "/v1/agent/check/register",
            "PUT",
            "/v1/agent/check/register",
            json!({"Name": "c2", "TTL": "30s"}),
            decode,
            (
                "Notes",
                json!({"a": 1}),
                "object into Go struct field CheckDefinition.Notes of type string",
            ),
        ),
        case(
            "/v1/agent/check/update/",
            "PUT",
            "/v1/agent/check/update/ttl-check",
            json!({"Status": "passing"}),
            decode,
            (
                "Output",
                json!(1),
                "number into Go struct field checkUpdate.Output of type string",
            ),
        ),
        case(
            "/v1/operator/autopilot/configuration",
            "PUT",
            "/v1/operator/autopilot/configuration",
            json!({"CleanupDeadServers": true}),
            "Error parsing autopilot config: ",
            (
                "CleanupDeadServers",
                json!("yes"),
                "string into Go struct field AutopilotConfiguration.CleanupDeadServers of type bool",
            ),
        ),
        case(
            "/v1/acl/bootstrap",
            "PUT",
            "/v1/acl/bootstrap",
            json!({}),
            "Request decoding failed: ",
            (
                "BootstrapSecret",
                json!(1),
                "number into Go struct field bootstrapSecretRequest.BootstrapSecret of type string",
            ),
        ),
        case(
            "/v1/acl/login",
            "POST",
            "/v1/acl/login",
            json!({"AuthMethod": "m1", "BearerToken": "x"}),
            "Failed to decode request body: ",
            (
                "Meta",
                json!("a"),
                "string into Go struct field ACLLoginParams.Meta of type map[string]string",
            ),
        ),
        case(
            "/v1/acl/token",
            "PUT",
            "/v1/acl/token",
            json!({"Description": "t2"}),
            "Token decoding failed: ",
            (
                "Local",
                json!("true"),
                "string into Go struct field ACLToken.Local of type bool",
            ),
        ),
        case(
            "/v1/acl/token/",
            "PUT",
            &format!("/v1/acl/token/{accessor}"),
            json!({"Description": "t1"}),
            "Token decoding failed: ",
            (
                "Policies",
                json!({"ID": "x"}),
                "object into Go struct field ACLToken.Policies of type structs.ACLTokenPolicyLink",
            ),
        ),
        case(
            "/v1/acl/token/",
            "PUT",
            &format!("/v1/acl/token/{accessor}/clone"),
            json!({"Description": "clone"}),
            "Token decoding failed: ",
            (
                "Description",
                json!(1),
                "number into Go struct field ACLToken.Description of type string",
            ),
        ),
        case(
            "/v1/acl/policy",
            "PUT",
            "/v1/acl/policy",
            json!({"Name": "p2"}),
            "Policy decoding failed: ",
            (
                "Datacenters",
                json!("dc1"),
                "string into Go struct field ACLPolicy.Datacenters of type []string",
            ),
        ),
        case(
            "/v1/acl/policy/",
            "PUT",
            &format!("/v1/acl/policy/{policy_id}"),
            json!({"Name": "p1"}),
            "Policy decoding failed: ",
            (
                "Rules",
                json!(1),
                "number into Go struct field ACLPolicy.Rules of type string",
            ),
        ),
        case(
            "/v1/acl/role",
            "PUT",
            "/v1/acl/role",
            json!({"Name": "r2"}),
            "Role decoding failed: ",
            (
                "Name",
                json!(false),
                "bool into Go struct field ACLRole.Name of type string",
            ),
        ),
        case(
            "/v1/acl/role/",
            "PUT",
            &format!("/v1/acl/role/{role_id}"),
            json!({"Name": "r1"}),
            "Role decoding failed: ",
            (
                "ServiceIdentities",
                json!("web"),
                "string into Go struct field ACLRole.ServiceIdentities of type structs.ACLServiceIdentity",
            ),
        ),
        case(
            "/v1/acl/templated-policy/preview/",
            "POST",
            "/v1/acl/templated-policy/preview/builtin/service",
            json!({"Name": "web"}),
            "Failed to decode request body: ",
            (
                "Name",
                json!(1),
                "number into Go struct field ACLTemplatedPolicyVariables.name of type string",
            ),
        ),
        case(
            "/v1/acl/auth-method",
            "PUT",
            "/v1/acl/auth-method",
            json!({"Name": "m2", "Type": "jwt", "Config": {"JWTValidationPubKeys": [key]}}),
            "AuthMethod decoding failed: ",
            (
                "Config",
                json!("x"),
                "string into Go struct field ACLAuthMethod.Config of type map[string]interface {}",
            ),
        ),
        case(
            "/v1/acl/auth-method/",
            "PUT",
            "/v1/acl/auth-method/m1",
            json!({"Name": "m1", "Type": "jwt", "Config": {"JWTValidationPubKeys": [key]}}),
            "AuthMethod decoding failed: ",
            (
                "DisplayName",
                json!(2),
                "number into Go struct field ACLAuthMethod.DisplayName of type string",
            ),
        ),
        case(
            "/v1/acl/binding-rule",
            "PUT",
            "/v1/acl/binding-rule",
            json!({"AuthMethod": "m1", "BindType": "service", "BindName": "api"}),
            "BindingRule decoding failed: ",
            (
                "Selector",
                json!([]),
                "array into Go struct field ACLBindingRule.Selector of type string",
            ),
        ),
        case(
            "/v1/acl/binding-rule/",
            "PUT",
            &format!("/v1/acl/binding-rule/{rule_id}"),
            json!({"AuthMethod": "m1", "BindType": "service", "BindName": "web"}),
            "BindingRule decoding failed: ",
            (
                "BindVars",
                json!("x"),
                "string into Go struct field ACLBindingRule.BindVars of type structs.ACLTemplatedPolicyVariables",
            ),
        ),
        case(
            "/v1/agent/token/",
            "PUT",
            "/v1/agent/token/default",
            json!({"Token": MANAGEMENT}),
            decode,
            (
                "Token",
                json!(7),
                "number into Go struct field AgentToken.Token of type string",
            ),
        ),
        case(
            "/v1/connect/intentions",
            "POST",
            "/v1/connect/intentions",
            json!({"SourceName": "c", "DestinationName": "d", "Action": "deny"}),
            decode,
            (
                "Meta",
                json!(["x"]),
                "array into Go struct field Intention.Meta of type map[string]string",
            ),
        ),
        case(
            "/v1/connect/intentions/exact",
            "PUT",
            "/v1/connect/intentions/exact?source=e&destination=f",
            json!({"SourceName": "e", "DestinationName": "f", "Action": "allow"}),
            decode,
            (
                "Description",
                json!(1),
                "number into Go struct field Intention.Description of type string",
            ),
        ),
        case(
            "/v1/connect/intentions/",
            "PUT",
            &format!("/v1/connect/intentions/{intention_id}"),
            json!({"SourceName": "a", "DestinationName": "b", "Action": "deny"}),
            decode,
            (
                "Action",
                json!(1),
                "number into Go struct field Intention.Action of type string",
            ),
        ),
        case(
            "/v1/connect/ca/configuration",
            "PUT",
            "/v1/connect/ca/configuration",
            json!({"Provider": "consul", "Config": {"LeafCertTTL": "72h"}}),
            decode,
            (
                "ForceWithoutCrossSigning",
                json!("no"),
                "string into Go struct field CAConfiguration.ForceWithoutCrossSigning of type bool",
            ),
        ),
        case(
            "/v1/agent/connect/authorize",
            "POST",
            "/v1/agent/connect/authorize",
            json!({"Target": "web", "ClientCertURI": "spiffe://11111111-2222-3333-4444-555555555555.consul/ns/default/dc/dc1/svc/api"}),
            decode,
            (
                "Target",
                json!(["web"]),
                "array into Go struct field ConnectAuthorizeRequest.Target of type string",
            ),
        ),
        case(
            "/v1/discovery-chain/",
            "POST",
            "/v1/discovery-chain/web",
            json!({"OverrideProtocol": "http"}),
            "Request decoding failed: ",
            (
                "OverrideMeshGateway",
                json!("local"),
                "string into Go struct field discoveryChainReadRequest.OverrideMeshGateway of type structs.MeshGatewayConfig",
            ),
        ),
    ];
    cases.push(case(
        "/v1/peering/token",
        "POST",
        "/v1/peering/token",
        json!({"PeerName": "peer-a"}),
        "Body decoding failed: ",
        (
            "PeerName",
            json!(1),
            "number into Go struct field PeeringGenerateTokenRequest.PeerName of type string",
        ),
    ));
    cases.push(case(
        "/v1/peering/establish",
        "POST",
        "/v1/peering/establish",
        json!({"PeerName": "peer-b", "PeeringToken": "eyJTZXJ2ZXJBZGRyZXNzZXMiOlsiMTAuMC4wLjE6ODUwMyJdLCJQZWVySUQiOiJwIn0="}),
        "Body decoding failed: ",
        (
            "Meta",
            json!("x"),
            "string into Go struct field PeeringEstablishRequest.Meta of type map[string]string",
        ),
    ));
    // A session's decoder ignores unknown keys but not wrong types.
    cases.push(Case {
        strict: false,
        ..case(
            "/v1/session/create",
            "PUT",
            "/v1/session/create",
            json!({"Name": "s"}),
            decode,
            (
                "NodeChecks",
                json!("serfHealth"),
                "string into Go struct field Session.NodeChecks of type []string",
            ),
        )
    });

    // Every write route has a case or a reason; every case reaches the route it names.
    let covered: BTreeSet<&str> = cases
        .iter()
        .map(|c| c.route)
        .chain(NOT_JSON.iter().map(|(route, _)| *route))
        .collect();
    for route in ROUTES {
        let writes = route
            .methods
            .iter()
            .any(|m| matches!(m.as_str(), "PUT" | "POST" | "DELETE"));
        let text = route_text(route.path);
        assert!(
            !writes || covered.contains(text),
            "{text}: a write route without a body case; add one above or to NOT_JSON"
        );
    }
    for case in &cases {
        let path = case.path.split('?').next().unwrap();
        let served = praetor::api::routes::find(path).map(|r| route_text(r.path));
        assert_eq!(served, Some(case.route), "{}: routed elsewhere", case.path);
    }

    for case in &cases {
        let what = format!("{} {}", case.method, case.path);
        // The base body is one Consul accepts: refusals below are about the changed field.
        let accepted = send(&agent, case.method, &case.path, &case.body);
        assert!(
            accepted.status != 400,
            "{what}: the base body was refused: {}",
            accepted.text()
        );

        let unknown = send(
            &agent,
            case.method,
            &case.path,
            &with(&case.body, "Bogus", json!(1)),
        );
        if case.strict {
            assert_eq!(unknown.status, 400, "{what}: {}", unknown.text());
            assert_eq!(
                unknown.text(),
                format!("{}json: unknown field \"Bogus\"", case.refusal),
                "{what}"
            );
        } else {
            assert_ne!(unknown.status, 400, "{what}: {}", unknown.text());
        }

        let (key, value, words) = &case.wrong;
        let wrong = send(
            &agent,
            case.method,
            &case.path,
            &with(&case.body, key, value.clone()),
        );
        assert_eq!(
            wrong.status,
            400,
            "{what} with {key}={value}: {}",
            wrong.text()
        );
        assert_eq!(
            wrong.text(),
            format!("{}json: cannot unmarshal {words}", case.refusal),
            "{what}"
        );
    }

    // Config entries keep Consul's own decoder: mapstructure's `invalid config key`.
    let entry = send(
        &agent,
        "PUT",
        "/v1/config",
        &json!({"Kind": "service-defaults", "Name": "web", "Protocol": "http", "Bogus": 1}),
    );
    assert_eq!(entry.status, 400, "{}", entry.text());
    assert_eq!(
        entry.text(),
        "Request decoding failed: 1 error occurred:\n\t* invalid config key \"Bogus\"\n\n"
    );
}

#[test]
fn every_spelling_consul_translates_is_accepted() {
    let agent = Agent::dev(&[]);
    agent_support_wait(&agent);
    let r = send(
        &agent,
        "PUT",
        "/v1/agent/service/register",
        &json!({
            "name": "web", "id": "web-1", "port": 8080, "enable_tag_override": true,
            "tagged_addresses": {"lan": {"address": "10.0.0.1", "port": 8080}},
            "checks": [
                {"name": "ttl", "ttl": "30s", "deregister_critical_service_after": "90m",
                 "service_id": "ignored"},
                {"name": "http", "http": "http://127.0.0.1:1/health", "interval": "30s",
                 "tls_skip_verify": true, "tls_server_name": "web.local"}
            ],
            "connect": {"sidecar_service": {"proxy": {"upstreams": [
                {"destination_name": "db", "local_bind_port": 19191}]}}}
        }),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let services = agent.get("/v1/agent/services").json();
    assert_eq!(services["web-1"]["EnableTagOverride"], true);
    let upstream = &services["web-1-sidecar-proxy"]["Proxy"]["Upstreams"][0];
    assert_eq!(upstream["DestinationName"], "db");
    assert_eq!(upstream["LocalBindPort"], 19191);
    let checks = agent.get("/v1/agent/checks").json();
    let http = checks
        .as_object()
        .unwrap()
        .values()
        .find(|c| c["Name"] == "http")
        .expect("the HTTP check");
    assert_eq!(http["ServiceID"], "web-1");

    let r = send(
        &agent,
        "PUT",
        "/v1/agent/check/register",
        &json!({"name": "script-free", "service_id": "web-1", "ttl": "10s",
                "Deregister_Critical_Service_After": "1h"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        agent.get("/v1/agent/checks").json()["script-free"]["ServiceID"],
        "web-1"
    );

    // A name Consul does not translate is refused, even when a lenient reading would guess.
    let r = send(
        &agent,
        "PUT",
        "/v1/agent/service/register",
        &json!({"Name": "web", "Port": 80, "enable-tag-override": true}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.text(),
        "Request decode failed: json: unknown field \"enable-tag-override\""
    );
}

/// Waits until the dev agent has a leader and its ACL bootstrap is done.
fn agent_support_wait(agent: &Agent) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = request(
            agent.addr(),
            "GET",
            "/v1/agent/self",
            b"",
            &[("X-Consul-Token", MANAGEMENT)],
        );
        if r.status == 200 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "agent not ready: {} {}",
            r.status,
            r.text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
