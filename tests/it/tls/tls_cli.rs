//! `praetor tls ca create` and `praetor tls cert create` run as real processes; `openssl`
//! reads and verifies what they write.

use crate::common;

use common::{praetor_binary, TempDir};
use std::path::Path;
use std::process::Command;

/// Runs `praetor` in `dir`; returns (exit code, stdout, stderr).
fn praetor(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(praetor_binary())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run praetor");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs `openssl` in `dir`; returns (success, stdout + stderr).
fn openssl(dir: &Path, args: &[&str]) -> (bool, String) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is installed by tests/run.sh");
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

fn x509_text(dir: &Path, file: &str) -> String {
    let (ok, text) = openssl(dir, &["x509", "-in", file, "-noout", "-text"]);
    assert!(ok, "{text}");
    text
}

/// Days between "Not Before" and "Not After" as openssl prints them.
fn validity_days(dir: &Path, file: &str) -> i64 {
    let (ok, text) = openssl(
        dir,
        &["x509", "-in", file, "-noout", "-startdate", "-enddate"],
    );
    assert!(ok, "{text}");
    let date = |key: &str| {
        let line = text.lines().find(|l| l.starts_with(key)).unwrap();
        let value = line.split_once('=').unwrap().1;
        let (ok, epoch) = {
            let output = Command::new("date")
                .args(["-u", "-d", value, "+%s"])
                .output()
                .unwrap();
            (
                output.status.success(),
                String::from_utf8_lossy(&output.stdout).trim().to_string(),
            )
        };
        assert!(ok, "date could not read {value:?}");
        epoch.parse::<i64>().unwrap()
    };
    (date("notAfter") - date("notBefore")) / 86_400
}

#[test]
fn ca_and_certificates_have_consuls_names_files_and_lifetimes() {
    let dir = TempDir::new("tls-cli");
    let d = dir.path();
    let (code, out, err) = praetor(d, &["tls", "ca", "create"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "==> Saved consul-agent-ca.pem\n==> Saved consul-agent-ca-key.pem\n"
    );
    let ca = x509_text(d, "consul-agent-ca.pem");
    assert!(ca.contains("Subject: CN = Consul Agent CA "), "{ca}");
    assert!(
        ca.contains("CA:TRUE") && ca.contains("Certificate Sign, CRL Sign"),
        "{ca}"
    );
    assert!(
        ca.contains("NIST CURVE: P-256") || ca.contains("prime256v1"),
        "{ca}"
    );
    assert_eq!(validity_days(d, "consul-agent-ca.pem"), 1825);
    let key_mode = std::fs::metadata(d.join("consul-agent-ca-key.pem")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&key_mode.permissions()) & 0o777,
        0o600
    );

    // A second CA in the same place is refused and nothing is overwritten.
    let before = std::fs::read(d.join("consul-agent-ca.pem")).unwrap();
    let (code, _, err) = praetor(d, &["tls", "ca", "create"]);
    assert_eq!(
        (code, err.trim()),
        (1, "consul-agent-ca.pem already exists.")
    );
    assert_eq!(
        std::fs::read(d.join("consul-agent-ca.pem")).unwrap(),
        before
    );

    let (code, out, err) = praetor(
        d,
        &[
            "tls",
            "cert",
            "create",
            "-server",
            "-node",
            "n1",
            "-additional-dnsname=vault.example",
            "-additional-ipaddress",
            "10.0.0.9",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("==> WARNING: Server Certificates grants authority"),
        "{out}"
    );
    assert!(out.ends_with(
        "==> Using consul-agent-ca.pem and consul-agent-ca-key.pem\n==> Saved dc1-server-consul-0.pem\n==> Saved dc1-server-consul-0-key.pem\n"
    ), "{out}");
    let server = x509_text(d, "dc1-server-consul-0.pem");
    assert!(
        server.contains("Subject: CN = server.dc1.consul"),
        "{server}"
    );
    assert!(
        server.contains(
            "DNS:vault.example, DNS:n1.server.dc1.consul, DNS:server.dc1.consul, DNS:localhost, IP Address:10.0.0.9, IP Address:127.0.0.1"
        ),
        "{server}"
    );
    assert!(
        server.contains("TLS Web Server Authentication, TLS Web Client Authentication"),
        "{server}"
    );
    assert!(server.contains("CA:FALSE"), "{server}");
    assert_eq!(validity_days(d, "dc1-server-consul-0.pem"), 365);

    // The index moves on while files of that name exist.
    let (code, out, _) = praetor(d, &["tls", "cert", "create", "-server", "-days", "30"]);
    assert_eq!(code, 0);
    assert!(out.contains("==> Saved dc1-server-consul-1.pem\n"), "{out}");
    assert_eq!(validity_days(d, "dc1-server-consul-1.pem"), 30);

    let (code, out, _) = praetor(d, &["tls", "cert", "create", "-client", "-dc", "east"]);
    assert_eq!(code, 0);
    assert!(!out.contains("WARNING"), "{out}");
    assert!(
        out.contains("==> Saved east-client-consul-0.pem\n"),
        "{out}"
    );
    let client = x509_text(d, "east-client-consul-0.pem");
    assert!(
        client.contains("Subject: CN = client.east.consul"),
        "{client}"
    );
    assert!(client.contains("DNS:client.east.consul, DNS:localhost, IP Address:127.0.0.1"));

    let (code, _, _) = praetor(d, &["tls", "cert", "create", "-cli"]);
    assert_eq!(code, 0);
    let cli = x509_text(d, "dc1-cli-consul-0.pem");
    assert!(cli.contains("DNS:cli.dc1.consul, DNS:localhost"), "{cli}");
    assert!(
        !cli.contains("IP Address") && !cli.contains("Extended Key Usage"),
        "{cli}"
    );

    // Every certificate chains to the CA; only the server one is valid for the server name.
    for file in [
        "dc1-server-consul-0.pem",
        "dc1-server-consul-1.pem",
        "east-client-consul-0.pem",
        "dc1-cli-consul-0.pem",
    ] {
        let (ok, text) = openssl(d, &["verify", "-CAfile", "consul-agent-ca.pem", file]);
        assert!(ok && text.contains(": OK"), "{file}: {text}");
    }
    let (ok, text) = openssl(
        d,
        &[
            "verify",
            "-CAfile",
            "consul-agent-ca.pem",
            "-purpose",
            "sslserver",
            "-verify_hostname",
            "server.dc1.consul",
            "dc1-server-consul-0.pem",
        ],
    );
    assert!(ok, "{text}");
    let (ok, text) = openssl(
        d,
        &[
            "verify",
            "-CAfile",
            "consul-agent-ca.pem",
            "-verify_hostname",
            "server.dc1.consul",
            "east-client-consul-0.pem",
        ],
    );
    assert!(!ok && text.contains("hostname mismatch"), "{text}");
    // The key matches the certificate.
    let (_, certificate_key) = openssl(
        d,
        &[
            "x509",
            "-in",
            "dc1-server-consul-0.pem",
            "-noout",
            "-pubkey",
        ],
    );
    let (_, private_key) = openssl(
        d,
        &["pkey", "-in", "dc1-server-consul-0-key.pem", "-pubout"],
    );
    assert_eq!(certificate_key, private_key);
}

#[test]
fn flags_are_checked_like_consuls() {
    let dir = TempDir::new("tls-cli-flags");
    let d = dir.path();
    for (args, expected) in [
        (
            &["tls", "cert", "create"][..],
            "Please provide either -server, -client, or -cli",
        ),
        (
            &["tls", "cert", "create", "-server", "-client"][..],
            "Please provide either -server, -client, or -cli",
        ),
        (
            &["tls", "cert", "create", "-client", "-node", "n1"][..],
            "-node requires -server",
        ),
        (
            &["tls", "cert", "create", "-server", "-ca="][..],
            "Please provide the ca",
        ),
    ] {
        let (code, _, err) = praetor(d, args);
        assert_eq!((code, err.trim()), (1, expected), "{args:?}");
    }
    let (code, _, err) = praetor(d, &["tls", "cert", "create", "-server"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("Error reading CA: consul-agent-ca.pem:"),
        "{err}"
    );
    assert!(
        std::fs::read_dir(d).unwrap().next().is_none(),
        "nothing written on error"
    );
}

#[test]
fn a_name_constrained_ca_and_a_ca_made_elsewhere_sign() {
    let dir = TempDir::new("tls-cli-constraint");
    let d = dir.path();
    let (code, _, err) = praetor(
        d,
        &[
            "tls",
            "ca",
            "create",
            "-domain",
            "example",
            "-name-constraint",
            "-additional-name-constraint",
            "internal.test",
            "-common-name",
            "Test CA",
            "-days=10",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let ca = x509_text(d, "example-agent-ca.pem");
    assert!(ca.contains("Subject: CN = Test CA"), "{ca}");
    assert!(ca.contains("X509v3 Name Constraints: critical"), "{ca}");
    assert!(
        ca.contains("DNS:internal.test")
            && ca.contains("DNS:example")
            && ca.contains("DNS:localhost"),
        "{ca}"
    );
    assert_eq!(validity_days(d, "example-agent-ca.pem"), 10);
    let (code, _, err) = praetor(
        d,
        &["tls", "cert", "create", "-server", "-domain", "example"],
    );
    assert_eq!(code, 0, "{err}");
    let (ok, text) = openssl(
        d,
        &[
            "verify",
            "-CAfile",
            "example-agent-ca.pem",
            "dc1-server-example-0.pem",
        ],
    );
    assert!(ok, "{text}");

    // A CA whose key is SEC1 ("EC PRIVATE KEY"), as Consul writes it, made by openssl.
    let (ok, text) = openssl(
        d,
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            "sec1-key.pem",
        ],
    );
    assert!(ok, "{text}");
    assert!(std::fs::read_to_string(d.join("sec1-key.pem"))
        .unwrap()
        .starts_with("-----BEGIN EC PRIVATE KEY-----"));
    let (ok, text) = openssl(
        d,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "sec1-key.pem",
            "-subj",
            "/CN=Elsewhere CA",
            "-days",
            "30",
            "-out",
            "sec1-ca.pem",
        ],
    );
    assert!(ok, "{text}");
    let (code, out, err) = praetor(
        d,
        &[
            "tls",
            "cert",
            "create",
            "-client",
            "-ca",
            "sec1-ca.pem",
            "-key",
            "sec1-key.pem",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("==> Using sec1-ca.pem and sec1-key.pem"),
        "{out}"
    );
    let (ok, text) = openssl(
        d,
        &[
            "verify",
            "-CAfile",
            "sec1-ca.pem",
            "dc1-client-consul-0.pem",
        ],
    );
    assert!(ok, "{text}");
}

#[test]
fn an_agent_checks_its_tls_files_at_start_and_warns_about_what_does_not_act() {
    let dir = TempDir::new("tls-agent");
    let d = dir.path();
    assert_eq!(praetor(d, &["tls", "ca", "create"]).0, 0);
    assert_eq!(praetor(d, &["tls", "cert", "create", "-server"]).0, 0);
    let ip = common::fresh_loopback();
    let missing = format!(
        "tls {{ defaults {{ ca_file = \"{0}/consul-agent-ca.pem\" cert_file = \"{0}/missing.pem\" key_file = \"{0}/missing-key.pem\" }} }}",
        d.display()
    );
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
            &d.join("data").display().to_string(),
            "-hcl",
            &missing,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("tls.internal_rpc: Failed to load cert/key pair: certificate")
            && stderr.contains("missing.pem"),
        "{stderr}"
    );

    let good = format!(
        "tls {{ defaults {{ ca_file = \"{0}/consul-agent-ca.pem\" cert_file = \"{0}/dc1-server-consul-0.pem\" key_file = \"{0}/dc1-server-consul-0-key.pem\" verify_incoming = true verify_outgoing = true }} internal_rpc {{ verify_server_hostname = true }} grpc {{ tls_min_version = \"TLSv1_3\" }} }} ports {{ grpc_tls = 20503 }}",
        d.display()
    );
    let agent = common::Agent::dev(&["-hcl", &good, "-https-port", "20443"]);
    let log = agent.log();
    assert!(
        log.contains(&format!("HTTPS on {}:20443", agent.ip)),
        "{log}"
    );
    // What is wired acts without a word: HTTPS, and gRPC over TLS with `tls.grpc`.
    assert!(!log.contains("ports.https = 20443 is accepted"), "{log}");
    assert!(!log.contains("tls.internal_rpc.verify"), "{log}");
    assert!(!log.contains("tls.https.verify_incoming"), "{log}");
    assert!(
        !log.contains("tls.grpc (tls_min_version) is accepted"),
        "{log}"
    );
    assert!(!log.contains("ports.grpc_tls = 20503 is accepted"), "{log}");
    assert!(log.contains(&format!("{}:20503 (TLS)", agent.ip)), "{log}");
    assert!(
        std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::new(agent.ip, 20503),
            std::time::Duration::from_secs(2)
        )
        .is_ok(),
        "the gRPC TLS port listens"
    );
}
