//! Consul's Envoy escape hatches on real Envoy sidecars configured by a `praetor agent
//! -dev`: a sidecar's `envoy_public_listener_json` and `envoy_local_cluster_json` and an
//! upstream's `envoy_cluster_json` show in Envoy's `/config_dump` as written (their names,
//! their connect timeouts) while TCP still flows over mTLS between the two Envoys, a deny
//! intention still refuses the next connection and an allow restores it, and Envoy rejects
//! no update. An escape hatch that does not decode sends the proxy nothing (the agent logs
//! why) rather than a resource Envoy would reject, and a corrected registration is served.

use crate::common;
use crate::envoy;

use common::{echo_server, round_trip, Agent, TempDir};
use envoy::{free_port, wait_for, Envoy};
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// How long a mesh may take to carry its first byte after the Envoys start.
const MESH_READY_TIMEOUT: Duration = Duration::from_secs(60);

const CLUSTER_TYPE: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const LISTENER_TYPE: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";

/// A custom `local_app`: a static cluster to `ip:port` with a connect timeout of 1.234s.
fn local_cluster_json(ip: IpAddr, port: u16) -> String {
    json!({
        "@type": CLUSTER_TYPE,
        "name": "local_app",
        "type": "STATIC",
        "connect_timeout": "1.234s",
        "load_assignment": {"cluster_name": "local_app", "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {
                "address": ip.to_string(), "port_value": port}}}}
        ]}]}
    })
    .to_string()
}

/// A custom public listener `custom_public` on `ip:port`: a TCP proxy to `local_app`, with
/// neither TLS nor RBAC of its own (the agent adds both).
fn public_listener_json(ip: IpAddr, port: u16) -> String {
    json!({
        "@type": LISTENER_TYPE,
        "name": "custom_public",
        "address": {"socket_address": {"address": ip.to_string(), "port_value": port}},
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.tcp_proxy",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                "stat_prefix": "custom_public",
                "cluster": "local_app"
            }
        }]}]
    })
    .to_string()
}

/// A custom EDS cluster for the upstream `db`, named as Consul names its cluster (so the
/// generated listener still reaches it), with a connect timeout of 3.456s and no TLS (the
/// agent adds the upstream's).
fn upstream_cluster_json(sni: &str) -> String {
    json!({
        "@type": CLUSTER_TYPE,
        "name": sni,
        "type": "EDS",
        "connect_timeout": "3.456s",
        "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}}
    })
    .to_string()
}

/// Registers `name` on `port` with a sidecar on `proxy_port` whose proxy has `config` and
/// `upstreams`.
fn register_sidecar(agent: &Agent, service: (&str, u16, u16), config: Value, upstreams: Value) {
    envoy::register_with_sidecar_config(agent, service, Some(config), upstreams);
}

fn trust_domain(agent: &Agent) -> String {
    agent.get("/v1/connect/ca/roots").json()["TrustDomain"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Waits until connections through `upstream` are refused (`refused`) or carried.
fn wait_until(upstream: SocketAddr, refused: bool, what: &str) {
    let message = b"escape hatches".to_vec();
    let started = Instant::now();
    loop {
        let carried = round_trip(upstream, &message).is_ok_and(|echo| echo == message);
        if carried != refused {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what} took longer than five seconds"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn escape_hatches_shape_envoy_while_mtls_and_intentions_hold() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("envoy-escape");
    let ip = agent.ip;
    let db_port = free_port(ip);
    let db_proxy_port = free_port(ip);
    let upstream_port = free_port(ip);
    echo_server(SocketAddr::new(ip, db_port));
    let sni = format!("db.default.dc1.internal.{}", trust_domain(&agent));
    register_sidecar(
        &agent,
        ("db", free_port(ip), db_proxy_port),
        json!({
            "envoy_local_cluster_json": local_cluster_json(ip, db_port),
            "envoy_public_listener_json": public_listener_json(ip, db_proxy_port),
        }),
        json!([]),
    );
    register_sidecar(
        &agent,
        ("web", free_port(ip), free_port(ip)),
        json!({}),
        json!([{"DestinationName": "db", "LocalBindAddress": ip.to_string(),
                "LocalBindPort": upstream_port,
                "Config": {"envoy_cluster_json": upstream_cluster_json(&sni)}}]),
    );
    let db_envoy = Envoy::start(&agent, &dir, "db", &["-sidecar-for", "db"]);
    let web_envoy = Envoy::start(&agent, &dir, "web", &["-sidecar-for", "web"]);
    let upstream = SocketAddr::new(ip, upstream_port);
    let message = b"through two customized envoys".to_vec();
    wait_for("the mesh carries a message", MESH_READY_TIMEOUT, || {
        round_trip(upstream, &message).map_err(|e| {
            format!(
                "{e}\nweb envoy:\n{}\ndb envoy:\n{}",
                web_envoy.log(),
                db_envoy.log()
            )
        })
    });

    // The hatches are what Envoy runs.
    let db_dump = db_envoy.admin_get("/config_dump");
    for expected in [
        "\"custom_public\"",
        "\"connect_timeout\": \"1.234s\"",
        "\"require_client_certificate\": true",
        "envoy.filters.network.rbac",
    ] {
        assert!(
            db_dump.contains(expected),
            "db's config_dump lacks {expected}"
        );
    }
    assert!(
        !db_dump.contains("\"public_listener:"),
        "the custom listener replaces the generated one"
    );
    let web_dump = web_envoy.admin_get("/config_dump");
    assert!(web_dump.contains("\"connect_timeout\": \"3.456s\""));
    assert!(
        web_dump.contains(&format!("\"sni\": \"{sni}\"")),
        "upstream mTLS"
    );

    // Intentions still decide at the custom listener.
    let deny = agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        json!({"Action": "deny"}).to_string().as_bytes(),
    );
    assert_eq!(deny.text(), "true\n");
    wait_until(upstream, true, "a deny");
    let stats = db_envoy.stats();
    assert!(
        stats.get("connect_authz.rbac.denied").copied().unwrap_or(0) >= 1,
        "{stats:?}"
    );
    let allow = agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        json!({"Action": "allow"}).to_string().as_bytes(),
    );
    assert_eq!(allow.text(), "true\n");
    wait_until(upstream, false, "an allow");
    for envoy in [&web_envoy, &db_envoy] {
        envoy.assert_connected_and_nothing_rejected();
    }
}

#[test]
fn an_escape_hatch_that_does_not_decode_sends_nothing_until_corrected() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("envoy-escape-bad");
    let ip = agent.ip;
    let port = free_port(ip);
    let proxy_port = free_port(ip);
    echo_server(SocketAddr::new(ip, port));
    let bad = json!({"@type": CLUSTER_TYPE, "name": "local_app", "connect_timeout": "soon"});
    register_sidecar(
        &agent,
        ("api", port, proxy_port),
        json!({"envoy_local_cluster_json": bad.to_string()}),
        json!([]),
    );
    let envoy = Envoy::start(&agent, &dir, "api", &["-sidecar-for", "api"]);
    wait_for("Envoy connects", MESH_READY_TIMEOUT, || {
        match envoy.stats().get("control_plane.connected_state") {
            Some(1) => Ok(()),
            other => Err(format!("connected_state {other:?}\n{}", envoy.log())),
        }
    });
    std::thread::sleep(Duration::from_secs(2));
    let stats = envoy.stats();
    let rejected: i64 = stats
        .iter()
        .filter(|(k, _)| k.ends_with("update_rejected"))
        .map(|(_, v)| *v)
        .sum();
    assert_eq!(rejected, 0, "{stats:?}");
    assert_eq!(
        stats
            .get("listener_manager.lds.update_success")
            .copied()
            .unwrap_or(0),
        0,
        "nothing is sent for a snapshot that does not build: {stats:?}"
    );

    // A corrected hatch is served.
    register_sidecar(
        &agent,
        ("api", port, proxy_port),
        json!({"envoy_local_cluster_json": local_cluster_json(ip, port)}),
        json!([]),
    );
    wait_for("the corrected hatch is served", MESH_READY_TIMEOUT, || {
        let dump = envoy.admin_get("/config_dump");
        if dump.contains("\"connect_timeout\": \"1.234s\"") && dump.contains("public_listener:") {
            Ok(())
        } else {
            Err(envoy.log())
        }
    });
    envoy.assert_connected_and_nothing_rejected();
}
