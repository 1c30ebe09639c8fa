//! Mesh traffic across two datacenters through the built-in proxy as mesh gateway, with
//! real processes on loopback: dc1 and dc2 are `-dev` servers joined over the WAN
//! (`primary_datacenter = "dc1"`, so a dc2 leaf chains to dc1's roots); web's built-in
//! sidecar runs in dc1 with an upstream `db` in dc2; db (an echo server) and its built-in
//! sidecar run in dc2; each datacenter runs one `praetor connect proxy -gateway=mesh
//! -register`.
//!
//! The direct path is cut with iptables. Every process has its own 127.x address, and the
//! built-in proxy dials from its own address (a sidecar from its public listener's IP, a
//! gateway from its LAN IP towards local instances and its WAN IP towards other gateways),
//! so a connection's source and destination name the two processes it joins. Dropping
//! packets between web's sidecar address and db's address (both directions, on `INPUT`,
//! with `tests/it/support/nemesis.rs`) cuts the direct path while web sidecar → dc1
//! gateway → dc2 gateway → db sidecar stays open; the test's own connections come from
//! 127.0.0.1.
//!
//! Shown:
//! - before the cut, mode none (the default) reaches db directly; after it, it does not;
//! - `MeshGateway.Mode = local` (proxy-defaults in dc1, read through the discovery chain)
//!   carries traffic through both gateways, and `openssl s_client` through dc1's gateway
//!   with db's SNI sees db's sidecar certificate (`…/dc/dc2/svc/db`): no gateway
//!   terminates TLS;
//! - `Mode = remote` carries traffic with dc1's gateway killed (`kill -9`); killing dc2's
//!   gateway stops it, restarting it restores it;
//! - a deny intention web → db written in dc2 refuses the connection.
//!
//! Bounded: every wait has a deadline.

use crate::nemesis;

use super::connect_proxy::free_port;
use crate::agent_support::wait_for;
use crate::common::{
    echo_server, fresh_loopback, praetor_binary, presented_certificate, round_trip, Agent, TempDir,
};
use nemesis::Firewall;
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long dc2 may take to join the WAN pool and replicate dc1's roots.
const FEDERATION_LIMIT: Duration = Duration::from_secs(90);
/// How long a route may take to appear or change: a mode change is reread within 10 s, a
/// gateway's TCP check runs every 10 s, and a blocking query wakes within its wait.
const ROUTE_LIMIT: Duration = Duration::from_secs(60);
/// How long a cut direct path is tried to show it stays cut.
const CUT_PROBE: Duration = Duration::from_secs(4);

/// A `praetor connect proxy` process, SIGKILLed on drop.
struct Proxy {
    args: Vec<String>,
    child: Option<Child>,
    log: PathBuf,
}

impl Proxy {
    fn start(dir: &Path, name: &str, args: Vec<String>) -> Proxy {
        let mut proxy = Proxy {
            args,
            child: None,
            log: dir.join(format!("{name}.log")),
        };
        proxy.restart();
        proxy
    }

    fn restart(&mut self) {
        assert!(self.child.is_none());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(praetor_binary())
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn proxy_args(agent: &Agent, extra: &[String]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "connect".into(),
        "proxy".into(),
        "-threads".into(),
        "1".into(),
        format!("-http-addr={}", agent.http_addr()),
        "-log-level".into(),
        "debug".into(),
    ];
    args.extend(extra.iter().cloned());
    args
}

fn put(agent: &Agent, path: &str, body: Value) {
    let r = agent.put(path, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "PUT {path}: {}", r.text());
}

/// Whether a message comes back through `addr` now.
fn carries(addr: SocketAddr) -> Result<(), String> {
    let message = b"across datacenters".to_vec();
    let echo = round_trip(addr, &message)?;
    if echo != message {
        return Err("a different echo".to_string());
    }
    Ok(())
}

/// Waits until `addr` carries a message, or fails with `context`'s logs.
fn until_carried(addr: SocketAddr, what: &str, context: impl Fn() -> String) {
    let deadline = Instant::now() + ROUTE_LIMIT;
    loop {
        match carries(addr) {
            Ok(()) => return,
            Err(e) => assert!(Instant::now() < deadline, "{what}: {e}\n{}", context()),
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Waits until `addr` stops carrying messages, then checks it stays so for [`CUT_PROBE`].
fn until_refused(addr: SocketAddr, what: &str, context: impl Fn() -> String) {
    let deadline = Instant::now() + ROUTE_LIMIT;
    while carries(addr).is_ok() {
        assert!(
            Instant::now() < deadline,
            "{what}: still carried\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let probe_end = Instant::now() + CUT_PROBE;
    while Instant::now() < probe_end {
        assert!(
            carries(addr).is_err(),
            "{what}: carried again\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The SAN extension of the certificate a TLS server presents to `openssl s_client`
/// connecting to `addr` with `sni`, authenticating with web's leaf (or why none came).
fn presented_identity(dir: &Path, addr: SocketAddr, sni: &str) -> String {
    let (cert, key) = (dir.join("web.pem"), dir.join("web.key"));
    let client = [
        "-cert",
        cert.to_str().unwrap(),
        "-key",
        key.to_str().unwrap(),
    ];
    presented_certificate(addr, sni, &client, &["-ext", "subjectAltName"]).unwrap_or_else(|e| e)
}

#[test]
fn web_in_dc1_reaches_db_in_dc2_through_two_builtin_mesh_gateways() {
    let dir = TempDir::new("mesh-gateways-builtin");
    let (dc1_ip, dc2_ip) = (fresh_loopback(), fresh_loopback());
    let (web_ip, db_ip, gw1_ip, gw2_ip) = (
        fresh_loopback(),
        fresh_loopback(),
        fresh_loopback(),
        fresh_loopback(),
    );
    let primary = "primary_datacenter = \"dc1\"";
    let dc1 = Agent::dev_at(dc1_ip, &["-datacenter", "dc1", "-hcl", primary]);
    let join_wan = format!("retry_join_wan = [\"{dc1_ip}\"]");
    let dc2 = Agent::dev_at(
        dc2_ip,
        &["-datacenter", "dc2", "-hcl", primary, "-hcl", &join_wan],
    );
    let dc1_roots = wait_for(Duration::from_secs(20), "dc1's CA", || {
        let r = dc1.get("/v1/connect/ca/roots");
        (r.status == 200
            && r.json()["ActiveRootID"]
                .as_str()
                .is_some_and(|id| !id.is_empty()))
        .then(|| r.json())
    });
    let trust_domain = dc1_roots["TrustDomain"].as_str().unwrap().to_string();
    wait_for(FEDERATION_LIMIT, "dc2 federated with dc1", || {
        let roots = dc2.get("/v1/connect/ca/roots").json();
        let datacenters = dc1.get("/v1/catalog/datacenters").json();
        (roots["ActiveRootID"] == dc1_roots["ActiveRootID"]
            && datacenters.as_array().is_some_and(|d| d.len() == 2))
        .then_some(())
    });

    // db and its sidecar in dc2; web's sidecar in dc1, its upstream db in dc2.
    let (db_port, db_proxy_port) = (free_port(db_ip), free_port(db_ip));
    echo_server(SocketAddr::new(db_ip, db_port));
    put(
        &dc2,
        "/v1/agent/service/register",
        json!({"Name": "db", "Port": db_port, "Address": db_ip.to_string(),
            "Connect": {"SidecarService": {
                "Address": db_ip.to_string(), "Port": db_proxy_port,
                "Proxy": {"LocalServiceAddress": db_ip.to_string()},
                "Check": {"TCP": format!("{db_ip}:{db_proxy_port}"), "Interval": "1s"}}}}),
    );
    let (web_proxy_port, upstream_port) = (free_port(web_ip), free_port(web_ip));
    put(
        &dc1,
        "/v1/agent/service/register",
        json!({"Name": "web", "Port": free_port(web_ip), "Address": web_ip.to_string(),
            "Connect": {"SidecarService": {
                "Address": web_ip.to_string(), "Port": web_proxy_port,
                "Proxy": {"Upstreams": [{"DestinationName": "db", "Datacenter": "dc2",
                    "LocalBindAddress": web_ip.to_string(), "LocalBindPort": upstream_port}]},
                "Check": {"TCP": format!("{web_ip}:{web_proxy_port}"), "Interval": "1s"}}}}),
    );
    let db_proxy = Proxy::start(
        dir.path(),
        "db-proxy",
        proxy_args(&dc2, &["-sidecar-for".into(), "db".into()]),
    );
    let web_proxy = Proxy::start(
        dir.path(),
        "web-proxy",
        proxy_args(&dc1, &["-sidecar-for".into(), "web".into()]),
    );
    let gateway = |agent: &Agent, ip: IpAddr, name: &str| {
        let (lan, wan) = (free_port(ip), free_port(ip));
        let args = proxy_args(
            agent,
            &[
                "-gateway=mesh".into(),
                "-register".into(),
                "-address".into(),
                format!("{ip}:{lan}"),
                "-wan-address".into(),
                format!("{ip}:{wan}"),
            ],
        );
        (
            Proxy::start(dir.path(), name, args),
            SocketAddr::new(ip, lan),
        )
    };
    let (mut gw1, gw1_lan) = gateway(&dc1, gw1_ip, "gw1");
    let (mut gw2, _) = gateway(&dc2, gw2_ip, "gw2");
    let upstream = SocketAddr::new(web_ip, upstream_port);
    let log_files: Vec<PathBuf> = [&web_proxy, &gw1, &gw2, &db_proxy]
        .iter()
        .map(|p| p.log.clone())
        .collect();
    let logs = || {
        log_files
            .iter()
            .map(|f| {
                format!(
                    "{}:\n{}\n",
                    f.display(),
                    std::fs::read_to_string(f).unwrap_or_default()
                )
            })
            .collect::<String>()
    };

    // Mode none: web's sidecar dials db's directly, until the direct path is cut.
    until_carried(upstream, "mode none, direct", logs);
    let mut firewall = Firewall::new(&[web_ip, db_ip]);
    firewall.isolate(web_ip, &[db_ip]);
    until_refused(upstream, "mode none with the direct path cut", logs);

    // Mode local: through dc1's gateway (LAN), then dc2's (WAN), then db's sidecar.
    put(
        &dc1,
        "/v1/config",
        json!({"Kind": "proxy-defaults", "Name": "global", "MeshGateway": {"Mode": "local"}}),
    );
    until_carried(upstream, "mode local through both gateways", logs);
    // The gateways never terminate TLS: a client through dc1's gateway sees db's sidecar.
    let leaf = dc1.get("/v1/agent/connect/ca/leaf/web").json();
    std::fs::write(
        dir.path().join("web.pem"),
        leaf["CertPEM"].as_str().unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("web.key"),
        leaf["PrivateKeyPEM"].as_str().unwrap(),
    )
    .unwrap();
    let sni = format!("db.default.dc2.internal.{trust_domain}");
    let identity = presented_identity(dir.path(), gw1_lan, &sni);
    assert!(
        identity.contains(&format!("spiffe://{trust_domain}/ns/default/dc/dc2/svc/db")),
        "the certificate seen through the gateways: {identity}"
    );
    // A name the gateway does not route is closed without a certificate.
    let unknown = presented_identity(dir.path(), gw1_lan, "example.com");
    assert!(!unknown.contains("spiffe://"), "{unknown}");

    // Mode remote: straight to dc2's gateway, so dc1's gateway can die.
    put(
        &dc1,
        "/v1/config",
        json!({"Kind": "proxy-defaults", "Name": "global", "MeshGateway": {"Mode": "remote"}}),
    );
    gw1.kill9();
    until_carried(upstream, "mode remote without dc1's gateway", logs);

    // dc2's gateway killed: nothing gets through; restarted: traffic is back.
    gw2.kill9();
    until_refused(upstream, "dc2's gateway killed", logs);
    gw2.restart();
    until_carried(upstream, "dc2's gateway restarted", logs);

    // A deny intention in dc2 refuses web at db's sidecar.
    put(
        &dc2,
        "/v1/connect/intentions/exact?source=web&destination=db",
        json!({"Action": "deny"}),
    );
    until_refused(upstream, "a deny intention in dc2", logs);
    assert!(
        db_proxy.log().contains("refused"),
        "db's sidecar refused web: {}",
        db_proxy.log()
    );
    firewall.heal();
}
