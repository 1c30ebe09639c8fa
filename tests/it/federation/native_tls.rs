//! Native TLS on the server port and the built-in mesh gateway's `-expose-servers` (issue
//! #40 part 2), spoken by an independent client: `tests/python/consul_native_tls.py` (the
//! standard library's `ssl` with `set_alpn_protocols`, msgpack, and consul_rpc.py's codec
//! and yamux) against real agents and gateways on loopback.
//!
//! Shown:
//! - a server with a CA and a certificate (`tls cert create -server -node s1`, so it names
//!   `s1.server.dc1.consul`) answers `Status.Ping` and KV calls over native TLS with ALPN
//!   `consul/rpc-single` and `consul/rpc-multi`; `consul/wan-gossip/packet` is refused by
//!   name, no ALPN is refused, a protocol none of Consul's fails the handshake, and a client
//!   without a certificate is refused; a server without a CA refuses the ClientHello;
//! - dc1 and dc2 federated over the WAN, each with a built-in mesh gateway started with
//!   `-expose-servers`: through dc1's gateway `s1.server.dc1.consul` and
//!   `server.dc1.consul` reach dc1's server; through dc2's gateway `s1.server.dc1.consul`
//!   travels dc2 gateway → dc1 gateway → s1; an unknown node's name is closed.
//!
//! Bounded: every wait has a deadline. A missing interpreter or module is a failure, not a
//! skip: `tests/run.sh` installs them.

use crate::agent_support::wait_for;
use crate::common::{fresh_loopback, praetor_binary, praetor_in, Agent, TempDir};
use crate::envoy::free_port;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// How long dc2 may take to join the WAN pool and replicate dc1's roots.
const FEDERATION_LIMIT: Duration = Duration::from_secs(90);
/// How long a gateway's routes may take to appear: its watches are blocking queries and a
/// gateway's TCP check runs every 10 s.
const ROUTE_LIMIT: Duration = Duration::from_secs(60);

fn run_script(args: &[&str]) -> Output {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/consul_native_tls.py"
    );
    Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 must be installed (tests/run.sh installs it)")
}

fn describe(output: &Output) -> String {
    format!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A certificate authority and the certificates the tests hand out, in a temporary dir.
struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = TempDir::new(name);
        praetor_in(dir.path(), &["tls", "ca", "create"]);
        praetor_in(dir.path(), &["tls", "cert", "create", "-client"]);
        Pki { dir }
    }

    /// `tls cert create -server -dc <dc> -node <node>`.
    fn server(&self, dc: &str, node: &str) {
        praetor_in(
            self.dir.path(),
            &["tls", "cert", "create", "-server", "-dc", dc, "-node", node],
        );
    }

    fn file(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// The `tls` block of a server of `dc` (its first certificate).
    fn server_tls(&self, dc: &str, extra: &str) -> String {
        format!(
            "tls {{ defaults {{ ca_file = \"{}\" cert_file = \"{}\" key_file = \"{}\" }} {extra} }}",
            self.file("consul-agent-ca.pem"),
            self.file(&format!("{dc}-server-consul-0.pem")),
            self.file(&format!("{dc}-server-consul-0-key.pem")),
        )
    }

    /// The client's CA, certificate and key arguments.
    fn client_args(&self) -> [String; 3] {
        [
            self.file("consul-agent-ca.pem"),
            self.file("dc1-client-consul-0.pem"),
            self.file("dc1-client-consul-0-key.pem"),
        ]
    }
}

#[test]
fn native_tls_with_consuls_alpn_names_serves_rpc_and_refuses_the_rest() {
    let pki = Pki::new("native-tls-pki");
    pki.server("dc1", "s1");
    let tls = pki.server_tls("dc1", "internal_rpc { verify_incoming = true }");
    let agent = Agent::dev(&["-node", "s1", "-hcl", &tls]);
    let [ca, cert, key] = pki.client_args();
    let ip = agent.ip.to_string();
    let output = run_script(&["direct", &ip, &ca, &cert, &key, "s1", "dc1"]);
    let log = agent.log();
    assert!(
        output.status.success(),
        "{}\nagent log:\n{log}",
        describe(&output)
    );
    for refusal in [
        "ALPN protocol consul/wan-gossip/packet is not spoken by praetor",
        "native TLS connection negotiated no ALPN protocol",
    ] {
        assert!(log.contains(refusal), "no {refusal:?} in the log:\n{log}");
    }
    assert!(!log.contains("panicked"), "{log}");

    // A server without a CA cannot verify clients, so it takes no native TLS at all.
    let plain = Agent::dev(&[]);
    let address = format!("{}:8300", plain.ip);
    let output = run_script(&[
        "refused",
        &address,
        "s1.server.dc1.consul",
        &ca,
        &cert,
        &key,
    ]);
    assert!(output.status.success(), "{}", describe(&output));
    let log = plain.log();
    assert!(
        log.contains("native TLS requested but this server has no CA and certificate configured"),
        "{log}"
    );
}

/// A `praetor connect proxy` process, SIGKILLed on drop.
struct Gateway {
    child: Child,
    log: PathBuf,
    lan: SocketAddr,
}

impl Gateway {
    /// `connect proxy -gateway=mesh -register -expose-servers` at `ip` for `agent`.
    fn start(dir: &Path, name: &str, agent: &Agent, ip: IpAddr) -> Gateway {
        let (lan, wan) = (free_port(ip), free_port(ip));
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(praetor_binary())
            .args([
                "connect".to_string(),
                "proxy".into(),
                "-threads".into(),
                "1".into(),
                format!("-http-addr={}", agent.http_addr()),
                "-log-level".into(),
                "debug".into(),
                "-gateway=mesh".into(),
                "-register".into(),
                "-expose-servers".into(),
                "-address".into(),
                format!("{ip}:{lan}"),
                "-wan-address".into(),
                format!("{ip}:{wan}"),
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Gateway {
            child,
            log,
            lan: SocketAddr::new(ip, lan),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn builtin_mesh_gateways_expose_their_datacenters_servers_by_sni() {
    let pki = Pki::new("expose-servers-pki");
    pki.server("dc1", "s1");
    pki.server("dc2", "s2");
    let dir = TempDir::new("expose-servers");
    let (dc1_ip, dc2_ip, gw1_ip, gw2_ip) = (
        fresh_loopback(),
        fresh_loopback(),
        fresh_loopback(),
        fresh_loopback(),
    );
    let primary = "primary_datacenter = \"dc1\"";
    // No verify_incoming: `?dc=` forwarding stays plain RPC, and native TLS demands a client
    // certificate anyway.
    let dc1 = Agent::dev_at(
        dc1_ip,
        &[
            "-datacenter",
            "dc1",
            "-node",
            "s1",
            "-hcl",
            primary,
            "-hcl",
            &pki.server_tls("dc1", ""),
        ],
    );
    let join_wan = format!("retry_join_wan = [\"{dc1_ip}\"]");
    let dc2 = Agent::dev_at(
        dc2_ip,
        &[
            "-datacenter",
            "dc2",
            "-node",
            "s2",
            "-hcl",
            primary,
            "-hcl",
            &join_wan,
            "-hcl",
            &pki.server_tls("dc2", ""),
        ],
    );
    wait_for(FEDERATION_LIMIT, "dc2 federated with dc1", || {
        let roots = dc2.get("/v1/connect/ca/roots").json();
        let datacenters = dc2.get("/v1/catalog/datacenters").json();
        (roots["TrustDomain"].as_str().is_some_and(|t| !t.is_empty())
            && datacenters.as_array().is_some_and(|d| d.len() == 2))
        .then_some(())
    });
    let gw1 = Gateway::start(dir.path(), "gw1", &dc1, gw1_ip);
    let gw2 = Gateway::start(dir.path(), "gw2", &dc2, gw2_ip);
    let [ca, cert, key] = pki.client_args();
    let logs = || {
        format!(
            "gw1:\n{}\ngw2:\n{}\ndc1:\n{}",
            gw1.log(),
            gw2.log(),
            dc1.log()
        )
    };
    let through = |gateway: SocketAddr, sni: &str| {
        let address = gateway.to_string();
        let mut last = String::new();
        let found = wait_for_ok(ROUTE_LIMIT, || {
            let output = run_script(&["through", &address, sni, &ca, &cert, &key]);
            last = describe(&output);
            output.status.success()
        });
        assert!(found, "{sni} through {address}: {last}\n{}", logs());
        assert!(last.contains(&format!("leader {dc1_ip}:8300")), "{last}");
    };
    through(gw1.lan, "s1.server.dc1.consul");
    through(gw1.lan, "server.dc1.consul");
    // dc2's gateway hands dc1's server names to dc1's gateway.
    through(gw2.lan, "s1.server.dc1.consul");
    let output = run_script(&[
        "refused",
        &gw1.lan.to_string(),
        "nobody.server.dc1.consul",
        &ca,
        &cert,
        &key,
    ]);
    assert!(output.status.success(), "{}\n{}", describe(&output), logs());
    assert!(
        gw1.log()
            .contains("no healthy server \"nobody\" in this datacenter"),
        "{}",
        logs()
    );
}

/// Retries `probe` every half second until it holds or `limit` passes.
fn wait_for_ok(limit: Duration, mut probe: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if probe() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
