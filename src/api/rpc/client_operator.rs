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
//!
//! The handlers decode and check the request first, as on a server (a bad body is the
//! server's 400 before any call); the server checks the token. Replies are read back into
//! the values the server's own handlers render (`api::operator`), so the body is the
//! server's. None of these replies carries `QueryMeta`.

use super::client::{bad_reply, call, query_options, read_call, write, CALL_TIMEOUT};
use crate::api::authz::request_secret;
use crate::api::operator::{
    configuration_json, health_answer, raft_configuration_answer, state_answer,
};
use crate::api::{Context, Outcome, Request, WriteResponder};
use crate::cluster::servers::Retry;
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::operator::{
    decode_health, decode_state, read_autopilot_config, AutopilotSetConfigRequest,
    RaftConfiguration, RaftRemovePeerRequest,
};
use crate::consul::rpc::QueryOptions as RpcQueryOptions;
use crate::proto::msgpack::Reader;
use crate::store::autopilot::{AutopilotConfig, AutopilotOp};
use crate::store::AutopilotResult;

/// A `DCSpecificRequest` for this datacenter with the request's options and token.
fn dc_request(ctx: &Context, options: RpcQueryOptions) -> Vec<u8> {
    DcSpecificRequest {
        datacenter: &ctx.config().datacenter,
        node_meta_filters: Vec::new(),
        options,
    }
    .encode()
}

/// `GET /v1/operator/raft/configuration`: `Operator.RaftGetConfiguration`.
pub fn raft_configuration(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = dc_request(ctx, query_options(&options, &secret));
    read_call(
        ctx,
        "Operator.RaftGetConfiguration",
        body,
        &options,
        |body, reply| {
            let configuration = RaftConfiguration::decode(body).map_err(bad_reply)?;
            raft_configuration_answer(&configuration, reply);
            Ok(())
        },
    )
}

/// `DELETE /v1/operator/raft/peer`: `Operator.RaftRemovePeerByID` for `?id`, else
/// `Operator.RaftRemovePeerByAddress` (the handler made sure exactly one is given).
pub fn remove_peer(
    ctx: &Context,
    request: &Request,
    id: Option<String>,
    address: Option<String>,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let method = if id.is_some() {
        "Operator.RaftRemovePeerByID"
    } else {
        "Operator.RaftRemovePeerByAddress"
    };
    let body = RaftRemovePeerRequest {
        datacenter: &ctx.config().datacenter,
        address: address.as_deref().unwrap_or(""),
        id: id.as_deref().unwrap_or(""),
        token: &secret,
    }
    .encode();
    write(ctx, method, body, |_, reply| {
        reply.send(200, None, b"", b"");
        Ok(())
    })
}

/// `GET /v1/operator/autopilot/configuration`: `Operator.AutopilotGetConfiguration`.
pub fn autopilot_configuration(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = dc_request(ctx, query_options(&options, &secret));
    read_call(
        ctx,
        "Operator.AutopilotGetConfiguration",
        body,
        &options,
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
        return Outcome::Forward;
    };
    let secret = request_secret(ctx, request);
    let cas = *cas;
    let body = AutopilotSetConfigRequest {
        datacenter: &ctx.config().datacenter,
        config: AutopilotConfig {
            modify_index: cas.unwrap_or(0),
            ..config.clone()
        },
        cas: cas.is_some(),
        token: &secret,
    }
    .encode();
    write(
        ctx,
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
/// `Operator.AutopilotState`), which the server hands to its leader.
pub fn autopilot_health(ctx: &Context, request: &Request, state: bool) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = dc_request(
        ctx,
        RpcQueryOptions {
            token: &secret,
            require_consistent: true,
            ..RpcQueryOptions::default()
        },
    );
    let (method, decode): (_, fn(&[u8]) -> _) = if state {
        ("Operator.AutopilotState", decode_state)
    } else {
        ("Operator.ServerHealth", decode_health)
    };
    call(
        ctx,
        "",
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

/// The requests of this family that name another datacenter (`?dc=`), as their typed
/// calls to a server there ([`super::client::across_datacenters`]); `None` for the others.
pub fn across_datacenters(
    ctx: &crate::api::Context,
    request: &crate::api::Request,
    datacenter: &str,
) -> Option<Result<crate::api::Outcome, crate::api::ApiError>> {
    let _ = (ctx, request, datacenter);
    None
}
