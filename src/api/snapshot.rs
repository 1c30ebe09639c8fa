//! `/v1/snapshot`: GET saves the whole state as an archive; PUT restores one, replicated
//! through Raft like any write: on the leader, [`replicate_restore`] proposes the state in
//! chunks of [`RESTORE_CHUNK_BYTES`] and then the commit every server verifies, so no log
//! entry carries more than one chunk.
//!
//! A client agent, a follower (for a save that is not `?stale`, and every restore) and a
//! request naming another datacenter (`?dc=`, [`across`]) send the request on a snapshot
//! connection of its own instead (byte 5, as Consul's agents do; `api::rpc::snapshot`), the
//! archive streamed after it; the server that answers builds the archive ([`archive_of`]) or
//! checks and restores it ([`checked_state`]) as here.

use super::{
    query_options, query_options_in, ApiError, Context, LeaderOp, Outcome, QueryMeta, Reply,
    Request,
};
use crate::proto::http::Method;
use crate::proto::snapshot_archive;
use crate::shard::runtime::{ProposalResult, Shard};
use crate::store::restore::{RestoreOp, RESTORE_CHUNK_BYTES};
use crate::store::{Command, CommandResult, Tables};
use serde_json::json;

/// Largest restore archive accepted, compressed: the `PUT` body, and the archive a byte-5
/// restore streams.
pub const SNAPSHOT_UPLOAD_BYTES_MAX: usize = 4 << 30;
/// Capacity the compressed archive starts with; it grows as the compressor writes.
const ARCHIVE_INITIAL_BYTES: usize = 64 * 1024;
/// Largest state an archive may expand to.
pub const SNAPSHOT_STATE_BYTES_MAX: u64 = 16 << 30;

/// `/v1/snapshot`: GET saves, PUT restores.
pub fn handle(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    handle_in(ctx, request, reply, "")
}

/// `/v1/snapshot` in `datacenter` (empty: this one).
fn handle_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    match request.method {
        Method::Get => save(ctx, request, reply, datacenter),
        Method::Put => restore(ctx, request, datacenter),
        _ => unreachable!("the routing table admits only GET and PUT"),
    }
}

/// `/v1/snapshot?dc=<other>`: a snapshot connection naming that datacenter.
pub fn across(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    (request.path == "/v1/snapshot")
        .then(|| super::run_for_datacenter(ctx, request, datacenter, handle_in))
}

fn save(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let options = if datacenter.is_empty() {
        query_options(ctx, &request.query)?
    } else {
        query_options_in(ctx, &request.query)?
    };
    if !datacenter.is_empty() || ctx.reads_by_call(&options) {
        return Ok(super::rpc::snapshot::save(
            ctx, request, &options, datacenter,
        ));
    }
    let (archive, index) = archive_of(ctx)?;
    save_answer(archive, ctx.query_meta(index, options.consistency), reply);
    Ok(Outcome::Done)
}

/// A save's answer: the archive, with the query's headers.
pub fn save_answer(archive: Vec<u8>, meta: QueryMeta, reply: &mut Reply) {
    let mut headers = Vec::with_capacity(160);
    meta.write_headers(&mut headers);
    reply.send_owned(200, Some("application/x-gzip"), &headers, archive);
}

/// The archive of this server's current state, and the index it was taken at.
pub fn archive_of(ctx: &Context) -> Result<(Vec<u8>, u64), ApiError> {
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
    Ok((archive, version.index))
}

fn restore(ctx: &Context, request: &Request, datacenter: &str) -> Result<Outcome, ApiError> {
    if datacenter.is_empty() {
        super::check_datacenter(ctx, &request.query)?;
    }
    let state = checked_state(request.body)?;
    if !datacenter.is_empty() || ctx.writes_by_call() {
        drop(state);
        return super::rpc::snapshot::restore(ctx, request, datacenter);
    }
    Ok(Outcome::Leader(LeaderOp::Restore {
        state,
        respond: Box::new(|result, reply: &mut Reply| match result {
            CommandResult::Error(reason) => reply.error(&ApiError::Internal(reason)),
            _ => restored_answer(reply),
        }),
    }))
}

/// A restore's answer: 200, empty.
pub fn restored_answer(reply: &mut Reply) {
    reply.send(200, None, b"", b"");
}

/// The state inside a restore's archive, refused (400) when the archive is not whole or the
/// state is one this version cannot decode — before a byte of it is replicated.
pub fn checked_state(archive: &[u8]) -> Result<Vec<u8>, ApiError> {
    let archive = snapshot_archive::read_archive(archive, SNAPSHOT_STATE_BYTES_MAX)
        .map_err(ApiError::BadRequest)?;
    Tables::from_snapshot_bytes(&archive.state)
        .map_err(|e| ApiError::bad_request(format!("snapshot state cannot be restored: {e}")))?;
    Ok(archive.state)
}
/// Replicates a restore: the state in chunks through the log, then the commit that every
/// server verifies and switches to. A failed chunk aborts the staged restore.
pub(in crate::api) async fn replicate_restore(shard: &Shard, state: Vec<u8>) -> ProposalResult {
    use sha2::Digest;
    let restore_id: u64 = rand::random();
    for (i, chunk) in state.chunks(RESTORE_CHUNK_BYTES).enumerate() {
        let op = RestoreOp::Chunk {
            restore_id,
            offset: (i * RESTORE_CHUNK_BYTES) as u64,
            data: bytes::Bytes::copy_from_slice(chunk),
        };
        let result = shard.propose(Command::Restore(op).encode()).await;
        let failure = match result {
            ProposalResult::Applied(CommandResult::Error(reason)) => {
                ProposalResult::Applied(CommandResult::Error(format!("restore failed: {reason}")))
            }
            ProposalResult::Applied(_) => continue,
            refused => refused,
        };
        let _ = shard
            .propose(Command::Restore(RestoreOp::Abort { restore_id }).encode())
            .await;
        return failure;
    }
    let sha256 = sha2::Sha256::digest(&state).to_vec();
    let commit = RestoreOp::Commit {
        restore_id,
        total_bytes: state.len() as u64,
        sha256,
    };
    shard.propose(Command::Restore(commit).encode()).await
}

/// Proves a snapshot's state whole and decodable (`praetor snapshot save` verifies what it
/// keeps, as Consul's does).
pub fn verify_state(state: &[u8]) -> Result<(), String> {
    Tables::from_snapshot_bytes(state).map(drop)
}

/// Walks a snapshot's state as Consul's `snapshot inspect` counts its records: `visit`
/// gets each record's Consul type name, its key for a KV record, and its size in bytes.
/// praetor's state is its own encoding of the tables, so a record's size is the
/// MessagePack encoding of the row as praetor stores it; the counts follow Consul's
/// records (one `Register` per node, per service instance and per check, one
/// `CoordinateBatchUpdate` for all coordinates, one `Index` per table index).
pub fn visit_records(
    state: &[u8],
    mut visit: impl FnMut(&'static str, Option<&str>, usize),
) -> Result<(), String> {
    let tables = &Tables::from_snapshot_bytes(state)?;
    for entry in tables.catalog.nodes.values() {
        visit("Register", None, encoded_len(&**entry.node())?);
        for service in entry.services.values() {
            visit("Register", None, encoded_len(&**service)?);
        }
        for check in entry.checks.values() {
            visit("Register", None, encoded_len(&**check)?);
        }
    }
    for row in tables.kv.entries.iter() {
        visit("KVS", Some(row.key()), encoded_len(&row)?);
    }
    for tombstone in tables.kv.tombstones.iter() {
        visit("Tombstone", None, encoded_len(&tombstone)?);
    }
    for session in tables.sessions.sessions.values() {
        visit("Session", None, encoded_len(&**session)?);
    }
    if !tables.catalog.coordinates.is_empty() {
        let all: Vec<_> = tables.catalog.coordinates.values().map(|c| &**c).collect();
        visit("CoordinateBatchUpdate", None, encoded_len(&all)?);
    }
    for query in tables.queries.by_id.values() {
        visit("PreparedQuery", None, encoded_len(&**query)?);
    }
    if let Some(autopilot) = &tables.autopilot {
        visit("Autopilot", None, encoded_len(autopilot)?);
    }
    let acl = &tables.acl;
    for token in acl.tokens.values() {
        visit("ACLToken", None, encoded_len(&**token)?);
    }
    for policy in acl.policies.values() {
        visit("ACLPolicy", None, encoded_len(&**policy)?);
    }
    for role in acl.roles.values() {
        visit("ACLRole", None, encoded_len(&**role)?);
    }
    for method in acl.auth_methods.values() {
        visit("ACLAuthMethod", None, encoded_len(&**method)?);
    }
    for rule in acl.binding_rules.values() {
        visit("ACLBindingRule", None, encoded_len(&**rule)?);
    }
    for entry in tables.mesh.config_entries.entries.values() {
        visit("ConfigEntry", None, encoded_len(&**entry)?);
    }
    for root in &tables.mesh.ca.roots {
        visit("ConnectCA", None, encoded_len(&**root)?);
    }
    if let Some(config) = &tables.mesh.ca.config {
        visit("ConnectCAConfig", None, encoded_len(&**config)?);
    }
    // praetor's own record: the agent CA behind auto-encrypt, which Consul keeps in its
    // Connect CA.
    if let Some(agent_ca) = &tables.agent_ca {
        visit("AgentCA", None, encoded_len(agent_ca)?);
    }
    for (table, index) in tables.table_indexes.iter().enumerate() {
        if *index > 0 {
            visit("Index", None, encoded_len(&(table, *index))?);
        }
    }
    Ok(())
}

/// The bytes of one record as praetor encodes it.
fn encoded_len<T: serde::Serialize + ?Sized>(row: &T) -> Result<usize, String> {
    rmp_serde::to_vec(row)
        .map(|bytes| bytes.len())
        .map_err(|e| format!("cannot encode a record: {e}"))
}
