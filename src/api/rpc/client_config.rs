//! A client agent's config entries as Consul's typed calls: `GET /v1/config/<kind>/<name>`
//! becomes `ConfigEntry.Get`, `GET /v1/config/<kind>` `ConfigEntry.List`, `GET
//! /v1/config/` (every kind) `ConfigEntry.ListAll` naming every kind, and the writes the
//! handlers decide on (`PUT /v1/config`, `DELETE /v1/config/<kind>/<name>`, with `?cas`)
//! `ConfigEntry.Apply` and `ConfigEntry.Delete`, as Consul's `config_endpoint.go` on the
//! agent sends them; `GET` and `POST /v1/discovery-chain/<service>` become
//! `DiscoveryChain.Get` ([`discovery_chain`]).
//!
//! The body of a write is decoded and validated here by the handler, as on a server, and
//! again by the server that applies it. A reply's entries are read back into the store's
//! entries (`consul::config_entry::decode_stored`) and answered by the server's own
//! functions (`api::config::entry_answer`, `list_answer`), so the body is the server's
//! byte for byte; the headers come from the reply's `QueryMeta`.

use super::client::{bad_reply, call, query_options, read_timeout, write_in};
use super::client_catalog::headers;
use crate::api::authz::request_secret;
use crate::api::config::{chain_answer, entry_answer, list_answer};
use crate::api::{ApiError, Context, Outcome, Request, WriteResponder};
use crate::cluster::servers::Retry;
use crate::consul::rpc::config_entry::{
    entry_fields, entry_of, read_delete_response, read_entry_response, read_generic_entries,
    read_indexed_entries, ConfigEntryListAllRequest, ConfigEntryQuery, ConfigEntryRequest,
};
use crate::store::mesh::config_entry::{ConfigEntry, ConfigEntryOp, ConfigKind};
use crate::store::CommandResult;

/// `GET /v1/config/<kind>/<name>`: `ConfigEntry.Get`.
pub fn get(
    ctx: &Context,
    request: &Request,
    kind: ConfigKind,
    kind_text: &str,
    name: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = ConfigEntryQuery {
        kind: kind.as_str(),
        name,
        datacenter,
        options: query_options(&options, &secret),
    }
    .encode();
    let (kind_text, name) = (kind_text.to_string(), name.to_string());
    read_in(
        ctx,
        datacenter,
        "ConfigEntry.Get",
        body,
        &options,
        move |body, reply| {
            let (meta, fields) = read_entry_response(body).map_err(bad_reply)?;
            let entry = fields
                .as_ref()
                .map(entry_of)
                .transpose()
                .map_err(bad_reply)?;
            let headers = headers(&meta, &secret);
            entry_answer(entry.as_ref(), &kind_text, &name, &headers, reply);
            Ok(())
        },
    )
}

/// `GET /v1/config/<kind>` (`ConfigEntry.List`) or `GET /v1/config/` (`kind` `None`:
/// `ConfigEntry.ListAll` naming every kind).
pub fn list(
    ctx: &Context,
    request: &Request,
    kind: Option<ConfigKind>,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let rpc_options = query_options(&options, &secret);
    let (method, body) = match kind {
        Some(kind) => (
            "ConfigEntry.List",
            ConfigEntryQuery {
                kind: kind.as_str(),
                name: "",
                datacenter,
                options: rpc_options,
            }
            .encode(),
        ),
        None => (
            "ConfigEntry.ListAll",
            ConfigEntryListAllRequest {
                kinds: ConfigKind::ALL.iter().map(|k| k.as_str()).collect(),
                datacenter,
                options: rpc_options,
            }
            .encode(),
        ),
    };
    read_in(
        ctx,
        datacenter,
        method,
        body,
        &options,
        move |body, reply| {
            let (meta, fields) = if kind.is_some() {
                read_indexed_entries(body)
            } else {
                read_generic_entries(body)
            }
            .map_err(bad_reply)?;
            let entries = fields
                .iter()
                .map(entry_of)
                .collect::<Result<Vec<ConfigEntry>, _>>()
                .map_err(bad_reply)?;
            let visible: Vec<&ConfigEntry> = entries.iter().collect();
            list_answer(&visible, &headers(&meta, &secret), reply);
            Ok(())
        },
    )
}

/// A config entry write the handler decided on, as `ConfigEntry.Apply` or
/// `ConfigEntry.Delete`; the server's reply goes to the handler's responder as the command
/// result the server's store produced.
pub fn write_op(
    ctx: &Context,
    request: &Request,
    op: &ConfigEntryOp,
    respond: WriteResponder,
) -> Outcome {
    write_op_in(ctx, request, op, respond, "")
}

/// [`write_op`] in `datacenter` (empty: this one).
fn write_op_in(
    ctx: &Context,
    request: &Request,
    op: &ConfigEntryOp,
    respond: WriteResponder,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let (method, body) = match op {
        ConfigEntryOp::Set { entry, cas } => {
            let mut fields = entry_fields(entry);
            // Consul's agent puts a CAS index in the entry's `ModifyIndex`.
            fields["ModifyIndex"] = serde_json::Value::from(cas.unwrap_or(0));
            let request = ConfigEntryRequest {
                op: if cas.is_some() {
                    "upsert-cas"
                } else {
                    "upsert"
                },
                datacenter,
                kind: entry.kind.as_str(),
                entry: fields,
                token: &secret,
            };
            ("ConfigEntry.Apply", request.encode())
        }
        ConfigEntryOp::Delete { kind, name, cas } => {
            let mut fields = serde_json::json!({ "Kind": kind.as_str(), "Name": name });
            if let Some(cas) = cas {
                fields["ModifyIndex"] = serde_json::Value::from(*cas);
            }
            let request = ConfigEntryRequest {
                op: if cas.is_some() {
                    "delete-cas"
                } else {
                    "delete"
                },
                datacenter,
                kind: kind.as_str(),
                entry: fields,
                token: &secret,
            };
            ("ConfigEntry.Delete", request.encode())
        }
        // The intentions API's writes are `Intention.Apply` (`client_intention`).
        ConfigEntryOp::Intention(op) => {
            return super::client_intention::write_op(ctx, request, op, respond)
        }
        // Bootstrap entries are the servers' own, never a client agent's write.
        ConfigEntryOp::Bootstrap { .. } => return super::client::no_call_for_write(),
    };
    // A write that may have reached a server is not sent again (a CAS could fail the
    // second time and hide that the first applied).
    write_in(ctx, datacenter, method, body, move |body, reply| {
        let done = if method == "ConfigEntry.Delete" {
            read_delete_response(body).map_err(bad_reply)?
        } else {
            crate::proto::msgpack::Reader::new(body)
                .bool()
                .map_err(bad_reply)?
        };
        respond(CommandResult::Bool(done), reply);
        Ok(())
    })
}

/// `GET` and `POST /v1/discovery-chain/<service>`: `DiscoveryChain.Get` with the request's
/// overrides, the chain rendered by the server's own renderer (`api::config::chain_answer`).
pub fn discovery_chain(
    ctx: &Context,
    request: &Request,
    service: &str,
    datacenter: &str,
    overrides: &crate::consul::discovery_chain::Overrides,
    options: crate::api::QueryOptions,
    call_datacenter: &str,
) -> Outcome {
    use crate::consul::config_entry::doc::Doc;
    use crate::consul::rpc::discovery_chain::{read_response, DiscoveryChainRequest};
    let secret = request_secret(ctx, request).into_owned();
    let body = DiscoveryChainRequest {
        name: service,
        evaluate_in_datacenter: datacenter,
        override_mesh_gateway_mode: overrides.mesh_gateway.as_str(),
        override_protocol: overrides.protocol.as_deref().unwrap_or_default(),
        override_connect_timeout_ns: overrides.connect_timeout_ns.unwrap_or(0),
        datacenter: call_datacenter,
        options: query_options(&options, &secret),
    }
    .encode();
    read_in(
        ctx,
        call_datacenter,
        "DiscoveryChain.Get",
        body,
        &options,
        move |body, reply| {
            let (meta, chain) = read_response(body).map_err(bad_reply)?;
            let doc = Doc::Obj(vec![("Chain".to_string(), chain)]);
            chain_answer(&doc, &headers(&meta, &secret), reply);
            Ok(())
        },
    )
}

/// A read's query options: checked against this datacenter as the handler does when the
/// read is this datacenter's (`datacenter` empty), else parsed only (another datacenter's
/// servers answer it).
pub fn options_in(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Result<crate::api::QueryOptions, ApiError> {
    if datacenter.is_empty() {
        crate::api::query_options(ctx, &request.query)
    } else {
        crate::api::query_options_in(ctx, &request.query)
    }
}

/// A read made after the handler returned, in `datacenter` (empty: this one): sent again
/// on another server if one cannot be reached, waiting as long as its blocking query may.
pub(super) fn read_in(
    ctx: &Context,
    datacenter: &str,
    method: &'static str,
    body: Vec<u8>,
    options: &crate::api::QueryOptions,
    respond: impl FnOnce(&[u8], &mut crate::api::Reply) -> Result<(), ApiError> + 'static,
) -> Outcome {
    call(
        ctx,
        datacenter,
        method,
        body,
        read_timeout(options),
        Retry::Always,
        respond,
    )
}

/// The config entry and discovery chain requests naming another datacenter (`?dc=`), as
/// their typed calls naming it ([`super::client::across_datacenters`]): parsed and checked
/// as the handlers do (the same errors), answered as they answer.
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    use crate::proto::http::Method;
    let path = request.path;
    if path.starts_with("/v1/discovery-chain/") {
        return Some(crate::api::config::discovery_chain_elsewhere(
            ctx, request, datacenter,
        ));
    }
    let write = |outcome: Result<Outcome, ApiError>| {
        outcome.and_then(|outcome| match outcome {
            Outcome::Write(op) => match &op.command {
                crate::store::Command::ConfigEntry(config_op) => {
                    Ok(write_op_in(ctx, request, config_op, op.respond, datacenter))
                }
                _ => Err(ApiError::Internal("not a config entry write".to_string())),
            },
            other => Ok(other),
        })
    };
    if path == "/v1/config" && request.method == Method::Put {
        return Some(write(crate::api::config::apply_op(request)));
    }
    if !path.starts_with("/v1/config/") {
        return None;
    }
    Some(match request.method {
        Method::Delete => write(crate::api::config::delete_op(request)),
        _ => crate::api::config::get_elsewhere(ctx, request, datacenter),
    })
}
