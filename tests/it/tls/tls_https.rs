//! HTTPS on real agents: certificates made by `praetor tls`, `curl` and `openssl s_client` as
//! the outside clients, and a rustls client where a test needs one connection held open
//! across a certificate reload.

use crate::common;

use common::{cli, fresh_loopback, praetor_binary, praetor_in, Agent, TempDir};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const HTTPS_PORT: u16 = 8501;

/// A CA with a server certificate valid for `ip` and a CLI (client) certificate.
struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new(name: &str, ip: IpAddr) -> Pki {
        let dir = TempDir::new(name);
        praetor_in(dir.path(), &["tls", "ca", "create"]);
        praetor_in(
            dir.path(),
            &[
                "tls",
                "cert",
                "create",
                "-server",
                &format!("-additional-ipaddress={ip}"),
            ],
        );
        praetor_in(dir.path(), &["tls", "cert", "create", "-cli"]);
        Pki { dir }
    }
    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn ca(&self) -> PathBuf {
        self.file("consul-agent-ca.pem")
    }
    fn server_cert(&self) -> PathBuf {
        self.file("dc1-server-consul-0.pem")
    }
    fn server_key(&self) -> PathBuf {
        self.file("dc1-server-consul-0-key.pem")
    }
    fn cli_cert(&self) -> PathBuf {
        self.file("dc1-cli-consul-0.pem")
    }
    fn cli_key(&self) -> PathBuf {
        self.file("dc1-cli-consul-0-key.pem")
    }
}

/// The agent's TLS files, at fixed paths the configuration names (so a test can rotate them).
struct AgentFiles {
    dir: TempDir,
}

impl AgentFiles {
    fn from(pki: &Pki) -> AgentFiles {
        let files = AgentFiles {
            dir: TempDir::new("agent-tls"),
        };
        files.install(pki);
        files
    }
    fn install(&self, pki: &Pki) {
        for (from, to) in [
            (pki.ca(), "ca.pem"),
            (pki.server_cert(), "server.pem"),
            (pki.server_key(), "server-key.pem"),
        ] {
            // Written beside and renamed, as a careful operator rotates files.
            let temporary = self.dir.path().join(format!("{to}.new"));
            std::fs::copy(from, &temporary).unwrap();
            std::fs::rename(&temporary, self.dir.path().join(to)).unwrap();
        }
    }
    fn tls_hcl(&self, https_block: &str) -> String {
        let path = |name: &str| self.dir.path().join(name).display().to_string();
        format!(
            "tls {{ defaults {{ ca_file = \"{}\" cert_file = \"{}\" key_file = \"{}\" }} https {{ {https_block} }} }}",
            path("ca.pem"),
            path("server.pem"),
            path("server-key.pem"),
        )
    }
}

/// Starts a `-dev` agent on `ip` with HTTPS on [`HTTPS_PORT`] and the given extra HCL.
fn start_agent(ip: IpAddr, hcl: &[String], wait_http: bool) -> Agent {
    let mut args: Vec<String> = vec![
        "agent".into(),
        "-dev".into(),
        "-bind".into(),
        ip.to_string(),
        "-client".into(),
        ip.to_string(),
        "-dns-port=-1".into(),
        format!("-https-port={HTTPS_PORT}"),
    ];
    for snippet in hcl {
        args.push("-hcl".into());
        args.push(snippet.clone());
    }
    let agent = Agent::spawn(ip, 8500, args);
    if wait_http {
        agent.wait_ready();
    }
    agent
}

/// Runs curl with a bounded time; returns (exit code, stdout, stderr).
fn curl(args: &[&str]) -> (i32, String, String) {
    let output = Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl is installed by tests/run.sh");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn https_url(ip: IpAddr, path: &str) -> String {
    format!("https://{ip}:{HTTPS_PORT}{path}")
}

/// Waits until the agent answers a leader over HTTPS (bounded: 20 s).
fn wait_ready_https(agent: &Agent, ca: &Path, extra: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let url = https_url(agent.ip, "/v1/status/leader");
    let ca = ca.display().to_string();
    while Instant::now() < deadline {
        let mut args = vec!["--cacert", ca.as_str()];
        args.extend_from_slice(extra);
        args.push(url.as_str());
        let (code, out, _) = curl(&args);
        if code == 0 && out.len() > 2 {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("agent did not answer over HTTPS; log:\n{}", agent.log());
}

/// Runs `openssl s_client` sending `input`; returns (success, stdout + stderr).
fn s_client(addr: SocketAddr, args: &[&str], input: &[u8]) -> (bool, String) {
    let mut child = Command::new("timeout")
        .args(["20", "openssl", "s_client", "-connect", &addr.to_string()])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl is installed by tests/run.sh");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let output = child.wait_with_output().unwrap();
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

#[test]
fn https_serves_beside_http_with_keep_alive_pipelining_and_blocking_queries() {
    let ip = fresh_loopback();
    let pki = Pki::new("https-pki", ip);
    let files = AgentFiles::from(&pki);
    let agent = start_agent(ip, &[files.tls_hcl("")], true);
    let ca = pki.ca().display().to_string();

    // A write over HTTPS, read back over HTTP and HTTPS: the same agent behind both.
    let (code, out, err) = curl(&[
        "--cacert",
        &ca,
        "-X",
        "PUT",
        "--data-binary",
        "over-tls",
        &https_url(ip, "/v1/kv/web"),
    ]);
    assert_eq!((code, out.trim()), (0, "true"), "{err}");
    assert_eq!(agent.get("/v1/kv/web?raw").text(), "over-tls");

    // Keep-alive: two requests in one curl run use one connection.
    let (code, out, err) = curl(&[
        "--cacert",
        &ca,
        "-o",
        "/dev/null",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{num_connects}\n",
        &https_url(ip, "/v1/kv/web?raw"),
        &https_url(ip, "/v1/kv/web?raw"),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out, "200 1\n200 0\n",
        "the second request reuses the connection"
    );

    // Pipelining: three requests written at once are answered in order on one session.
    let pipelined = format!(
        "GET /v1/kv/web?raw HTTP/1.1\r\nHost: {ip}\r\n\r\n\
         PUT /v1/kv/second HTTP/1.1\r\nHost: {ip}\r\nContent-Length: 3\r\n\r\ntwo\
         GET /v1/kv/second?raw HTTP/1.1\r\nHost: {ip}\r\nConnection: close\r\n\r\n"
    );
    let (_, text) = s_client(
        SocketAddr::new(ip, HTTPS_PORT),
        &["-CAfile", &ca, "-quiet", "-verify_return_error"],
        pipelined.as_bytes(),
    );
    let answers: Vec<&str> = text.split("HTTP/1.1 200 OK").skip(1).collect();
    assert_eq!(answers.len(), 3, "{text}");
    assert!(answers[0].ends_with("\r\n\r\nover-tls"), "{text}");
    assert!(answers[1].ends_with("\r\n\r\ntrue\n"), "{text}");
    assert!(answers[2].contains("\r\n\r\ntwo"), "{text}");

    // A blocking query over HTTPS wakes on a write made over plain HTTP.
    let index = agent.get("/v1/kv/web").index();
    let url = https_url(ip, &format!("/v1/kv/web?raw&index={index}&wait=15s"));
    let blocked_ca = ca.clone();
    let started = Instant::now();
    let blocked = std::thread::spawn(move || curl(&["--cacert", &blocked_ca, &url]));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(agent.put("/v1/kv/web", b"changed").text().trim(), "true");
    let (code, out, err) = blocked.join().unwrap();
    assert_eq!((code, out.as_str()), (0, "changed"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "woken by the write, not by its wait: {:?}",
        started.elapsed()
    );

    // The certificate is the one `praetor tls cert create -server` made.
    let (ok, text) = s_client(
        SocketAddr::new(ip, HTTPS_PORT),
        &["-CAfile", &ca, "-verify_return_error"],
        b"",
    );
    assert!(ok, "{text}");
    assert!(text.contains("Verify return code: 0 (ok)"), "{text}");
    assert!(text.contains("server.dc1.consul"), "{text}");
}

#[test]
fn https_verify_incoming_refuses_a_client_without_a_certificate() {
    let ip = fresh_loopback();
    let pki = Pki::new("https-mtls-pki", ip);
    let files = AgentFiles::from(&pki);
    let agent = start_agent(ip, &[files.tls_hcl("verify_incoming = true")], true);
    let ca = pki.ca().display().to_string();
    let cert = pki.cli_cert().display().to_string();
    let key = pki.cli_key().display().to_string();
    let url = https_url(ip, "/v1/status/leader");

    let (code, out, err) = curl(&["--cacert", &ca, &url]);
    assert_ne!(code, 0, "refused without a client certificate: {out}");
    assert!(out.is_empty(), "{out}");
    let (code, out, err2) = curl(&["--cacert", &ca, "--cert", &cert, "--key", &key, &url]);
    assert_eq!(code, 0, "{err} / {err2}");
    assert!(out.starts_with('"') && out.len() > 2, "{out}");

    // openssl without a certificate: no HTTP answer ever comes back.
    let (_, text) = s_client(
        SocketAddr::new(ip, HTTPS_PORT),
        &["-CAfile", &ca, "-quiet"],
        format!("GET /v1/status/leader HTTP/1.1\r\nHost: {ip}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    assert!(!text.contains("HTTP/1.1"), "{text}");
    // A client certificate from another CA is refused too.
    let other = Pki::new("https-other-pki", ip);
    let (code, out, _) = curl(&[
        "--cacert",
        &ca,
        "--cert",
        &other.cli_cert().display().to_string(),
        "--key",
        &other.cli_key().display().to_string(),
        &url,
    ]);
    assert_ne!(code, 0, "{out}");

    // Each refusal is one readable line naming the peer and the reason.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = agent.log();
        let missing = log.lines().any(|l| {
            l.contains("tls: https handshake with 127.") && l.contains("presented no certificate")
        });
        let wrong_ca = log.lines().any(|l| {
            l.contains("tls: https handshake with 127.") && l.contains("unknown authority")
        });
        if missing && wrong_ca {
            break;
        }
        assert!(Instant::now() < deadline, "log lines missing:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The CLI speaks HTTPS with a client certificate, from flags or from CONSUL_* variables.
    let https_addr = format!("-http-addr=https://{ip}:{HTTPS_PORT}");
    let (code, out, err) = cli(
        &[
            "kv",
            "put",
            &https_addr,
            &format!("-ca-file={ca}"),
            &format!("-client-cert={cert}"),
            &format!("-client-key={key}"),
            "cli/flags",
            "one",
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let output = Command::new(praetor_binary())
        .args(["kv", "get", &https_addr, "cli/flags"])
        .env("CONSUL_CACERT", &ca)
        .env("CONSUL_CLIENT_CERT", &cert)
        .env("CONSUL_CLIENT_KEY", &key)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "one\n");
    let output = Command::new(praetor_binary())
        .args(["kv", "get", &https_addr, "cli/flags"])
        .env("CONSUL_CACERT", &ca)
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "without a client certificate: {output:?}"
    );

    // Plain HTTP stays open beside it (only ports.http = -1 closes it).
    assert_eq!(agent.get("/v1/status/leader").status, 200);
}

#[test]
fn http_port_minus_one_serves_https_only() {
    let ip = fresh_loopback();
    let pki = Pki::new("https-only-pki", ip);
    let files = AgentFiles::from(&pki);
    let agent = start_agent(
        ip,
        &[files.tls_hcl(""), "ports { http = -1 }".to_string()],
        false,
    );
    wait_ready_https(&agent, &pki.ca(), &[]);
    assert!(
        TcpStream::connect_timeout(&SocketAddr::new(ip, 8500), Duration::from_secs(2)).is_err(),
        "no HTTP listener"
    );
    assert!(
        agent.log().contains("HTTP on (disabled)"),
        "{}",
        agent.log()
    );
}

#[test]
fn https_without_a_certificate_refuses_to_start() {
    let ip = fresh_loopback();
    let data = TempDir::new("https-nocert");
    let output = Command::new(praetor_binary())
        .args([
            "agent",
            "-dev",
            "-bind",
            &ip.to_string(),
            "-client",
            &ip.to_string(),
            "-dns-port=-1",
            "-data-dir",
            &data.path().display().to_string(),
            "-https-port=8501",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("ports.https = 8501 needs a certificate"),
        "{stderr}"
    );
}

/// A TLS client connection made with rustls, kept open across a reload.
struct HeldConnection {
    stream: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
}

impl HeldConnection {
    fn open(addr: SocketAddr, ca: &Path) -> HeldConnection {
        let pem = std::fs::read(ca).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile_certs(&pem) {
            roots.add(cert).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = rustls::pki_types::ServerName::from(addr.ip());
        let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let socket = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        HeldConnection {
            stream: rustls::StreamOwned::new(connection, socket),
        }
    }

    /// One keep-alive GET; returns the body.
    fn get(&mut self, path: &str) -> String {
        let request = format!("GET {path} HTTP/1.1\r\nHost: praetor\r\n\r\n");
        self.stream.write_all(request.as_bytes()).unwrap();
        let mut raw = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some((response, _)) = common::parse_one_response(&raw) {
                assert_eq!(response.status, 200);
                return response.text();
            }
            let n = self.stream.read(&mut chunk).unwrap();
            assert!(n > 0, "connection closed");
            raw.extend_from_slice(&chunk[..n]);
        }
    }
}

fn rustls_pemfile_certs(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .map(|c| c.unwrap())
        .collect()
}

/// Whether a fresh HTTPS connection verified against `ca` gets an answer.
fn fresh_connection_trusts(ip: IpAddr, ca: &Path) -> bool {
    let (code, _, _) = curl(&[
        "--cacert",
        &ca.display().to_string(),
        &https_url(ip, "/v1/status/leader"),
    ]);
    code == 0
}

#[test]
fn rotated_certificates_serve_the_next_connection_after_sighup_and_reload() {
    let ip = fresh_loopback();
    let first = Pki::new("https-rotate-first", ip);
    let second = Pki::new("https-rotate-second", ip);
    let files = AgentFiles::from(&first);
    let agent = start_agent(ip, &[files.tls_hcl("")], true);
    let addr = SocketAddr::new(ip, HTTPS_PORT);
    assert!(fresh_connection_trusts(ip, &first.ca()));
    assert!(!fresh_connection_trusts(ip, &second.ca()));
    assert_eq!(agent.put("/v1/kv/rotate", b"held").text().trim(), "true");
    let mut held = HeldConnection::open(addr, &first.ca());
    assert_eq!(held.get("/v1/kv/rotate?raw"), "held");

    // SIGHUP after the files changed: the next connection gets the second certificate.
    files.install(&second);
    // SAFETY: a signal to our own child, by PID.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGHUP) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fresh_connection_trusts(ip, &second.ca()) {
        assert!(Instant::now() < deadline, "not rotated:\n{}", agent.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!fresh_connection_trusts(ip, &first.ca()));
    assert!(agent
        .log()
        .contains("TLS certificates loaded (generation 2)"));
    // The connection opened before keeps its session.
    assert_eq!(held.get("/v1/kv/rotate?raw"), "held");

    // `praetor reload` rotates back.
    files.install(&first);
    let (code, _, err) = cli(&["reload", &format!("-http-addr={ip}:8500")], None);
    assert_eq!(code, 0, "{err}");
    assert!(fresh_connection_trusts(ip, &first.ca()));
    assert!(!fresh_connection_trusts(ip, &second.ca()));
    assert_eq!(held.get("/v1/kv/rotate?raw"), "held");

    // A broken file changes nothing: the reload fails and says why.
    std::fs::write(files.dir.path().join("server.pem"), b"not a certificate").unwrap();
    let (code, out, err) = cli(&["reload", &format!("-http-addr={ip}:8500")], None);
    assert_ne!(code, 0);
    assert!(
        format!("{out}{err}").contains("Failed reloading tls configuration"),
        "{out}{err}"
    );
    assert!(fresh_connection_trusts(ip, &first.ca()));
}
