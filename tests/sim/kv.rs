//! The simulator's writes and reads, in praetor's real store: each write sets one of a few
//! keys (`sim/<k>`) to a unique write id with a real KV command, which the production replica
//! stamps, replicates and applies with the real `Tables::apply`; a read looks the key up in a
//! store version as a shard would.

use bytes::Bytes;
use praetor::raft::LogIndex;
use praetor::store::command::split_stamp;
use praetor::store::kv::{self, KvOp};
use praetor::store::{Command, Tables};

/// A key's value as a read sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    pub write_id: u64,
    /// The log index that wrote it (its ModifyIndex).
    pub index: LogIndex,
}

fn key_name(key: u8) -> String {
    format!("sim/{key}")
}

/// The encoded command of write `write_id` to `key`, as a shard proposes it.
pub fn encode_put(key: u8, write_id: u64) -> Bytes {
    let op = KvOp::Set {
        key: key_name(key),
        value: Bytes::copy_from_slice(&write_id.to_le_bytes()),
        flags: 0,
    };
    Bytes::from(Command::Kv(op).encode())
}

/// The write id a committed entry's payload carries, if it is one of the simulator's writes.
pub fn write_id_of(entry_data: &[u8]) -> Option<u64> {
    let (_, command) = split_stamp(entry_data).ok()?;
    match Command::decode(command).ok()? {
        Command::Kv(KvOp::Set { value, .. }) => {
            Some(u64::from_le_bytes(value[..].try_into().ok()?))
        }
        _ => None,
    }
}

/// `key` in `tables`.
pub fn get(tables: &Tables, key: u8) -> Option<Version> {
    let entry = kv::get(tables, &key_name(key)).1?;
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
