//! Config entries over real sockets against real `praetor agent -dev` processes: Consul's
//! shapes, CAS rules, errors, blocking reads, the discovery-chain protocol check, bootstrap
//! entries from the agent's config file, and the `praetor config` commands.

use crate::common;

use common::{cli, request, Agent, TempDir};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn put_entry(agent: &Agent, body: Value) -> common::HttpResponse {
    agent.put("/v1/config", body.to_string().as_bytes())
}

#[test]
fn entries_are_written_read_listed_and_deleted_as_consul_does() {
    let agent = Agent::dev(&[]);
    let r = put_entry(
        &agent,
        json!({"Kind": "service-defaults", "Name": "web", "Protocol": "HTTP"}),
    );
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "true\n"),
        "{}",
        r.text()
    );
    let got = agent.get("/v1/config/service-defaults/web");
    assert_eq!(got.status, 200);
    let entry = got.json();
    assert_eq!(entry["Kind"], "service-defaults");
    assert_eq!(entry["Name"], "web");
    assert_eq!(entry["Protocol"], "http", "normalized to lower case");
    assert_eq!(entry["MeshGateway"], json!({}));
    let created = entry["CreateIndex"].as_u64().unwrap();
    assert_eq!(entry["ModifyIndex"].as_u64().unwrap(), created);
    assert!(got.index() >= created);

    // CAS: 0 only creates, N only over ModifyIndex N.
    let cas0 = agent.put(
        "/v1/config?cas=0",
        json!({"Kind": "service-defaults", "Name": "web"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(cas0.text(), "false\n");
    let stale = agent.put(
        &format!("/v1/config?cas={}", created + 100),
        json!({"Kind": "service-defaults", "Name": "web", "Protocol": "grpc"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(stale.text(), "false\n");
    let fresh = agent.put(
        &format!("/v1/config?cas={created}"),
        json!({"Kind": "service-defaults", "Name": "web", "Protocol": "grpc"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(fresh.text(), "true\n");
    let entry = agent.get("/v1/config/service-defaults/WEB").json();
    assert_eq!(entry["Protocol"], "grpc", "names match case-insensitively");
    assert_eq!(entry["CreateIndex"].as_u64().unwrap(), created);
    assert!(entry["ModifyIndex"].as_u64().unwrap() > created);

    put_entry(&agent, json!({"kind": "service-defaults", "name": "api"}));
    let list = agent.get("/v1/config/service-defaults");
    assert_eq!(list.status, 200);
    let listed = list.json();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["api", "web"]);
    assert_eq!(agent.get("/v1/config/proxy-defaults").json(), json!([]));

    // Errors, in Consul's words and statuses.
    let missing = agent.get("/v1/config/service-defaults/nope");
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.text(),
        "Config entry not found for \"service-defaults\" / \"nope\""
    );
    let bad_kind = put_entry(&agent, json!({"Kind": "nope", "Name": "x"}));
    assert_eq!(bad_kind.status, 400);
    assert_eq!(
        bad_kind.text(),
        "Request decoding failed: invalid config entry kind: nope"
    );
    let unknown_key = put_entry(
        &agent,
        json!({"Kind": "service-defaults", "Name": "x", "Foo": 1}),
    );
    assert_eq!(unknown_key.status, 400);
    assert!(
        unknown_key.text().contains("invalid config key \"Foo\""),
        "{}",
        unknown_key.text()
    );
    let invalid = put_entry(&agent, json!({"Kind": "proxy-defaults", "Name": "local"}));
    assert_eq!(invalid.status, 500);
    assert_eq!(
        invalid.text(),
        "invalid name (\"local\"), only \"global\" is supported"
    );
    assert_eq!(agent.delete("/v1/config/service-defaults").status, 404);

    // Deletes: `{}` without CAS, a boolean with it.
    let current = agent.get("/v1/config/service-defaults/api").json()["ModifyIndex"]
        .as_u64()
        .unwrap();
    assert_eq!(
        agent.delete("/v1/config/service-defaults/api?cas=1").text(),
        "false\n"
    );
    assert_eq!(
        agent
            .delete(&format!("/v1/config/service-defaults/api?cas={current}"))
            .text(),
        "true\n"
    );
    let plain = agent.delete("/v1/config/service-defaults/web");
    assert_eq!((plain.status, plain.text().as_str()), (200, "{}\n"));
    assert_eq!(agent.get("/v1/config/service-defaults").json(), json!([]));
}

#[test]
fn routers_need_an_http_protocol_and_blocking_reads_wake_on_their_entry() {
    let agent = Agent::dev(&[]);
    let router = json!({"Kind": "service-router", "Name": "web", "Routes": [
        {"Match": {"HTTP": {"PathPrefix": "/admin"}}, "Destination": {"Service": "admin"}}
    ]});
    let refused = put_entry(&agent, router.clone());
    assert_eq!(refused.status, 500);
    assert_eq!(
        refused.text(),
        "discovery chain \"web\" uses a protocol \"tcp\" that does not permit advanced routing or splitting behavior"
    );
    assert_eq!(
        put_entry(
            &agent,
            json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}})
        )
        .text(),
        "true\n"
    );
    assert_eq!(put_entry(&agent, router).text(), "true\n");
    let delete_global = agent.delete("/v1/config/proxy-defaults/global");
    assert_eq!(delete_global.status, 500, "{}", delete_global.text());

    // A blocking read of one entry sleeps through a write to another entry and wakes for
    // its own.
    let index = agent.get("/v1/config/service-router/web").index();
    let addr = agent.addr();
    let started = Instant::now();
    let waiter = std::thread::spawn(move || {
        request(
            addr,
            "GET",
            &format!("/v1/config/service-router/web?index={index}&wait=20s"),
            b"",
            &[],
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    put_entry(&agent, json!({"Kind": "service-defaults", "Name": "other"}));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished(), "woke for another entry");
    put_entry(
        &agent,
        json!({"Kind": "service-router", "Name": "web", "Routes": []}),
    );
    let woke = waiter.join().unwrap();
    assert_eq!(woke.status, 200);
    assert!(woke.index() > index);
    assert!(woke.json().get("Routes").is_none(), "{}", woke.text());
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_chain_into_another_datacenter_carries_the_mesh_gateway_mode_consul_would_pick() {
    let agent = Agent::dev(&[]);
    let remote_target = |body: &[u8]| {
        let answer = request(
            agent.addr(),
            "POST",
            "/v1/discovery-chain/db?compile-dc=dc2",
            body,
            &[],
        );
        assert_eq!(answer.status, 200, "{}", answer.text());
        answer.json()["Chain"]["Targets"]["db.default.default.dc2"]["MeshGateway"].clone()
    };
    assert_eq!(
        remote_target(b""),
        json!({}),
        "nothing configured: the mode defers"
    );
    put_entry(
        &agent,
        json!({"Kind": "proxy-defaults", "Name": "global", "MeshGateway": {"Mode": "local"}}),
    );
    assert_eq!(remote_target(b"")["Mode"], "local");
    put_entry(
        &agent,
        json!({"Kind": "service-defaults", "Name": "db", "MeshGateway": {"Mode": "remote"}}),
    );
    assert_eq!(remote_target(b"")["Mode"], "remote");
    assert_eq!(
        remote_target(br#"{"OverrideMeshGateway": {"Mode": "none"}}"#)["Mode"],
        "none"
    );
    // The agent's own datacenter never goes through a gateway, whatever is configured.
    let local = agent.get("/v1/discovery-chain/db").json();
    assert_eq!(
        local["Chain"]["Targets"]["db.default.default.dc1"]["MeshGateway"],
        json!({})
    );
    let refused = request(
        agent.addr(),
        "POST",
        "/v1/discovery-chain/db",
        br#"{"OverrideMeshGateway": {"Mode": "sideways"}}"#,
        &[],
    );
    assert_eq!(
        (refused.status, refused.text().as_str()),
        (
            400,
            "Request decoding failed: Invalid Mesh Gateway Mode: \"sideways\""
        )
    );
}

#[test]
fn bootstrap_entries_from_the_config_file_are_written_by_the_leader() {
    let dir = TempDir::new("connect-bootstrap");
    let file = dir.path().join("entries.hcl");
    std::fs::write(
        &file,
        r#"
config_entries {
  bootstrap = [
    {
      kind = "proxy-defaults"
      name = "global"
      config {
        protocol = "http"
      }
    },
    {
      kind = "service-intentions"
      name = "db"
      sources = [
        { name = "web", action = "allow" },
        { name = "*", action = "deny" },
      ]
    }
  ]
}
"#,
    )
    .unwrap();
    let agent = Agent::dev(&["-config-file", file.to_str().unwrap()]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = agent.get("/v1/config/service-intentions/db");
        if r.status == 200 {
            let sources = r.json()["Sources"].clone();
            assert_eq!(sources[0]["Name"], "web");
            assert_eq!(sources[0]["Precedence"], 9);
            assert_eq!(sources[1]["Name"], "*");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "bootstrap entries never appeared"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let global = agent.get("/v1/config/proxy-defaults/global").json();
    assert_eq!(global["Config"]["protocol"], "http");

    // A bad bootstrap entry stops the agent at start, naming its position.
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"config_entries": {"bootstrap": [{"kind": "service-defaults", "name": "*"}]}}"#,
    )
    .unwrap();
    let (code, stderr) = run_bounded(&[
        "agent",
        "-dev",
        "-bind",
        "127.0.0.1",
        "-http-port",
        "-1",
        "-dns-port",
        "-1",
        "-config-file",
        bad.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("config_entries.bootstrap[0]: service-defaults name must be the name of a service, and not a wildcard"),
        "{stderr}"
    );
}

/// Runs the praetor binary expecting it to exit within 20 s: (exit code, stderr).
fn run_bounded(args: &[&str]) -> (i32, String) {
    let mut child = std::process::Command::new(common::praetor_binary())
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
            return (status.code().unwrap_or(-1), stderr);
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("praetor {args:?} kept running: the configuration was accepted");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_config_commands_write_read_list_and_delete() {
    let agent = Agent::dev(&[]);
    let addr = format!("-http-addr={}", agent.http_addr());
    let dir = TempDir::new("connect-config-cli");
    let file = dir.path().join("web.hcl");
    std::fs::write(
        &file,
        "Kind = \"service-defaults\"\nName = \"web\"\nProtocol = \"http\"\n",
    )
    .unwrap();
    let (code, out, err) = cli(&["config", "write", &addr, file.to_str().unwrap()], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "Config entry written: service-defaults/web");
    let (code, out, _) = cli(
        &["config", "write", &addr, "-"],
        Some(br#"{"Kind":"service-resolver","Name":"web","ConnectTimeout":"5s"}"#),
    );
    assert_eq!(
        (code, out.trim()),
        (0, "Config entry written: service-resolver/web")
    );
    let (code, out, _) = cli(
        &[
            "config",
            "write",
            &addr,
            "-cas",
            "-modify-index=0",
            file.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(
        (code, out.trim()),
        (1, "Config entry not updated: service-defaults/web")
    );
    let (code, out, _) = cli(
        &[
            "config",
            "read",
            &addr,
            "-kind",
            "service-resolver",
            "-name",
            "web",
        ],
        None,
    );
    assert_eq!(code, 0);
    let read: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(read["ConnectTimeout"], "5s");
    let (code, out, _) = cli(
        &["config", "list", &addr, "-kind", "service-defaults"],
        None,
    );
    assert_eq!((code, out.as_str()), (0, "web\n"));
    let (code, out, _) = cli(
        &[
            "config",
            "delete",
            &addr,
            "-kind",
            "service-defaults",
            "-name",
            "web",
        ],
        None,
    );
    assert_eq!(
        (code, out.trim()),
        (0, "Config entry deleted: service-defaults/web")
    );
    let (code, _, err) = cli(
        &[
            "config",
            "read",
            &addr,
            "-kind",
            "service-defaults",
            "-name",
            "web",
        ],
        None,
    );
    assert_eq!(code, 1);
    assert!(err.contains("Unexpected response code: 404"), "{err}");
}
