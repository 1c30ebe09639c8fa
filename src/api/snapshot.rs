//! `/v1/snapshot`: GET saves the whole state as an archive; PUT restores one, replicated
//! through Raft like any write.

use super::{query_options, ApiError, Context, LeaderOp, Outcome, Reply, Request};
use crate::proto::http::Method;
use crate::proto::snapshot_archive;
use crate::shard::runtime::ReadPlan;
use crate::store::{CommandResult, Tables};
use serde_json::json;

/// Largest restore archive accepted, compressed.
pub const SNAPSHOT_UPLOAD_BYTES_MAX: usize = 4 << 30;
/// Capacity the compressed archive starts with; it grows as the compressor writes.
const ARCHIVE_INITIAL_BYTES: usize = 64 * 1024;
/// Largest state an archive may expand to.
pub const SNAPSHOT_STATE_BYTES_MAX: u64 = 16 << 30;

/// `/v1/snapshot`: GET saves, PUT restores.
pub fn handle(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    match request.method {
        Method::Get => save(ctx, request, reply),
        Method::Put => restore(ctx, request),
        _ => unreachable!("the routing table admits only GET and PUT"),
    }
}

fn save(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let options = query_options(ctx, &request.query)?;
    match ctx.read_plan(&options) {
        ReadPlan::Forward => return Ok(Outcome::Forward),
        ReadPlan::Barrier | ReadPlan::Local => {}
    }
    let version = ctx.current_version();
    // The state is serialized twice, straight from the shared version: once to learn its
    // length and checksum (the tar header and SHA256SUMS need them), once into the
    // compressor. So the only large buffer is the compressed archive itself, not the state
    // and a tar copy of it beside the archive (docs/memory.md).
    let mut write_state = |out: &mut dyn std::io::Write| version.write_snapshot(out);
    let digest = snapshot_archive::digest_state(&mut write_state)
        .map_err(|e| ApiError::Internal(format!("snapshot state: {e}")))?;
    let status = ctx.cluster_status();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let meta = json!({
        "Version": 1,
        "ID": format!("{}-{}-{}", status.term, version.index, now.as_millis()),
        "Index": version.index,
        "Term": status.term,
        "ConfigurationIndex": status.membership_index,
        "Size": digest.len,
        "Format": "praetor-tables-v1",
    });
    let meta_json = serde_json::to_vec_pretty(&meta).expect("metadata serializes");
    let archive = snapshot_archive::write_archive_to(
        &meta_json,
        &digest,
        now.as_secs(),
        &mut write_state,
        Vec::with_capacity(ARCHIVE_INITIAL_BYTES),
    )
    .map_err(|e| ApiError::Internal(format!("snapshot archive: {e}")))?;
    let mut headers = Vec::with_capacity(160);
    ctx.query_meta(version.index, options.consistency)
        .write_headers(&mut headers);
    reply.send_owned(200, Some("application/x-gzip"), &headers, archive);
    Ok(Outcome::Done)
}

fn restore(ctx: &Context, request: &Request) -> Result<Outcome, ApiError> {
    super::check_datacenter(ctx, &request.query)?;
    let archive = snapshot_archive::read_archive(request.body, SNAPSHOT_STATE_BYTES_MAX)
        .map_err(ApiError::BadRequest)?;
    // Refuse a state this version cannot decode before replicating a byte of it.
    Tables::from_snapshot_bytes(&archive.state)
        .map_err(|e| ApiError::bad_request(format!("snapshot state cannot be restored: {e}")))?;
    Ok(Outcome::Leader(LeaderOp::Restore {
        state: archive.state,
        respond: Box::new(|result, reply: &mut Reply| match result {
            CommandResult::Bool(_) | CommandResult::Txn(_) => reply.send(200, None, b"", b""),
            CommandResult::Error(reason) => reply.error(&ApiError::Internal(reason)),
        }),
    }))
}
