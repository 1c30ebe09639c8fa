//! `/v1/event/fire/<name>` and `/v1/event/list`: Consul's user events over the LAN pool.
//!
//! Firing wraps the request in Consul's envelope (a fresh UUID, the filters, version 1)
//! and broadcasts it as the serf event `consul:event:<name>`; every agent, this one
//! included, records it if the filters match it (see [`crate::cluster::user_events`]).
//! Listing reads this agent's ring of recent events; a blocking list (`?index=`) waits
//! until the newest matching event's UUID-derived index differs from the one given.

use super::authz::RowFilter;
use super::members::lan_handle;
use super::{check_datacenter, ApiError, AsyncResponder, Context, Outcome, Reply, Request};
use crate::consul::user_event::{list_index, validate_filters, ConsulEvent, EVENT_VERSION_MAX};
use std::sync::Arc;
use std::time::Instant;

/// `PUT /v1/event/fire/<name>`. With `?dc=` naming another datacenter the event is fired
/// there: `Internal.EventFire` naming it, as Consul's agent sends it
/// ([`crate::api::rpc::event`]).
pub fn fire(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    let name = request.rest;
    let elsewhere = super::other_datacenter(ctx, &request.query);
    if name.is_empty() {
        return Err(ApiError::bad_request("Missing name"));
    }
    let param = |key: &str| request.query.get(key).unwrap_or("").to_string();
    let event = ConsulEvent {
        id: uuid::Uuid::new_v4().to_string(),
        name: name.to_string(),
        payload: if request.body.is_empty() {
            None
        } else {
            Some(request.body.to_vec())
        },
        node_filter: param("node"),
        service_filter: param("service"),
        tag_filter: param("tag"),
        version: EVENT_VERSION_MAX,
        ltime: 0,
    };
    validate_filters(&event).map_err(ApiError::BadRequest)?;
    if let Some(datacenter) = elsewhere {
        return Ok(super::rpc::event::fire_in(ctx, request, event, &datacenter));
    }
    let handle = lan_handle(ctx)?;
    let serf_name = format!("{}{}", crate::consul::user_event::EVENT_NAME_PREFIX, name);
    let envelope = event.encode();
    Ok(Outcome::Async(Box::pin(async move {
        let result = handle.fire_user_event(&serf_name, &envelope, false).await;
        Box::new(move |reply: &mut Reply| match result {
            Ok(()) => reply.json(200, b"", &event.to_json()),
            Err(e) => reply.error(&ApiError::Internal(e.to_string())),
        }) as AsyncResponder
    })))
}

/// The recent events named `name` (all when empty), oldest first, that the token may read
/// (all with ACLs off), the list's index, and whether the token hid any.
fn matching(
    shard_log: &crate::cluster::user_events::EventLog,
    name: &str,
    rows: &RowFilter,
) -> (Vec<Arc<ConsulEvent>>, u64, bool) {
    let mut events = shard_log.events();
    if !name.is_empty() {
        events.retain(|e| e.name == name);
    }
    let hidden = rows.retain(&mut events, |rows, e| rows.event(&e.name));
    let index = list_index(&events);
    (events, index, hidden)
}

fn respond(
    reply: &mut Reply,
    rows: &RowFilter,
    events: &[Arc<ConsulEvent>],
    index: u64,
    hidden: bool,
) {
    let body: Vec<serde_json::Value> = events.iter().map(|e| e.to_json()).collect();
    let mut headers = Vec::with_capacity(64);
    headers.extend_from_slice(b"X-Consul-Index: ");
    crate::proto::http::push_u64(&mut headers, index);
    headers.extend_from_slice(b"\r\n");
    rows.write_header(hidden, &mut headers);
    reply.json(200, &headers, &body);
}

/// `GET /v1/event/list`.
pub fn list(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    let name = request.query.get("name").unwrap_or("").to_string();
    let min_index = match request.query.get("index") {
        None | Some("") => 0,
        Some(text) => text
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request("Invalid index"))?,
    };
    let wait = super::blocking_wait(ctx.config(), request.query.get("wait"))?;
    let log = ctx.events().clone();
    let rows = RowFilter::of(request);
    let (events, index, filtered) = matching(&log, &name, &rows);
    // The index is a hash of the newest event's ID, not a counter: any other value means
    // something new arrived since the client's read.
    if min_index == 0 || index != min_index {
        respond(reply, &rows, &events, index, filtered);
        return Ok(Outcome::Done);
    }
    let jitter = wait / super::BLOCKING_JITTER_FRACTION;
    let deadline = Instant::now()
        + wait
        + if jitter.is_zero() {
            jitter
        } else {
            jitter.mul_f64(rand::random::<f64>())
        };
    Ok(Outcome::Async(Box::pin(async move {
        loop {
            let woken = log.subscribe();
            let (events, index, filtered) = matching(&log, &name, &rows);
            let remaining = deadline.saturating_duration_since(Instant::now());
            if index != min_index || remaining.is_zero() {
                return Box::new(move |reply: &mut Reply| {
                    respond(reply, &rows, &events, index, filtered)
                }) as AsyncResponder;
            }
            let _ = monoio::time::timeout(remaining, woken.recv_async()).await;
        }
    })))
}
