//! Every route of the HTTP API against ACLs, table-driven over the routing table itself.
//!
//! One `praetor agent -dev` runs with `default_policy = "deny"`. For every route in
//! `praetor::api::routes::ROUTES` the table below holds at least one request, sent four times:
//! without a token (the anonymous token), with a token that does not exist, with a token whose
//! policy grants something unrelated, and with a token whose policy grants exactly what the
//! request needs. A route without a case fails the test, so a new endpoint cannot ship
//! without its ACL behaviour being checked here.
//!
//! What each answer must be depends on the route's kind:
//! - checked: anonymous and insufficient → 403 `… lacks permission …`; unknown → 403
//!   `ACL not found`; sufficient → anything but a 403;
//! - filtered (lists): anonymous → 200 with nothing it may not read and no header (Consul
//!   hides the header from requests without a token); unknown → 403 `ACL not found`;
//!   insufficient → 200 with `X-Consul-Results-Filtered-By-ACLs: true` where rows exist;
//!   sufficient → 200 without the header;
//! - open (status, bootstrap, login, …): never a `lacks permission` denial.

use crate::acl_common;
use crate::common;

use acl_common::{as_token, call, token_with_rules, wait_for_token};
use common::{Agent, HttpResponse};
use praetor::api::routes::{Path, ROUTES};
use serde_json::{json, Value};
use std::collections::BTreeSet;

const MANAGEMENT: &str = "4c3c1c4e-2222-4e7a-9c59-0123456789ab";
const UNKNOWN: &str = "00000000-dead-beef-0000-000000000000";
const INSUFFICIENT_RULES: &str = "key \"unrelated\" {\n  policy = \"read\"\n}";
const FILTERED_HEADER: &str = "X-Consul-Results-Filtered-By-ACLs";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Checked,
    /// A list; `Some(hidden)`: whether the insufficient token must see the header.
    Filtered(Option<bool>),
    Open,
    /// Checked, and a sufficient token gets a 200 whose body never ends (a stream).
    Stream,
}

struct Case {
    /// The route's declared path, as in the table.
    route: &'static str,
    method: &'static str,
    path: String,
    body: Vec<u8>,
    /// What the sufficient token's policy grants.
    rules: &'static str,
    kind: Kind,
}

fn case(
    route: &'static str,
    method: &'static str,
    path: &str,
    body: &str,
    rules: &'static str,
    kind: Kind,
) -> Case {
    Case {
        route,
        method,
        path: path.to_string(),
        body: body.as_bytes().to_vec(),
        rules,
        kind,
    }
}

fn management(agent: &Agent, method: &str, path: &str, body: Value) -> Value {
    as_token(agent, MANAGEMENT, method, path, body)
}

/// A token whose only policy has `rules`: (SecretID, AccessorID).
fn token_with(agent: &Agent, name: &str, rules: &str) -> (String, String) {
    let (secret, accessor, _) = token_with_rules(agent, MANAGEMENT, name, rules);
    (secret, accessor)
}

fn route_text(path: Path) -> &'static str {
    match path {
        Path::Exact(text) | Path::Prefix(text) => text,
    }
}

fn lacks_permission(response: &HttpResponse) -> bool {
    response.status == 403 && response.text().contains("lacks permission")
}

/// The status a streaming route answers `token` with, read from the response head alone
/// (the body never ends); bounded by a 10 s read timeout.
fn stream_status(agent: &Agent, case: &Case, token: &str) -> u16 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(agent.addr()).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "{} {} HTTP/1.1\r\nHost: test\r\nX-Consul-Token: {token}\r\nContent-Length: 0\r\n\r\n",
        case.method, case.path
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 1024];
    while !received.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = stream
            .read(&mut buffer)
            .expect("the response head within 10 s");
        assert!(read > 0, "the stream closed before its head");
        received.extend_from_slice(&buffer[..read]);
    }
    let line = String::from_utf8_lossy(&received);
    line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap()
}

fn check(agent: &Agent, case: &Case, insufficient: &str, sufficient: &str) {
    let what = format!("{} {} ({})", case.method, case.path, case.route);
    let send = |token: Option<&str>| call(agent, case.method, &case.path, &case.body, token);
    match case.kind {
        Kind::Open => {
            for token in [None, Some(sufficient)] {
                let answer = send(token);
                assert!(
                    !lacks_permission(&answer),
                    "{what}: open, yet {}",
                    answer.text()
                );
            }
        }
        Kind::Checked => {
            let anonymous = send(None);
            assert!(
                lacks_permission(&anonymous),
                "{what} anonymous: {} {}",
                anonymous.status,
                anonymous.text()
            );
            let unknown = send(Some(UNKNOWN));
            assert_eq!(
                (unknown.status, unknown.text()),
                (403, "ACL not found".to_string()),
                "{what} unknown"
            );
            let denied = send(Some(insufficient));
            assert!(
                lacks_permission(&denied),
                "{what} insufficient: {} {}",
                denied.status,
                denied.text()
            );
            let allowed = send(Some(sufficient));
            assert_ne!(allowed.status, 403, "{what} sufficient: {}", allowed.text());
        }
        Kind::Stream => {
            for (token, expected) in [(None, "anonymous"), (Some(insufficient), "insufficient")] {
                let answer = send(token);
                assert!(
                    lacks_permission(&answer),
                    "{what} {expected}: {} {}",
                    answer.status,
                    answer.text()
                );
            }
            let unknown = send(Some(UNKNOWN));
            assert_eq!(
                (unknown.status, unknown.text()),
                (403, "ACL not found".to_string()),
                "{what} unknown"
            );
            assert_eq!(
                stream_status(agent, case, sufficient),
                200,
                "{what} sufficient"
            );
        }
        Kind::Filtered(hidden) => {
            let anonymous = send(None);
            assert_eq!(
                anonymous.status,
                200,
                "{what} anonymous: {}",
                anonymous.text()
            );
            assert_eq!(
                anonymous.header(FILTERED_HEADER),
                None,
                "{what}: no header without a token"
            );
            let unknown = send(Some(UNKNOWN));
            assert_eq!(
                (unknown.status, unknown.text()),
                (403, "ACL not found".to_string()),
                "{what} unknown"
            );
            let denied = send(Some(insufficient));
            assert_eq!(denied.status, 200, "{what} insufficient: {}", denied.text());
            if let Some(hidden) = hidden {
                assert_eq!(
                    denied.header(FILTERED_HEADER).is_some(),
                    hidden,
                    "{what} insufficient: header"
                );
            }
            let allowed = send(Some(sufficient));
            assert_eq!(allowed.status, 200, "{what} sufficient: {}", allowed.text());
            assert_eq!(
                allowed.header(FILTERED_HEADER),
                None,
                "{what} sufficient: nothing hidden"
            );
            if hidden == Some(true) {
                assert_ne!(
                    allowed.body, denied.body,
                    "{what}: the sufficient token sees more"
                );
            }
        }
    }
}

#[test]
fn every_route_answers_no_unknown_insufficient_and_sufficient_tokens_as_its_rule_says() {
    let agent = Agent::dev(&[
        "-hcl",
        &format!(
            "acl {{ enabled = true\n default_policy = \"deny\"\n tokens {{ initial_management = \"{MANAGEMENT}\" }} }}"
        ),
    ]);
    wait_for_token(&agent, MANAGEMENT);

    // Rows for the lists to hide, and objects for the reads to find.
    management(&agent, "PUT", "/v1/kv/app/x", json!("v"));
    management(
        &agent,
        "PUT",
        "/v1/catalog/register",
        json!({"Node": "n1", "Address": "10.0.0.1",
               "Service": {"ID": "web1", "Service": "web", "Port": 80},
               "Checks": [{"CheckID": "web-check", "Name": "web", "ServiceID": "web1", "Status": "passing"},
                          {"CheckID": "node-check", "Name": "node", "Status": "passing"}]}),
    );
    let session = |agent: &Agent| {
        management(
            agent,
            "PUT",
            "/v1/session/create",
            json!({"Node": "n1", "Checks": []}),
        )["ID"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let kept_session = session(&agent);
    let doomed_session = session(&agent);
    management(&agent, "PUT", "/v1/event/fire/deploy", json!(null));
    management(
        &agent,
        "PUT",
        "/v1/agent/service/register",
        json!({"Name": "local-web", "Port": 81}),
    );
    management(
        &agent,
        "PUT",
        "/v1/agent/check/register",
        json!({"Name": "local-check", "TTL": "60s"}),
    );
    let (insufficient, insufficient_accessor) =
        token_with(&agent, "insufficient", INSUFFICIENT_RULES);
    let policy_id = management(
        &agent,
        "GET",
        "/v1/acl/policy/name/insufficient",
        json!(null),
    )["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let role_id = management(
        &agent,
        "PUT",
        "/v1/acl/role",
        json!({"Name": "r1", "Policies": [{"Name": "insufficient"}]}),
    )["ID"]
        .as_str()
        .unwrap()
        .to_string();
    management(
        &agent,
        "PUT",
        "/v1/acl/auth-method",
        json!({"Name": "m1", "Type": "jwt", "Config": {"JWTValidationPubKeys": [common::jwt_public_key_pem()]}}),
    );
    let rule_id = management(
        &agent,
        "PUT",
        "/v1/acl/binding-rule",
        json!({"AuthMethod": "m1", "BindType": "service", "BindName": "web"}),
    )["ID"]
        .as_str()
        .unwrap()
        .to_string();

    let query_id = management(
        &agent,
        "POST",
        "/v1/query",
        json!({"Name": "q1", "Service": {"Service": "web"}}),
    )["ID"]
        .as_str()
        .unwrap()
        .to_string();

    // The mesh: a service-defaults entry, an intention, and a CSR for the internal sign call.
    management(
        &agent,
        "PUT",
        "/v1/config",
        json!({"Kind": "service-defaults", "Name": "web", "Protocol": "http"}),
    );
    let intention_id = management(
        &agent,
        "POST",
        "/v1/connect/intentions",
        json!({"SourceName": "web", "DestinationName": "db", "Action": "allow"}),
    )["ID"]
        .as_str()
        .unwrap()
        .to_string();

    use Kind::{Checked, Filtered, Open, Stream};
    const AGENT_READ: &str = "agent_prefix \"\" {\n  policy = \"read\"\n}";
    const AGENT_WRITE: &str = "agent_prefix \"\" {\n  policy = \"write\"\n}";
    const CATALOG_READ: &str =
        "node_prefix \"\" {\n  policy = \"read\"\n}\nservice_prefix \"\" {\n  policy = \"read\"\n}";
    const ACL_READ: &str = "acl = \"read\"";
    const ACL_WRITE: &str = "acl = \"write\"";
    let hidden = Filtered(Some(true));
    let cases = vec![
        case(
            "/v1/kv/",
            "GET",
            "/v1/kv/app/x",
            "",
            "key_prefix \"app/\" {\n  policy = \"read\"\n}",
            Checked,
        ),
        case(
            "/v1/kv/",
            "PUT",
            "/v1/kv/app/y",
            "1",
            "key \"app/y\" {\n  policy = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/kv",
            "GET",
            "/v1/kv?keys",
            "",
            "key_prefix \"\" {\n  policy = \"read\"\n}",
            hidden,
        ),
        case(
            "/v1/catalog/register",
            "PUT",
            "/v1/catalog/register",
            r#"{"Node":"n2","Address":"10.0.0.2"}"#,
            "node \"n2\" {\n  policy = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/catalog/deregister",
            "PUT",
            "/v1/catalog/deregister",
            r#"{"Node":"n9"}"#,
            "node \"n9\" {\n  policy = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/catalog/nodes",
            "GET",
            "/v1/catalog/nodes",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/catalog/services",
            "GET",
            "/v1/catalog/services",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/catalog/service/",
            "GET",
            "/v1/catalog/service/web",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/catalog/connect/",
            "GET",
            "/v1/catalog/connect/web",
            "",
            CATALOG_READ,
            Filtered(None),
        ),
        case(
            "/v1/catalog/node/",
            "GET",
            "/v1/catalog/node/n1",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/catalog/node-services/",
            "GET",
            "/v1/catalog/node-services/n1",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/health/service/",
            "GET",
            "/v1/health/service/web",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/health/connect/",
            "GET",
            "/v1/health/connect/web",
            "",
            CATALOG_READ,
            Filtered(None),
        ),
        // An ingress query needs `service:read` on the service (Consul's check), and a
        // gateway's linked services `service:read` on the gateway.
        case(
            "/v1/health/ingress/",
            "GET",
            "/v1/health/ingress/web",
            "",
            "service \"web\" {\n  policy = \"read\"\n}",
            Checked,
        ),
        case(
            "/v1/catalog/gateway-services/",
            "GET",
            "/v1/catalog/gateway-services/ingress",
            "",
            "service \"ingress\" {\n  policy = \"read\"\n}",
            Checked,
        ),
        case(
            "/v1/health/checks/",
            "GET",
            "/v1/health/checks/web",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/health/node/",
            "GET",
            "/v1/health/node/n1",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/health/state/",
            "GET",
            "/v1/health/state/any",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/agent/members",
            "GET",
            "/v1/agent/members",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/agent/join/",
            "PUT",
            "/v1/agent/join/127.0.0.1:1",
            "",
            AGENT_WRITE,
            Checked,
        ),
        case(
            "/v1/agent/force-leave/",
            "PUT",
            "/v1/agent/force-leave/nosuchnode",
            "",
            "operator = \"write\"",
            Checked,
        ),
        case(
            "/v1/event/fire/",
            "PUT",
            "/v1/event/fire/deploy",
            "",
            "event \"deploy\" {\n  policy = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/event/fire",
            "PUT",
            "/v1/event/fire",
            "",
            "event_prefix \"\" {\n  policy = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/event/list",
            "GET",
            "/v1/event/list",
            "",
            "event_prefix \"\" {\n  policy = \"read\"\n}",
            hidden,
        ),
        case(
            "/v1/operator/keyring",
            "GET",
            "/v1/operator/keyring",
            "",
            "keyring = \"read\"",
            Checked,
        ),
        case(
            "/v1/coordinate/node/",
            "GET",
            "/v1/coordinate/node/n1",
            "",
            "node \"n1\" {\n  policy = \"read\"\n}",
            Checked,
        ),
        case(
            "/v1/coordinate/nodes",
            "GET",
            "/v1/coordinate/nodes",
            "",
            CATALOG_READ,
            Filtered(None),
        ),
        case(
            "/v1/coordinate/update",
            "PUT",
            "/v1/coordinate/update",
            r#"{"Node":"n1","Segment":"","Coord":{"Vec":[0,0,0,0,0,0,0,0],"Error":1.5,"Adjustment":0,"Height":0.00001}}"#,
            "node \"n1\" {\n  policy = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/query",
            "GET",
            "/v1/query",
            "",
            "query_prefix \"\" {\n  policy = \"read\"\n}",
            Filtered(Some(true)),
        ),
        case(
            "/v1/query/",
            "GET",
            &format!("/v1/query/{query_id}"),
            "",
            "query \"q1\" {\n  policy = \"read\"\n}",
            Checked,
        ),
        case(
            "/v1/coordinate/datacenters",
            "GET",
            "/v1/coordinate/datacenters",
            "",
            "",
            Open,
        ),
        case(
            "/v1/session/create",
            "PUT",
            "/v1/session/create",
            r#"{"Node":"n1","Checks":[]}"#,
            "session \"n1\" {\n  policy = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/session/destroy/",
            "PUT",
            &format!("/v1/session/destroy/{doomed_session}"),
            "",
            "session \"n1\" {\n  policy = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/session/destroy",
            "PUT",
            "/v1/session/destroy",
            "",
            "",
            Open,
        ),
        case(
            "/v1/session/renew/",
            "PUT",
            &format!("/v1/session/renew/{kept_session}"),
            "",
            "session \"n1\" {\n  policy = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/session/renew",
            "PUT",
            "/v1/session/renew",
            "",
            "",
            Open,
        ),
        case(
            "/v1/session/info/",
            "GET",
            &format!("/v1/session/info/{kept_session}"),
            "",
            "session \"n1\" {\n  policy = \"read\"\n}",
            hidden,
        ),
        case("/v1/session/info", "GET", "/v1/session/info", "", "", Open),
        case(
            "/v1/session/node/",
            "GET",
            "/v1/session/node/n1",
            "",
            "session \"n1\" {\n  policy = \"read\"\n}",
            hidden,
        ),
        case("/v1/session/node", "GET", "/v1/session/node", "", "", Open),
        case(
            "/v1/session/list",
            "GET",
            "/v1/session/list",
            "",
            "session_prefix \"\" {\n  policy = \"read\"\n}",
            hidden,
        ),
        case(
            "/v1/txn",
            "PUT",
            "/v1/txn",
            r#"[{"KV":{"Verb":"get","Key":"app/x"}}]"#,
            "key_prefix \"app/\" {\n  policy = \"read\"\n}",
            Checked,
        ),
        case(
            "/v1/agent/services",
            "GET",
            "/v1/agent/services",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/agent/checks",
            "GET",
            "/v1/agent/checks",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/agent/service/register",
            "PUT",
            "/v1/agent/service/register",
            r#"{"Name":"svc-x"}"#,
            "service \"svc-x\" {\n  policy = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/agent/check/register",
            "PUT",
            "/v1/agent/check/register",
            r#"{"Name":"c-x","TTL":"60s"}"#,
            AGENT_WRITE,
            Checked,
        ),
        case(
            "/v1/agent/maintenance",
            "PUT",
            "/v1/agent/maintenance?enable=false",
            "",
            AGENT_WRITE,
            Checked,
        ),
        case(
            "/v1/agent/reload",
            "PUT",
            "/v1/agent/reload",
            "",
            AGENT_WRITE,
            Checked,
        ),
        case(
            "/v1/agent/metrics",
            "GET",
            "/v1/agent/metrics",
            "",
            AGENT_READ,
            Checked,
        ),
        case(
            "/v1/agent/monitor",
            "GET",
            "/v1/agent/monitor",
            "",
            AGENT_READ,
            Stream,
        ),
        case(
            "/v1/agent/host",
            "GET",
            "/v1/agent/host",
            "",
            "operator = \"read\"",
            Checked,
        ),
        case(
            "/v1/agent/version",
            "GET",
            "/v1/agent/version",
            "",
            "",
            Open,
        ),
        case(
            "/v1/agent/metrics/stream",
            "GET",
            "/v1/agent/metrics/stream",
            "",
            AGENT_READ,
            Stream,
        ),
        case(
            "/v1/agent/service/deregister/",
            "PUT",
            "/v1/agent/service/deregister/nosuch",
            "",
            AGENT_WRITE,
            Checked,
        ),
        case(
            "/v1/agent/service/maintenance/",
            "PUT",
            "/v1/agent/service/maintenance/nosuch?enable=true",
            "",
            AGENT_WRITE,
            Checked,
        ),
        case(
            "/v1/agent/service/",
            "GET",
            "/v1/agent/service/local-web",
            "",
            AGENT_READ,
            Checked,
        ),
        case(
            "/v1/agent/check/deregister/",
            "PUT",
            "/v1/agent/check/deregister/nosuch",
            "",
            AGENT_WRITE,
            Checked,
        ),
        case(
            "/v1/agent/check/update/",
            "PUT",
            "/v1/agent/check/update/nosuch",
            r#"{"Status":"passing"}"#,
            AGENT_WRITE,
            Checked,
        ),
        case(
            "/v1/agent/check/pass/",
            "PUT",
            "/v1/agent/check/pass/nosuch",
            "",
            AGENT_WRITE,
            Checked,
        ),
        case(
            "/v1/agent/check/warn/",
            "PUT",
            "/v1/agent/check/warn/nosuch",
            "",
            AGENT_WRITE,
            Checked,
        ),
        case(
            "/v1/agent/check/fail/",
            "PUT",
            "/v1/agent/check/fail/nosuch",
            "",
            AGENT_WRITE,
            Checked,
        ),
        case(
            "/v1/agent/health/service/name/",
            "GET",
            "/v1/agent/health/service/name/local-web",
            "",
            "service \"local-web\" {\n  policy = \"read\"\n}",
            Checked,
        ),
        case(
            "/v1/agent/health/service/id/",
            "GET",
            "/v1/agent/health/service/id/local-web",
            "",
            AGENT_READ,
            Checked,
        ),
        case(
            "/v1/status/leader",
            "GET",
            "/v1/status/leader",
            "",
            "",
            Open,
        ),
        case("/v1/status/peers", "GET", "/v1/status/peers", "", "", Open),
        case(
            "/v1/agent/self",
            "GET",
            "/v1/agent/self",
            "",
            AGENT_READ,
            Checked,
        ),
        case(
            "/v1/catalog/datacenters",
            "GET",
            "/v1/catalog/datacenters",
            "",
            "",
            Open,
        ),
        case(
            "/v1/operator/raft/configuration",
            "GET",
            "/v1/operator/raft/configuration",
            "",
            "operator = \"read\"",
            Checked,
        ),
        case(
            "/v1/operator/autopilot/state",
            "GET",
            "/v1/operator/autopilot/state",
            "",
            "operator = \"read\"",
            Checked,
        ),
        case(
            "/v1/operator/autopilot/configuration",
            "GET",
            "/v1/operator/autopilot/configuration",
            "",
            "operator = \"read\"",
            Checked,
        ),
        case(
            "/v1/operator/usage",
            "GET",
            "/v1/operator/usage",
            "",
            "operator = \"read\"",
            Checked,
        ),
        case(
            "/v1/operator/autopilot/health",
            "GET",
            "/v1/operator/autopilot/health",
            "",
            "operator = \"read\"",
            Checked,
        ),
        case(
            "/v1/operator/raft/peer",
            "DELETE",
            "/v1/operator/raft/peer?id=nosuch",
            "",
            "operator = \"write\"",
            Checked,
        ),
        case(
            "/v1/operator/raft/transfer-leader",
            "POST",
            "/v1/operator/raft/transfer-leader?id=nosuch",
            "",
            "operator = \"write\"",
            Checked,
        ),
        case(
            "/v1/snapshot",
            "GET",
            "/v1/snapshot",
            "",
            ACL_WRITE,
            Checked,
        ),
        case(
            "/v1/agent/debug/faults",
            "GET",
            "/v1/agent/debug/faults",
            "",
            "operator = \"read\"",
            Checked,
        ),
        case(
            "/v1/internal/ui/",
            "GET",
            "/v1/internal/ui/services",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/internal/ui/",
            "GET",
            "/v1/internal/ui/nodes",
            "",
            CATALOG_READ,
            hidden,
        ),
        case(
            "/v1/internal/ui/",
            "GET",
            "/v1/internal/ui/catalog-overview",
            "",
            "operator = \"read\"",
            Checked,
        ),
        case(
            "/v1/acl/bootstrap",
            "PUT",
            "/v1/acl/bootstrap",
            "",
            "",
            Open,
        ),
        case(
            "/v1/acl/replication",
            "GET",
            "/v1/acl/replication",
            "",
            "",
            Open,
        ),
        case(
            "/v1/acl/login",
            "POST",
            "/v1/acl/login",
            r#"{"AuthMethod":"m1","BearerToken":"not.a.jwt"}"#,
            "",
            Open,
        ),
        case("/v1/acl/logout", "POST", "/v1/acl/logout", "", "", Open),
        case(
            "/v1/acl/token/self",
            "GET",
            "/v1/acl/token/self",
            "",
            "",
            Open,
        ),
        case(
            "/v1/acl/token",
            "PUT",
            "/v1/acl/token",
            r#"{"Policies":[{"Name":"insufficient"}]}"#,
            ACL_WRITE,
            Checked,
        ),
        case(
            "/v1/acl/tokens",
            "GET",
            "/v1/acl/tokens",
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/token/",
            "GET",
            &format!("/v1/acl/token/{insufficient_accessor}"),
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/policy",
            "PUT",
            "/v1/acl/policy",
            r#"{"Name":"made-by-case","Rules":""}"#,
            ACL_WRITE,
            Checked,
        ),
        case(
            "/v1/acl/policies",
            "GET",
            "/v1/acl/policies",
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/policy/name/",
            "GET",
            "/v1/acl/policy/name/insufficient",
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/policy/",
            "GET",
            &format!("/v1/acl/policy/{policy_id}"),
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/role",
            "PUT",
            "/v1/acl/role",
            r#"{"Name":"r2","Policies":[{"Name":"insufficient"}]}"#,
            ACL_WRITE,
            Checked,
        ),
        case(
            "/v1/acl/roles",
            "GET",
            "/v1/acl/roles",
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/role/name/",
            "GET",
            "/v1/acl/role/name/r1",
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/role/",
            "GET",
            &format!("/v1/acl/role/{role_id}"),
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/templated-policies",
            "GET",
            "/v1/acl/templated-policies",
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/templated-policy/name/",
            "GET",
            "/v1/acl/templated-policy/name/builtin/service",
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/templated-policy/preview/",
            "POST",
            "/v1/acl/templated-policy/preview/builtin/service",
            r#"{"Name":"web"}"#,
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/auth-method",
            "PUT",
            "/v1/acl/auth-method",
            r#"{"Name":"m2","Type":"jwt"}"#,
            ACL_WRITE,
            Checked,
        ),
        case(
            "/v1/acl/auth-methods",
            "GET",
            "/v1/acl/auth-methods",
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/auth-method/",
            "GET",
            "/v1/acl/auth-method/m1",
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/binding-rule",
            "PUT",
            "/v1/acl/binding-rule",
            r#"{"AuthMethod":"m1","BindType":"service","BindName":"x"}"#,
            ACL_WRITE,
            Checked,
        ),
        case(
            "/v1/acl/binding-rules",
            "GET",
            "/v1/acl/binding-rules",
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/acl/binding-rule/",
            "GET",
            &format!("/v1/acl/binding-rule/{rule_id}"),
            "",
            ACL_READ,
            Checked,
        ),
        case(
            "/v1/agent/token/",
            "PUT",
            "/v1/agent/token/replication",
            r#"{"Token":""}"#,
            AGENT_WRITE,
            Checked,
        ),
        // The mesh (Consul's rules: a config entry's kind decides; intentions are the
        // destination's `intentions` rule; the CA's roots are public).
        case(
            "/v1/config",
            "PUT",
            "/v1/config",
            r#"{"Kind":"service-defaults","Name":"api","Protocol":"tcp"}"#,
            "service \"api\" {\n  policy = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/config/",
            "GET",
            "/v1/config/service-defaults/web",
            "",
            "service \"web\" {\n  policy = \"read\"\n}",
            Checked,
        ),
        case(
            "/v1/config/",
            "GET",
            "/v1/config/service-defaults",
            "",
            "service_prefix \"\" {\n  policy = \"read\"\n}",
            hidden,
        ),
        case(
            "/v1/connect/intentions",
            "GET",
            "/v1/connect/intentions",
            "",
            "service_prefix \"\" {\n  policy = \"read\"\n  intentions = \"read\"\n}",
            hidden,
        ),
        case(
            "/v1/connect/intentions",
            "POST",
            "/v1/connect/intentions",
            r#"{"SourceName":"api","DestinationName":"cache","Action":"deny"}"#,
            "service \"cache\" {\n  policy = \"read\"\n  intentions = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/connect/intentions/exact",
            "GET",
            "/v1/connect/intentions/exact?source=web&destination=db",
            "",
            "service \"db\" {\n  policy = \"read\"\n  intentions = \"read\"\n}",
            Checked,
        ),
        case(
            "/v1/connect/intentions/match",
            "GET",
            "/v1/connect/intentions/match?by=destination&name=db",
            "",
            "service \"db\" {\n  policy = \"read\"\n  intentions = \"read\"\n}",
            Checked,
        ),
        case(
            "/v1/connect/intentions/check",
            "GET",
            "/v1/connect/intentions/check?source=web&destination=db",
            "",
            "service \"db\" {\n  policy = \"read\"\n}",
            Checked,
        ),
        case(
            "/v1/connect/intentions/",
            "GET",
            &format!("/v1/connect/intentions/{intention_id}"),
            "",
            "service \"db\" {\n  policy = \"read\"\n  intentions = \"read\"\n}",
            Checked,
        ),
        case(
            "/v1/connect/ca/roots",
            "GET",
            "/v1/connect/ca/roots",
            "",
            "",
            Open,
        ),
        case(
            "/v1/connect/ca/configuration",
            "GET",
            "/v1/connect/ca/configuration",
            "",
            "operator = \"read\"",
            Checked,
        ),
        case(
            "/v1/agent/connect/ca/roots",
            "GET",
            "/v1/agent/connect/ca/roots",
            "",
            "",
            Open,
        ),
        case(
            "/v1/agent/connect/authorize",
            "POST",
            "/v1/agent/connect/authorize",
            r#"{"Target":"db","ClientCertURI":"spiffe://11111111-2222-3333-4444-555555555555.consul/ns/default/dc/dc1/svc/web"}"#,
            "service \"db\" {\n  policy = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/agent/connect/ca/leaf/",
            "GET",
            "/v1/agent/connect/ca/leaf/web",
            "",
            "service \"web\" {\n  policy = \"write\"\n}",
            Checked,
        ),
        case(
            "/v1/internal/federation-states",
            "GET",
            "/v1/internal/federation-states",
            "",
            "operator = \"read\"",
            Checked,
        ),
        case(
            "/v1/internal/federation-states/mesh-gateways",
            "GET",
            "/v1/internal/federation-states/mesh-gateways",
            "",
            CATALOG_READ,
            Filtered(None),
        ),
        case(
            "/v1/internal/federation-state/",
            "GET",
            "/v1/internal/federation-state/dc1",
            "",
            "operator = \"read\"",
            Checked,
        ),
        // What the exported-services entry exports: `mesh:read`, as Consul's gRPC read.
        case(
            "/v1/exported-services",
            "GET",
            "/v1/exported-services",
            "",
            "mesh = \"read\"",
            Checked,
        ),
        // Cluster peering: `peering:read` to read, `peering:write` for everything else.
        case(
            "/v1/peering/token",
            "POST",
            "/v1/peering/token",
            r#"{"PeerName":"p1"}"#,
            "peering = \"write\"",
            Checked,
        ),
        case(
            "/v1/peering/establish",
            "POST",
            "/v1/peering/establish",
            r#"{"PeerName":"p1","PeeringToken":"not a token"}"#,
            "peering = \"write\"",
            Checked,
        ),
        case(
            "/v1/peerings",
            "GET",
            "/v1/peerings",
            "",
            "peering = \"read\"",
            Checked,
        ),
        case(
            "/v1/peering/",
            "GET",
            "/v1/peering/p1",
            "",
            "peering = \"read\"",
            Checked,
        ),
        case(
            "/v1/peering/",
            "DELETE",
            "/v1/peering/p1",
            "",
            "peering = \"write\"",
            Checked,
        ),
        case(
            "/v1/discovery-chain/",
            "GET",
            "/v1/discovery-chain/web",
            "",
            "service \"web\" {\n  policy = \"read\"\n}",
            Checked,
        ),
        // Last: a sufficient token makes the agent leave.
        case(
            "/v1/agent/leave",
            "PUT",
            "/v1/agent/leave",
            "",
            AGENT_WRITE,
            Checked,
        ),
    ];

    // Every route has a case, and every case names a route that serves its path.
    let covered: BTreeSet<&str> = cases.iter().map(|c| c.route).collect();
    for route in ROUTES {
        let text = route_text(route.path);
        assert!(
            covered.contains(text),
            "{text}: a route without an ACL case; add one above"
        );
    }
    for case in &cases {
        let path = case.path.split('?').next().unwrap();
        let served = praetor::api::routes::find(path).map(|r| route_text(r.path));
        assert_eq!(served, Some(case.route), "{}: routed elsewhere", case.path);
    }

    for (i, case) in cases.iter().enumerate() {
        let (sufficient, _) = if case.rules.is_empty() {
            (MANAGEMENT.to_string(), String::new())
        } else {
            token_with(&agent, &format!("case-{i}"), case.rules)
        };
        check(&agent, case, &insufficient, &sufficient);
    }
}

/// A prepared query's execution shows only the instances its token may read: the query's
/// own token when it was saved with one, else the caller's. Without the filter, a caller
/// with no `service:read` listed a service's instances through any query that names it.
#[test]
fn a_query_execution_shows_only_what_its_token_may_read() {
    let agent = Agent::dev(&[
        "-hcl",
        &format!(
            "acl {{ enabled = true\n default_policy = \"deny\"\n tokens {{ initial_management = \"{MANAGEMENT}\" }} }}"
        ),
    ]);
    wait_for_token(&agent, MANAGEMENT);
    management(
        &agent,
        "PUT",
        "/v1/catalog/register",
        json!({"Node": "n1", "Address": "10.0.0.1",
               "Service": {"ID": "db1", "Service": "db", "Port": 5432}}),
    );
    management(
        &agent,
        "POST",
        "/v1/query",
        json!({"Name": "open-db", "Service": {"Service": "db"}}),
    );
    let (reader, _) = token_with(
        &agent,
        "db-reader",
        "service \"db\" { policy = \"read\" }\nnode_prefix \"\" { policy = \"read\" }",
    );
    management(
        &agent,
        "POST",
        "/v1/query",
        json!({"Name": "db-as-reader", "Token": reader, "Service": {"Service": "db"}}),
    );
    let (outsider, _) = token_with(&agent, "outsider", "key_prefix \"\" { policy = \"read\" }");

    let execute = |name: &str, token: &str| {
        let response = call(
            &agent,
            "GET",
            &format!("/v1/query/{name}/execute"),
            b"",
            Some(token),
        );
        assert_eq!(response.status, 200, "{name}: {}", response.text());
        let body: Value = serde_json::from_slice(&response.body).unwrap();
        let nodes = body["Nodes"].as_array().unwrap().len();
        (
            nodes,
            response
                .header("X-Consul-Results-Filtered-By-ACLs")
                .is_some(),
            body,
        )
    };
    // The caller's token rules a query saved without one.
    let (nodes, header, body) = execute("open-db", &outsider);
    assert_eq!(nodes, 0, "an outsider listed db through a query: {body}");
    assert!(header, "the answer says rows were hidden");
    assert_eq!(body["ResultsFilteredByACLs"], json!(true));
    let (nodes, header, _) = execute("open-db", &reader);
    assert_eq!((nodes, header), (1, false));
    // A query saved with a token runs with it, whoever executes it.
    let (nodes, _, body) = execute("db-as-reader", &outsider);
    assert_eq!(nodes, 1, "the query's own token may read db: {body}");
}
