//! The service catalog: the `nodes`, `services` and `checks` tables with Consul's semantics
//! and indexes.
//!
//! Layout. Every node owns its services and checks ([`NodeEntry`]), and every service name
//! owns the list of its instances across nodes ([`ServiceGroup`]); an instance row is one
//! `Arc` referenced from both places. Keys are folded to lowercase because Consul matches
//! node names, service names, service IDs and check IDs case-insensitively. A node's checks
//! are keyed by check ID (unique per node); each instance's [`InstanceView`] lists its own
//! checks, and the node row with its node-level checks is one shared [`NodeHead`] that the
//! node entry and every view of its instances point to.
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
//! - every view of a node's instances shows the node's current [`NodeHead`], and its own
//!   check list holds exactly the node's checks of that instance;
//! - a group is never empty; its index is ≥ every instance's `ModifyIndex`;
//! - every check of a node references a service of that node, or none;
//! - `node_ids` maps exactly the non-empty node IDs to their node's key;
//! - a registration or deregistration applies completely or not at all.

pub mod apply;
pub mod packed_map;
pub mod read;
pub mod render_cache;
pub mod rows;
mod snapshot;

use arcstr::ArcStr;
use imbl::OrdMap;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub use packed_map::PackedMap;

pub use apply::{
    CatalogOp, CatalogOpOf, CheckRegistration, CheckRegistrationOf, CoordinateUpdate, Registration,
    RegistrationOf, ServiceRegistration, ServiceRegistrationOf, Text,
};
pub use rows::{
    CheckDefinition, CheckExtras, CheckList, HealthCheck, InstanceKey, Node, NodeCoordinate,
    RowArc, ServiceAddress, ServiceInstance, Status, StrMap, Weights,
};

/// The check every agent's node carries, maintained from gossip membership (and, until gossip
/// lands, by the leader for itself).
pub const SERF_CHECK_ID: &str = "serfHealth";
/// The name Consul gives the serf health check.
pub const SERF_CHECK_NAME: &str = "Serf Health Status";

/// A node row with its node-level checks: the part of a node every view of its instances
/// shows, shared by all of them through one pointer.
#[derive(Debug)]
pub struct NodeHead {
    pub node: Arc<Node>,
    /// The node-level checks (empty service ID) in check-ID order.
    pub checks: CheckList,
    /// Whether every node-level check passes.
    pub all_passing: bool,
}

impl NodeHead {
    pub fn new(node: Arc<Node>, checks: CheckList) -> NodeHead {
        let all_passing = checks.iter().all(|c| c.status == Status::Passing);
        NodeHead {
            node,
            checks,
            all_passing,
        }
    }
}

/// A node and everything registered on it.
#[derive(Clone, Debug)]
pub struct NodeEntry {
    /// The node row and its node-level checks, shared with every [`InstanceView`] of the node.
    pub head: Arc<NodeHead>,
    /// Folded service ID → instance.
    pub services: PackedMap<ArcStr, RowArc<ServiceInstance>>,
    /// Folded check ID → check (node-level and service checks alike; check IDs are unique
    /// per node). Each instance's checks are also listed in its [`InstanceView`].
    pub checks: PackedMap<ArcStr, RowArc<HealthCheck>>,
}

impl NodeEntry {
    pub fn node(&self) -> &Arc<Node> {
        &self.head.node
    }
    /// The node-level checks in check-ID order.
    pub fn node_checks(&self) -> &[RowArc<HealthCheck>] {
        &self.head.checks
    }
}

/// One instance as a query of its service answers it: the instance, its node row and its
/// checks. Every write keeps these current, so reading a service (the hottest query) walks
/// one map and looks nothing else up.
///
/// There is one per instance, stored inline in its group's map, so it is kept to four words:
/// the node's part is one shared pointer, the checks one thin pointer, the renderings one
/// pointer that stays null until the view is first rendered. (A fifth word, a cached
/// "all passing" flag, pushed the group map's leaves from mimalloc's 896-byte class to the
/// 1024-byte one; the flag is cheap to recompute from the node head and the instance's own
/// checks, usually one.)
#[derive(Clone, Debug)]
pub struct InstanceView {
    pub service: RowArc<ServiceInstance>,
    head: Arc<NodeHead>,
    checks: CheckList,
    /// Renderings of this view (the API layer's JSON), made once per view.
    pub rendered: render_cache::RenderCache,
}

impl InstanceView {
    pub fn new(service: RowArc<ServiceInstance>, head: Arc<NodeHead>, checks: CheckList) -> Self {
        InstanceView {
            service,
            head,
            checks,
            rendered: Default::default(),
        }
    }

    pub fn node(&self) -> &Arc<Node> {
        &self.head.node
    }
    /// The node's own checks (one shared list per node).
    pub fn node_checks(&self) -> &[RowArc<HealthCheck>] {
        &self.head.checks
    }
    /// The instance's own checks, in check-ID order.
    pub fn checks(&self) -> &[RowArc<HealthCheck>] {
        &self.checks
    }
    /// The instance's own checks as the shared list.
    pub fn check_list(&self) -> &CheckList {
        &self.checks
    }
    /// Whether every check of the view passes (`?passing`): the node's checks (decided once
    /// per node head) and the instance's own.
    pub fn all_passing(&self) -> bool {
        self.head.all_passing && self.checks.iter().all(|c| c.status == Status::Passing)
    }
    /// Node checks first, then the instance's, as Consul lists them.
    pub fn all_checks(&self) -> impl Iterator<Item = &RowArc<HealthCheck>> {
        self.node_checks().iter().chain(self.checks.iter())
    }
    /// Whether the view shows the node part `head`.
    pub fn shows_head(&self, head: &Arc<NodeHead>) -> bool {
        Arc::ptr_eq(&self.head, head)
    }
}

/// Every instance of one service name.
#[derive(Clone, Debug)]
pub struct ServiceGroup {
    /// Consul's `service.<name>` index.
    pub index: u64,
    pub instances: PackedMap<InstanceKey, InstanceView>,
}

/// The catalog tables of one store version.
#[derive(Clone, Debug, Default)]
pub struct CatalogTables {
    /// Folded node name → node.
    pub nodes: OrdMap<ArcStr, NodeEntry>,
    /// Folded service name → its instances.
    pub services: OrdMap<ArcStr, ServiceGroup>,
    /// Node UUID → folded node name.
    pub node_ids: OrdMap<ArcStr, ArcStr>,
    /// Last index at which a service lost its last instance (Consul's
    /// `service_last_extinction`).
    pub service_extinction_index: u64,
    /// Folded node name → the coordinate last reported for it; only nodes of the catalog
    /// have one, and a node's deregistration removes it, as in Consul.
    pub coordinates: OrdMap<ArcStr, Arc<NodeCoordinate>>,
}

impl Serialize for CatalogTables {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        snapshot::CatalogDumpRef(self).serialize(serializer)
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
        for (key, coordinate) in self.coordinates.iter() {
            assert!(
                self.nodes.contains_key(&**key),
                "coordinate of {key:?} without its node"
            );
            assert_eq!(**key, *rows::fold(&coordinate.node), "keyed by folded node");
        }
        let mut instances_in_nodes = 0usize;
        for (key, entry) in self.nodes.iter() {
            let node = entry.node();
            assert_eq!(
                **key,
                *rows::fold(&node.name),
                "node key is its folded name"
            );
            if !node.id.is_empty() {
                assert_eq!(
                    self.node_ids.get(&*node.id).map(|k| &**k),
                    Some(&**key),
                    "node id indexed"
                );
            }
            for (service_key, instance) in entry.services.iter() {
                instances_in_nodes += 1;
                assert_eq!(**service_key, *rows::fold(&instance.id));
                assert!(ArcStr::ptr_eq(&instance.node, &node.name) || instance.node == node.name);
                let group = self
                    .services
                    .get(&*rows::fold(&instance.name))
                    .expect("instance's group exists");
                let view = group
                    .instances
                    .get(&rows::InstanceKeyRef {
                        node: key,
                        service_id: service_key,
                    })
                    .expect("instance in its group");
                assert!(
                    RowArc::ptr_eq(&view.service, instance),
                    "same row in node and group"
                );
                assert!(
                    view.shows_head(&entry.head),
                    "view carries the node row and node checks"
                );
                let own: Vec<&RowArc<HealthCheck>> =
                    apply::checks_of_service(&entry.checks, service_key).collect();
                assert_eq!(own.len(), view.checks().len());
                assert!(own
                    .iter()
                    .zip(view.checks().iter())
                    .all(|(a, b)| RowArc::ptr_eq(a, b)));
                assert_eq!(
                    view.all_passing(),
                    view.all_checks().all(|c| c.status == Status::Passing)
                );
                assert!(group.index >= instance.modify_index);
            }
            let node_checks: Vec<&RowArc<HealthCheck>> =
                apply::checks_of_service(&entry.checks, "").collect();
            assert_eq!(node_checks.len(), entry.node_checks().len());
            assert!(node_checks
                .iter()
                .zip(entry.node_checks().iter())
                .all(|(a, b)| RowArc::ptr_eq(a, b)));
            for (check_key, check) in entry.checks.iter() {
                assert_eq!(**check_key, *rows::fold(&check.check_id));
                let owner = rows::fold(&check.service_id);
                if !owner.is_empty() {
                    assert!(
                        entry.services.contains_key(&*owner),
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
            assert_eq!(&*entry.node().id, &**id);
        }
    }
}

#[cfg(test)]
mod tests;
