//! A client agent's half of Consul's typed calls — and a follower server's, for what only
//! its leader answers (writes, leader and consistent reads; the call then goes to the
//! leader, [`Deferred::call_leader`](crate::api::context::Deferred::call_leader)): an HTTP
//! request it cannot answer itself is decoded once into the typed request (`KeyRequest`, `KVSRequest`, …), sent to a server
//! with [`Deferred::call_server`](crate::api::context::Deferred::call_server) (a yamux
//! stream on the shard's connection to it, failing over among servers), and the typed
//! reply is rendered as Consul's agent renders it — as `agent/kvs_endpoint.go` does with
//! what `KVS.Get` returns.
//!
//! Writes keep the HTTP handler's own answer: the handler's store command becomes the
//! typed call ([`typed_write`]), and the server's reply comes back as the command result
//! the handler's responder expects; a refusal comes back as the server's text, answered
//! with the status Consul's HTTP layer gives it ([`error_of`]).
//!
//! What is converted so far: the KV endpoints, `/v1/status/leader|peers` and
//! `/v1/catalog/datacenters` (`Status.Leader|Peers`, `Catalog.ListDatacenters`), and KV
//! reads naming another datacenter (`?dc=`), which a server sends there as the same typed
//! call on a yamux stream ([`across_datacenters`]); the catalog and health reads (`client_catalog`) and the
//! session endpoints (`client_session`), transactions (`client_txn`) and the ACL tokens,
//! policies and roles (`client_acl`, whose writes [`typed_write`] hands over) have files of
//! their own.
//! Every other request a client agent cannot answer, or a server hands to another
//! datacenter, still goes as forwarded HTTP (`api::server`).

use crate::api::authz::request_secret;
use crate::api::kv::{keys_body, not_found, separator, write_entries};
use crate::api::{ApiError, AsyncResponder, Context, Outcome, QueryMeta, Reply, Request, WriteOp};
use crate::cluster::servers::Retry;
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::kvs::{
    read_indexed_dir_entries, read_indexed_key_list, DirEntry, KeyListRequest, KeyRequest,
    KvsRequest,
};
use crate::consul::rpc::status::{read_leader_reply, read_string_list_reply};
use crate::consul::rpc::{QueryMeta as RpcQueryMeta, QueryOptions as RpcQueryOptions};
use crate::replica::ProposalResult;
use crate::shard::rpc_client::CallError;
use crate::shard::runtime::Consistency;
use crate::store::kv::KvOp;
use crate::store::{CatalogResult, Command, KvResult};
use std::time::Duration;

/// How long a call waits for its answer beyond a blocking query's own wait.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// A failed call as the HTTP answer Consul's agent gives it: 403 for ACL refusals, 429 for
/// the rate limit, 500 for everything else (no leader, no server, a lost connection).
pub fn error_of(error: CallError) -> ApiError {
    let text = error.to_string();
    if text.contains("Permission denied") || text == "ACL not found" {
        ApiError::Status(403, text)
    } else if text.starts_with("rate limit exceeded") {
        ApiError::Status(429, text)
    } else {
        ApiError::Internal(text)
    }
}

/// A client agent's write as the proposal on the leader ended, from the call's answer:
/// typed to the edge, so that the HTTP answer is the one the leader's own endpoint gives.
#[derive(Debug, PartialEq)]
pub enum WriteOutcome {
    /// The leader applied it; the server's reply.
    Applied(bytes::Bytes),
    /// It did not happen: the leader refused the proposal before the log (its
    /// `ProposalResult`, read back from Consul's words for it, as Consul's agents compare
    /// `structs.ErrNoLeader` and its kin by text).
    Refused(ProposalResult),
    /// It did not happen: the server refused the request itself (an ACL, a validation), or
    /// the call never left this agent.
    Rejected(CallError),
    /// It may have happened: the leader lost its leadership while committing it, or the
    /// call was sent and its answer lost.
    MayHaveApplied(String),
}

impl WriteOutcome {
    pub fn of(answer: Result<bytes::Bytes, CallError>) -> WriteOutcome {
        match answer {
            Ok(reply) => WriteOutcome::Applied(reply),
            Err(CallError::Remote(text)) => match proposal_refusal(&text) {
                Some(ProposalResult::LeadershipLost) => WriteOutcome::MayHaveApplied(text),
                Some(refused) => WriteOutcome::Refused(refused),
                None => WriteOutcome::Rejected(CallError::Remote(text)),
            },
            Err(CallError::Transport { reason, sent: true }) => {
                WriteOutcome::MayHaveApplied(format!("rpc error: {reason}"))
            }
            Err(unsent) => WriteOutcome::Rejected(unsent),
        }
    }

    /// The HTTP error of a write that was not (or may not have been) applied: the status
    /// the leader's own endpoint answers for the same proposal outcome.
    fn error(self) -> Option<ApiError> {
        match self {
            WriteOutcome::Applied(_) => None,
            WriteOutcome::Refused(result) => ApiError::from_proposal(&result),
            WriteOutcome::Rejected(error) => Some(error_of(error)),
            WriteOutcome::MayHaveApplied(text) => Some(ApiError::Internal(text)),
        }
    }
}

/// The proposal outcome Consul's words for it name (`ProposalResult`'s texts), if any.
fn proposal_refusal(text: &str) -> Option<ProposalResult> {
    let words = [
        ProposalResult::NotLeader,
        ProposalResult::LeadershipLost,
        ProposalResult::Overloaded,
        ProposalResult::ShuttingDown,
    ];
    if let Some(result) = words.into_iter().find(|r| r.to_string() == text) {
        return Some(result);
    }
    // "request of <bytes> bytes exceeds the <bytes_max> bytes of one log entry"
    let rest = text.strip_prefix("request of ")?;
    let (bytes, rest) = rest.split_once(" bytes exceeds the ")?;
    let bytes_max = rest.strip_suffix(" bytes of one log entry")?;
    Some(ProposalResult::TooLarge {
        bytes: bytes.parse().ok()?,
        bytes_max: bytes_max.parse().ok()?,
    })
}

/// A typed reply's metadata as the HTTP headers carry it.
pub fn meta_of(meta: &RpcQueryMeta) -> QueryMeta {
    QueryMeta {
        index: meta.index,
        known_leader: meta.known_leader,
        last_contact_ms: u64::try_from(meta.last_contact_ns / 1_000_000).unwrap_or(0),
        consistency: match meta.consistency_level {
            "stale" => Consistency::Stale,
            "consistent" => Consistency::Consistent,
            _ => Consistency::Leader,
        },
        cache: None,
    }
}

/// The typed query options of an HTTP read (`?index`, `?wait`, `?stale`, `?consistent`,
/// `?max_stale`, `?filter`) with the request's token.
pub fn query_options<'a>(
    options: &'a crate::api::QueryOptions,
    token: &'a str,
) -> RpcQueryOptions<'a> {
    RpcQueryOptions {
        token,
        min_query_index: options.min_index,
        max_query_time_ns: if options.is_blocking() {
            options.wait.as_nanos().min(i64::MAX as u128) as i64
        } else {
            0
        },
        allow_stale: options.consistency == Consistency::Stale,
        require_consistent: options.consistency == Consistency::Consistent,
        use_cache: false,
        max_stale_duration_ns: options
            .max_stale
            .map_or(0, |d| d.as_nanos().min(i64::MAX as u128) as i64),
        filter: options.filter.as_deref().unwrap_or(""),
        allow_not_modified_response: false,
    }
}

/// How long to wait for a read's answer.
pub(super) fn read_timeout(options: &crate::api::QueryOptions) -> Duration {
    if options.is_blocking() {
        options.wait + options.wait / crate::api::BLOCKING_JITTER_FRACTION + CALL_TIMEOUT
    } else {
        CALL_TIMEOUT
    }
}

/// A call made after the handler returned, whose answer `respond` writes. A client agent
/// sends it to its server (which hands a call naming another datacenter on); a server asks
/// a server of `datacenter` itself.
pub(super) fn call(
    ctx: &Context,
    datacenter: &str,
    method: &'static str,
    body: Vec<u8>,
    timeout: Duration,
    retry: Retry,
    respond: impl FnOnce(&[u8], &mut Reply) -> Result<(), ApiError> + 'static,
) -> Outcome {
    call_mapped(
        ctx, datacenter, method, body, timeout, retry, error_of, respond,
    )
}

/// A read in this datacenter: sent again on another server if one cannot be reached (a
/// read may be), waiting as long as its blocking query may.
pub(super) fn read_call(
    ctx: &Context,
    method: &'static str,
    body: Vec<u8>,
    options: &crate::api::QueryOptions,
    respond: impl FnOnce(&[u8], &mut Reply) -> Result<(), ApiError> + 'static,
) -> Outcome {
    call(
        ctx,
        "",
        method,
        body,
        read_timeout(options),
        Retry::Always,
        respond,
    )
}

/// A write made after the handler returned: sent once unless it certainly never left
/// ([`Retry::NotSent`]), its answer typed as the proposal ended ([`WriteOutcome`]);
/// `respond` writes an applied write's reply.
pub(super) fn write(
    ctx: &Context,
    method: &'static str,
    body: Vec<u8>,
    respond: impl FnOnce(&[u8], &mut Reply) -> Result<(), ApiError> + 'static,
) -> Outcome {
    write_in(ctx, "", method, body, respond)
}

/// [`write`] in `datacenter` (empty: this one).
pub(super) fn write_in(
    ctx: &Context,
    datacenter: &str,
    method: &'static str,
    body: Vec<u8>,
    respond: impl FnOnce(&[u8], &mut Reply) -> Result<(), ApiError> + 'static,
) -> Outcome {
    call_mapped(
        ctx,
        datacenter,
        method,
        body,
        CALL_TIMEOUT,
        Retry::NotSent,
        write_error,
        respond,
    )
}

/// A failed write's HTTP error, typed as the proposal ended ([`WriteOutcome`]).
pub(super) fn write_error(error: CallError) -> ApiError {
    WriteOutcome::of(Err(error))
        .error()
        .unwrap_or_else(|| ApiError::Internal("rpc error: no answer".to_string()))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn call_mapped(
    ctx: &Context,
    datacenter: &str,
    method: &'static str,
    body: Vec<u8>,
    timeout: Duration,
    retry: Retry,
    error_of: impl FnOnce(CallError) -> ApiError + 'static,
    respond: impl FnOnce(&[u8], &mut Reply) -> Result<(), ApiError> + 'static,
) -> Outcome {
    let deferred = ctx.deferred();
    let remote = (!ctx.is_client() && !datacenter.is_empty()).then(|| datacenter.to_string());
    Outcome::Async(Box::pin(async move {
        let answer = match remote {
            None => deferred.call_server(method, &body, timeout, retry).await,
            Some(datacenter) => {
                deferred
                    .call_datacenter(&datacenter, method, &body, timeout, retry)
                    .await
            }
        };
        Box::new(move |reply: &mut Reply| {
            let result = match answer {
                Ok(body) => respond(&body, reply),
                Err(error) => Err(error_of(error)),
            };
            if let Err(error) = result {
                reply.error(&error);
            }
        }) as AsyncResponder
    }))
}

/// A typed reply that does not decode: the server is not speaking Consul's RPC.
pub(super) fn bad_reply(error: crate::proto::msgpack::WireError) -> ApiError {
    ApiError::Internal(format!("rpc error: malformed reply: {error}"))
}

/// The requests that go to another datacenter (`?dc=`) as typed calls: KV reads and writes
/// (`KVS.Apply` naming the datacenter), and the catalog and health reads ([`super::client_catalog::across_datacenters`]).
/// `None` for the others, which go as HTTP.
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    let kv = request.path == "/v1/kv" || request.path.starts_with("/v1/kv/");
    if !kv {
        // Each family answers for its own paths (`None`: not one of them, or a variant
        // without a typed call yet).
        type Family = fn(&Context, &Request, &str) -> Option<Result<Outcome, ApiError>>;
        const FAMILIES: &[Family] = &[
            super::client_catalog::across_datacenters,
            super::client_internal::across_datacenters,
            super::client_session::across_datacenters,
            super::client_txn::across_datacenters,
            super::client_query::across_datacenters,
            super::client_config::across_datacenters,
            super::client_connect::across_datacenters,
            super::client_intention::across_datacenters,
            super::client_operator::across_datacenters,
            super::client_status::across_datacenters,
            super::client_ui::across_datacenters,
            super::client_acl::across_datacenters,
            super::client_peering::across_datacenters,
            super::snapshot::across_datacenters,
        ];
        return FAMILIES
            .iter()
            .find_map(|family| family(ctx, request, datacenter));
    }
    if request.method != crate::proto::http::Method::Get {
        // A write: the handler's own command, sent as `KVS.Apply` naming the datacenter.
        return Some(
            crate::api::kv::write_elsewhere(request).map(|outcome| match outcome {
                Outcome::Write(op) => typed_write_in(ctx, request, op, datacenter),
                other => other,
            }),
        );
    }
    Some(
        crate::api::kv::check_key(request.rest)
            .and_then(|()| crate::api::query_options_in(ctx, &request.query))
            .and_then(|options| kv_get(ctx, request, request.rest, options, datacenter)),
    )
}

/// `GET /v1/kv/<key>` answered by a server: `KVS.Get`, `KVS.List` (`?recurse`) or
/// `KVS.ListKeys` (`?keys`) of `datacenter` (empty: this one), rendered as the server's
/// own HTTP answer would be.
pub fn kv_get(
    ctx: &Context,
    request: &Request,
    key: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let secret = request_secret(ctx, request);
    let rpc_options = query_options(&options, &secret);
    let timeout = read_timeout(&options);
    if request.query.has("keys") {
        let separator = separator(&request.query);
        let body = KeyListRequest {
            datacenter,
            prefix: key,
            separator,
            options: rpc_options,
        }
        .encode();
        let root = key.is_empty();
        return Ok(call(
            ctx,
            datacenter,
            "KVS.ListKeys",
            body,
            timeout,
            Retry::Always,
            move |body, reply| {
                let (meta, keys) = read_indexed_key_list(body).map_err(bad_reply)?;
                let meta_headers = meta_of(&meta);
                // Consul answers 404 for an empty listing except at the root.
                if keys.is_empty() && !root {
                    not_found(meta_headers, reply);
                    return Ok(());
                }
                let mut headers = Vec::with_capacity(160);
                meta_headers.write_headers(&mut headers);
                filtered_header(&meta, &mut headers);
                reply.json_bytes(200, &headers, &keys_body(&keys, reply.pretty));
                Ok(())
            },
        ));
    }
    let recurse = request.query.has("recurse");
    if !recurse && key.is_empty() {
        return Err(ApiError::bad_request("Missing key name"));
    }
    let raw = request.query.has("raw");
    let body = KeyRequest {
        datacenter,
        key,
        options: rpc_options,
    }
    .encode();
    let method = if recurse { "KVS.List" } else { "KVS.Get" };
    Ok(call(
        ctx,
        datacenter,
        method,
        body,
        timeout,
        Retry::Always,
        move |body, reply| {
            let (meta, entries) = read_indexed_dir_entries(body).map_err(bad_reply)?;
            let meta_headers = meta_of(&meta);
            if entries.is_empty() {
                not_found(meta_headers, reply);
                return Ok(());
            }
            let mut headers = Vec::with_capacity(192);
            meta_headers.write_headers(&mut headers);
            if raw && !recurse {
                headers.extend_from_slice(
                    b"X-Content-Type-Options: nosniff\r\nContent-Security-Policy: sandbox\r\n",
                );
                reply.send(200, Some("text/plain"), &headers, entries[0].value);
                return Ok(());
            }
            filtered_header(&meta, &mut headers);
            let fields = entries.iter().map(DirEntry::fields);
            let mut out = Vec::with_capacity(
                64 + entries
                    .iter()
                    .map(|e| 160 + e.key.len() + e.value.len() * 4 / 3)
                    .sum::<usize>(),
            );
            write_entries(&mut out, reply.pretty, fields);
            reply.json_bytes(200, &headers, &out);
            Ok(())
        },
    ))
}

/// `GET /v1/status/leader`, `/v1/status/peers` and `/v1/catalog/datacenters` on a client
/// agent: `Status.Leader`, `Status.Peers` or `Catalog.ListDatacenters` on a server, the
/// reply rendered as that server's JSON. The request is the `DCSpecificRequest` Consul's
/// agent sends (this datacenter, the request's token); `ListDatacenters`' own request is
/// `QueryOptions` alone, the same fields less the datacenter's. `datacenter` names another
/// datacenter whose servers answer (`?dc=`, `Status.*` only), empty for this one.
pub fn status(ctx: &Context, request: &Request, method: &'static str, datacenter: &str) -> Outcome {
    let secret = request_secret(ctx, request);
    let options = RpcQueryOptions {
        token: &secret,
        ..RpcQueryOptions::default()
    };
    let body = if method == "Catalog.ListDatacenters" {
        let mut w = crate::proto::msgpack::Writer::new();
        options.write_request(&mut w, &[], |_, _| {});
        w.into_inner()
    } else {
        DcSpecificRequest {
            datacenter: if datacenter.is_empty() {
                &ctx.config().datacenter
            } else {
                datacenter
            },
            node_meta_filters: Vec::new(),
            options,
        }
        .encode()
    };
    call(
        ctx,
        datacenter,
        method,
        body,
        CALL_TIMEOUT,
        Retry::Always,
        move |body, reply| {
            if method == "Status.Leader" {
                reply.json(200, b"", read_leader_reply(body).map_err(bad_reply)?);
            } else {
                reply.json(200, b"", &read_string_list_reply(body).map_err(bad_reply)?);
            }
            Ok(())
        },
    )
}

/// Consul's header for a list the token filtered.
fn filtered_header(meta: &RpcQueryMeta, headers: &mut Vec<u8>) {
    if meta.results_filtered_by_acls {
        headers.extend_from_slice(crate::api::FILTERED_BY_ACLS_HEADER);
    }
}

/// The `KVSRequest` of a KV write.
fn kvs_request<'o>(op: &'o KvOp, token: &'o str) -> Option<KvsRequest<'o>> {
    let entry = |key: &'o str| DirEntry {
        key,
        ..DirEntry::default()
    };
    let (name, dir_entry) = match op {
        KvOp::Set { key, value, flags } => (
            "set",
            DirEntry {
                value,
                flags: *flags,
                ..entry(key)
            },
        ),
        KvOp::Cas {
            key,
            value,
            flags,
            modify_index,
        } => (
            "cas",
            DirEntry {
                value,
                flags: *flags,
                modify_index: *modify_index,
                ..entry(key)
            },
        ),
        KvOp::Delete { key } => ("delete", entry(key)),
        KvOp::DeleteCas { key, modify_index } => (
            "delete-cas",
            DirEntry {
                modify_index: *modify_index,
                ..entry(key)
            },
        ),
        KvOp::DeleteTree { prefix } => ("delete-tree", entry(prefix)),
        KvOp::Lock {
            key,
            value,
            flags,
            session,
        } => (
            "lock",
            DirEntry {
                value,
                flags: *flags,
                session,
                ..entry(key)
            },
        ),
        KvOp::Unlock {
            key,
            value,
            flags,
            session,
        } => (
            "unlock",
            DirEntry {
                value,
                flags: *flags,
                session,
                ..entry(key)
            },
        ),
        KvOp::ReapTombstones { .. } => return None,
    };
    Some(KvsRequest {
        datacenter: "",
        op: name,
        entry: dir_entry,
        token,
    })
}

/// The outcome of a write no typed call carries: the leader's own commands (tombstone
/// reaping, bootstrap entries, ACL initialization), which no handler hands to a client
/// agent or a follower. Reaching it is a praetor bug, answered in words.
pub fn no_call_for_write() -> Outcome {
    let error = crate::api::no_typed_call();
    Outcome::Async(Box::pin(async move {
        Box::new(move |reply: &mut Reply| reply.error(&error)) as crate::api::AsyncResponder
    }))
}

/// On a client agent or a follower, a write the handler decided on becomes the typed call
/// a server applies (`KVS.Apply`, `Catalog.Register`, `ACL.TokenSet`, …), its reply handed
/// to the handler's responder as the command result the server produced.
pub fn typed_write(ctx: &Context, request: &Request, op: WriteOp) -> Outcome {
    typed_write_in(ctx, request, op, "")
}

/// [`typed_write`] in `datacenter` (empty: this one): on a client agent its server hands
/// the call there; a server sends it there itself. Only KV writes name another datacenter.
fn typed_write_in(ctx: &Context, request: &Request, op: WriteOp, datacenter: &str) -> Outcome {
    if let Command::Catalog(catalog_op) = &op.command {
        return catalog_write(ctx, request, catalog_op, op.respond, datacenter);
    }
    if let Command::ConfigEntry(config_op) = &op.command {
        debug_assert!(
            datacenter.is_empty(),
            "config entry writes name no datacenter here"
        );
        return super::client_config::write_op(ctx, request, config_op, op.respond);
    }
    if let Command::Acl(acl_op) = &op.command {
        debug_assert!(datacenter.is_empty(), "ACL writes name no datacenter here");
        return super::client_acl::write(ctx, request, acl_op);
    }
    if let Command::Autopilot(autopilot_op) = &op.command {
        debug_assert!(
            datacenter.is_empty(),
            "autopilot writes name no datacenter here"
        );
        return super::client_operator::autopilot_write(ctx, request, autopilot_op, op.respond);
    }
    let Command::Kv(kv_op) = &op.command else {
        return no_call_for_write();
    };
    let secret = request_secret(ctx, request);
    let Some(call_request) = kvs_request(kv_op, &secret) else {
        return no_call_for_write();
    };
    let body = KvsRequest {
        datacenter,
        ..call_request
    }
    .encode();
    let respond = op.respond;
    // What the server's one bool will mean, decided now from the operation (so the
    // operation, its key and value, need not travel with the call).
    let (took_effect, did_not) = (
        KvResult::of_reply(kv_op, true),
        KvResult::of_reply(kv_op, false),
    );
    // A write that may have reached a server is not sent again (it could apply twice).
    write_in(ctx, datacenter, "KVS.Apply", body, move |body, reply| {
        let mut r = crate::proto::msgpack::Reader::new(body);
        let applied = r.bool().map_err(bad_reply)?;
        let result = if applied { took_effect } else { did_not };
        respond(result.into(), reply);
        Ok(())
    })
}

/// A catalog write the handler decided on, made in `datacenter` (another one, named by
/// `?dc=` or the body's `Datacenter`): `Catalog.Register` or `Catalog.Deregister` naming it.
pub fn catalog_write_in(
    ctx: &Context,
    request: &Request,
    op: WriteOp,
    datacenter: &str,
) -> Outcome {
    typed_write_in(ctx, request, op, datacenter)
}

/// `PUT /v1/catalog/register` and `/deregister` on a client agent, or naming another
/// datacenter (`datacenter`; empty: this one): `Catalog.Register` or `Catalog.Deregister`
/// with the request's token; the server's empty reply is the `true` the handler answers,
/// its refusal the error Consul's agent answers. A coordinate (`PUT /v1/coordinate/update`)
/// is `Coordinate.Update`. Other catalog commands have no typed call and go as HTTP.
fn catalog_write(
    ctx: &Context,
    request: &Request,
    op: &crate::store::catalog::CatalogOp,
    respond: crate::api::WriteResponder,
    datacenter: &str,
) -> Outcome {
    use crate::consul::rpc::catalog::{encode_register, DeregisterRequest};
    use crate::store::catalog::CatalogOp;
    let secret = request_secret(ctx, request);
    let (method, body) = match op {
        CatalogOp::Register(registration) => {
            ("Catalog.Register", encode_register(registration, &secret))
        }
        CatalogOp::Deregister {
            node,
            service_id,
            check_id,
        } => (
            "Catalog.Deregister",
            DeregisterRequest {
                datacenter,
                node,
                service_id,
                check_id,
                token: &secret,
            }
            .encode(),
        ),
        // `PUT /v1/coordinate/update` makes one coordinate: `Coordinate.Update`.
        CatalogOp::Coordinates(updates) if updates.len() == 1 => (
            "Coordinate.Update",
            crate::consul::rpc::coordinate::UpdateRequest {
                datacenter,
                update: updates[0].clone(),
                has_coordinate: true,
                token: &secret,
            }
            .encode(),
        ),
        CatalogOp::Batch(_) | CatalogOp::Coordinates(_) => return no_call_for_write(),
    };
    // A write that may have reached a server is not sent again: its answer would be lost.
    write_in(ctx, datacenter, method, body, move |_, reply| {
        respond(CatalogResult::Written.into(), reply);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_get_consuls_statuses() {
        let remote = |text: &str| error_of(CallError::Remote(text.to_string())).status();
        assert_eq!(remote("ACL not found"), 403);
        assert_eq!(
            remote("Permission denied: token with AccessorID 'a' lacks permission 'key:read'"),
            403
        );
        assert_eq!(remote("rate limit exceeded, try again later"), 429);
        assert_eq!(remote("No cluster leader"), 500);
        let lost = CallError::Transport {
            reason: "rpc error: connection lost".into(),
            sent: true,
        };
        assert_eq!(error_of(lost).status(), 500);
    }

    #[test]
    fn a_writes_answer_is_typed_as_the_proposal_ended() {
        let remote =
            |result: &ProposalResult| WriteOutcome::of(Err(CallError::Remote(result.to_string())));
        let too_large = ProposalResult::TooLarge {
            bytes: 9,
            bytes_max: 8,
        };
        for refused in [
            ProposalResult::NotLeader,
            ProposalResult::Overloaded,
            ProposalResult::ShuttingDown,
            too_large.clone(),
        ] {
            assert_eq!(remote(&refused), WriteOutcome::Refused(refused.clone()));
            // The status the leader's own endpoint answers for it.
            let expected = ApiError::from_proposal(&refused).unwrap().status();
            assert_eq!(remote(&refused).error().unwrap().status(), expected);
        }
        assert_eq!(
            remote(&ProposalResult::Overloaded)
                .error()
                .unwrap()
                .status(),
            503
        );
        assert_eq!(remote(&too_large).error().unwrap().status(), 413);
        assert!(matches!(
            remote(&ProposalResult::LeadershipLost),
            WriteOutcome::MayHaveApplied(_)
        ));
        let lost = CallError::Transport {
            reason: "connection lost".into(),
            sent: true,
        };
        assert_eq!(
            WriteOutcome::of(Err(lost)),
            WriteOutcome::MayHaveApplied("rpc error: connection lost".into())
        );
        let unsent = CallError::Transport {
            reason: "no route".into(),
            sent: false,
        };
        assert!(matches!(
            WriteOutcome::of(Err(unsent)),
            WriteOutcome::Rejected(_)
        ));
        let denied = WriteOutcome::of(Err(CallError::Remote(
            "Permission denied: token lacks permission 'key:write'".into(),
        )));
        assert_eq!(denied.error().unwrap().status(), 403);
        assert_eq!(
            WriteOutcome::of(Ok(bytes::Bytes::from_static(b"\xc3"))).error(),
            None
        );
    }

    #[test]
    fn every_kv_write_but_reaping_has_its_typed_call() {
        let set = KvOp::Set {
            key: "k".into(),
            value: bytes::Bytes::from_static(b"v"),
            flags: 2,
        };
        let request = kvs_request(&set, "t").unwrap();
        assert_eq!(
            (request.op, request.entry.key, request.entry.flags),
            ("set", "k", 2)
        );
        let lock = KvOp::Lock {
            key: "k".into(),
            value: bytes::Bytes::new(),
            flags: 0,
            session: "s".into(),
        };
        assert_eq!(kvs_request(&lock, "").unwrap().entry.session, "s");
        assert!(kvs_request(&KvOp::ReapTombstones { up_to_index: 1 }, "").is_none());
    }
}
