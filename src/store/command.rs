//! Commands: the payload of every normal Raft entry, and the results of applying them.
//!
//! A command is encoded once by the shard that accepts the write and decoded by every
//! server that applies it, so the encoding is part of the durable log format: it starts with
//! a format byte and evolves only by adding variants at the end.

use super::kv::KvOp;
use super::restore::RestoreOp;
use serde::{Deserialize, Serialize};

/// A state change, replicated through Raft and applied identically on every server.
pub type Command = CommandOf<String>;

/// [`Command`] whose catalog writes hold their text as `S`: `String` where a command is
/// built, `&str` borrowed from the entry where it is applied ([`Command::decode_borrowed`]).
/// One encoding for both.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CommandOf<S> {
    Kv(KvOp),
    Restore(RestoreOp),
    Catalog(super::catalog::CatalogOpOf<S>),
    Session(super::session::SessionOp),
    /// `/v1/txn` writes: every operation applies, or none does.
    Txn(Vec<super::txn::TxnOp>),
    /// ACL writes (tokens, policies, roles, auth methods, binding rules, bootstrap).
    Acl(super::acl::AclOp),
    /// The autopilot configuration.
    Autopilot(super::autopilot::AutopilotOp),
    /// Prepared-query writes.
    Query(super::query::QueryOp),
    /// The agent CA's root for auto-encrypt.
    AgentCa(super::agent_ca::AgentCaOp),
    /// Config entry writes, the intentions API's among them.
    ConfigEntry(super::mesh::config_entry::ConfigEntryOp),
    /// The leader's Connect CA writes.
    Ca(super::mesh::ca::CaOp),
    /// A datacenter's federation state written or deleted (Consul's
    /// `FederationStateRequest`).
    FederationState(super::federation::FederationStateOp),
    /// Cluster peering writes: peerings, their secrets, trust bundles.
    Peering(super::peering::PeeringOp),
}

/// The outcome of applying a command, returned to the client that proposed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandResult {
    /// Success or failure of a conditional write (`true`/`false` in the HTTP API).
    Bool(bool),
    /// The command was refused; the text is the error Consul would report.
    Error(String),
    /// A transaction's results or the errors that rolled it back.
    Txn(Box<super::txn::TxnOutcome>),
}

/// First byte of an encoded command.
const COMMAND_FORMAT_VERSION: u8 = 1;
/// First byte of a Raft entry payload that carries the proposing leader's wall clock: the tag,
/// 8 bytes of Unix milliseconds (little endian), then an encoded command. The raft driver
/// stamps every proposal on the leader, so time-dependent state (lock-delays) is computed
/// from the same bytes on every server.
const STAMPED_ENTRY_TAG: u8 = 2;
const STAMP_BYTES: usize = 8;

/// Prefixes an encoded command with the leader's wall clock.
pub fn stamp_entry(leader_time_ms: u64, command: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + STAMP_BYTES + command.len());
    out.push(STAMPED_ENTRY_TAG);
    out.extend_from_slice(&leader_time_ms.to_le_bytes());
    out.extend_from_slice(command);
    out
}

/// Splits a Raft entry payload into its stamp (absent in entries written before stamping)
/// and the encoded command.
pub fn split_stamp(entry: &[u8]) -> Result<(Option<u64>, &[u8]), String> {
    match entry.split_first() {
        Some((&STAMPED_ENTRY_TAG, rest)) => {
            if rest.len() < STAMP_BYTES {
                return Err("truncated entry stamp".to_string());
            }
            let (stamp, command) = rest.split_at(STAMP_BYTES);
            let stamp = u64::from_le_bytes(stamp.try_into().expect("split at STAMP_BYTES"));
            Ok((Some(stamp), command))
        }
        _ => Ok((None, entry)),
    }
}

impl<S: Serialize> CommandOf<S> {
    /// The entry bytes of this command (either text form: one encoding).
    pub fn encode_as_entry(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.push(COMMAND_FORMAT_VERSION);
        rmp_serde::encode::write(&mut out, self)
            .expect("encoding a command into a Vec cannot fail");
        out
    }
}

impl Command {
    /// [`CommandOf::encode_as_entry`], compiled here (not in each crate that encodes).
    pub fn encode(&self) -> Vec<u8> {
        self.encode_as_entry()
    }

    pub fn decode(bytes: &[u8]) -> Result<Command, String> {
        decode_as(bytes)
    }

    /// Decodes for the apply: a catalog write's text borrows from `bytes` instead of being
    /// copied into strings the apply would copy again (the same command otherwise).
    pub fn decode_borrowed(bytes: &[u8]) -> Result<CommandOf<&str>, String> {
        decode_as(bytes)
    }
}

fn decode_as<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
    match bytes.split_first() {
        Some((&COMMAND_FORMAT_VERSION, rest)) => {
            rmp_serde::from_slice(rest).map_err(|e| format!("corrupt command: {e}"))
        }
        Some((v, _)) => Err(format!("unsupported command format {v}")),
        None => Err("empty command".to_string()),
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
        let stamped = stamp_entry(
            1_700_000_000_123,
            &Command::Kv(KvOp::Delete { key: "k".into() }).encode(),
        );
        let (stamp, command) = split_stamp(&stamped).unwrap();
        assert_eq!(stamp, Some(1_700_000_000_123));
        assert_eq!(
            Command::decode(command).unwrap(),
            Command::Kv(KvOp::Delete { key: "k".into() })
        );
        let plain = Command::Kv(KvOp::Delete { key: "k".into() }).encode();
        assert_eq!(split_stamp(&plain).unwrap(), (None, &plain[..]));
        assert!(split_stamp(&[2, 1, 2]).is_err());
        assert!(Command::decode(&[]).is_err());
        assert!(Command::decode(&[7, 1, 2]).is_err());
        assert!(Command::decode(&[1, 0xc1]).is_err());
    }
}
