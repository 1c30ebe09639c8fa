//! The gossip commands, as Consul's CLI has them: `members`, `join`, `leave`,
//! `force-leave`, `event`, `keygen`, `keyring` and `rtt`. Each is a thin client of the
//! agent's HTTP API (`/v1/agent/*`, `/v1/event/fire`, `/v1/operator/keyring`,
//! `/v1/coordinate/*`), printing what Consul's command prints.

use super::catalog::columns;
use super::client::{encode_path, encode_query_value};
use super::HttpFlags;
use crate::gossip::coordinate::{distance_seconds, Coordinate};
use clap::Args;
use serde_json::Value;

#[derive(Args, Debug)]
pub struct MembersArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// List the WAN pool's members instead of the LAN pool's.
    #[arg(long)]
    pub wan: bool,
    /// Show every member's tags instead of the summary columns.
    #[arg(long)]
    pub detailed: bool,
    /// Only members whose status matches this regular expression.
    #[arg(long)]
    pub status: Option<String>,
    /// Only members of this network segment.
    #[arg(long)]
    pub segment: Option<String>,
}

#[derive(Args, Debug)]
pub struct JoinArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Join the WAN pool (servers only).
    #[arg(long)]
    pub wan: bool,
    /// Addresses of agents to join (`host` or `host:port`).
    pub addresses: Vec<String>,
}

#[derive(Args, Debug)]
pub struct LeaveArgs {
    #[command(flatten)]
    pub http: HttpFlags,
}

#[derive(Args, Debug)]
pub struct ReloadArgs {
    #[command(flatten)]
    pub http: HttpFlags,
}

#[derive(Args, Debug)]
pub struct ForceLeaveArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Forget the node entirely instead of marking it left.
    #[arg(long)]
    pub prune: bool,
    /// Only remove the node from the WAN pool.
    #[arg(long)]
    pub wan: bool,
    /// The node to force out.
    pub node: Option<String>,
}

#[derive(Args, Debug)]
pub struct EventArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// The event's name.
    #[arg(long)]
    pub name: Option<String>,
    /// Regular expression the receiving node's name must match.
    #[arg(long)]
    pub node: Option<String>,
    /// Regular expression a service on the receiving node must match.
    #[arg(long)]
    pub service: Option<String>,
    /// Regular expression a tag of that service must match (needs -service).
    #[arg(long)]
    pub tag: Option<String>,
    /// Optional payload.
    pub payload: Option<String>,
}

#[derive(Args, Debug)]
pub struct KeyringArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// List the keys installed in the cluster.
    #[arg(long)]
    pub list: bool,
    /// List the primary keys in use.
    #[arg(long = "list-primary")]
    pub list_primary: bool,
    /// Install a new key (base64).
    #[arg(long)]
    pub install: Option<String>,
    /// Make an installed key the primary key.
    #[arg(long = "use")]
    pub use_key: Option<String>,
    /// Remove a key that is not primary.
    #[arg(long)]
    pub remove: Option<String>,
    /// How many other members relay each member's answer (0 to 5).
    #[arg(long = "relay-factor", default_value_t = 0)]
    pub relay_factor: u64,
    /// List only this datacenter's LAN pool (with -list or -list-primary).
    #[arg(long = "local-only")]
    pub local_only: bool,
}

#[derive(Args, Debug)]
pub struct RttArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Use WAN coordinates (node names as `<node>.<dc>`).
    #[arg(long)]
    pub wan: bool,
    /// One or two node names; with one, the other is the agent's own node.
    pub nodes: Vec<String>,
}

fn json_of(body: &[u8], what: &str) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|e| format!("Error decoding {what}: {e}"))
}

fn tag<'a>(member: &'a Value, name: &str) -> &'a str {
    member["Tags"][name].as_str().unwrap_or("")
}

fn status_name(code: i64) -> &'static str {
    match code {
        0 => "none",
        1 => "alive",
        2 => "leaving",
        3 => "left",
        4 => "failed",
        _ => "unknown",
    }
}

pub fn members(args: MembersArgs) -> Result<i32, String> {
    let mut path = String::from("/v1/agent/members");
    if args.wan {
        path.push_str("?wan=1");
    } else if let Some(segment) = &args.segment {
        path.push_str(&format!("?segment={}", encode_query_value(segment)));
    }
    let response = args
        .http
        .client()?
        .ok("GET", &path, None)
        .map_err(|e| format!("Error retrieving members: {e}"))?;
    let members = json_of(&response.body, "members")?;
    let status_filter = match &args.status {
        Some(expr) => Some(
            regex::Regex::new(expr).map_err(|e| format!("Failed to compile status regexp: {e}"))?,
        ),
        None => None,
    };
    let mut list: Vec<&Value> = members
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    list.retain(|m| {
        let status = status_name(m["Status"].as_i64().unwrap_or(-1));
        status_filter.as_ref().is_none_or(|re| re.is_match(status))
    });
    if list.is_empty() {
        // Consul exits 2 when the filters leave nothing.
        return Ok(2);
    }
    list.sort_by(|a, b| {
        a["Name"]
            .as_str()
            .unwrap_or("")
            .cmp(b["Name"].as_str().unwrap_or(""))
    });
    let rows = if args.detailed {
        detailed_member_rows(&list)
    } else {
        member_rows(&list)
    };
    print!("{}", columns(&rows));
    Ok(0)
}

/// A member's gossip address, `host:port` (IPv6 in brackets).
fn member_address(m: &Value) -> String {
    let addr = m["Addr"].as_str().unwrap_or("");
    let port = m["Port"].as_u64().unwrap_or(0);
    if addr.contains(':') {
        format!("[{addr}]:{port}")
    } else {
        format!("{addr}:{port}")
    }
}

/// `members -detailed`: every tag of each member, sorted as `key=value`.
fn detailed_member_rows(list: &[&Value]) -> Vec<Vec<String>> {
    let mut rows = vec![vec![
        "Node".to_string(),
        "Address".to_string(),
        "Status".to_string(),
        "Tags".to_string(),
    ]];
    for m in list {
        let tags: Vec<String> = m["Tags"]
            .as_object()
            .map(|t| {
                let mut pairs: Vec<String> = t
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect();
                pairs.sort();
                pairs
            })
            .unwrap_or_default();
        rows.push(vec![
            m["Name"].as_str().unwrap_or("").to_string(),
            member_address(m),
            status_name(m["Status"].as_i64().unwrap_or(-1)).to_string(),
            tags.join(","),
        ]);
    }
    rows
}

/// `members`: Consul's columns, the type, build, protocol, datacenter and segment read
/// from the tags.
fn member_rows(list: &[&Value]) -> Vec<Vec<String>> {
    let mut rows = vec![[
        "Node", "Address", "Status", "Type", "Build", "Protocol", "DC", "Segment",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()];
    for m in list {
        let server = tag(m, "role") == "consul";
        let build = tag(m, "build").split(':').next().unwrap_or("").to_string();
        let segment = if server {
            "<all>".to_string()
        } else if tag(m, "segment").is_empty() {
            "<default>".to_string()
        } else {
            tag(m, "segment").to_string()
        };
        rows.push(vec![
            m["Name"].as_str().unwrap_or("").to_string(),
            member_address(m),
            status_name(m["Status"].as_i64().unwrap_or(-1)).to_string(),
            if server { "server" } else { "client" }.to_string(),
            build,
            tag(m, "vsn").to_string(),
            tag(m, "dc").to_string(),
            segment,
        ]);
    }
    rows
}

pub fn join(args: JoinArgs) -> Result<i32, String> {
    if args.addresses.is_empty() {
        return Err("At least one address to join must be specified.".to_string());
    }
    let client = args.http.client()?;
    let mut joined = 0;
    for address in &args.addresses {
        let mut path = format!("/v1/agent/join/{}", encode_path(address));
        if args.wan {
            path.push_str("?wan=1");
        }
        match client.ok("PUT", &path, None) {
            Ok(_) => joined += 1,
            Err(e) => eprintln!("Error joining address '{address}': {e}"),
        }
    }
    if joined == 0 {
        return Err("Failed to join any nodes.".to_string());
    }
    println!("Successfully joined cluster by contacting {joined} nodes.");
    Ok(0)
}

pub fn leave(args: LeaveArgs) -> Result<i32, String> {
    args.http
        .client()?
        .ok("PUT", "/v1/agent/leave", None)
        .map_err(|e| format!("Error leaving: {e}"))?;
    println!("Graceful leave complete");
    Ok(0)
}

/// Asks the agent to reload its configuration files: services, checks, node metadata and
/// the TLS certificates (`PUT /v1/agent/reload`).
pub fn reload(args: ReloadArgs) -> Result<i32, String> {
    args.http
        .client()?
        .ok("PUT", "/v1/agent/reload", None)
        .map_err(|e| format!("Error reloading: {e}"))?;
    println!("Configuration reload triggered");
    Ok(0)
}

pub fn force_leave(args: ForceLeaveArgs) -> Result<i32, String> {
    let node = args
        .node
        .as_deref()
        .ok_or("A single node name must be specified to force leave.")?;
    let mut path = format!("/v1/agent/force-leave/{}", encode_path(node));
    let mut params = Vec::new();
    if args.prune {
        params.push("prune=1");
    }
    if args.wan {
        params.push("wan=1");
    }
    if !params.is_empty() {
        path.push('?');
        path.push_str(&params.join("&"));
    }
    args.http
        .client()?
        .ok("PUT", &path, None)
        .map_err(|e| format!("Error force leaving: {e}"))?;
    Ok(0)
}

pub fn event(args: EventArgs) -> Result<i32, String> {
    let name = args
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or("Event name must be specified")?;
    if args.tag.is_some() && args.service.is_none() {
        return Err("Cannot provide tag filter without service filter.".to_string());
    }
    let mut path = format!("/v1/event/fire/{}", encode_path(name));
    let mut params = Vec::new();
    for (key, value) in [
        ("node", &args.node),
        ("service", &args.service),
        ("tag", &args.tag),
    ] {
        if let Some(v) = value {
            params.push(format!("{key}={}", encode_query_value(v)));
        }
    }
    if !params.is_empty() {
        path.push('?');
        path.push_str(&params.join("&"));
    }
    let body = args.payload.as_deref().unwrap_or("").as_bytes();
    let response = args
        .http
        .client()?
        .ok("PUT", &path, Some(body))
        .map_err(|e| format!("Error firing event: {e}"))?;
    let event = json_of(&response.body, "event")?;
    println!("Event ID: {}", event["ID"].as_str().unwrap_or(""));
    Ok(0)
}

/// `praetor keygen`: a fresh 32-byte gossip key, base64 (Consul's default size).
pub fn keygen() -> Result<i32, String> {
    use base64::Engine;
    let key: [u8; 32] = rand::random();
    println!("{}", base64::engine::general_purpose::STANDARD.encode(key));
    Ok(0)
}

pub fn keyring(args: KeyringArgs) -> Result<i32, String> {
    let chosen = [
        args.list,
        args.list_primary,
        args.install.is_some(),
        args.use_key.is_some(),
        args.remove.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if chosen != 1 {
        return Err(
            "Exactly one of -list, -list-primary, -install, -use, or -remove must be provided"
                .to_string(),
        );
    }
    // Consul's checks of the two flags, before any request.
    if args.relay_factor > 5 {
        return Err(
            "Error parsing relay factor: Relay factor must be in range: [0, 5]".to_string(),
        );
    }
    let listing = args.list || args.list_primary;
    if args.local_only && !listing {
        return Err(
            "Error validating local-only: local-only can only be set for list requests".to_string(),
        );
    }
    let mut path = format!("/v1/operator/keyring?relay-factor={}", args.relay_factor);
    if args.local_only {
        path.push_str("&local-only=true");
    }
    let client = args.http.client()?;
    if listing {
        println!("==> Gathering installed encryption keys...");
        let response = client
            .ok("GET", &path, None)
            .map_err(|e| format!("error: {e}"))?;
        let pools = json_of(&response.body, "keyring")?;
        let field = if args.list_primary {
            "PrimaryKeys"
        } else {
            "Keys"
        };
        for pool in pools.as_array().cloned().unwrap_or_default() {
            let title = if pool["WAN"].as_bool() == Some(true) {
                "WAN".to_string()
            } else {
                format!("{} (LAN)", pool["Datacenter"].as_str().unwrap_or(""))
            };
            println!();
            println!("{title}:");
            let total = pool["NumNodes"].as_u64().unwrap_or(0);
            if let Some(keys) = pool[field].as_object() {
                for (key, count) in keys {
                    println!("  {key} [{}/{total}]", count.as_u64().unwrap_or(0));
                }
            }
        }
        return Ok(0);
    }
    let (method, key, banner) = if let Some(key) = &args.install {
        ("POST", key, "==> Installing new gossip encryption key...")
    } else if let Some(key) = &args.use_key {
        ("PUT", key, "==> Changing primary gossip encryption key...")
    } else {
        (
            "DELETE",
            args.remove.as_ref().expect("one option was chosen"),
            "==> Removing gossip encryption key...",
        )
    };
    println!("{banner}");
    let body = serde_json::json!({ "Key": key }).to_string();
    client
        .ok(method, &path, Some(body.as_bytes()))
        .map_err(|e| format!("error: {e}"))?;
    Ok(0)
}

fn coordinate_of(value: &Value) -> Option<Coordinate> {
    let coord = &value["Coord"];
    Some(Coordinate {
        vec: coord["Vec"]
            .as_array()?
            .iter()
            .map(|x| x.as_f64())
            .collect::<Option<Vec<f64>>>()?,
        error: coord["Error"].as_f64()?,
        adjustment: coord["Adjustment"].as_f64()?,
        height: coord["Height"].as_f64()?,
    })
}

pub fn rtt(args: RttArgs) -> Result<i32, String> {
    if args.nodes.is_empty() || args.nodes.len() > 2 {
        return Err("One or two node names must be specified".to_string());
    }
    let client = args.http.client()?;
    let (first, second) = match args.nodes.as_slice() {
        [a, b] => (a.clone(), b.clone()),
        [a] => {
            let response = client
                .ok("GET", "/v1/agent/self", None)
                .map_err(|e| format!("Unable to look up agent info: {e}"))?;
            let me = json_of(&response.body, "agent info")?;
            let mut name = me["Config"]["NodeName"].as_str().unwrap_or("").to_string();
            if args.wan {
                name = format!(
                    "{name}.{}",
                    me["Config"]["Datacenter"].as_str().unwrap_or("")
                );
            }
            (a.clone(), name)
        }
        _ => return Err("One or two node names must be specified".to_string()),
    };
    let entries: Vec<Value> = if args.wan {
        let response = client
            .ok("GET", "/v1/coordinate/datacenters", None)
            .map_err(|e| format!("Error getting coordinates: {e}"))?;
        json_of(&response.body, "coordinates")?
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .flat_map(|dc| dc["Coordinates"].as_array().cloned().unwrap_or_default())
            .collect()
    } else {
        let response = client
            .ok("GET", "/v1/coordinate/nodes", None)
            .map_err(|e| format!("Error getting coordinates: {e}"))?;
        json_of(&response.body, "coordinates")?
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let find = |name: &str| {
        entries
            .iter()
            .find(|e| e["Node"].as_str() == Some(name))
            .and_then(coordinate_of)
            .ok_or_else(|| format!("Could not find a coordinate for node {name:?}"))
    };
    let a = find(&first)?;
    let b = find(&second)?;
    let seconds = distance_seconds(&a, &b);
    println!(
        "Estimated {first} <-> {second} rtt: {:.3} ms (using {} coordinates)",
        seconds * 1000.0,
        if args.wan { "WAN" } else { "LAN" }
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_padded_and_trimmed() {
        let rows = vec![
            vec!["Node".to_string(), "Status".to_string()],
            vec!["a-long-name".to_string(), "alive".to_string()],
        ];
        assert_eq!(columns(&rows), "Node         Status\na-long-name  alive\n");
    }

    #[test]
    fn coordinates_parse_from_consul_json() {
        let v = serde_json::json!({"Node": "n", "Coord": {"Vec": [0.001, 0.0], "Error": 1.5, "Adjustment": 0.0, "Height": 1e-5}});
        let c = coordinate_of(&v).unwrap();
        assert_eq!(c.vec, vec![0.001, 0.0]);
        assert!(coordinate_of(&serde_json::json!({"Node": "n"})).is_none());
    }
}
