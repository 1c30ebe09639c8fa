//! A client agent's peering endpoints as typed calls — and a follower's, for the writes and
//! leader reads only the leader answers, and any server's for a request naming another
//! datacenter (`?dc=`, [`across_datacenters`]):
//!
//! | HTTP | typed call |
//! |---|---|
//! | `POST /v1/peering/token` | `Peering.GenerateToken` (praetor's own) |
//! | `POST /v1/peering/establish` | `Peering.Establish` (praetor's own) |
//! | `GET /v1/peering/<name>` (blocking) | `Peering.Read` (praetor's own) |
//! | `GET /v1/peerings` (blocking) | `Peering.List` (praetor's own) |
//! | `DELETE /v1/peering/<name>` | `Peering.Delete` (praetor's own) |
//! | `GET /v1/exported-services` (blocking) | `ConfigEntry.GetResolvedExportedServices` |
//!
//! Consul's agents reach peering through gRPC, so the `Peering` methods are praetor's own
//! (see `docs/decisions.md`, *peering as typed calls*). The handlers (`api::peering`) parse
//! and check the request first, as on a server (a bad body is the server's 400 before any
//! call); the server checks the token. Replies are read back into the store's rows and
//! rendered by the server's own renderers, so the body is the server's. A refusal the
//! leader's handler answers with a status of its own (400 for a peering within the same
//! cluster, 403 for a used token) comes back as its text and gets that status again
//! ([`refusal`]).

use super::client::{
    bad_reply, call, call_mapped, meta_of, query_options, read_timeout, write_error, CALL_TIMEOUT,
};
use crate::api::authz::request_secret;
use crate::api::peering::{
    deleted_answer, empty_answer, exported_answer, list_answer, read_answer, token_answer,
    EstablishArgs, TokenArgs,
};
use crate::api::{ApiError, Context, Outcome, Request};
use crate::cluster::servers::Retry;
use crate::consul::rpc::peering::{
    decode_exported_services, decode_list_reply, decode_read_reply, decode_token_reply,
    EstablishRequest, GenerateTokenRequest, PartitionRequest, PeeringNameRequest,
};
use crate::shard::rpc_client::CallError;

/// The datacenter a request names: `datacenter`, or this agent's when empty (as Consul's
/// agent fills `Datacenter` in).
fn named<'a>(ctx: &'a Context, datacenter: &'a str) -> &'a str {
    if datacenter.is_empty() {
        &ctx.config().datacenter
    } else {
        datacenter
    }
}

/// The leader's refusals that its handler answers with a status of their own, by the
/// start of their text.
const REFUSALS: &[(&str, u16)] = &[
    ("cannot create a peering within the same cluster", 400),
    ("a new peering token must be generated", 403),
    ("Partitions are a Consul Enterprise feature", 400),
    ("PeerName is required", 400),
    ("PeeringToken is required", 400),
];

/// A failed peering write as the HTTP answer the leader's own handler gives it.
fn refusal(error: CallError) -> ApiError {
    if let CallError::Remote(text) = &error {
        if let Some((_, status)) = REFUSALS.iter().find(|(start, _)| text.starts_with(start)) {
            return match status {
                400 => ApiError::bad_request(text.clone()),
                status => ApiError::Status(*status, text.clone()),
            };
        }
    }
    write_error(error)
}

/// A peering write, sent once unless it certainly never left.
fn peering_write(
    ctx: &Context,
    datacenter: &str,
    method: &'static str,
    body: Vec<u8>,
    respond: impl FnOnce(&[u8], &mut crate::api::Reply) -> Result<(), ApiError> + 'static,
) -> Outcome {
    call_mapped(
        ctx,
        datacenter,
        method,
        body,
        CALL_TIMEOUT,
        Retry::NotSent,
        refusal,
        respond,
    )
}

/// `POST /v1/peering/token`: `Peering.GenerateToken` on the leader of `datacenter` (empty:
/// this one).
pub fn generate_token(
    ctx: &Context,
    request: &Request,
    args: &TokenArgs,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = GenerateTokenRequest {
        datacenter: named(ctx, datacenter),
        meta: args
            .meta
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        partition: "",
        peer_name: &args.name,
        server_external_addresses: args.external.iter().map(String::as_str).collect(),
        token: &secret,
    }
    .encode();
    peering_write(
        ctx,
        datacenter,
        "Peering.GenerateToken",
        body,
        |body, reply| {
            let text = decode_token_reply(body).map_err(bad_reply)?;
            token_answer(text, reply);
            Ok(())
        },
    )
}

/// `POST /v1/peering/establish`: `Peering.Establish` on the leader of `datacenter` (empty:
/// this one).
pub fn establish(
    ctx: &Context,
    request: &Request,
    args: &EstablishArgs,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = EstablishRequest {
        datacenter: named(ctx, datacenter),
        meta: args
            .meta
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        partition: "",
        peer_name: &args.name,
        peering_token: &args.text,
        token: &secret,
    }
    .encode();
    peering_write(ctx, datacenter, "Peering.Establish", body, |_, reply| {
        empty_answer(reply);
        Ok(())
    })
}

/// `DELETE /v1/peering/<name>`: `Peering.Delete` on the leader of `datacenter` (empty:
/// this one).
pub fn delete(ctx: &Context, request: &Request, name: &str, datacenter: &str) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = PeeringNameRequest {
        datacenter: named(ctx, datacenter),
        name,
        partition: "",
        options: crate::consul::rpc::QueryOptions {
            token: &secret,
            ..Default::default()
        },
    }
    .encode_write();
    peering_write(ctx, datacenter, "Peering.Delete", body, |_, reply| {
        deleted_answer(reply);
        Ok(())
    })
}

/// `GET /v1/peering/<name>`: `Peering.Read` of `datacenter` (empty: this one), blocking as
/// the server's read does.
pub fn read(
    ctx: &Context,
    request: &Request,
    name: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = PeeringNameRequest {
        datacenter: named(ctx, datacenter),
        name,
        partition: "",
        options: query_options(&options, &secret),
    }
    .encode();
    let name = name.to_string();
    call(
        ctx,
        datacenter,
        "Peering.Read",
        body,
        read_timeout(&options),
        Retry::Always,
        move |body, reply| {
            let (meta, row) = decode_read_reply(body).map_err(bad_reply)?;
            read_answer(&name, row.as_ref(), meta_of(&meta), reply);
            Ok(())
        },
    )
}

/// A read of the whole partition (`PartitionRequest`) by `method` in `datacenter` (empty:
/// this one), its reply rendered by `respond`: the peering list and the exported services.
fn partition_read(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
    method: &'static str,
    respond: impl FnOnce(&[u8], &mut crate::api::Reply) -> Result<(), ApiError> + 'static,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = PartitionRequest {
        datacenter: named(ctx, datacenter),
        partition: "",
        options: query_options(&options, &secret),
    }
    .encode();
    call(
        ctx,
        datacenter,
        method,
        body,
        read_timeout(&options),
        Retry::Always,
        respond,
    )
}

/// `GET /v1/peerings`: `Peering.List` of `datacenter` (empty: this one).
pub fn list(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    partition_read(
        ctx,
        request,
        options,
        datacenter,
        "Peering.List",
        |body, reply| {
            let (meta, rows) = decode_list_reply(body).map_err(bad_reply)?;
            let rows: Vec<_> = rows.iter().collect();
            list_answer(&rows, meta_of(&meta), reply);
            Ok(())
        },
    )
}

/// `GET /v1/exported-services`: `ConfigEntry.GetResolvedExportedServices` of `datacenter`
/// (empty: this one).
pub fn exported_services(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    partition_read(
        ctx,
        request,
        options,
        datacenter,
        "ConfigEntry.GetResolvedExportedServices",
        |body, reply| {
            let (meta, services) = decode_exported_services(body).map_err(bad_reply)?;
            exported_answer(&services, meta_of(&meta), reply);
            Ok(())
        },
    )
}

/// The peering requests that name another datacenter (`?dc=`), as their typed calls
/// naming it ([`super::client::across_datacenters`]); `None` for other paths.
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    crate::api::peering::across(ctx, request, datacenter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leaders_own_statuses_come_back() {
        let remote = |text: &str| refusal(CallError::Remote(text.to_string())).status();
        assert_eq!(
            remote("cannot create a peering within the same cluster \"x\". Refer to …"),
            400
        );
        assert_eq!(
            remote("a new peering token must be generated: this token was already used"),
            403
        );
        assert_eq!(
            remote("Permission denied: token lacks permission 'peering:write'"),
            403
        );
        assert_eq!(remote("No cluster leader"), 500);
    }
}
