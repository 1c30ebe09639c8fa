//! A client agent's intentions as Consul's typed calls, as Consul's
//! `agent/intentions_endpoint.go` sends them: `POST /v1/connect/intentions` becomes
//! `Intention.Apply` `create`, `PUT /v1/connect/intentions/<id>` `update`, `PUT
//! /v1/connect/intentions/exact` `upsert` and the `DELETE`s `delete` (by ID, or by source
//! and destination); `GET /v1/connect/intentions` `Intention.List`, `GET
//! /v1/connect/intentions/<id>` and `/exact` `Intention.Get`, `/match` `Intention.Match`
//! and `/check` `Intention.Check`.
//!
//! The handler decodes a write's body (a bad one is the server's 400 before any call); the
//! server decides the write with the handler's own checks against its store, so a refusal
//! comes back in its words. A reply's intentions are read back into the store's sources
//! and rendered by the server's renderers (`consul::rpc::intention::Intention::to_doc`,
//! `api::intentions::send_rendered`), so the body is the server's byte for byte; the
//! headers come from the reply's `QueryMeta`.

use super::client::{bad_reply, call_mapped, error_of, query_options, read_timeout, write_in};
use super::client_catalog::headers;
use super::client_config::read_in;
use crate::api::authz::request_secret;
use crate::api::intentions::{check_doc, match_doc, send_rendered, NOT_FOUND};
use crate::api::{ApiError, Context, Outcome, Request, WriteResponder};
use crate::cluster::servers::Retry;
use crate::consul::config_entry::doc::Doc;
use crate::consul::config_entry::intention::LegacyIntention;
use crate::consul::rpc::intention::{
    read_apply_reply, read_check_response, read_indexed_intentions, read_matches, Check, Exact,
    Intention, IntentionListRequest, IntentionQueryRequest, IntentionRequest, Match,
};
use crate::shard::rpc_client::CallError;
use crate::store::mesh::intentions::{IntentionOp, SourceIntention};
use crate::store::CommandResult;

/// What a write answers once applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `{"ID": …}` with the server's ID (create, update).
    Id,
    /// `true`.
    True,
}

/// Which intention `Intention.Get` reads.
#[derive(Clone, Copy, Debug)]
pub enum Get<'a> {
    Id(&'a str),
    Exact {
        source: &'a str,
        destination: &'a str,
    },
}

/// A decoded legacy body as Consul's `structs.Intention`.
fn wire_of(ixn: &LegacyIntention) -> Intention<'_> {
    let permissions = if ixn.permissions_json.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&ixn.permissions_json).unwrap_or(serde_json::Value::Null)
    };
    Intention {
        id: &ixn.id,
        description: &ixn.description,
        source_peer: &ixn.source_peer,
        source_name: &ixn.source_name,
        destination_name: &ixn.destination_name,
        source_type: &ixn.source_type,
        action: &ixn.action,
        permissions,
        meta: ixn
            .meta
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        ..Intention::default()
    }
}

/// `Intention.Apply` of `op` with the decoded intention; the server decides and applies it.
pub fn apply(
    ctx: &Context,
    request: &Request,
    op: &'static str,
    ixn: &LegacyIntention,
    answer: Answer,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = IntentionRequest {
        datacenter,
        op,
        intention: Some(wire_of(ixn)),
        token: &secret,
    }
    .encode();
    // A write that may have reached a server is not sent again (a create would make two).
    write_in(
        ctx,
        datacenter,
        "Intention.Apply",
        body,
        move |body, reply| {
            match answer {
                Answer::Id => {
                    let id = read_apply_reply(body).map_err(bad_reply)?;
                    reply.json(200, b"", &serde_json::json!({ "ID": id }));
                }
                Answer::True => reply.json_bool(true),
            }
            Ok(())
        },
    )
}

/// The legacy body a stored source was made from.
fn legacy_of(id: &str, destination: &str, source: &SourceIntention) -> LegacyIntention {
    LegacyIntention {
        id: id.to_string(),
        source_name: source.name.to_string(),
        destination_name: destination.to_string(),
        source_type: source.source_type.to_string(),
        action: source.action.map(|a| a.as_str()).unwrap_or_default().into(),
        description: source.description.to_string(),
        meta: source.legacy_meta.clone().unwrap_or_default(),
        permissions_json: source.permissions_json.clone(),
        source_peer: source.peer.to_string(),
    }
}

/// A store command of the intentions API as `Intention.Apply`, the server's success handed
/// to `respond` as the command's result.
pub fn write_op(
    ctx: &Context,
    request: &Request,
    op: &IntentionOp,
    respond: WriteResponder,
) -> Outcome {
    let (name, ixn) = match op {
        IntentionOp::LegacyCreate {
            destination,
            source,
        } => ("create", legacy_of("", destination, source)),
        IntentionOp::LegacyUpdate {
            id,
            destination,
            source,
        } => ("update", legacy_of(id, destination, source)),
        IntentionOp::Upsert {
            destination,
            source,
        } => ("upsert", legacy_of("", destination, source)),
        IntentionOp::LegacyDelete { id } => (
            "delete",
            LegacyIntention {
                id: id.clone(),
                ..LegacyIntention::default()
            },
        ),
        IntentionOp::DeleteExact {
            destination,
            source,
        } => (
            "delete",
            LegacyIntention {
                source_name: source.clone(),
                destination_name: destination.clone(),
                ..LegacyIntention::default()
            },
        ),
    };
    let secret = request_secret(ctx, request);
    let body = IntentionRequest {
        datacenter: "",
        op: name,
        intention: Some(wire_of(&ixn)),
        token: &secret,
    }
    .encode();
    write_in(ctx, "", "Intention.Apply", body, move |_, reply| {
        respond(CommandResult::Bool(true), reply);
        Ok(())
    })
}

/// A read's failure as the server's HTTP answer: Consul's 404 for an intention that is not
/// there, else as any call's.
fn read_error(error: CallError) -> ApiError {
    match &error {
        CallError::Remote(text) if text == NOT_FOUND => ApiError::NotFound(text.clone()),
        _ => error_of(error),
    }
}

/// `GET /v1/connect/intentions/<id>` and `/exact`: `Intention.Get`.
pub fn get(
    ctx: &Context,
    request: &Request,
    which: Get,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let (intention_id, exact) = match which {
        Get::Id(id) => (id, None),
        Get::Exact {
            source,
            destination,
        } => (
            "",
            Some(Exact {
                source_name: source,
                destination_name: destination,
            }),
        ),
    };
    let body = IntentionQueryRequest {
        intention_id,
        exact,
        datacenter,
        options: query_options(&options, &secret),
        ..IntentionQueryRequest::default()
    }
    .encode();
    call_mapped(
        ctx,
        datacenter,
        "Intention.Get",
        body,
        read_timeout(&options),
        Retry::Always,
        read_error,
        move |body, reply| {
            let (meta, list) = read_indexed_intentions(body).map_err(bad_reply)?;
            let Some(ixn) = list.first() else {
                return Err(ApiError::NotFound(NOT_FOUND.to_string()));
            };
            let doc = ixn.to_doc().map_err(bad_reply)?;
            send_rendered(reply, &headers(&meta, &secret), &doc);
            Ok(())
        },
    )
}

/// `GET /v1/connect/intentions` (`?filter` travels as `Filter`): `Intention.List`.
pub fn list(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = IntentionListRequest {
        datacenter,
        legacy: true,
        options: query_options(&options, &secret),
    }
    .encode();
    read_in(
        ctx,
        datacenter,
        "Intention.List",
        body,
        &options,
        move |body, reply| {
            let (meta, list) = read_indexed_intentions(body).map_err(bad_reply)?;
            let docs = list
                .iter()
                .map(Intention::to_doc)
                .collect::<Result<Vec<Doc>, _>>()
                .map_err(bad_reply)?;
            send_rendered(reply, &headers(&meta, &secret), &Doc::List(docs));
            Ok(())
        },
    )
}

/// `GET /v1/connect/intentions/match`: `Intention.Match` of the names as parsed, answered
/// under the names as given.
pub fn match_intentions(
    ctx: &Context,
    request: &Request,
    by_destination: bool,
    names: Vec<(String, String)>,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = IntentionQueryRequest {
        matching: Some(Match {
            kind: if by_destination {
                "destination"
            } else {
                "source"
            },
            names: names.iter().map(|(_, name)| name.as_str()).collect(),
        }),
        datacenter,
        options: query_options(&options, &secret),
        ..IntentionQueryRequest::default()
    }
    .encode();
    read_in(
        ctx,
        datacenter,
        "Intention.Match",
        body,
        &options,
        move |body, reply| {
            let (meta, matches) = read_matches(body).map_err(bad_reply)?;
            if matches.len() != names.len() {
                return Err(ApiError::Internal(
                    "rpc error: malformed reply: a match for each name".to_string(),
                ));
            }
            let mut found = Vec::with_capacity(names.len());
            for ((given, _), list) in names.into_iter().zip(matches) {
                let docs = list
                    .iter()
                    .map(Intention::to_doc)
                    .collect::<Result<Vec<Doc>, _>>()
                    .map_err(bad_reply)?;
                found.push((given, docs));
            }
            send_rendered(reply, &headers(&meta, &secret), &match_doc(found));
            Ok(())
        },
    )
}

/// `GET /v1/connect/intentions/check`: `Intention.Check`.
pub fn check(
    ctx: &Context,
    request: &Request,
    source: &str,
    destination: &str,
    source_type: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = IntentionQueryRequest {
        check: Some(Check {
            source_name: source,
            destination_name: destination,
            source_type,
        }),
        datacenter,
        options: query_options(&options, &secret),
        ..IntentionQueryRequest::default()
    }
    .encode();
    read_in(
        ctx,
        datacenter,
        "Intention.Check",
        body,
        &options,
        move |body, reply| {
            let (meta, allowed) = read_check_response(body).map_err(bad_reply)?;
            send_rendered(reply, &headers(&meta, &secret), &check_doc(allowed));
            Ok(())
        },
    )
}

/// The intentions requests naming another datacenter (`?dc=`), as their typed calls naming
/// it ([`super::client::across_datacenters`]), parsed and checked by the handlers
/// (`api::intentions::elsewhere`); `None` for the others.
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    crate::api::intentions::elsewhere(ctx, request, datacenter)
}
