//! A client agent's sessions as Consul's typed calls: `PUT /v1/session/create` and
//! `/destroy/<id>` become `Session.Apply`, `/renew/<id>` `Session.Renew`, and the reads
//! `/info/<id>`, `/node/<node>` and `/list` `Session.Get`, `Session.NodeSessions` and
//! `Session.List`, as Consul's `session_endpoint.go` on the agent sends them.
//!
//! A create is decoded and given its defaults here (this agent's node, the `serfHealth`
//! check, the lock-delay), as Consul's agent does before its call; the server checks the
//! node, behavior and TTL in the words the HTTP endpoint uses, and picks the ID. The reads'
//! replies come back as the store's session rows and are rendered by the server's own
//! renderer (`api::session::write_sessions`), so the body is the server's byte for byte;
//! the headers come from the reply's `QueryMeta`.

use super::client::{bad_reply, call, query_options, read_timeout, write_in, CALL_TIMEOUT};
use super::client_catalog::headers;
use crate::api::authz::request_secret;
use crate::api::session::write_sessions;
use crate::api::{ApiError, Context, Outcome, Reply, Request};
use crate::cluster::servers::Retry;
use crate::consul::rpc::catalog::{DcSpecificRequest, NodeSpecificRequest};
use crate::consul::rpc::session::{
    empty_session, encode_apply, read_indexed_sessions, SessionSpecificRequest,
};
use crate::consul::rpc::QueryOptions as RpcQueryOptions;
use crate::store::session::Session;
use std::sync::Arc;

/// Answers an `IndexedSessions` reply as the session list a server's HTTP read answers.
fn sessions_answer(body: &[u8], secret: &str, reply: &mut Reply) -> Result<(), ApiError> {
    let (meta, sessions) = read_indexed_sessions(body).map_err(bad_reply)?;
    let sessions: Vec<Arc<Session>> = sessions.into_iter().map(Arc::new).collect();
    let mut body = Vec::with_capacity(64 + sessions.len() * 320);
    write_sessions(&mut body, reply.pretty, sessions.iter());
    reply.json_bytes(200, &headers(&meta, secret), &body);
    Ok(())
}

/// `PUT /v1/session/create`: `Session.Apply` (`create`) with the session as decoded here,
/// in `datacenter` (empty: this one); the server's reply is the new session's ID.
pub fn create(
    ctx: &Context,
    request: &Request,
    session: &Session,
    behavior: &str,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = encode_apply(datacenter, "create", session, behavior, &secret);
    // A create that may have reached a server is not sent again: it could make two.
    write_in(ctx, datacenter, "Session.Apply", body, |body, reply| {
        let id = crate::proto::msgpack::Reader::new(body)
            .str()
            .map_err(bad_reply)?;
        reply.json(200, b"", &serde_json::json!({ "ID": id }));
        Ok(())
    })
}

/// `PUT /v1/session/destroy/<id>`: `Session.Apply` (`destroy`) in `datacenter` (empty:
/// this one); `true` once the server answers, also for a session that did not exist (as a
/// server's own endpoint answers).
pub fn destroy(ctx: &Context, request: &Request, id: &str, datacenter: &str) -> Outcome {
    let secret = request_secret(ctx, request);
    let session = Session {
        id: Arc::from(id),
        ..empty_session()
    };
    let body = encode_apply(datacenter, "destroy", &session, "", &secret);
    write_in(ctx, datacenter, "Session.Apply", body, |_, reply| {
        reply.json_bool(true);
        Ok(())
    })
}

/// `PUT /v1/session/renew/<id>`: `Session.Renew` on the leader (the server hands it
/// there; in `datacenter`, empty for this one); the session as a one-element list, or 404
/// once it is gone.
pub fn renew(ctx: &Context, request: &Request, id: &str, datacenter: &str) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = SessionSpecificRequest {
        datacenter,
        session_id: id,
        options: RpcQueryOptions {
            token: &secret,
            ..RpcQueryOptions::default()
        },
    }
    .encode();
    let not_found = format!("Session id '{id}' not found");
    // A renewal changes nothing but a timer: sending it again is harmless.
    call(
        ctx,
        datacenter,
        "Session.Renew",
        body,
        CALL_TIMEOUT,
        Retry::Always,
        move |body, reply| {
            let (_, sessions) = read_indexed_sessions(body).map_err(bad_reply)?;
            if sessions.is_empty() {
                return Err(ApiError::NotFound(not_found));
            }
            let sessions: Vec<Arc<Session>> = sessions.into_iter().map(Arc::new).collect();
            let mut body = Vec::with_capacity(512);
            write_sessions(&mut body, reply.pretty, sessions.iter());
            reply.json_bytes(200, b"", &body);
            Ok(())
        },
    )
}

/// Which sessions a read asks for.
pub enum Which<'a> {
    /// `/v1/session/info/<id>`: `Session.Get`.
    One(&'a str),
    /// `/v1/session/node/<node>`: `Session.NodeSessions`.
    OfNode(&'a str),
    /// `/v1/session/list`: `Session.List`.
    All,
}

/// A session read as its typed call in `datacenter` (empty: this one), with the request's
/// token and query options.
pub fn read(
    ctx: &Context,
    request: &Request,
    which: Which,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let rpc_options = query_options(&options, &secret);
    let (method, body) = match which {
        Which::One(id) => (
            "Session.Get",
            SessionSpecificRequest {
                datacenter,
                session_id: id,
                options: rpc_options,
            }
            .encode(),
        ),
        Which::OfNode(node) => (
            "Session.NodeSessions",
            NodeSpecificRequest {
                datacenter,
                node,
                options: rpc_options,
                ..NodeSpecificRequest::default()
            }
            .encode(),
        ),
        Which::All => (
            "Session.List",
            DcSpecificRequest {
                datacenter,
                node_meta_filters: Vec::new(),
                options: rpc_options,
            }
            .encode(),
        ),
    };
    call(
        ctx,
        datacenter,
        method,
        body,
        read_timeout(&options),
        Retry::Always,
        move |body, reply| sessions_answer(body, &secret, reply),
    )
}

/// The session requests that name another datacenter (`?dc=`), as their typed calls
/// naming it ([`super::client::across_datacenters`]), parsed and checked by the handlers
/// (`api::session`) as they are for this datacenter; `None` for other paths.
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    use crate::api::session;
    let path = request.path;
    let outcome = if path == "/v1/session/create" {
        session::create_in(ctx, request, datacenter)
    } else if path.starts_with("/v1/session/destroy/") {
        session::destroy_in(ctx, request, datacenter)
    } else if path.starts_with("/v1/session/renew/") {
        session::renew_in(ctx, request, datacenter)
    } else if path.starts_with("/v1/session/info/") {
        session::info_in(ctx, request, datacenter)
    } else if path.starts_with("/v1/session/node/") {
        session::node_sessions_in(ctx, request, datacenter)
    } else if path == "/v1/session/list" {
        session::list_in(ctx, request, datacenter)
    } else {
        return None;
    };
    Some(outcome)
}
