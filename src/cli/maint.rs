//! `praetor maint`: node and service maintenance mode on the local agent, as `consul maint`.
//! Without `-enable`/`-disable` it lists what is in maintenance.

use super::client::{encode_path, encode_query_value};
use super::HttpFlags;
use clap::Args;

#[derive(Args, Debug)]
pub struct MaintArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Enable maintenance mode.
    #[arg(long)]
    pub enable: bool,
    /// Disable maintenance mode.
    #[arg(long)]
    pub disable: bool,
    /// A reason shown in the maintenance check's notes.
    #[arg(long)]
    pub reason: Option<String>,
    /// A service ID: put that service, not the node, in maintenance.
    #[arg(long)]
    pub service: Option<String>,
}

const SERVICE_PREFIX: &str = "_service_maintenance:";
const NODE_CHECK: &str = "_node_maintenance";

pub fn run(args: MaintArgs) -> Result<i32, String> {
    if args.enable && args.disable {
        return Err("Only one of -enable or -disable may be provided".to_string());
    }
    if !args.enable && args.reason.as_deref().is_some_and(|r| !r.is_empty()) {
        return Err("Reason may only be provided with -enable".to_string());
    }
    if !args.enable && !args.disable && args.service.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err("Service requires either -enable or -disable".to_string());
    }
    let client = args.http.client()?;
    if !args.enable && !args.disable {
        let response = client.ok("GET", "/v1/agent/checks", None)?;
        let checks: serde_json::Value = serde_json::from_slice(&response.body)
            .map_err(|e| format!("Error decoding the agent's answer: {e}"))?;
        let self_info = client.ok("GET", "/v1/agent/self", None)?;
        let node_name = serde_json::from_slice::<serde_json::Value>(&self_info.body)
            .ok()
            .and_then(|v| v["Config"]["NodeName"].as_str().map(String::from))
            .unwrap_or_default();
        for (id, check) in checks.as_object().into_iter().flatten() {
            let notes = check["Notes"].as_str().unwrap_or("");
            if id == NODE_CHECK {
                println!("Node:\n  Name:   {node_name}\n  Reason: {notes}\n");
            } else if let Some(service) = id.strip_prefix(SERVICE_PREFIX) {
                println!("Service:\n  ID:     {service}\n  Reason: {notes}\n");
            }
        }
        return Ok(0);
    }
    let enable = args.enable;
    let mut query = format!("enable={enable}");
    if let Some(reason) = &args.reason {
        query.push_str(&format!("&reason={}", encode_query_value(reason)));
    }
    let state = if enable { "enabled" } else { "disabled" };
    match &args.service {
        Some(service) => {
            client
                .ok(
                    "PUT",
                    &format!(
                        "/v1/agent/service/maintenance/{}?{query}",
                        encode_path(service)
                    ),
                    Some(b""),
                )
                .map_err(|e| {
                    format!(
                        "Error {} service maintenance: {e}",
                        if enable { "enabling" } else { "disabling" }
                    )
                })?;
            println!("Service maintenance is now {state} for {service:?}");
        }
        None => {
            client
                .ok("PUT", &format!("/v1/agent/maintenance?{query}"), Some(b""))
                .map_err(|e| {
                    format!(
                        "Error {} node maintenance: {e}",
                        if enable { "enabling" } else { "disabling" }
                    )
                })?;
            println!("Node maintenance is now {state}");
        }
    }
    Ok(0)
}
