//! The CLI habits Consul users bring, exercised with real `praetor` CLI processes against a
//! real agent: Consul's environment variables and flags with Consul's precedence
//! (`api.DefaultConfig` + `command/flags/http.go`), HTTPS (with CA files, CA directories,
//! client certificates and server names), basic auth and Unix sockets through a real haproxy
//! in front of the agent, with certificates made by `openssl` here; namespaces refused as
//! Consul CE refuses them; `-format=json`; and the binary invoked as `consul`.

use crate::common;

use common::{fresh_loopback, praetor_binary, Agent, TempDir};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a CLI command may run against a local agent or proxy.
const CLI_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest haproxy may take to start listening.
const PROXY_START_TIMEOUT: Duration = Duration::from_secs(10);

/// Every variable the CLI reads, removed so the test's own environment cannot leak in.
const CLIENT_VARIABLES: &[&str] = &[
    "CONSUL_HTTP_ADDR",
    "CONSUL_HTTP_TOKEN",
    "CONSUL_HTTP_TOKEN_FILE",
    "CONSUL_HTTP_AUTH",
    "CONSUL_HTTP_SSL",
    "CONSUL_HTTP_SSL_VERIFY",
    "CONSUL_CACERT",
    "CONSUL_CAPATH",
    "CONSUL_CLIENT_CERT",
    "CONSUL_CLIENT_KEY",
    "CONSUL_TLS_SERVER_NAME",
    "CONSUL_NAMESPACE",
    "CONSUL_PARTITION",
    "PRAETOR_HTTP_ADDR",
];

/// Runs `program args…` with exactly the given client variables; (exit code, stdout, stderr).
fn run_program(program: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let dir = TempDir::new("cli-out");
    let out_path = dir.path().join("out");
    let err_path = dir.path().join("err");
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(&out_path).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err_path).unwrap()));
    for name in CLIENT_VARIABLES {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + CLI_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} did not finish in {CLI_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (
        status.code().unwrap_or(-1),
        std::fs::read_to_string(out_path).unwrap(),
        std::fs::read_to_string(err_path).unwrap(),
    )
}

fn praetor(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    run_program(&praetor_binary(), args, env)
}

/// Runs a command that must succeed and returns its stdout.
fn praetor_ok(args: &[&str], env: &[(&str, &str)]) -> String {
    let (code, out, err) = praetor(args, env);
    assert_eq!(
        code, 0,
        "{args:?} with {env:?}: stdout {out:?}, stderr {err:?}"
    );
    out
}

/// Runs a command that must fail and returns its stderr.
fn praetor_fails(args: &[&str], env: &[(&str, &str)]) -> String {
    let (code, out, err) = praetor(args, env);
    assert_ne!(code, 0, "{args:?} with {env:?} succeeded: {out:?}");
    err
}

/// An address on which nothing listens.
fn dead_address() -> String {
    format!("{}:28599", fresh_loopback())
}

/// `CONSUL_HTTP_ADDR` is read, `-http-addr` wins over it, an `http://` prefix is accepted,
/// and praetor has no variable of its own that could override Consul's.
#[test]
fn http_addr_from_environment_and_flag() {
    let agent = Agent::dev(&[]);
    let live = agent.http_addr();
    let dead = dead_address();
    let out = praetor_ok(
        &["kv", "put", "env/key", "one"],
        &[("CONSUL_HTTP_ADDR", &live)],
    );
    assert_eq!(out, "Success! Data written to: env/key\n");
    let with_scheme = format!("http://{live}");
    let out = praetor_ok(
        &["kv", "get", "-http-addr", &with_scheme, "env/key"],
        &[("CONSUL_HTTP_ADDR", &dead)],
    );
    assert_eq!(out, "one\n");
    let err = praetor_fails(
        &["kv", "get", "-http-addr", &dead, "env/key"],
        &[("CONSUL_HTTP_ADDR", &live)],
    );
    assert!(err.contains("error connecting to agent"), "{err}");
    // A variable of praetor's own would silently redirect Consul users; there is none.
    let out = praetor_ok(
        &["kv", "get", "env/key"],
        &[("CONSUL_HTTP_ADDR", &live), ("PRAETOR_HTTP_ADDR", &dead)],
    );
    assert_eq!(out, "one\n");
    let err = praetor_fails(&["members"], &[("CONSUL_HTTP_ADDR", "ftp://x")]);
    assert!(err.contains("Unknown protocol scheme: ftp"), "{err}");
}

/// Consul CE answers a namespace or partition with a 400 naming the Enterprise feature
/// (`agent/http_ce.go`); praetor's CLI refuses them the same way instead of ignoring them.
#[test]
fn namespaces_and_partitions_are_refused_as_consul_ce_does() {
    let agent = Agent::dev(&[]);
    let live = agent.http_addr();
    let err = praetor_fails(
        &["kv", "get", "a"],
        &[("CONSUL_HTTP_ADDR", &live), ("CONSUL_NAMESPACE", "team-a")],
    );
    assert!(
        err.contains(
            "Invalid query parameter: \"ns\" - Namespaces are a Consul Enterprise feature"
        ),
        "{err}"
    );
    let err = praetor_fails(
        &["catalog", "services", "-partition", "p1"],
        &[("CONSUL_HTTP_ADDR", &live)],
    );
    assert!(
        err.contains("Partitions are a Consul Enterprise feature"),
        "{err}"
    );
}

/// `praetor version` and `praetor --version` print `Consul v<api>` first; `-format=json`
/// prints Consul's version JSON; a binary named `consul` behaves the same as `praetor`.
#[test]
fn version_formats_and_the_consul_name() {
    for args in [&["version"][..], &["--version"][..], &["-version"][..]] {
        let out = praetor_ok(args, &[]);
        assert!(out.starts_with("Consul v1."), "{args:?}: {out}");
        assert!(out.contains("praetor v"), "{out}");
    }
    let out = praetor_ok(&["version", "-format=json"], &[]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        json["Version"].as_str().unwrap().starts_with("1."),
        "{json}"
    );
    assert_eq!(json["RPC"]["Default"], 2);
    assert!(json["BuildDate"].is_string(), "{json}");
    let err = praetor_fails(&["version", "-format=yaml"], &[]);
    assert!(err.contains("Unknown format: yaml"), "{err}");

    let dir = TempDir::new("consul-link");
    let consul = dir.path().join("consul");
    std::os::unix::fs::symlink(praetor_binary(), &consul).unwrap();
    let (code, out, _) = run_program(&consul, &["version"], &[]);
    assert_eq!(code, 0);
    assert!(out.starts_with("Consul v1."), "{out}");
    let agent = Agent::dev(&[]);
    let live = agent.http_addr();
    let (code, out, err) = run_program(
        &consul,
        &["kv", "put", "linked", "yes"],
        &[("CONSUL_HTTP_ADDR", &live)],
    );
    assert_eq!(
        (code, out.as_str()),
        (0, "Success! Data written to: linked\n"),
        "{err}"
    );
    let (code, out, _) = run_program(
        &consul,
        &["kv", "get", "linked"],
        &[("CONSUL_HTTP_ADDR", &live)],
    );
    assert_eq!((code, out.as_str()), (0, "yes\n"));
}

/// `snapshot inspect -format=json` prints Consul's JSON layout (`Meta` with the snapshot's
/// ID, size, index, term and version; `Stats` with a name, byte sum and count per record
/// type, largest first; `StatsKV` with `-kvdetails`; `TotalSize`); `pretty` is the default,
/// Consul's tables of types (and with `-kvdetails` of key prefixes), and another format is
/// refused with Consul's words.
#[test]
fn snapshot_inspect_has_consuls_formats() {
    let agent = Agent::dev(&[]);
    let live = agent.http_addr();
    let env = [("CONSUL_HTTP_ADDR", live.as_str())];
    praetor_ok(&["kv", "put", "snap/a", "hello"], &env);
    praetor_ok(&["kv", "put", "snap/deep/b", "world"], &env);
    praetor_ok(&["kv", "put", "other/c", "!"], &env);
    let dir = TempDir::new("snap-format");
    let file = dir.path().join("backup.snap").display().to_string();
    praetor_ok(&["snapshot", "save", &file], &env);
    let out = praetor_ok(&["snapshot", "inspect", "-format=json", &file], &[]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        json["Meta"]["Index"].as_u64().is_some_and(|i| i > 0),
        "{json}"
    );
    for key in ["ID", "Size", "Term", "Version"] {
        assert!(!json["Meta"][key].is_null(), "Meta.{key}: {json}");
    }
    let kvs = json["Stats"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Name"] == "KVS")
        .cloned()
        .unwrap_or_else(|| panic!("KVS stats: {json}"));
    assert_eq!(kvs["Count"], 3, "{json}");
    // A record's size is its encoding: more than its key and value.
    let keys_and_values = ["snap/a", "hello", "snap/deep/b", "world", "other/c", "!"];
    let raw: usize = keys_and_values.iter().map(|s| s.len()).sum();
    assert!(kvs["Sum"].as_u64().unwrap() > raw as u64, "{json}");
    let stats = json["Stats"].as_array().unwrap();
    for name in ["Register", "Index"] {
        assert!(stats.iter().any(|s| s["Name"] == name), "{name}: {json}");
    }
    let sums: Vec<u64> = stats.iter().map(|s| s["Sum"].as_u64().unwrap()).collect();
    assert!(
        sums.windows(2).all(|w| w[0] >= w[1]),
        "largest first: {json}"
    );
    assert_eq!(
        json["TotalSize"].as_u64(),
        Some(sums.iter().sum()),
        "{json}"
    );
    assert!(json["StatsKV"].is_null(), "{json}");
    let pretty = praetor_ok(&["snapshot", "inspect", &file], &[]);
    let lines: Vec<&str> = pretty.lines().collect();
    assert!(lines[0].starts_with(" ID "), "{pretty}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(" Type ") && l.ends_with("Count      Size")),
        "{pretty}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.split_whitespace().take(2).eq(["KVS", "3"])),
        "{pretty}"
    );
    assert!(lines.last().unwrap().starts_with(" Total "), "{pretty}");
    let detailed = praetor_ok(
        &[
            "snapshot",
            "inspect",
            "-kvdetails",
            "-kvdepth=1",
            "-kvfilter=snap",
            &file,
        ],
        &[],
    );
    let key_rows: Vec<&str> = detailed
        .lines()
        .skip_while(|l| !l.starts_with(" Key Name "))
        .collect();
    assert!(
        key_rows
            .iter()
            .any(|l| l.split_whitespace().take(2).eq(["snap", "2"])),
        "{detailed}"
    );
    assert!(!detailed.contains(" other "), "{detailed}");
    let err = praetor_fails(&["snapshot", "inspect", "-format=yaml", &file], &[]);
    assert!(err.contains("Unknown format: yaml"), "{err}");
}

/// Certificates for the proxy made with openssl: a CA, a server certificate for
/// `server.dc1.consul` and the proxy's IP, and a client certificate.
struct Certificates {
    dir: PathBuf,
}

impl Certificates {
    fn make(dir: &Path, server_ip: IpAddr) -> Certificates {
        let openssl = |args: &[&str]| {
            let output = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .expect("openssl is installed by tests/run.sh");
            assert!(
                output.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509", "-days", "1", "-subj", "/CN=praetor test CA"];
        ca.extend(ec);
        ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
        openssl(&ca);
        let leaf = |name: &str, subject: &str, extensions: String| {
            std::fs::write(dir.join(format!("{name}.ext")), extensions).unwrap();
            let mut request = vec!["req", "-subj", subject];
            request.extend(ec);
            let (key, csr) = (format!("{name}.key"), format!("{name}.csr"));
            request.extend(["-keyout", &key, "-out", &csr]);
            openssl(&request);
            let (cert, ext) = (format!("{name}.pem"), format!("{name}.ext"));
            openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "1",
                "-out",
                &cert,
                "-extfile",
                &ext,
            ]);
        };
        leaf(
            "server",
            "/CN=server.dc1.consul",
            format!(
                "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:server.dc1.consul,IP:{server_ip}\n"
            ),
        );
        leaf(
            "client",
            "/CN=cli",
            "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n".to_string(),
        );
        let combined = [
            std::fs::read(dir.join("server.pem")).unwrap(),
            std::fs::read(dir.join("server.key")).unwrap(),
        ]
        .concat();
        std::fs::write(dir.join("server-combined.pem"), combined).unwrap();
        std::fs::create_dir(dir.join("cas")).unwrap();
        std::fs::copy(dir.join("ca.pem"), dir.join("cas/ca.pem")).unwrap();
        Certificates {
            dir: dir.to_path_buf(),
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// haproxy in front of the agent, stopped by PID when dropped.
struct Haproxy {
    child: Child,
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const TLS_PORT: u16 = 28501;
const MTLS_PORT: u16 = 28502;
const PREFIX_PORT: u16 = 28503;
const PROXY_TOKEN: &str = "tok-123";

/// Four frontends: TLS that demands an ACL token header, TLS that demands a client
/// certificate, a Unix socket that demands basic auth, and a path prefix to strip.
fn start_haproxy(dir: &Path, ip: IpAddr, certs: &Certificates, agent: SocketAddr) -> Haproxy {
    let socket = dir.join("agent.sock");
    let config = format!(
        "global\n  maxconn 64\n\
         defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
         userlist operators\n  user ops insecure-password s3cret\n\
         frontend tls_token\n  bind {ip}:{TLS_PORT} ssl crt {combined}\n  \
           http-request deny deny_status 403 unless {{ req.hdr(X-Consul-Token) -m str {PROXY_TOKEN} }}\n  \
           default_backend agent\n\
         frontend mutual_tls\n  bind {ip}:{MTLS_PORT} ssl crt {combined} ca-file {ca} verify required\n  \
           default_backend agent\n\
         frontend unix_basic_auth\n  bind unix@{socket}\n  \
           http-request auth realm consul unless {{ http_auth(operators) }}\n  \
           default_backend agent\n\
         frontend prefix\n  bind {ip}:{PREFIX_PORT}\n  \
           http-request replace-path /consul(/.*) \\1\n  default_backend agent\n\
         backend agent\n  server agent {agent}\n",
        combined = certs.path("server-combined.pem"),
        ca = certs.path("ca.pem"),
        socket = socket.display(),
    );
    let config_path = dir.join("haproxy.cfg");
    std::fs::write(&config_path, config).unwrap();
    let child = Command::new("haproxy")
        .args(["-db", "-f"])
        .arg(&config_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("haproxy is installed by tests/run.sh");
    let proxy = Haproxy { child };
    let deadline = Instant::now() + PROXY_START_TIMEOUT;
    loop {
        let tcp_up = [TLS_PORT, MTLS_PORT, PREFIX_PORT].iter().all(|port| {
            TcpStream::connect_timeout(&SocketAddr::new(ip, *port), Duration::from_millis(200))
                .is_ok()
        });
        if tcp_up && socket.exists() {
            return proxy;
        }
        assert!(Instant::now() < deadline, "haproxy did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// HTTPS with Consul's TLS variables and flags, an ACL token from the environment, a flag
/// or a token file, basic auth over a Unix socket, and an address with a path prefix.
#[test]
fn https_tokens_basic_auth_and_unix_sockets_through_a_proxy() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("cli-tls");
    let ip = fresh_loopback();
    let certs = Certificates::make(dir.path(), ip);
    let _proxy = start_haproxy(dir.path(), ip, &certs, agent.addr());
    praetor_ok(
        &[
            "kv",
            "put",
            "-http-addr",
            &agent.http_addr(),
            "tls/key",
            "secret-value",
        ],
        &[],
    );

    let https = format!("https://{ip}:{TLS_PORT}");
    let ca = certs.path("ca.pem");
    let get = ["kv", "get", "tls/key"];

    // CA file and token from the environment; the certificate matches the address's IP.
    let env = [
        ("CONSUL_HTTP_ADDR", https.as_str()),
        ("CONSUL_CACERT", ca.as_str()),
        ("CONSUL_HTTP_TOKEN", PROXY_TOKEN),
    ];
    assert_eq!(praetor_ok(&get, &env), "secret-value\n");
    // Without the token the proxy refuses; with -token it passes.
    let no_token = [
        ("CONSUL_HTTP_ADDR", https.as_str()),
        ("CONSUL_CACERT", ca.as_str()),
    ];
    let err = praetor_fails(&get, &no_token);
    assert!(err.contains("403"), "{err}");
    assert_eq!(
        praetor_ok(&["kv", "get", "-token", PROXY_TOKEN, "tls/key"], &no_token),
        "secret-value\n"
    );
    // A token file wins over -token, as in Consul's api client.
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{PROXY_TOKEN}\n")).unwrap();
    let token_file = token_file.display().to_string();
    let with_file = [
        ("CONSUL_HTTP_ADDR", https.as_str()),
        ("CONSUL_CACERT", ca.as_str()),
        ("CONSUL_HTTP_TOKEN_FILE", token_file.as_str()),
    ];
    assert_eq!(
        praetor_ok(&["kv", "get", "-token", "wrong", "tls/key"], &with_file),
        "secret-value\n"
    );
    assert_eq!(
        praetor_ok(
            &["kv", "get", "-token-file", &token_file, "tls/key"],
            &no_token
        ),
        "secret-value\n"
    );

    // CONSUL_HTTP_SSL turns on TLS for a bare address; -ca-file and -ca-path work as flags.
    let bare = format!("{ip}:{TLS_PORT}");
    let ssl_env = [
        ("CONSUL_HTTP_ADDR", bare.as_str()),
        ("CONSUL_HTTP_SSL", "true"),
    ];
    let with_ca_file = [
        "kv",
        "get",
        "-ca-file",
        &ca,
        "-token",
        PROXY_TOKEN,
        "tls/key",
    ];
    assert_eq!(praetor_ok(&with_ca_file, &ssl_env), "secret-value\n");
    let cas = certs.path("cas");
    let with_ca_path = [
        "kv",
        "get",
        "-ca-path",
        &cas,
        "-token",
        PROXY_TOKEN,
        "tls/key",
    ];
    assert_eq!(praetor_ok(&with_ca_path, &ssl_env), "secret-value\n");
    // Without the CA the system roots do not trust the proxy; CONSUL_HTTP_SSL_VERIFY=false
    // skips verification as Go's InsecureSkipVerify does.
    let err = praetor_fails(&["kv", "get", "-token", PROXY_TOKEN, "tls/key"], &ssl_env);
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    let insecure = [
        ("CONSUL_HTTP_ADDR", bare.as_str()),
        ("CONSUL_HTTP_SSL", "true"),
        ("CONSUL_HTTP_SSL_VERIFY", "false"),
    ];
    assert_eq!(
        praetor_ok(&["kv", "get", "-token", PROXY_TOKEN, "tls/key"], &insecure),
        "secret-value\n"
    );
    // The name checked is -tls-server-name (or CONSUL_TLS_SERVER_NAME), port stripped.
    let named = [
        ("CONSUL_HTTP_ADDR", https.as_str()),
        ("CONSUL_CACERT", ca.as_str()),
        ("CONSUL_HTTP_TOKEN", PROXY_TOKEN),
        ("CONSUL_TLS_SERVER_NAME", "server.dc1.consul:8501"),
    ];
    assert_eq!(praetor_ok(&get, &named), "secret-value\n");
    let err = praetor_fails(
        &["kv", "get", "-tls-server-name", "other.example", "tls/key"],
        &named,
    );
    assert!(err.to_lowercase().contains("certificate"), "{err}");

    // Mutual TLS: the client certificate from flags or from the environment.
    let mtls = format!("https://{ip}:{MTLS_PORT}");
    let mtls_env = [
        ("CONSUL_HTTP_ADDR", mtls.as_str()),
        ("CONSUL_CACERT", ca.as_str()),
    ];
    praetor_fails(&get, &mtls_env);
    let (cert, key) = (certs.path("client.pem"), certs.path("client.key"));
    assert_eq!(
        praetor_ok(
            &[
                "kv",
                "get",
                "-client-cert",
                &cert,
                "-client-key",
                &key,
                "tls/key"
            ],
            &mtls_env
        ),
        "secret-value\n"
    );
    let mtls_env_full = [
        ("CONSUL_HTTP_ADDR", mtls.as_str()),
        ("CONSUL_CACERT", ca.as_str()),
        ("CONSUL_CLIENT_CERT", cert.as_str()),
        ("CONSUL_CLIENT_KEY", key.as_str()),
    ];
    assert_eq!(praetor_ok(&get, &mtls_env_full), "secret-value\n");
    let err = praetor_fails(&["kv", "get", "-client-cert", &cert, "tls/key"], &mtls_env);
    assert!(
        err.contains("both client cert and client key must be provided"),
        "{err}"
    );

    // A Unix socket, with basic auth from CONSUL_HTTP_AUTH.
    let unix = format!("unix://{}", dir.path().join("agent.sock").display());
    let err = praetor_fails(&get, &[("CONSUL_HTTP_ADDR", unix.as_str())]);
    assert!(err.contains("401"), "{err}");
    assert_eq!(
        praetor_ok(
            &get,
            &[
                ("CONSUL_HTTP_ADDR", unix.as_str()),
                ("CONSUL_HTTP_AUTH", "ops:s3cret")
            ]
        ),
        "secret-value\n"
    );

    // An address with a path prefix, for an agent behind a gateway.
    let prefixed = format!("http://{ip}:{PREFIX_PORT}/consul");
    assert_eq!(
        praetor_ok(&["kv", "get", "-http-addr", &prefixed, "tls/key"], &[]),
        "secret-value\n"
    );
}
