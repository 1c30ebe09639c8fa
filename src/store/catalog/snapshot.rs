//! Snapshot form of the catalog: one record per node with its services and checks, plus the
//! per-service indexes. Restoring rebuilds the secondary structures (groups, ID index) and
//! re-shares repeated strings, so a restored catalog is as compact as a live one.

use super::rows::{
    fold_arc, CheckList, HealthCheck, InstanceKey, Node, NodeCoordinate, RowArc, ServiceInstance,
    Tags,
};
use super::PackedMap;
use super::{CatalogTables, InstanceView, NodeEntry, NodeHead, ServiceGroup};
use arcstr::ArcStr;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Deserialize)]
pub(super) struct CatalogDump {
    nodes: Vec<NodeDump>,
    /// Folded service name → `service.<name>` index.
    service_indexes: Vec<(ArcStr, u64)>,
    service_extinction_index: u64,
    /// Absent from snapshots taken before coordinates were stored.
    #[serde(default)]
    coordinates: Vec<NodeCoordinate>,
}

#[derive(Deserialize)]
struct NodeDump {
    node: Node,
    services: Vec<ServiceInstance>,
    checks: Vec<HealthCheck>,
}

/// Hands out one shared allocation per distinct string.
#[derive(Default)]
struct Interner(HashMap<ArcStr, ()>);

impl Interner {
    fn get(&mut self, text: &ArcStr) -> ArcStr {
        if let Some((existing, _)) = self.0.get_key_value(text) {
            return existing.clone();
        }
        self.0.insert(text.clone(), ());
        text.clone()
    }
}

/// The serializing side of [`CatalogDump`]: the same layout, written straight from the live
/// tables (no row is copied, so a snapshot of a large catalog costs only its output bytes).
pub(super) struct CatalogDumpRef<'a>(pub(super) &'a CatalogTables);

impl Serialize for CatalogDumpRef<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let tables = self.0;
        let mut dump = serializer.serialize_struct("CatalogDump", 4)?;
        dump.serialize_field("nodes", &Seq(|| tables.nodes.values().map(NodeDumpRef)))?;
        dump.serialize_field(
            "service_indexes",
            &Seq(|| {
                tables
                    .services
                    .iter()
                    .map(|(name, group)| (name, group.index))
            }),
        )?;
        dump.serialize_field("service_extinction_index", &tables.service_extinction_index)?;
        dump.serialize_field(
            "coordinates",
            &Seq(|| tables.coordinates.values().map(|c| &**c)),
        )?;
        dump.end()
    }
}

struct NodeDumpRef<'a>(&'a NodeEntry);

impl Serialize for NodeDumpRef<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let entry = self.0;
        let mut dump = serializer.serialize_struct("NodeDump", 3)?;
        dump.serialize_field("node", &**entry.node())?;
        dump.serialize_field("services", &Seq(|| entry.services.values().map(|s| &**s)))?;
        dump.serialize_field("checks", &Seq(|| entry.checks.values().map(|c| &**c)))?;
        dump.end()
    }
}

/// Serializes the items an iterator factory yields as a sequence.
struct Seq<F>(F);

impl<F, I> Serialize for Seq<F>
where
    F: Fn() -> I,
    I: Iterator,
    I::Item: Serialize,
{
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq((self.0)())
    }
}

impl CatalogDump {
    pub(super) fn into_tables(self) -> Result<CatalogTables, String> {
        let mut restore = Restore {
            strings: Interner::default(),
            tags: HashMap::new(),
            indexes: self.service_indexes.into_iter().collect(),
            tables: CatalogTables {
                service_extinction_index: self.service_extinction_index,
                ..CatalogTables::default()
            },
        };
        for dump in self.nodes {
            restore.node(dump)?;
        }
        let mut tables = restore.tables;
        for coordinate in self.coordinates {
            restore_coordinate(&mut tables, coordinate)?;
        }
        Ok(tables)
    }
}

/// One restore in progress: the tables rebuilt so far, and the interners that make equal
/// names, datacenters and tag lists share one allocation as they do in a live catalog.
struct Restore {
    strings: Interner,
    tags: HashMap<Tags, ()>,
    /// Folded service name → its `service.<name>` index from the snapshot.
    indexes: HashMap<ArcStr, u64>,
    tables: CatalogTables,
}

/// Folded service ID → its checks, in check-ID order (the empty ID: node checks).
type CheckLists = HashMap<ArcStr, Vec<RowArc<HealthCheck>>>;

impl Restore {
    /// Restores one node with its services, checks and views; a node listed twice is refused.
    fn node(&mut self, dump: NodeDump) -> Result<(), String> {
        let mut node = dump.node;
        node.name = self.strings.get(&node.name);
        node.datacenter = self.strings.get(&node.datacenter);
        let node = Arc::new(node);
        let node_key = fold_arc(&node.name);
        if self.tables.nodes.contains_key(&*node_key) {
            return Err(format!("snapshot lists node {:?} twice", node.name));
        }
        let mut entry = NodeEntry {
            head: Arc::new(NodeHead::new(node.clone(), CheckList::empty())),
            services: PackedMap::new(),
            checks: PackedMap::new(),
        };
        for service in dump.services {
            self.service(&mut entry, &node, service);
        }
        let mut lists = restore_checks(&mut entry, &node, dump.checks)?;
        for list in lists.values_mut() {
            list.sort_by_cached_key(|check| fold_arc(&check.check_id));
        }
        self.views(&mut entry, &node, &node_key, lists);
        if !node.id.is_empty() {
            self.tables
                .node_ids
                .insert(node.id.clone(), node_key.clone());
        }
        self.tables.nodes.insert(node_key, entry);
        Ok(())
    }

    /// Restores one service instance on `node`, sharing its strings and tag list, and raises
    /// its group's index to the instance's.
    fn service(&mut self, entry: &mut NodeEntry, node: &Node, mut service: ServiceInstance) {
        service.node = node.name.clone();
        service.name = self.strings.get(&service.name);
        service.tags = match self.tags.get_key_value(&service.tags) {
            Some((shared, _)) => shared.clone(),
            None => {
                self.tags.insert(service.tags.clone(), ());
                service.tags
            }
        };
        let service = RowArc::new(service);
        let service_key = fold_arc(&service.id);
        let name_key = self.strings.get(&fold_arc(&service.name));
        entry.services.insert(service_key.clone(), service.clone());
        let group = match self.tables.services.get_mut(&*name_key) {
            Some(group) => group,
            None => {
                let index = self.indexes.get(&name_key).copied().unwrap_or(0);
                self.tables.services.insert(
                    name_key.clone(),
                    ServiceGroup {
                        index,
                        instances: PackedMap::new(),
                    },
                );
                self.tables
                    .services
                    .get_mut(&*name_key)
                    .expect("just inserted")
            }
        };
        group.index = group.index.max(service.modify_index);
    }

    /// Builds the views: the node's shared node-check list and each instance's own checks,
    /// filed under the instance's service group.
    fn views(
        &mut self,
        entry: &mut NodeEntry,
        node: &Arc<Node>,
        node_key: &ArcStr,
        mut lists: CheckLists,
    ) {
        entry.head = Arc::new(NodeHead::new(
            node.clone(),
            CheckList::new(lists.remove("").unwrap_or_default()),
        ));
        for (service_key, service) in entry.services.iter() {
            let checks = CheckList::new(lists.remove(&**service_key).unwrap_or_default());
            let view = InstanceView::new(service.clone(), entry.head.clone(), checks);
            let name_key = fold_arc(&service.name);
            if let Some(group) = self.tables.services.get_mut(&*name_key) {
                group.instances.insert(
                    InstanceKey {
                        node: node_key.clone(),
                        service_id: service_key.clone(),
                    },
                    view,
                );
            }
        }
    }
}

/// Restores a node's checks, labelled with their service's name and tags; a check of a
/// missing service or a check listed twice is refused. Returns the checks by service.
fn restore_checks(
    entry: &mut NodeEntry,
    node: &Node,
    checks: Vec<HealthCheck>,
) -> Result<CheckLists, String> {
    let mut lists = CheckLists::new();
    for mut check in checks {
        check.node = node.name.clone();
        let service_key = fold_arc(&check.service_id);
        if let Some(service) = entry.services.get(&*service_key) {
            check.service_name = service.name.clone();
            check.service_tags = service.tags.clone();
        } else if !service_key.is_empty() {
            return Err(format!(
                "snapshot check {:?} references a missing service",
                check.check_id
            ));
        }
        let check_key = fold_arc(&check.check_id);
        if entry.checks.contains_key(&*check_key) {
            return Err(format!(
                "snapshot lists check {:?} of node {:?} twice",
                check.check_id, node.name
            ));
        }
        let check = RowArc::new(check);
        entry.checks.insert(check_key, check.clone());
        lists.entry(service_key).or_default().push(check);
    }
    Ok(lists)
}

/// Restores one coordinate under its node's name as the catalog spells it; a coordinate of
/// an unknown node is refused.
fn restore_coordinate(
    tables: &mut CatalogTables,
    mut coordinate: NodeCoordinate,
) -> Result<(), String> {
    let Some((node_key, entry)) = tables.nodes.get_key_value(&*fold_arc(&coordinate.node)) else {
        return Err(format!(
            "snapshot holds a coordinate of unknown node {:?}",
            coordinate.node
        ));
    };
    coordinate.node = entry.node().name.clone();
    let node_key = node_key.clone();
    tables.coordinates.insert(node_key, Arc::new(coordinate));
    Ok(())
}
