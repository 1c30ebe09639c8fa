//! Commands: the payload of every normal Raft entry, and the results of applying them.
//!
//! A command is encoded once by the shard that accepts the write and decoded by every
//! server that applies it, so the encoding is part of the durable log format: it starts with
//! a format byte and evolves only by adding variants at the end.

use super::kv::KvOp;
use super::restore::RestoreOp;
use serde::{Deserialize, Serialize};

/// A state change, replicated through Raft and applied identically on every server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    Kv(KvOp),
    Restore(RestoreOp),
    Catalog(super::catalog::CatalogOp),
}

/// The outcome of applying a command, returned to the client that proposed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandResult {
    /// Success or failure of a conditional write (`true`/`false` in the HTTP API).
    Bool(bool),
    /// The command was refused; the text is the error Consul would report.
    Error(String),
}

/// First byte of an encoded command.
const COMMAND_FORMAT_VERSION: u8 = 1;

impl Command {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.push(COMMAND_FORMAT_VERSION);
        rmp_serde::encode::write(&mut out, self)
            .expect("encoding a command into a Vec cannot fail");
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Command, String> {
        match bytes.split_first() {
            Some((&COMMAND_FORMAT_VERSION, rest)) => {
                rmp_serde::from_slice(rest).map_err(|e| format!("corrupt command: {e}"))
            }
            Some((v, _)) => Err(format!("unsupported command format {v}")),
            None => Err("empty command".to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn commands_round_trip() {
        let commands = [
            Command::Kv(KvOp::Set {
                key: "a/b".into(),
                value: Bytes::from_static(b"\x00\xff"),
                flags: 42,
            }),
            Command::Kv(KvOp::Cas {
                key: "k".into(),
                value: Bytes::new(),
                flags: 0,
                modify_index: 9,
            }),
            Command::Kv(KvOp::Delete { key: "k".into() }),
            Command::Kv(KvOp::DeleteCas {
                key: "k".into(),
                modify_index: 3,
            }),
            Command::Kv(KvOp::DeleteTree {
                prefix: "p/".into(),
            }),
            Command::Kv(KvOp::ReapTombstones { up_to_index: 77 }),
        ];
        for command in commands {
            assert_eq!(Command::decode(&command.encode()).unwrap(), command);
        }
        assert!(Command::decode(&[]).is_err());
        assert!(Command::decode(&[7, 1, 2]).is_err());
        assert!(Command::decode(&[1, 0xc1]).is_err());
    }
}
