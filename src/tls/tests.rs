//! The TLS layer over real TCP sockets on loopback inside a monoio runtime: handshakes with
//! certificates made by `generate`, echo and large transfers, close_notify, the classic
//! failures and their words, the server-role check, reload.

use super::generate::{self, CaOptions, CertKind, CertOptions};
use super::stream::{
    accept, connect, ClientTlsStream, FirstRecord, HandshakeError, ServerTlsStream,
};
use super::*;
use crate::config::tls::{CipherSuite, ProtocolTls, TlsConfig, TlsVersion};
use files::CaSource;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

const TEST_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// The HTTPS server configuration of a server certificate from `pki`'s CA.
fn https_server(pki: &Pki) -> std::sync::Arc<rustls::ServerConfig> {
    let tls =
        TlsConfigurator::new(&https_only(pki.protocol("server", "ca")), identity(true)).unwrap();
    tls.server_config(Protocol::Https).unwrap()
}

/// A CA, certificates of each kind signed by it, and a second, unrelated CA.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!(
            "praetor-tls-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pki = Pki { dir };
        for ca in ["ca", "other-ca"] {
            let (cert, key) = generate::generate_ca(&CaOptions {
                days: 30,
                domain: "consul".into(),
                name_constraint: false,
                additional_name_constraints: Vec::new(),
                common_name: None,
            })
            .unwrap();
            std::fs::write(pki.path(&format!("{ca}.pem")), cert).unwrap();
            std::fs::write(pki.path(&format!("{ca}-key.pem")), key).unwrap();
        }
        pki.issue("server", "ca", CertKind::Server, None, &[]);
        pki.issue("client", "ca", CertKind::Client, None, &[]);
        pki.issue("other-server", "other-ca", CertKind::Server, None, &[]);
        let long_ago = time::OffsetDateTime::now_utc() - time::Duration::days(400);
        pki.issue("expired", "ca", CertKind::Server, Some(long_ago), &[]);
        pki
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    fn issue(
        &self,
        name: &str,
        ca: &str,
        kind: CertKind,
        not_before: Option<time::OffsetDateTime>,
        extra_dns: &[&str],
    ) {
        let ca_pem = std::fs::read_to_string(self.path(&format!("{ca}.pem"))).unwrap();
        let ca_key = std::fs::read_to_string(self.path(&format!("{ca}-key.pem"))).unwrap();
        let (cert, key) = generate::generate_cert(
            &ca_pem,
            &ca_key,
            &CertOptions {
                kind,
                datacenter: "dc1".into(),
                domain: "consul".into(),
                node: None,
                additional_dns_names: extra_dns.iter().map(|s| s.to_string()).collect(),
                additional_ip_addresses: Vec::new(),
                days: 365,
                not_before,
            },
        )
        .unwrap();
        std::fs::write(self.path(&format!("{name}.pem")), cert).unwrap();
        std::fs::write(self.path(&format!("{name}-key.pem")), key).unwrap();
    }

    /// Protocol settings with `name`'s certificate and the CA.
    fn protocol(&self, name: &str, ca: &str) -> ProtocolTls {
        ProtocolTls {
            ca: CaSource {
                file: Some(self.path(&format!("{ca}.pem"))),
                path: None,
            },
            cert_file: Some(self.path(&format!("{name}.pem"))),
            key_file: Some(self.path(&format!("{name}-key.pem"))),
            ..ProtocolTls::default()
        }
    }

    fn roots(&self, ca: &str) -> Arc<RootCertStore> {
        let certificates = pem_certificates(&self.path(&format!("{ca}.pem")), "CA").unwrap();
        Arc::new(root_store(&certificates).unwrap())
    }

    /// A client configuration trusting `ca`, presenting `certificate` if given.
    fn client(&self, ca: &str, certificate: Option<&str>) -> Arc<ClientConfig> {
        let builder = ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(self.roots(ca));
        let config = match certificate {
            Some(name) => builder
                .with_client_auth_cert(
                    pem_certificates(&self.path(&format!("{name}.pem")), "c").unwrap(),
                    pem_private_key(&self.path(&format!("{name}-key.pem")), "k").unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        Arc::new(config)
    }

    fn chain(&self, name: &str) -> Vec<CertificateDer<'static>> {
        pem_certificates(&self.path(&format!("{name}.pem")), "c").unwrap()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn identity(server: bool) -> Identity {
    Identity {
        datacenter: "dc1".into(),
        domain: "consul".into(),
        node_name: "n1".into(),
        server,
    }
}

fn https_only(protocol: ProtocolTls) -> TlsConfig {
    TlsConfig {
        https: protocol,
        ..TlsConfig::default()
    }
}

fn rpc_only(protocol: ProtocolTls) -> TlsConfig {
    TlsConfig {
        internal_rpc: protocol,
        ..TlsConfig::default()
    }
}

fn run<F: std::future::Future>(future: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()
        .expect("monoio runtime")
        .block_on(future)
}

fn localhost() -> ServerName<'static> {
    ServerName::try_from("localhost").unwrap()
}

type Handshakes = (
    Result<ServerTlsStream<TcpStream>, HandshakeError>,
    Result<ClientTlsStream<TcpStream>, HandshakeError>,
);

/// One TCP connection on loopback, with both handshakes run concurrently.
async fn handshake_pair(
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    name: ServerName<'static>,
) -> Handshakes {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = monoio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        accept(server, socket, TEST_HANDSHAKE_TIMEOUT, FirstRecord::Close).await
    });
    let socket = TcpStream::connect(address).await.unwrap();
    let connected = connect(client, name, socket, TEST_HANDSHAKE_TIMEOUT).await;
    (accepted.await, connected)
}

/// Reads until end of stream; `Err` text if the stream ends uncleanly.
async fn read_to_end<R: AsyncReadRent>(reader: &mut R) -> Result<Vec<u8>, String> {
    let mut all = Vec::new();
    loop {
        let (result, buffer) = reader.read(Vec::with_capacity(32 * 1024)).await;
        match result {
            Ok(0) => return Ok(all),
            Ok(_) => all.extend_from_slice(&buffer),
            Err(error) => return Err(stream::describe_io_error(&error)),
        }
    }
}

/// Echoes everything back until the peer's close_notify, then closes cleanly.
async fn echo<S: AsyncReadRent + AsyncWriteRent>(mut stream: S) {
    loop {
        let (result, buffer) = stream.read(Vec::with_capacity(64 * 1024)).await;
        match result {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let (written, _) = stream.write_all(buffer).await;
                if written.is_err() {
                    return;
                }
            }
        }
    }
    let _ = stream.shutdown().await;
}

#[test]
fn echo_large_transfers_and_close_notify_over_real_sockets() {
    let pki = Pki::new("echo");
    let server = https_server(&pki);
    assert_eq!(server.alpn_protocols, vec![b"http/1.1".to_vec()]);
    let client = pki.client("ca", None);
    run(async move {
        let (accepted, connected) = handshake_pair(server, client, localhost()).await;
        let server_stream = accepted.unwrap();
        monoio::spawn(echo(server_stream));
        let (mut reader, mut writer) = connected.unwrap().into_split();
        // 8 MiB in uneven pieces, so records and reads never line up.
        let payload: Vec<u8> = (0..8 * 1024 * 1024u32)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        let sent = payload.clone();
        let sender = monoio::spawn(async move {
            let mut offset = 0;
            let mut piece = 1;
            while offset < sent.len() {
                let end = (offset + piece).min(sent.len());
                let (result, _) = writer.write_all(sent[offset..end].to_vec()).await;
                result.unwrap();
                offset = end;
                piece = (piece * 3 + 17) % 200_000 + 1;
            }
            writer.shutdown().await.unwrap();
        });
        let echoed = read_to_end(&mut reader).await.unwrap();
        sender.await;
        assert_eq!(echoed.len(), payload.len());
        assert!(echoed == payload, "echoed bytes differ");
    });
}

#[test]
fn a_tcp_close_without_close_notify_is_not_a_clean_end() {
    let pki = Pki::new("truncate");
    let server = https_server(&pki);
    run(async move {
        let (accepted, connected) =
            handshake_pair(server, pki.client("ca", None), localhost()).await;
        let mut server_stream = accepted.unwrap();
        let (result, _) = server_stream.write_all(b"partial".to_vec()).await;
        result.unwrap();
        server_stream.flush().await.unwrap();
        drop(server_stream);
        let mut client = connected.unwrap();
        let (result, buffer) = client.read(Vec::with_capacity(64)).await;
        assert_eq!((result.unwrap(), &buffer[..]), (7, &b"partial"[..]));
        let ending = read_to_end(&mut client).await.unwrap_err();
        assert!(
            ending.contains("close_notify") || ending.contains("eof"),
            "{ending}"
        );
    });
}

#[test]
fn verify_incoming_refuses_a_client_without_a_certificate() {
    let pki = Pki::new("mtls");
    let mut https = pki.protocol("server", "ca");
    https.verify_incoming = true;
    let tls = TlsConfigurator::new(&https_only(https), identity(true)).unwrap();
    let server = tls.server_config(Protocol::Https).unwrap();
    run(async move {
        let (accepted, connected) =
            handshake_pair(server.clone(), pki.client("ca", None), localhost()).await;
        let refused = accepted
            .err()
            .expect("no client certificate must be refused");
        assert_eq!(
            refused.to_string(),
            "the peer presented no certificate, and one is required (verify_incoming)"
        );
        let peer = "127.0.0.1:4000".parse().unwrap();
        assert_eq!(
            handshake_failure_line(Protocol::Https, peer, &refused),
            "tls: https handshake with 127.0.0.1:4000 failed: the peer presented no certificate, and one is required (verify_incoming)"
        );
        // TLS 1.3 clients finish first and learn of the refusal on their first read.
        let client_side = match connected {
            Err(error) => error.to_string(),
            Ok(mut stream) => read_to_end(&mut stream).await.unwrap_err(),
        };
        assert!(
            client_side.contains("requires a client certificate"),
            "{client_side}"
        );

        let (accepted, connected) =
            handshake_pair(server, pki.client("ca", Some("client")), localhost()).await;
        let server_stream = accepted.unwrap();
        assert_eq!(
            server_stream.peer_certificates().unwrap(),
            pki.chain("client")
        );
        connected.unwrap();
    });
}

#[test]
fn wrong_ca_expired_certificate_and_hostname_mismatch_read_clearly() {
    let pki = Pki::new("failures");
    run(async {
        // Wrong CA: the client trusts another CA than the one that signed the server.
        let tls = TlsConfigurator::new(&https_only(pki.protocol("server", "ca")), identity(true))
            .unwrap();
        let (accepted, connected) = handshake_pair(
            tls.server_config(Protocol::Https).unwrap(),
            pki.client("other-ca", None),
            localhost(),
        )
        .await;
        let client_error = connected.err().unwrap().to_string();
        assert!(client_error.contains("unknown authority"), "{client_error}");
        let server_error = accepted.err().unwrap().to_string();
        assert!(
            server_error.contains("does not trust the CA"),
            "{server_error}"
        );

        // Expired: a certificate issued 400 days ago for 365 days.
        let tls = TlsConfigurator::new(&https_only(pki.protocol("expired", "ca")), identity(true))
            .unwrap();
        let warnings = &tls.current().warnings;
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("https certificate") && warnings[0].contains("expired at"));
        let (_, connected) = handshake_pair(
            tls.server_config(Protocol::Https).unwrap(),
            pki.client("ca", None),
            localhost(),
        )
        .await;
        let expired = connected.err().unwrap().to_string();
        assert!(
            expired.starts_with("peer certificate rejected: certificate expired at ")
                && expired.contains(" UTC (now "),
            "{expired}"
        );

        // Hostname mismatch: with verify_server_hostname a client certificate cannot pass as
        // a server.
        let mut agent = TlsConfig::default();
        agent.internal_rpc.ca = pki.protocol("client", "ca").ca;
        agent.internal_rpc.verify_outgoing = true;
        agent.internal_rpc.verify_server_hostname = true;
        let dialer = TlsConfigurator::new(&agent, identity(false)).unwrap();
        let (client_config, name) = dialer.rpc_client().unwrap();
        assert_eq!(name, ServerName::try_from("server.dc1.consul").unwrap());
        let impostor =
            TlsConfigurator::new(&rpc_only(pki.protocol("client", "ca")), identity(false)).unwrap();
        let (_, connected) = handshake_pair(
            impostor.server_config(Protocol::InternalRpc).unwrap(),
            client_config.clone(),
            name.clone(),
        )
        .await;
        assert_eq!(
            connected.err().unwrap().to_string(),
            "peer certificate rejected: certificate is not valid for server.dc1.consul (it names client.dc1.consul, localhost, 127.0.0.1)"
        );
        // The real server passes.
        let real =
            TlsConfigurator::new(&rpc_only(pki.protocol("server", "ca")), identity(true)).unwrap();
        let (accepted, connected) = handshake_pair(
            real.server_config(Protocol::InternalRpc).unwrap(),
            client_config,
            name,
        )
        .await;
        accepted.unwrap();
        connected.unwrap();
    });
}

#[test]
fn verify_outgoing_alone_checks_the_chain_but_not_the_name() {
    let pki = Pki::new("chain-only");
    let mut agent = TlsConfig::default();
    agent.internal_rpc.ca = pki.protocol("client", "ca").ca;
    agent.internal_rpc.verify_outgoing = true;
    let dialer = TlsConfigurator::new(&agent, identity(false)).unwrap();
    let (client_config, name) = dialer.rpc_client().unwrap();
    let serve = |protocol: ProtocolTls| {
        TlsConfigurator::new(
            &TlsConfig {
                internal_rpc: protocol,
                ..TlsConfig::default()
            },
            identity(false),
        )
        .unwrap()
        .server_config(Protocol::InternalRpc)
        .unwrap()
    };
    run(async {
        // A client certificate of the right CA is accepted: no name is asked for.
        let (_, connected) = handshake_pair(
            serve(pki.protocol("client", "ca")),
            client_config.clone(),
            name.clone(),
        )
        .await;
        connected.unwrap();
        let (_, connected) = handshake_pair(
            serve(pki.protocol("other-server", "other-ca")),
            client_config,
            name,
        )
        .await;
        assert!(connected
            .err()
            .unwrap()
            .to_string()
            .contains("unknown authority"));
    });
    // Without verify_outgoing (and without auto-encrypt) agents dial plain TCP.
    let plain =
        TlsConfigurator::new(&rpc_only(pki.protocol("client", "ca")), identity(false)).unwrap();
    assert!(plain.rpc_client().is_none());
}

#[test]
fn only_a_server_certificate_may_act_as_a_server() {
    let pki = Pki::new("server-role");
    let mut rpc = pki.protocol("server", "ca");
    rpc.verify_incoming = true;
    rpc.verify_outgoing = true;
    rpc.verify_server_hostname = true;
    let config = TlsConfig {
        internal_rpc: rpc.clone(),
        ..TlsConfig::default()
    };
    let tls = TlsConfigurator::new(&config, identity(true)).unwrap();
    tls.authorize_server_peer(Some(&pki.chain("server")))
        .unwrap();
    let client = tls
        .authorize_server_peer(Some(&pki.chain("client")))
        .unwrap_err();
    assert_eq!(
        client,
        "certificate is not valid for server.dc1.consul (it names client.dc1.consul, localhost, 127.0.0.1): only a server certificate may act as a server"
    );
    assert!(tls
        .authorize_server_peer(None)
        .unwrap_err()
        .starts_with("no certificate presented"));
    let foreign = tls
        .authorize_server_peer(Some(&pki.chain("other-server")))
        .unwrap_err();
    assert!(foreign.contains("unknown authority"), "{foreign}");
    assert_eq!(
        tls.listener_policy(),
        crate::proto::rpc_select::ListenerPolicy {
            verify_incoming: true,
            tls_available: true,
            allow_insecure_tls: false,
            native_tls_available: true,
        }
    );
    // Each switch alone: without verify_server_hostname any verified peer may (Consul).
    let mut lenient = config.clone();
    lenient.internal_rpc.verify_server_hostname = false;
    let tls = TlsConfigurator::new(&lenient, identity(true)).unwrap();
    tls.authorize_server_peer(Some(&pki.chain("client")))
        .unwrap();

    // A server holding only a client certificate does not start under the hostname check.
    let mut impostor = config;
    impostor.internal_rpc.cert_file = Some(pki.path("client.pem"));
    impostor.internal_rpc.key_file = Some(pki.path("client-key.pem"));
    let refused = TlsConfigurator::new(&impostor, identity(true))
        .err()
        .unwrap();
    assert!(
        refused.starts_with("tls.internal_rpc: this server's certificate")
            && refused.contains("is not valid for server.dc1.consul (it names client.dc1.consul"),
        "{refused}"
    );
    // The same certificate is fine on a client agent.
    TlsConfigurator::new(&impostor, identity(false)).unwrap();
}

#[test]
fn reload_serves_the_new_certificate_to_the_next_connection_only() {
    let pki = Pki::new("reload");
    let tls =
        TlsConfigurator::new(&https_only(pki.protocol("server", "ca")), identity(true)).unwrap();
    let before = pki.chain("server");
    run(async {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let tls = Arc::new(tls);
        let acceptor_tls = tls.clone();
        // The listener asks for the current configuration per connection, as listeners must.
        monoio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                let config = acceptor_tls.server_config(Protocol::Https).unwrap();
                monoio::spawn(async move {
                    if let Ok(stream) =
                        accept(config, socket, TEST_HANDSHAKE_TIMEOUT, FirstRecord::Close).await
                    {
                        echo(stream).await;
                    }
                });
            }
        });
        let dial = || async {
            let socket = TcpStream::connect(address).await.unwrap();
            connect(
                pki.client("ca", None),
                localhost(),
                socket,
                TEST_HANDSHAKE_TIMEOUT,
            )
            .await
            .unwrap()
        };
        let mut open = dial().await;
        assert_eq!(open.peer_certificates().unwrap(), before);

        pki.issue("server", "ca", CertKind::Server, None, &["rotated.example"]);
        let after = pki.chain("server");
        assert_ne!(after, before);
        assert_eq!(tls.reload_files().unwrap(), 2);

        // The open connection is untouched and still carries data.
        let (result, _) = open.write_all(b"still here".to_vec()).await;
        result.unwrap();
        let (result, buffer) = open.read(Vec::with_capacity(64)).await;
        assert_eq!(&buffer[..result.unwrap()], b"still here");
        assert_eq!(open.peer_certificates().unwrap(), before);
        // The next connection gets the new certificate.
        let next = dial().await;
        assert_eq!(next.peer_certificates().unwrap(), after);

        // A broken file fails the reload and leaves the current certificate in force.
        std::fs::write(pki.path("server-key.pem"), "garbage").unwrap();
        let error = tls.reload_files().unwrap_err();
        assert!(
            error.starts_with("tls.https: Failed to load cert/key pair"),
            "{error}"
        );
        assert_eq!(tls.current().generation, 2);
        let third = dial().await;
        assert_eq!(third.peer_certificates().unwrap(), after);
    });
}

#[test]
fn versions_and_cipher_suites_are_enforced() {
    let pki = Pki::new("suites");
    let mut https = pki.protocol("server", "ca");
    https.min_version = TlsVersion::Tls13;
    let tls13_only = TlsConfigurator::new(&https_only(https), identity(true)).unwrap();
    let tls12_client = |suites: Vec<rustls::SupportedCipherSuite>| {
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites = suites;
        Arc::new(
            ClientConfig::builder_with_provider(Arc::new(provider))
                .with_protocol_versions(&[&rustls::version::TLS12])
                .unwrap()
                .with_root_certificates(pki.roots("ca"))
                .with_no_client_auth(),
        )
    };
    use rustls::crypto::ring::cipher_suite as ring;
    run(async {
        let (accepted, connected) = handshake_pair(
            tls13_only.server_config(Protocol::Https).unwrap(),
            tls12_client(vec![ring::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]),
            localhost(),
        )
        .await;
        assert!(accepted
            .err()
            .unwrap()
            .to_string()
            .starts_with("no TLS version or cipher suite in common"));
        assert!(connected
            .err()
            .unwrap()
            .to_string()
            .contains("no TLS version in common"));

        let mut https = pki.protocol("server", "ca");
        https.cipher_suites = vec![CipherSuite::EcdheEcdsaWithAes256GcmSha384];
        let one_suite = TlsConfigurator::new(&https_only(https), identity(true)).unwrap();
        let server = one_suite.server_config(Protocol::Https).unwrap();
        let (accepted, _) = handshake_pair(
            server.clone(),
            tls12_client(vec![ring::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256]),
            localhost(),
        )
        .await;
        assert!(accepted.is_err());
        let (accepted, connected) = handshake_pair(
            server,
            tls12_client(vec![
                ring::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
                ring::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            ]),
            localhost(),
        )
        .await;
        accepted.unwrap();
        let negotiated = connected
            .unwrap()
            .with_connection(|c| c.negotiated_cipher_suite().unwrap().suite());
        assert_eq!(
            negotiated,
            rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        );
    });
}

#[test]
fn plaintext_and_silence_on_a_tls_listener_end_with_a_reason() {
    let pki = Pki::new("plaintext");
    let server = https_server(&pki);
    run(async move {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let config = server.clone();
        let accepted = monoio::spawn(async move {
            let mut errors = Vec::new();
            for first in [
                FirstRecord::AnswerPlainHttp,
                FirstRecord::Close,
                FirstRecord::AnswerPlainHttp,
            ] {
                let (socket, _) = listener.accept().await.unwrap();
                let result = accept(config.clone(), socket, TEST_HANDSHAKE_TIMEOUT, first).await;
                errors.push(result.err().unwrap());
            }
            let (socket, _) = listener.accept().await.unwrap();
            let silent = accept(
                config,
                socket,
                Duration::from_millis(200),
                FirstRecord::AnswerPlainHttp,
            )
            .await;
            errors.push(silent.err().unwrap());
            errors
        });
        // A plaintext request on an HTTPS listener, its first record header split over two
        // reads: Go's answer.
        let mut http = TcpStream::connect(address).await.unwrap();
        let (result, _) = http.write_all(b"GE".to_vec()).await;
        result.unwrap();
        monoio::time::sleep(Duration::from_millis(50)).await;
        let (result, _) = http
            .write_all(b"T / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec())
            .await;
        result.unwrap();
        assert_eq!(
            read_to_end(&mut http).await.unwrap(),
            crate::proto::tls_record::PLAIN_HTTP_ANSWER
        );
        // The same on the RPC port: closed without an answer.
        let mut rpc = TcpStream::connect(address).await.unwrap();
        let (result, _) = rpc
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec())
            .await;
        result.unwrap();
        assert!(read_to_end(&mut rpc).await.unwrap().is_empty());
        // Garbage that is neither.
        let mut garbage = TcpStream::connect(address).await.unwrap();
        let (result, _) = garbage.write_all(vec![0x47, 0, 0, 0, 0, 9]).await;
        result.unwrap();
        assert!(read_to_end(&mut garbage).await.unwrap().is_empty());
        let _silent = TcpStream::connect(address).await.unwrap();
        let errors: Vec<String> = accepted.await.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            errors,
            [
                "not TLS: the peer sent a plaintext HTTP request",
                "not TLS: the peer sent a plaintext HTTP request",
                "not TLS: the first record has content type 0x47, not a handshake (0x16)",
                "no complete handshake within 200 ms",
            ]
        );
    });
}

#[test]
fn a_connection_that_ends_before_its_first_byte_is_no_failed_handshake() {
    let pki = Pki::new("probe");
    let server = https_server(&pki);
    run(async move {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = monoio::spawn(async move {
            let mut errors = Vec::new();
            for _ in 0..3 {
                let (socket, _) = listener.accept().await.unwrap();
                let result = accept(
                    server.clone(),
                    socket,
                    TEST_HANDSHAKE_TIMEOUT,
                    FirstRecord::Close,
                )
                .await;
                errors.push(result.err().unwrap());
            }
            errors
        });
        // A TCP health check: open, close.
        drop(TcpStream::connect(address).await.unwrap());
        // A probe that resets instead of closing (SO_LINGER 0), as some checkers do.
        let reset = std::net::TcpStream::connect(address).unwrap();
        socket2::SockRef::from(&reset)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(reset);
        // A client that starts a handshake record and goes away: that one did fail.
        let mut partial = TcpStream::connect(address).await.unwrap();
        let (result, _) = partial.write_all(vec![0x16, 0x03]).await;
        result.unwrap();
        drop(partial);
        let errors = accepted.await;
        assert!(
            matches!(errors[0], HandshakeError::NothingSent),
            "{:?}",
            errors[0]
        );
        assert!(
            matches!(errors[1], HandshakeError::NothingSent),
            "{:?}",
            errors[1]
        );
        assert!(
            matches!(errors[2], HandshakeError::Closed),
            "{:?}",
            errors[2]
        );
    });
}

#[test]
fn a_cancelled_read_leaves_an_error_not_a_panic() {
    let pki = Pki::new("cancel");
    let server = https_server(&pki);
    run(async move {
        let (accepted, connected) =
            handshake_pair(server, pki.client("ca", None), localhost()).await;
        let _server_stream = accepted.unwrap();
        let mut client = connected.unwrap();
        let waited = monoio::time::timeout(
            Duration::from_millis(50),
            client.read(Vec::with_capacity(16)),
        )
        .await;
        assert!(
            waited.is_err(),
            "nothing was sent, so the read must time out"
        );
        let (result, _) = client.read(Vec::with_capacity(16)).await;
        assert!(result
            .unwrap_err()
            .to_string()
            .starts_with("TLS stream unusable"));
    });
}

#[test]
fn missing_files_and_mismatched_keys_fail_at_load_with_the_block_name() {
    let pki = Pki::new("load-errors");
    let mut https = pki.protocol("server", "ca");
    https.key_file = Some(pki.path("client-key.pem"));
    let error = TlsConfigurator::new(&https_only(https), identity(true))
        .err()
        .unwrap();
    assert!(
        error.starts_with("tls.https: Failed to load cert/key pair"),
        "{error}"
    );
    let mut rpc = pki.protocol("server", "ca");
    rpc.ca.file = Some(pki.path("missing.pem"));
    let error = TlsConfigurator::new(
        &TlsConfig {
            internal_rpc: rpc,
            ..TlsConfig::default()
        },
        identity(true),
    )
    .err()
    .unwrap();
    assert!(
        error.starts_with("tls.internal_rpc: Error loading CA File:"),
        "{error}"
    );
    // Nothing configured: nothing to serve, plain dialing, no failure.
    let none = TlsConfigurator::new(&TlsConfig::default(), identity(true)).unwrap();
    assert!(none.server_config(Protocol::Https).is_none() && none.rpc_client().is_none());
    assert_eq!(
        none.listener_policy(),
        crate::proto::rpc_select::ListenerPolicy::default()
    );
}

#[test]
fn an_agent_ca_root_is_trusted_for_incoming_certificates_once_installed_and_never_as_a_server() {
    use super::agent_ca::{agent_csr, generate_root, AgentSignRequest, AgentSigner};
    let pki = Pki::new("agent-ca-trust");
    let mut https = pki.protocol("server", "ca");
    https.verify_incoming = true;
    let tls = TlsConfigurator::new(&https_only(https), identity(true)).unwrap();
    let now = time::OffsetDateTime::now_utc();
    let root = generate_root("11111111-2222-3333-4444-555555555555.consul", now).unwrap();
    let (csr, key_pem) =
        agent_csr(agent_ca::UNKNOWN_TRUST_DOMAIN, "dc1", "web-1", &[], &[]).unwrap();
    let signed = root
        .sign_agent(
            &AgentSignRequest {
                csr_pem: &csr,
                node: "web-1",
                datacenter: "dc1",
                domain: "consul",
            },
            now,
        )
        .unwrap();
    let leaf = files::pem_slice_certificates(signed.certificate_pem.as_bytes(), "leaf").unwrap();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let client = Arc::new(
        ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(pki.roots("ca"))
            .with_client_auth_cert(leaf.clone(), key)
            .unwrap(),
    );
    let before = tls.server_config(Protocol::Https).unwrap();
    assert!(tls.trust_agent_ca(&root.certificate_pem).unwrap());
    assert!(!tls.trust_agent_ca(&root.certificate_pem).unwrap());
    let after = tls.server_config(Protocol::Https).unwrap();
    run(async move {
        // A configuration built before the root was trusted refuses the agent's certificate.
        let (accepted, _) = handshake_pair(before, client.clone(), localhost()).await;
        assert!(accepted.is_err());
        let (accepted, connected) = handshake_pair(after, client, localhost()).await;
        assert_eq!(accepted.unwrap().peer_certificates().unwrap(), leaf);
        connected.unwrap();
    });
    assert!(tls.trust_agent_ca("not a certificate").is_err());
}

#[test]
fn an_auto_encrypt_certificate_is_presented_when_no_file_is_configured() {
    let pki = Pki::new("auto-cert");
    // A client agent: auto-encrypt on, no certificate, no CA of its own.
    let mut config = TlsConfig::default();
    config.auto_encrypt.tls = true;
    let tls = TlsConfigurator::new(&config, identity(false)).unwrap();
    assert!(!tls.has_auto_certificate());
    let (first, _) = tls.rpc_client().unwrap();
    assert!(!first.client_auth_cert_resolver.has_certs());
    let read = |name: &str| std::fs::read_to_string(pki.path(name)).unwrap();
    let generation = tls
        .install_auto_certificate(
            &read("client.pem"),
            &read("client-key.pem"),
            &[read("ca.pem")],
            false,
        )
        .unwrap();
    assert_eq!(generation, 2);
    assert!(tls.has_auto_certificate());
    let (dialer, _) = tls.rpc_client().unwrap();
    assert!(dialer.client_auth_cert_resolver.has_certs());
    // A key that is not PEM changes nothing.
    assert!(tls
        .install_auto_certificate(&read("client.pem"), "nope", &[], true)
        .is_err());
    assert_eq!(tls.current().generation, 2);
}

#[test]
fn an_auto_encrypt_answer_can_turn_the_server_name_check_on() {
    let pki = Pki::new("auto-vsh");
    let read = |name: &str| std::fs::read_to_string(pki.path(name)).unwrap();
    // A server presenting a certificate that chains to the CA but does not name
    // `server.dc1.consul` (a client's certificate).
    let impostor =
        TlsConfigurator::new(&rpc_only(pki.protocol("client", "ca")), identity(false)).unwrap();
    let mut config = TlsConfig::default();
    config.auto_encrypt.tls = true;
    for verify_server_hostname in [false, true] {
        let client = TlsConfigurator::new(&config, identity(false)).unwrap();
        client
            .install_auto_certificate(
                &read("client.pem"),
                &read("client-key.pem"),
                &[read("ca.pem")],
                verify_server_hostname,
            )
            .unwrap();
        let (dialer, name) = client.rpc_client().unwrap();
        let server = impostor.server_config(Protocol::InternalRpc).unwrap();
        let (_, connected) = run(handshake_pair(server, dialer, name));
        // Without the check any server chaining to the CA passes (Consul's
        // verify_outgoing alone); with it, the name must be the servers'.
        assert_eq!(
            connected.is_ok(),
            !verify_server_hostname,
            "verify_server_hostname from the answer: {verify_server_hostname}"
        );
    }
}
