//! `praetor intention create|check|get|delete|list|match`, as `consul intention` manages
//! intentions: `create` through the legacy API (with `-replace` updating an existing one),
//! `get` and `delete` by source and destination or by ID, `check` exiting 0 when allowed,
//! 1 when denied and 2 on any error (its refused command lines too, as Consul's does),
//! `list` printing Consul's table, `match` listing what applies to a source or destination.

use super::client::encode_query_value;
use super::HttpFlags;
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

#[derive(Subcommand, Debug)]
pub enum IntentionCommand {
    /// Creates an intention from SRC to DST (allow unless -deny).
    Create(CreateArgs),
    /// Checks whether SRC may connect to DST: exit 0 when allowed, 1 when denied, 2 on error.
    Check(PairArgs),
    /// Shows one intention, by SRC DST or by ID.
    Get(GetArgs),
    /// Deletes one intention, by SRC DST or by ID.
    Delete(GetArgs),
    /// Lists every intention: ID, source, action, destination and precedence.
    List(ListArgs),
    /// Lists the intentions that apply to a source or destination.
    Match(MatchArgs),
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub http: HttpFlags,
}

/// Exit code of `intention check` when the connection is denied.
const CHECK_DENIED_EXIT_CODE: i32 = 1;
/// Exit code of `intention check` on any error, as Consul's returns it.
pub const CHECK_ERROR_EXIT_CODE: i32 = 2;
/// Exit code of `intention list` when there is no intention.
const LIST_EMPTY_EXIT_CODE: i32 = 2;

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
    #[arg(value_name = "SRC")]
    pub source: Option<String>,
    #[arg(value_name = "DST")]
    pub destination: Option<String>,
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
    #[arg(value_name = "SRC_OR_DST")]
    pub name: Option<String>,
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

/// Whether SRC may connect to DST, or why that could not be asked.
fn check(args: &PairArgs) -> Result<bool, String> {
    let (Some(source), Some(destination)) = (&args.source, &args.destination) else {
        return Err("Error: command requires exactly two arguments: src and dst".to_string());
    };
    let client = args
        .http
        .client()
        .map_err(|e| format!("Error connecting to Consul agent: {e}"))?;
    let response = client
        .ok(
            "GET",
            &format!(
                "/v1/connect/intentions/check?{}",
                pair_query(source, destination)
            ),
            None,
        )
        .map_err(|e| format!("Error checking the connection: {e}"))?;
    let value: Value = serde_json::from_slice(&response.body)
        .map_err(|e| format!("Error checking the connection: {e}"))?;
    Ok(value["Allowed"].as_bool().unwrap_or(false))
}

/// `intention list`: Consul's columns, or "There are no intentions." and exit 2.
fn list(args: &ListArgs) -> Result<i32, String> {
    let client = args.http.client()?;
    let response = client
        .ok("GET", "/v1/connect/intentions", None)
        .map_err(|e| format!("Failed to retrieve the intentions list: {e}"))?;
    let intentions: Vec<Value> = serde_json::from_slice(&response.body)
        .map_err(|e| format!("Failed to retrieve the intentions list: {e}"))?;
    if intentions.is_empty() {
        eprintln!("There are no intentions.");
        return Ok(LIST_EMPTY_EXIT_CODE);
    }
    let mut rows = vec![["ID", "Source", "Action", "Destination", "Precedence"]
        .map(String::from)
        .to_vec()];
    for ixn in &intentions {
        let text = |key: &str| ixn[key].as_str().unwrap_or_default().to_string();
        rows.push(vec![
            text("ID"),
            text("SourceName"),
            text("Action"),
            text("DestinationName"),
            ixn["Precedence"].as_i64().unwrap_or(0).to_string(),
        ]);
    }
    print!("{}", super::catalog::columns(&rows));
    Ok(0)
}

pub fn run(command: IntentionCommand) -> Result<i32, String> {
    match command {
        IntentionCommand::Create(args) => create(&args),
        IntentionCommand::Check(args) => Ok(check_exit_code(check(&args))),
        IntentionCommand::List(args) => list(&args),
        IntentionCommand::Get(args) => get(&args),
        IntentionCommand::Delete(args) => delete(&args),
        IntentionCommand::Match(args) => matches(&args),
    }
}

/// `intention check`'s answer as Consul's exit code, printing what it found.
fn check_exit_code(result: Result<bool, String>) -> i32 {
    match result {
        Ok(true) => {
            println!("Allowed");
            0
        }
        Ok(false) => {
            println!("Denied");
            CHECK_DENIED_EXIT_CODE
        }
        Err(message) => {
            eprintln!("{message}");
            CHECK_ERROR_EXIT_CODE
        }
    }
}

/// The path of one intention, by ID or by its source and destination (`get`, `delete`).
fn intention_path(args: &[String]) -> Result<String, String> {
    match args {
        [id] => Ok(format!("/v1/connect/intentions/{id}")),
        [source, destination] => Ok(format!(
            "/v1/connect/intentions/exact?{}",
            pair_query(source, destination)
        )),
        _ => Err("command requires exactly 1 or 2 arguments".to_string()),
    }
}

/// `intention create`: each intention, replacing an existing one of the pair with
/// `-replace`.
fn create(args: &CreateArgs) -> Result<i32, String> {
    let intentions = intentions_from(args)?;
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

/// `intention get`: one intention in Consul's label layout.
fn get(args: &GetArgs) -> Result<i32, String> {
    let client = args.http.client()?;
    let path = intention_path(&args.args)?;
    let response = client
        .request("GET", &path, None)
        .map_err(|e| format!("Error reading the intention: {e}"))?;
    // Consul's client reads a 404 as "no such intention".
    if response.status == 404 {
        return Err(match &args.args[..] {
            [id] => format!("Intention not found with ID {id:?}"),
            [source, destination] => format!(
                "Intention not found with source {source:?} and destination {destination:?}"
            ),
            _ => "Intention not found".to_string(),
        });
    }
    if !(200..300).contains(&response.status) {
        return Err(format!(
            "Error reading the intention: Unexpected response code: {} ({})",
            response.status,
            response.body_text()
        ));
    }
    let ixn: Value = serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
    let text = |key: &str| ixn[key].as_str().unwrap_or_default().to_string();
    let mut rows: Vec<(String, String)> = vec![
        ("Source:".into(), text("SourceName")),
        ("Destination:".into(), text("DestinationName")),
    ];
    for (label, key) in [("Action:", "Action"), ("ID:", "ID")] {
        if !text(key).is_empty() {
            rows.push((label.into(), text(key)));
        }
    }
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

/// `intention delete`.
fn delete(args: &GetArgs) -> Result<i32, String> {
    let client = args.http.client()?;
    let path = intention_path(&args.args)?;
    client
        .ok("DELETE", &path, None)
        .map_err(|e| format!("Error deleting the intention: {e}"))?;
    println!("Intention deleted.");
    Ok(0)
}

/// `intention match`: the intentions that apply to a source or a destination.
fn matches(args: &MatchArgs) -> Result<i32, String> {
    let Some(name) = &args.name else {
        return Err("Error: command requires exactly one argument: src or dst".to_string());
    };
    if args.source && args.destination {
        return Err("Error: only one of -source or -destination may be specified".to_string());
    }
    let by = if args.source { "source" } else { "destination" };
    let client = args.http.client()?;
    let response = client
        .ok(
            "GET",
            &format!(
                "/v1/connect/intentions/match?by={by}&name={}",
                encode_query_value(name)
            ),
            None,
        )
        .map_err(|e| format!("Error matching the connection: {e}"))?;
    let value: Value = serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
    for ixn in value[name].as_array().map(|v| &v[..]).unwrap_or_default() {
        println!("{}", one_line(ixn));
    }
    Ok(0)
}
