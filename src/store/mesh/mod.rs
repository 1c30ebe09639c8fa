//! The service mesh's replicated state: config entries (intentions among them, as
//! `service-intentions` entries, Consul ≥ 1.9) and the built-in Connect CA.
//!
//! Layout:
//! - `config_entry.rs`: the entry rows keyed by kind and folded name, their writes with
//!   Consul's CAS rules, and the discovery-chain protocol check Consul's state store makes;
//! - `intentions.rs`: the typed body of a `service-intentions` entry, Consul's precedence,
//!   the legacy ID-based writes, and [`intentions::decide`], authorization as a pure function
//!   of a store version, a source service and a destination;
//! - `ca.rs`: the CA configuration and roots, with rotation (the new root arrives
//!   cross-signed by the old key, made by the leader outside this pure layer).
//!
//! Watch keys (table [`Table::ConfigEntries`](super::Table), folded): `<kind>/<name>` for one
//! entry, `<kind>/` as the prefix of a kind's list. The CA's changes are announced under
//! [`Table::ConnectCa`](super::Table) with the single key [`ca::ROOTS_WATCH_KEY`].
//!
//! Invariants: an entry's key is `entry_key(kind, name)`; `create_index ≤ modify_index ≤` the
//! table index; a `service-intentions` entry always holds `EntryBody::Intentions` with its
//! sources sorted by precedence, highest first, and every other kind holds `EntryBody::Json`.

pub mod ca;
pub mod config_entry;
pub mod intentions;

use serde::{Deserialize, Serialize};

/// The mesh tables of one store version.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MeshTables {
    pub config_entries: config_entry::ConfigEntryTables,
    #[serde(default)]
    pub ca: ca::CaState,
}
