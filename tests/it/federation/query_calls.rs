//! Prepared queries on a client agent through typed calls: every `/v1/query` endpoint a
//! client agent serves is one of Consul's `PreparedQuery.*` calls to its server, and a
//! query's failover to another datacenter is `PreparedQuery.ExecuteRemote` through the WAN
//! router. The client's answers are its server's, body for body (the index headers aside,
//! which move with every write).

use crate::common;

use super::consul_rpc::{wait_for_log, TwoDatacenters};
use common::{request, Agent};
use serde_json::{json, Value};

fn register(agent: &Agent, node: &str, address: &str, service: &str) {
    let body = json!({"Node": node, "Address": address,
                      "Service": {"Service": service, "ID": format!("{service}-1"), "Port": 80}});
    let r = agent.put("/v1/catalog/register", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
}

fn get_json(agent: &Agent, path: &str) -> Value {
    let r = agent.get(path);
    assert_eq!(r.status, 200, "GET {path} at {}: {}", agent.ip, r.text());
    r.json()
}

/// The same read at the client and at its server, which must agree (`Index` and kin
/// aside: the answers are the same store's at the same moment, but the meta fields of an
/// execution carry the contact time).
fn same_at_both(client: &Agent, server: &Agent, path: &str) -> Value {
    let mut at_client = get_json(client, path);
    let mut at_server = get_json(server, path);
    for body in [&mut at_client, &mut at_server] {
        if let Some(fields) = body.as_object_mut() {
            fields.remove("LastContact");
        }
    }
    assert_eq!(
        at_client, at_server,
        "GET {path}: client and server disagree"
    );
    at_client
}

#[test]
fn a_client_agents_prepared_queries_are_typed_calls() {
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start_with(
        "query-calls-client",
        &["-hcl", common::PROMETHEUS_HCL],
        &["-hcl", common::PROMETHEUS_HCL],
    );
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    register(server, "api-dc1", "10.7.1.1", "api");
    register(remote, "web-dc2", "10.7.2.1", "web");

    // Written through the client: the server makes the ID.
    let create = |body: Value| {
        let r = request(
            client.addr(),
            "POST",
            "/v1/query",
            body.to_string().as_bytes(),
            &[],
        );
        assert_eq!(r.status, 200, "POST /v1/query: {}", r.text());
        r.json()["ID"].as_str().expect("an ID").to_string()
    };
    let web = create(json!({"Name": "web-anywhere", "Service": {"Service": "web",
                                  "Failover": {"Datacenters": ["dc2"]}}}));
    let api = create(json!({"Name": "api-here", "Service": {"Service": "api"},
                                  "DNS": {"TTL": "9s"}}));
    // A body the server's endpoint refuses is refused by the client in the same words.
    let bad = request(
        client.addr(),
        "POST",
        "/v1/query",
        br#"{"Name":"no-service"}"#,
        &[],
    );
    assert_eq!(bad.status, 500, "{}", bad.text());
    assert_eq!(
        bad.text(),
        "Invalid prepared query: Must provide a Service name to query"
    );

    // Reads: one, all, explained.
    let stored = same_at_both(client, server, &format!("/v1/query/{web}"));
    assert_eq!(stored[0]["Name"], "web-anywhere");
    let listed = same_at_both(client, server, "/v1/query");
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
    let explained = same_at_both(client, server, "/v1/query/api-here/explain");
    assert_eq!(explained["Query"]["ID"], api.as_str());

    // Executions: here, and failing over to dc2 through ExecuteRemote.
    let here = same_at_both(client, server, "/v1/query/api-here/execute");
    assert_eq!(here["Datacenter"], "dc1");
    assert_eq!(here["DNS"]["TTL"], "9s");
    assert_eq!(here["Nodes"][0]["Node"]["Address"], "10.7.1.1");
    let failed_over = same_at_both(client, server, "/v1/query/web-anywhere/execute");
    assert_eq!(failed_over["Datacenter"], "dc2", "{failed_over}");
    assert_eq!(failed_over["Failovers"], 1);
    assert_eq!(failed_over["Nodes"][0]["Node"]["Address"], "10.7.2.1");
    wait_for_log(server, &["rpc: call PreparedQuery.Execute"]);
    wait_for_log(remote, &["rpc: call PreparedQuery.ExecuteRemote"]);

    // An unknown query is a 404 in Consul's words at both.
    for agent in [client, server] {
        for path in ["/v1/query/nope/execute", "/v1/query/nope/explain"] {
            let r = agent.get(path);
            assert_eq!((r.status, r.text()), (404, "Query not found".to_string()));
        }
    }

    // Update and delete through the client.
    let r = client.put(
        &format!("/v1/query/{api}"),
        json!({"Name": "api-renamed", "Service": {"Service": "api"}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        get_json(server, &format!("/v1/query/{api}"))[0]["Name"],
        "api-renamed"
    );
    assert_eq!(client.delete(&format!("/v1/query/{api}")).status, 200);
    let gone = client.get(&format!("/v1/query/{api}"));
    assert_eq!(
        (gone.status, gone.text()),
        (404, "Query not found".to_string())
    );
}
