//! The state machine the simulator applies committed entries to: praetor's real store,
//! behind a tiny trait. Each write sets one of a few keys to a unique write id; the store
//! remembers, per key, the last write id and the log index that wrote it (its ModifyIndex).

use bytes::Bytes;
use praetor::raft::LogIndex;
use praetor::store::kv::{self, KvOp};
use praetor::store::{Command, Tables};

/// What the simulator needs from a state machine.
pub trait StateMachine {
    /// Applies the command of the entry at `index`; entries arrive in index order.
    fn apply(&mut self, index: LogIndex, command: &[u8]);
    /// Serializes the whole state.
    fn snapshot(&self) -> Bytes;
    /// Replaces the whole state by a snapshot's.
    fn restore(&mut self, data: &[u8]);
    /// The index of the last applied entry.
    fn applied(&self) -> LogIndex;
}

/// The value stored under a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    pub write_id: u64,
    pub index: LogIndex,
}

/// praetor's real store (`praetor::store::Tables`) behind the simulator's trait. Commands
/// are real KV commands (`KvOp::Set` on key `sim/<k>` whose value is the write id), applied by
/// the real `Tables::apply` and snapshotted with the real encoding, so the simulator checks
/// the store's determinism along with Raft.
#[derive(Default, Debug)]
pub struct KvStore {
    tables: Tables,
}

fn key_name(key: u8) -> String {
    format!("sim/{key}")
}

pub fn encode_put(key: u8, write_id: u64) -> Bytes {
    let op = KvOp::Set {
        key: key_name(key),
        value: Bytes::copy_from_slice(&write_id.to_le_bytes()),
        flags: 0,
    };
    Bytes::from(Command::Kv(op).encode())
}

impl KvStore {
    pub fn get(&self, key: u8) -> Option<Version> {
        let entry = kv::get(&self.tables, &key_name(key)).1?;
        let write_id = u64::from_le_bytes(
            entry
                .value()
                .try_into()
                .expect("the simulator writes 8-byte values"),
        );
        Some(Version {
            write_id,
            index: entry.modify_index(),
        })
    }

    /// Marks `index` applied without a command (Noop and Membership entries).
    pub fn skip(&mut self, index: LogIndex) {
        self.tables.advance_to(index);
    }
}

impl StateMachine for KvStore {
    fn apply(&mut self, index: LogIndex, command: &[u8]) {
        let command = Command::decode(command).expect("the simulator proposes only real commands");
        self.tables.apply(index, &command, &mut Vec::new());
    }

    fn snapshot(&self) -> Bytes {
        Bytes::from(self.tables.to_snapshot_bytes())
    }

    fn restore(&mut self, data: &[u8]) {
        self.tables = Tables::from_snapshot_bytes(data).expect("a snapshot we made decodes");
    }

    fn applied(&self) -> LogIndex {
        self.tables.index
    }
}
