//! `/v1/snapshot`: GET saves the whole state as an archive; PUT restores one, replicated
//! through Raft like any write: on the leader, [`replicate_restore`] proposes the state in
//! chunks of [`RESTORE_CHUNK_BYTES`] and then the commit every server verifies, so no log
//! entry carries more than one chunk.

use super::{query_options, ApiError, Context, LeaderOp, Outcome, Reply, Request};
use crate::proto::http::Method;
use crate::proto::snapshot_archive;
use crate::shard::runtime::{ProposalResult, ReadPlan, Shard};
use crate::store::restore::{RestoreOp, RESTORE_CHUNK_BYTES};
use crate::store::{Command, CommandResult, Tables};
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
        ReadPlan::Forward => return Err(super::no_typed_call()),
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
            CommandResult::Error(reason) => reply.error(&ApiError::Internal(reason)),
            _ => reply.send(200, None, b"", b""),
        }),
    }))
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
