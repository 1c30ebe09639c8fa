//! `praetor kv get|put|delete|export|import`, with Consul's flags and output.

use super::client::encode_path;
use super::HttpFlags;
use base64::Engine;
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use std::io::Read;

#[derive(Subcommand, Debug)]
pub enum KvCommand {
    /// Reads a key, a prefix (-recurse), or key names (-keys).
    Get(GetArgs),
    /// Writes a key (DATA, `-` for stdin, `@file` for a file).
    Put(PutArgs),
    /// Deletes a key or a prefix (-recurse).
    Delete(DeleteArgs),
    /// Prints a prefix as JSON suitable for `kv import`.
    Export(ExportArgs),
    /// Writes entries from `kv export` JSON (DATA, `-` for stdin, `@file`).
    Import(ImportArgs),
}

#[derive(Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Read every key under the given prefix, as `key:value` lines.
    #[arg(long)]
    pub recurse: bool,
    /// List the key names under the given prefix instead of values.
    #[arg(long)]
    pub keys: bool,
    /// With -keys: list names only up to this separator (default `/`).
    #[arg(long)]
    pub separator: Option<String>,
    /// Show the key's metadata (indexes, flags, session) with its value.
    #[arg(long)]
    pub detailed: bool,
    /// Print values base64-encoded.
    #[arg(long)]
    pub base64: bool,
    pub key: Option<String>,
}

#[derive(Args, Debug)]
pub struct PutArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Check-and-set: write only if the key is still at -modify-index.
    #[arg(long)]
    pub cas: bool,
    /// The key's ModifyIndex that -cas compares with.
    #[arg(long = "modify-index")]
    pub modify_index: Option<u64>,
    /// An unsigned 64-bit number stored with the key for the application's use.
    #[arg(long)]
    pub flags: Option<u64>,
    /// The data is base64-encoded: decode it before storing.
    #[arg(long)]
    pub base64: bool,
    /// Take the key's lock for -session while writing.
    #[arg(long)]
    pub acquire: bool,
    /// Give up -session's lock on the key while writing.
    #[arg(long)]
    pub release: bool,
    /// The session -acquire and -release act for.
    #[arg(long)]
    pub session: Option<String>,
    pub key: Option<String>,
    pub data: Option<String>,
}

#[derive(Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Delete every key under the given prefix.
    #[arg(long)]
    pub recurse: bool,
    /// Check-and-set: delete only if the key is still at -modify-index.
    #[arg(long)]
    pub cas: bool,
    /// The key's ModifyIndex that -cas compares with.
    #[arg(long = "modify-index")]
    pub modify_index: Option<u64>,
    pub key: Option<String>,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    pub prefix: Option<String>,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Prepended to every imported key.
    #[arg(long)]
    pub prefix: Option<String>,
    pub data: Option<String>,
}

/// Consul's `DirEntry` as the HTTP API returns it.
#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase")]
struct DirEntry {
    key: String,
    #[serde(default)]
    flags: u64,
    value: Option<String>,
    #[serde(default)]
    lock_index: u64,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    create_index: u64,
    #[serde(default)]
    modify_index: u64,
}

/// The format of `kv export` / `kv import`.
#[derive(Serialize, Deserialize, Debug)]
struct ExportedEntry {
    key: String,
    flags: u64,
    value: String,
}

pub fn run(command: KvCommand) -> Result<i32, String> {
    match command {
        KvCommand::Get(args) => get(args),
        KvCommand::Put(args) => put(args),
        KvCommand::Delete(args) => delete(args),
        KvCommand::Export(args) => export(args),
        KvCommand::Import(args) => import(args),
    }
}

fn decode_value(entry: &DirEntry) -> Result<Vec<u8>, String> {
    match &entry.value {
        None => Ok(Vec::new()),
        Some(text) => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| format!("Error! Invalid value for {}: {e}", entry.key)),
    }
}

fn value_text(entry: &DirEntry, as_base64: bool) -> Result<String, String> {
    if as_base64 {
        return Ok(entry.value.clone().unwrap_or_default());
    }
    Ok(String::from_utf8_lossy(&decode_value(entry)?).into_owned())
}

fn print_detailed(entry: &DirEntry, as_base64: bool) -> Result<(), String> {
    let session = entry
        .session
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "-".to_string());
    for (name, value) in [
        ("CreateIndex", entry.create_index.to_string()),
        ("Flags", entry.flags.to_string()),
        ("Key", entry.key.clone()),
        ("LockIndex", entry.lock_index.to_string()),
        ("ModifyIndex", entry.modify_index.to_string()),
        ("Session", session),
        ("Value", value_text(entry, as_base64)?),
    ] {
        println!("{name:<16} {value}");
    }
    Ok(())
}

fn get(args: GetArgs) -> Result<i32, String> {
    let client = args.http.client()?;
    // Keys cannot start with `/`; Consul's CLI drops one for those who type it.
    let key = args.key.clone().unwrap_or_default();
    let key = key.strip_prefix('/').unwrap_or(&key).to_string();
    if args.keys {
        let separator = args.separator.clone().unwrap_or_else(|| "/".to_string());
        let response = client.request(
            "GET",
            &format!(
                "/v1/kv/{}?keys&separator={}",
                encode_path(&key),
                super::client::encode_query_value(&separator)
            ),
            None,
        )?;
        if response.status == 404 {
            return Ok(0);
        }
        if response.status != 200 {
            return Err(format!(
                "Error querying Consul agent: {} ({})",
                response.status,
                response.body_text()
            ));
        }
        let keys: Vec<String> = serde_json::from_slice(&response.body)
            .map_err(|e| format!("Error! Malformed response: {e}"))?;
        for k in keys {
            println!("{k}");
        }
        return Ok(0);
    }
    if args.recurse {
        let response = client.request(
            "GET",
            &format!("/v1/kv/{}?recurse", encode_path(&key)),
            None,
        )?;
        if response.status == 404 {
            return Ok(0);
        }
        if response.status != 200 {
            return Err(format!(
                "Error querying Consul agent: {} ({})",
                response.status,
                response.body_text()
            ));
        }
        let entries: Vec<DirEntry> = serde_json::from_slice(&response.body)
            .map_err(|e| format!("Error! Malformed response: {e}"))?;
        for (i, entry) in entries.iter().enumerate() {
            if args.detailed {
                if i > 0 {
                    println!();
                }
                print_detailed(entry, args.base64)?;
            } else {
                println!("{}:{}", entry.key, value_text(entry, args.base64)?);
            }
        }
        return Ok(0);
    }
    if key.is_empty() {
        return Err("Error! Missing KEY argument".to_string());
    }
    let response = client.request("GET", &format!("/v1/kv/{}", encode_path(&key)), None)?;
    if response.status == 404 {
        return Err(format!("Error! No key exists at: {key}"));
    }
    if response.status != 200 {
        return Err(format!(
            "Error querying Consul agent: {} ({})",
            response.status,
            response.body_text()
        ));
    }
    let entries: Vec<DirEntry> = serde_json::from_slice(&response.body)
        .map_err(|e| format!("Error! Malformed response: {e}"))?;
    let entry = entries
        .first()
        .ok_or_else(|| format!("Error! No key exists at: {key}"))?;
    if args.detailed {
        print_detailed(entry, args.base64)?;
    } else if args.base64 {
        println!("{}", entry.value.clone().unwrap_or_default());
    } else {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        out.write_all(&decode_value(entry)?)
            .and_then(|_| out.write_all(b"\n"))
            .map_err(|e| e.to_string())?;
    }
    Ok(0)
}

/// Reads DATA as Consul does: `-` is stdin, `@path` is a file, anything else is literal.
pub(crate) fn read_data(data: Option<&str>) -> Result<Vec<u8>, String> {
    match data {
        None => Ok(Vec::new()),
        Some("-") => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| format!("Error! Failed to read stdin: {e}"))?;
            Ok(buf)
        }
        Some(text) if text.starts_with('@') => std::fs::read(&text[1..])
            .map_err(|e| format!("Error! Failed to read file {}: {e}", &text[1..])),
        Some(text) => Ok(text.as_bytes().to_vec()),
    }
}

fn put(args: PutArgs) -> Result<i32, String> {
    let key = args.key.as_deref().ok_or("Error! Missing KEY argument")?;
    let client = args.http.client()?;
    let mut value = read_data(args.data.as_deref())?;
    if args.base64 {
        value = base64::engine::general_purpose::STANDARD
            .decode(String::from_utf8_lossy(&value).trim())
            .map_err(|e| format!("Error! Cannot base 64 decode data: {e}"))?;
    }
    let mut query = Vec::new();
    if let Some(flags) = args.flags {
        query.push(format!("flags={flags}"));
    }
    // Consul checks the session before the index, and refuses -cas with index 0.
    if args.acquire || args.release {
        let session = args
            .session
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or("Error! Missing -session (required with -acquire and -release)")?;
        query.push(format!(
            "{}={session}",
            if args.acquire { "acquire" } else { "release" }
        ));
    }
    if args.cas {
        let index = args
            .modify_index
            .filter(|i| *i != 0)
            .ok_or("Must specify -modify-index with -cas!")?;
        query.push(format!("cas={index}"));
    }
    let target = if query.is_empty() {
        format!("/v1/kv/{}", encode_path(key))
    } else {
        format!("/v1/kv/{}?{}", encode_path(key), query.join("&"))
    };
    let response = client.request("PUT", &target, Some(&value))?;
    if response.status != 200 {
        return Err(format!(
            "Error! Failed writing data: {} ({})",
            response.status,
            response.body_text()
        ));
    }
    if response.body_text() != "true" {
        if args.cas {
            return Err(format!("Error! Did not write to {}: CAS failed", key));
        }
        if args.acquire {
            return Err(format!(
                "Error! Did not write to {}: lock acquisition failed",
                key
            ));
        }
        if args.release {
            return Err(format!(
                "Error! Did not write to {}: lock release failed",
                key
            ));
        }
        return Err(format!("Error! Failed writing data to {}", key));
    }
    if args.acquire {
        println!("Success! Lock acquired on: {}", key);
    } else if args.release {
        println!("Success! Lock released on: {}", key);
    } else {
        println!("Success! Data written to: {}", key);
    }
    Ok(0)
}

fn delete(args: DeleteArgs) -> Result<i32, String> {
    let client = args.http.client()?;
    let key = args.key.clone().unwrap_or_default();
    if key.is_empty() && !args.recurse {
        return Err("Error! Missing KEY argument".to_string());
    }
    if args.recurse && args.cas {
        return Err("Cannot specify both -cas and -recurse!".to_string());
    }
    let target = if args.recurse {
        format!("/v1/kv/{}?recurse", encode_path(&key))
    } else if args.cas {
        let index = args
            .modify_index
            .ok_or("Error! Must specify -modify-index with -cas!")?;
        format!("/v1/kv/{}?cas={index}", encode_path(&key))
    } else {
        format!("/v1/kv/{}", encode_path(&key))
    };
    let response = client.request("DELETE", &target, None)?;
    if response.status != 200 {
        return Err(format!(
            "Error! Failed deleting data: {} ({})",
            response.status,
            response.body_text()
        ));
    }
    if response.body_text() != "true" {
        return Err(format!("Error! Did not delete key {key}: CAS failed"));
    }
    if args.recurse {
        println!("Success! Deleted keys with prefix: {key}");
    } else {
        println!("Success! Deleted key: {key}");
    }
    Ok(0)
}

fn export(args: ExportArgs) -> Result<i32, String> {
    let client = args.http.client()?;
    let prefix = args.prefix.clone().unwrap_or_default();
    let response = client.request(
        "GET",
        &format!("/v1/kv/{}?recurse", encode_path(&prefix)),
        None,
    )?;
    let entries: Vec<DirEntry> = match response.status {
        404 => Vec::new(),
        200 => serde_json::from_slice(&response.body)
            .map_err(|e| format!("Error! Malformed response: {e}"))?,
        status => {
            return Err(format!(
                "Error querying Consul agent: {status} ({})",
                response.body_text()
            ))
        }
    };
    let exported: Vec<ExportedEntry> = entries
        .into_iter()
        .map(|e| ExportedEntry {
            key: e.key,
            flags: e.flags,
            value: e.value.unwrap_or_default(),
        })
        .collect();
    // Consul indents its export with tabs.
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"\t");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(&exported, &mut serializer).map_err(|e| e.to_string())?;
    println!("{}", String::from_utf8_lossy(&out));
    Ok(0)
}

fn import(args: ImportArgs) -> Result<i32, String> {
    let client = args.http.client()?;
    let data = read_data(Some(args.data.as_deref().unwrap_or("-")))?;
    let entries: Vec<ExportedEntry> =
        serde_json::from_slice(&data).map_err(|e| format!("Error! Cannot unmarshal data: {e}"))?;
    for entry in entries {
        let value = base64::engine::general_purpose::STANDARD
            .decode(&entry.value)
            .map_err(|e| format!("Error! Cannot base 64 decode value for {}: {e}", entry.key))?;
        let key = format!("{}{}", args.prefix.clone().unwrap_or_default(), entry.key);
        let response = client.request(
            "PUT",
            &format!("/v1/kv/{}?flags={}", encode_path(&key), entry.flags),
            Some(&value),
        )?;
        if response.status != 200 || response.body_text() != "true" {
            return Err(format!(
                "Error! Failed to write {key}: {} ({})",
                response.status,
                response.body_text()
            ));
        }
        println!("Imported: {key}");
    }
    Ok(0)
}
