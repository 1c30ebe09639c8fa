//! `/v1/coordinate/nodes`, `/v1/coordinate/node/<node>` and `/v1/coordinate/datacenters`:
//! serf's Vivaldi coordinates as this agent's gossip pools know them (every probe's ack
//! carries the peer's coordinate, see `crate::gossip::coordinate`).
//!
//! Consul serves node coordinates from the catalog, where agents upload their own; praetor
//! answers from the agent's pool directly, which holds the same coordinates each node
//! computes for itself. Members that left are not listed. `datacenters` lists every
//! datacenter's servers from the WAN pool when it runs, else this one's from the LAN pool.

use super::{check_datacenter, ApiError, Context, Outcome, Reply, Request};
use crate::cluster::gossip::GossipHandle;
use crate::gossip::coordinate::{distance_seconds, Coordinate};
use crate::gossip::MemberStatus;
use std::collections::HashMap;

/// Consul's JSON for a coordinate.
pub fn coordinate_json(c: &Coordinate) -> serde_json::Value {
    serde_json::json!({
        "Vec": c.vec,
        "Error": c.error,
        "Adjustment": c.adjustment,
        "Height": c.height,
    })
}

/// Every member's latest coordinate that is still in the pool (not left), sorted by node
/// name; this agent's own included.
pub fn node_coordinates(handle: &GossipHandle) -> Vec<(String, Coordinate)> {
    let coordinates = handle.coordinates();
    let local = handle.local_coordinate();
    let mut out: Vec<(String, Coordinate)> = handle
        .members()
        .iter()
        .filter(|m| m.status != MemberStatus::Left)
        .filter_map(|m| {
            if m.name == handle.local_name() {
                Some((m.name.clone(), (*local).clone()))
            } else {
                coordinates
                    .get(&m.name)
                    .map(|c| (m.name.clone(), c.clone()))
            }
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The estimated round-trip time between two nodes of this agent's LAN pool, in seconds,
/// if both coordinates are known. This is what `?near=` sorting compares.
pub fn node_distance_seconds(ctx: &Context, a: &str, b: &str) -> Option<f64> {
    let handle = ctx.lan()?;
    handle.rtt_between(a, b).map(|d| d.as_secs_f64())
}

/// Estimated distance in seconds from node `near` (`_agent` = this agent's node) to every
/// node with a known coordinate; `None` when gossip runs no pool or `near` has no coordinate
/// (Consul then leaves the order alone).
pub fn distances_from(ctx: &Context, near: &str) -> Option<HashMap<String, f64>> {
    distances_from_handle(ctx.lan()?, near)
}

/// [`distances_from`] over a LAN pool handle, for work that runs after its handler.
pub fn distances_from_handle(handle: &GossipHandle, near: &str) -> Option<HashMap<String, f64>> {
    let near = if near == "_agent" {
        handle.local_name()
    } else {
        near
    };
    let coordinates = handle.coordinates();
    let local = handle.local_coordinate();
    let origin = if near == handle.local_name() {
        (*local).clone()
    } else {
        coordinates.get(near)?.clone()
    };
    let mut distances: HashMap<String, f64> = coordinates
        .iter()
        .map(|(name, c)| (name.clone(), distance_seconds(&origin, c)))
        .collect();
    distances.insert(
        handle.local_name().to_string(),
        distance_seconds(&origin, &local),
    );
    Some(distances)
}

/// Sorts `items` by estimated distance from node `near`, nearest first; items whose node has
/// no coordinate go last in their original order (Consul's `sortByDistanceFrom`).
pub fn sort_by_distance<T>(
    ctx: &Context,
    near: &str,
    items: &mut [T],
    node_of: impl Fn(&T) -> &str,
) {
    let Some(handle) = ctx.lan() else {
        return;
    };
    let coordinates = handle.coordinates();
    let local = handle.local_coordinate();
    let lookup = |name: &str| -> Option<Coordinate> {
        if name == handle.local_name() {
            Some((*local).clone())
        } else {
            coordinates.get(name).cloned()
        }
    };
    let Some(origin) = lookup(near) else {
        return;
    };
    items.sort_by(|x, y| {
        let dx = lookup(node_of(x)).map(|c| distance_seconds(&origin, &c));
        let dy = lookup(node_of(y)).map(|c| distance_seconds(&origin, &c));
        match (dx, dy) {
            (Some(a), Some(b)) => a.total_cmp(&b),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        }
    });
}

fn entry_json(node: &str, c: &Coordinate) -> serde_json::Value {
    serde_json::json!({ "Node": node, "Segment": "", "Coord": coordinate_json(c) })
}

fn index_header(ctx: &Context) -> Vec<u8> {
    let mut headers = Vec::with_capacity(64);
    headers.extend_from_slice(b"X-Consul-Index: ");
    crate::proto::http::push_u64(&mut headers, ctx.local_index().max(1));
    headers.extend_from_slice(b"\r\n");
    headers
}

/// `GET /v1/coordinate/nodes`.
pub fn nodes(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    node_entries(ctx, request, None, reply)
}

/// `GET /v1/coordinate/node/<node>`.
pub fn node(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    node_entries(ctx, request, Some(request.rest), reply)
}

fn node_entries(
    ctx: &Context,
    request: &Request,
    node: Option<&str>,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    let handle = super::members::lan_handle(ctx)?;
    if let Some(segment) = request.query.get("segment").filter(|s| !s.is_empty()) {
        if segment != "_all" {
            return Err(ApiError::BadRequest(
                "Network segments are not supported in this version of Consul".to_string(),
            ));
        }
    }
    let entries: Vec<serde_json::Value> = node_coordinates(&handle)
        .iter()
        .filter(|(name, _)| node.is_none_or(|n| n == name))
        .map(|(name, c)| entry_json(name, c))
        .collect();
    let headers = index_header(ctx);
    if node.is_some() && entries.is_empty() {
        // Consul answers an unknown node with 404 and an empty body.
        reply.send(404, None, &headers, b"");
        return Ok(Outcome::Done);
    }
    reply.json(200, &headers, &entries);
    Ok(Outcome::Done)
}

/// `GET /v1/coordinate/datacenters`: every datacenter's servers with their WAN
/// coordinates, by datacenter name (Consul's `GetDatacenterMaps`). A client agent asks its
/// server.
pub fn datacenters(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    if ctx.is_client() {
        return Ok(Outcome::Forward);
    }
    let datacenter = ctx.config().datacenter.clone();
    if let Some(wan) = super::members::wan_handle(ctx) {
        let servers: HashMap<String, String> = wan
            .members()
            .iter()
            .filter(|m| m.status != MemberStatus::Left)
            .filter_map(|m| {
                let server = crate::cluster::pools::server_of(m)?;
                Some((m.name.clone(), server.datacenter))
            })
            .collect();
        // Every datacenter with a server is listed, with the coordinates known so far (a
        // server not probed yet has none), as Consul's `GetDatacenterMaps`.
        let mut maps: std::collections::BTreeMap<String, Vec<serde_json::Value>> =
            std::collections::BTreeMap::new();
        maps.entry(datacenter).or_default();
        for dc in servers.values() {
            maps.entry(dc.clone()).or_default();
        }
        for (name, c) in node_coordinates(&wan) {
            if let Some(dc) = servers.get(&name) {
                maps.entry(dc.clone())
                    .or_default()
                    .push(serde_json::json!({ "Node": name, "Coord": coordinate_json(&c) }));
            }
        }
        let body: Vec<serde_json::Value> = maps
            .into_iter()
            .map(|(dc, coordinates)| {
                serde_json::json!({
                    "Datacenter": dc,
                    "AreaID": "wan",
                    "Coordinates": coordinates,
                })
            })
            .collect();
        reply.json(200, b"", &body);
        return Ok(Outcome::Done);
    }
    // No WAN pool (`-serf-wan-port=-1`): this datacenter's servers from the LAN pool.
    let lan = super::members::lan_handle(ctx)?;
    let servers: std::collections::HashSet<String> = lan
        .members()
        .iter()
        .filter(|m| m.tags.get("role").map(String::as_str) == Some("consul"))
        .map(|m| m.name.clone())
        .collect();
    let coordinates: Vec<serde_json::Value> = node_coordinates(&lan)
        .iter()
        .filter(|(name, _)| servers.contains(name))
        .map(|(name, c)| {
            serde_json::json!({ "Node": format!("{name}.{datacenter}"), "Coord": coordinate_json(c) })
        })
        .collect();
    let body = serde_json::json!([{
        "Datacenter": datacenter,
        "AreaID": "wan",
        "Coordinates": coordinates,
    }]);
    reply.json(200, b"", &body);
    Ok(Outcome::Done)
}
