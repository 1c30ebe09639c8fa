//! Mesh traffic across two datacenters through Envoy mesh gateways, with real processes
//! on loopback: dc1 (the primary) and dc2 are `-dev` servers joined over the WAN pool; `web`
//! and its Envoy sidecar run in dc1, `db` (an echo server) and its Envoy sidecar in dc2,
//! and each datacenter has one Envoy mesh gateway started by `praetor connect envoy
//! -gateway=mesh -register -address <lan> -wan-address <wan>`.
//!
//! The direct path is cut: each datacenter's Envoys run in a cgroup of their own and an
//! `OUTPUT` rule rejects TCP from that cgroup to the other datacenter's LAN address (the
//! agents' and apps' address; every Envoy connects from 127.0.0.1, so the rule goes by
//! process, see `support::two_dc`). A datacenter's WAN address, where only its
//! mesh gateway listens, stays open. So `web` reaches `db` only through gateways, and a
//! sidecar told to go direct (`MeshGateway.Mode = none`) fails: the test shows the cut
//! holds before it counts on it.
//!
//! - `Mode: local` (proxy-defaults): web's sidecar → dc1's gateway (LAN) → dc2's gateway
//!   (WAN) → db's sidecar; `Mode: remote`: web's sidecar → dc2's gateway (WAN) → db's
//!   sidecar, dc1's gateway untouched; an upstream's own `MeshGateway` wins over
//!   proxy-defaults.
//! - The gateways never terminate TLS: `openssl s_client` with db's SNI, at either
//!   gateway, is answered with db's sidecar certificate (`…/dc/dc2/svc/db`).
//! - A deny intention written in dc2 refuses web; deleting it lets web in again.
//! - `kill -9` of dc2's gateway stops the traffic; a new one restores it.
//!
//! Bounded: every wait has a deadline. Needs root (iptables, cgroups), Envoy, openssl and
//! curl, which `tests/run.sh` installs.

use crate::common;
use crate::envoy;
use crate::two_dc;

use common::{echo_server, fresh_loopback, round_trip, Agent, TempDir};
use envoy::{free_port, register_with_sidecar, wait_for, write_config, Envoy};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

/// How long dc2 may take to join the WAN pool and replicate dc1's roots.
const FEDERATION_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a path may take to carry its first byte after a change: Envoy's start, an xDS
/// round, a remote blocking read's wake-up, a gateway's check turning healthy (every 10 s).
const PATH_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a changed intention may take to decide the next connection.
const INTENTION_TIMEOUT: Duration = Duration::from_secs(15);

/// The addresses of `cluster`'s endpoints as Envoy's admin `/clusters` lists them.
fn endpoints_of(envoy: &Envoy, cluster: &str) -> Vec<String> {
    let prefix = format!("{cluster}::");
    let mut out: Vec<String> = envoy
        .admin_get("/clusters")
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (address, field) = rest.split_once("::")?;
            field.starts_with("cx_total").then(|| address.to_string())
        })
        .collect();
    out.dedup();
    out
}

fn stat(envoy: &Envoy, name: &str) -> i64 {
    envoy.stats().get(name).copied().unwrap_or(0)
}

/// Waits until `cluster` of `envoy` has exactly `expected` as its endpoints.
fn wait_for_endpoints(envoy: &Envoy, cluster: &str, expected: SocketAddr) {
    wait_for(
        &format!("{cluster} → {expected}"),
        PATH_TIMEOUT,
        || match endpoints_of(envoy, cluster) {
            list if list == vec![expected.to_string()] => Ok(()),
            other => Err(format!("endpoints {other:?}")),
        },
    );
}

fn echoes(addr: SocketAddr) -> Result<(), String> {
    let message = b"across the datacenters";
    match round_trip(addr, message)? {
        echo if echo == message => Ok(()),
        other => Err(format!("echoed {other:?}")),
    }
}

fn wait_for_echo(addr: SocketAddr, what: &str, timeout: Duration) {
    wait_for(what, timeout, || echoes(addr));
}

/// Holds while `addr` does not echo, for a few seconds (after the configuration that
/// must refuse is in place, so a refusal is the path's, not a missing listener's).
fn assert_refused(addr: SocketAddr, what: &str) {
    for _ in 0..5 {
        assert!(echoes(addr).is_err(), "{what}: the echo came through");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The URI SANs of the certificate a TLS server at `addr` presents for `sni`.
fn presented_uris(addr: SocketAddr, sni: &str) -> Result<String, String> {
    common::presented_certificate(addr, sni, &[], &["-ext", "subjectAltName"])
}

fn proxy_defaults(agent: &Agent, mode: &str) {
    write_config(
        agent,
        json!({"Kind": "proxy-defaults", "Name": "global", "MeshGateway": {"Mode": mode}}),
    );
}

/// `web` and its sidecar in dc1, its upstream `db` in dc2 with `mode` as its own
/// `MeshGateway.Mode` (empty: none of its own).
fn register_web(dc1: &Agent, ports: (u16, u16, u16), mode: &str) {
    let (web_port, proxy_port, upstream_port) = ports;
    let mut upstream = json!({
        "DestinationName": "db",
        "Datacenter": "dc2",
        "LocalBindAddress": dc1.ip.to_string(),
        "LocalBindPort": upstream_port,
    });
    if !mode.is_empty() {
        upstream["MeshGateway"] = json!({ "Mode": mode });
    }
    register_with_sidecar(dc1, "web", web_port, proxy_port, json!([upstream]));
}

fn gateway(
    agent: &Agent,
    dir: &TempDir,
    label: &str,
    (lan, wan): (SocketAddr, SocketAddr),
    cgroup: &std::path::Path,
) -> Envoy {
    Envoy::start_in(
        agent,
        dir,
        label,
        &[
            "-gateway=mesh",
            "-register",
            "-service",
            "mesh-gateway",
            "-address",
            &lan.to_string(),
            "-wan-address",
            &wan.to_string(),
        ],
        Some(cgroup),
    )
}

#[test]
fn web_in_dc1_reaches_db_in_dc2_only_through_mesh_gateways() {
    let mut fence = two_dc::Fence::new();
    let dir = TempDir::new("mesh-gateways-envoy");
    let (dc1_ip, dc2_ip) = (fresh_loopback(), fresh_loopback());
    let (dc1_wan_ip, dc2_wan_ip) = (fresh_loopback(), fresh_loopback());
    let primary = "primary_datacenter = \"dc1\"";
    let dc1 = Agent::dev_at(dc1_ip, &["-datacenter", "dc1", "-hcl", primary]);
    let join_wan = format!("retry_join_wan = [\"{dc1_ip}\"]");
    let dc2 = Agent::dev_at(
        dc2_ip,
        &["-datacenter", "dc2", "-hcl", primary, "-hcl", &join_wan],
    );
    let roots: Value = wait_for("dc2 has dc1's roots", FEDERATION_TIMEOUT, || {
        let (one, two) = (
            dc1.get("/v1/connect/ca/roots").json(),
            dc2.get("/v1/connect/ca/roots").json(),
        );
        if !one["ActiveRootID"].is_string() || one["ActiveRootID"] != two["ActiveRootID"] {
            return Err(format!(
                "dc1 {} dc2 {}",
                one["ActiveRootID"], two["ActiveRootID"]
            ));
        }
        Ok(one)
    });
    wait_for("dc1 routes to dc2", FEDERATION_TIMEOUT, || {
        let list = dc1.get("/v1/catalog/datacenters").json();
        (list.as_array().is_some_and(|l| l.len() == 2))
            .then_some(())
            .ok_or(format!("{list}"))
    });
    let trust_domain = roots["TrustDomain"].as_str().unwrap().to_string();
    let db_sni = format!("db.default.dc2.internal.{trust_domain}");

    // Each datacenter's Envoys may not reach the other's LAN address.
    let dc1_cgroup = fence.group("dc1");
    let dc2_cgroup = fence.group("dc2");
    fence.cut("dc1", dc2_ip);
    fence.cut("dc2", dc1_ip);

    // db in dc2, an echo server behind its sidecar.
    let (db_port, db_proxy_port) = (free_port(dc2_ip), free_port(dc2_ip));
    echo_server(SocketAddr::new(dc2_ip, db_port));
    register_with_sidecar(&dc2, "db", db_port, db_proxy_port, json!([]));
    let db_proxy = SocketAddr::new(dc2_ip, db_proxy_port);
    let _db_sidecar = Envoy::start_in(&dc2, &dir, "db", &["-sidecar-for", "db"], Some(&dc2_cgroup));

    // The gateways: LAN at the agent's address, WAN at an address of its own.
    let gw1 = (
        SocketAddr::new(dc1_ip, free_port(dc1_ip)),
        SocketAddr::new(dc1_wan_ip, free_port(dc1_wan_ip)),
    );
    let gw2 = (
        SocketAddr::new(dc2_ip, free_port(dc2_ip)),
        SocketAddr::new(dc2_wan_ip, free_port(dc2_wan_ip)),
    );
    let gateway1 = gateway(&dc1, &dir, "gw1", gw1, &dc1_cgroup);
    let mut gateway2 = gateway(&dc2, &dir, "gw2", gw2, &dc2_cgroup);

    // web in dc1 with its upstream db in dc2; dc1's proxy-defaults say `local`.
    proxy_defaults(&dc1, "local");
    let web_ports = (free_port(dc1_ip), free_port(dc1_ip), free_port(dc1_ip));
    register_web(&dc1, web_ports, "");
    let upstream = SocketAddr::new(dc1_ip, web_ports.2);
    let web_sidecar = Envoy::start_in(
        &dc1,
        &dir,
        "web",
        &["-sidecar-for", "web"],
        Some(&dc1_cgroup),
    );

    // Local: web's sidecar sends db's SNI to dc1's gateway, which sends it on to dc2's.
    wait_for_endpoints(&web_sidecar, &db_sni, gw1.0);
    let gw1_cluster = format!("dc2.internal.{trust_domain}");
    wait_for_endpoints(&gateway1, &gw1_cluster, gw2.1);
    wait_for_echo(upstream, "web → dc1 gw → dc2 gw → db", PATH_TIMEOUT);
    let through_gw1 = format!("cluster.{gw1_cluster}.upstream_cx_total");
    let through_gw2 = format!("cluster.{db_sni}.upstream_cx_total");
    assert!(stat(&gateway1, &through_gw1) >= 1);
    assert!(stat(&gateway2, &through_gw2) >= 1);
    for envoy in [&web_sidecar, &gateway1, &gateway2] {
        envoy.assert_connected_and_nothing_rejected();
    }

    // Neither gateway ends the TLS: db's SNI is answered with db's sidecar certificate.
    let db_id = format!("URI:spiffe://{trust_domain}/ns/default/dc/dc2/svc/db");
    for at in [gw1.0, gw2.1] {
        let uris = presented_uris(at, &db_sni).unwrap();
        assert!(uris.contains(&db_id), "at {at}: {uris}");
    }

    // None (the upstream's own mode, over proxy-defaults): straight to db's sidecar,
    // which the fence refuses.
    register_web(&dc1, web_ports, "none");
    wait_for_endpoints(&web_sidecar, &db_sni, db_proxy);
    assert_refused(upstream, "web → db directly");

    // Remote (proxy-defaults; the upstream has no mode of its own again): web's sidecar
    // sends to dc2's gateway at its WAN address, past dc1's.
    proxy_defaults(&dc1, "remote");
    register_web(&dc1, web_ports, "");
    wait_for_endpoints(&web_sidecar, &db_sni, gw2.1);
    let gw1_before = stat(&gateway1, &through_gw1);
    wait_for_echo(upstream, "web → dc2 gw → db", PATH_TIMEOUT);
    assert_eq!(
        stat(&gateway1, &through_gw1),
        gw1_before,
        "dc1's gateway was used"
    );

    // Local again, from the upstream, which wins over proxy-defaults' remote.
    register_web(&dc1, web_ports, "local");
    wait_for_endpoints(&web_sidecar, &db_sni, gw1.0);
    wait_for_echo(
        upstream,
        "web → dc1 gw → dc2 gw → db (upstream)",
        PATH_TIMEOUT,
    );
    assert!(stat(&gateway1, &through_gw1) > gw1_before);

    // dc2's intentions decide at db's sidecar.
    let r = dc2.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        json!({"Action": "deny"}).to_string().as_bytes(),
    );
    assert_eq!(r.text(), "true\n");
    wait_for("the deny intention refuses web", INTENTION_TIMEOUT, || {
        echoes(upstream)
            .err()
            .map(|_| ())
            .ok_or_else(|| "still echoing".to_string())
    });
    assert_refused(upstream, "web → db against a deny intention");
    let r = dc2.delete("/v1/connect/intentions/exact?source=web&destination=db");
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for_echo(
        upstream,
        "web → db once the intention is gone",
        PATH_TIMEOUT,
    );

    // A gateway crashes, and a new one takes its place.
    gateway2.kill9();
    wait_for("dc2's gateway is gone", INTENTION_TIMEOUT, || {
        echoes(upstream)
            .err()
            .map(|_| ())
            .ok_or_else(|| "still echoing".to_string())
    });
    gateway2 = gateway(&dc2, &dir, "gw2-again", gw2, &dc2_cgroup);
    wait_for_echo(upstream, "web → db through the new gateway", PATH_TIMEOUT);
    gateway2.assert_connected_and_nothing_rejected();

    // The registrations the CLI made are Consul's.
    let gateways = dc2.get("/v1/catalog/service/mesh-gateway").json();
    assert_eq!(gateways[0]["ServiceKind"], "mesh-gateway");
    assert_eq!(
        gateways[0]["ServiceTaggedAddresses"]["wan"],
        json!({"Address": dc2_wan_ip.to_string(), "Port": gw2.1.port()})
    );
}
