//! Real Envoy sidecars registered with client agents, as in every Consul deployment: each
//! Envoy is configured over xDS by its own client agent, whose store versions mirror what
//! its servers answer (`xds::mirror`). One server and two client agents: `web` and its
//! sidecar on the first client, `db` and its sidecar on the second; traffic flows
//! web→db through both Envoys, a deny intention written on the server refuses the next
//! connection within a few seconds and allow restores it, and a `db` instance registered
//! on the server appears in the web Envoy's endpoints. No update is rejected.

use crate::common;
use crate::envoy;

use common::{echo_server, round_trip, Cluster, TempDir};
use envoy::{free_port, register_with_sidecar, wait_for, Envoy};
use serde_json::json;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long the mesh may take to carry its first byte: the agents' joins, anti-entropy
/// reaching the server, the mirrors' first answers, Envoy's start, the sidecars' checks.
const MESH_READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long an intention written on the server may take to reach a client's Envoy.
const INTENTION_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes `action` for web→db on `agent` and waits until a connection's fate follows it.
fn intention_takes_effect(
    agent: &common::Agent,
    upstream: SocketAddr,
    action: &str,
    message: &[u8],
) -> Duration {
    let written = Instant::now();
    let response = agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        json!({ "Action": action }).to_string().as_bytes(),
    );
    assert_eq!(response.text().trim(), "true", "{action}");
    loop {
        let flows = round_trip(upstream, message).is_ok_and(|echo| echo == message);
        if flows == (action == "allow") {
            return written.elapsed();
        }
        assert!(
            written.elapsed() < INTENTION_TIMEOUT,
            "{action} took longer than {INTENTION_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sidecars_on_client_agents_carry_traffic_and_follow_the_servers() {
    let grpc = "-grpc-port=8502";
    let cluster = Cluster::start(1, &[grpc]);
    let server = &cluster.servers[0];
    let (web_data, db_data) = (
        TempDir::new("xds-client-web"),
        TempDir::new("xds-client-db"),
    );
    let web_agent = cluster.start_client(&web_data, &[grpc]);
    let db_agent = cluster.start_client(&db_data, &[grpc]);
    web_agent.wait_ready();
    db_agent.wait_ready();
    let dir = TempDir::new("xds-client-envoys");

    let db_port = free_port(db_agent.ip);
    echo_server(SocketAddr::new(db_agent.ip, db_port));
    register_with_sidecar(&db_agent, "db", db_port, free_port(db_agent.ip), json!([]));
    let upstream_port = free_port(web_agent.ip);
    register_with_sidecar(
        &web_agent,
        "web",
        free_port(web_agent.ip),
        free_port(web_agent.ip),
        json!([{"DestinationName": "db", "LocalBindAddress": web_agent.ip.to_string(), "LocalBindPort": upstream_port}]),
    );
    let db_envoy = Envoy::start(&db_agent, &dir, "db", &["-sidecar-for", "db"]);
    let web_envoy = Envoy::start(&web_agent, &dir, "web", &["-sidecar-for", "web"]);
    let upstream = SocketAddr::new(web_agent.ip, upstream_port);
    let message = b"hello through two client agents' envoys".to_vec();
    wait_for("the mesh carries a message", MESH_READY_TIMEOUT, || {
        round_trip(upstream, &message).map_err(|e| {
            format!(
                "{e}\nweb envoy:\n{}\ndb envoy:\n{}\nhealth: {}\nweb agent:\n{}",
                web_envoy.log(),
                db_envoy.log(),
                server.get("/v1/health/connect/db").text(),
                web_agent.log()
            )
        })
    });
    assert_eq!(round_trip(upstream, &message).unwrap(), message);

    // Intentions written on the server reach the db client's Envoy (its RBAC is built
    // from the mirrored service-intentions entry).
    let denied = intention_takes_effect(server, upstream, "deny", &message);
    let stats = db_envoy.stats();
    assert!(
        stats.get("connect_authz.rbac.denied").copied().unwrap_or(0) >= 1,
        "{stats:?}"
    );
    let allowed = intention_takes_effect(server, upstream, "allow", &message);
    eprintln!("deny took {denied:?}, allow {allowed:?}");

    // A new db instance, registered on the server, appears in the web Envoy's endpoints.
    let (second_port, second_proxy_port) = (free_port(server.ip), free_port(server.ip));
    echo_server(SocketAddr::new(server.ip, second_proxy_port));
    register_with_sidecar(server, "db", second_port, second_proxy_port, json!([]));
    let second = format!("{}:{second_proxy_port}", server.ip);
    wait_for(
        "the web Envoy lists the second db instance",
        Duration::from_secs(15),
        || {
            let clusters = web_envoy.admin_get("/clusters");
            if clusters
                .lines()
                .any(|l| l.starts_with("db.default.dc1.internal.") && l.contains(&second))
            {
                Ok(())
            } else {
                Err(clusters)
            }
        },
    );

    for envoy in [&web_envoy, &db_envoy] {
        envoy.assert_connected_and_nothing_rejected();
    }
    // The client agents served the xDS streams and asked their server for what they built.
    common::wait_for_log(server, &["rpc: call ConfigEntry.ListAll"]);
    common::wait_for_log(server, &["rpc: call Health.ServiceNodes"]);
}

/// A client agent with ACLs enabled cannot check a stream's token (its mirror holds no ACL
/// tables): it refuses the stream with `FailedPrecondition` (9) and the reason, which
/// Envoy logs, and never serves it unchecked.
#[test]
fn a_client_agent_with_acls_refuses_xds_with_its_reason() {
    let acl = r#"acl { enabled = true default_policy = "allow" }"#;
    let cluster = Cluster::start(1, &["-hcl", acl]);
    let data = TempDir::new("xds-client-acl");
    let client = cluster.start_client(&data, &["-grpc-port=8502", "-hcl", acl]);
    client.wait_ready();
    common::wait_for_log(&client, &["cannot check xDS tokens yet"]);
    let port = free_port(client.ip);
    register_with_sidecar(&client, "web", port, free_port(client.ip), json!([]));
    let dir = TempDir::new("xds-client-acl-envoy");
    let web_envoy = Envoy::start(&client, &dir, "web", &["-sidecar-for", "web"]);
    wait_for("Envoy logs the refusal", Duration::from_secs(30), || {
        let log = web_envoy.log();
        // gRPC carries the status message percent-encoded, and Envoy logs it so.
        if log.contains("closed: 9, this%20client%20agent%20has%20ACLs%20enabled") {
            Ok(())
        } else {
            Err(log)
        }
    });
    let stats = web_envoy.stats();
    assert_eq!(
        stats
            .get("listener_manager.lds.update_success")
            .copied()
            .unwrap_or(0),
        0,
        "{stats:?}"
    );
}
