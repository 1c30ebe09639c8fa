//! Snapshot restore as replicated commands.
//!
//! `PUT /v1/snapshot` must change the state of every server, so a restore travels through
//! the Raft log like any write: the leader proposes the state in chunks (each one a normal
//! entry, bounded by the proposal size), then a commit carrying the total size and SHA-256.
//! Every server stages the chunks in order and, at the commit, verifies the digest, decodes
//! the state and replaces its tables with it. A chunk out of order, a digest mismatch or an
//! undecodable state aborts the restore without touching the tables.
//!
//! Indexes: the restored rows keep their own indexes, but every table index is raised to the
//! commit's Raft index, so blocking queries see their index move and re-read.

use super::{Change, CommandResult, Tables};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Largest chunk the leader proposes.
pub const RESTORE_CHUNK_BYTES: usize = 4 << 20;
/// Largest state a restore may stage.
pub const RESTORE_STATE_BYTES_MAX: u64 = 16 << 30;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestoreOp {
    Chunk {
        restore_id: u64,
        offset: u64,
        data: Bytes,
    },
    Commit {
        restore_id: u64,
        total_bytes: u64,
        sha256: Vec<u8>,
    },
    Abort {
        restore_id: u64,
    },
}

/// Chunks received so far for the restore in progress.
///
/// The chunks stay separate `Bytes` handles rather than one growing buffer: the tables are
/// copied on write whenever a shard still holds the previous version, and copying a list of
/// handles costs nothing while copying a gigabyte of staged state per chunk made a large
/// restore quadratic (and stalled the raft thread long enough to lose leadership).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RestoreStaging {
    pub restore_id: u64,
    pub chunks: Vec<Bytes>,
    pub staged_bytes: u64,
}

pub(super) fn apply(
    tables: &mut Tables,
    index: u64,
    op: &RestoreOp,
    changes: &mut Vec<Change>,
) -> CommandResult {
    match op {
        RestoreOp::Chunk {
            restore_id,
            offset,
            data,
        } => {
            let staged = tables
                .restore
                .as_ref()
                .filter(|s| s.restore_id == *restore_id)
                .map(|s| s.staged_bytes);
            match staged {
                None if *offset == 0 => {
                    tables.restore = Some(RestoreStaging {
                        restore_id: *restore_id,
                        chunks: vec![data.clone()],
                        staged_bytes: data.len() as u64,
                    });
                }
                Some(len)
                    if len == *offset && len + data.len() as u64 <= RESTORE_STATE_BYTES_MAX =>
                {
                    let staging = tables.restore.as_mut().expect("staging exists");
                    staging.chunks.push(data.clone());
                    staging.staged_bytes += data.len() as u64;
                }
                _ => {
                    return CommandResult::Error(format!(
                        "restore {restore_id}: chunk at offset {offset} is out of order"
                    ))
                }
            }
            CommandResult::Bool(true)
        }
        RestoreOp::Abort { restore_id } => {
            if tables
                .restore
                .as_ref()
                .is_some_and(|s| s.restore_id == *restore_id)
            {
                tables.restore = None;
            }
            CommandResult::Bool(true)
        }
        RestoreOp::Commit {
            restore_id,
            total_bytes,
            sha256,
        } => {
            let Some(staging) = tables
                .restore
                .take()
                .filter(|s| s.restore_id == *restore_id)
            else {
                return CommandResult::Error(format!("restore {restore_id}: nothing staged"));
            };
            if staging.staged_bytes != *total_bytes {
                return CommandResult::Error(format!(
                    "restore {restore_id}: staged {} bytes, expected {total_bytes}",
                    staging.staged_bytes
                ));
            }
            let mut hasher = Sha256::new();
            let mut state = Vec::with_capacity(staging.staged_bytes as usize);
            for chunk in &staging.chunks {
                hasher.update(chunk);
                state.extend_from_slice(chunk);
            }
            debug_assert_eq!(state.len() as u64, staging.staged_bytes);
            if hasher.finalize().as_slice() != sha256.as_slice() {
                return CommandResult::Error(format!(
                    "restore {restore_id}: SHA-256 of the staged state does not match"
                ));
            }
            let mut restored = match Tables::from_snapshot_bytes(&state) {
                Ok(t) => t,
                Err(e) => return CommandResult::Error(format!("restore {restore_id}: {e}")),
            };
            restored.index = index;
            for table_index in restored.table_indexes.iter_mut() {
                *table_index = index;
            }
            restored.restore = None;
            *tables = restored;
            changes.extend(crate::store::changes_everywhere());
            CommandResult::Bool(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::kv::{self, KvOp};
    use super::super::Command;
    use super::super::{ChangeKey, Table};
    use super::*;

    fn state_with(key: &str) -> Vec<u8> {
        let mut t = Tables::default();
        t.apply(
            5,
            &Command::Kv(KvOp::Set {
                key: key.into(),
                value: Bytes::from_static(b"v"),
                flags: 0,
            }),
            &mut Vec::new(),
        );
        t.to_snapshot_bytes()
    }

    #[test]
    fn chunked_restore_replaces_state_and_raises_indexes() {
        let mut tables = Tables::default();
        tables.apply(
            100,
            &Command::Kv(KvOp::Set {
                key: "old".into(),
                value: Bytes::new(),
                flags: 0,
            }),
            &mut Vec::new(),
        );
        let state = state_with("restored");
        let (first, second) = state.split_at(state.len() / 2);
        let mut changes = Vec::new();
        let chunk = |offset: usize, data: &[u8]| {
            Command::Restore(RestoreOp::Chunk {
                restore_id: 9,
                offset: offset as u64,
                data: Bytes::copy_from_slice(data),
            })
        };
        assert_eq!(
            tables.apply(101, &chunk(0, first), &mut changes),
            CommandResult::Bool(true)
        );
        assert_eq!(
            tables.apply(102, &chunk(first.len(), second), &mut changes),
            CommandResult::Bool(true)
        );
        let commit = Command::Restore(RestoreOp::Commit {
            restore_id: 9,
            total_bytes: state.len() as u64,
            sha256: Sha256::digest(&state).to_vec(),
        });
        assert_eq!(
            tables.apply(103, &commit, &mut changes),
            CommandResult::Bool(true)
        );
        assert!(kv::get(&tables, "old").1.is_none());
        assert_eq!(kv::get(&tables, "restored").1.unwrap().modify_index(), 5);
        assert_eq!(tables.index, 103);
        assert_eq!(tables.table_index(Table::Kvs), 103);
        assert!(changes
            .iter()
            .any(|c| c.table == Table::Kvs && c.key == ChangeKey::All));
    }

    #[test]
    fn bad_restores_change_nothing() {
        let mut tables = Tables::default();
        tables.apply(
            10,
            &Command::Kv(KvOp::Set {
                key: "keep".into(),
                value: Bytes::new(),
                flags: 0,
            }),
            &mut Vec::new(),
        );
        let state = state_with("x");
        let mut changes = Vec::new();
        let out_of_order = Command::Restore(RestoreOp::Chunk {
            restore_id: 1,
            offset: 7,
            data: Bytes::from_static(b"z"),
        });
        assert!(matches!(
            tables.apply(11, &out_of_order, &mut changes),
            CommandResult::Error(_)
        ));
        let chunk = Command::Restore(RestoreOp::Chunk {
            restore_id: 1,
            offset: 0,
            data: Bytes::copy_from_slice(&state),
        });
        tables.apply(12, &chunk, &mut changes);
        let wrong_digest = Command::Restore(RestoreOp::Commit {
            restore_id: 1,
            total_bytes: state.len() as u64,
            sha256: vec![0; 32],
        });
        assert!(matches!(
            tables.apply(13, &wrong_digest, &mut changes),
            CommandResult::Error(_)
        ));
        assert!(kv::get(&tables, "keep").1.is_some());
        assert!(
            tables.restore.is_none(),
            "a failed commit drops the staging"
        );
    }
}
