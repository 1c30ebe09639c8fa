//! `/v1/coordinate/nodes`, `/v1/coordinate/node/<node>`, `/v1/coordinate/datacenters` and
//! `PUT /v1/coordinate/update`: serf's Vivaldi coordinates.
//!
//! Consul serves node coordinates from the catalog, where agents upload their own; praetor
//! answers a gossip member's coordinate from the agent's pool directly (every probe's ack
//! carries the peer's coordinate, see `crate::gossip::coordinate`), which holds the same
//! coordinate that node computes for itself. `PUT /v1/coordinate/update` writes a
//! coordinate into the catalog (`CatalogOp::Coordinates`) for what gossip cannot know:
//! nodes outside the pool, such as the external nodes consul-esm measures. A read answers
//! a pool member from the pool and any other catalog node from its stored coordinate; so
//! does `?near=`. Members that left are not listed. `datacenters` lists every
//! datacenter's servers from the WAN pool when it runs, else this one's from the LAN pool.

use super::{check_datacenter, ApiError, Context, Outcome, Reply, Request, WriteOp};
use crate::cluster::gossip::GossipHandle;
use crate::consul::body::{parse_strict, Obj};
use crate::gossip::coordinate::{distance_seconds, Coordinate};
use crate::gossip::MemberStatus;
use crate::store::catalog::{CatalogOp, CoordinateUpdate, NodeCoordinate};
use crate::store::{CatalogResult, StoreVersion};
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

/// A coordinate the catalog stores, in gossip's type.
fn from_stored(stored: &NodeCoordinate) -> Coordinate {
    Coordinate {
        vec: stored.vec.clone(),
        error: stored.error,
        adjustment: stored.adjustment,
        height: stored.height,
    }
}

/// The coordinate the catalog stores for `node` (written by `/v1/coordinate/update`).
fn stored_coordinate(version: &StoreVersion, node: &str) -> Option<Coordinate> {
    let stored = version
        .catalog
        .coordinates
        .get(&*crate::store::catalog::rows::fold(node))?;
    Some(from_stored(stored))
}

/// Every pool member's coordinate and, for catalog nodes outside the pool, the stored one;
/// sorted by node name.
pub(crate) fn all_coordinates(ctx: &Context, handle: &GossipHandle) -> Vec<(String, Coordinate)> {
    let mut out = node_coordinates(handle);
    let version = ctx.current_version();
    for stored in version.catalog.coordinates.values() {
        if !out
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(&stored.node))
        {
            out.push((stored.node.to_string(), from_stored(stored)));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
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
    distances_from_handle(ctx.lan()?, &ctx.current_version(), near)
}

/// [`distances_from`] over a LAN pool handle and the store `version` holding the catalog's
/// stored coordinates, for work that runs after its handler.
pub fn distances_from_handle(
    handle: &GossipHandle,
    version: &StoreVersion,
    near: &str,
) -> Option<HashMap<String, f64>> {
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
        match coordinates.get(near) {
            Some(c) => c.clone(),
            None => stored_coordinate(version, near)?,
        }
    };
    let mut distances: HashMap<String, f64> = version
        .catalog
        .coordinates
        .values()
        .map(|c| {
            (
                c.node.to_string(),
                distance_seconds(&origin, &from_stored(c)),
            )
        })
        .collect();
    distances.extend(
        coordinates
            .iter()
            .map(|(name, c)| (name.clone(), distance_seconds(&origin, c))),
    );
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
    let version = ctx.current_version();
    let lookup = |name: &str| -> Option<Coordinate> {
        if name == handle.local_name() {
            Some((*local).clone())
        } else {
            coordinates
                .get(name)
                .cloned()
                .or_else(|| stored_coordinate(&version, name))
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
    // The list leaves out nodes the token may not read; `/node/<n>` was checked before.
    let rows = super::authz::RowFilter::of(request);
    let mut coordinates: Vec<(String, Coordinate)> = all_coordinates(ctx, &handle)
        .into_iter()
        .filter(|(name, _)| node.is_none_or(|n| n == name))
        .collect();
    let hidden = node.is_none() && rows.retain(&mut coordinates, |rows, (name, _)| rows.node(name));
    let entries: Vec<serde_json::Value> = coordinates
        .iter()
        .map(|(name, c)| entry_json(name, c))
        .collect();
    let mut headers = index_header(ctx);
    rows.write_header(hidden, &mut headers);
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
/// server (`Coordinate.ListDatacenters`) and answers the server's list as it came.
pub fn datacenters(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    if ctx.is_client() {
        return Ok(super::rpc::client_internal::coordinate_datacenters(ctx));
    }
    reply.json(200, b"", &datacenter_maps(ctx)?);
    Ok(Outcome::Done)
}

/// The `DatacenterMap`s of `GET /v1/coordinate/datacenters` on a server, as JSON values:
/// what the HTTP answer and `Coordinate.ListDatacenters` both carry.
pub fn datacenter_maps(ctx: &Context) -> Result<serde_json::Value, ApiError> {
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
        return Ok(serde_json::Value::Array(body));
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
    Ok(serde_json::json!([{
        "Datacenter": datacenter,
        "AreaID": "wan",
        "Coordinates": coordinates,
    }]))
}

/// Consul's wording for a coordinate that carries a non-finite number (or none at all).
const INVALID_COORDINATE: &str = "invalid coordinate";
/// Consul's wording for a coordinate of another dimensionality than this agent's.
const INCOMPATIBLE_COORDINATE: &str = "incompatible coordinate";

/// Reads one number of a coordinate; absent is zero, as Go decodes it.
fn coordinate_number(obj: &Obj, name: &str) -> Result<f64, ApiError> {
    match obj.get(&[name]) {
        None | Some(serde_json::Value::Null) => Ok(0.0),
        Some(value) => value.as_f64().ok_or_else(|| {
            ApiError::bad_request(format!(
                "Request decode failed: Coord.{name}: expected a number, got {value}"
            ))
        }),
    }
}

/// `PUT /v1/coordinate/update`: stores a node's coordinate in the catalog (Consul's
/// `Coordinate.Update`). The body is `{"Node", "Segment", "Coord": {"Vec", "Error",
/// "Adjustment", "Height"}}`; a coordinate with a non-finite number is "invalid", one of
/// another dimensionality than this agent's "incompatible", both answered 500 as Consul's
/// RPC errors are. A node the catalog does not hold is accepted and dropped, as in Consul.
/// Success is 200 with an empty body.
pub fn update(ctx: &Context, request: &Request, _reply: &mut Reply) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    let decode_failed = |e: String| ApiError::bad_request(format!("Request decode failed: {e}"));
    let value = parse_strict(request.body, &crate::consul::bodies::COORDINATE_UPDATE)
        .map_err(decode_failed)?;
    let obj = Obj::new(&value).map_err(decode_failed)?;
    let node = obj.string(&["node"]).map_err(decode_failed)?;
    let segment = obj.string(&["segment"]).map_err(decode_failed)?;
    let Some(coord) = obj.obj(&["coord"]).map_err(decode_failed)? else {
        return Err(ApiError::Internal(INVALID_COORDINATE.to_string()));
    };
    let vec: Vec<f64> = match coord.get(&["vec"]) {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_f64().ok_or_else(|| {
                    decode_failed(format!("Coord.Vec: expected numbers, got {item}"))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(decode_failed(format!(
                "Coord.Vec: expected a list of numbers, got {other}"
            )))
        }
    };
    let update = CoordinateUpdate {
        node,
        segment,
        vec,
        error: coordinate_number(&coord, "error")?,
        adjustment: coordinate_number(&coord, "adjustment")?,
        height: coordinate_number(&coord, "height")?,
    };
    let finite = update.vec.iter().all(|x| x.is_finite())
        && [update.error, update.adjustment, update.height]
            .iter()
            .all(|x| x.is_finite());
    if !finite {
        return Err(ApiError::Internal(INVALID_COORDINATE.to_string()));
    }
    let dimensions = match ctx.lan() {
        Some(handle) => handle.local_coordinate().vec.len(),
        None => crate::gossip::coordinate::VivaldiConfig::default().dimensionality,
    };
    if update.vec.len() != dimensions {
        return Err(ApiError::Internal(INCOMPATIBLE_COORDINATE.to_string()));
    }
    Ok(Outcome::Write(WriteOp::catalog(
        CatalogOp::Coordinates(vec![update]),
        |result, reply| match result {
            CatalogResult::Refused(reason) => reply.error(&ApiError::Internal(reason)),
            CatalogResult::Written => reply.send(200, None, b"", b""),
        },
    )))
}
