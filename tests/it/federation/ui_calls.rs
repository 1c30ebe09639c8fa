//! The web UI's summaries, `/v1/catalog/nodes?near` and `PUT /v1/coordinate/update` as
//! Consul's typed calls: on a client agent in its own datacenter, and (the summaries, the
//! node list) naming another datacenter (`?dc=dc2`) on a server or a client agent. The
//! services list (`Internal.ServiceDump` with its gateway rows, `?filter`), a gateway's
//! services (`Internal.GatewayServiceDump`), a service's topology
//! (`Internal.ServiceTopology`, both kinds) and the node list sorted by `?near`
//! (`Catalog.ListNodes` with a `Source`) answer on the client agent what dc1's server
//! answers, and with `?dc=dc2` what dc2's server answers; the metrics proxy stays the
//! agent's own whatever `?dc=` says. A coordinate written through the client agent is
//! stored by dc1's servers. With
//! ACLs, the client agent's refusals and filtered summaries are its server's. An
//! independent msgpack-rpc client (`tests/python/ui_rpc.py`) calls the new methods on a
//! server's port in Consul's shapes.

use crate::acl_common::{self, call, same_answer, same_gets, token_with_rules, wait_for_token};
use crate::common;

use super::consul_rpc::TwoDatacenters;
use super::node_name;
use common::{Agent, Cluster, TempDir};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn put_ok(agent: &Agent, path: &str, body: &Value, token: Option<&str>) {
    let r = call(agent, "PUT", path, body.to_string().as_bytes(), token);
    assert_eq!(r.status, 200, "PUT {path} at {}: {}", agent.ip, r.text());
}

/// On `node`: `web` with a check and a sidecar proxy whose upstream is `db`, `db`, and an
/// ingress gateway `gw` whose entry links `web` (on two ports) and `nowhere` (no
/// instances); a resolver for `api`, an upstream only routing configuration names.
fn register_mesh(server: &Agent, node: &str, address: &str, token: Option<&str>) {
    let services = [
        json!({"ID": "web-1", "Service": "web", "Port": 80, "Tags": ["x"],
               "Meta": {"external-source": "kubernetes"}}),
        json!({"ID": "web-proxy", "Service": "web-proxy", "Port": 21000, "Kind": "connect-proxy",
               "Proxy": {"DestinationServiceName": "web",
                         "Upstreams": [{"DestinationName": "db", "LocalBindPort": 9000},
                                       {"DestinationName": "api", "LocalBindPort": 9001}]}}),
        json!({"ID": "db-1", "Service": "db", "Port": 5432}),
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
            token,
        );
    }
    put_ok(
        server,
        "/v1/config",
        &json!({"Kind": "ingress-gateway", "Name": "gw",
                "Listeners": [{"Port": 8080, "Protocol": "tcp", "Services": [{"Name": "web"}]},
                              {"Port": 8081, "Protocol": "tcp", "Services": [{"Name": "nowhere"}]},
                              {"Port": 8082, "Protocol": "tcp", "Services": [{"Name": "web"}]}]}),
        token,
    );
    put_ok(
        server,
        "/v1/config",
        &json!({"Kind": "service-resolver", "Name": "api", "ConnectTimeout": "5s"}),
        token,
    );
}

#[test]
fn ui_summaries_nodes_near_and_coordinates_are_typed_calls_here_and_across_datacenters() {
    let prometheus = ["-hcl", common::PROMETHEUS_HCL];
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start_with("ui-calls", &prometheus, &prometheus);
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    register_mesh(server, "mesh-dc1", "10.8.1.1", None);
    register_mesh(remote, "mesh-dc2", "10.8.2.1", None);
    // Until the WAN pool has converged, dc1 has no path to dc2.
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.get("/v1/internal/ui/services?dc=dc2").status != 200 {
        assert!(Instant::now() < deadline, "dc1 never reached dc2");
        std::thread::sleep(Duration::from_millis(200));
    }
    let server_node = node_name(server);

    let reads = [
        "/v1/internal/ui/services".to_string(),
        "/v1/internal/ui/services?filter=Service.Service%20!%3D%20db".to_string(),
        "/v1/internal/ui/gateway-services-nodes/gw".to_string(),
        "/v1/internal/ui/gateway-services-nodes/nothing".to_string(),
        "/v1/internal/ui/service-topology/web?kind=".to_string(),
        "/v1/internal/ui/service-topology/db?kind=".to_string(),
        "/v1/internal/ui/service-topology/gw?kind=ingress-gateway".to_string(),
        "/v1/internal/ui/service-topology/web".to_string(),
        "/v1/internal/ui/service-topology/web?kind=bogus".to_string(),
        "/v1/internal/ui/services?filter=Service.Nope%3D%3D1".to_string(),
        "/v1/internal/ui/catalog-overview".to_string(),
        "/v1/internal/ui/exported-services?peer=far".to_string(),
        format!("/v1/catalog/nodes?near={server_node}"),
        "/v1/catalog/nodes?near=mesh-dc1".to_string(),
    ];
    super::reads_agree_here_and_in_dc2(client, server, remote, &reads, &[200, 400]);
    // What they said: the summaries count the proxy's checks for web and mark the gateway's
    // links; the gateway's services carry the listeners' addresses; web's upstreams are db
    // (its proxy's registration) and api (routing configuration only).
    let services = client.get("/v1/internal/ui/services").json();
    let web = services
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Name"] == "web")
        .unwrap();
    assert_eq!(web["ConnectedWithProxy"], true, "{services}");
    assert_eq!(web["ConnectedWithGateway"], true, "{services}");
    assert_eq!(web["ExternalSources"], json!(["kubernetes"]), "{services}");
    assert_eq!(web["ChecksPassing"], 2, "{services}");
    let gateway = services
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Name"] == "gw")
        .unwrap();
    assert_eq!(
        gateway["GatewayConfig"]["AssociatedServiceCount"], 3,
        "{services}"
    );
    let linked = client
        .get("/v1/internal/ui/gateway-services-nodes/gw?dc=dc2")
        .json();
    assert_eq!(linked[0]["Name"], "nowhere", "{linked}");
    assert_eq!(linked[0]["InstanceCount"], 0, "{linked}");
    assert_eq!(linked[1]["Name"], "web", "{linked}");
    assert_eq!(linked[1]["InstanceCount"], 1, "{linked}");
    assert_eq!(
        linked[1]["GatewayConfig"]["Addresses"],
        json!(["web.ingress.dc2.consul:8080", "web.ingress.dc2.consul:8082"]),
        "{linked}"
    );
    let topology = client
        .get("/v1/internal/ui/service-topology/web?kind=")
        .json();
    let upstreams: Vec<(&str, &str)> = topology["Upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["Name"].as_str().unwrap(), u["Source"].as_str().unwrap()))
        .collect();
    assert_eq!(
        upstreams,
        vec![("db", "proxy-registration"), ("api", "routing-config")],
        "{topology}"
    );
    let downstreams = client
        .get("/v1/internal/ui/service-topology/db?kind=")
        .json();
    assert_eq!(
        downstreams["Downstreams"][0]["Name"], "web",
        "{downstreams}"
    );
    // `?near=_agent` on the client agent sorts from the client's own node: every node.
    let near = client.get("/v1/catalog/nodes?near=_agent");
    assert_eq!(near.status, 200, "{}", near.text());
    assert_eq!(
        near.json().as_array().unwrap().len(),
        server
            .get("/v1/catalog/nodes")
            .json()
            .as_array()
            .unwrap()
            .len()
    );

    // The metrics proxy is the agent's own: `?dc=dc2` answers as without it, on either
    // agent (this UI has no proxy configured).
    for agent in [server, client] {
        let here = agent.get("/v1/internal/ui/metrics-proxy/api/v1/query");
        let there = agent.get("/v1/internal/ui/metrics-proxy/api/v1/query?dc=dc2");
        assert_eq!(
            (here.status, here.text()),
            (there.status, there.text()),
            "{}",
            agent.ip
        );
        assert_eq!(here.status, 404, "{}", here.text());
    }

    // A blocking read of the services list on the client agent is woken by a new service.
    let head = client.get("/v1/internal/ui/services");
    let index = head.header("X-Consul-Index").unwrap().to_string();
    let waiter = {
        let addr = client.addr();
        let blocked = format!("/v1/internal/ui/services?index={index}&wait=30s");
        std::thread::spawn(move || common::request(addr, "GET", &blocked, b"", &[]))
    };
    std::thread::sleep(Duration::from_secs(1));
    assert!(!waiter.is_finished(), "the blocking read answered at once");
    put_ok(
        server,
        "/v1/catalog/register",
        &json!({"Node": "mesh-dc1", "Address": "10.8.1.1",
                "Service": {"ID": "late-1", "Service": "late", "Port": 81}}),
        None,
    );
    let woken = waiter.join().unwrap();
    assert_eq!(woken.status, 200, "{}", woken.text());
    assert!(
        woken.text().contains("\"Name\":\"late\""),
        "{}",
        woken.text()
    );

    // A coordinate written through the client agent is stored by dc1's servers; a bad one
    // is refused as the server refuses it.
    let coordinate = json!({"Node": "mesh-dc1",
                            "Coord": {"Vec": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                                      "Error": 1.25, "Adjustment": 0.0, "Height": 0.00001}});
    put_ok(client, "/v1/coordinate/update", &coordinate, None);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stored = server.get("/v1/coordinate/node/mesh-dc1");
        if stored.status == 200 && stored.json()[0]["Coord"]["Error"] == 1.25 {
            break;
        }
        assert!(Instant::now() < deadline, "{}", stored.text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let bad = json!({"Node": "mesh-dc1", "Coord": {"Vec": [0.0, 0.0], "Error": 1.0}});
    let refused = same_answer(
        client,
        server,
        ("PUT", "/v1/coordinate/update", bad.to_string().as_bytes()),
        None,
        false,
    );
    assert_eq!(refused.status, 500, "{}", refused.text());
}

const MANAGEMENT: &str = "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d";

#[test]
fn a_client_agents_ui_refusals_and_filtered_summaries_are_its_servers() {
    let acl = format!(
        "acl {{\n enabled = true\n default_policy = \"deny\"\n tokens {{\n  initial_management = \"{MANAGEMENT}\"\n  agent = \"{MANAGEMENT}\"\n }}\n}}"
    );
    let cluster = Cluster::spawn(1, &["-hcl", &acl, "-hcl", common::PROMETHEUS_HCL]);
    let server = &cluster.servers[0];
    server.wait_ready();
    wait_for_token(server, MANAGEMENT);
    let data = TempDir::new("ui-calls-acl");
    let client = cluster.start_client(&data, &["-hcl", &acl]);
    client.wait_ready();
    let admin = Some(MANAGEMENT);
    register_mesh(server, "mesh", "10.8.3.1", admin);
    // A token that reads web and the nodes, not db nor gw.
    let (reader, _, _) = token_with_rules(
        server,
        MANAGEMENT,
        "web-reader",
        r#"service "web" { policy = "read" } service "web-proxy" { policy = "read" } node_prefix "" { policy = "read" }"#,
    );
    wait_for_token(&client, &reader);
    let paths = [
        // Refused: `service:read` on the gateway, on the service.
        "/v1/internal/ui/gateway-services-nodes/gw",
        "/v1/internal/ui/service-topology/db?kind=",
        // Refused: the overview counts everything, so it needs `operator:read`.
        "/v1/internal/ui/catalog-overview",
        // Filtered: db's and gw's rows left out, with the filtered header.
        "/v1/internal/ui/services",
        "/v1/internal/ui/service-topology/web?kind=",
        "/v1/catalog/nodes?near=mesh",
    ];
    same_gets(&client, server, &paths, Some(&reader), &[200, 403]);
    let refused = call(
        &client,
        "GET",
        "/v1/internal/ui/gateway-services-nodes/gw",
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
        "/v1/internal/ui/services",
        b"",
        Some(&reader),
    );
    assert_eq!(listed.header(acl_common::FILTERED_HEADER), Some("true"));
    let names: Vec<String> = listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["Name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["web", "web-proxy"], "{}", listed.text());
    let topology = call(
        &client,
        "GET",
        "/v1/internal/ui/service-topology/web?kind=",
        b"",
        Some(&reader),
    );
    assert_eq!(
        topology.json()["FilteredByACLs"],
        true,
        "{}",
        topology.text()
    );
    // With the management token, everything: the gateway's services as the server has them.
    for path in [
        "/v1/internal/ui/gateway-services-nodes/gw",
        "/v1/internal/ui/services",
        "/v1/internal/ui/service-topology/db?kind=",
    ] {
        let all = same_answer(&client, server, ("GET", path, b""), admin, true);
        assert_eq!(all.status, 200, "{path}: {}", all.text());
    }
    // A coordinate needs `node:write` on its node, checked as the server checks it.
    let coordinate = json!({"Node": "mesh",
                            "Coord": {"Vec": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                                      "Error": 1.5, "Adjustment": 0.0, "Height": 0.00001}});
    let body = coordinate.to_string();
    let refused = call(
        &client,
        "PUT",
        "/v1/coordinate/update",
        body.as_bytes(),
        Some(&reader),
    );
    assert_eq!(refused.status, 403, "{}", refused.text());
    put_ok(&client, "/v1/coordinate/update", &coordinate, admin);
}

#[test]
fn an_independent_client_calls_the_ui_methods_on_the_server_port() {
    let agent = Agent::dev(&[]);
    let entry = json!({"Kind": "ingress-gateway", "Name": "gw",
                       "Listeners": [{"Port": 8080, "Protocol": "tcp", "Services": [{"Name": "web"}]},
                                     {"Port": 8081, "Protocol": "tcp",
                                      "Services": [{"Name": "nowhere"}]}]});
    put_ok(&agent, "/v1/config", &entry, None);
    common::run_python("ui_rpc.py", &[&agent.ip.to_string()], &[&agent]);
}
