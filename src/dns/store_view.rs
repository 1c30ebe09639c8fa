//! [`CatalogView`] over a real store version: the catalog tables (`src/store/catalog`).
//!
//! What each read records, matching the catalog's change keys (see `store::catalog`):
//! - a service lookup reads `(ServiceIndex, name)`, which the catalog changes whenever a
//!   health query of that service would answer differently (its instances, their checks,
//!   node-level checks of their nodes, their nodes);
//! - a node lookup reads `(Nodes, name)`, changed with the node row (address, metadata);
//! - the PTR scans read the whole `Nodes` / `Services` tables;
//! - an ingress lookup reads the gateway-services rows linking the service and each linked
//!   gateway's `(ServiceIndex, gateway)`.

use super::view::{CatalogView, Health, NodeRecord, ReadSet, ServiceInstance};
use crate::store::catalog::read::check_service_nodes;
use crate::store::catalog::{Node, Status};
use crate::store::{Table, Tables};
use arcstr::ArcStr;
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

/// DNS instances of catalog rows `(node, instance, aggregated status)`, grouped by node.
fn instances_of<'r>(
    rows: impl Iterator<
        Item = (
            &'r Arc<Node>,
            &'r crate::store::catalog::RowArc<crate::store::catalog::ServiceInstance>,
            Status,
        ),
    >,
) -> Vec<ServiceInstance> {
    let mut out = Vec::new();
    // Instances come grouped by node: convert each node once.
    let mut last: Option<(*const Node, Arc<NodeRecord>)> = None;
    for (row_node, service, status) in rows {
        let node = match &last {
            Some((ptr, record)) if std::ptr::eq(*ptr, &**row_node) => record.clone(),
            _ => {
                let record = node_record(row_node);
                last = Some((&**row_node as *const Node, record.clone()));
                record
            }
        };
        out.push(ServiceInstance {
            node,
            service_id: service.id.clone(),
            service_name: service.name.clone(),
            address: service.address.clone(),
            port: service.port.clamp(0, u16::MAX as i32) as u16,
            tags: service.tags.to_vec(),
            tagged_addresses: service
                .tagged_addresses()
                .iter()
                .map(|(tag, address)| (tag.clone(), address.address.clone()))
                .collect(),
            weight_passing: service.weights.passing.min(u16::MAX as u32) as u16,
            weight_warning: service.weights.warning.min(u16::MAX as u32) as u16,
            health: health(status),
        });
    }
    out
}

/// DNS instances of a prepared query's rows as a server answered them, each with its worst
/// check's health.
pub fn query_instances(
    rows: &[crate::consul::rpc::rows::CheckServiceNodeRow],
) -> Vec<ServiceInstance> {
    instances_of(rows.iter().map(|row| {
        let status = crate::store::catalog::read::aggregate(row.checks.iter().map(|c| c.status));
        (&row.node, &row.service, status)
    }))
}

impl CatalogView for Tables {
    fn service_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        reads.add_key(Table::ServiceIndex, name);
        let rows = check_service_nodes(self, name);
        instances_of(
            rows.iter()
                .map(|row| (row.node, row.service, row.aggregated_status())),
        )
    }

    fn connect_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        // As the connect health query reads: the service, the proxy groups it found, and the
        // services table (a new proxy may appear under any name).
        reads.add_key(Table::ServiceIndex, name);
        reads.add_table(Table::Services);
        let rows = crate::store::catalog::read::connect_rows(self, name);
        for group in &rows.proxy_groups {
            reads.add_key(Table::ServiceIndex, group);
        }
        instances_of(rows.views.iter().map(|view| {
            let status =
                crate::store::catalog::read::aggregate(view.all_checks().map(|c| c.status));
            (view.node(), &view.service, status)
        }))
    }

    fn ingress_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        // As the ingress health query reads: the rows linking the service, and each linked
        // gateway's instances.
        use crate::store::gateways::{self, GatewayKind};
        reads.add_key(Table::GatewayServices, &gateways::service_key(name));
        let mut out = Vec::new();
        for gateway in gateways::linked_gateway_names(self, name, GatewayKind::Ingress) {
            reads.add_key(Table::ServiceIndex, &gateway);
            let rows = check_service_nodes(self, &gateway);
            out.extend(instances_of(
                rows.iter()
                    .filter(|row| row.service.kind() == GatewayKind::Ingress.as_str())
                    .map(|row| (row.node, row.service, row.aggregated_status())),
            ));
        }
        out
    }

    fn node(&self, name: &str, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        reads.add_key(Table::Nodes, name);
        self.catalog
            .node(name)
            .map(|entry| node_record(entry.node()))
    }

    fn node_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        reads.add_table(Table::Nodes);
        self.catalog
            .nodes
            .values()
            .find(|entry| entry.node().address.parse::<IpAddr>().ok() == Some(ip))
            .map(|entry| node_record(entry.node()))
    }

    fn service_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<ArcStr> {
        reads.add_table(Table::Services);
        self.catalog.services.values().find_map(|group| {
            group
                .instances
                .values()
                .find(|view| view.service.address.parse::<IpAddr>().ok() == Some(ip))
                .map(|view| view.service.name.clone())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DnsConfig;
    use crate::dns::{handle_message, resolve::LocalAgent, DnsSettings, Handled, ShardDns};
    use crate::dns::{Transport, VersionSource};
    use crate::proto::dns::{fast::tests::build_query, rtype};
    use crate::store::catalog::{CatalogOp, CheckRegistration, Registration, ServiceRegistration};
    use crate::store::{Change, Command};
    use hickory_proto::op::Message;
    use hickory_proto::rr::RData;
    use std::cell::RefCell;

    struct Store {
        tables: RefCell<Arc<Tables>>,
        index: std::cell::Cell<u64>,
    }

    impl VersionSource for Store {
        type View = Arc<Tables>;
        fn version(&self) -> Arc<Tables> {
            self.tables.borrow().clone()
        }
    }

    impl Store {
        fn apply(&self, op: CatalogOp) -> Vec<Change> {
            let mut tables = (**self.tables.borrow()).clone();
            let mut changes = Vec::new();
            self.index.set(self.index.get() + 1);
            tables.apply(self.index.get(), &Command::Catalog(op), &mut changes);
            *self.tables.borrow_mut() = Arc::new(tables);
            changes
        }
    }

    fn register(node: &str, address: &str, service: &str, status: &str) -> CatalogOp {
        CatalogOp::Register(Box::new(Registration {
            node: node.into(),
            address: address.into(),
            datacenter: "dc1".into(),
            service: Some(ServiceRegistration {
                id: format!("{service}-{node}"),
                name: service.into(),
                port: 80,
                ..Default::default()
            }),
            checks: vec![CheckRegistration {
                check_id: format!("{service}-{node}-check"),
                name: "check".into(),
                status: status.into(),
                service_id: format!("{service}-{node}"),
                ..Default::default()
            }],
            ..Default::default()
        }))
    }

    fn addresses(settings: &DnsSettings, state: &mut ShardDns, store: &Store) -> Vec<String> {
        let mut out = Vec::new();
        let query = build_query(1, "web.service.consul", rtype::A, Some(4096));
        let handled = handle_message(
            settings,
            state,
            true,
            store,
            &query,
            Transport::Udp,
            &mut out,
        );
        assert!(matches!(handled, Handled::Reply));
        let mut ips: Vec<String> = Message::from_vec(&out)
            .unwrap()
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.0.to_string()),
                _ => None,
            })
            .collect();
        ips.sort();
        ips
    }

    #[test]
    fn the_catalogs_change_keys_evict_exactly_the_answers_that_read_them() {
        let store = Store {
            tables: RefCell::new(Arc::new(Tables::default())),
            index: std::cell::Cell::new(10),
        };
        store.apply(register("n1", "10.0.0.1", "web", "passing"));
        store.apply(register("n2", "10.0.0.2", "web", "passing"));
        let settings = DnsSettings::new(
            DnsConfig::default(),
            LocalAgent {
                node_name: "s".into(),
                datacenter: "dc1".into(),
                address: "127.0.0.1".parse().unwrap(),
            },
        );
        let mut state = ShardDns::new(5);
        assert_eq!(
            addresses(&settings, &mut state, &store),
            ["10.0.0.1", "10.0.0.2"]
        );
        // Another service's registration leaves the cached answer in place.
        let changes = store.apply(register("n3", "10.0.0.3", "db", "passing"));
        state.cache.invalidate(&changes);
        assert_eq!(state.cache.len(), 1);
        // A check of one `web` instance going critical evicts it.
        let changes = store.apply(register("n1", "10.0.0.1", "web", "critical"));
        state.cache.invalidate(&changes);
        assert_eq!(state.cache.len(), 0);
        assert_eq!(addresses(&settings, &mut state, &store), ["10.0.0.2"]);
        // So does a node-level check on a node running `web`.
        let changes = store.apply(CatalogOp::Register(Box::new(Registration {
            node: "n2".into(),
            address: "10.0.0.2".into(),
            datacenter: "dc1".into(),
            checks: vec![CheckRegistration {
                check_id: "node-down".into(),
                name: "node".into(),
                status: "critical".into(),
                ..Default::default()
            }],
            ..Default::default()
        })));
        state.cache.invalidate(&changes);
        assert_eq!(state.cache.len(), 0);
        assert!(addresses(&settings, &mut state, &store).is_empty());
    }
}
