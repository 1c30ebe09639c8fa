//! The deterministic state machine the simulator applies committed entries to, behind a tiny
//! trait so praetor's real store can be plugged in later.
//!
//! Commands are 9 bytes: a key (one byte) and a unique write id (u64, little endian). The
//! store remembers, per key, the last write id and the log index that wrote it.

use std::collections::BTreeMap;

use bytes::Bytes;
use praetor::raft::LogIndex;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Version {
    pub write_id: u64,
    pub index: LogIndex,
}

#[derive(Default, Debug, serde::Serialize, serde::Deserialize)]
pub struct KvStore {
    map: BTreeMap<u8, Version>,
    applied: LogIndex,
}

pub fn encode_put(key: u8, write_id: u64) -> Bytes {
    let mut bytes = Vec::with_capacity(9);
    bytes.push(key);
    bytes.extend_from_slice(&write_id.to_le_bytes());
    Bytes::from(bytes)
}

pub fn decode_put(command: &[u8]) -> Option<(u8, u64)> {
    if command.len() != 9 {
        return None;
    }
    let write_id = u64::from_le_bytes(command[1..9].try_into().ok()?);
    Some((command[0], write_id))
}

impl KvStore {
    pub fn get(&self, key: u8) -> Option<Version> {
        self.map.get(&key).copied()
    }

    /// Marks `index` applied without a command (Noop and Membership entries).
    pub fn skip(&mut self, index: LogIndex) {
        self.applied = index;
    }
}

impl StateMachine for KvStore {
    fn apply(&mut self, index: LogIndex, command: &[u8]) {
        if let Some((key, write_id)) = decode_put(command) {
            self.map.insert(key, Version { write_id, index });
        }
        self.applied = index;
    }

    fn snapshot(&self) -> Bytes {
        Bytes::from(rmp_serde::to_vec(self).expect("the store encodes"))
    }

    fn restore(&mut self, data: &[u8]) {
        *self = rmp_serde::from_slice(data).expect("a snapshot we made decodes");
    }

    fn applied(&self) -> LogIndex {
        self.applied
    }
}
