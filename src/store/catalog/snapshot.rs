//! Snapshot form of the catalog: one record per node with its services and checks, plus the
//! per-service indexes. Restoring rebuilds the secondary structures (groups, ID index) and
//! re-shares repeated strings, so a restored catalog is as compact as a live one.

use super::rows::{fold_arc, CheckKey, HealthCheck, InstanceKey, Node, ServiceInstance};
use super::{CatalogTables, NodeEntry, ServiceGroup};
use imbl::OrdMap;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Serialize, Deserialize)]
pub(super) struct CatalogDump {
    nodes: Vec<NodeDump>,
    /// Folded service name → `service.<name>` index.
    service_indexes: Vec<(Arc<str>, u64)>,
    service_extinction_index: u64,
}

#[derive(Serialize, Deserialize)]
struct NodeDump {
    node: Node,
    services: Vec<ServiceInstance>,
    checks: Vec<HealthCheck>,
}

/// Hands out one shared allocation per distinct string.
#[derive(Default)]
struct Interner(HashMap<Arc<str>, ()>);

impl Interner {
    fn get(&mut self, text: &Arc<str>) -> Arc<str> {
        if let Some((existing, _)) = self.0.get_key_value(text) {
            return existing.clone();
        }
        self.0.insert(text.clone(), ());
        text.clone()
    }
}

impl CatalogDump {
    pub(super) fn from_tables(tables: &CatalogTables) -> CatalogDump {
        CatalogDump {
            nodes: tables
                .nodes
                .values()
                .map(|entry| NodeDump {
                    node: (*entry.node).clone(),
                    services: entry.services.values().map(|s| (**s).clone()).collect(),
                    checks: entry.checks.values().map(|c| (**c).clone()).collect(),
                })
                .collect(),
            service_indexes: tables
                .services
                .iter()
                .map(|(name, group)| (name.clone(), group.index))
                .collect(),
            service_extinction_index: tables.service_extinction_index,
        }
    }

    pub(super) fn into_tables(self) -> Result<CatalogTables, String> {
        let mut strings = Interner::default();
        let mut tags: HashMap<Arc<[Arc<str>]>, ()> = HashMap::new();
        let mut tables = CatalogTables {
            service_extinction_index: self.service_extinction_index,
            ..CatalogTables::default()
        };
        let indexes: HashMap<Arc<str>, u64> = self.service_indexes.into_iter().collect();
        for dump in self.nodes {
            let mut node = dump.node;
            node.name = strings.get(&node.name);
            node.datacenter = strings.get(&node.datacenter);
            let node = Arc::new(node);
            let node_key = fold_arc(&node.name);
            if tables.nodes.contains_key(&*node_key) {
                return Err(format!("snapshot lists node {:?} twice", node.name));
            }
            let mut entry = NodeEntry {
                node: node.clone(),
                services: OrdMap::new(),
                checks: OrdMap::new(),
                check_owners: OrdMap::new(),
            };
            for mut service in dump.services {
                service.node = node.name.clone();
                service.name = strings.get(&service.name);
                service.tags = match tags.get_key_value(&service.tags) {
                    Some((shared, _)) => shared.clone(),
                    None => {
                        tags.insert(service.tags.clone(), ());
                        service.tags
                    }
                };
                let service = Arc::new(service);
                let service_key = fold_arc(&service.id);
                let name_key = strings.get(&fold_arc(&service.name));
                entry.services.insert(service_key.clone(), service.clone());
                let group = match tables.services.get_mut(&*name_key) {
                    Some(group) => group,
                    None => {
                        let index = indexes.get(&name_key).copied().unwrap_or(0);
                        tables.services.insert(
                            name_key.clone(),
                            ServiceGroup {
                                index,
                                instances: OrdMap::new(),
                            },
                        );
                        tables.services.get_mut(&*name_key).expect("just inserted")
                    }
                };
                group.index = group.index.max(service.modify_index);
                group.instances.insert(
                    InstanceKey {
                        node: node_key.clone(),
                        service_id: service_key,
                    },
                    service,
                );
            }
            for mut check in dump.checks {
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
                entry
                    .check_owners
                    .insert(check_key.clone(), service_key.clone());
                entry.checks.insert(
                    CheckKey {
                        service: service_key,
                        check: check_key,
                    },
                    Arc::new(check),
                );
            }
            if !node.id.is_empty() {
                tables.node_ids.insert(node.id.clone(), node_key.clone());
            }
            tables.nodes.insert(node_key, entry);
        }
        Ok(tables)
    }
}
