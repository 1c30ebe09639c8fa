//! Commands: the payload of every normal Raft entry, and the results of applying them.
//!
//! A command is encoded once by the shard that accepts the write and decoded by every
//! server that applies it, so the encoding is part of the durable log format: it starts with
//! a format byte and evolves only by adding variants at the end.
//!
//! Results are typed per command family: a KV write answers a [`KvResult`], a catalog write
//! a [`CatalogResult`], a session write a [`SessionResult`], a transaction a [`TxnAnswer`],
//! a prepared-query write a [`QueryResult`], an autopilot write an [`AutopilotResult`], the
//! agent CA's an [`AgentCaResult`], each with exactly the cases its family can produce. [`CommandResult`] is the envelope the
//! raft thread carries back to the proposer, one variant per family; a handler never sees
//! it: [`FamilyResult::of`] unwraps the envelope once, at the seam, into the family the
//! handler's command belongs to (a KV handler cannot be handed a transaction's outcome).
//! The envelope's `Bool` and `Error` variants are the families not typed yet and the raft
//! thread's own answers (a refusal before the store saw the command, a confirmed read, an
//! operator request); the seam passes an `Error` on as the refusal it is. Refusals keep
//! Consul's text; the HTTP and RPC edges render them exactly as before. Results are never
//! persisted nor sent: they travel from the raft thread to a shard in memory, and a client
//! agent rebuilds its family's result from the server's wire reply.

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

/// The outcome of applying a command, returned to the client that proposed it: the
/// envelope of the family results, one variant per typed family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandResult {
    Kv(KvResult),
    Catalog(CatalogResult),
    Session(SessionResult),
    Txn(TxnAnswer),
    Query(QueryResult),
    Autopilot(AutopilotResult),
    AgentCa(AgentCaResult),
    /// A family not typed yet, or the raft thread's own answer: success or failure of a
    /// conditional write (`true`/`false` in the HTTP API), a read confirmed, an operator
    /// request carried out.
    Bool(bool),
    /// Refused; the text is the error Consul would report. From the store for a family not
    /// typed yet; for any command from the raft thread when it refused the proposal before
    /// the store saw it.
    Error(String),
}

impl CommandResult {
    /// The refusal's text, whatever the family (for callers that relay any command: the
    /// agent's propose endpoint, a proposal's message). A failed check-and-set or lock and
    /// a transaction that rolled back are answers, not refusals.
    pub fn refusal(&self) -> Option<&str> {
        match self {
            CommandResult::Kv(KvResult::Refused(reason))
            | CommandResult::Catalog(CatalogResult::Refused(reason))
            | CommandResult::Session(SessionResult::Refused(reason))
            | CommandResult::Txn(TxnAnswer::Refused(reason))
            | CommandResult::Query(QueryResult::Refused(reason))
            | CommandResult::AgentCa(AgentCaResult::Refused(reason))
            | CommandResult::Error(reason) => Some(reason),
            CommandResult::Kv(_)
            | CommandResult::Catalog(_)
            | CommandResult::Session(_)
            | CommandResult::Txn(_)
            | CommandResult::Query(_)
            | CommandResult::Autopilot(_)
            | CommandResult::AgentCa(_)
            | CommandResult::Bool(_) => None,
        }
    }
}

/// A KV write's result (`/v1/kv`, `KVS.Apply`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvResult {
    /// The write happened: a set, a delete, a tree delete, a tombstone reap, a check-and-set
    /// whose index matched.
    Written,
    /// A check-and-set (write or delete) whose index no longer matched: nothing changed.
    CheckAndSetFailed,
    /// The session holds the lock (it just took it, or already held it).
    LockAcquired,
    /// Another session holds the lock, or the key is in its lock-delay: nothing changed.
    LockNotAcquired,
    /// The session released the lock.
    Released,
    /// The session did not hold the lock: nothing changed.
    NotReleased,
    /// A lock or unlock refused (no session, or one that does not exist), Consul's text.
    Refused(String),
}

impl KvResult {
    /// The HTTP API's and `KVS.Apply`'s answer for a write that was not refused: `true`
    /// when it took effect.
    pub fn took_effect(&self) -> bool {
        match self {
            KvResult::Written | KvResult::LockAcquired | KvResult::Released => true,
            KvResult::CheckAndSetFailed
            | KvResult::LockNotAcquired
            | KvResult::NotReleased
            | KvResult::Refused(_) => false,
        }
    }

    /// The result `op` had when a server answered `KVS.Apply` with `took_effect` (a client
    /// agent's typed write; the reply is one bool).
    pub fn of_reply(op: &KvOp, took_effect: bool) -> KvResult {
        match (op, took_effect) {
            (_, true) => match op {
                KvOp::Lock { .. } => KvResult::LockAcquired,
                KvOp::Unlock { .. } => KvResult::Released,
                _ => KvResult::Written,
            },
            (KvOp::Lock { .. }, false) => KvResult::LockNotAcquired,
            (KvOp::Unlock { .. }, false) => KvResult::NotReleased,
            (_, false) => KvResult::CheckAndSetFailed,
        }
    }
}

/// A catalog write's result (registrations, deregistrations, batches, coordinates).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CatalogResult {
    Written,
    /// Refused, Consul's text (the store's, or a server's for a client agent's write).
    Refused(String),
}

impl CatalogResult {
    /// The refusal's text, if any (for callers that only report the outcome).
    pub fn into_refusal(self) -> Result<(), String> {
        match self {
            CatalogResult::Written => Ok(()),
            CatalogResult::Refused(reason) => Err(reason),
        }
    }
}

/// A session write's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionResult {
    /// The session exists now (its ID is the one the command carried).
    Created,
    /// The session is gone (whether or not it existed: Consul answers `true` either way).
    Destroyed,
    /// A create refused (its node or checks missing or critical), Consul's text.
    Refused(String),
}

/// A `/v1/txn` transaction's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnAnswer {
    /// It ran: its results when it committed, the errors that rolled it back otherwise.
    Ran(Box<super::txn::TxnOutcome>),
    /// Refused before running (too many operations), Consul's text.
    Refused(String),
}

/// A prepared-query write's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryResult {
    Written,
    /// Refused (an invalid query, a name or template taken, an unknown ID), Consul's text.
    Refused(String),
}

/// An autopilot configuration write's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AutopilotResult {
    Written,
    /// A check-and-set whose index no longer matched: nothing changed.
    CheckAndSetFailed,
    /// A leader's initial write when a configuration exists already: nothing changed.
    AlreadyInitialized,
}

/// The agent CA root's write result (auto-encrypt).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentCaResult {
    Initialized,
    /// A root exists already: it stays, nothing changed.
    AlreadyInitialized,
    /// The root or its key is larger than a row may be, with the limit in the text.
    Refused(String),
}

/// A command family's result type, as the seam takes it out of the envelope.
pub trait FamilyResult: Sized {
    /// The family's name, for the seam's message.
    const FAMILY: &'static str;

    /// The family's result if `envelope` holds one.
    fn from_envelope(envelope: CommandResult) -> Result<Self, CommandResult>;

    /// The seam: the family's result for a command of this family, or the raft thread's
    /// refusal of it (Consul's text). The store answers every command with its own family's
    /// result, so another family here is a bug; it is asserted in debug builds and answered
    /// as a refusal otherwise.
    fn of(envelope: CommandResult) -> Result<Self, String> {
        match Self::from_envelope(envelope) {
            Ok(result) => Ok(result),
            Err(CommandResult::Error(reason)) => Err(reason),
            Err(other) => {
                debug_assert!(
                    false,
                    "the store answers a {} command with a {} result, not {other:?}",
                    Self::FAMILY,
                    Self::FAMILY
                );
                Err(format!("unexpected result for a {} write", Self::FAMILY))
            }
        }
    }
}

macro_rules! family_result {
    ($type:ty, $variant:ident, $family:literal) => {
        impl FamilyResult for $type {
            const FAMILY: &'static str = $family;
            fn from_envelope(envelope: CommandResult) -> Result<Self, CommandResult> {
                match envelope {
                    CommandResult::$variant(result) => Ok(result),
                    other => Err(other),
                }
            }
        }

        impl From<$type> for CommandResult {
            fn from(result: $type) -> CommandResult {
                CommandResult::$variant(result)
            }
        }
    };
}

family_result!(KvResult, Kv, "KV");
family_result!(CatalogResult, Catalog, "catalog");
family_result!(SessionResult, Session, "session");
family_result!(TxnAnswer, Txn, "transaction");
family_result!(QueryResult, Query, "prepared query");
family_result!(AutopilotResult, Autopilot, "autopilot");
family_result!(AgentCaResult, AgentCa, "agent CA");

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

    #[test]
    fn a_kv_result_answers_as_the_bool_it_replaced() {
        let took_effect = [
            KvResult::Written,
            KvResult::LockAcquired,
            KvResult::Released,
        ];
        for result in took_effect {
            assert!(result.took_effect(), "{result:?}");
        }
        let no_effect = [
            KvResult::CheckAndSetFailed,
            KvResult::LockNotAcquired,
            KvResult::NotReleased,
        ];
        for result in no_effect {
            assert!(!result.took_effect(), "{result:?}");
        }
    }

    #[test]
    fn a_client_agent_rebuilds_the_kv_result_from_the_servers_bool() {
        let set = KvOp::Set {
            key: "k".into(),
            value: Bytes::new(),
            flags: 0,
        };
        let cas = KvOp::DeleteCas {
            key: "k".into(),
            modify_index: 3,
        };
        let lock = KvOp::Lock {
            key: "k".into(),
            value: Bytes::new(),
            flags: 0,
            session: "s".into(),
        };
        let unlock = KvOp::Unlock {
            key: "k".into(),
            value: Bytes::new(),
            flags: 0,
            session: "s".into(),
        };
        let cases = [
            (&set, true, KvResult::Written),
            (&cas, true, KvResult::Written),
            (&cas, false, KvResult::CheckAndSetFailed),
            (&lock, true, KvResult::LockAcquired),
            (&lock, false, KvResult::LockNotAcquired),
            (&unlock, true, KvResult::Released),
            (&unlock, false, KvResult::NotReleased),
        ];
        for (op, took_effect, expected) in cases {
            let rebuilt = KvResult::of_reply(op, took_effect);
            assert_eq!(rebuilt, expected, "{op:?}");
            assert_eq!(rebuilt.took_effect(), took_effect, "{op:?}");
        }
    }

    #[test]
    fn the_seam_hands_over_the_family_or_the_raft_threads_refusal() {
        assert_eq!(
            KvResult::of(CommandResult::Kv(KvResult::LockNotAcquired)),
            Ok(KvResult::LockNotAcquired)
        );
        assert_eq!(
            CatalogResult::of(CommandResult::Error("No cluster leader".into())),
            Err("No cluster leader".to_string())
        );
        let refused = CommandResult::Session(SessionResult::Refused("Missing node".into()));
        assert_eq!(refused.refusal(), Some("Missing node"));
        assert_eq!(
            SessionResult::of(refused),
            Ok(SessionResult::Refused("Missing node".into()))
        );
        // Answers, not refusals: a failed check-and-set, a transaction that rolled back.
        assert_eq!(
            CommandResult::Kv(KvResult::CheckAndSetFailed).refusal(),
            None
        );
        let rolled_back = TxnAnswer::Ran(Box::default());
        assert_eq!(CommandResult::Txn(rolled_back).refusal(), None);
    }
}
