//! Catalog reads over one store version, with the index Consul reports for each query.
//!
//! These are the functions the HTTP handlers, DNS and the agent build on. They borrow from
//! the version they read, allocate only the result list, and never look at more than the
//! rows the query needs: a service query walks that service's group, joining each
//! instance's node row and checks by key.

use super::rows::{fold, HealthCheck, Node, RowArc, ServiceInstance, Status};
use super::{NodeEntry, ServiceGroup};
use crate::store::{Table, Tables};
use std::sync::Arc;

/// Index of `/v1/catalog/nodes`.
pub fn nodes_index(tables: &Tables) -> u64 {
    tables.table_index(Table::Nodes)
}

/// Index of `/v1/catalog/services`.
pub fn services_index(tables: &Tables) -> u64 {
    tables.table_index(Table::Services)
}

/// Index of the node-wide queries (`/v1/catalog/node/<n>`): Consul's max over the nodes and
/// services tables.
pub fn node_services_index(tables: &Tables) -> u64 {
    tables.max_table_index(&[Table::Nodes, Table::Services])
}

/// Index of check listings (`/v1/health/node/<n>`, `/v1/health/state/<s>`).
pub fn checks_index(tables: &Tables) -> u64 {
    tables.table_index(Table::Checks)
}

/// Index of every query about one service (Consul's `maxIndexForService`): the service's own
/// index when it exists; otherwise the last extinction, or the catalog-wide index when no
/// service ever went extinct.
pub fn service_index(tables: &Tables, service: &str) -> u64 {
    match tables.catalog.group(service) {
        Some(group) => group.index,
        None if tables.catalog.service_extinction_index > 0 => {
            tables.catalog.service_extinction_index
        }
        None => tables.max_table_index(&[Table::Nodes, Table::Services, Table::Checks]),
    }
}

/// One row of a health answer: Consul's `CheckServiceNode`.
#[derive(Debug, Clone, Copy)]
pub struct CheckServiceNode<'a> {
    pub node: &'a Arc<Node>,
    pub service: &'a RowArc<ServiceInstance>,
    /// The node's own checks.
    pub node_checks: &'a [RowArc<HealthCheck>],
    /// The service instance's checks.
    pub service_checks: &'a [RowArc<HealthCheck>],
}

impl<'a> CheckServiceNode<'a> {
    /// Node-level checks first, then the service's own, each in check-ID order.
    pub fn checks(&self) -> impl Iterator<Item = &'a RowArc<HealthCheck>> + 'a {
        self.node_checks.iter().chain(self.service_checks.iter())
    }
    /// Whether every check passes (`?passing`); an instance with no checks passes.
    pub fn all_passing(&self) -> bool {
        self.checks().all(|c| c.status == Status::Passing)
    }
    /// Whether no check is critical (what DNS serves).
    pub fn none_critical(&self) -> bool {
        self.checks()
            .all(|c| !matches!(c.status, Status::Critical | Status::Maintenance))
    }
    /// The worst status among the checks, passing when there are none.
    pub fn aggregated_status(&self) -> Status {
        aggregate(self.checks().map(|c| c.status))
    }
}

/// Consul's `AggregatedStatus`: maintenance, then critical, then warning, else passing.
pub fn aggregate(statuses: impl Iterator<Item = Status>) -> Status {
    statuses
        .max_by_key(|s| s.severity())
        .unwrap_or(Status::Passing)
}

/// The instances of a service, each joined with its node and checks.
pub fn check_service_nodes<'a>(tables: &'a Tables, service: &str) -> Vec<CheckServiceNode<'a>> {
    let Some(group) = tables.catalog.group(service) else {
        return Vec::new();
    };
    check_service_nodes_of_group(group).collect()
}

/// [`check_service_nodes`] for a group already looked up, as an iterator: the group's
/// views carry everything, so this allocates nothing and looks nothing up.
pub fn check_service_nodes_of_group(
    group: &ServiceGroup,
) -> impl Iterator<Item = CheckServiceNode<'_>> + '_ {
    group.instances.values().map(|view| CheckServiceNode {
        node: view.node(),
        service: &view.service,
        node_checks: view.node_checks(),
        service_checks: view.checks(),
    })
}

/// The checks of one service across all its instances (`/v1/health/checks/<svc>`).
pub fn service_checks<'a>(
    tables: &'a Tables,
    service: &str,
) -> Vec<(&'a Arc<Node>, &'a RowArc<HealthCheck>)> {
    let Some(group) = tables.catalog.group(service) else {
        return Vec::new();
    };
    group
        .instances
        .values()
        .flat_map(|view| view.checks().iter().map(move |c| (view.node(), c)))
        .collect()
}

/// Every check on one node, node-level first (`/v1/health/node/<n>`).
pub fn node_checks<'a>(tables: &'a Tables, node: &str) -> Vec<&'a RowArc<HealthCheck>> {
    match tables.catalog.node(node) {
        Some(entry) => entry.checks.values().collect(),
        None => Vec::new(),
    }
}

/// Every check in a state (`any` for all), with its node (`/v1/health/state/<s>`).
pub fn checks_in_state(
    tables: &Tables,
    state: Option<Status>,
) -> Vec<(&Arc<Node>, &RowArc<HealthCheck>)> {
    let mut out = Vec::new();
    for entry in tables.catalog.nodes.values() {
        for check in entry.checks.values() {
            if state.is_none_or(|s| check.status == s) {
                out.push((entry.node(), check));
            }
        }
    }
    out
}

/// A service instance by node and service ID.
pub fn service_instance<'a>(
    tables: &'a Tables,
    node: &str,
    service_id: &str,
) -> Option<&'a RowArc<ServiceInstance>> {
    tables.catalog.node(node)?.services.get(&*fold(service_id))
}

/// A check by node and check ID.
pub fn check<'a>(
    tables: &'a Tables,
    node: &str,
    check_id: &str,
) -> Option<&'a RowArc<HealthCheck>> {
    let entry = tables.catalog.node(node)?;
    entry.checks.get(&*fold(check_id))
}

/// The checks of one service instance on a node, without node-level checks.
pub fn instance_checks<'a>(
    entry: &'a NodeEntry,
    service_id: &str,
) -> impl Iterator<Item = &'a RowArc<HealthCheck>> + 'a {
    let service_key = fold(service_id).into_owned();
    let registered = entry.services.contains_key(&*service_key);
    entry
        .checks
        .values()
        .filter(move |c| registered && *fold(&c.service_id) == *service_key)
}

/// Service kinds Consul counts apart in its usage report (`ConnectServiceInstances`).
pub const CONNECT_KINDS: [&str; 6] = [
    "api-gateway",
    "connect-native",
    "connect-proxy",
    "ingress-gateway",
    "mesh-gateway",
    "terminating-gateway",
];

/// The catalog's size as `/v1/operator/usage` and the `consul.state.*` gauges report it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceUsage {
    pub nodes: usize,
    /// Distinct service names.
    pub services: usize,
    pub service_instances: usize,
    /// Instances of each of [`CONNECT_KINDS`], in that order.
    pub connect_instances: [(&'static str, usize); 6],
    /// Instances that are not proxies, gateways or the `consul` service itself.
    pub billable_service_instances: usize,
}

/// Counts the catalog as Consul's usage endpoint does: a Connect-native instance is billable,
/// a proxy or gateway is not, nor are the servers' own `consul` instances.
pub fn service_usage(tables: &Tables) -> ServiceUsage {
    let mut usage = ServiceUsage {
        nodes: tables.catalog.nodes.len(),
        services: tables.catalog.services.len(),
        connect_instances: CONNECT_KINDS.map(|kind| (kind, 0)),
        ..ServiceUsage::default()
    };
    for (name, group) in &tables.catalog.services {
        let consul = name.as_str() == "consul";
        for view in group.instances.values() {
            usage.service_instances += 1;
            let instance = &view.service;
            let native = instance.extras.as_deref().is_some_and(|e| e.connect_native);
            let kind = if native {
                "connect-native"
            } else {
                instance.kind()
            };
            let counted = usage.connect_instances.iter_mut().find(|(k, _)| *k == kind);
            if let Some((_, n)) = counted {
                *n += 1;
            }
            let gateway_or_proxy = !instance.kind().is_empty();
            if !gateway_or_proxy && !consul {
                usage.billable_service_instances += 1;
            }
        }
    }
    debug_assert!(usage.billable_service_instances <= usage.service_instances);
    usage
}

/// The service a proxy instance fronts: its `Proxy.DestinationServiceName`. Proxy JSON is
/// stored as the agent normalized it, so the field is found by its canonical spelling; a
/// row written otherwise (an old snapshot, a raw catalog registration) is parsed.
pub fn proxy_destination(instance: &ServiceInstance) -> Option<String> {
    let extras = instance.extras.as_deref()?;
    if &*extras.kind != "connect-proxy" {
        return None;
    }
    let raw = extras.proxy_json.as_deref()?;
    let value: serde_json::Value = serde_json::from_str(raw).ok()?;
    let object = value.as_object()?;
    object
        .iter()
        .find(|(k, _)| {
            k.eq_ignore_ascii_case("DestinationServiceName")
                || k.eq_ignore_ascii_case("destination_service_name")
        })
        .and_then(|(_, v)| v.as_str())
        .map(str::to_string)
}

/// The Connect-capable instances of a service (`/v1/catalog/connect/<s>`,
/// `/v1/health/connect/<s>`): its Connect-native instances and every proxy whose
/// destination it is, with the index of the groups they came from.
pub struct ConnectRows<'t> {
    pub views: Vec<&'t super::InstanceView>,
    /// The largest index of the groups read (the service's own included), or the last
    /// extinction when that is larger, so a vanished proxy still moves the index.
    pub index: u64,
    /// The folded names of the proxy groups read.
    pub proxy_groups: Vec<arcstr::ArcStr>,
}

/// Finds the Connect-capable instances of `service`. Proxies are found by scanning the
/// services that have connect-proxy instances: catalogs hold few of them next to plain
/// services, and the scan allocates nothing per plain instance.
pub fn connect_rows<'t>(tables: &'t Tables, service: &str) -> ConnectRows<'t> {
    let folded = fold(service);
    let catalog = &tables.catalog;
    let mut rows = ConnectRows {
        views: Vec::new(),
        index: catalog.service_extinction_index,
        proxy_groups: Vec::new(),
    };
    if let Some(group) = catalog.services.get(&*folded) {
        rows.index = rows.index.max(group.index);
        rows.views.extend(
            group
                .instances
                .values()
                .filter(|v| v.service.extras.as_ref().is_some_and(|e| e.connect_native)),
        );
    }
    for (name, group) in catalog.services.iter() {
        let mut matched = false;
        for view in group.instances.values() {
            if view.service.kind() != "connect-proxy" {
                continue;
            }
            let Some(destination) = proxy_destination(&view.service) else {
                continue;
            };
            if destination.eq_ignore_ascii_case(service) {
                rows.views.push(view);
                matched = true;
            }
        }
        if matched {
            rows.index = rows.index.max(group.index);
            rows.proxy_groups.push(name.clone());
        }
    }
    if rows.index == 0 {
        rows.index = tables.max_table_index(&[Table::Nodes, Table::Services, Table::Checks]);
    }
    rows
}
