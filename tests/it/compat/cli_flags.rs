//! The command line read as Consul's commands read theirs, with real `praetor` processes
//! against real agents: Go's flag syntax for boolean and value flags across commands
//! (`-flag`, `--flag`, `-flag=value`, `-flag value`, `-recurse=true|1|T`, Go's integer
//! notation, the last of a repeated flag winning, flags ending at the first positional or
//! `--`), the agent's flags overriding its config files both ways, Go's one-line errors with a
//! pointer to `-h` and Consul's exit codes, and `-h` on every command with a description for
//! every flag. Also the command behaviours that follow Consul's CLI: `intention list` and
//! `check`'s exit codes, the deprecated `-id` of `acl token`, and `catalog nodes -near`.

use crate::common;

use common::{cli, fresh_loopback, Agent, TempDir};
use std::time::{Duration, Instant};

/// Longest an agent started here may take to answer its HTTP API.
const AGENT_START_TIMEOUT: Duration = Duration::from_secs(20);

fn run(args: &[&str]) -> (i32, String, String) {
    cli(args, None)
}

/// Runs a command that must succeed and returns its standard output.
fn ok(args: &[&str]) -> String {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

/// Asserts a command line is refused with `message`, the pointer to `command`'s usage and
/// exit code `code`, and nothing on standard output.
fn refused_with(args: &[&str], command: &str, message: &str, code: i32) {
    let (status, out, err) = run(args);
    assert_eq!(status, code, "{args:?}: {err}");
    assert_eq!(out, "", "{args:?}");
    let usage = format!("praetor {command} -h").replace("praetor  -h", "praetor -h");
    let expected = format!("{message}\nSee '{usage}' for usage.\n");
    assert_eq!(err, expected, "{args:?}");
}

fn refused(args: &[&str], command: &str, message: &str) {
    refused_with(args, command, message, 1);
}

#[test]
fn boolean_and_value_flags_in_every_go_form() {
    let agent = Agent::dev(&[]);
    let addr = agent.http_addr();
    let assigned = format!("-http-addr={addr}");
    let double_assigned = format!("--http-addr={addr}");
    // A value flag: `-flag value`, `-flag=value`, `--flag value`, `--flag=value`.
    for (i, form) in [
        vec!["-http-addr", addr.as_str()],
        vec![assigned.as_str()],
        vec!["--http-addr", addr.as_str()],
        vec![double_assigned.as_str()],
    ]
    .iter()
    .enumerate()
    {
        let key = format!("app/{i}");
        let mut args = vec!["kv", "put"];
        args.extend(form.iter().copied());
        args.extend([key.as_str(), "v"]);
        assert_eq!(ok(&args), format!("Success! Data written to: {key}\n"));
    }
    let every_key = "app/0:v\napp/1:v\napp/2:v\napp/3:v\n";
    // A boolean: `-flag`, `--flag`, `-flag=<strconv.ParseBool>`.
    for form in [
        "-recurse",
        "--recurse",
        "-recurse=true",
        "-recurse=1",
        "--recurse=T",
        "-recurse=TRUE",
    ] {
        assert_eq!(
            ok(&["kv", "get", &assigned, form, "app/"]),
            every_key,
            "{form}"
        );
    }
    // `-recurse=false` reads the one key, which does not exist.
    let (code, _, err) = run(&["kv", "get", &assigned, "-recurse=false", "app/"]);
    assert_eq!((code, err.as_str()), (1, "Error! No key exists at: app/\n"));
    // A boolean never takes the next argument: `app/0` is the key, not -detailed's value.
    let field = |text: &str, name: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(name).filter(|rest| rest.starts_with(' ')))
            .map(|rest| rest.trim().to_string())
            .unwrap_or_default()
    };
    let detailed = ok(&["kv", "get", &assigned, "-detailed", "app/0"]);
    assert_eq!(field(&detailed, "Key"), "app/0", "{detailed}");
    // Integers in Go's notation; the last of a repeated flag wins.
    ok(&[
        "kv",
        "put",
        &assigned,
        "-flags",
        "0x2a",
        "-flags=0b11",
        "flagged",
        "x",
    ]);
    let detailed = ok(&["kv", "get", &assigned, "-detailed", "flagged"]);
    assert_eq!(field(&detailed, "Flags"), "3", "{detailed}");
    assert_eq!(
        ok(&["kv", "get", "-http-addr=127.0.0.1:1", &assigned, "app/0"]),
        "v\n"
    );
    // `--` ends the flags, so a key may start with a dash.
    assert_eq!(
        ok(&["kv", "put", &assigned, "--", "-dash", "d"]),
        "Success! Data written to: -dash\n"
    );
    assert_eq!(ok(&["kv", "get", &assigned, "--", "-dash"]), "d\n");
    // Flags end at the first positional argument, as Go's do.
    refused(
        &["kv", "get", &assigned, "app/", "-recurse"],
        "kv get",
        "Too many arguments (expected 1, got 2)",
    );
    // Other commands, other flags.
    let services = ok(&["catalog", "services", "-http-addr", &addr, "-tags=true"]);
    assert!(services.starts_with("consul"), "{services}");
    let members = ok(&["members", "--http-addr", &addr, "-detailed=1"]);
    assert!(members.contains("alive"), "{members}");
    let nodes = ok(&["catalog", "nodes", &double_assigned, "--detailed=f"]);
    assert!(nodes.starts_with("Node  "), "{nodes}");
}

#[test]
fn refused_command_lines_name_the_whole_flag_in_one_line() {
    refused(
        &["kv", "get", "-bogus", "k"],
        "kv get",
        "flag provided but not defined: -bogus",
    );
    refused(
        &["kv", "get", "--bogus=1"],
        "kv get",
        "flag provided but not defined: -bogus",
    );
    refused(
        &["kv", "get", "-recurse=maybe", "k"],
        "kv get",
        "invalid boolean value \"maybe\" for -recurse: parse error",
    );
    refused(
        &["kv", "get", "-token"],
        "kv get",
        "flag needs an argument: -token",
    );
    refused(
        &["kv", "put", "-flags=x", "k", "v"],
        "kv put",
        "invalid value \"x\" for flag -flags: parse error",
    );
    refused(
        &["services", "register", "-port=70000", "-name=web"],
        "services register",
        "invalid value \"70000\" for flag -port: value out of range",
    );
    refused(
        &["lock", "-timeout=soon", "p", "true"],
        "lock",
        "invalid value \"soon\" for flag -timeout: parse error",
    );
    refused(
        &["kv", "get", "---recurse"],
        "kv get",
        "bad flag syntax: ---recurse",
    );
    refused(
        &["agent", "-server=perhaps"],
        "agent",
        "invalid boolean value \"perhaps\" for -server: parse error",
    );
    refused(
        &["-dev", "agent"],
        "",
        "Invalid flags before the subcommand. If these flags are for the subcommand, please put them after the subcommand.",
    );
    // Consul's dispatcher: 127 for an unknown command; a group without its subcommand
    // prints the group's usage on standard error and exits 1.
    refused_with(&["bogus"], "", "Unknown command: bogus", 127);
    let (code, out, err) = run(&["kv"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(err.starts_with("Usage: praetor kv <subcommand>"), "{err}");
    assert!(err.contains("\n    put "), "{err}");
    let (code, _, err) = run(&[]);
    assert_eq!(code, 127);
    assert!(err.contains("Available commands are:"), "{err}");
    // A command's own checks of its arguments answer in Consul's words, on one line, before
    // any agent is asked.
    for (args, message) in [
        (vec!["kv", "put"], "Error! Missing KEY argument"),
        (
            vec!["kv", "put", "-cas", "k", "v"],
            "Must specify -modify-index with -cas!",
        ),
        (vec!["event"], "Event name must be specified"),
        (
            vec!["join"],
            "At least one address to join must be specified.",
        ),
        (
            vec!["force-leave"],
            "A single node name must be specified to force leave.",
        ),
        (
            vec!["rtt", "a", "b", "c"],
            "One or two node names must be specified",
        ),
        (vec!["snapshot", "inspect"], "Missing FILE argument"),
        (
            vec!["maint", "-disable", "-reason=upgrade"],
            "Reason may only be provided with -enable",
        ),
        (
            vec!["maint", "-service=web"],
            "Service requires either -enable or -disable",
        ),
        (
            vec!["agent", "-dev", "extra", "args"],
            "Unexpected extra arguments: [extra args]",
        ),
    ] {
        let (code, out, err) = run(&args);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (1, "", format!("{message}\n").as_str()),
            "{args:?}"
        );
    }
    // `intention check` returns 2 on a refused command line, as Consul's does.
    refused_with(
        &["intention", "check", "-bogus"],
        "intention check",
        "flag provided but not defined: -bogus",
        2,
    );
}

/// The commands `praetor <path> -h` lists as subcommands, or `None` for a leaf command.
fn subcommands(usage: &str) -> Option<Vec<String>> {
    let (_, list) = usage
        .split_once("\nSubcommands:\n")
        .or_else(|| usage.split_once("\nAvailable commands are:\n"))?;
    Some(
        list.lines()
            .filter_map(|line| line.split_whitespace().next().map(String::from))
            .collect(),
    )
}

/// Walks every command through `-h` (groups list their subcommands) and checks every leaf's
/// usage: its `Usage:` line, a description, and under every flag a one-line description.
#[test]
fn every_command_documents_every_flag() {
    let root = ok(&["-h"]);
    let mut pending: Vec<Vec<String>> = subcommands(&root)
        .expect("praetor -h lists the commands")
        .into_iter()
        .map(|c| vec![c])
        .collect();
    let (mut leaves, mut flags) = (0, 0);
    while let Some(path) = pending.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("-h");
        let (code, usage, err) = run(&args);
        let name = path.join(" ");
        assert_eq!((code, err.as_str()), (0, ""), "praetor {name} -h");
        assert!(
            usage.starts_with(&format!("Usage: praetor {name}")),
            "{name}: {usage}"
        );
        if let Some(children) = subcommands(&usage) {
            assert!(!children.is_empty(), "{name}: {usage}");
            for child in children {
                let mut child_path = path.clone();
                child_path.push(child);
                pending.push(child_path);
            }
            continue;
        }
        leaves += 1;
        let lines: Vec<&str> = usage.lines().collect();
        assert!(
            lines
                .get(2)
                .is_some_and(|l| l.starts_with("  ") && l.len() > 3),
            "{name} has no description: {usage}"
        );
        // Flags are listed under the option titles, after the description.
        let options_start = lines
            .iter()
            .position(|l| l.ends_with(" Options"))
            .unwrap_or(lines.len());
        for (i, line) in lines.iter().enumerate().skip(options_start) {
            if !line.starts_with("  -") {
                continue;
            }
            flags += 1;
            let flag = line.trim();
            let description = lines.get(i + 1).copied().unwrap_or("");
            assert!(
                description.starts_with("     ") && description.trim().len() > 3,
                "{name} {flag} has no description: {usage}"
            );
        }
    }
    assert!(leaves >= 70, "only {leaves} commands");
    assert!(flags >= 900, "only {flags} flags");
    // `-help`, `--help` and `-h` anywhere before `--` print the same usage, exit 0.
    let usage = ok(&["kv", "get", "-h"]);
    for args in [
        vec!["kv", "get", "-help"],
        vec!["kv", "get", "--help"],
        vec!["kv", "get", "-bogus", "-h"],
        vec!["kv", "get", "key", "-h"],
    ] {
        assert_eq!(ok(&args), usage, "{args:?}");
    }
    assert!(usage.contains("\n  -recurse\n     "), "{usage}");
    assert!(usage.contains("\n  -separator=<string>\n     "), "{usage}");
    assert!(usage.contains("\nHTTP API Options\n"), "{usage}");
    assert!(usage.contains("\nCommand Options\n"), "{usage}");
}

/// Waits until an agent's HTTP API answers `/v1/agent/self`, and returns the answer.
fn agent_self(agent: &Agent) -> serde_json::Value {
    let deadline = Instant::now() + AGENT_START_TIMEOUT;
    loop {
        if let Ok(r) = common::try_request(agent.addr(), "GET", "/v1/agent/self", b"", &[]) {
            if r.status == 200 {
                return r.json();
            }
        }
        assert!(
            Instant::now() < deadline,
            "agent did not answer; log:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn agent_flags_take_go_syntax_and_override_config_files_both_ways() {
    let ip = fresh_loopback();
    let data = TempDir::new("agent-flags");
    let ip_text = ip.to_string();
    let data_dir = data.path().display().to_string();
    let agent = Agent::spawn(
        ip,
        8500,
        [
            "agent",
            "-server=true",
            "-bootstrap-expect",
            "1",
            "-data-dir",
            &data_dir,
            "--bind",
            &ip_text,
            "-client",
            &ip_text,
            "-dns-port",
            "-1",
            "-node=go-flags",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    );
    agent.wait_ready();
    let config = &agent_self(&agent)["Config"];
    assert_eq!(config["Server"], true, "{config}");
    assert_eq!(config["NodeName"], "go-flags", "{config}");
    drop(agent);

    // A config file makes the agent a server; `-server=false` on the command line wins.
    let ip = fresh_loopback();
    let dir = TempDir::new("agent-flags-file");
    let file = dir.path().join("server.json");
    std::fs::write(&file, r#"{"server": true}"#).unwrap();
    let agent = Agent::spawn(
        ip,
        8500,
        [
            "agent",
            "-config-file",
            &file.display().to_string(),
            "-server=false",
            "-data-dir",
            &dir.path().join("data").display().to_string(),
            "-bind",
            &ip.to_string(),
            "-client",
            &ip.to_string(),
            "-dns-port=-1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    );
    let config = &agent_self(&agent)["Config"];
    assert_eq!(config["Server"], false, "{config}");
}

#[test]
fn intention_list_and_check_exit_as_consuls() {
    let agent = Agent::dev(&[]);
    let addr = format!("-http-addr={}", agent.http_addr());
    let (code, out, err) = run(&["intention", "list", &addr]);
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (2, "", "There are no intentions.\n")
    );
    ok(&["intention", "create", &addr, "-deny", "web", "db"]);
    ok(&["intention", "create", &addr, "api", "*"]);
    let list = ok(&["intention", "list", &addr]);
    let rows: Vec<Vec<&str>> = list
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["ID", "Source", "Action", "Destination", "Precedence"],
        "{list}"
    );
    assert_eq!(rows.len(), 3, "{list}");
    let row = |source: &str| rows.iter().find(|r| r[1] == source).cloned().unwrap();
    assert_eq!(row("web")[2..4], ["deny", "db"], "{list}");
    assert_eq!(row("api")[2..4], ["allow", "*"], "{list}");
    // Exact source and destination take precedence over a wildcard.
    let precedence = |source: &str| row(source)[4].parse::<u32>().unwrap();
    assert!(precedence("web") > precedence("api"), "{list}");
    assert_eq!(row("web")[0].len(), 36, "{list}");
    // Columns line up: each header starts where its values start.
    let header = list.lines().next().unwrap();
    let at = header.find("Destination").unwrap();
    assert!(
        list.lines()
            .skip(1)
            .all(|l| l[at..].starts_with("db") || l[at..].starts_with('*')),
        "{list}"
    );
    assert_eq!(run(&["intention", "check", &addr, "web", "db"]).0, 1);
    assert_eq!(run(&["intention", "check", &addr, "api", "db"]).0, 0);
    let (code, _, err) = run(&["intention", "check", &addr, "web"]);
    assert_eq!(
        (code, err.as_str()),
        (
            2,
            "Error: command requires exactly two arguments: src and dst\n"
        )
    );
    let (code, _, err) = run(&["intention", "check", "-http-addr=127.0.0.1:1", "web", "db"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.starts_with("Error checking the connection: "), "{err}");
}

#[test]
fn acl_token_commands_accept_the_deprecated_id_with_consuls_warning() {
    const MANAGEMENT: &str = "c1f6b7a2-5d3e-4f1a-9b8c-7d6e5f4a3b2c";
    let rules = format!(
        "acl {{ enabled = true\n default_policy = \"deny\"\n tokens {{ initial_management = \"{MANAGEMENT}\" }} }}"
    );
    let agent = Agent::dev(&["-hcl", &rules]);
    let addr = format!("-http-addr={}", agent.http_addr());
    let token = format!("-token={MANAGEMENT}");
    let own: serde_json::Value = serde_json::from_str(&ok(&[
        "acl",
        "token",
        "read",
        &addr,
        &token,
        "-self",
        "-format=json",
    ]))
    .unwrap();
    let accessor = own["AccessorID"].as_str().unwrap().to_string();

    let (code, out, err) = run(&["acl", "token", "read", &addr, &token, "-id", &accessor]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err,
        "Use the -accessor-id parameter to specify token by Accessor ID\n"
    );
    assert!(out.contains(&accessor), "{out}");
    // `-accessor-id` wins over `-id`, silently.
    let (code, _, err) = run(&[
        "acl",
        "token",
        "read",
        &addr,
        &token,
        "-accessor-id",
        &accessor,
        "-id",
        "nope",
    ]);
    assert_eq!((code, err.as_str()), (0, ""));

    let (code, out, err) = run(&[
        "acl",
        "token",
        "clone",
        &addr,
        &token,
        "-id",
        &accessor,
        "-format=json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err,
        "The -id parameter is deprecated. Use the -accessor-id parameter instead.\n"
    );
    let clone: serde_json::Value = serde_json::from_str(&out).unwrap();
    let clone_id = clone["AccessorID"].as_str().unwrap().to_string();
    assert_ne!(clone_id, accessor);

    let (code, out, err) = run(&[
        "acl",
        "token",
        "update",
        &addr,
        &token,
        "-id",
        &clone_id,
        "-description=renamed",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err,
        "Use the -accessor-id parameter to specify token by Accessor ID\n"
    );
    assert!(out.contains("renamed"), "{out}");

    let (code, out, err) = run(&["acl", "token", "delete", &addr, &token, "-id", &clone_id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err,
        "Use the -accessor-id parameter to specify token by Accessor ID.\n"
    );
    assert_eq!(out, format!("Token \"{clone_id}\" deleted successfully\n"));

    for (command, missing) in [
        ("read", "Must specify the -accessor-id parameter"),
        ("delete", "Must specify the -accessor-id parameter"),
        (
            "update",
            "Cannot update a token without specifying the -accessor-id parameter",
        ),
        (
            "clone",
            "Cannot update a token without specifying the -accessor-id parameter",
        ),
    ] {
        let (code, _, err) = run(&["acl", "token", command, &addr, &token]);
        assert_eq!((code, err.trim_end()), (1, missing), "{command}");
    }
}

#[test]
fn catalog_nodes_near_lists_the_nearest_first() {
    let agent = Agent::dev(&[]);
    // Names in alphabetical order are the farthest first from `c-near`.
    for (name, x) in [("a-far", 5.0), ("b-mid", 0.5), ("c-near", 0.0005)] {
        let node = format!(r#"{{"Node":"{name}","Address":"10.2.0.1"}}"#);
        assert_eq!(
            agent.put("/v1/catalog/register", node.as_bytes()).status,
            200
        );
        let update = serde_json::json!({"Node": name, "Coord": common::coordinate_at(x)});
        let response = agent.put("/v1/coordinate/update", update.to_string().as_bytes());
        assert_eq!(response.status, 200, "{}", response.text());
    }
    let addr = format!("-http-addr={}", agent.http_addr());
    let order = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["catalog", "nodes", addr.as_str()];
        args.extend(extra);
        ok(&args)
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| ["a-far", "b-mid", "c-near"].contains(n))
            .map(String::from)
            .collect()
    };
    assert_eq!(order(&[]), ["a-far", "b-mid", "c-near"]);
    assert_eq!(order(&["-near", "c-near"]), ["c-near", "b-mid", "a-far"]);
    assert_eq!(order(&["-near=b-mid"]), ["b-mid", "c-near", "a-far"]);
}
