//! `praetor services register|deregister`: register services with the local agent from
//! flags or from definition files (JSON or HCL, `service`/`services` as in config files),
//! as `consul services` does.

use super::client::encode_path;
use super::HttpFlags;
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum ServicesCommand {
    /// Registers services from flags or definition files.
    Register(RegisterArgs),
    /// Deregisters services by ID or by definition files.
    Deregister(DeregisterArgs),
}

#[derive(Args, Debug)]
pub struct RegisterArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// The service's name (instead of definition files).
    #[arg(long)]
    pub name: Option<String>,
    /// The instance's ID (default: the name).
    #[arg(long)]
    pub id: Option<String>,
    /// The instance's address (default: the node's).
    #[arg(long)]
    pub address: Option<String>,
    /// The instance's port.
    #[arg(long)]
    pub port: Option<u16>,
    /// A tag, repeatable.
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// Metadata `key=value`, repeatable.
    #[arg(long = "meta")]
    pub meta: Vec<String>,
    /// Service definition files.
    pub files: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct DeregisterArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// ID of the service instance to deregister (instead of definition files).
    #[arg(long)]
    pub id: Option<String>,
    /// Service definition files whose services to deregister.
    pub files: Vec<PathBuf>,
}

/// The service definitions in a file: its `service` and `services` entries.
fn definitions_in(path: &PathBuf) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("Error reading {}: {e}", path.display()))?;
    let hcl = path.extension().is_some_and(|e| e == "hcl");
    let document = crate::config::parse_document(&text, hcl, &path.display().to_string())?;
    let mut merged = Map::new();
    crate::config::merge(&mut merged, document);
    match merged.get("services") {
        Some(Value::Array(list)) if !list.is_empty() => Ok(list.clone()),
        _ => Err(format!("{}: no service definitions found", path.display())),
    }
}

fn id_of(definition: &Value) -> String {
    let obj = definition.as_object();
    let get = |key: &str| {
        obj.and_then(|o| o.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)))
            .and_then(|(_, v)| v.as_str())
            .unwrap_or("")
            .to_string()
    };
    let id = get("id");
    if id.is_empty() {
        get("name")
    } else {
        id
    }
}

pub fn run(command: ServicesCommand) -> Result<i32, String> {
    match command {
        ServicesCommand::Register(args) => {
            let definitions = if args.files.is_empty() {
                let Some(name) = &args.name else {
                    return Err(
                        "Service name must be specified with -name or a definition file"
                            .to_string(),
                    );
                };
                let mut meta = Map::new();
                for pair in &args.meta {
                    let (k, v) = pair.split_once('=').ok_or_else(|| {
                        format!("Error parsing -meta {pair:?}: expected key=value")
                    })?;
                    meta.insert(k.to_string(), Value::String(v.to_string()));
                }
                let mut definition = json!({"Name": name, "Tags": args.tags, "Meta": meta});
                if let Some(id) = &args.id {
                    definition["ID"] = json!(id);
                }
                if let Some(address) = &args.address {
                    definition["Address"] = json!(address);
                }
                if let Some(port) = args.port {
                    definition["Port"] = json!(port);
                }
                vec![definition]
            } else {
                if args.name.is_some() || args.id.is_some() {
                    return Err("Flags and definition files cannot be combined".to_string());
                }
                let mut all = Vec::new();
                for file in &args.files {
                    all.extend(definitions_in(file)?);
                }
                all
            };
            let mut definitions = definitions;
            for definition in &mut definitions {
                // A file's definition is written as a config file is; the API takes its
                // own names, as Consul's CLI translates them.
                crate::consul::bodies::to_api_names(
                    definition,
                    &crate::consul::bodies::SERVICE_DEFINITION,
                );
            }
            let client = args.http.client()?;
            for definition in &definitions {
                client
                    .ok(
                        "PUT",
                        "/v1/agent/service/register",
                        Some(definition.to_string().as_bytes()),
                    )
                    .map_err(|e| {
                        format!("Error registering service {:?}: {e}", id_of(definition))
                    })?;
                println!("Registered service: {}", id_of(definition));
            }
            Ok(0)
        }
        ServicesCommand::Deregister(args) => {
            let ids: Vec<String> = match (&args.id, args.files.is_empty()) {
                (Some(id), true) => vec![id.clone()],
                (None, false) => {
                    let mut ids = Vec::new();
                    for file in &args.files {
                        ids.extend(definitions_in(file)?.iter().map(id_of));
                    }
                    ids
                }
                (Some(_), false) => {
                    return Err("Flags and definition files cannot be combined".to_string())
                }
                (None, true) => {
                    return Err("Either -id or a definition file must be given".to_string())
                }
            };
            let client = args.http.client()?;
            for id in ids {
                client
                    .ok(
                        "PUT",
                        &format!("/v1/agent/service/deregister/{}", encode_path(&id)),
                        Some(b""),
                    )
                    .map_err(|e| format!("Error deregistering service {id:?}: {e}"))?;
                println!("Deregistered service: {id}");
            }
            Ok(0)
        }
    }
}
