//! The replicated state: a set of tables built from persistent, structurally shared maps
//! (`imbl`), versioned by Raft index.
//!
//! The raft core thread owns the authoritative [`Tables`] and applies committed commands to it
//! with [`Tables::apply`]; every applied batch yields a new immutable [`StoreVersion`] (an
//! `Arc<Tables>`, cheap to clone because the maps share structure) plus the [`Change`]s it
//! made. Shards read from a version start to end, so a query never observes a half-applied
//! batch, and they use the changes to wake exactly the blocking queries that read what changed.
//!
//! The module is pure: no I/O, no clock. Anything time-dependent (lock delays, session
//! expiry) arrives inside the command, stamped by the leader that proposed it, so every server
//! applies the same bytes to the same state.
//!
//! Invariants:
//! - `Tables::index` is the Raft index of the last applied entry and never decreases.
//! - every row's `ModifyIndex` is ≤ the index of its table, which is ≤ `Tables::index`.
//! - a command either applies completely or not at all (a failed CAS changes nothing).
//! - every row an apply touches is named by one of its changes, in its table's canonical key
//!   form (`dependency`), so every read that depended on it learns of it.
//!
//! `apply.rs` checks these at the end of every apply (the cheap ones always, the rest in
//! debug builds, which the `ci` profile keeps).

pub mod acl;
pub mod agent_ca;
mod apply;
pub mod autopilot;
pub mod catalog;
pub mod command;
pub mod dependency;
pub mod federation;
#[cfg(test)]
mod fixture;
pub mod gateways;
pub mod kv;
pub mod locks;
pub mod mesh;
pub mod peering;
pub mod query;
pub mod restore;
pub mod session;
pub mod txn;

use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub use command::{
    AgentCaResult, AutopilotResult, CatalogResult, Command, CommandOf, CommandResult, FamilyResult,
    KvResult, QueryResult, SessionResult, TxnAnswer,
};
pub use dependency::{invalidates, Dependencies, Dependency, DependencyIndex};

/// The tables whose max-index Consul reports; one slot each in [`Tables::table_indexes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(u8)]
pub enum Table {
    Kvs = 0,
    Tombstones = 1,
    Sessions = 2,
    Nodes = 3,
    Services = 4,
    Checks = 5,
    Coordinates = 6,
    PreparedQueries = 7,
    Acl = 8,
    ConfigEntries = 9,
    Intentions = 10,
    Events = 11,
    /// Watch namespace for Consul's per-service `service.<name>` index: keyed by folded
    /// service name, changed whenever a health or catalog query of that service would
    /// answer differently. No rows of its own.
    ServiceIndex = 12,
    /// Watch namespace for "the services on node N changed", keyed by folded node name.
    NodeServices = 13,
    /// The Connect CA's configuration and roots (`store::mesh::ca`).
    ConnectCa = 14,
    /// Which services each ingress and terminating gateway links (`store::gateways`).
    GatewayServices = 15,
    /// Each datacenter's mesh gateways as the WAN federation shares them
    /// (`store::federation`), keyed by datacenter name.
    FederationStates = 16,
    /// Cluster peerings and their secrets (`store::peering`), keyed by folded peering name.
    Peerings = 17,
    /// The trust bundles received from peers (`store::peering`), keyed by folded peer name.
    PeeringTrustBundles = 18,
    /// The services peers export to this cluster (`store::peering`), keyed by folded peer
    /// name.
    ImportedServices = 19,
}

impl Table {
    /// Every table, for changes that touch the whole state (snapshot install, restore).
    pub const ALL: [Table; TABLE_COUNT] = [
        Table::Kvs,
        Table::Tombstones,
        Table::Sessions,
        Table::Nodes,
        Table::Services,
        Table::Checks,
        Table::Coordinates,
        Table::PreparedQueries,
        Table::Acl,
        Table::ConfigEntries,
        Table::Intentions,
        Table::Events,
        Table::ServiceIndex,
        Table::NodeServices,
        Table::ConnectCa,
        Table::GatewayServices,
        Table::FederationStates,
        Table::Peerings,
        Table::PeeringTrustBundles,
        Table::ImportedServices,
    ];
}

/// One `ChangeKey::All` per table: everything may have changed.
pub fn changes_everywhere() -> Vec<Change> {
    Table::ALL
        .iter()
        .map(|table| Change {
            table: *table,
            key: ChangeKey::All,
        })
        .collect()
}

/// Number of slots in [`Tables::table_indexes`]; room for every [`Table`] variant.
pub const TABLE_COUNT: usize = 20;

/// The key a change touched within its table, in the table's canonical form
/// (`dependency::canonical_key`). What a read depended on is the other half:
/// [`Dependency`], matched against changes by [`invalidates`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ChangeKey {
    /// One row, by its primary key.
    Key(Arc<str>),
    /// Every row whose key starts with this prefix (a recursive delete).
    Prefix(Arc<str>),
    /// Anything in the table (a restore, a bulk reap).
    All,
}

/// One `(table, key)` a command touched.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Change {
    pub table: Table,
    pub key: ChangeKey,
}

impl Change {
    pub fn key(table: Table, key: &Arc<str>) -> Change {
        Change {
            table,
            key: ChangeKey::Key(key.clone()),
        }
    }
}

/// The whole replicated state at one Raft index.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Tables {
    /// Raft index of the last applied entry.
    pub index: u64,
    /// Highest index that modified each table, as Consul's `index` table tracks it.
    /// Snapshots before format 3 hold fewer slots; the tables added since read as 0.
    #[serde(deserialize_with = "table_indexes_of_any_format")]
    pub table_indexes: [u64; TABLE_COUNT],
    pub kv: kv::KvTables,
    #[serde(default)]
    pub catalog: catalog::CatalogTables,
    #[serde(default)]
    pub sessions: session::SessionTables,
    /// The proposing leader's wall clock (Unix ms) carried by the newest applied entry, never
    /// decreasing: the clock lock-delays are measured on (see `session`).
    #[serde(default)]
    pub leader_time_ms: u64,
    /// A snapshot restore whose chunks are still arriving.
    #[serde(default)]
    pub restore: Option<restore::RestoreStaging>,
    /// Tokens, policies, roles, auth methods and binding rules.
    #[serde(default)]
    pub acl: acl::AclTables,
    /// The autopilot configuration, once the first leader wrote it.
    #[serde(default)]
    pub autopilot: Option<autopilot::AutopilotConfig>,
    /// Prepared queries (appended last: snapshots written before it restore without any).
    #[serde(default)]
    pub queries: query::QueryTables,
    /// The agent CA's root for auto-encrypt, once a leader created it (format 2 on).
    #[serde(default)]
    pub agent_ca: Option<agent_ca::AgentCaRow>,
    /// Config entries (intentions among them) and the Connect CA (format 2 on).
    #[serde(default)]
    pub mesh: mesh::MeshTables,
    /// The services gateways link, derived from config entries and the catalog (appended
    /// last: snapshots written before it restore with none, and the first write to a
    /// gateway entry or a linked service derives them again).
    #[serde(default)]
    pub gateways: gateways::GatewayTables,
    /// Each datacenter's mesh gateways (format 3 on: older snapshots restore with none, and
    /// each leader's anti-entropy writes its datacenter's again).
    #[serde(default)]
    pub federation: federation::FederationTables,
    /// Cluster peerings, their secrets, trust bundles and imported services (format 4 on:
    /// older snapshots restore with none; the imported services from format 5 on).
    #[serde(default)]
    pub peering: peering::PeeringTables,
}

/// Reads [`Tables::table_indexes`] from a snapshot of any format: as many slots as it has
/// (format 2 had 16), the tables added since at 0. More slots than this version knows are
/// refused: they are tables it would silently drop.
fn table_indexes_of_any_format<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<[u64; TABLE_COUNT], D::Error> {
    let slots: Vec<u64> = Deserialize::deserialize(deserializer)?;
    if slots.len() > TABLE_COUNT {
        return Err(serde::de::Error::custom(format!(
            "{} table indexes, this version knows {TABLE_COUNT}",
            slots.len()
        )));
    }
    let mut indexes = [0u64; TABLE_COUNT];
    indexes[..slots.len()].copy_from_slice(&slots);
    Ok(indexes)
}

/// An immutable, shareable version of the state.
pub type StoreVersion = Arc<Tables>;

impl Tables {
    pub fn table_index(&self, table: Table) -> u64 {
        self.table_indexes[table as usize]
    }

    /// Highest index over several tables, e.g. `kvs` and `tombstones` for a KV query.
    pub fn max_table_index(&self, tables: &[Table]) -> u64 {
        tables
            .iter()
            .map(|t| self.table_index(*t))
            .max()
            .unwrap_or(0)
    }

    pub(crate) fn bump_table(&mut self, table: Table, index: u64) {
        debug_assert!(
            index >= self.table_indexes[table as usize],
            "table index must not go backwards"
        );
        self.table_indexes[table as usize] = index;
    }

    /// Records that the entry at `index` was applied without changing any table (a Raft
    /// no-op or membership entry).
    pub fn advance_to(&mut self, index: u64) {
        assert!(
            index > self.index,
            "apply out of order: {} after {}",
            index,
            self.index
        );
        self.index = index;
    }

    /// Advances [`Tables::leader_time_ms`] to the stamp of the entry about to be applied.
    /// Stamps from a new leader whose clock is behind are ignored until it catches up, so
    /// the clock never runs backwards.
    pub fn observe_leader_time(&mut self, stamp_ms: u64) {
        self.leader_time_ms = self.leader_time_ms.max(stamp_ms);
    }

    /// Serializes this version for a Raft snapshot or `/v1/snapshot`.
    pub fn to_snapshot_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1024);
        self.write_snapshot(&mut out)
            .expect("encoding tables into a Vec cannot fail");
        out
    }

    /// Streams the same bytes as [`Tables::to_snapshot_bytes`] into `out`, for snapshots too
    /// large to want in memory whole.
    pub fn write_snapshot(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        out.write_all(&[SNAPSHOT_FORMAT_VERSION])?;
        rmp_serde::encode::write(out, self).map_err(std::io::Error::other)
    }

    /// Rebuilds a version from [`Tables::write_snapshot`] output read from `input` (a
    /// snapshot file through a small buffer, so its bytes are never in memory whole).
    pub fn read_snapshot(input: &mut dyn std::io::Read) -> Result<Tables, String> {
        let mut format = [0u8; 1];
        input
            .read_exact(&mut format)
            .map_err(|_| "empty store snapshot".to_string())?;
        // Formats 1 to 4 are format 5 without some trailing tables (defaulted) and with
        // fewer table indexes (see `table_indexes_of_any_format`).
        if !SNAPSHOT_FORMATS_READ.contains(&format[0]) {
            return Err(format!("unsupported store snapshot format {}", format[0]));
        }
        rmp_serde::from_read(input).map_err(|e| format!("corrupt store snapshot: {e}"))
    }

    /// Rebuilds a version from [`Tables::to_snapshot_bytes`] output.
    pub fn from_snapshot_bytes(bytes: &[u8]) -> Result<Tables, String> {
        match bytes.split_first() {
            // Formats 1 to 4 are format 5 without some trailing tables, which then default
            // to none, and with fewer table indexes.
            Some((format, rest)) if SNAPSHOT_FORMATS_READ.contains(format) => {
                rmp_serde::from_slice(rest).map_err(|e| format!("corrupt store snapshot: {e}"))
            }
            Some((v, _)) => Err(format!("unsupported store snapshot format {v}")),
            None => Err("empty store snapshot".to_string()),
        }
    }
}

/// First byte of a serialized [`Tables`]; bumped whenever the layout changes, so that an
/// older server refuses a snapshot it would misread instead of dropping what it cannot see.
/// 2: the agent CA (`Tables::agent_ca`) and the mesh tables (`Tables::mesh`) added at the end
/// (later, within format 2 as trailing fields with defaults: a CA root's signing
/// certificate, and the gateway-services table `Tables::gateways`).
/// 3: a 17th table index and the federation states (`Tables::federation`) at the end; a
/// format-2 reader would refuse the longer index array, hence the new number.
/// 4: two more table indexes (19) and the peering tables (`Tables::peering`) at the end.
/// 5: a 20th table index and the imported services at the end of the peering tables.
const SNAPSHOT_FORMAT_VERSION: u8 = 5;
/// The format before the imported services, still read.
const SNAPSHOT_FORMAT_BEFORE_IMPORTS: u8 = 4;
/// The format before the peering tables, still read.
const SNAPSHOT_FORMAT_BEFORE_PEERING: u8 = 3;
/// The format before the federation states, still read.
const SNAPSHOT_FORMAT_BEFORE_FEDERATION: u8 = 2;
/// The format before the agent CA and the mesh tables, still read.
const SNAPSHOT_FORMAT_BEFORE_AGENT_CA: u8 = 1;
/// Every format [`Tables::read_snapshot`] accepts.
const SNAPSHOT_FORMATS_READ: [u8; 5] = [
    SNAPSHOT_FORMAT_BEFORE_AGENT_CA,
    SNAPSHOT_FORMAT_BEFORE_FEDERATION,
    SNAPSHOT_FORMAT_BEFORE_PEERING,
    SNAPSHOT_FORMAT_BEFORE_IMPORTS,
    SNAPSHOT_FORMAT_VERSION,
];

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn snapshot_round_trip_preserves_rows_and_indexes() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let set = |key: &str, value: &'static [u8]| {
            Command::Kv(kv::KvOp::Set {
                key: key.into(),
                value: Bytes::from_static(value),
                flags: 7,
            })
        };
        tables.apply(3, &set("a", b"1"), &mut changes);
        tables.apply(4, &set("b/c", b"2"), &mut changes);
        tables.apply(
            5,
            &Command::Kv(kv::KvOp::Delete { key: "a".into() }),
            &mut changes,
        );
        let restored = Tables::from_snapshot_bytes(&tables.to_snapshot_bytes()).unwrap();
        assert_eq!(restored.index, 5);
        assert_eq!(restored.table_index(Table::Kvs), 5);
        assert_eq!(restored.table_index(Table::Tombstones), 5);
        let (_, entry) = kv::get(&restored, "b/c");
        let entry = entry.unwrap();
        assert_eq!(entry.value(), b"2");
        assert_eq!(entry.flags(), 7);
        assert!(kv::get(&restored, "a").1.is_none());
        assert!(Tables::from_snapshot_bytes(b"").is_err());
        assert!(Tables::from_snapshot_bytes(b"\x09abc").is_err());
        assert!(Tables::from_snapshot_bytes(b"\x01\xc1").is_err());
        assert!(Tables::from_snapshot_bytes(b"\x05\x90").is_err());
    }

    #[test]
    fn a_format_1_snapshot_still_loads_without_an_agent_ca_or_mesh_tables() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        tables.apply(
            3,
            &Command::Kv(kv::KvOp::Set {
                key: "a".into(),
                value: Bytes::from_static(b"1"),
                flags: 0,
            }),
            &mut changes,
        );
        // Format 5 is the fields as one msgpack array, the table indexes a 20-slot array,
        // ending with the agent CA (nil here), the mesh tables, the gateway-services table,
        // the federation states and the peering tables; format 1 is the same array without
        // those five fields and with 16 table indexes.
        let current = tables.to_snapshot_bytes();
        assert_eq!(current[0], 5);
        let fields = current[1] & 0x0f;
        assert_eq!(current[1], 0x90 | fields, "a fixarray of the fields");
        let mut tail = rmp_serde::to_vec(&tables.mesh).unwrap();
        tail.extend(rmp_serde::to_vec(&tables.gateways).unwrap());
        tail.extend(rmp_serde::to_vec(&tables.federation).unwrap());
        tail.extend(rmp_serde::to_vec(&tables.peering).unwrap());
        assert!(
            current.ends_with(&tail),
            "ends with the mesh, gateway, federation and peering tables"
        );
        let tail_bytes = 1 + tail.len();
        assert_eq!(
            current[current.len() - tail_bytes],
            0xc0,
            "the absent agent CA before them"
        );
        let indexes_now = rmp_serde::to_vec(&tables.table_indexes).unwrap();
        let indexes_16 = rmp_serde::to_vec(&tables.table_indexes[..16]).unwrap();
        let body = &current[2..current.len() - tail_bytes];
        let at = body
            .windows(indexes_now.len())
            .position(|w| w == indexes_now.as_slice())
            .expect("the table indexes are in the fields");
        let mut old = vec![1u8, 0x90 | (fields - 5)];
        old.extend_from_slice(&body[..at]);
        old.extend_from_slice(&indexes_16);
        old.extend_from_slice(&body[at + indexes_now.len()..]);
        let restored = Tables::from_snapshot_bytes(&old).unwrap();
        assert_eq!(restored.index, 3);
        assert_eq!(restored.agent_ca, None);
        assert_eq!(restored.to_snapshot_bytes(), current);
        assert_eq!(kv::get(&restored, "a").1.unwrap().value(), b"1");
        // More table indexes than this version knows is a newer snapshot: refused.
        let indexes_more = rmp_serde::to_vec(&[0u64; TABLE_COUNT + 1]).unwrap();
        let mut newer = current[..2].to_vec();
        newer.extend_from_slice(&body[..at]);
        newer.extend_from_slice(&indexes_more);
        newer.extend_from_slice(&current[2 + at + indexes_now.len()..]);
        assert!(Tables::from_snapshot_bytes(&newer).is_err());
    }

    #[test]
    #[should_panic(expected = "apply out of order")]
    fn applying_out_of_order_is_refused() {
        let mut tables = Tables::default();
        tables.advance_to(2);
        tables.advance_to(2);
    }
}
