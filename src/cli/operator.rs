//! `praetor operator raft list-peers|remove-peer|transfer-leader`, as Consul's CLI.

use super::client::encode_query_value;
use super::HttpFlags;
use clap::{Args, Subcommand};

#[derive(Subcommand, Debug)]
pub enum OperatorCommand {
    /// Raft operations.
    #[command(subcommand)]
    Raft(RaftCommand),
}

#[derive(Subcommand, Debug)]
pub enum RaftCommand {
    /// Lists the servers in the Raft configuration.
    ListPeers(HttpOnly),
    /// Removes a server from the Raft configuration (-id or -address).
    RemovePeer(RemovePeerArgs),
    /// Asks the leader to hand leadership to another server (-id, or any).
    TransferLeader(TransferArgs),
}

#[derive(Args, Debug)]
pub struct HttpOnly {
    #[command(flatten)]
    pub http: HttpFlags,
}

#[derive(Args, Debug)]
pub struct RemovePeerArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[arg(long)]
    pub id: Option<String>,
    #[arg(long)]
    pub address: Option<String>,
}

#[derive(Args, Debug)]
pub struct TransferArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[arg(long)]
    pub id: Option<String>,
}

pub fn run(command: OperatorCommand) -> Result<i32, String> {
    match command {
        OperatorCommand::Raft(RaftCommand::ListPeers(args)) => list_peers(args),
        OperatorCommand::Raft(RaftCommand::RemovePeer(args)) => remove_peer(args),
        OperatorCommand::Raft(RaftCommand::TransferLeader(args)) => transfer_leader(args),
    }
}

fn list_peers(args: HttpOnly) -> Result<i32, String> {
    let response = args
        .http
        .client()?
        .ok("GET", "/v1/operator/raft/configuration", None)
        .map_err(|e| format!("Error getting peers: {e}"))?;
    let config: serde_json::Value =
        serde_json::from_slice(&response.body).map_err(|e| format!("Error getting peers: {e}"))?;
    let mut rows = vec![[
        "Node".to_string(),
        "ID".to_string(),
        "Address".to_string(),
        "State".to_string(),
        "Voter".to_string(),
        "RaftProtocol".to_string(),
    ]];
    for server in config["Servers"].as_array().cloned().unwrap_or_default() {
        let state = if server["Leader"].as_bool() == Some(true) {
            "leader"
        } else {
            "follower"
        };
        rows.push([
            server["Node"].as_str().unwrap_or("").to_string(),
            server["ID"].as_str().unwrap_or("").to_string(),
            server["Address"].as_str().unwrap_or("").to_string(),
            state.to_string(),
            server["Voter"].as_bool().unwrap_or(false).to_string(),
            server["ProtocolVersion"].as_str().unwrap_or("").to_string(),
        ]);
    }
    print_columns(&rows);
    Ok(0)
}

/// Prints rows as left-aligned columns separated by two spaces.
pub fn print_columns<const N: usize>(rows: &[[String; N]]) {
    let mut widths = [0usize; N];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.len());
        }
    }
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i + 1 == N {
                    c.clone()
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}

fn remove_peer(args: RemovePeerArgs) -> Result<i32, String> {
    let (query, label) = match (&args.id, &args.address) {
        (Some(id), None) => (
            format!("id={}", encode_query_value(id)),
            format!("ID {id:?}"),
        ),
        (None, Some(address)) => (
            format!("address={}", encode_query_value(address)),
            format!("address {address:?}"),
        ),
        _ => {
            return Err(
                "Error removing peer: exactly one of -id or -address is required".to_string(),
            )
        }
    };
    args.http
        .client()?
        .ok("DELETE", &format!("/v1/operator/raft/peer?{query}"), None)
        .map_err(|e| format!("Error removing peer: {e}"))?;
    println!("Removed peer with {label}");
    Ok(0)
}

fn transfer_leader(args: TransferArgs) -> Result<i32, String> {
    let path = match &args.id {
        Some(id) => format!(
            "/v1/operator/raft/transfer-leader?id={}",
            encode_query_value(id)
        ),
        None => "/v1/operator/raft/transfer-leader".to_string(),
    };
    args.http
        .client()?
        .ok("POST", &path, None)
        .map_err(|e| format!("Error transferring leadership: {e}"))?;
    println!("Success");
    Ok(0)
}
