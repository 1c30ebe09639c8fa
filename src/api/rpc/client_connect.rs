//! A client agent's Connect CA endpoints as Consul's typed calls, as Consul's agent sends
//! them (`agent/connect_ca_endpoint.go`), and the same calls naming another datacenter
//! (`?dc=`, from a server or a client agent):
//!
//! | HTTP | typed call |
//! |---|---|
//! | `GET /v1/connect/ca/roots` (`?pem`) | `ConnectCA.Roots` |
//! | `GET /v1/connect/ca/configuration` | `ConnectCA.ConfigurationGet` |
//! | `PUT /v1/connect/ca/configuration` | `ConnectCA.ConfigurationSet` (`Op` `set-config`) |
//!
//! The handlers (`api::connect`) decode and check the request first, as on a server (a
//! bad body is the server's 400 before any call); the server checks the token and that
//! Connect is on. Replies are read back into the values the server's own handlers render
//! (`api::connect::roots_answer`, `ca_configuration_answer`), so the body is the
//! server's. The CA configuration's reply carries no `QueryMeta`: its `X-Consul-Index` is
//! its `ModifyIndex`, the index the server's read reports.

use super::client::{bad_reply, query_options, write_in};
use super::client_catalog::headers;
use super::client_config::read_in;
use crate::api::authz::request_secret;
use crate::api::connect::{
    ca_config_set_answer, ca_configuration_answer, roots_answer, CaConfigSet,
};
use crate::api::{Context, Outcome, Request};
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::connect_ca::{read_ca_roots_whole, CaConfiguration, CaRequest};
use crate::consul::rpc::QueryOptions as RpcQueryOptions;
use crate::store::mesh::ca::CaRoot;
use crate::store::CommandResult;

/// The `Datacenter` a call names: `datacenter`, or this one when empty (as Consul's agent
/// fills it in).
fn named<'a>(ctx: &'a Context, datacenter: &'a str) -> &'a str {
    if datacenter.is_empty() {
        &ctx.config().datacenter
    } else {
        datacenter
    }
}

/// A `DCSpecificRequest` naming `datacenter` with the request's options and token.
fn dc_request(ctx: &Context, datacenter: &str, options: RpcQueryOptions) -> Vec<u8> {
    DcSpecificRequest {
        datacenter: named(ctx, datacenter),
        node_meta_filters: Vec::new(),
        options,
    }
    .encode()
}

/// `GET /v1/connect/ca/roots` (and `/v1/agent/connect/ca/roots`): `ConnectCA.Roots` of
/// `datacenter` (empty: this one), answered as the server's handler answers its roots.
pub fn roots(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
    pem: bool,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = dc_request(ctx, datacenter, query_options(&options, &secret));
    read_in(
        ctx,
        datacenter,
        "ConnectCA.Roots",
        body,
        &options,
        move |body, reply| {
            let (meta, roots) = read_ca_roots_whole(body).map_err(bad_reply)?;
            let listed: Vec<&CaRoot> = roots.roots.iter().collect();
            roots_answer(
                roots.active_root_id,
                roots.trust_domain,
                &listed,
                pem,
                &headers(&meta, &secret),
                reply,
            );
            Ok(())
        },
    )
}

/// `GET /v1/connect/ca/configuration`: `ConnectCA.ConfigurationGet` of `datacenter` (empty:
/// this one), blocking as the server's read is.
pub fn ca_configuration_get(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = dc_request(ctx, datacenter, query_options(&options, &secret));
    let consistency = options.consistency;
    read_in(
        ctx,
        datacenter,
        "ConnectCA.ConfigurationGet",
        body,
        &options,
        move |body, reply| {
            let config = CaConfiguration::decode(body).map_err(bad_reply)?;
            let meta = crate::api::QueryMeta {
                index: config.modify_index.max(1),
                // The server answered from a leader's store (or a stale one when asked).
                known_leader: true,
                last_contact_ms: 0,
                consistency,
                cache: None,
            };
            let mut headers = Vec::with_capacity(160);
            meta.write_headers(&mut headers);
            ca_configuration_answer(&config, &headers, reply);
            Ok(())
        },
    )
}

/// `PUT /v1/connect/ca/configuration`: `ConnectCA.ConfigurationSet` in `datacenter` (empty:
/// this one) with the body the handler decoded; the server checks the provider and the
/// settings and rotates the root.
pub fn ca_configuration_set(
    ctx: &Context,
    request: &Request,
    set: &CaConfigSet,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = CaRequest {
        datacenter: named(ctx, datacenter),
        op: "set-config",
        config: Some(set.to_wire()),
        token: &secret,
    }
    .encode();
    // A write that may have reached a server is not sent again (a rotation would make two
    // roots).
    write_in(
        ctx,
        datacenter,
        "ConnectCA.ConfigurationSet",
        body,
        |_, reply| {
            ca_config_set_answer(CommandResult::Bool(true), reply);
            Ok(())
        },
    )
}

/// `POST /v1/agent/connect/authorize` on a client agent: the roots (`ConnectCA.Roots`:
/// is the certificate's trust domain ours?) and the intentions that could apply to the
/// target (`Intention.Match` by destination, highest precedence first), then the decision
/// a server makes from its store (`api::connect::authorize_decision`): the first intention
/// whose source is the certificate's service or `*`, else the default. The answer and its
/// reasons are the server's words.
pub fn authorize(
    ctx: &Context,
    request: &Request,
    target: String,
    client: crate::proto::spiffe::ServiceId,
    default_allow: bool,
) -> Outcome {
    use super::client::{error_of, CALL_TIMEOUT};
    use crate::api::connect::{authorize_answer, matched_reason_of, untrusted_reason};
    use crate::consul::rpc::intention::{read_matches, IntentionQueryRequest, Match};
    use crate::store::mesh::intentions::{Action, WILDCARD};
    let secret = request_secret(ctx, request).into_owned();
    let options = || RpcQueryOptions {
        token: &secret,
        ..RpcQueryOptions::default()
    };
    let roots_body = dc_request(ctx, "", options());
    let match_body = IntentionQueryRequest {
        datacenter: &ctx.config().datacenter,
        matching: Some(Match {
            kind: "destination",
            names: vec![target.as_str()],
        }),
        options: options(),
        ..IntentionQueryRequest::default()
    }
    .encode();
    let deferred = ctx.deferred();
    let retry = crate::cluster::servers::Retry::Always;
    Outcome::Async(Box::pin(async move {
        let roots = deferred
            .call_server("ConnectCA.Roots", &roots_body, CALL_TIMEOUT, retry)
            .await;
        let matched = match roots {
            Ok(_) => Some(
                deferred
                    .call_server("Intention.Match", &match_body, CALL_TIMEOUT, retry)
                    .await,
            ),
            Err(_) => None,
        };
        Box::new(move |reply: &mut crate::api::Reply| {
            let decided = (|| -> Result<(bool, String), crate::api::ApiError> {
                let roots = roots.map_err(error_of)?;
                let (_, roots) = read_ca_roots_whole(&roots).map_err(bad_reply)?;
                let domain = &client.trust_domain;
                let trusted = (!roots.trust_domain.is_empty()
                    && roots.trust_domain.eq_ignore_ascii_case(domain))
                    || roots
                        .roots
                        .iter()
                        .any(|r| r.external_trust_domain.eq_ignore_ascii_case(domain));
                if !trusted {
                    return Ok((false, untrusted_reason(domain)));
                }
                let Some(matched) = matched else {
                    return Err(crate::api::ApiError::Internal(
                        "rpc error: no answer".to_string(),
                    ));
                };
                let matched = matched.map_err(error_of)?;
                let (_, mut matches) = read_matches(&matched).map_err(bad_reply)?;
                let found = matches.pop().unwrap_or_default().into_iter().find(|ixn| {
                    ixn.source_peer.is_empty()
                        && ixn.source_sameness_group.is_empty()
                        && (ixn.source_name == WILDCARD
                            || ixn.source_name.eq_ignore_ascii_case(&client.service))
                });
                let Some(ixn) = found else {
                    return Ok((
                        default_allow,
                        "Default behavior configured by ACLs".to_string(),
                    ));
                };
                let action = match ixn.action {
                    "allow" => Some(Action::Allow),
                    "deny" => Some(Action::Deny),
                    _ => None,
                };
                let l7 = !ixn.permissions.is_null();
                let reason = matched_reason_of(
                    ixn.source_name,
                    ixn.destination_name,
                    ixn.id,
                    ixn.precedence,
                    l7,
                    action,
                );
                Ok((!l7 && action == Some(Action::Allow), reason))
            })();
            match decided {
                Ok((authorized, reason)) => authorize_answer(authorized, &reason, reply),
                Err(error) => reply.error(&error),
            }
        }) as crate::api::AsyncResponder
    }))
}

/// The Connect CA requests naming another datacenter (`?dc=`), as their typed calls
/// naming it ([`super::client::across_datacenters`]), parsed and checked by the handlers
/// (`api::connect::elsewhere`); `None` for the others.
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, crate::api::ApiError>> {
    crate::api::connect::elsewhere(ctx, request, datacenter)
}
