//! Snapshots as typed calls, both halves: praetor's own `Snapshot.Save` and
//! `Snapshot.Restore`, whose request is Consul's `SnapshotRequest` (the header of Consul's
//! byte-5 stream) with the archive inside the call rather than streamed after it (see
//! `docs/decisions.md`, *snapshots as typed calls*).
//!
//! Served as `/v1/snapshot` is (`api::snapshot`): a save runs on the leader, or on any
//! server when `AllowStale`; a restore on the leader, which replicates the state in chunks.
//! Both need the management rule the route checks (`acl:write`, Consul's
//! `SnapshotAllowed`). A client agent, a follower and a request naming another datacenter
//! make the call ([`save`], [`restore`]) and answer as the server's handler does. An
//! archive larger than [`SNAPSHOT_CALL_BYTES_MAX`] does not cross a call: a save refuses
//! it on the server, a restore on the agent (413), each in words that say so.

use super::client::{call_mapped, error_of, write_error, CALL_TIMEOUT};
use super::Placement;
use super::{authorize, decode_error, elsewhere, error_text, require, rpc_meta_of, Answer};
use crate::api::authz::request_secret;
use crate::api::server::Server;
use crate::api::snapshot::{
    archive_of, checked_state, replicate_restore, restored_answer, save_answer,
};
use crate::api::{ApiError, Context, Outcome, Request};
use crate::cluster::servers::Retry;
use crate::consul::rpc::snapshot::{
    decode_response, encode_response, SnapshotOp, SnapshotRequest, SNAPSHOT_CALL_BYTES_MAX,
};
use crate::consul::rpc::QueryMeta;
use crate::replica::ProposalResult;
use crate::shard::rpc_server::TypedCall;
use crate::shard::runtime::Consistency;
use crate::store::CommandResult;

/// The words for an archive too large for a call.
fn too_large(bytes: usize) -> String {
    format!(
        "snapshot archive of {bytes} bytes exceeds the {SNAPSHOT_CALL_BYTES_MAX} bytes a snapshot call carries"
    )
}

/// The request of a call, checked to be the operation its method names.
fn request_of(call: &TypedCall, op: SnapshotOp) -> Result<SnapshotRequest<'_>, String> {
    let request = SnapshotRequest::decode(&call.body).map_err(decode_error)?;
    if request.op != op {
        return Err(format!(
            "{} takes a SnapshotRequest with Op {op:?}",
            call.method()
        ));
    }
    Ok(request)
}

/// `Snapshot.Save`: the archive of the leader's state, or of this server's with
/// `AllowStale`.
pub async fn serve_save(server: &Server, call: &TypedCall) -> Answer {
    let request = request_of(call, SnapshotOp::Save)?;
    let placement = if request.allow_stale {
        Placement::Anywhere
    } else {
        Placement::Leader
    };
    if let Some(answer) = elsewhere(server, call, request.datacenter, placement, None).await {
        return answer;
    }
    let authz = authorize(server, request.token)?;
    require(&authz, |a| a.snapshot())?;
    let ctx = server.context();
    let (archive, index) = archive_of(ctx).map_err(|e| error_text(&e))?;
    if archive.len() > SNAPSHOT_CALL_BYTES_MAX {
        return Err(too_large(archive.len()));
    }
    let consistency = if request.allow_stale {
        Consistency::Stale
    } else {
        Consistency::Leader
    };
    let meta = rpc_meta_of(&ctx.query_meta(index, consistency), false);
    Ok(encode_response(&meta, &archive))
}

/// `Snapshot.Restore`: on the leader, which checks the archive and replicates its state.
pub async fn serve_restore(server: &Server, call: &TypedCall) -> Answer {
    let request = request_of(call, SnapshotOp::Restore)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.token)?;
    require(&authz, |a| a.snapshot())?;
    let state = checked_state(request.archive).map_err(|e| error_text(&e))?;
    match Box::pin(replicate_restore(server.shard(), state)).await {
        ProposalResult::Applied(CommandResult::Error(reason)) => Err(reason),
        ProposalResult::Applied(_) => Ok(encode_response(&QueryMeta::default(), &[])),
        refused => Err(ApiError::from_proposal(&refused)
            .map(|e| error_text(&e))
            .unwrap_or_else(|| refused.to_string())),
    }
}

/// The datacenter a request names: `datacenter`, or this agent's when empty.
fn named<'a>(ctx: &'a Context, datacenter: &'a str) -> &'a str {
    if datacenter.is_empty() {
        &ctx.config().datacenter
    } else {
        datacenter
    }
}

/// `GET /v1/snapshot` by call: `Snapshot.Save` of `datacenter` (empty: this one), answered
/// with the archive and the answering server's query headers.
pub fn save(
    ctx: &Context,
    request: &Request,
    options: &crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = SnapshotRequest {
        allow_stale: options.consistency == Consistency::Stale,
        archive: &[],
        datacenter: named(ctx, datacenter),
        op: SnapshotOp::Save,
        token: &secret,
    }
    .encode();
    call_mapped(
        ctx,
        datacenter,
        "Snapshot.Save",
        body,
        CALL_TIMEOUT,
        Retry::Always,
        error_of,
        |body, reply| {
            let (meta, archive) = decode_response(body).map_err(ApiError::Internal)?;
            save_answer(archive.to_vec(), super::client::meta_of(&meta), reply);
            Ok(())
        },
    )
}

/// `PUT /v1/snapshot` by call: `Snapshot.Restore` on the leader of `datacenter` (empty:
/// this one) with the request's archive, sent once; the handler checked the archive.
pub fn restore(ctx: &Context, request: &Request, datacenter: &str) -> Result<Outcome, ApiError> {
    if request.body.len() > SNAPSHOT_CALL_BYTES_MAX {
        return Err(ApiError::TooLarge(too_large(request.body.len())));
    }
    let secret = request_secret(ctx, request);
    let body = SnapshotRequest {
        allow_stale: false,
        archive: request.body,
        datacenter: named(ctx, datacenter),
        op: SnapshotOp::Restore,
        token: &secret,
    }
    .encode();
    Ok(call_mapped(
        ctx,
        datacenter,
        "Snapshot.Restore",
        body,
        CALL_TIMEOUT,
        Retry::NotSent,
        write_error,
        |body, reply| {
            decode_response(body).map_err(ApiError::Internal)?;
            restored_answer(reply);
            Ok(())
        },
    ))
}

/// `/v1/snapshot?dc=<other>` as the typed call naming that datacenter
/// ([`super::client::across_datacenters`]); `None` for other paths.
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    crate::api::snapshot::across(ctx, request, datacenter)
}
