//! `praetor debug`: records what an operator needs to diagnose an agent into one archive,
//! laid out as Consul's `consul debug` lays it out.
//!
//! `<output>/` (default `consul-debug-<UTC time>`, archived as `<output>.tar.gz`) holds:
//! `index.json` (format version, agent version, interval, duration, targets), `agent.json`
//! (`/v1/agent/self`), `members.json` (`/v1/agent/members`), `host.json` (`/v1/agent/host`),
//! `metrics.json` (one `/v1/agent/metrics` document per interval, concatenated as the
//! metrics stream writes them), `consul.log` (every line the agent logged at trace level
//! during the capture, through `/v1/agent/monitor`) and `listpeers.json` (the Raft
//! configuration, on a server). Consul's `pprof` target has nothing to capture in a Rust
//! process: asked for, it is skipped with a warning.
//!
//! Consul's limits hold: `-duration` at least 10 s, `-interval` at least 5 s and no longer
//! than the duration, and 2 s of grace so the last interval is captured. An interrupt stops
//! the capture early and still writes the archive.

use super::client::Client;
use super::ops::{catch_interrupts, interrupted, INTERRUPT_POLL};
use super::HttpFlags;
use crate::proto::duration::{format_go_duration, parse_go_duration};
use clap::Args;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Consul's defaults and limits (`command/debug/debug.go`).
const INTERVAL_DEFAULT: &str = "30s";
const DURATION_DEFAULT: &str = "5m";
const INTERVAL_MIN: Duration = Duration::from_secs(5);
const DURATION_MIN: Duration = Duration::from_secs(10);
const DURATION_GRACE: Duration = Duration::from_secs(2);
/// The archive format version `index.json` records.
const DEBUG_PROTOCOL_VERSION: u32 = 1;
const ARCHIVE_EXTENSION: &str = ".tar.gz";

const TARGET_METRICS: &str = "metrics";
const TARGET_LOGS: &str = "logs";
const TARGET_PPROF: &str = "pprof";
const TARGET_HOST: &str = "host";
const TARGET_AGENT: &str = "agent";
const TARGET_MEMBERS: &str = "members";
/// Consul's deprecated name for `members`.
const TARGET_CLUSTER: &str = "cluster";
/// What is captured when `-capture` is not given (Consul's list less `pprof`).
const TARGETS_DEFAULT: &[&str] = &[
    TARGET_METRICS,
    TARGET_LOGS,
    TARGET_HOST,
    TARGET_AGENT,
    TARGET_MEMBERS,
];

#[derive(Args, Debug)]
pub struct DebugArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// How often dynamic information (metrics) is captured.
    #[arg(long, default_value = INTERVAL_DEFAULT)]
    pub interval: String,
    /// How long to capture for.
    #[arg(long, default_value = DURATION_DEFAULT)]
    pub duration: String,
    /// Where to write the capture (default `consul-debug-<time>` in the current directory).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// What to capture: metrics, logs, host, agent, members (repeatable; default all).
    #[arg(long)]
    pub capture: Vec<String>,
    /// Archive and compress the capture (`-archive=false` keeps the directory).
    #[arg(long)]
    pub archive: Option<bool>,
    /// Consul hands this to hcdiag; praetor refuses it.
    #[arg(long)]
    pub since: Option<String>,
}

/// Consul's time format for file names: RFC 3339 with hyphens instead of colons.
fn file_time(time: SystemTime) -> String {
    crate::logging::utc_timestamp(time)
        .split('.')
        .next()
        .unwrap_or_default()
        .replace(':', "-")
        + "Z"
}

struct Plan {
    interval: Duration,
    duration: Duration,
    targets: Vec<String>,
    output: PathBuf,
    archive: bool,
}

fn plan(args: &DebugArgs) -> Result<Plan, String> {
    if args.since.is_some() {
        return Err(
            "-since: praetor cannot read past diagnostics (Consul runs hcdiag); capture live with -duration".to_string(),
        );
    }
    let parse = |flag: &str, text: &str| {
        parse_go_duration(text).map_err(|e| {
            format!("Error parsing flags: invalid value {text:?} for flag -{flag}: {e}")
        })
    };
    let interval = parse("interval", &args.interval)?;
    let duration = parse("duration", &args.duration)?;
    let invalid = |why: String| format!("Capture validation failed: {why}");
    if duration < DURATION_MIN {
        return Err(invalid(format!(
            "duration must be longer than {}",
            format_go_duration(DURATION_MIN.as_nanos() as i64)
        )));
    }
    if interval < INTERVAL_MIN {
        return Err(invalid(format!(
            "interval must be longer than {}",
            format_go_duration(INTERVAL_MIN.as_nanos() as i64)
        )));
    }
    if duration < interval {
        return Err(invalid(format!(
            "duration ({}) must be longer than interval ({})",
            format_go_duration(duration.as_nanos() as i64),
            format_go_duration(interval.as_nanos() as i64)
        )));
    }
    let mut targets = Vec::new();
    let asked: Vec<&str> = if args.capture.is_empty() {
        TARGETS_DEFAULT.to_vec()
    } else {
        args.capture.iter().map(String::as_str).collect()
    };
    for target in asked {
        match target {
            TARGET_PPROF => eprintln!(
                "==> [WARN] Unable to capture pprof: praetor is not a Go process and has no Go profiles"
            ),
            TARGET_CLUSTER => targets.push(TARGET_MEMBERS.to_string()),
            t if TARGETS_DEFAULT.contains(&t) => targets.push(t.to_string()),
            other => return Err(invalid(format!("target not found: {other}"))),
        }
    }
    targets.dedup();
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("consul-debug-{}", file_time(SystemTime::now()))));
    if output.exists() {
        return Err(invalid(format!(
            "output directory already exists: {}",
            output.display()
        )));
    }
    Ok(Plan {
        interval,
        duration,
        targets,
        output,
        archive: args.archive.unwrap_or(true),
    })
}

/// JSON as Consul's debug writes it: tab-indented.
fn json_file(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"\t");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    let _ = serde::Serialize::serialize(value, &mut serializer);
    out
}

fn get_json(client: &Client, path: &str) -> Result<Value, String> {
    let response = client.ok("GET", path, None)?;
    serde_json::from_slice(&response.body).map_err(|e| format!("{path}: {e}"))
}

pub fn run(args: DebugArgs) -> Result<i32, String> {
    let client = args
        .http
        .client()
        .map_err(|e| format!("Error connecting to Consul agent: {e}"))?;
    let mut plan = plan(&args)?;
    let agent = get_json(&client, "/v1/agent/self").map_err(|e| {
        format!(
            "Capture validation failed: error querying target agent: {e}. verify connectivity and agent address"
        )
    })?;
    let version = agent["Config"]["Version"]
        .as_str()
        .ok_or("Capture validation failed: agent response did not contain version key")?
        .to_string();
    std::fs::create_dir_all(&plan.output).map_err(|e| {
        format!("Capture validation failed: could not create output directory: {e}")
    })?;
    let archive_name = if plan.archive {
        format!("{}{ARCHIVE_EXTENSION}", plan.output.display())
    } else {
        plan.output.display().to_string()
    };
    println!("==> Starting debugger and capturing static information...");
    println!("     Agent Version: '{version}'");
    println!(
        "          Interval: '{}'",
        format_go_duration(plan.interval.as_nanos() as i64)
    );
    println!(
        "          Duration: '{}'",
        format_go_duration(plan.duration.as_nanos() as i64)
    );
    println!("            Output: '{archive_name}'");
    println!("           Capture: '{}'", plan.targets.join(", "));
    plan.duration += DURATION_GRACE;
    catch_interrupts();

    if let Err(e) = capture_static(&client, &plan, agent) {
        eprintln!("==> Static capture failed: {e}");
    }
    if let Err(e) = capture_dynamic(&client, &plan) {
        eprintln!("==> Error encountered during collection: {e}");
    }
    let index = json!({
        "Version": DEBUG_PROTOCOL_VERSION,
        "AgentVersion": version,
        "Interval": format_go_duration(plan.interval.as_nanos() as i64),
        "Duration": format_go_duration(plan.duration.as_nanos() as i64),
        "Targets": plan.targets,
    });
    std::fs::write(plan.output.join("index.json"), json_file(&index))
        .map_err(|e| format!("Error creating index document: {e}"))?;
    match get_json(&client, "/v1/operator/raft/configuration") {
        Ok(configuration) => {
            if let Err(e) = std::fs::write(
                plan.output.join("listpeers.json"),
                json_file(&configuration),
            ) {
                eprintln!("==> Raft list peers capture failed: {e}");
            }
        }
        Err(e) => eprintln!("==> Raft list peers capture failed: {e}"),
    }
    if plan.archive {
        archive(&plan.output).map_err(|e| format!("Archive creation failed: {e}"))?;
    }
    println!("    Saved debug archive: {archive_name}");
    Ok(0)
}

fn capture_static(client: &Client, plan: &Plan, agent: Value) -> Result<(), String> {
    let wants = |target: &str| plan.targets.iter().any(|t| t == target);
    let mut errors = Vec::new();
    let mut write = |name: &str, value: Result<Value, String>| match value {
        Ok(value) => {
            if let Err(e) = std::fs::write(plan.output.join(name), json_file(&value)) {
                errors.push(format!("{name}: {e}"));
            }
        }
        Err(e) => errors.push(e),
    };
    if wants(TARGET_HOST) {
        write("host.json", get_json(client, "/v1/agent/host"));
    }
    if wants(TARGET_AGENT) {
        write("agent.json", Ok(agent));
    }
    if wants(TARGET_MEMBERS) {
        write("members.json", get_json(client, "/v1/agent/members"));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Captures logs (a monitor stream on its own thread) and metrics (every interval) until
/// the duration has passed or the command is interrupted.
fn capture_dynamic(client: &Client, plan: &Plan) -> Result<(), String> {
    let deadline = Instant::now() + plan.duration;
    let wants = |target: &str| plan.targets.iter().any(|t| t == target);
    let logs = wants(TARGET_LOGS).then(|| {
        let client = Client::new(client.options.clone());
        let path = plan.output.join("consul.log");
        std::thread::spawn(move || capture_logs(&client, &path, deadline))
    });
    let mut result = Ok(());
    if wants(TARGET_METRICS) {
        result = capture_metrics(
            client,
            &plan.output.join("metrics.json"),
            plan.interval,
            deadline,
        );
    }
    if let Some(logs) = logs {
        let logged = logs
            .join()
            .unwrap_or_else(|_| Err("the log capture failed".to_string()));
        result = result.and(logged);
    }
    result
}

fn capture_logs(client: &Client, path: &Path, deadline: Instant) -> Result<(), String> {
    let mut file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut write_error = None;
    client
        .stream(
            "GET",
            "/v1/agent/monitor?loglevel=TRACE",
            INTERRUPT_POLL,
            &mut |data| {
                if let Some(bytes) = data {
                    if let Err(e) = std::io::Write::write_all(&mut file, bytes) {
                        write_error = Some(e.to_string());
                        return false;
                    }
                }
                Instant::now() < deadline && !interrupted()
            },
        )
        .map_err(|e| format!("logs: {e}"))?;
    write_error.map_or(Ok(()), Err)
}

fn capture_metrics(
    client: &Client,
    path: &Path,
    interval: Duration,
    deadline: Instant,
) -> Result<(), String> {
    let mut file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut count = 0u32;
    let mut next = Instant::now();
    println!(
        "==> Beginning capture interval {} ({count})",
        crate::logging::utc_timestamp(SystemTime::now())
    );
    while Instant::now() < deadline && !interrupted() {
        if Instant::now() >= next {
            let response = client
                .ok("GET", "/v1/agent/metrics", None)
                .map_err(|e| format!("metrics: {e}"))?;
            std::io::Write::write_all(&mut file, &response.body)
                .and_then(|()| std::io::Write::write_all(&mut file, b"\n"))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            println!(
                "==> Capture successful {} ({count})",
                crate::logging::utc_timestamp(SystemTime::now())
            );
            count += 1;
            next += interval;
        }
        std::thread::sleep(INTERRUPT_POLL.min(deadline.saturating_duration_since(Instant::now())));
    }
    Ok(())
}

/// Archives the capture as `<output>.tar.gz` with every file under `<name of output>/`, then
/// removes the directory.
fn archive(output: &Path) -> Result<(), String> {
    let base = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or("the output path has no name")?;
    let mut entries = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(output)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    names.sort();
    for path in names {
        let data = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        entries.push((format!("{base}/{name}"), data));
    }
    let mtime = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let bytes =
        crate::proto::snapshot_archive::write_tar_gz(&entries, mtime).map_err(|e| e.to_string())?;
    let archive = PathBuf::from(format!("{}{ARCHIVE_EXTENSION}", output.display()));
    let temporary = PathBuf::from(format!("{}.tmp", archive.display()));
    std::fs::write(&temporary, bytes).map_err(|e| format!("{}: {e}", temporary.display()))?;
    std::fs::rename(&temporary, &archive).map_err(|e| format!("{}: {e}", archive.display()))?;
    std::fs::remove_dir_all(output).map_err(|e| format!("failed to remove archived directory: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[(&str, &str)]) -> DebugArgs {
        let mut args = DebugArgs {
            http: HttpFlags::default(),
            interval: INTERVAL_DEFAULT.to_string(),
            duration: DURATION_DEFAULT.to_string(),
            output: Some(PathBuf::from("/nonexistent/praetor-debug-test")),
            capture: Vec::new(),
            archive: None,
            since: None,
        };
        for (flag, value) in extra {
            match *flag {
                "interval" => args.interval = value.to_string(),
                "duration" => args.duration = value.to_string(),
                "capture" => args.capture.push(value.to_string()),
                _ => unreachable!(),
            }
        }
        args
    }

    #[test]
    fn limits_and_targets_are_consuls() {
        let defaults = plan(&args(&[])).unwrap();
        assert_eq!(defaults.interval, Duration::from_secs(30));
        assert_eq!(defaults.duration, Duration::from_secs(300));
        assert_eq!(defaults.targets, TARGETS_DEFAULT);
        for (extra, expected) in [
            (vec![("duration", "5s")], "duration must be longer than 10s"),
            (vec![("interval", "1s")], "interval must be longer than 5s"),
            (
                vec![("interval", "20s"), ("duration", "15s")],
                "duration (15s) must be longer than interval (20s)",
            ),
            (vec![("capture", "nothing")], "target not found: nothing"),
        ] {
            let error = plan(&args(&extra)).err().unwrap();
            assert!(error.ends_with(expected), "{error}");
        }
        let members = plan(&args(&[("capture", "cluster"), ("capture", "pprof")])).unwrap();
        assert_eq!(members.targets, vec!["members"]);
    }

    #[test]
    fn file_times_have_no_colons() {
        let time = UNIX_EPOCH + Duration::from_millis(1_795_252_953_123);
        assert_eq!(file_time(time), "2026-11-21T09-22-33Z");
    }
}
