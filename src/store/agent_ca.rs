//! The agent CA's root, as the servers replicate it: one row, written once.
//!
//! Auto-encrypt (`auto_encrypt { allow_tls = true }`) needs a CA that every server can sign
//! client agents' certificates with, and that every server trusts for `verify_incoming`. The
//! first leader that allows auto-encrypt generates it (outside this pure module: keys come from
//! the system's randomness) and proposes [`AgentCaOp::Initialize`]; every server applies the
//! same row, and snapshots carry it, so a server that restarts or installs a snapshot keeps the
//! same root. The key travels with the root, as Consul's built-in CA provider keeps its key in
//! the state store.
//!
//! To this module the row is opaque text: parsing and signing are `tls::agent_ca`'s.
//!
//! Invariants: once set, the row never changes (a second `Initialize`, from a leader that
//! raced the first, is refused with `false`); no table index moves, since nothing blocks on
//! the row (a Connect CA roots endpoint would add its table and announce changes here).

use super::{AgentCaResult, Tables};
use serde::{Deserialize, Serialize};

/// Largest PEM text of the root or its key accepted in a command, in bytes.
pub const AGENT_CA_PEM_BYTES_MAX: usize = 16 * 1024;

/// The replicated root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCaRow {
    /// The SPIFFE trust domain, `<cluster id>.consul`.
    pub trust_domain: String,
    pub certificate_pem: String,
    pub private_key_pem: String,
    /// Raft index of the entry that created it.
    pub created_index: u64,
}

/// Writes to the agent CA.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AgentCaOp {
    /// Sets the root if there is none yet (`created_index` is taken from the entry).
    Initialize(AgentCaRow),
}

/// Applies `op` at `index`.
pub fn apply(tables: &mut Tables, index: u64, op: &AgentCaOp) -> AgentCaResult {
    match op {
        AgentCaOp::Initialize(row) => {
            if tables.agent_ca.is_some() {
                return AgentCaResult::AlreadyInitialized;
            }
            if row.certificate_pem.len() > AGENT_CA_PEM_BYTES_MAX
                || row.private_key_pem.len() > AGENT_CA_PEM_BYTES_MAX
            {
                return AgentCaResult::Refused(format!(
                    "agent CA root or key larger than {AGENT_CA_PEM_BYTES_MAX} bytes"
                ));
            }
            tables.agent_ca = Some(AgentCaRow {
                created_index: index,
                ..row.clone()
            });
            AgentCaResult::Initialized
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Command, CommandResult};

    fn row(pem: &str) -> AgentCaRow {
        AgentCaRow {
            trust_domain: "11111111-2222-3333-4444-555555555555.consul".into(),
            certificate_pem: pem.into(),
            private_key_pem: "key".into(),
            created_index: 0,
        }
    }

    #[test]
    fn the_first_root_stays_and_snapshots_carry_it() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let first = Command::AgentCa(AgentCaOp::Initialize(row("first")));
        assert_eq!(
            tables.apply(1, &first, &mut changes),
            CommandResult::AgentCa(AgentCaResult::Initialized)
        );
        let second = Command::AgentCa(AgentCaOp::Initialize(row("second")));
        assert_eq!(Command::decode(&second.encode()).unwrap(), second);
        assert_eq!(
            tables.apply(2, &second, &mut changes),
            CommandResult::AgentCa(AgentCaResult::AlreadyInitialized)
        );
        assert!(changes.is_empty());
        let kept = tables.agent_ca.clone().unwrap();
        assert_eq!(
            (kept.certificate_pem.as_str(), kept.created_index),
            ("first", 1)
        );
        let restored = Tables::from_snapshot_bytes(&tables.to_snapshot_bytes()).unwrap();
        assert_eq!(restored.agent_ca, Some(kept));

        let mut tables = Tables::default();
        let huge = Command::AgentCa(AgentCaOp::Initialize(row(
            &"A".repeat(AGENT_CA_PEM_BYTES_MAX + 1)
        )));
        assert!(matches!(
            tables.apply(1, &huge, &mut changes),
            CommandResult::AgentCa(AgentCaResult::Refused(_))
        ));
        assert_eq!(tables.agent_ca, None);
    }
}
