//! The catalog API over real sockets against a spawned `praetor agent -dev`: registration
//! semantics, Consul's JSON shapes, parameters, indexes and errors.

use crate::common;

use common::{request, Agent, TempDir};
use serde_json::{json, Value};

fn register(agent: &Agent, body: Value) {
    let r = agent.put("/v1/catalog/register", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "register {body}: {}", r.text());
    assert_eq!(r.json(), json!(true));
}

fn instance(agent: &Agent, node: &str, address: &str, id: &str, name: &str, tags: &[&str]) {
    register(
        agent,
        json!({"Node": node, "Address": address, "NodeMeta": {"rack": node},
               "Service": {"ID": id, "Service": name, "Tags": tags, "Port": 8080}}),
    );
}

#[test]
fn the_agent_registers_its_own_node_with_serf_health_and_the_consul_service() {
    let agent = Agent::dev(&["-node", "self-node"]);
    // The leader's reconcile runs every second; give it a few.
    let mut nodes = Value::Null;
    for _ in 0..100 {
        nodes = agent.get("/v1/catalog/nodes").json();
        let checks = agent.get("/v1/health/node/self-node").json();
        if nodes.as_array().is_some_and(|n| n.len() == 1)
            && checks.as_array().is_some_and(|c| !c.is_empty())
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let node = &nodes[0];
    assert_eq!(node["Node"], "self-node");
    assert_eq!(node["Address"], agent.ip.to_string());
    assert_eq!(node["Datacenter"], "dc1");
    assert_eq!(node["TaggedAddresses"]["lan_ipv4"], agent.ip.to_string());
    assert_eq!(node["Meta"]["consul-version"], "1.22.0");
    let self_id = agent.get("/v1/agent/self").json()["Config"]["NodeID"].clone();
    assert_eq!(node["ID"], self_id);

    let checks = agent.get("/v1/health/node/self-node").json();
    assert_eq!(checks[0]["CheckID"], "serfHealth");
    assert_eq!(checks[0]["Name"], "Serf Health Status");
    assert_eq!(checks[0]["Status"], "passing");

    let consul = agent.get("/v1/catalog/service/consul").json();
    assert_eq!(consul[0]["ServicePort"], 8300);
    assert_eq!(consul[0]["ServiceMeta"]["raft_version"], "3");
    assert_eq!(
        agent.get("/v1/catalog/services").json(),
        json!({"consul": []})
    );
}

#[test]
fn register_and_read_back_in_consuls_shapes() {
    let agent = Agent::dev(&[]);
    register(
        &agent,
        json!({
            "ID": "40e4a748-2192-161a-0510-9bf59fe950b5",
            "Node": "web-node",
            "Address": "10.0.0.7",
            "TaggedAddresses": {"wan": "203.0.113.7"},
            "NodeMeta": {"env": "prod"},
            "Service": {
                "ID": "web-1", "Service": "web", "Tags": ["v1", "blue"], "Port": 8080,
                "Address": "10.0.0.8", "Meta": {"version": "1.2"},
                "TaggedAddresses": {"lan": {"Address": "10.0.0.8", "Port": 8080}}
            },
            "Checks": [
                {"CheckID": "web-http", "Name": "web http", "ServiceID": "web-1", "Status": "passing",
                 "Definition": {"HTTP": "http://10.0.0.8:8080/health", "Interval": "10s", "Timeout": "1s"}},
                {"Name": "node ok", "Status": "warning", "Notes": "disk 85%"}
            ]
        }),
    );

    let r = agent.get("/v1/catalog/service/web");
    let rows = r.json();
    let row = &rows[0];
    assert_eq!(r.index(), row["ModifyIndex"].as_u64().unwrap());
    let order = [
        "ID",
        "Node",
        "Address",
        "Datacenter",
        "TaggedAddresses",
        "NodeMeta",
        "ServiceKind",
        "ServiceID",
        "ServiceName",
        "ServiceTags",
        "ServiceAddress",
        "ServiceTaggedAddresses",
        "ServiceWeights",
        "ServiceMeta",
        "ServicePort",
        "ServiceSocketPath",
        "ServiceEnableTagOverride",
        "ServiceProxy",
        "ServiceConnect",
        "ServiceLocality",
        "CreateIndex",
        "ModifyIndex",
    ];
    assert_eq!(row.as_object().unwrap().len(), order.len());
    let text = r.text();
    let positions: Vec<usize> = order
        .iter()
        .map(|k| {
            text.find(&format!("\"{k}\":"))
                .unwrap_or_else(|| panic!("{k} missing"))
        })
        .collect();
    assert!(
        positions.windows(2).all(|p| p[0] < p[1]),
        "Consul's ServiceNode field order: {text}"
    );
    assert_eq!(row["ID"], "40e4a748-2192-161a-0510-9bf59fe950b5");
    assert_eq!(row["Datacenter"], "dc1");
    assert_eq!(row["NodeMeta"], json!({"env": "prod"}));
    assert_eq!(row["ServiceTags"], json!(["v1", "blue"]));
    assert_eq!(row["ServiceWeights"], json!({"Passing": 1, "Warning": 1}));
    assert_eq!(
        row["ServiceTaggedAddresses"]["lan"],
        json!({"Address": "10.0.0.8", "Port": 8080})
    );
    assert_eq!(row["ServiceMeta"], json!({"version": "1.2"}));

    let node = agent.get("/v1/catalog/node/web-node").json();
    assert_eq!(
        node["Node"]["TaggedAddresses"],
        json!({"wan": "203.0.113.7"})
    );
    assert_eq!(node["Services"]["web-1"]["Service"], "web");
    assert_eq!(node["Services"]["web-1"]["Port"], 8080);
    let list = agent.get("/v1/catalog/node-services/web-node").json();
    assert_eq!(list["Services"][0]["ID"], "web-1");
    assert_eq!(agent.get("/v1/catalog/node/absent").json(), Value::Null);
    assert_eq!(
        agent.get("/v1/catalog/node-services/absent").json(),
        json!({"Node": null, "Services": []})
    );
    assert_eq!(agent.get("/v1/catalog/connect/web").json(), json!([]));

    let services = agent.get("/v1/catalog/services").json();
    assert_eq!(services["web"], json!(["blue", "v1"]));

    let checks = agent.get("/v1/health/checks/web").json();
    assert_eq!(
        checks.as_array().unwrap().len(),
        1,
        "only the service's own checks"
    );
    let check = &checks[0];
    assert_eq!(check["ServiceName"], "web");
    assert_eq!(check["ServiceTags"], json!(["v1", "blue"]));
    assert_eq!(check["Type"], "http");
    assert_eq!(
        check["Definition"],
        json!({"Interval": "10s", "Timeout": "1s", "HTTP": "http://10.0.0.8:8080/health"})
    );
    let node_checks = agent.get("/v1/health/node/web-node").json();
    let node_check = node_checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["CheckID"] == "node ok")
        .expect("a check without ID takes its name");
    assert_eq!(node_check["Notes"], "disk 85%");
    assert_eq!(node_check["ServiceTags"], json!([]));

    // Health: the node-level warning check belongs to every service on the node.
    let health = agent.get("/v1/health/service/web").json();
    assert_eq!(health[0]["Checks"].as_array().unwrap().len(), 2);
    assert_eq!(health[0]["Node"]["Node"], "web-node");
    assert_eq!(health[0]["Service"]["ID"], "web-1");
    assert_eq!(
        agent.get("/v1/health/service/web?passing").json(),
        json!([])
    );
    assert_eq!(
        agent
            .get("/v1/health/service/web?passing=false")
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn deregistration_of_checks_services_and_nodes() {
    let agent = Agent::dev(&[]);
    register(
        &agent,
        json!({"Node": "n1", "Address": "10.0.0.1",
               "Service": {"Service": "db", "Port": 5432},
               "Check": {"Name": "db alive", "ServiceID": "db", "Status": "passing"}}),
    );
    let dereg = |body: Value| {
        let r = agent.put("/v1/catalog/deregister", body.to_string().as_bytes());
        assert_eq!((r.status, r.json()), (200, json!(true)), "{body}");
    };
    dereg(json!({"Node": "n1", "CheckID": "db alive"}));
    assert_eq!(agent.get("/v1/health/checks/db").json(), json!([]));
    dereg(json!({"Node": "n1", "ServiceID": "db"}));
    assert_eq!(agent.get("/v1/catalog/service/db").json(), json!([]));
    assert!(agent.get("/v1/catalog/services").json().get("db").is_none());
    dereg(json!({"Node": "n1"}));
    assert_eq!(agent.get("/v1/catalog/node/n1").json(), Value::Null);
    // Removing what is not there is fine, as in Consul.
    dereg(json!({"Node": "n1", "ServiceID": "nothing"}));

    // A datacenter this agent has no path to, in the body or the query, is Consul's 500,
    // and nothing here is removed.
    register(&agent, json!({"Node": "n2", "Address": "10.0.0.2"}));
    for (path, body) in [
        (
            "/v1/catalog/deregister",
            json!({"Datacenter": "nowhere", "Node": "n2"}),
        ),
        ("/v1/catalog/deregister?dc=nowhere", json!({"Node": "n2"})),
    ] {
        let r = agent.put(path, body.to_string().as_bytes());
        assert_eq!(
            (r.status, r.text().as_str()),
            (500, "No path to datacenter"),
            "{path} {body}"
        );
    }
    assert_eq!(
        agent.get("/v1/catalog/node/n2").json()["Node"]["Node"],
        "n2"
    );
}

#[test]
fn tags_node_meta_filters_near_and_case() {
    let agent = Agent::dev(&[]);
    instance(&agent, "a", "10.0.0.1", "web-a", "web", &["v1", "blue"]);
    instance(&agent, "b", "10.0.0.2", "web-b", "web", &["v1", "green"]);
    instance(&agent, "c", "10.0.0.3", "web-c", "web", &["v2"]);
    let ids = |path: &str| -> Vec<String> {
        let r = agent.get(path);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let mut v: Vec<String> = r
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                row.get("ServiceID")
                    .or_else(|| row.get("Service").and_then(|s| s.get("ID")))
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(ids("/v1/catalog/service/web?tag=v1"), ["web-a", "web-b"]);
    assert_eq!(ids("/v1/catalog/service/web?tag=v1&tag=blue"), ["web-a"]);
    assert_eq!(
        ids("/v1/catalog/service/web?tag=V1&tag=BLUE"),
        ["web-a"],
        "tags match without case"
    );
    assert_eq!(ids("/v1/catalog/service/web?node-meta=rack:b"), ["web-b"]);
    assert_eq!(
        ids("/v1/health/service/web?node-meta=rack:c&tag=v2"),
        ["web-c"]
    );
    assert_eq!(
        ids("/v1/catalog/service/web?near=_agent"),
        ["web-a", "web-b", "web-c"]
    );
    assert_eq!(ids("/v1/catalog/service/WEB"), ["web-a", "web-b", "web-c"]);
    let filtered = ids(
        "/v1/catalog/service/web?filter=ServiceTags%20contains%20green%20or%20Node%20%3D%3D%20c",
    );
    assert_eq!(filtered, ["web-b", "web-c"]);
    assert_eq!(
        ids("/v1/health/service/web?filter=%22blue%22%20in%20Service.Tags"),
        ["web-a"]
    );
    let nodes = agent.get("/v1/catalog/nodes?node-meta=rack:a").json();
    assert_eq!(nodes.as_array().unwrap().len(), 1);
    assert_eq!(nodes[0]["Node"], "a");
    let bad = agent.get("/v1/catalog/service/web?filter=NoSuchField%20%3D%3D%201");
    assert_eq!(bad.status, 400);
    assert!(bad.text().contains("NoSuchField"), "{}", bad.text());
}

#[test]
fn bad_requests_get_clear_errors() {
    let agent = Agent::dev(&[]);
    let put = |path: &str, body: &str| agent.put(path, body.as_bytes());
    let r = put("/v1/catalog/register", "{not json");
    assert_eq!(r.status, 400);
    assert!(
        r.text().starts_with("Request decode failed"),
        "{}",
        r.text()
    );
    let r = put("/v1/catalog/register", r#"{"Address": "1.2.3.4"}"#);
    assert_eq!((r.status, r.text().as_str()), (500, "Must provide node"));
    let r = put(
        "/v1/catalog/register",
        r#"{"Node": "n", "Address": "1.2.3.4", "Check": {"Name": "c", "ServiceID": "ghost"}}"#,
    );
    assert_eq!(r.status, 500);
    assert!(
        r.text().contains("Missing service registration"),
        "{}",
        r.text()
    );
    let r = put(
        "/v1/catalog/register",
        r#"{"Node": "n", "Service": {"Service": "w", "Meta": {"consul-x": "y"}}}"#,
    );
    assert_eq!(r.status, 400);
    let r = put("/v1/catalog/deregister", "{}");
    assert_eq!((r.status, r.text().as_str()), (400, "Must provide node"));
    assert_eq!(agent.get("/v1/catalog/register").status, 405);
    assert_eq!(agent.get("/v1/catalog/service/").status, 400);
    assert_eq!(agent.get("/v1/health/state/sideways").status, 400);
    assert_eq!(
        agent.get("/v1/health/service/web?passing=maybe").status,
        400
    );
    assert_eq!(agent.get("/v1/catalog/nodes?dc=elsewhere").status, 500);
    let r = put(
        "/v1/catalog/register",
        r#"{"Node": "n", "Address": "1.2.3.4", "Datacenter": "dc9"}"#,
    );
    assert_eq!(
        (r.status, r.text().as_str()),
        (500, "No path to datacenter")
    );
}

#[test]
fn health_state_lists_checks_by_status() {
    let agent = Agent::dev(&["-node", "me"]);
    register(
        &agent,
        json!({"Node": "n1", "Address": "10.0.0.1", "Service": {"Service": "api"},
               "Checks": [{"Name": "a", "ServiceID": "api", "Status": "critical"},
                          {"Name": "b", "Status": "warning"}]}),
    );
    let ids = |state: &str| -> Vec<String> {
        let mut v: Vec<String> = agent
            .get(&format!(
                "/v1/health/state/{state}?node-meta=env:none&node-meta="
            ))
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["CheckID"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    assert!(ids("any").is_empty(), "node-meta filters by node");
    let all: Vec<String> = agent
        .get("/v1/health/state/any")
        .json()
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["Node"] == "n1")
        .map(|c| c["CheckID"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        all,
        ["a", "b"],
        "a node's checks in check-ID order, as Consul's id index"
    );
    let critical = agent.get("/v1/health/state/critical").json();
    assert_eq!(critical.as_array().unwrap().len(), 1);
    assert_eq!(critical[0]["CheckID"], "a");
    let warning = agent
        .get("/v1/health/state/warning?filter=Name%20%3D%3D%20b")
        .json();
    assert_eq!(warning[0]["CheckID"], "b");
}

#[test]
fn the_catalog_survives_a_restart() {
    let data = TempDir::new("catalog-restart");
    let ip = common::fresh_loopback();
    let args: Vec<String> = [
        "agent",
        "-server",
        "-bootstrap",
        "-node",
        "durable",
        "-bind",
        &ip.to_string(),
        "-client",
        &ip.to_string(),
        "-data-dir",
        data.path().to_str().unwrap(),
        "-dns-port=-1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut agent = Agent::spawn(ip, 8500, args);
    agent.wait_ready();
    instance(&agent, "n1", "10.0.0.1", "web-1", "web", &["v1"]);
    let before = agent.get("/v1/catalog/service/web");
    agent.kill9();
    agent.restart();
    agent.wait_ready();
    let after = agent.get("/v1/catalog/service/web");
    assert_eq!(after.json(), before.json());
    assert_eq!(after.index(), before.index());
    let r = request(agent.addr(), "GET", "/v1/catalog/services", b"", &[]);
    assert!(r.json().get("web").is_some());
}

/// Answers of 64 KiB and more leave the server in bounded chunks; on the wire they must be
/// exactly what a whole answer would be, in order with pipelined requests around them.
#[test]
fn large_answers_stream_whole_and_in_order_with_pipelined_requests() {
    let agent = Agent::dev(&[]);
    let instances = 300;
    for i in 0..instances {
        register(
            &agent,
            json!({"Node": format!("big-node-{i}"), "Address": format!("10.1.{}.{}", i / 256, i % 256),
                   "Service": {"ID": format!("big-{i}"), "Service": "big", "Port": 9000 + i},
                   "Check": {"CheckID": format!("big-check-{i}"), "Name": "c",
                             "ServiceID": format!("big-{i}"), "Status": "passing"}}),
        );
    }
    let host = agent.http_addr();
    let mut pipelined = Vec::new();
    for path in [
        "/v1/health/service/big?passing",
        "/v1/kv/absent",
        "/v1/catalog/service/big",
    ] {
        pipelined
            .extend_from_slice(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
    }
    pipelined.extend_from_slice(
        format!("GET /v1/status/leader HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    let raw = common::raw_exchange(agent.addr(), &pipelined, std::time::Duration::from_secs(10));
    let mut offset = 0;
    let mut answers = Vec::new();
    while let Some((response, used)) = common::parse_one_response(&raw[offset..]) {
        answers.push(response);
        offset += used;
    }
    assert_eq!(offset, raw.len(), "nothing but whole responses on the wire");
    assert_eq!(answers.len(), 4, "one answer per pipelined request");

    let health: Value = serde_json::from_slice(&answers[0].body).expect("health answer is JSON");
    assert!(answers[0].body.len() >= 64 * 1024, "large enough to stream");
    let health = health.as_array().unwrap();
    assert_eq!(health.len(), instances);
    let seventh = health
        .iter()
        .find(|entry| entry["Service"]["ID"] == "big-7")
        .expect("every instance answered");
    assert_eq!(seventh["Checks"][0]["CheckID"], "big-check-7");
    assert_eq!(seventh["Node"]["Node"], "big-node-7");
    assert_eq!(answers[1].status, 404);
    let catalog: Value = serde_json::from_slice(&answers[2].body).expect("catalog answer is JSON");
    assert_eq!(catalog.as_array().unwrap().len(), instances);
    assert_eq!(answers[3].status, 200);

    // The same bytes as a plain request for it, compact and indented alike.
    for path in [
        "/v1/health/service/big?passing",
        "/v1/health/service/big?passing&pretty",
    ] {
        let alone = agent.get(path);
        let again = agent.get(path);
        assert_eq!(alone.body, again.body, "{path}: answers agree");
        assert_eq!(
            alone.body, answers[0].body,
            "{path}: dev agents always indent"
        );
    }
}

/// A prepared query with `Service.Connect` (or executed with `?connect`) answers the
/// service's Connect-capable instances — its proxies and its Connect-native instances — as
/// Consul's execution asks its health endpoint with `Connect` set.
#[test]
fn prepared_queries_with_connect_answer_the_connect_capable_instances() {
    let agent = Agent::dev(&[]);
    register(
        &agent,
        json!({"Node": "n1", "Address": "10.0.0.1",
               "Service": {"ID": "web-plain", "Service": "web", "Port": 80}}),
    );
    register(
        &agent,
        json!({"Node": "n1", "Address": "10.0.0.1",
               "Service": {"ID": "web-proxy", "Service": "web-sidecar-proxy", "Port": 21000,
                           "Kind": "connect-proxy",
                           "Proxy": {"DestinationServiceName": "web", "DestinationServiceID": "web-plain"}}}),
    );
    register(
        &agent,
        json!({"Node": "n2", "Address": "10.0.0.2",
               "Service": {"ID": "web-native", "Service": "web", "Port": 8443,
                           "Connect": {"Native": true}}}),
    );
    let create = |body: Value| {
        let r = request(
            agent.addr(),
            "POST",
            "/v1/query",
            body.to_string().as_bytes(),
            &[],
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["ID"].as_str().unwrap().to_string()
    };
    let ids = |answer: Value| {
        let mut ids: Vec<String> = answer["Nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["Service"]["ID"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    let connect =
        create(json!({"Name": "web-mesh", "Service": {"Service": "web", "Connect": true}}));
    let plain = create(json!({"Name": "web-all", "Service": {"Service": "web"}}));
    assert_eq!(
        ids(agent.get(&format!("/v1/query/{connect}/execute")).json()),
        vec!["web-native", "web-proxy"]
    );
    assert_eq!(
        ids(agent.get("/v1/query/web-all/execute").json()),
        vec!["web-native", "web-plain"]
    );
    assert_eq!(
        ids(agent
            .get(&format!("/v1/query/{plain}/execute?connect"))
            .json()),
        vec!["web-native", "web-proxy"]
    );
}
