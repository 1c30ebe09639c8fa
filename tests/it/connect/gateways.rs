//! Gateways in the catalog, over real sockets against real `praetor agent -dev` processes,
//! with `dig` asking DNS: mesh, ingress and terminating gateway registrations; the
//! gateway-services rows derived from `ingress-gateway` and `terminating-gateway` entries
//! (`/v1/catalog/gateway-services/<gw>`, blocking and woken by an entry change);
//! `/v1/health/ingress/<s>` woken by a gateway's registration; `<s>.ingress.consul`;
//! terminating gateways in `/v1/health/connect/<s>` and `/v1/catalog/connect/<s>`; the
//! UI's `gateway-services-nodes/<gw>`; and the ACL checks Consul makes on them.
//!
//! Bounded: every blocking read has a wait, every wait a deadline.

use crate::agent_support;
use crate::common;
use crate::dns_common;

use agent_support::wait_for;
use common::{request, Agent, HttpResponse};
use dns_common::dig;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long a parked read may take to answer once what it watches changed.
const WAKE_LIMIT: Duration = Duration::from_secs(5);

fn put(agent: &Agent, path: &str, body: Value, token: Option<&str>) -> HttpResponse {
    let headers: Vec<(&str, &str)> = token.map(|t| ("X-Consul-Token", t)).into_iter().collect();
    request(
        agent.addr(),
        "PUT",
        path,
        body.to_string().as_bytes(),
        &headers,
    )
}

fn get(agent: &Agent, path: &str, token: Option<&str>) -> HttpResponse {
    let headers: Vec<(&str, &str)> = token.map(|t| ("X-Consul-Token", t)).into_iter().collect();
    request(agent.addr(), "GET", path, b"", &headers)
}

fn ok(response: HttpResponse, what: &str) -> HttpResponse {
    assert_eq!(response.status, 200, "{what}: {}", response.text());
    response
}

fn register(agent: &Agent, body: Value) {
    ok(
        put(agent, "/v1/agent/service/register", body, None),
        "register",
    );
}

/// `(service, port)` of each row of `/v1/catalog/gateway-services/<gateway>`.
fn linked(rows: &Value) -> Vec<(String, u64)> {
    rows.as_array()
        .map(|list| {
            list.iter()
                .map(|r| {
                    (
                        r["Service"]["Name"].as_str().unwrap().to_string(),
                        r["Port"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Starts a blocking read on another thread; its answer and how long it took.
fn blocking(addr: SocketAddr, path: String) -> std::thread::JoinHandle<(HttpResponse, Duration)> {
    std::thread::spawn(move || {
        let started = Instant::now();
        let response = request(addr, "GET", &path, b"", &[]);
        (response, started.elapsed())
    })
}

const INGRESS: &str = r#"{"Kind": "ingress-gateway", "Name": "ingress", "Listeners": [
    {"Port": 8080, "Protocol": "http", "Services": [
        {"Name": "web"}, {"Name": "api", "Hosts": ["api.example.com"]}]},
    {"Port": 9000, "Protocol": "tcp", "Services": [{"Name": "db"}]}]}"#;

#[test]
fn gateway_registrations_and_their_linked_services_follow_consul() {
    let agent = Agent::dev_with_dns(&[]);
    let dns = agent.dns_addr();

    // A mesh gateway keeps its LAN and WAN addresses as Consul stores them.
    register(
        &agent,
        json!({"Kind": "mesh-gateway", "Name": "mesh-gw", "Port": 8443, "Address": "10.0.0.9",
               "TaggedAddresses": {"lan": {"Address": "10.0.0.9", "Port": 8443},
                                   "wan": {"Address": "198.51.100.9", "Port": 443}}}),
    );
    let mesh = ok(get(&agent, "/v1/catalog/service/mesh-gw", None), "mesh").json();
    assert_eq!(mesh[0]["ServiceKind"], "mesh-gateway");
    let tagged = &mesh[0]["ServiceTaggedAddresses"];
    assert_eq!(tagged["lan"], json!({"Address": "10.0.0.9", "Port": 8443}));
    assert_eq!(
        tagged["wan"],
        json!({"Address": "198.51.100.9", "Port": 443})
    );
    // Consul's gateway rules.
    for (body, message) in [
        (
            json!({"Kind": "mesh-gateway", "Name": "bad", "Port": 0}),
            "Validation failed: Port must be non-zero for a mesh-gateway",
        ),
        (
            json!({"Kind": "terminating-gateway", "Name": "bad", "Port": 1,
                   "Proxy": {"DestinationServiceName": "web"}}),
            "Validation failed: The Proxy.DestinationServiceName configuration is invalid for a terminating-gateway",
        ),
        (
            json!({"Kind": "ingress-gateway", "Name": "bad",
                   "Connect": {"SidecarService": {}}}),
            "Validation failed: A ingress-gateway cannot have a sidecar service defined",
        ),
    ] {
        let refused = put(&agent, "/v1/agent/service/register", body, None);
        assert_eq!(refused.status, 400, "{}", refused.text());
        assert_eq!(refused.text().trim(), message);
    }

    // An ingress entry links its listed services at once, whether or not they exist yet.
    let unlinked = ok(
        get(&agent, "/v1/catalog/gateway-services/ingress", None),
        "none",
    );
    assert_eq!(unlinked.text().trim(), "null");
    let entry: Value = serde_json::from_str(INGRESS).unwrap();
    ok(put(&agent, "/v1/config", entry, None), "ingress entry");
    let rows = ok(
        get(&agent, "/v1/catalog/gateway-services/ingress", None),
        "rows",
    );
    let list = rows.json();
    assert_eq!(
        linked(&list),
        [
            ("api".to_string(), 8080),
            ("db".to_string(), 9000),
            ("web".to_string(), 8080)
        ]
    );
    let index = list[0]["CreateIndex"].clone();
    assert_eq!(
        list[0],
        json!({"Gateway": {"Name": "ingress"}, "Service": {"Name": "api"},
               "GatewayKind": "ingress-gateway", "Port": 8080, "Protocol": "http",
               "Hosts": ["api.example.com"], "CreateIndex": index, "ModifyIndex": index})
    );

    // A blocking read of the rows wakes when the entry changes.
    let parked = blocking(
        agent.addr(),
        format!(
            "/v1/catalog/gateway-services/ingress?index={}&wait=30s",
            rows.index()
        ),
    );
    std::thread::sleep(Duration::from_millis(300));
    let mut entry: Value = serde_json::from_str(INGRESS).unwrap();
    entry["Listeners"][0]["Services"]
        .as_array_mut()
        .unwrap()
        .push(json!({"Name": "admin"}));
    ok(put(&agent, "/v1/config", entry, None), "entry update");
    let (woken, took) = parked.join().unwrap();
    assert!(took < WAKE_LIMIT, "woke after {took:?}");
    assert_eq!(linked(&woken.json()).len(), 4, "{}", woken.text());

    // No ingress gateway is registered yet: the health view is empty, and blocks until one is.
    let empty = ok(get(&agent, "/v1/health/ingress/web", None), "health");
    assert_eq!(empty.json(), json!([]));
    let parked = blocking(
        agent.addr(),
        format!("/v1/health/ingress/web?index={}&wait=30s", empty.index()),
    );
    std::thread::sleep(Duration::from_millis(300));
    register(
        &agent,
        json!({"Kind": "ingress-gateway", "Name": "ingress", "ID": "ingress-1",
               "Address": "127.0.0.77", "Port": 21001}),
    );
    let (woken, took) = parked.join().unwrap();
    assert!(took < WAKE_LIMIT, "woke after {took:?}");
    let gateways = woken.json();
    assert_eq!(gateways.as_array().unwrap().len(), 1, "{gateways}");
    assert_eq!(gateways[0]["Service"]["Kind"], "ingress-gateway");
    assert_eq!(gateways[0]["Service"]["ID"], "ingress-1");
    // `?passing` and other services: the same gateway; a service it does not expose: none.
    let passing = ok(get(&agent, "/v1/health/ingress/db?passing", None), "db");
    assert_eq!(passing.json().as_array().unwrap().len(), 1);
    let nothing = ok(get(&agent, "/v1/health/ingress/other", None), "other");
    assert_eq!(nothing.json(), json!([]));

    // DNS: the ingress gateways' addresses, and their port in SRV.
    let a = dig(dns, &["+short", "web.ingress.consul", "A"]);
    assert_eq!(a.trim(), "127.0.0.77", "{a}");
    let a = dig(dns, &["+short", "api.ingress.dc1.consul", "A"]);
    assert_eq!(a.trim(), "127.0.0.77", "{a}");
    let srv = dig(dns, &["+short", "web.ingress.consul", "SRV"]);
    assert!(srv.contains(" 21001 "), "{srv}");
    let missing = dig(dns, &["other.ingress.consul", "A"]);
    assert!(missing.contains("status: NXDOMAIN"), "{missing}");

    // A terminating gateway: the linked service's TLS settings, and the gateway answers
    // for the service in the Connect views.
    ok(
        put(
            &agent,
            "/v1/config",
            json!({"Kind": "terminating-gateway", "Name": "egress", "Services": [
                {"Name": "billing", "CAFile": "/etc/billing-ca.pem", "SNI": "billing.internal"}]}),
            None,
        ),
        "terminating entry",
    );
    register(
        &agent,
        json!({"Name": "billing", "Address": "10.9.9.9", "Port": 443}),
    );
    register(
        &agent,
        json!({"Kind": "terminating-gateway", "Name": "egress", "Port": 9443,
               "Address": "127.0.0.78"}),
    );
    let egress = ok(
        get(&agent, "/v1/catalog/gateway-services/egress", None),
        "egress",
    )
    .json();
    assert_eq!(egress[0]["GatewayKind"], "terminating-gateway");
    assert_eq!(egress[0]["CAFile"], "/etc/billing-ca.pem");
    assert_eq!(egress[0]["SNI"], "billing.internal");
    assert_eq!(egress[0]["ServiceKind"], "service");
    assert!(egress[0].get("Port").is_none(), "{egress}");
    for path in ["/v1/health/connect/billing", "/v1/catalog/connect/billing"] {
        let answer = ok(get(&agent, path, None), path).json();
        let kinds: Vec<&str> = answer
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r["Service"]["Kind"]
                    .as_str()
                    .or_else(|| r["ServiceKind"].as_str())
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(kinds, ["terminating-gateway"], "{path}: {answer}");
    }

    // The UI's gateway view: each linked service with the addresses clients reach it at.
    let summaries = ok(
        get(
            &agent,
            "/v1/internal/ui/gateway-services-nodes/ingress",
            None,
        ),
        "ui",
    )
    .json();
    let names: Vec<&str> = summaries
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["Name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["admin", "api", "db", "web"]);
    assert_eq!(
        summaries[1]["GatewayConfig"]["Addresses"],
        json!(["api.example.com:8080"])
    );
    assert_eq!(
        summaries[3]["GatewayConfig"]["Addresses"],
        json!(["web.ingress.dc1.consul:8080"])
    );
    assert_eq!(summaries[3]["InstanceCount"], 0);
    let services = ok(get(&agent, "/v1/internal/ui/services", None), "services").json();
    let find = |name: &str| {
        services
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["Name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {services}"))
    };
    assert_eq!(find("billing")["ConnectedWithGateway"], true);
    assert_eq!(find("egress")["GatewayConfig"]["AssociatedServiceCount"], 1);
    assert_eq!(
        find("ingress")["GatewayConfig"]["AssociatedServiceCount"],
        4
    );

    // The entry goes: so do its rows, and the gateways stop answering for the services.
    let deleted = request(
        agent.addr(),
        "DELETE",
        "/v1/config/ingress-gateway/ingress",
        b"",
        &[],
    );
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    let gone = ok(
        get(&agent, "/v1/catalog/gateway-services/ingress", None),
        "gone",
    );
    assert_eq!(gone.text().trim(), "null");
    assert!(gone.index() > rows.index());
    let none = ok(get(&agent, "/v1/health/ingress/web", None), "none");
    assert_eq!(none.json(), json!([]));
    wait_for(WAKE_LIMIT, "web.ingress to stop answering", || {
        dig(dns, &["web.ingress.consul", "A"])
            .contains("status: NXDOMAIN")
            .then_some(())
    });
}

const MANAGEMENT: &str = "4c6e2b8a-0d4e-4f1e-9a77-2f0b5e6d1c3a";

fn token(agent: &Agent, rules: &str) -> String {
    let policy = ok(
        put(
            agent,
            "/v1/acl/policy",
            json!({"Name": format!("p-{}", rules.len()), "Rules": rules}),
            Some(MANAGEMENT),
        ),
        "policy",
    )
    .json();
    let token = ok(
        put(
            agent,
            "/v1/acl/token",
            json!({"Policies": [{"ID": policy["ID"]}]}),
            Some(MANAGEMENT),
        ),
        "token",
    )
    .json();
    token["SecretID"].as_str().unwrap().to_string()
}

#[test]
fn gateway_reads_are_checked_and_filtered_as_consul_does() {
    let agent = Agent::dev(&[
        "-hcl",
        &format!(
            "acl {{ enabled = true\n default_policy = \"deny\"\n tokens {{ initial_management = \"{MANAGEMENT}\" }} }}"
        ),
    ]);
    wait_for(Duration::from_secs(20), "the management token", || {
        (get(&agent, "/v1/acl/token/self", Some(MANAGEMENT)).status == 200).then_some(())
    });
    let entry: Value = serde_json::from_str(INGRESS).unwrap();
    ok(put(&agent, "/v1/config", entry, Some(MANAGEMENT)), "entry");
    let path = "/v1/catalog/gateway-services/ingress";

    // `service:read` on the gateway, and each row shown for `service:read` on its service.
    let reader = token(
        &agent,
        r#"service "ingress" { policy = "read" } service "web" { policy = "read" }"#,
    );
    let filtered = ok(get(&agent, path, Some(&reader)), "filtered");
    assert_eq!(linked(&filtered.json()), [("web".to_string(), 8080)]);
    assert_eq!(
        filtered.header("X-Consul-Results-Filtered-By-ACLs"),
        Some("true")
    );
    let all = ok(get(&agent, path, Some(MANAGEMENT)), "all");
    assert_eq!(linked(&all.json()).len(), 3);
    assert_eq!(all.header("X-Consul-Results-Filtered-By-ACLs"), None);
    let outsider = token(&agent, r#"service "web" { policy = "read" }"#);
    assert_eq!(get(&agent, path, Some(&outsider)).status, 403);
    assert_eq!(
        get(
            &agent,
            "/v1/internal/ui/gateway-services-nodes/ingress",
            Some(&outsider)
        )
        .status,
        403
    );
    // `/v1/health/ingress/<s>` needs `service:read` on the service.
    assert_eq!(
        get(&agent, "/v1/health/ingress/web", Some(&outsider)).status,
        200
    );
    assert_eq!(
        get(&agent, "/v1/health/ingress/db", Some(&outsider)).status,
        403
    );
}
