//! The service catalog: the `nodes`, `services` and `checks` tables with Consul's semantics
//! and indexes.
//!
//! Layout. Every node owns its services and checks ([`NodeEntry`]), and every service name
//! owns the list of its instances across nodes ([`ServiceGroup`]); an instance row is one
//! `Arc` referenced from both places. Keys are folded to lowercase because Consul matches
//! node names, service names, service IDs and check IDs case-insensitively. A node's checks
//! are keyed by `(service ID, check ID)` so that one service's checks are a contiguous range
//! and node-level checks (empty service ID) come first.
//!
//! Indexes, as Consul keeps them: the `nodes`, `services` and `checks` table indexes
//! ([`Table`] slots), one index per service name (Consul's `service.<name>` entry, here
//! [`ServiceGroup::index`]) that moves whenever anything a health query of that service
//! returns changes — its instances, their checks, node-level checks of their nodes, and their
//! nodes — and `service_extinction_index`, the last index at which some service lost its last
//! instance, reported for queries of services that do not exist.
//!
//! Change keys, so that blocking queries wake precisely:
//! - `Key(Nodes, node)`: the node row changed.
//! - `Key(Services, name)`: an instance row of service `name` changed.
//! - `Key(Checks, node)`: a check on `node` changed.
//! - `Key(ServiceIndex, name)`: the per-service index of `name` moved (health and catalog
//!   queries of one service watch only this).
//! - `Key(NodeServices, node)`: the set or content of services on `node` changed.
//!
//! Invariants (checked by `check_invariants` in tests):
//! - an instance is in its node's `services` iff it is in its name's group, as the same `Arc`;
//! - a group is never empty; its index is ≥ every instance's `ModifyIndex`;
//! - every check of a node references a service of that node, or none;
//! - `node_ids` maps exactly the non-empty node IDs to their node's key;
//! - a registration or deregistration applies completely or not at all.

pub mod apply;
pub mod read;
pub mod rows;
mod snapshot;

use imbl::OrdMap;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub use apply::{CatalogOp, CheckRegistration, Registration, ServiceRegistration};
pub use rows::{
    CheckDefinition, CheckExtras, CheckKey, HealthCheck, InstanceKey, Node, ServiceAddress,
    ServiceInstance, Status, StrMap, Weights,
};

/// The check every agent's node carries, maintained from gossip membership (and, until gossip
/// lands, by the leader for itself).
pub const SERF_CHECK_ID: &str = "serfHealth";
/// The name Consul gives the serf health check.
pub const SERF_CHECK_NAME: &str = "Serf Health Status";

/// A node and everything registered on it.
#[derive(Clone, Debug)]
pub struct NodeEntry {
    pub node: Arc<Node>,
    /// Folded service ID → instance.
    pub services: OrdMap<Arc<str>, Arc<ServiceInstance>>,
    /// `(folded service ID or "", folded check ID)` → check.
    pub checks: OrdMap<CheckKey, Arc<HealthCheck>>,
    /// Folded check ID → folded service ID it belongs to (empty for node checks).
    pub check_owners: OrdMap<Arc<str>, Arc<str>>,
}

/// Every instance of one service name.
#[derive(Clone, Debug)]
pub struct ServiceGroup {
    /// Consul's `service.<name>` index.
    pub index: u64,
    pub instances: OrdMap<InstanceKey, Arc<ServiceInstance>>,
}

/// The catalog tables of one store version.
#[derive(Clone, Debug, Default)]
pub struct CatalogTables {
    /// Folded node name → node.
    pub nodes: OrdMap<Arc<str>, NodeEntry>,
    /// Folded service name → its instances.
    pub services: OrdMap<Arc<str>, ServiceGroup>,
    /// Node UUID → folded node name.
    pub node_ids: OrdMap<Arc<str>, Arc<str>>,
    /// Last index at which a service lost its last instance (Consul's
    /// `service_last_extinction`).
    pub service_extinction_index: u64,
}

impl Serialize for CatalogTables {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        snapshot::CatalogDump::from_tables(self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CatalogTables {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let dump = snapshot::CatalogDump::deserialize(deserializer)?;
        dump.into_tables().map_err(serde::de::Error::custom)
    }
}

impl CatalogTables {
    pub fn node(&self, name: &str) -> Option<&NodeEntry> {
        self.nodes.get(&*rows::fold(name))
    }
    pub fn group(&self, service: &str) -> Option<&ServiceGroup> {
        self.services.get(&*rows::fold(service))
    }

    /// Panics if an invariant listed in the module documentation does not hold. For tests
    /// and debug assertions; O(rows).
    pub fn check_invariants(&self) {
        let mut instances_in_nodes = 0usize;
        for (key, entry) in self.nodes.iter() {
            assert_eq!(
                **key,
                *rows::fold(&entry.node.name),
                "node key is its folded name"
            );
            if !entry.node.id.is_empty() {
                assert_eq!(
                    self.node_ids.get(&*entry.node.id).map(|k| &**k),
                    Some(&**key),
                    "node id indexed"
                );
            }
            for (service_key, instance) in entry.services.iter() {
                instances_in_nodes += 1;
                assert_eq!(**service_key, *rows::fold(&instance.id));
                assert!(
                    Arc::ptr_eq(&instance.node, &entry.node.name)
                        || instance.node == entry.node.name
                );
                let group = self
                    .services
                    .get(&*rows::fold(&instance.name))
                    .expect("instance's group exists");
                let in_group = group
                    .instances
                    .get(&rows::InstanceKeyRef {
                        node: key,
                        service_id: service_key,
                    })
                    .expect("instance in its group");
                assert!(
                    Arc::ptr_eq(in_group, instance),
                    "same row in node and group"
                );
                assert!(group.index >= instance.modify_index);
            }
            assert_eq!(entry.checks.len(), entry.check_owners.len());
            for (check_key, check) in entry.checks.iter() {
                assert_eq!(*check_key.check, *rows::fold(&check.check_id));
                assert_eq!(*check_key.service, *rows::fold(&check.service_id));
                assert_eq!(
                    entry.check_owners.get(&*check_key.check),
                    Some(&check_key.service)
                );
                if !check_key.service.is_empty() {
                    assert!(
                        entry.services.contains_key(&*check_key.service),
                        "check {} references a registered service",
                        check.check_id
                    );
                }
            }
        }
        let mut instances_in_groups = 0usize;
        for (_, group) in self.services.iter() {
            assert!(!group.instances.is_empty(), "no empty groups");
            instances_in_groups += group.instances.len();
        }
        assert_eq!(instances_in_nodes, instances_in_groups);
        for (id, key) in self.node_ids.iter() {
            let entry = self.nodes.get(&**key).expect("indexed node exists");
            assert_eq!(&*entry.node.id, &**id);
        }
    }
}

#[cfg(test)]
mod tests;
