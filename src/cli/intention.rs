//! `praetor intention create|check|get|delete|match`, as `consul intention` manages
//! intentions: `create` through the legacy API (with `-replace` updating an existing one),
//! `get` and `delete` by source and destination or by ID, `check` exiting 0 when allowed
//! and 2 when denied, `match` listing what applies to a source or destination.

use super::client::encode_query_value;
use super::HttpFlags;
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

#[derive(Subcommand, Debug)]
pub enum IntentionCommand {
    /// Creates an intention from SRC to DST (allow unless -deny).
    Create(CreateArgs),
    /// Checks whether SRC may connect to DST: exit 0 when allowed, 2 when denied.
    Check(PairArgs),
    /// Shows one intention, by SRC DST or by ID.
    Get(GetArgs),
    /// Deletes one intention, by SRC DST or by ID.
    Delete(GetArgs),
    /// Lists the intentions that apply to a source or destination.
    Match(MatchArgs),
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Allow the connection (the default).
    #[arg(long)]
    pub allow: bool,
    /// Deny the connection.
    #[arg(long)]
    pub deny: bool,
    /// Replace an existing intention between the same source and destination.
    #[arg(long)]
    pub replace: bool,
    /// Metadata `key=value`, repeatable.
    #[arg(long = "meta")]
    pub meta: Vec<String>,
    /// Read intentions from the files given instead of SRC DST.
    #[arg(long)]
    pub file: bool,
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct PairArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    pub source: String,
    pub destination: String,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct MatchArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Match intentions whose source is NAME.
    #[arg(long)]
    pub source: bool,
    /// Match intentions whose destination is NAME (the default).
    #[arg(long)]
    pub destination: bool,
    pub name: String,
}

/// Consul's one-line form of an intention: `web => db (allow)`.
fn one_line(ixn: &Value) -> String {
    let action = ixn["Action"]
        .as_str()
        .filter(|a| !a.is_empty())
        .unwrap_or("L7");
    format!(
        "{} => {} ({action})",
        ixn["SourceName"].as_str().unwrap_or_default(),
        ixn["DestinationName"].as_str().unwrap_or_default()
    )
}

fn pair_query(source: &str, destination: &str) -> String {
    format!(
        "source={}&destination={}",
        encode_query_value(source),
        encode_query_value(destination)
    )
}

fn intentions_from(args: &CreateArgs) -> Result<Vec<Value>, String> {
    let action = if args.deny { "deny" } else { "allow" };
    if args.allow && args.deny {
        return Err("Cannot specify both -allow and -deny".to_string());
    }
    let mut meta = Map::new();
    for pair in &args.meta {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("Error parsing -meta {pair:?}: expected key=value"))?;
        meta.insert(k.to_string(), Value::String(v.to_string()));
    }
    if args.file {
        let mut all = Vec::new();
        for path in &args.args {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("Error reading {path:?}: {e}"))?;
            let value: Value =
                serde_json::from_str(&text).map_err(|e| format!("Error decoding {path:?}: {e}"))?;
            all.push(value);
        }
        return Ok(all);
    }
    let [source, destination] = &args.args[..] else {
        return Err("Must specify two arguments: source and destination".to_string());
    };
    Ok(vec![json!({
        "SourceName": source,
        "DestinationName": destination,
        "SourceType": "consul",
        "Action": action,
        "Meta": meta,
    })])
}

pub fn run(command: IntentionCommand) -> Result<i32, String> {
    match command {
        IntentionCommand::Create(args) => {
            let intentions = intentions_from(&args)?;
            let client = args.http.client()?;
            for ixn in intentions {
                let source = ixn["SourceName"].as_str().unwrap_or_default().to_string();
                let destination = ixn["DestinationName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if args.replace {
                    let existing = client.request(
                        "GET",
                        &format!(
                            "/v1/connect/intentions/exact?{}",
                            pair_query(&source, &destination)
                        ),
                        None,
                    )?;
                    if existing.status == 200 {
                        let old: Value =
                            serde_json::from_slice(&existing.body).map_err(|e| e.to_string())?;
                        let id = old["ID"].as_str().unwrap_or_default();
                        client
                            .ok("PUT", &format!("/v1/connect/intentions/{id}"), Some(ixn.to_string().as_bytes()))
                            .map_err(|e| {
                                format!("Error replacing intention with source {source:?} and destination {destination:?}: {e}")
                            })?;
                        println!("Created: {}", one_line(&ixn));
                        continue;
                    }
                }
                client
                    .ok(
                        "POST",
                        "/v1/connect/intentions",
                        Some(ixn.to_string().as_bytes()),
                    )
                    .map_err(|e| format!("Error creating intention {:?}: {e}", one_line(&ixn)))?;
                println!("Created: {}", one_line(&ixn));
            }
            Ok(0)
        }
        IntentionCommand::Check(args) => {
            let client = args.http.client()?;
            let response = client
                .ok(
                    "GET",
                    &format!(
                        "/v1/connect/intentions/check?{}",
                        pair_query(&args.source, &args.destination)
                    ),
                    None,
                )
                .map_err(|e| format!("Error checking the connection: {e}"))?;
            let value: Value = serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
            if value["Allowed"].as_bool().unwrap_or(false) {
                println!("Allowed");
                Ok(0)
            } else {
                println!("Denied");
                Ok(2)
            }
        }
        IntentionCommand::Get(args) => {
            let client = args.http.client()?;
            let path = match &args.args[..] {
                [id] => format!("/v1/connect/intentions/{id}"),
                [source, destination] => {
                    format!(
                        "/v1/connect/intentions/exact?{}",
                        pair_query(source, destination)
                    )
                }
                _ => return Err("command requires exactly 1 or 2 arguments".to_string()),
            };
            let response = client
                .ok("GET", &path, None)
                .map_err(|e| format!("Error reading the intention: {e}"))?;
            let ixn: Value = serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
            let mut rows: Vec<(String, String)> = vec![
                (
                    "Source:".into(),
                    ixn["SourceName"].as_str().unwrap_or_default().into(),
                ),
                (
                    "Destination:".into(),
                    ixn["DestinationName"].as_str().unwrap_or_default().into(),
                ),
                (
                    "Action:".into(),
                    ixn["Action"].as_str().unwrap_or_default().into(),
                ),
                ("ID:".into(), ixn["ID"].as_str().unwrap_or_default().into()),
            ];
            if let Some(description) = ixn["Description"].as_str().filter(|d| !d.is_empty()) {
                rows.push(("Description:".into(), description.into()));
            }
            if let Some(meta) = ixn["Meta"].as_object() {
                for (k, v) in meta {
                    rows.push((format!("Meta[{k}]:"), v.as_str().unwrap_or_default().into()));
                }
            }
            rows.push((
                "Created At:".into(),
                ixn["CreatedAt"].as_str().unwrap_or_default().into(),
            ));
            let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
            for (k, v) in rows {
                println!("{k:width$}  {v}");
            }
            Ok(0)
        }
        IntentionCommand::Delete(args) => {
            let client = args.http.client()?;
            let path = match &args.args[..] {
                [id] => format!("/v1/connect/intentions/{id}"),
                [source, destination] => {
                    format!(
                        "/v1/connect/intentions/exact?{}",
                        pair_query(source, destination)
                    )
                }
                _ => return Err("command requires exactly 1 or 2 arguments".to_string()),
            };
            client
                .ok("DELETE", &path, None)
                .map_err(|e| format!("Error deleting the intention: {e}"))?;
            println!("Intention deleted.");
            Ok(0)
        }
        IntentionCommand::Match(args) => {
            if args.source && args.destination {
                return Err("Only one of -source or -destination may be specified".to_string());
            }
            let by = if args.source { "source" } else { "destination" };
            let client = args.http.client()?;
            let response = client
                .ok(
                    "GET",
                    &format!(
                        "/v1/connect/intentions/match?by={by}&name={}",
                        encode_query_value(&args.name)
                    ),
                    None,
                )
                .map_err(|e| format!("Error matching the intention: {e}"))?;
            let value: Value = serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
            for ixn in value[&args.name]
                .as_array()
                .map(|v| &v[..])
                .unwrap_or_default()
            {
                println!("{}", one_line(ixn));
            }
            Ok(0)
        }
    }
}
