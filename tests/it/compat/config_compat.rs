//! Consul config files as Consul users write them, loaded by a real `praetor agent` process:
//! HCL1 forms (Consul parses HCL1), keys that act, keys that are accepted and warned about,
//! and type errors that stop the agent with the key path on one line.

use crate::common;

use common::{praetor_binary, Agent, TempDir};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a misconfigured agent may take to refuse to start.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `praetor agent …` expecting it to exit on its own; returns (exit code, stderr).
/// An agent still running after `REFUSAL_TIMEOUT` is killed and the test fails.
fn agent_refusing(args: &[&str]) -> (i32, String) {
    let dir = TempDir::new("refusal");
    let stderr_path = dir.path().join("stderr");
    let mut child = Command::new(praetor_binary())
        .arg("agent")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&stderr_path).unwrap()))
        .spawn()
        .unwrap();
    let deadline = Instant::now() + REFUSAL_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("agent {args:?} kept running with a bad config");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    (status.code().unwrap_or(-1), stderr)
}

/// Starts `praetor agent` on a fresh loopback address with `args` after the address flags
/// (DNS off), without waiting for it: for agents whose readiness a test judges itself.
fn spawn_on_fresh_address(args: &[&str]) -> Agent {
    let ip = common::fresh_loopback();
    let ip_text = ip.to_string();
    let mut all = vec![
        "agent",
        "-bind",
        &ip_text,
        "-client",
        &ip_text,
        "-dns-port=-1",
    ];
    all.extend_from_slice(args);
    Agent::spawn(ip, 8500, all.iter().map(|a| a.to_string()).collect())
}

/// Consul documents HCL config files in HCL1, and its own fixtures
/// (`agent/config/testdata/full-config.hcl`) use one-line blocks, quoted keys inside blocks,
/// commas after blocks and `key = { … }`; an agent started from such a file serves it.
#[test]
fn hcl1_config_file_loads_and_acts() {
    let dir = TempDir::new("hcl1");
    let config = dir.path().join("agent.hcl");
    std::fs::write(
        &config,
        r#"
        # Consul-style agent config.
        acl { tokens { initial_management = "root" } }
        node_meta { "rack-id" = "r1", zone = "z1" },
        limits = { kv_max_value_size = 64 }
        limits { http_max_conns_per_client = 50 }
        service { name = "web" port = 80 tags = ["v1"] }
        service = { name = "api", port = 81, meta = { team = "core" } }
        disable_update_check = true
        log_level = "INFO"
        "#,
    )
    .unwrap();
    let config_path = config.display().to_string();
    let agent = Agent::dev(&["-node", "hcl-node", "-config-file", &config_path]);

    // The agent publishes its node's metadata through anti-entropy shortly after it leads.
    let deadline = Instant::now() + Duration::from_secs(10);
    let node = loop {
        let node = agent.get("/v1/catalog/node/hcl-node").json();
        if !node["Node"]["Meta"]["rack-id"].is_null() || Instant::now() > deadline {
            break node;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(node["Node"]["Meta"]["rack-id"], "r1", "{node}");
    assert_eq!(node["Node"]["Meta"]["zone"], "z1", "{node}");

    // `limits.kv_max_value_size` acts: Consul's 413 above it.
    assert_eq!(agent.put("/v1/kv/small", &[b'x'; 64]).status, 200);
    let too_big = agent.put("/v1/kv/big", &[b'x'; 65]);
    assert_eq!(too_big.status, 413, "{}", too_big.text());

    let services = agent.get("/v1/agent/services").json();
    assert_eq!(services["web"]["Tags"][0], "v1", "{services}");
    assert_eq!(services["api"]["Meta"]["team"], "core", "{services}");

    // The accepted-but-not-acted-on key is warned about exactly once.
    let log = agent.log();
    let warned = log
        .lines()
        .filter(|l| {
            l.contains("limits.http_max_conns_per_client = 50 is accepted but not acted on yet")
        })
        .count();
    assert_eq!(warned, 1, "{log}");
    assert!(!log.contains("disable_update_check"), "{log}");
}

/// Consul stops with the source and the key path when a value has the wrong type
/// (`failed to parse <file>: 'ports.http' expected type 'int', got unconvertible type
/// 'string', value: 'abc'`), exit code 1, one line.
#[test]
fn wrong_types_and_syntax_stop_the_agent_with_one_line() {
    let dir = TempDir::new("badtypes");
    let bad_type = dir.path().join("ports.hcl");
    std::fs::write(&bad_type, "ports {\n  http = \"abc\"\n}\n").unwrap();
    let (code, stderr) = agent_refusing(&["-dev", "-config-file", &bad_type.display().to_string()]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "failed to parse {}: 'ports.http' expected type 'int', got unconvertible type 'string', value: 'abc'",
            bad_type.display()
        )
    );

    let bad_json = dir.path().join("meta.json");
    std::fs::write(&bad_json, r#"{"node_meta": {"rack": 7}}"#).unwrap();
    let (code, stderr) = agent_refusing(&["-dev", "-config-file", &bad_json.display().to_string()]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(
            "'node_meta[rack]' expected type 'string', got unconvertible type 'float64', value: '7'"
        ),
        "{stderr}"
    );

    let (code, stderr) = agent_refusing(&["-dev", "-hcl", "performance { raft_multiplier = 11 }"]);
    assert_eq!(code, 1);
    assert_eq!(
        stderr.trim_end(),
        "performance.raft_multiplier cannot be 11. Must be between 1 and 10"
    );

    let broken = dir.path().join("broken.hcl");
    std::fs::write(&broken, "datacenter = \"dc1\"\nports {\n  http = 1\n").unwrap();
    let (code, stderr) = agent_refusing(&["-dev", "-config-file", &broken.display().to_string()]);
    assert_eq!(code, 1);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("line 4, column 1: expected '}' before the end"),
        "{stderr}"
    );
}

/// Every HCL form Consul's own config fixtures use (`agent/config/testdata/full-config.hcl`
/// and the runtime tests), written afresh for this agent: `key = { … }` blocks with commas
/// between items, a comma after a top-level block, nested `= { }` maps, lists of objects
/// with a trailing comma, quoted keys (`"*"`, `"X-Custom"`), header lists, empty blocks,
/// repeated `service` blocks and a `services = [ … ]` list, a block inside a block
/// (`service { check { … } }`), repeated single-object blocks merged (`ports`), floats,
/// negative numbers, heredocs and every comment style. The agent loads it and acts on it.
#[test]
fn hcl1_forms_of_consuls_fixtures_load_and_act() {
    let dir = TempDir::new("hcl-forms");
    let config = dir.path().join("forms.hcl");
    std::fs::write(
        &config,
        r#"
/* A block comment
   over two lines. */
// A line comment.
node_meta = {
    "rack-id" = "r7",
    zone = "z2"
}
limits = {
    kv_max_value_size = 100,
    rpc_rate = 12.5,
},
ports { serf_lan = 28801 }
ports { serf_wan = -1 }
dns_config {
    service_ttl = {
        "*" = "5s"
    }
    only_passing = true
}
service = {
    id = "web-1"
    name = "web"
    tags = ["a", "b",]
    port = 8080
    meta = {
        owner = "team-a"
    }
    weights = {
        passing = 7,
        warning = 2
    }
    check = {
        id = "web-ttl"
        name = "web alive"
        ttl = "30s"
        status = "passing"
        notes = <<EOT
Checked by the deploy pipeline.
EOT
    }
    connect {}
}
service {
    name = "cache"
    port = 6379
    checks = [
        {
            id = "cache-ttl"
            ttl = "30s"
        },
        {
            id = "cache-http"
            http = "http://127.0.0.1:1/health"
            interval = "30s"
            header = {
                "X-Custom" = ["one", "two"],
                Accept = ["text/plain"]
            }
        },
    ]
}
services = [
    {
        name = "api"
        port = 9090
        enable_tag_override = true
    },
]
checks = [
    {
        id = "node-ttl"
        name = "node ttl"
        ttl = "30s"
    }
]
"#,
    )
    .unwrap();
    let config_path = config.display().to_string();
    let agent = Agent::dev(&["-node", "forms", "-config-file", &config_path]);

    let services = agent.get("/v1/agent/services").json();
    let web = &services["web-1"];
    assert_eq!(web["Tags"], serde_json::json!(["a", "b"]), "{services}");
    assert_eq!(web["Port"], 8080);
    assert_eq!(web["Meta"]["owner"], "team-a");
    assert_eq!(web["Weights"]["Passing"], 7);
    assert_eq!(web["Weights"]["Warning"], 2);
    assert_eq!(services["cache"]["Port"], 6379, "{services}");
    assert_eq!(services["api"]["EnableTagOverride"], true, "{services}");
    let checks = agent.get("/v1/agent/checks").json();
    assert_eq!(checks["web-ttl"]["Status"], "passing", "{checks}");
    assert_eq!(
        checks["web-ttl"]["Notes"],
        "Checked by the deploy pipeline.\n"
    );
    for id in ["cache-ttl", "cache-http", "node-ttl"] {
        assert!(checks.get(id).is_some(), "{id} in {checks}");
    }
    assert_eq!(checks["cache-http"]["ServiceID"], "cache");

    // `limits = { … },` acts (Consul's 413 above the size).
    assert_eq!(agent.put("/v1/kv/small", &[b'x'; 100]).status, 200);
    assert_eq!(agent.put("/v1/kv/big", &[b'x'; 101]).status, 413);
    // The node metadata with a quoted key, published by anti-entropy.
    let deadline = Instant::now() + Duration::from_secs(10);
    let node = loop {
        let node = agent.get("/v1/catalog/node/forms").json();
        if !node["Node"]["Meta"]["rack-id"].is_null() || Instant::now() > deadline {
            break node;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(node["Node"]["Meta"]["rack-id"], "r7", "{node}");
    assert_eq!(node["Node"]["Meta"]["zone"], "z2");
    // The merged `ports` blocks and the DNS settings reached the agent's configuration.
    let debug = agent.get("/v1/agent/self").json()["DebugConfig"].clone();
    assert_eq!(debug["SerfPortWAN"], -1, "{debug}");
    assert_eq!(
        debug["SerfPortLAN"], 28801,
        "the second `ports` block kept the first's keys"
    );
}

/// `addresses { http = … grpc = … }` binds the HTTP API and the gRPC server there instead
/// of `client_addr`, as in Consul; neither is warned about, since both act.
#[test]
fn addresses_move_the_http_and_grpc_listeners() {
    let client = common::fresh_loopback();
    let http = common::fresh_loopback();
    let args: Vec<String> = [
        "agent",
        "-dev",
        "-bind",
        &client.to_string(),
        "-client",
        &client.to_string(),
        "-dns-port=-1",
        "-hcl",
        &format!("addresses {{ http = \"{http}\" grpc = \"{client}\" }} ports {{ grpc = 28702 }}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let agent = Agent::spawn(http, 8500, args);
    agent.wait_ready();
    assert!(
        std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::new(client, 8500),
            Duration::from_millis(500)
        )
        .is_err(),
        "nothing listens for HTTP on client_addr"
    );
    assert!(
        std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::new(client, 28702),
            Duration::from_secs(2)
        )
        .is_ok(),
        "gRPC listens on addresses.grpc"
    );
    let log = agent.log();
    assert!(!log.contains("ports.grpc = 28702 is accepted"), "{log}");
    assert!(!log.contains("addresses.grpc is accepted"), "{log}");
}

/// Keys Consul has whose meaning holds or is refused as Consul refuses it:
/// `raft_protocol` other than 3 stops the agent with Consul's line, `session_ttl_min` moves
/// the session TTL floor (and its error text), `tombstone_ttl` (no Consul key) stops the
/// agent as Consul's unknown keys do, and keys praetor does not act on are warned about once
/// each.
#[test]
fn consul_keys_act_warn_or_stop_as_consul_does() {
    let (code, stderr) = agent_refusing(&["-dev", "-hcl", "raft_protocol = 2"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "raft_protocol version 2 is not supported by this version of Consul"
    );
    let (code, stderr) = agent_refusing(&["-dev", "-hcl", "reconnect_timeout_wan = \"1h\""]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stderr.trim_end(), "reconnect_timeout_wan must be >= 8h0m0s");
    let (code, stderr) = agent_refusing(&["-dev", "-hcl", "tombstone_ttl = \"1h\""]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "failed to parse -hcl #1: invalid config key tombstone_ttl"
    );

    let agent = Agent::dev(&[
        "-hcl",
        "raft_protocol = 3 session_ttl_min = \"2s\" \
         rejoin_after_leave = true discovery_max_stale = \"5s\" \
         dns_config { disable_compression = true }",
    ]);
    let created = agent.put("/v1/session/create", br#"{"TTL":"3s"}"#);
    assert_eq!(created.status, 200, "{}", created.text());
    let refused = agent.put("/v1/session/create", br#"{"TTL":"1s"}"#);
    assert_eq!(refused.status, 500);
    assert_eq!(
        refused.text(),
        "Invalid Session TTL '1000000000', must be between [2s=24h0m0s]"
    );
    let log = agent.log();
    for key in [
        "rejoin_after_leave = true",
        "discovery_max_stale",
        "dns_config.disable_compression = true",
    ] {
        let line = format!("config: {key} is accepted but not acted on yet");
        assert_eq!(log.matches(&line).count(), 1, "{line}: {log}");
    }
    assert!(!log.contains("raft_protocol"), "{log}");
}

/// A value rendered as HCL1, as Consul users write it (`key = { … }`, lists of objects).
fn hcl_value(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(key, item)| format!("{key:?} = {}", hcl_value(item)))
                .collect();
            format!("{{\n{}\n}}", items.join("\n"))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(hcl_value).collect();
            format!("[{}]", items.join(", "))
        }
        other => other.to_string(),
    }
}

fn hcl_document(document: &serde_json::Value) -> String {
    document
        .as_object()
        .unwrap()
        .iter()
        .map(|(key, value)| format!("{key} = {}\n", hcl_value(value)))
        .collect()
}

/// A misspelled key in each block stops `praetor validate` (exit 1) with Consul's
/// `invalid config key <path>` and the file's name, in JSON and in HCL alike; in a watch, the
/// parameter a watch type does not take is refused as Consul's watch parser refuses it, and
/// `node_meta`'s keys follow Consul's rules.
#[test]
fn a_misspelled_key_in_every_block_fails_validate_with_its_path() {
    use serde_json::json;
    let cases = [
        (json!({"acl": {"enabeld": true}}), "acl.enabeld"),
        (
            json!({"acl": {"tokens": {"agnet": "x"}}}),
            "acl.tokens.agnet",
        ),
        (json!({"datacentre": "dc1"}), "datacentre"),
        (
            json!({"service": {"name": "web", "prot": 80}}),
            "service.prot",
        ),
        (
            json!({"services": [{"name": "web"}, {"name": "api", "chekcs": []}]}),
            "services[1].chekcs",
        ),
        (
            json!({"service": {"name": "web", "check": {"ttl": "10s", "intervl": "10s"}}}),
            "service.check.intervl",
        ),
        (
            json!({"service": {"name": "web", "checks": [{"ttl": "10s", "stauts": "passing"}]}}),
            "service.checks[0].stauts",
        ),
        (
            json!({"service": {"name": "web", "connect": {"sidecar_servic": {}}}}),
            "service.connect.sidecar_servic",
        ),
        (
            json!({"service": {"name": "web", "connect": {"sidecar_service": {"prot": 1}}}}),
            "service.connect.sidecar_service.prot",
        ),
        (
            json!({"service": {"name": "p", "kind": "connect-proxy",
                               "proxy": {"destination_servce_name": "web"}}}),
            "service.proxy.destination_servce_name",
        ),
        (
            json!({"service": {"name": "web", "connect": {"sidecar_service": {"proxy": {
                "upstreams": [{"destination_name": "db", "local_bind_prot": 9}]}}}}}),
            "service.connect.sidecar_service.proxy.upstreams[0].local_bind_prot",
        ),
        (
            json!({"check": {"name": "c", "ttl": "10s", "notse": "x"}}),
            "check.notse",
        ),
        (
            json!({"checks": [{"name": "c", "ttl": "10s", "tcpp": "x"}]}),
            "checks[0].tcpp",
        ),
        (json!({"connect": {"enbled": true}}), "connect.enbled"),
        (
            json!({"telemetry": {"statsd_adress": "x:1"}}),
            "telemetry.statsd_adress",
        ),
        (
            json!({"dns_config": {"only_pasing": true}}),
            "dns_config.only_pasing",
        ),
        (
            json!({"dns_config": {"soa": {"serial": 1}}}),
            "dns_config.soa.serial",
        ),
        (json!({"ports": {"htpp": 1}}), "ports.htpp"),
        (json!({"addresses": {"htp": "127.0.0.1"}}), "addresses.htp"),
        (
            json!({"limits": {"kv_max_value": 1}}),
            "limits.kv_max_value",
        ),
        (
            json!({"performance": {"raft_multiplyer": 1}}),
            "performance.raft_multiplyer",
        ),
        (
            json!({"autopilot": {"cleanup_dead_server": true}}),
            "autopilot.cleanup_dead_server",
        ),
        (
            json!({"tls": {"defaults": {"verify_incomming": true}}}),
            "tls.defaults.verify_incomming",
        ),
        (
            json!({"tls": {"internal_rpc": {"ca_fil": "x"}}}),
            "tls.internal_rpc.ca_fil",
        ),
        (json!({"ui_config": {"enable": true}}), "ui_config.enable"),
        (
            json!({"ui_config": {"metrics_proxy": {"base": "http://x"}}}),
            "ui_config.metrics_proxy.base",
        ),
        (
            json!({"http_config": {"response_header": {}}}),
            "http_config.response_header",
        ),
        (json!({"auto_encrypt": {"tsl": true}}), "auto_encrypt.tsl"),
        (
            json!({"config_entries": {"bootstrp": []}}),
            "config_entries.bootstrp",
        ),
        (
            json!({"gossip_lan": {"probe_intervl": "1s"}}),
            "gossip_lan.probe_intervl",
        ),
    ];
    let dir = TempDir::new("validate-blocks");
    for (i, (document, path)) in cases.iter().enumerate() {
        for (ext, text) in [
            ("json", document.to_string()),
            ("hcl", hcl_document(document)),
        ] {
            let file = dir.path().join(format!("case{i}.{ext}"));
            std::fs::write(&file, &text).unwrap();
            let (code, stdout, stderr) = common::cli(&["validate", file.to_str().unwrap()], None);
            assert_eq!((code, stdout.as_str()), (1, ""), "{text}: {stderr}");
            assert_eq!(
                stderr.trim_end(),
                format!(
                    "Config validation failed: failed to parse {}: invalid config key {path}",
                    file.display()
                ),
                "{text}"
            );
        }
    }

    // What only a whole configuration can tell: a watch's parameters and node_meta's rules.
    let whole = [
        (
            json!({"data_dir": "/tmp/x", "watches": [{"type": "key", "key": "k", "keyy": "k", "args": ["true"]}]}),
            "Failed to parse watch watches[0]: Invalid parameters: [keyy]",
        ),
        (
            json!({"data_dir": "/tmp/x", "node_meta": {"rack id": "r1"}}),
            "node_meta invalid: Key contains invalid characters: \"rack id\"",
        ),
    ];
    for (i, (document, expected)) in whole.iter().enumerate() {
        for (ext, text) in [
            ("json", document.to_string()),
            ("hcl", hcl_document(document)),
        ] {
            let file = dir.path().join(format!("whole{i}.{ext}"));
            std::fs::write(&file, &text).unwrap();
            let (code, _, stderr) = common::cli(&["validate", file.to_str().unwrap()], None);
            assert_eq!(code, 1, "{text}: {stderr}");
            assert_eq!(
                stderr.trim_end(),
                format!("Config validation failed: {expected}"),
                "{text}"
            );
        }
    }
}

/// The security hole of issue #35: `acl { enabeld = true }` once started an agent with ACLs
/// off. It stops the agent, as it stops Consul, with one line naming the file and the key.
#[test]
fn a_misspelled_acl_key_stops_the_agent() {
    let dir = TempDir::new("acl-typo");
    let file = dir.path().join("acl.hcl");
    std::fs::write(
        &file,
        "acl {\n  enabeld = true\n  default_policy = \"deny\"\n}\n",
    )
    .unwrap();
    let (code, stderr) = agent_refusing(&["-dev", "-config-file", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "failed to parse {}: invalid config key acl.enabeld",
            file.display()
        )
    );
}

/// A service definition in the HTTP API's spelling (`Name`, `EnableTagOverride`, `Check`,
/// `DeregisterCriticalServiceAfter`), which Consul's config loader also takes, loads and
/// acts; a working feature is not warned about as missing.
#[test]
fn consuls_other_spellings_load_and_working_features_are_not_warned_about() {
    let dir = TempDir::new("camel");
    let file = dir.path().join("web.json");
    std::fs::write(
        &file,
        serde_json::json!({
            "Service": {
                "Name": "camel",
                "Port": 8081,
                "EnableTagOverride": true,
                "Check": {"TTL": "30s", "DeregisterCriticalServiceAfter": "90m"}
            }
        })
        .to_string(),
    )
    .unwrap();
    let agent = Agent::dev(&[
        "-config-file",
        file.to_str().unwrap(),
        "-hcl",
        "connect { enabled = true } retry_interval_wan = \"5s\" retry_max_wan = 2",
    ]);
    let services = agent.get("/v1/agent/services").json();
    assert_eq!(services["camel"]["Port"], 8081, "{services}");
    assert_eq!(services["camel"]["EnableTagOverride"], true, "{services}");
    let checks = agent.get("/v1/agent/checks").json();
    assert!(
        checks
            .as_object()
            .unwrap()
            .values()
            .any(|c| c["ServiceID"] == "camel"),
        "{checks}"
    );
    let log = agent.log();
    for false_claim in [
        "no service mesh",
        "runs no watch handlers",
        "do not join other datacenters",
        "not acted on yet: connect",
    ] {
        assert!(!log.contains(false_claim), "{false_claim}: {log}");
    }
}

/// A server started without `-bootstrap-expect` or `-bootstrap` says it waits for peers, in
/// the words Consul's Raft uses, once; a server that expects peers does not say it.
#[test]
fn a_server_without_bootstrap_expect_says_it_waits_for_peers() {
    let data = TempDir::new("lonely-server");
    let server = spawn_on_fresh_address(&["-server", "-data-dir", data.path().to_str().unwrap()]);
    let line = "raft: no known peers, aborting election";
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.log().contains(line) {
        assert!(Instant::now() < deadline, "{}", server.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(server.log().matches(line).count(), 1, "{}", server.log());
    // It serves, without a leader, as Consul's does.
    let leader = common::request(server.addr(), "GET", "/v1/status/leader", b"", &[]);
    assert_eq!((leader.status, leader.text().trim()), (200, "\"\""));
}

/// `/v1/agent/self`'s `DebugConfig` reports the configuration the agent runs with, field by
/// field, and has no `xDS` section while no xDS server listens, even with a gRPC port set.
#[test]
fn agent_self_reports_the_running_configuration() {
    let agent = Agent::dev(&[
        "-datacenter",
        "east",
        "-hcl",
        "connect { enabled = false } \
         acl { enabled = true default_policy = \"deny\" down_policy = \"deny\" \
               tokens { initial_management = \"root\" } } \
         ports { serf_wan = -1 grpc = 28512 } \
         dns_config { only_passing = true udp_answer_limit = 5 } \
         limits { kv_max_value_size = 4096 } \
         node_meta { rack = \"r9\" }",
    ]);
    let self_ = common::request(
        agent.addr(),
        "GET",
        "/v1/agent/self",
        b"",
        &[("X-Consul-Token", "root")],
    )
    .json();
    let debug = &self_["DebugConfig"];
    assert_eq!(debug["ConnectEnabled"], false, "{debug}");
    assert_eq!(debug["ACLsEnabled"], true);
    assert_eq!(debug["ACLResolverSettings"]["ACLDefaultPolicy"], "deny");
    assert_eq!(debug["ACLResolverSettings"]["ACLDownPolicy"], "deny");
    assert_eq!(debug["ACLInitialManagementToken"], "hidden");
    assert_eq!(debug["Datacenter"], "east");
    assert_eq!(debug["ServerMode"], true);
    assert_eq!(debug["DevMode"], true);
    assert_eq!(debug["HTTPPort"], i64::from(agent.http_port));
    assert_eq!(debug["SerfPortWAN"], -1);
    assert_eq!(debug["DNSPort"], -1);
    assert_eq!(debug["DNSOnlyPassing"], true);
    assert_eq!(debug["DNSUDPAnswerLimit"], 5);
    assert_eq!(debug["KVMaxValueSize"], 4096);
    assert_eq!(debug["NodeMeta"]["rack"], "r9");
    // The gRPC server listens on the configured port, so tools are told where.
    assert_eq!(debug["GRPCPort"], 28512, "{debug}");
    assert_eq!(self_["xDS"]["Port"], 28512, "{self_}");

    // A server of a cluster to be: the settings that differ from -dev.
    let data = TempDir::new("self-server");
    let server = spawn_on_fresh_address(&[
        "-server",
        "-bootstrap-expect",
        "3",
        "-data-dir",
        data.path().to_str().unwrap(),
    ]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let debug = loop {
        if let Ok(r) = common::try_request(server.addr(), "GET", "/v1/agent/self", b"", &[]) {
            if r.status == 200 {
                break r.json()["DebugConfig"].clone();
            }
        }
        assert!(Instant::now() < deadline, "{}", server.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(debug["BootstrapExpect"], 3, "{debug}");
    assert_eq!(debug["Bootstrap"], false);
    assert_eq!(debug["DevMode"], false);
    assert_eq!(debug["ConnectEnabled"], true, "Connect is on by default");
    assert_eq!(debug["ACLsEnabled"], false);
    assert_eq!(debug["Datacenter"], "dc1");
    assert_eq!(debug["DataDir"], data.path().display().to_string());
    // Consul's warning for a server waiting for its peers.
    assert!(
        server
            .log()
            .contains("bootstrap_expect > 0: expecting 3 servers"),
        "{}",
        server.log()
    );
}

/// `acl.enable_token_persistence`: tokens set with `praetor acl set-agent-token` are written
/// to `<data_dir>/acl-tokens.json` (Consul's file, mode 0600, only the tokens set through the
/// API) and win over the configuration's after a restart, with Consul's warning.
#[test]
fn persisted_agent_tokens_survive_a_restart() {
    use std::os::unix::fs::PermissionsExt as _;
    let data = TempDir::new("token-persistence");
    let mut agent = spawn_on_fresh_address(&[
        "-dev",
        "-data-dir",
        data.path().to_str().unwrap(),
        "-hcl",
        "acl { enabled = true default_policy = \"deny\" enable_token_persistence = true \
               tokens { initial_management = \"root\" default = \"no-such-token\" } }",
    ]);
    let root = [("X-Consul-Token", "root")];
    // The configured default token does not exist, so the harness's anonymous readiness
    // probe would be refused: wait as the management token instead.
    let wait_ready = |agent: &Agent| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let served = common::try_request(agent.addr(), "GET", "/v1/kv/probe", b"", &root)
                .is_ok_and(|r| r.status == 404);
            if served {
                return;
            }
            assert!(Instant::now() < deadline, "{}", agent.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_ready(&agent);
    let created = common::request(
        agent.addr(),
        "PUT",
        "/v1/acl/policy",
        br#"{"Name": "kv-read", "Rules": "key_prefix \"\" { policy = \"read\" }"}"#,
        &root,
    );
    assert_eq!(created.status, 200, "{}", created.text());
    let token = common::request(
        agent.addr(),
        "PUT",
        "/v1/acl/token",
        br#"{"Policies": [{"Name": "kv-read"}]}"#,
        &root,
    )
    .json()["SecretID"]
        .as_str()
        .unwrap()
        .to_string();
    // The configured default token does not exist: anonymous reads are refused.
    assert_eq!(agent.get("/v1/kv/anything").status, 403);
    let (code, stdout, stderr) = common::cli(
        &[
            "acl",
            "set-agent-token",
            "-http-addr",
            &agent.http_addr(),
            "-token",
            "root",
            "default",
            &token,
        ],
        None,
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "ACL token \"default\" set successfully\n");
    assert_eq!(agent.get("/v1/kv/anything").status, 404);

    let file = data.path().join("acl-tokens.json");
    let persisted: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(persisted, serde_json::json!({ "default": token }));
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );

    agent.terminate();
    agent.restart();
    wait_ready(&agent);
    assert_eq!(
        agent.get("/v1/kv/anything").status,
        404,
        "the persisted default token is in effect: {}",
        agent.log()
    );
    assert!(
        agent.log().contains(
            "\"default\" token present in both the configuration and persisted token store, using the persisted token"
        ),
        "{}",
        agent.log()
    );
}
