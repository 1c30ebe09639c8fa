//! Operator commands about the agent itself, as Consul's CLI has them: `monitor` (stream the
//! agent's log lines), `info` (its `Stats`, sorted), and `validate` (check config files the
//! way `praetor agent` reads them, without starting anything).

use super::client::{encode_query_value, StreamEnd};
use super::HttpFlags;
use crate::config::{self, ConfigFormat, ConfigSources};
use clap::Args;
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often a streaming command looks at its interrupt flag while the agent is quiet.
pub const INTERRUPT_POLL: Duration = Duration::from_millis(250);

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_interrupt(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM set a flag instead of killing the command, so a streaming
/// command ends cleanly (exit 0, files closed) as Consul's do.
pub fn catch_interrupts() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGINT,
            note_interrupt as *const () as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGTERM,
            note_interrupt as *const () as libc::sighandler_t,
        );
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

#[derive(Args, Debug)]
pub struct MonitorArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Log level of the lines to show (trace, debug, info, warn, err).
    #[arg(long = "log-level", default_value = "INFO")]
    pub log_level: String,
    /// Show the lines in hclog's JSON format.
    #[arg(long = "log-json")]
    pub log_json: Option<bool>,
}

/// `monitor`: prints the agent's log lines as they are written until interrupted (exit 0)
/// or until the agent goes away (exit 1, with Consul's message).
pub fn monitor(args: MonitorArgs) -> Result<i32, String> {
    let client = args
        .http
        .client()
        .map_err(|e| format!("Error connecting to Consul agent: {e}"))?;
    let mut path = format!(
        "/v1/agent/monitor?loglevel={}",
        encode_query_value(&args.log_level)
    );
    if args.log_json == Some(true) {
        path.push_str("&logjson");
    }
    catch_interrupts();
    let stdout = std::io::stdout();
    let mut write_failed = false;
    let end = client
        .stream("GET", &path, INTERRUPT_POLL, &mut |data| {
            if interrupted() {
                return false;
            }
            if let Some(bytes) = data {
                let mut out = stdout.lock();
                write_failed = out.write_all(bytes).and_then(|()| out.flush()).is_err();
            }
            !write_failed
        })
        .map_err(|e| format!("Error starting monitor: {e}"))?;
    match end {
        StreamEnd::Stopped => Ok(0),
        StreamEnd::Ended => {
            println!();
            println!("Remote side ended the monitor! This usually means that the\nremote side has exited or crashed.");
            Ok(1)
        }
    }
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    #[command(flatten)]
    pub http: HttpFlags,
}

/// `info`: the agent's `Stats`, a section per line and its keys indented, all sorted.
pub fn info(args: InfoArgs) -> Result<i32, String> {
    let client = args
        .http
        .client()
        .map_err(|e| format!("Error connecting to Consul agent: {e}"))?;
    let response = client
        .ok("GET", "/v1/agent/self", None)
        .map_err(|e| format!("Error querying agent: {e}"))?;
    let agent: Value =
        serde_json::from_slice(&response.body).map_err(|e| format!("Error querying agent: {e}"))?;
    let Some(stats) = agent.get("Stats").and_then(Value::as_object) else {
        return Err(format!(
            "Agent response did not contain 'Stats' key: {agent}"
        ));
    };
    let mut sections: Vec<_> = stats.iter().collect();
    sections.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::new();
    for (section, values) in sections {
        let Some(values) = values.as_object() else {
            return Err(format!("Got invalid subkey in stats: {values}"));
        };
        out.push_str(section);
        out.push_str(":\n");
        let mut keys: Vec<_> = values.iter().collect();
        keys.sort_by(|a, b| a.0.cmp(b.0));
        for (key, value) in keys {
            let text = match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            out.push_str(&format!("\t{key} = {text}\n"));
        }
    }
    print!("{out}");
    Ok(0)
}

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// Config files and directories, as `praetor agent` would load them.
    pub paths: Vec<PathBuf>,
    /// Print nothing when the configuration is valid.
    #[arg(long)]
    pub quiet: bool,
    /// Read every file as `json` or `hcl`, whatever its extension.
    #[arg(long = "config-format")]
    pub config_format: Option<String>,
}

/// `validate`: reads the files as the agent would and reports every problem, one line
/// each (exit 1), or Consul's `Configuration is valid!` (exit 0). Every file that cannot be
/// parsed is its own line; once all parse, the merged configuration is checked as a start
/// checks it, service and check definitions included.
pub fn validate(args: ValidateArgs) -> Result<i32, String> {
    if args.paths.is_empty() {
        return Err("Must specify at least one config file or directory".to_string());
    }
    let config_format = args
        .config_format
        .as_deref()
        .map(ConfigFormat::parse)
        .transpose()?;
    let (config_dirs, config_files) = args.paths.iter().cloned().partition(|p| p.is_dir());
    let sources = ConfigSources {
        config_files,
        config_dirs,
        config_format,
        ..ConfigSources::default()
    };
    let problems = problems_of(&sources);
    if !problems.is_empty() {
        for problem in &problems {
            eprintln!("Config validation failed: {problem}");
        }
        return Ok(1);
    }
    if !args.quiet {
        println!("Configuration is valid!");
    }
    Ok(0)
}

/// Every problem of a configuration, one line each; warnings go to stderr.
fn problems_of(sources: &ConfigSources) -> Vec<String> {
    let problems = config::check_documents(sources);
    if !problems.is_empty() {
        return problems;
    }
    let config = match config::build(sources) {
        Ok(config) => config,
        Err(problem) => return vec![problem],
    };
    if let Err(problem) = crate::agent::config_definitions(&config) {
        return vec![problem];
    }
    for warning in config.warnings.iter().chain(&config.acl.warnings) {
        eprintln!("[WARN] {warning}");
    }
    Vec::new()
}
