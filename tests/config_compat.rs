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
