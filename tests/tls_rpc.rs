//! The server port (:8300) over TLS on real processes: a cluster with `verify_incoming`,
//! `verify_outgoing` and `verify_server_hostname` elects, replicates and forwards; for each
//! switch a dialer that must be refused is refused, with a readable log line.

mod common;

use bytes::BytesMut;
use common::{praetor_binary, Agent, Cluster, TempDir};
use praetor::proto::rpc::{encode_frame, kind};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Consul's protocol bytes: TLS follows; Raft; multiplexed requests.
const BYTE_TLS: u8 = 3;
const BYTE_RAFT: u8 = 1;
const BYTE_RPC: u8 = 4;

fn praetor_in(dir: &Path, args: &[&str]) {
    let output = Command::new(praetor_binary())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run praetor");
    assert!(
        output.status.success(),
        "praetor {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// An agent CA with one server and one client certificate, made by `praetor tls`.
struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = TempDir::new(name);
        praetor_in(dir.path(), &["tls", "ca", "create"]);
        praetor_in(dir.path(), &["tls", "cert", "create", "-server"]);
        praetor_in(dir.path(), &["tls", "cert", "create", "-client"]);
        Pki { dir }
    }
    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn ca(&self) -> PathBuf {
        self.file("consul-agent-ca.pem")
    }
    /// (certificate, key) of the server or the client certificate.
    fn pair(&self, kind: &str) -> (PathBuf, PathBuf) {
        (
            self.file(&format!("dc1-{kind}-consul-0.pem")),
            self.file(&format!("dc1-{kind}-consul-0-key.pem")),
        )
    }
    /// The `tls` stanza with this CA, the `kind` certificate and `internal_rpc` settings.
    fn hcl(&self, kind: &str, internal_rpc: &str) -> String {
        let (cert, key) = self.pair(kind);
        format!(
            "tls {{ defaults {{ ca_file = \"{}\" cert_file = \"{}\" key_file = \"{}\" }} internal_rpc {{ {internal_rpc} }} }}",
            self.ca().display(),
            cert.display(),
            key.display()
        )
    }
}

const ALL_SWITCHES: &str =
    "verify_incoming = true verify_outgoing = true verify_server_hostname = true";

fn wait_for_log(agent: &Agent, what: &[&str], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let log = agent.log();
        if log
            .lines()
            .any(|line| what.iter().all(|w| line.contains(w)))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no log line with {what:?} on {}:\n{log}",
            agent.ip
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ping_frame() -> Vec<u8> {
    let mut frame = BytesMut::new();
    encode_frame(&mut frame, kind::PING, 7, b"");
    frame.to_vec()
}

/// Reads until the peer closes (or 5 s pass); returns what came.
fn read_until_closed(stream: &mut impl Read) -> Vec<u8> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
}

fn roots(ca: &Path) -> rustls::RootCertStore {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    roots
}

/// Dials `addr` with the TLS byte and a rustls handshake (verifying the server against
/// `ca` by the name `server.dc1.consul`), presenting `client` if given.
fn dial_tls(
    addr: SocketAddr,
    ca: &Path,
    client: Option<(PathBuf, PathBuf)>,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    use rustls::pki_types::pem::PemObject;
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots(ca));
    let config = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                rustls::pki_types::CertificateDer::pem_file_iter(cert)
                    .unwrap()
                    .map(|c| c.unwrap())
                    .collect(),
                rustls::pki_types::PrivateKeyDer::from_pem_file(key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let name = rustls::pki_types::ServerName::try_from("server.dc1.consul").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut socket = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    socket.write_all(&[BYTE_TLS]).unwrap();
    rustls::StreamOwned::new(connection, socket)
}

#[test]
fn a_cluster_with_every_switch_on_elects_replicates_forwards_and_refuses_the_rest() {
    let pki = Pki::new("rpc-tls-pki");
    let cluster = Cluster::start(3, &["-hcl", &pki.hcl("server", ALL_SWITCHES)]);
    let leader = cluster.wait_for_leader(Duration::from_secs(30));
    let follower = (leader + 1) % 3;

    // A write on a follower is forwarded to the leader over TLS and replicated to all.
    assert_eq!(
        cluster.servers[follower]
            .put("/v1/kv/tls/a", b"forwarded")
            .text()
            .trim(),
        "true"
    );
    for server in &cluster.servers {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let answer = server.get("/v1/kv/tls/a?raw&stale");
            if answer.status == 200 && answer.text() == "forwarded" {
                break;
            }
            assert!(Instant::now() < deadline, "not replicated to {}", server.ip);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // A client agent with a client certificate forwards its writes over TLS.
    let client_data = TempDir::new("rpc-tls-client");
    let client = cluster.start_client(
        &client_data,
        &[
            "-hcl",
            &pki.hcl(
                "client",
                "verify_outgoing = true verify_server_hostname = true",
            ),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(answer) = common::try_request(
            client.addr(),
            "PUT",
            "/v1/kv/tls/from-client",
            b"client",
            &[],
        ) {
            if answer.status == 200 {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "client never wrote:\n{}",
            client.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        cluster.servers[leader]
            .get("/v1/kv/tls/from-client?raw")
            .text(),
        "client"
    );

    let rpc_addr = SocketAddr::new(cluster.servers[leader].ip, 8300);
    let leader_agent = &cluster.servers[leader];

    // verify_incoming: plaintext requests and Raft are refused.
    for byte in [BYTE_RPC, BYTE_RAFT] {
        let mut plain = TcpStream::connect_timeout(&rpc_addr, Duration::from_secs(5)).unwrap();
        plain
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        plain.write_all(&[byte]).unwrap();
        let _ = plain.write_all(&ping_frame());
        assert!(read_until_closed(&mut plain).is_empty());
        wait_for_log(
            leader_agent,
            &[
                "rpc: refused a connection from 127.",
                &format!(
                    "non-TLS connection (protocol byte {byte}) attempted with verify_incoming set"
                ),
            ],
            Duration::from_secs(5),
        );
    }

    // verify_incoming: TLS without a client certificate is refused.
    let mut certless = dial_tls(rpc_addr, &pki.ca(), None);
    let _ = certless.write_all(&[BYTE_RPC]);
    let _ = certless.write_all(&ping_frame());
    let _ = certless.flush();
    assert!(read_until_closed(&mut certless).is_empty());
    wait_for_log(
        leader_agent,
        &[
            "tls: internal_rpc handshake with 127.",
            "presented no certificate",
        ],
        Duration::from_secs(5),
    );

    // With a client certificate, requests are served...
    let mut with_client_cert = dial_tls(rpc_addr, &pki.ca(), Some(pki.pair("client")));
    with_client_cert.write_all(&[BYTE_RPC]).unwrap();
    with_client_cert.write_all(&ping_frame()).unwrap();
    with_client_cert.flush().unwrap();
    let mut pong = [0u8; 8];
    with_client_cert.read_exact(&mut pong[..1]).unwrap();

    // ...but verify_server_hostname keeps a client certificate out of Raft.
    let mut posing = dial_tls(rpc_addr, &pki.ca(), Some(pki.pair("client")));
    posing.write_all(&[BYTE_RAFT]).unwrap();
    posing.flush().unwrap();
    assert!(read_until_closed(&mut posing).is_empty());
    wait_for_log(
        leader_agent,
        &["rpc: refused Raft from 127.", "server.dc1.consul"],
        Duration::from_secs(5),
    );
}

#[test]
fn a_server_holding_a_client_certificate_never_joins_raft() {
    let pki = Pki::new("rpc-role-pki");
    let cluster = Cluster::start(3, &["-hcl", &pki.hcl("server", ALL_SWITCHES)]);
    let leader = cluster.wait_for_leader(Duration::from_secs(30));

    // With verify_server_hostname it refuses to start at all.
    let ip = common::fresh_loopback();
    let data = TempDir::new("rpc-role-impostor");
    let base = |internal_rpc: &str| -> Vec<String> {
        [
            "agent",
            "-server",
            "-node",
            &format!("impostor-{ip}"),
            "-bind",
            &ip.to_string(),
            "-client",
            &ip.to_string(),
            "-data-dir",
            data.path().to_str().unwrap(),
            "-retry-join",
            &cluster.servers[0].ip.to_string(),
            "-dns-port=-1",
            "-hcl",
            &pki.hcl("client", internal_rpc),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let output = Command::new(praetor_binary())
        .args(base(ALL_SWITCHES))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is not valid for server.dc1.consul"),
        "{stderr}"
    );

    // Without the switch on its own side, it starts, but the others do not take it as a
    // server: the leader's dial finds no server name, its own Raft stream is refused.
    let impostor = Agent::spawn(
        ip,
        8500,
        base("verify_incoming = true verify_outgoing = true"),
    );
    let leader_agent = &cluster.servers[leader];
    assert_eq!(
        leader_agent.put("/v1/kv/secret", b"kept").text().trim(),
        "true"
    );
    wait_for_log(
        leader_agent,
        &[
            &format!("tls: internal_rpc handshake with {ip}:8300 failed"),
            "not valid",
        ],
        Duration::from_secs(20),
    );
    std::thread::sleep(Duration::from_secs(2));
    let answer = common::try_request_timeout(
        impostor.addr(),
        "GET",
        "/v1/kv/secret?stale",
        Duration::from_secs(5),
    );
    if let Ok(answer) = answer {
        assert_ne!(answer.text(), "kept", "replicated to a client certificate");
        assert!(!answer.text().contains("a2VwdA=="), "{}", answer.text());
    }
}

#[test]
fn verify_outgoing_refuses_a_server_signed_by_another_ca() {
    let pki = Pki::new("rpc-outgoing-pki");
    let other = Pki::new("rpc-outgoing-other");
    // The servers verify nothing incoming: only the dialer's switch is on trial.
    let cluster = Cluster::start(1, &["-hcl", &pki.hcl("server", "")]);
    let data = TempDir::new("rpc-outgoing-client");
    let client = cluster.start_client(
        &data,
        &["-hcl", &other.hcl("client", "verify_outgoing = true")],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let answer = common::try_request(client.addr(), "PUT", "/v1/kv/refused", b"x", &[]).ok();
        if let Some(answer) = &answer {
            assert_ne!(answer.status, 200, "wrote through a server of another CA");
        }
        if client.log().contains("unknown authority") {
            break;
        }
        assert!(Instant::now() < deadline, "no refusal:\n{}", client.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_for_log(
        &client,
        &[
            &format!(
                "tls: internal_rpc handshake with {}:8300 failed",
                cluster.servers[0].ip
            ),
            "signed by an unknown authority",
        ],
        Duration::from_secs(1),
    );
    assert_eq!(cluster.servers[0].get("/v1/kv/refused").status, 404);
}
