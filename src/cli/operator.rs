//! `praetor operator raft list-peers|remove-peer|transfer-leader` and
//! `praetor operator autopilot get-config|set-config|state`, as Consul's CLI.

use super::client::encode_query_value;
use super::HttpFlags;
use crate::proto::duration::{format_go_duration, parse_go_duration_nanos};
use clap::{Args, Subcommand};
use serde_json::Value;

#[derive(Subcommand, Debug)]
pub enum OperatorCommand {
    /// Raft operations.
    #[command(subcommand)]
    Raft(RaftCommand),
    /// Autopilot: the configuration and the servers' state.
    #[command(subcommand)]
    Autopilot(AutopilotCommand),
}

#[derive(Subcommand, Debug)]
pub enum AutopilotCommand {
    /// Displays the current autopilot configuration.
    GetConfig(HttpOnly),
    /// Modifies the current autopilot configuration (check-and-set).
    SetConfig(SetConfigArgs),
    /// Displays autopilot's view of the servers.
    State(StateArgs),
}

#[derive(Args, Debug)]
pub struct SetConfigArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Remove dead servers from the Raft configuration.
    #[arg(long = "cleanup-dead-servers")]
    pub cleanup_dead_servers: Option<bool>,
    /// Log entries a server may trail the leader by and stay healthy.
    #[arg(long = "max-trailing-logs")]
    pub max_trailing_logs: Option<u64>,
    /// Fewest servers autopilot keeps when pruning dead ones.
    #[arg(long = "min-quorum")]
    pub min_quorum: Option<u32>,
    /// Longest a server may go without contact from the leader and stay healthy (`200ms`).
    #[arg(long = "last-contact-threshold")]
    pub last_contact_threshold: Option<String>,
    /// How long a new server must be healthy before it becomes a voter (`10s`).
    #[arg(long = "server-stabilization-time")]
    pub server_stabilization_time: Option<String>,
    /// (Enterprise) node_meta tag separating redundancy zones.
    #[arg(long = "redundancy-zone-tag")]
    pub redundancy_zone_tag: Option<String>,
    /// (Enterprise) skip upgrade migrations.
    #[arg(long = "disable-upgrade-migration")]
    pub disable_upgrade_migration: Option<bool>,
    /// (Enterprise) node_meta tag carrying the version for upgrade migrations.
    #[arg(long = "upgrade-version-tag")]
    pub upgrade_version_tag: Option<String>,
}

#[derive(Args, Debug)]
pub struct StateArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Output format: pretty or json.
    #[arg(long, default_value = "pretty")]
    pub format: String,
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
    /// Raft ID of the server to remove.
    #[arg(long)]
    pub id: Option<String>,
    /// `IP:port` of the server to remove, instead of -id.
    #[arg(long)]
    pub address: Option<String>,
}

#[derive(Args, Debug)]
pub struct TransferArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Raft ID of the server to hand leadership to (default: any other voter).
    #[arg(long)]
    pub id: Option<String>,
}

pub fn run(command: OperatorCommand) -> Result<i32, String> {
    match command {
        OperatorCommand::Raft(RaftCommand::ListPeers(args)) => list_peers(args),
        OperatorCommand::Raft(RaftCommand::RemovePeer(args)) => remove_peer(args),
        OperatorCommand::Raft(RaftCommand::TransferLeader(args)) => transfer_leader(args),
        OperatorCommand::Autopilot(AutopilotCommand::GetConfig(args)) => get_config(args),
        OperatorCommand::Autopilot(AutopilotCommand::SetConfig(args)) => set_config(args),
        OperatorCommand::Autopilot(AutopilotCommand::State(args)) => state(args),
    }
}

fn list_peers(args: HttpOnly) -> Result<i32, String> {
    let client = args.http.client()?;
    let response = client
        .ok("GET", "/v1/operator/raft/configuration", None)
        .map_err(|e| format!("Error getting peers: Failed to retrieve raft configuration: {e}"))?;
    let config: Value =
        serde_json::from_slice(&response.body).map_err(|e| format!("Error getting peers: {e}"))?;
    // Autopilot answers 429 while a server is unhealthy, with the same body.
    let health = client
        .request("GET", "/v1/operator/autopilot/health", None)
        .ok()
        .filter(|r| r.status == 200 || r.status == 429)
        .and_then(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .ok_or("Error getting peers: Failed to retrieve autopilot health")?;
    let health_of = |id: &str| {
        health["Servers"]
            .as_array()
            .and_then(|servers| servers.iter().find(|s| s["ID"] == id))
            .cloned()
    };
    let servers = config["Servers"].as_array().cloned().unwrap_or_default();
    let leader_index = servers
        .iter()
        .find(|s| s["Leader"] == true)
        .and_then(|s| health_of(s["ID"].as_str().unwrap_or("")))
        .and_then(|h| h["LastIndex"].as_u64())
        .unwrap_or(0);
    let mut rows = vec![[
        "Node".to_string(),
        "ID".to_string(),
        "Address".to_string(),
        "State".to_string(),
        "Voter".to_string(),
        "RaftProtocol".to_string(),
        "Commit Index".to_string(),
        "Trails Leader By".to_string(),
    ]];
    for server in servers {
        let leader = server["Leader"].as_bool() == Some(true);
        let state = if leader { "leader" } else { "follower" };
        let id = server["ID"].as_str().unwrap_or("");
        let (commit, trails) = match health_of(id).and_then(|h| h["LastIndex"].as_u64()) {
            Some(index) => {
                let behind = leader_index.saturating_sub(index);
                let trails = if leader {
                    "_".to_string()
                } else if behind <= 1 {
                    format!("{behind} Commit")
                } else {
                    format!("{behind} Commits")
                };
                (index.to_string(), trails)
            }
            None => ("_".to_string(), String::new()),
        };
        rows.push([
            server["Node"].as_str().unwrap_or("").to_string(),
            id.to_string(),
            server["Address"].as_str().unwrap_or("").to_string(),
            state.to_string(),
            server["Voter"].as_bool().unwrap_or(false).to_string(),
            server["ProtocolVersion"].as_str().unwrap_or("").to_string(),
            commit,
            trails,
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
            format!("id {id:?}"),
        ),
        (None, Some(address)) => (
            format!("address={}", encode_query_value(address)),
            format!("address {address:?}"),
        ),
        (None, None) => {
            return Err(
                "Error removing peer: an address or id is required for the peer to remove"
                    .to_string(),
            )
        }
        (Some(_), Some(_)) => {
            return Err("Error removing peer: cannot give both an address and id".to_string())
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
        .map_err(|e| format!("Error transfering leadership: Failed to transfer leadership {e}"))?;
    println!("Success");
    Ok(0)
}

fn get_config(args: HttpOnly) -> Result<i32, String> {
    let response = args
        .http
        .client()?
        .ok("GET", "/v1/operator/autopilot/configuration", None)
        .map_err(|e| format!("Error querying Autopilot configuration: {e}"))?;
    let config: Value = serde_json::from_slice(&response.body)
        .map_err(|e| format!("Error querying Autopilot configuration: {e}"))?;
    let text = |key: &str| config[key].as_str().unwrap_or("").to_string();
    println!("CleanupDeadServers = {}", config["CleanupDeadServers"]);
    println!("LastContactThreshold = {}", text("LastContactThreshold"));
    println!("MaxTrailingLogs = {}", config["MaxTrailingLogs"]);
    println!("MinQuorum = {}", config["MinQuorum"]);
    println!(
        "ServerStabilizationTime = {}",
        text("ServerStabilizationTime")
    );
    println!("RedundancyZoneTag = {:?}", text("RedundancyZoneTag"));
    println!(
        "DisableUpgradeMigration = {}",
        config["DisableUpgradeMigration"]
    );
    println!("UpgradeVersionTag = {:?}", text("UpgradeVersionTag"));
    Ok(0)
}

/// A flag's Go duration, checked here so a typo fails before anything is sent.
fn duration_flag(name: &str, value: &str) -> Result<String, String> {
    parse_go_duration_nanos(value)
        .map(format_go_duration)
        .map_err(|e| format!("Failed to parse args: invalid value {value:?} for flag -{name}: {e}"))
}

fn set_config(args: SetConfigArgs) -> Result<i32, String> {
    let client = args.http.client()?;
    let response = client
        .ok("GET", "/v1/operator/autopilot/configuration", None)
        .map_err(|e| format!("Error querying Autopilot configuration: {e}"))?;
    let mut config: Value = serde_json::from_slice(&response.body)
        .map_err(|e| format!("Error querying Autopilot configuration: {e}"))?;
    if let Some(v) = args.cleanup_dead_servers {
        config["CleanupDeadServers"] = v.into();
    }
    if let Some(v) = args.max_trailing_logs {
        config["MaxTrailingLogs"] = v.into();
    }
    if let Some(v) = args.min_quorum {
        config["MinQuorum"] = v.into();
    }
    if let Some(v) = &args.last_contact_threshold {
        config["LastContactThreshold"] = duration_flag("last-contact-threshold", v)?.into();
    }
    if let Some(v) = &args.server_stabilization_time {
        config["ServerStabilizationTime"] = duration_flag("server-stabilization-time", v)?.into();
    }
    if let Some(v) = &args.redundancy_zone_tag {
        config["RedundancyZoneTag"] = v.clone().into();
    }
    if let Some(v) = args.disable_upgrade_migration {
        config["DisableUpgradeMigration"] = v.into();
    }
    if let Some(v) = &args.upgrade_version_tag {
        config["UpgradeVersionTag"] = v.clone().into();
    }
    let cas = config["ModifyIndex"].as_u64().unwrap_or(0);
    let body = serde_json::to_vec(&config).map_err(|e| e.to_string())?;
    let response = client
        .ok(
            "PUT",
            &format!("/v1/operator/autopilot/configuration?cas={cas}"),
            Some(&body),
        )
        .map_err(|e| format!("Error setting Autopilot configuration: {e}"))?;
    if String::from_utf8_lossy(&response.body).contains("true") {
        println!("Configuration updated!");
        Ok(0)
    } else {
        println!("Configuration could not be atomically updated, please try again");
        Ok(1)
    }
}

fn state(args: StateArgs) -> Result<i32, String> {
    if args.format != "pretty" && args.format != "json" {
        return Err(format!(
            "Failed to parse args: invalid -format {:?}: must be pretty or json",
            args.format
        ));
    }
    let response = args
        .http
        .client()?
        .ok("GET", "/v1/operator/autopilot/state", None)
        .map_err(|e| format!("Error querying Autopilot state: {e}"))?;
    let state: Value = serde_json::from_slice(&response.body)
        .map_err(|e| format!("Error querying Autopilot state: {e}"))?;
    if args.format == "json" {
        println!(
            "{}",
            serde_json::to_string_pretty(&state).map_err(|e| e.to_string())?
        );
        return Ok(0);
    }
    print!("{}", format_state(&state));
    Ok(0)
}

/// Consul's `pretty` rendering of the autopilot state.
fn format_state(state: &Value) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "Healthy:                      {}", state["Healthy"]);
    let _ = writeln!(
        out,
        "Failure Tolerance:            {}",
        state["FailureTolerance"]
    );
    let _ = writeln!(
        out,
        "Optimistic Failure Tolerance: {}",
        state["OptimisticFailureTolerance"]
    );
    let _ = writeln!(
        out,
        "Leader:                       {}",
        state["Leader"].as_str().unwrap_or("")
    );
    let _ = writeln!(out, "Voters:");
    for voter in state["Voters"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "   {}", voter.as_str().unwrap_or(""));
    }
    let _ = writeln!(out, "Servers:");
    if let Some(servers) = state["Servers"].as_object() {
        let mut ids: Vec<&String> = servers.keys().collect();
        ids.sort();
        for id in ids {
            let server = &servers[id];
            let text = |key: &str| server[key].as_str().unwrap_or("").to_string();
            let _ = writeln!(out, "   {id}");
            let _ = writeln!(out, "      Name:            {}", text("Name"));
            let _ = writeln!(out, "      Address:         {}", text("Address"));
            let _ = writeln!(out, "      Version:         {}", text("Version"));
            let _ = writeln!(out, "      Status:          {}", text("Status"));
            let _ = writeln!(out, "      Node Type:       {}", text("NodeType"));
            let _ = writeln!(out, "      Node Status:     {}", text("NodeStatus"));
            let _ = writeln!(out, "      Healthy:         {}", server["Healthy"]);
            let _ = writeln!(out, "      Last Contact:    {}", text("LastContact"));
            let _ = writeln!(out, "      Last Term:       {}", server["LastTerm"]);
            let _ = writeln!(out, "      Last Index:      {}", server["LastIndex"]);
            if let Some(meta) = server["Meta"].as_object().filter(|m| !m.is_empty()) {
                let _ = writeln!(out, "      Meta");
                let mut keys: Vec<&String> = meta.keys().collect();
                keys.sort();
                for key in keys {
                    let _ = writeln!(
                        out,
                        "         {key:?}: {:?}",
                        meta[key].as_str().unwrap_or("")
                    );
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_prints_as_consul_pretty_format() {
        let state = serde_json::json!({
            "Healthy": true, "FailureTolerance": 1, "OptimisticFailureTolerance": 1,
            "Leader": "a", "Voters": ["a", "b"],
            "Servers": {"a": {"Name": "n1", "Address": "10.0.0.1:8300", "Version": "1.22.0",
                "Status": "leader", "NodeType": "voter", "NodeStatus": "alive", "Healthy": true,
                "LastContact": "0s", "LastTerm": 3, "LastIndex": 42, "Meta": {"foo": "bar"}}},
        });
        let text = format_state(&state);
        assert!(text
            .starts_with("Healthy:                      true\nFailure Tolerance:            1\n"));
        assert!(text.contains("Voters:\n   a\n   b\nServers:\n   a\n      Name:            n1\n"));
        assert!(text.contains("      Last Index:      42\n      Meta\n         \"foo\": \"bar\"\n"));
    }
}
