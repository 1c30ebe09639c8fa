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
//!
//! Bounded: every wait has a deadline. A missing interpreter or module is a failure, not a
//! skip: `tests/run.sh` installs them.

use crate::common::{praetor_in, Agent, TempDir};
use std::process::{Command, Output};

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
