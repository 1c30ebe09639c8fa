//! The operator CLI against a real agent: `praetor kv …` and `praetor version`.

use crate::common;

use common::{cli, Agent};

#[test]
fn kv_commands_round_trip() {
    let agent = Agent::dev(&[]);
    let addr = agent.http_addr();
    let a = |args: &[&str]| -> Vec<String> {
        let mut v = vec!["kv".to_string()];
        v.push(args[0].to_string());
        v.push("-http-addr".to_string());
        v.push(addr.clone());
        v.extend(args[1..].iter().map(|s| s.to_string()));
        v
    };
    let run = |args: &[&str], stdin: Option<&[u8]>| {
        let owned = a(args);
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        cli(&refs, stdin)
    };

    assert_eq!(
        run(&["put", "app/name", "web"], None),
        (
            0,
            "Success! Data written to: app/name\n".into(),
            String::new()
        )
    );
    assert_eq!(run(&["put", "-flags=5", "app/flagged", "x"], None).0, 0);
    assert_eq!(run(&["put", "app/stdin", "-"], Some(b"from stdin")).0, 0);
    assert_eq!(run(&["get", "app/name"], None).1, "web\n");
    assert_eq!(run(&["get", "app/stdin"], None).1, "from stdin\n");

    let detailed = run(&["get", "-detailed", "app/flagged"], None).1;
    assert!(detailed.contains("Flags            5"), "{detailed}");
    assert!(detailed.contains("Session          -"), "{detailed}");

    let (code, _, err) = run(&["get", "app/missing"], None);
    assert_eq!(
        (code, err.as_str()),
        (1, "Error! No key exists at: app/missing\n")
    );

    assert_eq!(
        run(&["get", "-recurse", "app/"], None).1,
        "app/flagged:x\napp/name:web\napp/stdin:from stdin\n"
    );
    assert_eq!(run(&["get", "-keys", ""], None).1, "app/\n");

    // CAS through the CLI.
    let index: u64 = agent.get("/v1/kv/app/name").index();
    let (code, _, err) = run(
        &[
            "put",
            "-cas",
            &format!("-modify-index={}", index + 9),
            "app/name",
            "no",
        ],
        None,
    );
    assert_eq!(
        (code, err.as_str()),
        (1, "Error! Did not write to app/name: CAS failed\n")
    );
    assert_eq!(
        run(
            &[
                "put",
                "-cas",
                &format!("-modify-index={index}"),
                "app/name",
                "yes"
            ],
            None
        )
        .0,
        0
    );

    // Export, wipe, import.
    let (code, exported, _) = run(&["export", "app/"], None);
    assert_eq!(code, 0);
    let parsed: serde_json::Value = serde_json::from_str(&exported).unwrap();
    assert_eq!(parsed.as_array().unwrap().len(), 3);
    assert_eq!(
        run(&["delete", "-recurse", "app/"], None).1,
        "Success! Deleted keys with prefix: app/\n"
    );
    assert_eq!(agent.get("/v1/kv/app/?recurse").status, 404);
    let (code, imported, _) = run(&["import", "-"], Some(exported.as_bytes()));
    assert_eq!(code, 0);
    assert_eq!(imported.lines().count(), 3);
    assert_eq!(run(&["get", "app/name"], None).1, "yes\n");
    assert!(run(&["get", "-detailed", "app/flagged"], None)
        .1
        .contains("Flags            5"));

    assert_eq!(
        run(&["delete", "app/name"], None).1,
        "Success! Deleted key: app/name\n"
    );
}

#[test]
fn cli_errors_are_one_line_and_nonzero() {
    let (code, _, err) = cli(&["kv", "get", "-http-addr", "127.0.0.1:1", "x"], None);
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("error connecting to agent"), "{err}");
    let (code, _, err) = cli(&["agent"], None);
    assert_eq!(code, 1);
    assert!(err.contains("data_dir"), "{err}");
}

#[test]
fn version_names_the_consul_api_version() {
    let (code, out, _) = cli(&["version"], None);
    assert_eq!(code, 0);
    assert!(
        out.starts_with(&format!("Consul v{}\n", praetor::CONSUL_API_VERSION)),
        "{out}"
    );
    assert!(out.contains(&format!("praetor v{}", praetor::PRAETOR_VERSION)));
}

/// `praetor kv get -recurse … | head -1`: the reader closes the pipe after one line; the
/// command ends quietly on SIGPIPE, as Consul's CLI does, never with a panic on stderr.
#[test]
fn output_cut_short_by_a_closed_pipe_ends_quietly() {
    use base64::Engine;
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};

    let agent = Agent::dev(&[]);
    // About 400 KB of output: far more than a pipe's buffer (64 KiB) holds.
    let value = base64::engine::general_purpose::STANDARD.encode("v".repeat(2_000));
    for batch in 0..4 {
        let ops: Vec<String> = (0..50)
            .map(|n| {
                format!(
                    r#"{{"KV":{{"Verb":"set","Key":"many/{batch}-{n:02}","Value":"{value}"}}}}"#
                )
            })
            .collect();
        let answer = agent.put("/v1/txn", format!("[{}]", ops.join(",")).as_bytes());
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    let mut child = Command::new(common::praetor_binary())
        .args([
            "kv",
            "get",
            "-recurse",
            "-http-addr",
            &agent.http_addr(),
            "many/",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is dropped above: what the command writes next meets a closed pipe.
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(first.starts_with("many/0-00:"), "{first}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.signal(), Some(libc::SIGPIPE), "{stderr}");
}
