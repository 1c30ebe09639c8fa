//! The catalog's, health's, UI's, coordinate datacenters' and federation states' reads as
//! Consul's typed calls everywhere: on a client agent in its own datacenter, and naming
//! another datacenter (`?dc=dc2`) on a server or a client agent. Every variant — the
//! Connect and ingress views, `?near`, `?cached`, `?filter` on the service list, `?tag` on a
//! service's checks, a node's services as a list, a gateway's services, the UI's nodes, the
//! federation states — answers on the client agent what dc1's server answers for the same
//! request, and with `?dc=dc2` what dc2's server answers; registrations naming dc2 (by
//! `?dc=` or by the body's `Datacenter`) land in dc2. With ACLs, the client agent's refusals and
//! filtered answers are its server's. An independent msgpack-rpc client
//! (`tests/python/catalog_rpc.py`) calls the new methods on a server's port in Consul's
//! shapes.

use crate::acl_common::{self, call, same_answer, same_gets, token_with_rules, wait_for_token};
use crate::common;

use super::consul_rpc::TwoDatacenters;
use super::node_name;
use common::{Agent, Cluster, TempDir};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn put_ok(agent: &Agent, path: &str, body: &Value) {
    let r = agent.put(path, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "PUT {path} at {}: {}", agent.ip, r.text());
}

/// A service `web` (tag `x`, a check), its sidecar proxy, and an ingress gateway `gw` whose
/// entry links `web`, registered on `server` on a node named `node`.
fn register_mesh(server: &Agent, node: &str, address: &str) {
    let services = [
        json!({"ID": "web-1", "Service": "web", "Port": 80, "Tags": ["x"]}),
        json!({"ID": "web-proxy", "Service": "web-proxy", "Port": 21000, "Kind": "connect-proxy",
               "Proxy": {"DestinationServiceName": "web"}}),
        json!({"ID": "gw", "Service": "gw", "Port": 8080, "Kind": "ingress-gateway"}),
    ];
    for service in services {
        let id = service["ID"].clone();
        put_ok(
            server,
            "/v1/catalog/register",
            &json!({"Node": node, "Address": address, "Service": service,
                    "Check": {"CheckID": format!("check-{}", id.as_str().unwrap()),
                              "Name": "alive", "Status": "passing", "ServiceID": id}}),
        );
    }
    put_ok(
        server,
        "/v1/config",
        &json!({"Kind": "ingress-gateway", "Name": "gw",
                "Listeners": [{"Port": 8080, "Protocol": "tcp", "Services": [{"Name": "web"}]}]}),
    );
}

#[test]
fn catalog_and_ui_reads_and_writes_are_typed_calls_here_and_across_datacenters() {
    let prometheus = ["-hcl", common::PROMETHEUS_HCL];
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start_with("catalog-calls", &prometheus, &prometheus);
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    register_mesh(server, "mesh-dc1", "10.8.1.1");
    register_mesh(remote, "mesh-dc2", "10.8.2.1");
    // Until the WAN pool has converged, dc1 has no path to dc2.
    let deadline = Instant::now() + Duration::from_secs(30);
    while client
        .get("/v1/catalog/node-services/mesh-dc2?dc=dc2")
        .status
        != 200
    {
        assert!(Instant::now() < deadline, "dc1 never reached dc2");
        std::thread::sleep(Duration::from_millis(200));
    }
    let server_node = node_name(server);

    // Each read: on the client agent as dc1's server answers it; with `?dc=dc2` on either
    // agent as dc2's server answers it.
    let reads = [
        "/v1/catalog/services?filter=ServiceName%3D%3Dweb".to_string(),
        "/v1/catalog/services?filter=ServiceName%3D%3Dnothing".to_string(),
        "/v1/catalog/connect/web".to_string(),
        format!("/v1/catalog/service/web?near={server_node}"),
        "/v1/catalog/service/web?tag=x".to_string(),
        "/v1/catalog/node-services/mesh-dc1".to_string(),
        "/v1/catalog/node-services/mesh-dc2".to_string(),
        "/v1/catalog/node-services/nobody".to_string(),
        "/v1/catalog/node-services/mesh-dc1?filter=Service%3D%3Dweb".to_string(),
        "/v1/health/connect/web".to_string(),
        "/v1/health/connect/web?passing".to_string(),
        "/v1/health/ingress/web".to_string(),
        format!("/v1/health/service/web?near={server_node}"),
        "/v1/catalog/gateway-services/gw".to_string(),
        "/v1/catalog/gateway-services/nothing".to_string(),
        "/v1/health/checks/web?tag=x".to_string(),
        "/v1/health/checks/web?tag=nope".to_string(),
        "/v1/internal/ui/nodes".to_string(),
        "/v1/internal/ui/nodes?filter=Node%3D%3Dmesh-dc1".to_string(),
        "/v1/internal/ui/node/mesh-dc1".to_string(),
        "/v1/internal/ui/node/mesh-dc2".to_string(),
        "/v1/internal/ui/node/nobody".to_string(),
        "/v1/internal/federation-states".to_string(),
        "/v1/internal/federation-states/mesh-gateways".to_string(),
        "/v1/internal/federation-state/dc1".to_string(),
        // A peer's rows: none are imported, so each is the read's empty form at its index.
        // (`/v1/catalog/service/<s>` and `/v1/health/service/<s>` with `?peer=` answer a
        // server's imports at the imports table's index, which a read through a client
        // agent or another datacenter does not reach yet: checked below by body only.)
        "/v1/catalog/nodes?peer=far".to_string(),
        "/v1/catalog/node/mesh-dc1?peer=far".to_string(),
        "/v1/catalog/node-services/mesh-dc1?peer=far".to_string(),
        "/v1/health/checks/web?peer=far".to_string(),
        "/v1/health/node/mesh-dc1?peer=far".to_string(),
        "/v1/health/state/any?peer=far".to_string(),
    ];
    super::reads_agree_here_and_in_dc2(client, server, remote, &reads, &[200, 404]);
    for path in [
        "/v1/catalog/service/web?peer=far",
        "/v1/health/service/web?peer=far",
    ] {
        for agent in [client, server] {
            let answer = agent.get(path);
            assert_eq!(
                (answer.status, answer.text()),
                (200, "[]".to_string()),
                "{path}"
            );
        }
    }
    // What the reads said: the Connect view is the proxy, the ingress view the gateway, a
    // tag that nothing carries selects no checks, the list form of a node's services.
    let connect = client.get("/v1/catalog/connect/web").json();
    assert_eq!(connect[0]["ServiceID"], "web-proxy", "{connect}");
    let ingress = client.get("/v1/health/ingress/web").json();
    assert_eq!(ingress[0]["Service"]["ID"], "gw", "{ingress}");
    assert_eq!(client.get("/v1/health/checks/web?tag=nope").text(), "[]");
    let listed = client
        .get("/v1/catalog/node-services/mesh-dc2?dc=dc2")
        .json();
    assert_eq!(listed["Services"].as_array().unwrap().len(), 3, "{listed}");
    let nobody = client.get("/v1/catalog/node-services/nobody").json();
    assert_eq!(nobody, json!({"Node": null, "Services": []}));
    let filtered = client
        .get("/v1/catalog/services?filter=ServiceName%3D%3Dweb")
        .json();
    assert_eq!(filtered, json!({"web": ["x"]}));
    let rows = client.get("/v1/catalog/gateway-services/gw").json();
    assert_eq!(rows[0]["Service"]["Name"], "web", "{rows}");
    assert_eq!(client.get("/v1/internal/ui/node/nobody").status, 404);
    // `?near=_agent` on the client agent sorts from the client's own node: a 200 with every
    // instance.
    let near = client.get("/v1/catalog/service/web?near=_agent");
    assert_eq!(near.status, 200, "{}", near.text());
    assert_eq!(near.json().as_array().unwrap().len(), 1);
    // `?cached`: the agent's cache bookkeeping, a miss then a hit, the body the server's.
    let first = client.get("/v1/catalog/service/web?cached");
    let second = client.get("/v1/catalog/service/web?cached");
    assert_eq!(first.header("X-Cache"), Some("MISS"), "{:?}", first.headers);
    assert_eq!(
        second.header("X-Cache"),
        Some("HIT"),
        "{:?}",
        second.headers
    );
    assert_eq!(second.body, server.get("/v1/catalog/service/web").body);
    let conflicting = client.get("/v1/health/service/web?cached&consistent");
    assert_eq!(conflicting.status, 400, "{}", conflicting.text());
    // The coordinate datacenters: both datacenters, from the client agent as from dc1.
    let names = |agent: &Agent| {
        let maps = agent.get("/v1/coordinate/datacenters").json();
        let mut names: Vec<String> = maps
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Datacenter"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(client), vec!["dc1", "dc2"]);
    assert_eq!(names(client), names(server));

    // A blocking read of the Connect view on the client agent is woken by a new proxy.
    let head = client.get("/v1/health/connect/web");
    let index = head.header("X-Consul-Index").unwrap().to_string();
    let waiter = {
        let addr = client.addr();
        let blocked = format!("/v1/health/connect/web?index={index}&wait=30s");
        std::thread::spawn(move || common::request(addr, "GET", &blocked, b"", &[]))
    };
    std::thread::sleep(Duration::from_secs(1));
    assert!(!waiter.is_finished(), "the blocking read answered at once");
    put_ok(
        server,
        "/v1/catalog/register",
        &json!({"Node": "mesh-dc1", "Address": "10.8.1.1",
                "Service": {"ID": "web-proxy-2", "Service": "web-proxy", "Port": 21001,
                            "Kind": "connect-proxy", "Proxy": {"DestinationServiceName": "web"}}}),
    );
    let woken = waiter.join().unwrap();
    assert_eq!(woken.status, 200, "{}", woken.text());
    assert_eq!(woken.json().as_array().unwrap().len(), 2);

    // Registrations naming dc2 — by `?dc=` or by the body's `Datacenter` — land in dc2, from
    // either agent; so do deregistrations.
    for (agent, name) in [(client, "from-client"), (server, "from-server")] {
        let body = json!({"Node": name, "Address": "10.8.2.9",
                          "Service": {"ID": "far", "Service": "far", "Port": 7}});
        put_ok(agent, "/v1/catalog/register?dc=dc2", &body);
        let by_body = json!({"Datacenter": "dc2", "Node": format!("{name}-body"),
                             "Address": "10.8.2.10"});
        put_ok(agent, "/v1/catalog/register", &by_body);
        for node in [name.to_string(), format!("{name}-body")] {
            let there = remote.get(&format!("/v1/catalog/node/{node}")).json();
            assert_eq!(there["Node"]["Node"], node.as_str(), "{there}");
            assert_eq!(
                server.get(&format!("/v1/catalog/node/{node}")).text(),
                "null"
            );
        }
        put_ok(
            agent,
            "/v1/catalog/deregister?dc=dc2",
            &json!({"Node": name, "ServiceID": "far"}),
        );
        assert_eq!(remote.get("/v1/catalog/service/far").text(), "[]");
        put_ok(
            agent,
            "/v1/catalog/deregister",
            &json!({"Datacenter": "dc2", "Node": format!("{name}-body")}),
        );
        let gone = remote.get(&format!("/v1/catalog/node/{name}-body"));
        assert_eq!(gone.text(), "null");
        // A bad body is the handler's 400, before any call.
        let bad = agent.put("/v1/catalog/deregister?dc=dc2", br#"{"Node": ""}"#);
        assert_eq!(
            (bad.status, bad.text()),
            (400, "Must provide node".to_string())
        );
    }
}

const MANAGEMENT: &str = "5d6c7b8a-9e0f-4a1b-8c2d-3e4f5a6b7c8d";

#[test]
fn a_client_agents_catalog_refusals_and_filtered_answers_are_its_servers() {
    let acl = format!(
        "acl {{\n enabled = true\n default_policy = \"deny\"\n tokens {{\n  initial_management = \"{MANAGEMENT}\"\n  agent = \"{MANAGEMENT}\"\n }}\n}}"
    );
    // `spawn`: the leader's check needs a token, which `wait_for_token` gives.
    let cluster = Cluster::spawn(1, &["-hcl", &acl, "-hcl", common::PROMETHEUS_HCL]);
    let server = &cluster.servers[0];
    server.wait_ready();
    wait_for_token(server, MANAGEMENT);
    let data = TempDir::new("catalog-calls-acl");
    let client = cluster.start_client(&data, &["-hcl", &acl]);
    client.wait_ready();
    let admin = Some(MANAGEMENT);
    for (path, body) in [
        (
            "/v1/catalog/register",
            json!({"Node": "mesh", "Address": "10.8.3.1",
                   "Service": {"ID": "web-1", "Service": "web", "Port": 80}}),
        ),
        (
            "/v1/catalog/register",
            json!({"Node": "mesh", "Address": "10.8.3.1",
                   "Service": {"ID": "db-1", "Service": "db", "Port": 5432}}),
        ),
        (
            "/v1/catalog/register",
            json!({"Node": "mesh", "Address": "10.8.3.1",
                   "Service": {"ID": "gw", "Service": "gw", "Port": 8080,
                               "Kind": "ingress-gateway"}}),
        ),
        (
            "/v1/config",
            json!({"Kind": "ingress-gateway", "Name": "gw",
                   "Listeners": [{"Port": 8080, "Protocol": "tcp", "Services": [{"Name": "web"}]},
                                 {"Port": 8081, "Protocol": "tcp", "Services": [{"Name": "db"}]}]}),
        ),
    ] {
        let r = call(server, "PUT", path, body.to_string().as_bytes(), admin);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // A token that reads web and the node, not db nor gw, nor the operator's.
    let (reader, _, _) = token_with_rules(
        server,
        MANAGEMENT,
        "web-reader",
        r#"service "web" { policy = "read" } node_prefix "" { policy = "read" }"#,
    );
    wait_for_token(&client, &reader);
    let paths = [
        // Refused: the route's `service:read` on the gateway, or on the ingress's service.
        "/v1/catalog/gateway-services/gw",
        "/v1/health/ingress/db",
        // Refused: `operator:read`.
        "/v1/internal/federation-states",
        "/v1/internal/federation-state/dc1",
        // Filtered: db's rows left out, with the filtered header.
        "/v1/catalog/node-services/mesh",
        "/v1/internal/ui/nodes",
        "/v1/internal/ui/node/mesh",
        "/v1/catalog/services?filter=ServiceName%20!%3D%20%22x%22",
        "/v1/health/checks/web?tag=x",
        "/v1/internal/federation-states/mesh-gateways",
    ];
    same_gets(&client, server, &paths, Some(&reader), &[200, 403]);
    let refused = call(
        &client,
        "GET",
        "/v1/catalog/gateway-services/gw",
        b"",
        Some(&reader),
    );
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert!(
        refused.text().starts_with("Permission denied"),
        "{}",
        refused.text()
    );
    let listed = call(
        &client,
        "GET",
        "/v1/catalog/node-services/mesh",
        b"",
        Some(&reader),
    );
    assert_eq!(listed.header(acl_common::FILTERED_HEADER), Some("true"));
    assert_eq!(listed.json()["Services"].as_array().unwrap().len(), 1);
    // With the management token, the gateway's rows, both of them.
    let all = same_answer(
        &client,
        server,
        ("GET", "/v1/catalog/gateway-services/gw", b""),
        admin,
        true,
    );
    assert_eq!(all.json().as_array().unwrap().len(), 2, "{}", all.text());
}

#[test]
fn an_independent_client_calls_the_catalog_methods_on_the_server_port() {
    let agent = Agent::dev(&[]);
    put_ok(
        &agent,
        "/v1/config",
        &json!({"Kind": "ingress-gateway", "Name": "gw",
                "Listeners": [{"Port": 8080, "Protocol": "tcp", "Services": [{"Name": "web"}]}]}),
    );
    common::run_python("catalog_rpc.py", &[&agent.ip.to_string()], &[&agent]);
}
