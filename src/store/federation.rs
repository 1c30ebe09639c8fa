//! Federation states: one row per datacenter of the WAN federation, naming that
//! datacenter's mesh gateways (with their health) as the datacenter's own leader last saw
//! them. Consul's `federation-states` table.
//!
//! Every datacenter's leader writes its own row into the primary (anti-entropy); the
//! primary's rows are replicated to every secondary, which applies the differences. So the
//! primary holds the authoritative set and a secondary a copy that lags it by one round; the
//! gateway locator reads both its own datacenter's row and the primary's.
//!
//! The store keeps each gateway as the `CheckServiceNode` JSON its datacenter rendered (the
//! answer the HTTP API shows, verbatim) next to the few fields the locator needs, extracted
//! once when the row was built (`consul::federation_state`), so no read parses JSON.
//!
//! Writes follow Consul's state store: an upsert replaces the row, keeping `CreateIndex`, and
//! always moves `ModifyIndex`; `PrimaryModifyIndex` is the index the row had in the primary
//! (a replicated row carries it; a row written here without one takes this entry's index);
//! a delete of a missing row changes nothing.
//!
//! Watch keys (table [`Table::FederationStates`], exact): the datacenter's name for one row;
//! a list reads the whole table. Invariants: a row's key is its `datacenter`, never empty;
//! `create_index ≤ modify_index ≤` the table index.

use super::{Change, CommandResult, Table, Tables};
use arcstr::ArcStr;
use imbl::OrdMap;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Most mesh gateways one datacenter's row may carry: far more than any deployment runs,
/// and a bound on what one write (or one replicated answer) may make every server store.
pub const MESH_GATEWAYS_PER_DATACENTER_MAX: usize = 1024;
/// Longest datacenter name accepted, in bytes (a name is also a watch key).
pub const DATACENTER_NAME_BYTES_MAX: usize = 256;

/// One mesh gateway instance of a datacenter, as its datacenter's catalog had it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshGateway {
    /// The `CheckServiceNode` (node, service instance, checks) as compact JSON.
    pub json: ArcStr,
    /// Its node's name and its service ID: who it is, for logs and tests.
    pub node: ArcStr,
    pub service_id: ArcStr,
    /// `host:port` another datacenter dials it at (Consul's `BestAddress(wan)`: the
    /// service's `wan` tagged address, else its address, else the node's `wan` tagged
    /// address, else the node's address).
    pub wan_address: ArcStr,
    /// `host:port` its own datacenter dials it at (`BestAddress(lan)`).
    pub lan_address: ArcStr,
    /// Whether the instance opted into WAN federation (`Meta["consul-wan-federation"] =
    /// "1"`): only those carry server traffic.
    pub wan_federation: bool,
    /// Whether none of its checks (node's and service's) is critical.
    pub healthy: bool,
}

/// One datacenter's federation state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FederationState {
    pub datacenter: ArcStr,
    pub mesh_gateways: Vec<MeshGateway>,
    /// When the writing leader last changed the row, RFC 3339 in UTC as Go renders a
    /// `time.Time` (the leader stamps it: this layer reads no clock).
    pub updated_at: ArcStr,
    /// The row's `ModifyIndex` in the primary datacenter.
    pub primary_modify_index: u64,
    pub create_index: u64,
    pub modify_index: u64,
}

impl FederationState {
    /// Whether `other` says the same about the datacenter's gateways, whatever the indexes
    /// and the time of the write (Consul's `IsSame`): anti-entropy writes only when not.
    pub fn is_same(&self, other: &FederationState) -> bool {
        self.datacenter == other.datacenter
            && self.mesh_gateways.len() == other.mesh_gateways.len()
            && self
                .mesh_gateways
                .iter()
                .zip(&other.mesh_gateways)
                .all(|(a, b)| a.json == b.json)
    }
}

/// Writes to the federation states (Consul's `FederationStateRequest`, ops `upsert` and
/// `delete`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FederationStateOp {
    Upsert(Box<FederationState>),
    Delete { datacenter: ArcStr },
}

/// The federation-state table of one store version.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FederationTables {
    /// Datacenter name → its state.
    pub states: OrdMap<ArcStr, Arc<FederationState>>,
}

/// The state of `datacenter`, if one was written.
pub fn get<'t>(tables: &'t Tables, datacenter: &str) -> Option<&'t Arc<FederationState>> {
    tables.federation.states.get(datacenter)
}

/// Every state, by datacenter name (Consul sorts its list the same way).
pub fn list(tables: &Tables) -> impl Iterator<Item = &Arc<FederationState>> {
    tables.federation.states.values()
}

/// The index a read of the table reports: the table's, so it never goes back when a row
/// is deleted.
pub fn index(tables: &Tables) -> u64 {
    tables.table_index(Table::FederationStates)
}

/// Why a state cannot be stored, in Consul's words where it has them.
pub fn validate(state: &FederationState) -> Result<(), String> {
    if state.datacenter.is_empty() {
        return Err("invalid request: missing federation state datacenter".to_string());
    }
    if state.datacenter.len() > DATACENTER_NAME_BYTES_MAX {
        return Err(format!(
            "invalid request: datacenter name longer than {DATACENTER_NAME_BYTES_MAX} bytes"
        ));
    }
    if state.mesh_gateways.len() > MESH_GATEWAYS_PER_DATACENTER_MAX {
        return Err(format!(
            "invalid request: more than {MESH_GATEWAYS_PER_DATACENTER_MAX} mesh gateways"
        ));
    }
    Ok(())
}

pub(super) fn apply(
    tables: &mut Tables,
    index: u64,
    op: &FederationStateOp,
    changes: &mut Vec<Change>,
) -> CommandResult {
    match op {
        FederationStateOp::Upsert(state) => {
            if let Err(reason) = validate(state) {
                return CommandResult::Error(reason);
            }
            let mut row = (**state).clone();
            row.create_index = get(tables, &state.datacenter).map_or(index, |old| old.create_index);
            row.modify_index = index;
            if row.primary_modify_index == 0 {
                row.primary_modify_index = index;
            }
            debug_assert!(row.create_index <= row.modify_index);
            let key = row.datacenter.clone();
            tables.federation.states.insert(key.clone(), Arc::new(row));
            announce(tables, index, &key, changes);
            CommandResult::Bool(true)
        }
        FederationStateOp::Delete { datacenter } => {
            if tables.federation.states.remove(datacenter).is_some() {
                announce(tables, index, datacenter, changes);
            }
            CommandResult::Bool(true)
        }
    }
}

fn announce(tables: &mut Tables, index: u64, datacenter: &ArcStr, changes: &mut Vec<Change>) {
    tables.bump_table(Table::FederationStates, index);
    changes.push(Change::key(
        Table::FederationStates,
        &Arc::<str>::from(datacenter.as_str()),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ChangeKey, Command};

    fn gateway(node: &str, wan: &str) -> MeshGateway {
        MeshGateway {
            json: ArcStr::from(format!(r#"{{"Node":{{"Node":"{node}"}}}}"#)),
            node: ArcStr::from(node),
            service_id: ArcStr::from("mesh-gateway"),
            wan_address: ArcStr::from(wan),
            lan_address: ArcStr::from("10.0.0.1:8443"),
            wan_federation: true,
            healthy: true,
        }
    }

    fn state(dc: &str, gateways: Vec<MeshGateway>, primary_modify_index: u64) -> FederationState {
        FederationState {
            datacenter: ArcStr::from(dc),
            mesh_gateways: gateways,
            updated_at: ArcStr::from("2026-12-06T18:00:00Z"),
            primary_modify_index,
            create_index: 0,
            modify_index: 0,
        }
    }

    fn upsert(s: FederationState) -> Command {
        Command::FederationState(FederationStateOp::Upsert(Box::new(s)))
    }

    #[test]
    fn upserts_keep_create_index_move_modify_index_and_announce_the_datacenter() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let first = state("dc2", vec![gateway("gw1", "1.2.3.4:443")], 0);
        assert_eq!(
            tables.apply(5, &upsert(first.clone()), &mut changes),
            CommandResult::Bool(true)
        );
        let row = get(&tables, "dc2").unwrap();
        assert_eq!((row.create_index, row.modify_index), (5, 5));
        assert_eq!(row.primary_modify_index, 5, "written here: this index");
        assert_eq!(index(&tables), 5);
        assert_eq!(
            changes,
            vec![Change {
                table: Table::FederationStates,
                key: ChangeKey::Key(Arc::from("dc2")),
            }]
        );

        // A replicated row carries the primary's index.
        let second = state("dc2", vec![], 41);
        tables.apply(7, &upsert(second), &mut changes);
        let row = get(&tables, "dc2").unwrap();
        assert_eq!((row.create_index, row.modify_index), (5, 7));
        assert_eq!(row.primary_modify_index, 41);
        assert!(row.mesh_gateways.is_empty());
        assert!(!row.is_same(&first));
    }

    #[test]
    fn deletes_remove_the_row_and_a_missing_one_changes_nothing() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        tables.apply(3, &upsert(state("dc1", vec![], 0)), &mut changes);
        tables.apply(4, &upsert(state("dc2", vec![], 0)), &mut changes);
        let names: Vec<_> = list(&tables).map(|s| s.datacenter.to_string()).collect();
        assert_eq!(names, ["dc1", "dc2"]);
        changes.clear();
        let delete = |dc: &str| {
            Command::FederationState(FederationStateOp::Delete {
                datacenter: ArcStr::from(dc),
            })
        };
        tables.apply(6, &delete("dc1"), &mut changes);
        assert!(get(&tables, "dc1").is_none());
        assert_eq!(index(&tables), 6);
        assert_eq!(changes.len(), 1);
        changes.clear();
        tables.apply(7, &delete("dc9"), &mut changes);
        assert!(changes.is_empty());
        assert_eq!(index(&tables), 6, "nothing deleted, nothing moved");
    }

    #[test]
    fn bad_states_are_refused_without_a_change() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let refused = tables.apply(2, &upsert(state("", vec![], 0)), &mut changes);
        assert_eq!(
            refused,
            CommandResult::Error("invalid request: missing federation state datacenter".into())
        );
        let many = vec![gateway("gw", "1.1.1.1:1"); MESH_GATEWAYS_PER_DATACENTER_MAX + 1];
        let refused = tables.apply(3, &upsert(state("dc2", many, 0)), &mut changes);
        assert!(matches!(refused, CommandResult::Error(_)));
        assert!(changes.is_empty());
        assert_eq!(index(&tables), 0);
    }

    #[test]
    fn sameness_ignores_indexes_and_time_but_not_gateways() {
        let a = state("dc2", vec![gateway("gw1", "1.2.3.4:443")], 3);
        let mut b = a.clone();
        b.updated_at = ArcStr::from("2030-01-01T00:00:00Z");
        b.modify_index = 99;
        assert!(a.is_same(&b));
        b.mesh_gateways.push(gateway("gw2", "1.2.3.5:443"));
        assert!(!a.is_same(&b));
        let c = state("dc3", a.mesh_gateways.clone(), 3);
        assert!(!a.is_same(&c));
    }

    #[test]
    fn states_survive_a_snapshot() {
        let mut tables = Tables::default();
        tables.apply(
            9,
            &upsert(state("dc2", vec![gateway("gw1", "1.2.3.4:443")], 0)),
            &mut Vec::new(),
        );
        let restored = Tables::from_snapshot_bytes(&tables.to_snapshot_bytes()).unwrap();
        assert_eq!(get(&restored, "dc2"), get(&tables, "dc2"));
        assert_eq!(index(&restored), 9);
    }
}
