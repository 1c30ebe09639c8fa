//! `praetor catalog datacenters|nodes|services`, with Consul's flags and column output.

use super::client::{encode_path, encode_query_value};
use super::HttpFlags;
use clap::{Args, Subcommand};
use serde_json::Value;

#[derive(Subcommand, Debug)]
pub enum CatalogCommand {
    /// Lists the known datacenters.
    Datacenters(DatacentersArgs),
    /// Lists the nodes in the catalog.
    Nodes(NodesArgs),
    /// Lists the services in the catalog.
    Services(ServicesArgs),
}

#[derive(Args, Debug)]
pub struct DatacentersArgs {
    #[command(flatten)]
    pub http: HttpFlags,
}

#[derive(Args, Debug)]
pub struct NodesArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Show node IDs in full, tagged addresses and metadata.
    #[arg(long)]
    pub detailed: bool,
    /// Only nodes with this metadata (`key=value`), repeatable.
    #[arg(long = "node-meta")]
    pub node_meta: Vec<String>,
    /// Only nodes providing this service.
    #[arg(long)]
    pub service: Option<String>,
    /// List nodes nearest first by estimated round-trip time from this node (`_agent`: the
    /// agent's own).
    #[arg(long)]
    pub near: Option<String>,
    /// A filter expression over the nodes.
    #[arg(long)]
    pub filter: Option<String>,
}

#[derive(Args, Debug)]
pub struct ServicesArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Show each service's tags.
    #[arg(long)]
    pub tags: bool,
    /// Only services on this node.
    #[arg(long)]
    pub node: Option<String>,
    /// Only services on nodes with this metadata (`key=value`), repeatable.
    #[arg(long = "node-meta")]
    pub node_meta: Vec<String>,
}

/// Aligns rows into columns separated by two spaces, as Consul's `columnize` does.
pub fn columns(rows: &[Vec<String>]) -> String {
    let count = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..count)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `key=value` flags as `node-meta=key:value` query parameters.
fn node_meta_query(pairs: &[String]) -> Result<String, String> {
    let mut query = String::new();
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("Error parsing -node-meta {pair:?}: expected key=value"))?;
        query.push_str(&format!(
            "&node-meta={}",
            encode_query_value(&format!("{k}:{v}"))
        ));
    }
    Ok(query)
}

fn get_json(http: &HttpFlags, path: &str) -> Result<Value, String> {
    let response = http.client()?.ok("GET", path, None)?;
    serde_json::from_slice(&response.body)
        .map_err(|e| format!("Error decoding the agent's answer: {e}"))
}

fn map_text(value: &Value) -> String {
    value
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

pub fn run(command: CatalogCommand) -> Result<i32, String> {
    match command {
        CatalogCommand::Datacenters(args) => datacenters(&args),
        CatalogCommand::Nodes(args) => nodes(&args),
        CatalogCommand::Services(args) => services(&args),
    }
}

/// `catalog datacenters`: one name per line.
fn datacenters(args: &DatacentersArgs) -> Result<i32, String> {
    let dcs = get_json(&args.http, "/v1/catalog/datacenters")?;
    for dc in dcs.as_array().into_iter().flatten() {
        println!("{}", dc.as_str().unwrap_or(""));
    }
    Ok(0)
}

/// `catalog nodes`: the nodes (of a service with `-service`) as Consul's table.
fn nodes(args: &NodesArgs) -> Result<i32, String> {
    let mut query = node_meta_query(&args.node_meta)?;
    if let Some(filter) = &args.filter {
        query.push_str(&format!("&filter={}", encode_query_value(filter)));
    }
    // The agent sorts by network coordinates; the rows keep its order below.
    if let Some(near) = args.near.as_deref().filter(|n| !n.is_empty()) {
        query.push_str(&format!("&near={}", encode_query_value(near)));
    }
    let nodes: Vec<Value> = match &args.service {
        Some(service) => {
            // Nodes providing a service, once each.
            let rows = get_json(
                &args.http,
                &format!(
                    "/v1/catalog/service/{}?{}",
                    encode_path(service),
                    query.trim_start_matches('&')
                ),
            )?;
            let mut seen = std::collections::BTreeSet::new();
            rows.as_array()
                    .into_iter()
                    .flatten()
                    .filter(|r| seen.insert(r["Node"].as_str().unwrap_or("").to_string()))
                    .map(|r| {
                        serde_json::json!({
                            "Node": r["Node"], "ID": r["ID"], "Address": r["Address"], "Datacenter": r["Datacenter"],
                            "TaggedAddresses": r["TaggedAddresses"], "Meta": r["NodeMeta"],
                        })
                    })
                    .collect()
        }
        None => get_json(
            &args.http,
            &format!("/v1/catalog/nodes?{}", query.trim_start_matches('&')),
        )?
        .as_array()
        .cloned()
        .unwrap_or_default(),
    };
    if nodes.is_empty() {
        eprintln!("No nodes match the given query - try expanding your search.");
        return Ok(0);
    }
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut rows = Vec::new();
    if args.detailed {
        rows.push(
            ["Node", "ID", "Address", "DC", "TaggedAddresses", "Meta"]
                .map(String::from)
                .to_vec(),
        );
        for n in &nodes {
            rows.push(vec![
                text(&n["Node"]),
                text(&n["ID"]),
                text(&n["Address"]),
                text(&n["Datacenter"]),
                map_text(&n["TaggedAddresses"]),
                map_text(&n["Meta"]),
            ]);
        }
    } else {
        rows.push(["Node", "ID", "Address", "DC"].map(String::from).to_vec());
        for n in &nodes {
            let id = text(&n["ID"]);
            rows.push(vec![
                text(&n["Node"]),
                id.chars().take(8).collect(),
                text(&n["Address"]),
                text(&n["Datacenter"]),
            ]);
        }
    }
    print!("{}", columns(&rows));
    Ok(0)
}

/// `catalog services`: the names (of one node's services with `-node`), with `-tags` their
/// tags.
fn services(args: &ServicesArgs) -> Result<i32, String> {
    let services: Vec<(String, Vec<String>)> = match &args.node {
        Some(node) => {
            let body = get_json(
                &args.http,
                &format!("/v1/catalog/node/{}", encode_path(node)),
            )?;
            if body.is_null() {
                return Err(format!("No node found with name {node:?}"));
            }
            let mut by_name: std::collections::BTreeMap<
                String,
                std::collections::BTreeSet<String>,
            > = Default::default();
            for service in body["Services"]
                .as_object()
                .into_iter()
                .flat_map(|m| m.values())
            {
                let tags = by_name
                    .entry(service["Service"].as_str().unwrap_or("").to_string())
                    .or_default();
                tags.extend(
                    service["Tags"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|t| t.as_str().map(String::from)),
                );
            }
            by_name
                .into_iter()
                .map(|(k, v)| (k, v.into_iter().collect()))
                .collect()
        }
        None => {
            let query = node_meta_query(&args.node_meta)?;
            let body = get_json(
                &args.http,
                &format!("/v1/catalog/services?{}", query.trim_start_matches('&')),
            )?;
            body.as_object()
                .into_iter()
                .flatten()
                .map(|(name, tags)| {
                    (
                        name.clone(),
                        tags.as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|t| t.as_str().map(String::from))
                            .collect(),
                    )
                })
                .collect()
        }
    };
    if services.is_empty() {
        eprintln!("No services match the given query - try expanding your search.");
        return Ok(0);
    }
    if args.tags {
        let rows: Vec<Vec<String>> = services
            .iter()
            .map(|(n, t)| vec![n.clone(), t.join(",")])
            .collect();
        print!("{}", columns(&rows));
    } else {
        for (name, _) in &services {
            println!("{name}");
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_like_columnize() {
        let rows = vec![
            vec!["Node".to_string(), "ID".to_string()],
            vec!["a-long-name".to_string(), "x".to_string()],
        ];
        assert_eq!(columns(&rows), "Node         ID\na-long-name  x\n");
        assert_eq!(
            node_meta_query(&["a=b".into()]).unwrap(),
            "&node-meta=a%3Ab"
        );
        assert!(node_meta_query(&["bad".into()]).is_err());
    }
}
