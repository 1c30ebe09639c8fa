//! Consul config files as Consul users write them, loaded by a real `praetor agent` process:
//! HCL1 forms (Consul parses HCL1), keys that act, keys that are accepted and warned about,
//! and type errors that stop the agent with the key path on one line.

mod common;

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
            "'node_meta[rack]' expected type 'string', got unconvertible type 'int', value: '7'"
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
/// the session TTL floor (and its error text), `tombstone_ttl` (no Consul key) is unknown,
/// and keys praetor does not act on are warned about once each.
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

    let agent = Agent::dev(&[
        "-hcl",
        "raft_protocol = 3 session_ttl_min = \"2s\" tombstone_ttl = \"1h\" \
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
    assert!(
        log.contains("ignoring unknown key \"tombstone_ttl\""),
        "{log}"
    );
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
