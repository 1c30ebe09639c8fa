//! `praetor peering generate-token|establish|list|read|delete`, as `consul peering` manages
//! cluster peerings over `/v1/peering/*`: the same flags (`-name`, `-peering-token`,
//! repeatable `-meta key=value`, comma-separated `-server-external-addresses`, `-format
//! pretty|json`), messages and exit codes (0, or 1 with one line on error).

use super::catalog::columns;
use super::client::encode_path;
use super::HttpFlags;
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

#[derive(Subcommand, Debug)]
pub enum PeeringCommand {
    /// Generates a peering token for another cluster to establish a peering with this one.
    GenerateToken(GenerateTokenArgs),
    /// Establishes a peering with the cluster that generated -peering-token.
    Establish(EstablishArgs),
    /// Lists peering connections.
    List(ListArgs),
    /// Reads the peering connection named -name.
    Read(NameArgs),
    /// Deletes the peering connection named -name.
    Delete(DeleteArgs),
}

#[derive(Args, Debug)]
pub struct GenerateTokenArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// (Required) The local name assigned to the peer cluster.
    #[arg(long)]
    pub name: Option<String>,
    /// Metadata to associate with the peering, formatted as key=value. Repeatable.
    #[arg(long = "meta")]
    pub meta: Vec<String>,
    /// A list of addresses to put into the generated token, formatted as a comma-separated
    /// list (load balancers or external IPs that reach this cluster's servers).
    #[arg(long = "server-external-addresses")]
    pub server_external_addresses: Option<String>,
    /// Output format {pretty|json} (default: pretty).
    #[arg(long, default_value = "pretty")]
    pub format: String,
}

#[derive(Args, Debug)]
pub struct EstablishArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// (Required) The local name assigned to the peer cluster.
    #[arg(long)]
    pub name: Option<String>,
    /// (Required) The peering token from the accepting cluster.
    #[arg(long = "peering-token")]
    pub peering_token: Option<String>,
    /// Metadata to associate with the peering, formatted as key=value. Repeatable.
    #[arg(long = "meta")]
    pub meta: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Output format {pretty|json} (default: pretty).
    #[arg(long, default_value = "pretty")]
    pub format: String,
}

#[derive(Args, Debug)]
pub struct NameArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// (Required) The local name assigned to the peer cluster.
    #[arg(long)]
    pub name: Option<String>,
    /// Output format {pretty|json} (default: pretty).
    #[arg(long, default_value = "pretty")]
    pub format: String,
}

#[derive(Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// (Required) The local name assigned to the peer cluster.
    #[arg(long)]
    pub name: Option<String>,
}

pub fn run(command: PeeringCommand) -> Result<i32, String> {
    match command {
        PeeringCommand::GenerateToken(args) => generate_token(&args),
        PeeringCommand::Establish(args) => establish(&args),
        PeeringCommand::List(args) => list(&args),
        PeeringCommand::Read(args) => read(&args),
        PeeringCommand::Delete(args) => delete(&args),
    }
}

fn required_name(name: &Option<String>) -> Result<&str, String> {
    name.as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| "Missing the required -name flag".to_string())
}

fn check_format(format: &str) -> Result<(), String> {
    match format {
        "pretty" | "json" => Ok(()),
        _ => Err("Invalid format, valid formats are {pretty|json}".to_string()),
    }
}

fn meta_object(pairs: &[String]) -> Result<Map<String, Value>, String> {
    let mut meta = Map::new();
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("invalid value {pair:?} for flag -meta: missing '='"))?;
        meta.insert(k.to_string(), Value::String(v.to_string()));
    }
    Ok(meta)
}

fn generate_token(args: &GenerateTokenArgs) -> Result<i32, String> {
    let name = required_name(&args.name)?;
    check_format(&args.format)?;
    let mut body = json!({ "PeerName": name, "Meta": meta_object(&args.meta)? });
    if let Some(list) = &args.server_external_addresses {
        let addresses: Vec<&str> = list.split(',').filter(|a| !a.is_empty()).collect();
        body["ServerExternalAddresses"] = json!(addresses);
    }
    let client = args.http.client()?;
    let response = client
        .ok(
            "POST",
            "/v1/peering/token",
            Some(body.to_string().as_bytes()),
        )
        .map_err(|e| format!("Error generating peering token for {name}: {e}"))?;
    let value: Value = serde_json::from_slice(&response.body)
        .map_err(|e| format!("Error decoding the answer: {e}"))?;
    if args.format == "json" {
        println!("{value}");
    } else {
        println!("{}", value["PeeringToken"].as_str().unwrap_or_default());
    }
    Ok(0)
}

fn establish(args: &EstablishArgs) -> Result<i32, String> {
    let name = required_name(&args.name)?;
    let token = args
        .peering_token
        .as_deref()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| "Missing the required -peering-token flag".to_string())?;
    let body = json!({
        "PeerName": name,
        "PeeringToken": token,
        "Meta": meta_object(&args.meta)?,
    });
    let client = args.http.client()?;
    client
        .ok(
            "POST",
            "/v1/peering/establish",
            Some(body.to_string().as_bytes()),
        )
        .map_err(|e| format!("Error establishing peering for {name}: {e}"))?;
    println!("Successfully established peering connection with {name}");
    Ok(0)
}

fn list(args: &ListArgs) -> Result<i32, String> {
    check_format(&args.format)?;
    let client = args.http.client()?;
    let response = client
        .ok("GET", "/v1/peerings", None)
        .map_err(|_| "Error listing peerings".to_string())?;
    let value: Value = serde_json::from_slice(&response.body)
        .map_err(|e| format!("Error decoding the answer: {e}"))?;
    let mut peerings = value.as_array().cloned().unwrap_or_default();
    peerings.sort_by(|a, b| a["Name"].as_str().cmp(&b["Name"].as_str()));
    if args.format == "json" {
        println!("{}", Value::Array(peerings));
        return Ok(0);
    }
    if peerings.is_empty() {
        println!("There are no peering connections.");
        return Ok(0);
    }
    let mut rows = vec![["Name", "State", "Imported Svcs", "Exported Svcs", "Meta"]
        .map(String::from)
        .to_vec()];
    for peering in &peerings {
        let count = |field: &str| {
            peering["StreamStatus"][field]
                .as_array()
                .map_or(0, Vec::len)
                .to_string()
        };
        rows.push(vec![
            text(&peering["Name"]),
            text(&peering["State"]),
            count("ImportedServices"),
            count("ExportedServices"),
            meta_pairs(&peering["Meta"]).join(","),
        ]);
    }
    print!("{}", columns(&rows));
    Ok(0)
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

fn meta_pairs(meta: &Value) -> Vec<String> {
    meta.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

fn read(args: &NameArgs) -> Result<i32, String> {
    let name = required_name(&args.name)?;
    check_format(&args.format)?;
    let client = args.http.client()?;
    let path = format!("/v1/peering/{}", encode_path(name));
    let response = client
        .request("GET", &path, None)
        .map_err(|e| format!("Error reading peering: {e}"))?;
    if response.status == 404 {
        return Err(format!("No peering with name {name} found."));
    }
    if !(200..300).contains(&response.status) {
        return Err(format!(
            "Error reading peering: Unexpected response code: {} ({})",
            response.status,
            response.body_text()
        ));
    }
    let peering: Value = serde_json::from_slice(&response.body)
        .map_err(|e| format!("Error decoding the answer: {e}"))?;
    if args.format == "json" {
        println!("{peering}");
    } else {
        print!("{}", pretty(&peering));
    }
    Ok(0)
}

/// Consul's labelled layout of one peering.
fn pretty(peering: &Value) -> String {
    let mut out = String::new();
    out += &format!("Name:         {}\n", text(&peering["Name"]));
    out += &format!("ID:           {}\n", text(&peering["ID"]));
    if let Some(partition) = peering["Partition"].as_str().filter(|p| !p.is_empty()) {
        out += &format!("Partition:    {partition}\n");
    }
    if let Some(deleted) = peering["DeletedAt"].as_str() {
        out += &format!("DeletedAt:    {deleted}\n");
    }
    out += &format!("State:        {}\n", text(&peering["State"]));
    let meta = meta_pairs(&peering["Meta"]);
    if !meta.is_empty() {
        out += "Meta:\n";
        for pair in meta {
            out += &format!("    {pair}\n");
        }
    }
    out += "\n";
    out += &format!("Peer ID:               {}\n", text(&peering["PeerID"]));
    out += &format!(
        "Peer Server Name:      {}\n",
        text(&peering["PeerServerName"])
    );
    let pems = peering["PeerCAPems"].as_array().map_or(0, Vec::len);
    out += &format!("Peer CA Pems:          {pems}\n");
    if let Some(addresses) = peering["PeerServerAddresses"].as_array() {
        out += "Peer Server Addresses:\n";
        for address in addresses {
            out += &format!("    {}\n", text(address));
        }
    }
    let count = |field: &str| {
        peering["StreamStatus"][field]
            .as_array()
            .map_or(0, Vec::len)
    };
    out += "\n";
    out += &format!("Imported Services: {}\n", count("ImportedServices"));
    out += &format!("Exported Services: {}\n", count("ExportedServices"));
    out += "\n";
    out += &format!("Create Index: {}\n", peering["CreateIndex"]);
    out += &format!("Modify Index: {}\n", peering["ModifyIndex"]);
    out
}

fn delete(args: &DeleteArgs) -> Result<i32, String> {
    let name = required_name(&args.name)?;
    let client = args.http.client()?;
    let path = format!("/v1/peering/{}", encode_path(name));
    client
        .ok("DELETE", &path, None)
        .map_err(|e| format!("Error deleting peering for {name}: {e}"))?;
    println!("Successfully submitted peering connection, {name}, for deletion");
    Ok(0)
}
