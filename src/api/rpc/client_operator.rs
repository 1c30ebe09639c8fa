//! A client agent's operator endpoints as Consul's typed calls, as Consul's agent sends
//! them (`agent/operator_endpoint.go`; the CA configuration's are `client_connect`'s):
//!
//! | HTTP on the agent | typed call |
//! |---|---|
//! | `GET /v1/operator/raft/configuration` | `Operator.RaftGetConfiguration` |
//! | `DELETE /v1/operator/raft/peer?address=` / `?id=` | `Operator.RaftRemovePeerByAddress` / `ByID` |
//! | `GET` / `PUT /v1/operator/autopilot/configuration` (`?cas`) | `Operator.AutopilotGetConfiguration` / `SetConfiguration` |
//! | `GET /v1/operator/autopilot/health` | `Operator.ServerHealth` |
//! | `GET /v1/operator/autopilot/state` | `Operator.AutopilotState` |
//! | `GET /v1/operator/usage` | `Operator.Usage` |
//! | `POST` / `PUT /v1/operator/raft/transfer-leader` (`?id`) | `Operator.TransferLeader` (praetor's own) |
//!
//! The operator's requests naming another datacenter (`?dc=`) are the same calls naming it
//! ([`across_datacenters`]), which this agent's server (or this server, through the WAN
//! router) hands to a server there.
//!
//! The handlers decode and check the request first, as on a server (a bad body is the
//! server's 400 before any call); the server checks the token. Replies are read back into
//! the values the server's own handlers render (`api::operator`), so the body is the
//! server's. None of these replies carries `QueryMeta`.

use super::client::{
    bad_reply, call, meta_of, query_options, read_timeout, write_in, CALL_TIMEOUT,
};
use crate::api::authz::request_secret;
use crate::api::operator::{
    configuration_json, health_answer, raft_configuration_answer, state_answer, usage_answer,
};
use crate::api::{ApiError, Context, Outcome, Request, WriteResponder};
use crate::cluster::servers::Retry;
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::operator::{
    decode_health, decode_state, decode_usage, read_autopilot_config, AutopilotSetConfigRequest,
    RaftConfiguration, RaftRemovePeerRequest,
};
use crate::consul::rpc::QueryOptions as RpcQueryOptions;
use crate::proto::msgpack::Reader;
use crate::store::autopilot::{AutopilotConfig, AutopilotOp};
use crate::store::AutopilotResult;

/// The datacenter a request names: `datacenter`, or this agent's when empty (as Consul's
/// agent fills `Datacenter` in).
fn named<'a>(ctx: &'a Context, datacenter: &'a str) -> &'a str {
    if datacenter.is_empty() {
        &ctx.config().datacenter
    } else {
        datacenter
    }
}

/// A `DCSpecificRequest` for `datacenter` (empty: this one) with the request's options
/// and token.
fn dc_request_in(ctx: &Context, options: RpcQueryOptions, datacenter: &str) -> Vec<u8> {
    DcSpecificRequest {
        datacenter: named(ctx, datacenter),
        node_meta_filters: Vec::new(),
        options,
    }
    .encode()
}

/// `GET /v1/operator/raft/configuration`: `Operator.RaftGetConfiguration` of `datacenter`
/// (empty: this one).
pub fn raft_configuration(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = dc_request_in(ctx, query_options(&options, &secret), datacenter);
    call(
        ctx,
        datacenter,
        "Operator.RaftGetConfiguration",
        body,
        read_timeout(&options),
        Retry::Always,
        |body, reply| {
            let configuration = RaftConfiguration::decode(body).map_err(bad_reply)?;
            raft_configuration_answer(&configuration, reply);
            Ok(())
        },
    )
}

/// `DELETE /v1/operator/raft/peer`: `Operator.RaftRemovePeerByID` for `?id`, else
/// `Operator.RaftRemovePeerByAddress` (the handler made sure exactly one is given), in
/// `datacenter` (empty: this one).
pub fn remove_peer(
    ctx: &Context,
    request: &Request,
    id: Option<String>,
    address: Option<String>,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let method = if id.is_some() {
        "Operator.RaftRemovePeerByID"
    } else {
        "Operator.RaftRemovePeerByAddress"
    };
    let body = RaftRemovePeerRequest {
        datacenter: named(ctx, datacenter),
        address: address.as_deref().unwrap_or(""),
        id: id.as_deref().unwrap_or(""),
        token: &secret,
    }
    .encode();
    write_in(ctx, datacenter, method, body, |_, reply| {
        reply.send(200, None, b"", b"");
        Ok(())
    })
}

/// `GET /v1/operator/autopilot/configuration`: `Operator.AutopilotGetConfiguration` of
/// `datacenter` (empty: this one).
pub fn autopilot_configuration(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = dc_request_in(ctx, query_options(&options, &secret), datacenter);
    call(
        ctx,
        datacenter,
        "Operator.AutopilotGetConfiguration",
        body,
        read_timeout(&options),
        Retry::Always,
        |body, reply| {
            let config = read_autopilot_config(&mut Reader::new(body)).map_err(bad_reply)?;
            reply.json(200, b"", &configuration_json(&config));
            Ok(())
        },
    )
}

/// `PUT /v1/operator/autopilot/configuration` (`?cas`): the handler's autopilot command as
/// `Operator.AutopilotSetConfiguration`, the check-and-set index in the configuration's
/// `ModifyIndex` as Consul's agent puts it. The server's bool is the outcome of a
/// check-and-set (and `false` for a plain set, which the handler answers `true`).
pub fn autopilot_write(
    ctx: &Context,
    request: &Request,
    op: &AutopilotOp,
    respond: WriteResponder,
) -> Outcome {
    let AutopilotOp::Set { config, cas } = op else {
        // The leader's own initial write never comes from an HTTP request.
        return super::client::no_call_for_write();
    };
    autopilot_set(ctx, request, config, *cas, respond, "")
}

/// `Operator.AutopilotSetConfiguration` in `datacenter` (empty: this one), answered by
/// `respond` as the leader's own write would be.
pub fn autopilot_set(
    ctx: &Context,
    request: &Request,
    config: &AutopilotConfig,
    cas: Option<u64>,
    respond: WriteResponder,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = AutopilotSetConfigRequest {
        datacenter: named(ctx, datacenter),
        config: AutopilotConfig {
            modify_index: cas.unwrap_or(0),
            ..config.clone()
        },
        cas: cas.is_some(),
        token: &secret,
    }
    .encode();
    write_in(
        ctx,
        datacenter,
        "Operator.AutopilotSetConfiguration",
        body,
        move |body, reply| {
            let swapped = Reader::new(body).bool().map_err(bad_reply)?;
            let result = if cas.is_none() || swapped {
                AutopilotResult::Written
            } else {
                AutopilotResult::CheckAndSetFailed
            };
            respond(result.into(), reply);
            Ok(())
        },
    )
}

/// `GET /v1/operator/autopilot/health` (`Operator.ServerHealth`) or `/state` (`state`:
/// `Operator.AutopilotState`), which the server hands to its leader (in `datacenter`;
/// empty: this one).
pub fn autopilot_health(
    ctx: &Context,
    request: &Request,
    state: bool,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = dc_request_in(
        ctx,
        RpcQueryOptions {
            token: &secret,
            require_consistent: true,
            ..RpcQueryOptions::default()
        },
        datacenter,
    );
    let (method, decode): (_, fn(&[u8]) -> _) = if state {
        ("Operator.AutopilotState", decode_state)
    } else {
        ("Operator.ServerHealth", decode_health)
    };
    call(
        ctx,
        datacenter,
        method,
        body,
        CALL_TIMEOUT,
        Retry::Always,
        move |body, reply| {
            let health = decode(body).map_err(bad_reply)?;
            if state {
                state_answer(&health, reply);
            } else {
                health_answer(&health, reply);
            }
            Ok(())
        },
    )
}

/// `GET /v1/operator/usage`: `Operator.Usage` of `datacenter` (empty: this one),
/// blocking as the server's read does; rendered by the server's own renderer with the
/// datacenter the answering server counted.
pub fn usage(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = dc_request_in(ctx, query_options(&options, &secret), datacenter);
    call(
        ctx,
        datacenter,
        "Operator.Usage",
        body,
        read_timeout(&options),
        Retry::Always,
        |body, reply| {
            let (meta, counted, usage) = decode_usage(body).map_err(bad_reply)?;
            usage_answer(&counted, &usage, meta_of(&meta), reply);
            Ok(())
        },
    )
}

/// `POST` / `PUT /v1/operator/raft/transfer-leader` (`?id`): `Operator.TransferLeader`
/// (praetor's own) on the leader of `datacenter` (empty: this one), sent once.
pub fn transfer_leader(
    ctx: &Context,
    request: &Request,
    id: Option<&str>,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = RaftRemovePeerRequest {
        datacenter: named(ctx, datacenter),
        address: "",
        id: id.unwrap_or(""),
        token: &secret,
    }
    .encode();
    write_in(
        ctx,
        datacenter,
        "Operator.TransferLeader",
        body,
        |body, reply| {
            Reader::new(body).bool().map_err(bad_reply)?;
            reply.json(200, b"", &serde_json::json!({ "Success": true }));
            Ok(())
        },
    )
}

/// The operator's requests that name another datacenter (`?dc=`), as their typed calls
/// naming it ([`super::client::across_datacenters`]), parsed and checked by the handlers
/// (`api::operator`) as for this datacenter; `None` for other paths (the CA configuration
/// is another family's, the keyring answered in this datacenter).
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    if !request.path.starts_with("/v1/operator/") {
        return None;
    }
    crate::api::operator::across(ctx, request, datacenter)
}
