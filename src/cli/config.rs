//! `praetor config write|read|list|delete`: config entries, as `consul config` manages them.
//! `write` takes a JSON or HCL file (or `-` for standard input); keys may be in Consul's
//! CamelCase or snake case, as the agent decodes them.

use super::client::{encode_path, encode_query_value};
use super::HttpFlags;
use clap::{Args, Subcommand};
use serde_json::Value;
use std::io::Read;

/// Largest config entry file read.
const ENTRY_FILE_BYTES_MAX: usize = 4 * 1024 * 1024;

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Creates or updates a config entry from a file (`-` for standard input).
    Write(WriteArgs),
    /// Prints one config entry.
    Read(ReadArgs),
    /// Lists the names of the config entries of a kind.
    List(ListArgs),
    /// Deletes a config entry.
    Delete(DeleteArgs),
}

#[derive(Args, Debug)]
pub struct WriteArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Check-and-set: write only if the entry is still at -modify-index (0: only if new).
    #[arg(long)]
    pub cas: bool,
    /// The entry's ModifyIndex that -cas compares with.
    #[arg(long = "modify-index", default_value_t = 0)]
    pub modify_index: u64,
    /// The entry file, JSON or HCL; `-` reads standard input.
    pub file: Option<String>,
}

#[derive(Args, Debug)]
pub struct ReadArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// The entry's kind (`service-defaults`, `proxy-defaults`, …).
    #[arg(long)]
    pub kind: Option<String>,
    /// The entry's name.
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// The kind of entries to list.
    #[arg(long)]
    pub kind: Option<String>,
}

#[derive(Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// The entry's kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// The entry's name.
    #[arg(long)]
    pub name: Option<String>,
    /// Delete the entry named in this file instead of -kind and -name.
    #[arg(long)]
    pub filename: Option<String>,
    /// Check-and-set: delete only if the entry is still at -modify-index.
    #[arg(long)]
    pub cas: bool,
    /// The entry's ModifyIndex that -cas compares with.
    #[arg(long = "modify-index", default_value_t = 0)]
    pub modify_index: u64,
}

/// Reads an entry file (or standard input) as JSON, or HCL when it does not parse as JSON.
fn read_entry(file: &str) -> Result<Value, String> {
    let mut text = String::new();
    if file == "-" {
        std::io::stdin()
            .take(ENTRY_FILE_BYTES_MAX as u64 + 1)
            .read_to_string(&mut text)
            .map_err(|e| format!("Failed to read stdin: {e}"))?;
    } else {
        let bytes = std::fs::read(file).map_err(|e| format!("Failed to read file: {e}"))?;
        text = String::from_utf8(bytes).map_err(|e| format!("Failed to read file: {e}"))?;
    }
    if text.len() > ENTRY_FILE_BYTES_MAX {
        return Err(format!(
            "Config entry files are limited to {ENTRY_FILE_BYTES_MAX} bytes"
        ));
    }
    if let Ok(value @ Value::Object(_)) = serde_json::from_str::<Value>(&text) {
        return Ok(value);
    }
    crate::proto::hcl::parse(&text)
        .map(Value::Object)
        .map_err(|e| format!("Failed to decode config entry input: {e}"))
}

/// The value of `name` in an entry, whatever its case.
fn field<'v>(entry: &'v Value, name: &str) -> Option<&'v str> {
    entry
        .as_object()?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.as_str())
}

fn require<'a>(value: &'a Option<String>, flag: &str) -> Result<&'a str, String> {
    value
        .as_deref()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("Must specify the -{flag} parameter"))
}

pub fn run(command: ConfigCommand) -> Result<i32, String> {
    match command {
        ConfigCommand::Write(args) => write(&args),
        ConfigCommand::Read(args) => read(&args),
        ConfigCommand::List(args) => list(&args),
        ConfigCommand::Delete(args) => delete(&args),
    }
}

/// `config write`: one entry from a file or standard input.
fn write(args: &WriteArgs) -> Result<i32, String> {
    let file = args.file.as_deref().ok_or(
        "Must provide exactly one positional argument to specify the config entry to write",
    )?;
    let entry = read_entry(file)?;
    let kind = field(&entry, "kind").unwrap_or("").to_string();
    let name = match kind.as_str() {
        "mesh" => "mesh".to_string(),
        "proxy-defaults" => field(&entry, "name").unwrap_or("global").to_string(),
        _ => field(&entry, "name").unwrap_or("").to_string(),
    };
    let client = args.http.client()?;
    let mut path = "/v1/config".to_string();
    if args.cas {
        path.push_str(&format!("?cas={}", args.modify_index));
    }
    let response = client
        .ok("PUT", &path, Some(entry.to_string().as_bytes()))
        .map_err(|e| format!("Error writing config entry {kind}/{name}: {e}"))?;
    if response.body_text() == "false" {
        println!("Config entry not updated: {kind}/{name}");
        return Ok(1);
    }
    println!("Config entry written: {kind}/{name}");
    Ok(0)
}

/// `config read`: one entry as indented JSON.
fn read(args: &ReadArgs) -> Result<i32, String> {
    let kind = require(&args.kind, "kind")?;
    let name = require(&args.name, "name")?;
    let client = args.http.client()?;
    let response = client
        .ok(
            "GET",
            &format!("/v1/config/{}/{}", encode_path(kind), encode_path(name)),
            None,
        )
        .map_err(|e| format!("Error reading config entry {kind}/{name}: {e}"))?;
    let value: Value = serde_json::from_slice(&response.body)
        .map_err(|e| format!("Error decoding config entry: {e}"))?;
    let mut out = Vec::new();
    crate::consul::json::write_serde(&mut out, &value, true);
    print!("{}", String::from_utf8_lossy(&out));
    Ok(0)
}

/// `config list`: the names of a kind's entries.
fn list(args: &ListArgs) -> Result<i32, String> {
    let kind = require(&args.kind, "kind")?;
    let client = args.http.client()?;
    let response = client
        .ok("GET", &format!("/v1/config/{}", encode_path(kind)), None)
        .map_err(|e| format!("Error listing config entries for kind {kind:?}: {e}"))?;
    let entries: Vec<Value> = serde_json::from_slice(&response.body)
        .map_err(|e| format!("Error decoding config entries: {e}"))?;
    for entry in &entries {
        println!(
            "{}",
            field(entry, "name").unwrap_or(if kind == "mesh" { "mesh" } else { "" })
        );
    }
    Ok(0)
}

/// `config delete`.
fn delete(args: &DeleteArgs) -> Result<i32, String> {
    let (kind, name) = match &args.filename {
        Some(file) => {
            if args.kind.is_some() || args.name.is_some() {
                return Err("filename can't be used with kind or name".to_string());
            }
            let entry = read_entry(file)?;
            let kind = field(&entry, "kind").unwrap_or("").to_string();
            let name = field(&entry, "name").unwrap_or("").to_string();
            (kind, name)
        }
        None => (
            require(&args.kind, "kind")?.to_string(),
            require(&args.name, "name")?.to_string(),
        ),
    };
    if args.modify_index != 0 && !args.cas {
        return Err("Cannot specify -modify-index without -cas".to_string());
    }
    let client = args.http.client()?;
    let mut path = format!("/v1/config/{}/{}", encode_path(&kind), encode_path(&name));
    if args.cas {
        path.push_str(&format!(
            "?cas={}",
            encode_query_value(&args.modify_index.to_string())
        ));
    }
    let response = client
        .ok("DELETE", &path, None)
        .map_err(|e| format!("Error deleting config entry {kind}/{name}: {e}"))?;
    if args.cas && response.body_text() == "false" {
        println!("Config entry not deleted: {kind}/{name}");
        return Ok(1);
    }
    println!("Config entry deleted: {kind}/{name}");
    Ok(0)
}
