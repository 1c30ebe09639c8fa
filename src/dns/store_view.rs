//! [`CatalogView`] over a real store version: the catalog tables (`src/store/catalog`).
//!
//! What each read records, matching the catalog's change keys (see `store::catalog`):
//! - a service lookup reads `(ServiceIndex, name)`, which the catalog changes whenever a
//!   health query of that service would answer differently (its instances, their checks,
//!   node-level checks of their nodes, their nodes);
//! - a node lookup reads `(Nodes, name)`, changed with the node row (address, metadata);
//! - the PTR scans read the whole `Nodes` / `Services` tables.

use super::view::{CatalogView, Health, NodeRecord, ReadSet, ServiceInstance};
use crate::store::catalog::read::check_service_nodes;
use crate::store::catalog::{Node, Status};
use crate::store::{Table, Tables};
use std::net::IpAddr;
use std::sync::Arc;

fn node_record(node: &Node) -> Arc<NodeRecord> {
    Arc::new(NodeRecord {
        name: node.name.clone(),
        datacenter: node.datacenter.clone(),
        address: node.address.clone(),
        tagged_addresses: node
            .tagged_addresses
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        meta: node
            .meta
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    })
}

fn health(status: Status) -> Health {
    match status {
        Status::Passing => Health::Passing,
        Status::Warning => Health::Warning,
        Status::Critical | Status::Maintenance => Health::Critical,
    }
}

impl CatalogView for Tables {
    fn service_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        reads.key(Table::ServiceIndex, name);
        let rows = check_service_nodes(self, name);
        let mut out = Vec::with_capacity(rows.len());
        // Instances come grouped by node: convert each node once.
        let mut last: Option<(*const Node, Arc<NodeRecord>)> = None;
        for row in rows {
            let node = match &last {
                Some((ptr, record)) if std::ptr::eq(*ptr, &**row.node) => record.clone(),
                _ => {
                    let record = node_record(row.node);
                    last = Some((&**row.node as *const Node, record.clone()));
                    record
                }
            };
            let service = row.service;
            out.push(ServiceInstance {
                node,
                service_id: service.id.clone(),
                service_name: service.name.clone(),
                address: service.address.clone(),
                port: service.port.clamp(0, u16::MAX as i32) as u16,
                tags: service.tags.to_vec(),
                tagged_addresses: service
                    .tagged_addresses
                    .iter()
                    .flat_map(|list| list.iter())
                    .map(|(tag, address)| (tag.clone(), address.address.clone()))
                    .collect(),
                weight_passing: service.weights.passing.min(u16::MAX as u32) as u16,
                weight_warning: service.weights.warning.min(u16::MAX as u32) as u16,
                health: health(row.aggregated_status()),
            });
        }
        out
    }

    fn node(&self, name: &str, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        reads.key(Table::Nodes, name);
        self.catalog
            .node(name)
            .map(|entry| node_record(&entry.node))
    }

    fn node_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        reads.table(Table::Nodes);
        self.catalog
            .nodes
            .values()
            .find(|entry| entry.node.address.parse::<IpAddr>().ok() == Some(ip))
            .map(|entry| node_record(&entry.node))
    }

    fn service_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<Arc<str>> {
        reads.table(Table::Services);
        self.catalog.services.values().find_map(|group| {
            group
                .instances
                .values()
                .find(|instance| instance.address.parse::<IpAddr>().ok() == Some(ip))
                .map(|instance| instance.name.clone())
        })
    }
}
