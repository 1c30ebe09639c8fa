//! The read interface DNS resolution needs from one store version, and what it read.
//!
//! Resolution never touches tables directly: it asks a [`CatalogView`] for service instances,
//! nodes and address owners. Every call records in a [`ReadSet`] the `(table, key)` pairs whose
//! change could alter its result, so the per-shard answer cache can drop exactly the answers a
//! change set touches. An implementation must record at least everything it looked at; a
//! missing read is a stale answer, an extra read only a wasted cache entry.
//!
//! [`MemoryCatalog`] is a small in-memory implementation for unit tests; the store's own
//! implementation is in `store_view.rs`.

use crate::store::Table;
use arcstr::ArcStr;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::Arc;

/// Aggregated health of an instance: the worst of its node's checks and its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Health {
    Passing,
    Warning,
    /// Critical or in maintenance.
    Critical,
}

/// One node, as DNS needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub name: ArcStr,
    pub datacenter: ArcStr,
    /// The node's address: an IP, or a host name for external nodes.
    pub address: ArcStr,
    /// Consul's `TaggedAddresses` (`lan`, `lan_ipv4`, `lan_ipv6`, `wan`, …).
    pub tagged_addresses: Vec<(ArcStr, ArcStr)>,
    pub meta: Vec<(ArcStr, ArcStr)>,
}

impl NodeRecord {
    pub fn tagged_address(&self, tag: &str) -> Option<&str> {
        self.tagged_addresses
            .iter()
            .find(|(t, _)| &**t == tag)
            .map(|(_, a)| &**a)
    }
}

/// One registered service instance with its node and aggregated health.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceInstance {
    pub node: Arc<NodeRecord>,
    pub service_id: ArcStr,
    pub service_name: ArcStr,
    /// The service's own address; empty means "use the node's".
    pub address: ArcStr,
    pub port: u16,
    pub tags: Vec<ArcStr>,
    pub tagged_addresses: Vec<(ArcStr, ArcStr)>,
    /// SRV weights (`Weights.Passing`, `Weights.Warning`); Consul's default is 1 and 1.
    pub weight_passing: u16,
    pub weight_warning: u16,
    pub health: Health,
}

/// What one resolution read: keys and whole tables whose change may alter its answer. The
/// store's dependency set, so the cache matches it against change sets by the store's rule
/// (catalog names folded as the catalog folds them).
pub type ReadSet = crate::store::Dependencies;

/// Catalog reads over one store version.
pub trait CatalogView {
    /// Every instance of the service `name` (matched case-insensitively) in this datacenter,
    /// whatever its health; the resolver filters.
    fn service_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance>;
    /// The node named `name` (case-insensitive).
    fn node(&self, name: &str, reads: &mut ReadSet) -> Option<Arc<NodeRecord>>;
    /// The first node whose address is `ip`, for PTR.
    fn node_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<Arc<NodeRecord>>;
    /// The name of the first service with an instance whose own address is `ip`, for PTR.
    fn service_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<ArcStr>;
    /// What another datacenter or a prepared query answered for `lookup` (not a local
    /// form), if this view holds it. A view that can fetch notes it as missing, so the
    /// resolution is completed once it arrived; a store version holds none, and the name
    /// is NXDOMAIN.
    fn elsewhere(&self, _lookup: &super::remote::Lookup) -> Option<super::remote::LookupResult> {
        None
    }
    /// The Connect-capable instances of `name` (`<name>.connect`): the proxies fronting it
    /// and its Connect-native instances, whatever their health. No default body: a wrapper
    /// that forgot to forward it would answer NXDOMAIN for every `<name>.connect`.
    fn connect_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance>;
    /// The instances of the ingress gateways exposing `name` (`<name>.ingress`), whatever
    /// their health. No default body, for the reason `connect_instances` has none.
    fn ingress_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance>;
}

/// An in-memory catalog for tests, recording reads the way the store implementation does:
/// a service lookup reads `(Services, name)`, a node lookup `(Nodes, name)`, and the
/// address scans read the whole `Nodes` / `Services` tables.
#[derive(Clone, Debug, Default)]
pub struct MemoryCatalog {
    pub nodes: Vec<Arc<NodeRecord>>,
    pub instances: Vec<ServiceInstance>,
}

impl CatalogView for MemoryCatalog {
    fn service_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        reads.add_key(Table::Services, name);
        self.instances
            .iter()
            .filter(|i| i.service_name.eq_ignore_ascii_case(name))
            .cloned()
            .collect()
    }
    fn node(&self, name: &str, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        reads.add_key(Table::Nodes, name);
        self.nodes
            .iter()
            .find(|n| n.name.eq_ignore_ascii_case(name))
            .cloned()
    }
    fn node_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        reads.add_table(Table::Nodes);
        self.nodes
            .iter()
            .find(|n| n.address.parse::<IpAddr>().ok() == Some(ip))
            .cloned()
    }
    fn service_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<ArcStr> {
        reads.add_table(Table::Services);
        self.instances
            .iter()
            .find(|i| i.address.parse::<IpAddr>().ok() == Some(ip))
            .map(|i| i.service_name.clone())
    }
    /// The test catalog models no proxies: nothing is Connect-capable.
    fn connect_instances(&self, _name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        reads.add_table(Table::Services);
        Vec::new()
    }
    /// Nor gateways.
    fn ingress_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        reads.add_key(
            Table::GatewayServices,
            &crate::store::gateways::service_key(name),
        );
        Vec::new()
    }
}

/// A shared version (`Arc<Tables>`) reads like the version itself.
impl<T: CatalogView + ?Sized> CatalogView for Arc<T> {
    fn service_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        (**self).service_instances(name, reads)
    }
    fn node(&self, name: &str, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        (**self).node(name, reads)
    }
    fn node_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        (**self).node_by_address(ip, reads)
    }
    fn service_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<ArcStr> {
        (**self).service_by_address(ip, reads)
    }
    fn connect_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        (**self).connect_instances(name, reads)
    }
    fn ingress_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        (**self).ingress_instances(name, reads)
    }
}

/// A view that shows only what a token may read, as Consul's DNS reads through its agent's
/// `default` token (else the anonymous token): an instance needs `node:read` on its node
/// and `service:read` on its service, a node `node:read`. With no authorizer (ACLs off) it
/// shows everything. What it hides is still recorded as read, so the answer cache drops an
/// answer when the hidden rows change as for any other.
pub struct AclFiltered<V> {
    pub inner: V,
    pub authorizer: Option<Arc<crate::store::acl::authorizer::Authorizer>>,
}

impl<V: CatalogView> AclFiltered<V> {
    fn node_readable(&self, name: &str) -> bool {
        self.authorizer
            .as_deref()
            .is_none_or(|a| a.node_read(name).is_ok())
    }

    fn service_readable(&self, name: &str) -> bool {
        self.authorizer
            .as_deref()
            .is_none_or(|a| a.service_read(name).is_ok())
    }
}

impl<V: CatalogView> CatalogView for AclFiltered<V> {
    fn service_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        let mut instances = self.inner.service_instances(name, reads);
        if self.authorizer.is_some() {
            instances.retain(|i| {
                self.service_readable(&i.service_name) && self.node_readable(&i.node.name)
            });
        }
        instances
    }
    fn node(&self, name: &str, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        self.inner
            .node(name, reads)
            .filter(|n| self.node_readable(&n.name))
    }
    fn node_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<Arc<NodeRecord>> {
        self.inner
            .node_by_address(ip, reads)
            .filter(|n| self.node_readable(&n.name))
    }
    fn service_by_address(&self, ip: IpAddr, reads: &mut ReadSet) -> Option<ArcStr> {
        self.inner
            .service_by_address(ip, reads)
            .filter(|name| self.service_readable(name))
    }
    fn connect_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        let mut instances = self.inner.connect_instances(name, reads);
        if self.authorizer.is_some() {
            instances.retain(|i| {
                self.service_readable(&i.service_name) && self.node_readable(&i.node.name)
            });
        }
        instances
    }
    /// An ingress answer needs `service:read` on the service asked about (Consul's check
    /// for an ingress health query) and on each gateway instance and its node.
    fn ingress_instances(&self, name: &str, reads: &mut ReadSet) -> Vec<ServiceInstance> {
        let mut instances = self.inner.ingress_instances(name, reads);
        if self.authorizer.is_some() {
            if !self.service_readable(name) {
                return Vec::new();
            }
            instances.retain(|i| {
                self.service_readable(&i.service_name) && self.node_readable(&i.node.name)
            });
        }
        instances
    }
    /// Rows from elsewhere were fetched with the same token: the answering side filtered.
    fn elsewhere(&self, lookup: &super::remote::Lookup) -> Option<super::remote::LookupResult> {
        self.inner.elsewhere(lookup)
    }
}
