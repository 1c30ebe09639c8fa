//! The server port (:8300) over TLS on real processes: a cluster with `verify_incoming`,
//! `verify_outgoing` and `verify_server_hostname` elects, replicates and forwards; for each
//! switch a dialer that must be refused is refused, with a readable log line.

use crate::common;

use bytes::BytesMut;
use common::{praetor_binary, praetor_in, Agent, Cluster, TempDir};
use praetor::proto::rpc::{encode_frame, kind};
use praetor::tls::generate::{self, CertKind, CertOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Consul's protocol bytes: TLS follows; Raft; and praetor's multiplexed request frames.
const BYTE_TLS: u8 = 3;
const BYTE_RAFT: u8 = 1;
const BYTE_RPC: u8 = praetor::proto::rpc::PROTOCOL_RPC;

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
        self.hcl_with(self.pair(kind), internal_rpc)
    }
    fn hcl_with(&self, (cert, key): (PathBuf, PathBuf), internal_rpc: &str) -> String {
        format!(
            "tls {{ defaults {{ ca_file = \"{}\" cert_file = \"{}\" key_file = \"{}\" }} internal_rpc {{ {internal_rpc} }} }}",
            self.ca().display(),
            cert.display(),
            key.display()
        )
    }
    /// A `kind` certificate of this CA that expired: valid for 365 days from 400 days ago.
    fn expired(&self, kind: CertKind) -> (PathBuf, PathBuf) {
        let ca = std::fs::read_to_string(self.ca()).unwrap();
        let ca_key = std::fs::read_to_string(self.file("consul-agent-ca-key.pem")).unwrap();
        let (cert, key) = generate::generate_cert(
            &ca,
            &ca_key,
            &CertOptions {
                kind,
                datacenter: "dc1".into(),
                domain: "consul".into(),
                node: None,
                additional_dns_names: Vec::new(),
                additional_ip_addresses: Vec::new(),
                days: 365,
                not_before: Some(time::OffsetDateTime::now_utc() - time::Duration::days(400)),
            },
        )
        .unwrap();
        let name = format!("expired-{}", kind.name());
        let pair = (
            self.file(&format!("{name}.pem")),
            self.file(&format!("{name}-key.pem")),
        );
        std::fs::write(&pair.0, cert).unwrap();
        std::fs::write(&pair.1, key).unwrap();
        pair
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

    // A burst of concurrent large writes: the leader encrypts small appends straight into
    // each peer's idle session and leaves what a full socket does not take for the sender
    // thread, which queues behind it. Every follower must end with every value whole.
    const WRITERS: usize = 16;
    const WRITES_PER_WRITER: usize = 25;
    const VALUE_BYTES: usize = 48 * 1024;
    std::thread::scope(|scope| {
        for writer in 0..WRITERS {
            let leader = &cluster.servers[leader];
            scope.spawn(move || {
                for n in 0..WRITES_PER_WRITER {
                    let value = vec![b'a' + ((writer + n) % 26) as u8; VALUE_BYTES];
                    let answer = leader.put(&format!("/v1/kv/tls/burst/{writer}-{n}"), &value);
                    assert_eq!(answer.text().trim(), "true", "write {writer}-{n}");
                }
            });
        }
    });
    for server in &cluster.servers {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let keys = server.get("/v1/kv/tls/burst/?keys&stale").text();
            if keys.matches("tls/burst/").count() == WRITERS * WRITES_PER_WRITER {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "burst not replicated to {}",
                server.ip
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        for (writer, n) in [(0, 0), (7, 13), (WRITERS - 1, WRITES_PER_WRITER - 1)] {
            let value = server.get(&format!("/v1/kv/tls/burst/{writer}-{n}?raw&stale"));
            let expected = vec![b'a' + ((writer + n) % 26) as u8; VALUE_BYTES];
            assert!(
                value.body == expected,
                "value {writer}-{n} on {}",
                server.ip
            );
        }
    }

    // A client agent with a client certificate and the same three switches forwards its
    // writes over TLS.
    let client_data = TempDir::new("rpc-tls-client");
    let client = cluster.start_client(&client_data, &["-hcl", &pki.hcl("client", ALL_SWITCHES)]);
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
        &[&format!(
            "tls: internal_rpc handshake with {ip}:8300 failed: peer certificate rejected: certificate is not valid for server.dc1.consul (it names client.dc1.consul, localhost, 127.0.0.1)"
        )],
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

/// The certificate failures an operator meets, each as one line naming the peer and the
/// reason: a server whose certificate expired, a client whose certificate expired (both
/// sides say so), and a server whose certificate names another datacenter.
#[test]
fn expired_and_misnamed_certificates_fail_with_readable_lines() {
    let pki = Pki::new("rpc-expired-pki");
    praetor_in(
        pki.dir.path(),
        &["tls", "cert", "create", "-server", "-dc", "dc2"],
    );
    let dc2_server = (
        pki.file("dc2-server-consul-0.pem"),
        pki.file("dc2-server-consul-0-key.pem"),
    );
    let expired_server = pki.expired(CertKind::Server);
    let expired_client = pki.expired(CertKind::Client);
    // A: its own certificate expired (it warns at start); B: a dc2 certificate, and it
    // verifies incoming connections.
    let a = Cluster::start(1, &["-hcl", &pki.hcl_with(expired_server, "")]);
    let b = Cluster::start(
        1,
        &["-hcl", &pki.hcl_with(dc2_server, "verify_incoming = true")],
    );
    let (a_ip, b_ip) = (a.servers[0].ip, b.servers[0].ip);
    assert!(
        a.servers[0]
            .log()
            .contains("tls: the internal_rpc certificate"),
        "{}",
        a.servers[0].log()
    );
    let data: Vec<TempDir> = (0..3)
        .map(|i| TempDir::new(&format!("rpc-expired-client{i}")))
        .collect();
    // X dials A and checks its chain.
    let x = a.start_client(
        &data[0],
        &["-hcl", &pki.hcl("client", "verify_outgoing = true")],
    );
    // Y dials B and wants server.dc1.consul.
    let y = b.start_client(
        &data[1],
        &["-hcl", &pki.hcl("client", "verify_server_hostname = true")],
    );
    // Z dials B (chain only) with an expired client certificate.
    let z = b.start_client(
        &data[2],
        &[
            "-hcl",
            &pki.hcl_with(expired_client, "verify_outgoing = true"),
        ],
    );
    let limit = Duration::from_secs(30);
    wait_for_log(
        &x,
        &[&format!(
            "tls: internal_rpc handshake with {a_ip}:8300 failed: peer certificate rejected: certificate expired at "
        )],
        limit,
    );
    wait_for_log(
        &y,
        &[&format!(
            "tls: internal_rpc handshake with {b_ip}:8300 failed: peer certificate rejected: certificate is not valid for server.dc1.consul (it names server.dc2.consul, localhost, 127.0.0.1)"
        )],
        limit,
    );
    // The server sees the client's connection come from the kernel's choice of source
    // address, so the line is found by its reason.
    wait_for_log(
        &b.servers[0],
        &[
            "tls: internal_rpc handshake with 127.",
            "failed: peer certificate rejected: certificate expired at ",
        ],
        limit,
    );
    // Under TLS 1.3 the client learns of the refusal after its side of the handshake, on
    // the first read; either way the line names the server and the reason.
    wait_for_log(
        &z,
        &[
            "tls: internal_rpc ",
            &format!(" {b_ip}:8300 "),
            "the peer aborted the handshake: our certificate has expired",
        ],
        limit,
    );
    // None of them got a write through.
    for (client, key) in [(&x, "x"), (&y, "y"), (&z, "z")] {
        let answer = common::try_request(client.addr(), "PUT", &format!("/v1/kv/{key}"), b"v", &[]);
        assert!(
            !matches!(&answer, Ok(a) if a.status == 200),
            "{key}: {answer:?}"
        );
    }
}

/// Consul's byte for TLS without a client certificate (auto-encrypt's first request).
const BYTE_TLS_INSECURE: u8 = 7;

/// Consul's byte for one msgpack net/rpc codec (`RPCConsul`).
const BYTE_CONSUL_RPC: u8 = 0;

/// One msgpack net/rpc call over an established session: the answer's error text (empty
/// on success) and body.
fn typed_call(stream: &mut (impl Read + Write), method: &str, body: &[u8]) -> (String, Vec<u8>) {
    use praetor::proto::msgpack_rpc::{decode_response_header, encode_request, MessageReader};
    let mut out = Vec::new();
    encode_request(&mut out, method, 9, body);
    stream.write_all(&out).unwrap();
    stream.flush().unwrap();
    let mut buffer = Vec::new();
    let mut reader = MessageReader::new();
    let mut chunk = [0u8; 16 * 1024];
    let extent = loop {
        if let Some(extent) = reader.advance(&buffer).unwrap() {
            break extent;
        }
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "the server closed the session without answering");
        buffer.extend_from_slice(&chunk[..n]);
    };
    let header = decode_response_header(&buffer[..extent.header_length]).unwrap();
    assert_eq!((header.method, header.seq), (method, 9));
    (
        header.error.to_string(),
        buffer[extent.header_length..extent.total()].to_vec(),
    )
}

/// `AutoEncrypt.Sign` for `node` of `datacenter` over an established session: the signed
/// answer, or the server's error text. Also returns the key the request was made with.
fn sign_call(
    stream: &mut (impl Read + Write),
    node: &str,
    datacenter: &str,
) -> (
    Result<praetor::consul::rpc::auto_encrypt::SignedAgent, String>,
    String,
) {
    let (csr_pem, key_pem) = praetor::tls::agent_ca::agent_csr(
        praetor::tls::agent_ca::UNKNOWN_TRUST_DOMAIN,
        datacenter,
        node,
        &[],
        &[],
    )
    .unwrap();
    let body = praetor::consul::rpc::connect_ca::CaSignRequest {
        datacenter,
        csr: &csr_pem,
        token: "",
    }
    .encode();
    let (error, reply) = typed_call(stream, "AutoEncrypt.Sign", &body);
    let answer = if error.is_empty() {
        Ok(praetor::consul::rpc::auto_encrypt::read_signed_response(&reply).unwrap())
    } else {
        Err(error)
    };
    (answer, key_pem)
}

/// Dials `addr` with the insecure TLS byte, verifying the server against `ca`.
fn dial_insecure_tls(
    addr: SocketAddr,
    ca: &Path,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots(ca))
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("server.dc1.consul").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut socket = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    socket.write_all(&[BYTE_TLS_INSECURE]).unwrap();
    rustls::StreamOwned::new(connection, socket)
}

/// Auto-encrypt end to end: three servers with every switch on and `allow_tls`; the leader
/// creates the agent CA in Raft, every server trusts it; a client agent with no certificate
/// of its own gets one over the insecure TLS byte before it serves, and its writes pass the
/// servers' `verify_incoming`. The insecure session serves nothing but the certificate
/// request, and a certificate it hands out renews over ordinary mutual TLS.
#[test]
fn a_client_whose_only_certificate_came_from_auto_encrypt_writes_through_verifying_servers() {
    let pki = Pki::new("rpc-auto-encrypt-pki");
    let cluster = Cluster::start(
        3,
        &[
            "-hcl",
            &pki.hcl("server", ALL_SWITCHES),
            "-hcl",
            "auto_encrypt { allow_tls = true }",
        ],
    );
    let leader = cluster.wait_for_leader(Duration::from_secs(30));
    for server in &cluster.servers {
        wait_for_log(
            server,
            &[
                "auto_encrypt: trusting the agent certificate roots of ",
                ".consul (1 Connect CA root(s), agent CA: no)",
            ],
            Duration::from_secs(20),
        );
    }

    // The client: the operator's CA to check servers by, every switch, no certificate.
    let client_data = TempDir::new("rpc-auto-encrypt-client");
    let client_hcl = format!(
        "tls {{ defaults {{ ca_file = \"{}\" }} internal_rpc {{ {ALL_SWITCHES} }} }} auto_encrypt {{ tls = true }}",
        pki.ca().display()
    );
    let client = cluster.start_client(&client_data, &["-hcl", &client_hcl]);
    wait_for_log(
        &client,
        &[
            &format!(
                "auto_encrypt: received the certificate of client-{} from ",
                client.ip
            ),
            ":8300, valid until ",
        ],
        Duration::from_secs(20),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(answer) =
            common::try_request(client.addr(), "PUT", "/v1/kv/auto/enc", b"rypted", &[])
        {
            if answer.status == 200 {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the client never wrote:\n{}",
            client.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        cluster.servers[leader].get("/v1/kv/auto/enc?raw").text(),
        "rypted"
    );
    assert!(!client.log().contains("handshake with"), "{}", client.log());

    // What a client receives: a certificate of the cluster's CA (not the operator's), which a
    // server with verify_incoming accepts on an ordinary session, where it renews.
    let follower = (leader + 1) % 3;
    let rpc_addr = SocketAddr::new(cluster.servers[follower].ip, 8300);
    let mut insecure = dial_insecure_tls(rpc_addr, &pki.ca());
    // Only the certificate request is served there, as on a Consul server, whose insecure
    // RPC server knows the `AutoEncrypt` service alone.
    let (error, _) = typed_call(&mut insecure, "Status.Ping", &[0x80]);
    assert_eq!(error, "rpc: can't find service Status.Ping");
    let (error, _) = typed_call(&mut insecure, "AutoEncrypt.Other", &[0x80]);
    assert_eq!(error, "rpc: can't find method AutoEncrypt.Other");
    let key_node = "probe-node";
    let (signed, key_pem) = sign_call(&mut insecure, key_node, "dc1");
    let signed = signed.unwrap();
    assert_eq!(
        signed.manual_ca_roots,
        vec![std::fs::read_to_string(pki.ca()).unwrap()]
    );
    assert!(signed.verify_server_hostname);
    let agent_root = signed.connect_ca_roots.roots[0].root_cert_pem.to_string();
    assert_ne!(
        agent_root.trim(),
        std::fs::read_to_string(pki.ca()).unwrap().trim()
    );
    // With the mesh on (the default), the root is the Connect CA's active root, as in Consul,
    // and `ConnectCARoots` is the Connect CA's `IndexedCARoots`.
    let roots: serde_json::Value =
        serde_json::from_str(&cluster.servers[leader].get("/v1/connect/ca/roots").text()).unwrap();
    let active = roots["Roots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["Active"] == true)
        .expect("an active Connect CA root");
    assert_eq!(
        agent_root.trim(),
        active["RootCert"].as_str().unwrap().trim(),
        "the agent certificate's root is the Connect CA's"
    );
    assert_eq!(
        signed.connect_ca_roots.active_root_id,
        active["ID"].as_str().unwrap()
    );
    assert_eq!(
        signed.connect_ca_roots.trust_domain,
        roots["TrustDomain"].as_str().unwrap()
    );
    let lifetime = signed.valid_before_unix_s - time::OffsetDateTime::now_utc().unix_timestamp();
    assert!((71 * 3600..=72 * 3600).contains(&lifetime), "{lifetime}");
    // The same root on every server: the one in Raft. The certificate renews over an
    // ordinary mutual-TLS session (byte 3, then byte 0 inside), as a Consul agent renews.
    let probe = TempDir::new("rpc-auto-encrypt-probe");
    let cert = probe.path().join("probe.pem");
    let key = probe.path().join("probe-key.pem");
    std::fs::write(&cert, &signed.certificate_pem).unwrap();
    std::fs::write(&key, &key_pem).unwrap();
    for server in &cluster.servers {
        let addr = SocketAddr::new(server.ip, 8300);
        let mut session = dial_tls(addr, &pki.ca(), Some((cert.clone(), key.clone())));
        session.write_all(&[BYTE_CONSUL_RPC]).unwrap();
        let (renewed, _) = sign_call(&mut session, key_node, "dc1");
        let renewed = renewed.unwrap_or_else(|e| panic!("{}: {e}", server.ip));
        assert_eq!(
            *renewed.connect_ca_roots.roots[0].root_cert_pem, *agent_root,
            "{}",
            server.ip
        );
    }
    // A request for another datacenter is refused with a reason.
    let mut session = dial_insecure_tls(rpc_addr, &pki.ca());
    let (other_dc, _) = sign_call(&mut session, key_node, "dc2");
    assert_eq!(
        other_dc.unwrap_err(),
        "mismatched datacenter (client_dc='dc2' server_dc='dc1'); check client has same datacenter set as servers"
    );
}

/// With the mesh off (`connect { enabled = false }`) there is no Connect CA: the leader
/// creates the agent CA in Raft, and it signs. Its root is what a signed agent certificate
/// chains to, and the servers trust it for `verify_incoming`.
#[test]
fn with_the_mesh_off_the_agent_ca_signs() {
    let pki = Pki::new("rpc-agent-ca-pki");
    let cluster = Cluster::start(
        1,
        &[
            "-hcl",
            &pki.hcl("server", ALL_SWITCHES),
            "-hcl",
            "auto_encrypt { allow_tls = true }\nconnect { enabled = false }",
        ],
    );
    let server = &cluster.servers[0];
    wait_for_log(
        server,
        &[
            "auto_encrypt: trusting the agent certificate roots of ",
            ".consul (0 Connect CA root(s), agent CA: yes)",
        ],
        Duration::from_secs(20),
    );
    let rpc_addr = SocketAddr::new(server.ip, 8300);
    let mut insecure = dial_insecure_tls(rpc_addr, &pki.ca());
    let (signed, _) = sign_call(&mut insecure, "mesh-off-node", "dc1");
    let signed = signed.unwrap();
    let agent_root = &signed.connect_ca_roots.roots[0];
    assert_eq!(signed.connect_ca_roots.active_root_id, &*agent_root.id);
    let root =
        praetor::tls::files::pem_slice_certificates(agent_root.root_cert_pem.as_bytes(), "root")
            .unwrap();
    assert_eq!(root.len(), 1);
    let (_, parsed) = x509_parser::parse_x509_certificate(&root[0]).unwrap();
    assert!(parsed.is_ca(), "the agent CA's root");
    assert!(
        parsed.subject().to_string().contains("praetor CA "),
        "{}",
        parsed.subject()
    );
    // No Connect CA exists to have signed it.
    assert_eq!(server.get("/v1/connect/ca/roots").status, 500);
}
