//! DNS on a client agent through typed calls: the rows a client agent's DNS lacks are one
//! `Praetor.DNSLookup` call to its server on the server port (a yamux stream), its caches
//! follow `Praetor.DNSChanges`, and a name in another datacenter (`web.service.dc2.consul`)
//! is the same lookup naming dc2, which the client's server hands to a dc2 server as any
//! call for another datacenter. A server's own DNS asks dc2 the same way.

use crate::common;
use crate::dns_common;

use super::consul_rpc::{wait_for_log, TwoDatacenters};
use common::Agent;
use serde_json::json;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long a name may take to answer: replication, then (for dc2) the WAN pool's
/// convergence.
const ANSWER_LIMIT: Duration = Duration::from_secs(30);

fn a_records(dns: SocketAddr, name: &str) -> Vec<String> {
    let mut lines: Vec<String> = dns_common::dig(dns, &[name, "A", "+short"])
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// Waits (bounded) until `name` answers exactly `expected` at `dns`.
fn wait_for_answer(dns: SocketAddr, name: &str, expected: &[&str]) {
    let deadline = Instant::now() + ANSWER_LIMIT;
    loop {
        let answer = a_records(dns, name);
        if answer == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} at {dns} answered {answer:?}, not {expected:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn register(agent: &Agent, node: &str, address: &str) {
    let body = json!({"Node": node, "Address": address,
                      "Service": {"Service": "web", "ID": "web-1", "Port": 80}});
    let r = agent.put("/v1/catalog/register", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn a_client_agents_dns_asks_its_servers_with_typed_calls_only() {
    let TwoDatacenters {
        dc1, dc2, client, ..
    } = &TwoDatacenters::start_with(
        "dns-calls-client",
        &["-dns-port=8600", "-hcl", common::PROMETHEUS_HCL],
        &["-hcl", common::PROMETHEUS_HCL],
    );
    let (server, remote) = (&dc1.servers[0], &dc2.servers[0]);
    // Each datacenter has one server, its leader: these writes are not forwarded.
    register(server, "web-dc1", "10.8.1.1");
    register(remote, "web-dc2", "10.8.2.1");

    let at_client = SocketAddr::new(client.ip, 8600);
    wait_for_answer(at_client, "web.service.consul", &["10.8.1.1"]);
    wait_for_answer(at_client, "web.service.dc2.consul", &["10.8.2.1"]);
    // Asked again (now from the client's caches for dc1; dc2's rows are never cached).
    assert_eq!(a_records(at_client, "web.service.consul"), ["10.8.1.1"]);
    assert_eq!(a_records(at_client, "web.service.dc2.consul"), ["10.8.2.1"]);
    assert_eq!(
        a_records(at_client, "nope.service.dc2.consul"),
        Vec::<String>::new()
    );
    // The calls as the servers saw them: the client's lookups and feed on dc1's server,
    // the dc2 lookup handed to dc2's server.
    wait_for_log(server, &["rpc: call Praetor.DNSLookup"]);
    wait_for_log(server, &["rpc: call Praetor.DNSChanges"]);
    wait_for_log(remote, &["rpc: call Praetor.DNSLookup"]);

    // A server's own DNS asks dc2 with the same call, through the WAN router.
    let at_server = SocketAddr::new(server.ip, 8600);
    wait_for_answer(at_server, "web.service.dc2.consul", &["10.8.2.1"]);

    // A change in dc1 reaches the client's DNS through the feed.
    let r = server.put(
        "/v1/catalog/deregister",
        json!({"Node": "web-dc1"}).to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for_answer(at_client, "web.service.consul", &[]);
}
