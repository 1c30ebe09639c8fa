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

/// Human summary of an archive for `praetor snapshot inspect`.
/// `snapshot inspect -format=json`: Consul's JSON layout (`Meta` with the archive's
/// metadata, `Stats` with a name, byte sum and count per record type, `TotalSize`), for
/// the record types praetor's snapshot holds.
pub fn inspect_json(archive_bytes: &[u8]) -> Result<String, String> {
    let archive = snapshot_archive::read_archive(archive_bytes, SNAPSHOT_STATE_BYTES_MAX)?;
    let meta: serde_json::Value = serde_json::from_slice(&archive.meta_json)
        .map_err(|e| format!("snapshot meta.json is not JSON: {e}"))?;
    let tables = Tables::from_snapshot_bytes(&archive.state)?;
    let kv_bytes: usize = tables
        .kv
        .entries
        .iter()
        .map(|entry| entry.key().len() + entry.value().len())
        .sum();
    let tombstone_bytes: usize = tables.kv.tombstones.keys().map(|key| key.len()).sum();
    let stats = [
        ("KVS", kv_bytes, tables.kv.entries.len()),
        ("Tombstone", tombstone_bytes, tables.kv.tombstones.len()),
    ];
    let field = |key: &str| meta.get(key).cloned().unwrap_or(serde_json::Value::Null);
    let body = serde_json::json!({
        "Meta": {
            "ID": field("ID"),
            "Size": field("Size"),
            "Index": field("Index"),
            "Term": field("Term"),
            "Version": field("Version"),
        },
        "Stats": stats
            .iter()
            .map(|(name, sum, count)| serde_json::json!({"Name": name, "Sum": sum, "Count": count}))
            .collect::<Vec<_>>(),
        "TotalSize": kv_bytes + tombstone_bytes,
    });
    let mut out = serde_json::to_string_pretty(&body).map_err(|e| e.to_string())?;
    out.push('\n');
    Ok(out)
}

pub fn inspect(archive_bytes: &[u8]) -> Result<String, String> {
    let archive = snapshot_archive::read_archive(archive_bytes, SNAPSHOT_STATE_BYTES_MAX)?;
    let meta: serde_json::Value = serde_json::from_slice(&archive.meta_json)
        .map_err(|e| format!("snapshot meta.json is not JSON: {e}"))?;
    let tables = Tables::from_snapshot_bytes(&archive.state)?;
    let mut out = String::new();
    for key in ["ID", "Index", "Term", "Version", "Size"] {
        let value = meta
            .get(key)
            .map(|v| v.to_string().trim_matches('"').to_string())
            .unwrap_or_default();
        out.push_str(&format!("{key:<12} {value}\n"));
    }
    out.push('\n');
    out.push_str(&format!("{:<16} {:>10}\n", "Type", "Count"));
    out.push_str(&format!("{:<16} {:>10}\n", "----", "-----"));
    out.push_str(&format!("{:<16} {:>10}\n", "KVS", tables.kv.entries.len()));
    out.push_str(&format!(
        "{:<16} {:>10}\n",
        "Tombstone",
        tables.kv.tombstones.len()
    ));
    Ok(out)
}
