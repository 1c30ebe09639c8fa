//! Consul's `ServiceSummary` as the UI's endpoints build it: one per service name over
//! some instances, with check counts by state, tags, nodes and external sources, and a
//! sidecar proxy's checks counted for the service it fronts. `ui` (the services list) and
//! `ui_topology` (a service's neighbours) both summarize with it.
//!
//! Invariants: a row the token may not read is left out and the caller is told (`hidden`);
//! a summary is a pure function of its rows.

use super::authz::RowFilter;
use crate::consul::filter::Filter;
use crate::consul::json::JsonWriter;
use crate::consul::render;
use crate::store::catalog::read::{self, CheckServiceNode};
use crate::store::catalog::rows::fold;
use crate::store::catalog::{HealthCheck, RowArc, Status};
use crate::store::Tables;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The service meta key naming where a registration came from (Consul's
/// `structs.MetaExternalSource`).
pub const META_EXTERNAL_SOURCE: &str = "external-source";
/// Consul's service kind of sidecar proxies, whose checks count for the service they front.
const KIND_CONNECT_PROXY: &str = "connect-proxy";

/// Counts a status into Consul's passing / warning / critical buckets; maintenance counts
/// as critical, which is how Consul stores a maintenance check.
pub fn bucket(status: Status) -> usize {
    match status {
        Status::Passing => 0,
        Status::Warning => 1,
        Status::Critical | Status::Maintenance => 2,
    }
}

/// One service's summary while it is being gathered (Consul's `ServiceSummary`).
#[derive(Default)]
pub struct Summary<'a> {
    pub(super) name: String,
    pub(super) kind: &'a str,
    pub(super) datacenter: &'a str,
    pub tags: BTreeSet<&'a str>,
    pub nodes: BTreeSet<&'a str>,
    pub external_sources: Vec<&'a str>,
    pub(super) instances: u64,
    pub connect_native: bool,
    /// Some proxy names this service as its destination.
    pub(super) connected_with_proxy: bool,
    /// Every proxy of this service runs in transparent mode (false without proxies).
    pub transparent_proxy: bool,
    /// Whether a proxy of this service was seen, for [`Summary::transparent_proxy`].
    pub transparent_proxy_seen: bool,
    /// Some gateway links the service and has an instance.
    pub connected_with_gateway: bool,
    /// For an ingress or terminating gateway: how many services it links.
    pub associated_service_count: u64,
    /// For a service an ingress gateway exposes: `host:port` addresses it is reached at.
    pub gateway_addresses: Vec<String>,
    /// Unique checks by (node, check ID), as Consul counts them.
    pub checks: HashMap<(&'a str, &'a str), Status>,
}

impl<'a> Summary<'a> {
    /// A summary of a service known by name only (Consul's for an upstream that only
    /// routing configuration names).
    pub fn named(name: &str, datacenter: &'a str) -> Summary<'a> {
        Summary {
            name: name.to_string(),
            datacenter,
            ..Summary::default()
        }
    }

    pub fn add_checks(
        &mut self,
        node: &'a str,
        checks: impl Iterator<Item = &'a RowArc<HealthCheck>>,
    ) {
        for check in checks {
            self.checks.insert((node, &check.check_id), check.status);
        }
    }

    /// Writes the fields of Consul's `ServiceSummary` into an open object.
    pub fn write_fields(&self, w: &mut JsonWriter) {
        let mut counts = [0u64; 3];
        for status in self.checks.values() {
            counts[bucket(*status)] += 1;
        }
        if !self.kind.is_empty() {
            w.field_str("Kind", self.kind);
        }
        w.field_str("Name", &self.name);
        w.field_str("Datacenter", self.datacenter);
        // Go marshals the nil slices of a summary without tags, nodes (a service known only
        // through its proxies) or sources as null.
        for (field, list) in [("Tags", &self.tags), ("Nodes", &self.nodes)] {
            if list.is_empty() {
                w.field_null(field);
            } else {
                w.field_str_array(field, list.iter().copied());
            }
        }
        if self.external_sources.is_empty() {
            w.field_null("ExternalSources");
        } else {
            w.field_str_array("ExternalSources", self.external_sources.iter().copied());
        }
        w.field_u64("InstanceCount", self.instances);
        w.field_u64("ChecksPassing", counts[0]);
        w.field_u64("ChecksWarning", counts[1]);
        w.field_u64("ChecksCritical", counts[2]);
        w.field_object("GatewayConfig");
        if self.associated_service_count > 0 {
            w.field_u64("AssociatedServiceCount", self.associated_service_count);
        }
        if !self.gateway_addresses.is_empty() {
            w.field_str_array("Addresses", self.gateway_addresses.iter().map(|a| &**a));
        }
        w.end_object();
        w.field_bool("TransparentProxy", self.transparent_proxy);
        w.field_bool("ConnectNative", self.connect_native);
    }

    #[cfg(test)]
    pub fn transparent_proxy_for_tests(&self) -> bool {
        self.transparent_proxy
    }

    /// Consul's `ServiceListingSummary` (`/v1/internal/ui/services`).
    pub fn write(&self, w: &mut JsonWriter) {
        w.begin_object();
        self.write_fields(w);
        w.field_bool("ConnectedWithProxy", self.connected_with_proxy);
        w.field_bool("ConnectedWithGateway", self.connected_with_gateway);
        w.end_object();
    }
}

/// What the UI's summaries need of a proxy registration's `Proxy`, read once per row.
pub struct ProxyFacts {
    /// `DestinationServiceName`.
    pub(super) destination: String,
    /// `Mode` is `transparent`.
    pub(super) transparent: bool,
    /// The `DestinationName` of each upstream that names a service (Consul's mesh
    /// topology leaves prepared-query upstreams out).
    pub(super) upstreams: Vec<String>,
}

/// A field of a Consul JSON object by its name or its snake-case alias, in any letter case,
/// as Consul's decoder finds it.
fn field_ci<'v>(
    object: &'v serde_json::Map<String, serde_json::Value>,
    name: &str,
    alias: &str,
) -> Option<&'v serde_json::Value> {
    object
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name) || k.eq_ignore_ascii_case(alias))
        .map(|(_, v)| v)
}

/// The facts of a sidecar proxy row, or `None` for any other row (or a proxy that names no
/// destination).
pub fn proxy_facts(row: &CheckServiceNode) -> Option<ProxyFacts> {
    if row.service.kind() != KIND_CONNECT_PROXY {
        return None;
    }
    let raw = row.service.extras.as_ref()?.proxy_json.as_deref()?;
    let value: serde_json::Value = serde_json::from_str(raw).ok()?;
    let proxy = value.as_object()?;
    pub fn text(value: Option<&serde_json::Value>) -> &str {
        value.and_then(|v| v.as_str()).unwrap_or("")
    }
    let destination = text(field_ci(
        proxy,
        "DestinationServiceName",
        "destination_service_name",
    ));
    if destination.is_empty() {
        return None;
    }
    let upstreams = field_ci(proxy, "Upstreams", "upstreams")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|u| u.as_object())
        .filter(|u| text(field_ci(u, "DestinationType", "destination_type")) != "prepared_query")
        .map(|u| text(field_ci(u, "DestinationName", "destination_name")).to_string())
        .filter(|name| !name.is_empty())
        .collect();
    Some(ProxyFacts {
        destination: destination.to_string(),
        transparent: text(field_ci(proxy, "Mode", "mode")) == "transparent",
        upstreams,
    })
}

/// Builds the summaries of some instances, as Consul's `summarizeServices` does: one per
/// service name, and a proxy's checks also counted for the service it fronts. Rows the
/// token may not read are left out (and `hidden` says so); `filter` applies to each row.
pub fn summarize<'a>(
    instances: impl Iterator<Item = CheckServiceNode<'a>>,
    filter: Option<&Filter>,
    rows: &RowFilter,
    hidden: &mut bool,
) -> Vec<Summary<'a>> {
    let mut by_name: BTreeMap<String, Summary<'a>> = BTreeMap::new();
    // Proxies found on the way: their facts and rows.
    let mut proxied: Vec<(ProxyFacts, CheckServiceNode<'a>)> = Vec::new();
    for row in instances {
        if !rows.node_service(&row.node.name, &row.service.name) {
            *hidden = true;
            continue;
        }
        if let Some(filter) = filter {
            if !filter.matches(&render::as_value(|w| render::check_service_node(w, &row))) {
                continue;
            }
        }
        let service = row.service;
        let summary = by_name.entry(fold(&service.name).into_owned()).or_default();
        if summary.name.is_empty() {
            summary.name = service.name.to_string();
        }
        summary.kind = service.kind();
        summary.datacenter = &row.node.datacenter;
        summary.instances += 1;
        summary.nodes.insert(&row.node.name);
        summary.tags.extend(service.tags.iter().map(|t| &**t));
        summary.connect_native |= service
            .extras
            .as_ref()
            .is_some_and(|extras| extras.connect_native);
        if let Some(source) = service.meta.get(META_EXTERNAL_SOURCE) {
            if !source.is_empty() && !summary.external_sources.contains(&&**source) {
                summary.external_sources.push(source);
            }
        }
        summary.add_checks(&row.node.name, row.checks());
        if let Some(facts) = proxy_facts(&row) {
            proxied.push((facts, row));
        }
    }
    // A proxy's checks count for the service it fronts, which is "connected with a proxy",
    // and transparent only when every one of its proxies is.
    for (facts, row) in proxied {
        let summary = by_name
            .entry(fold(&facts.destination).into_owned())
            .or_default();
        if summary.name.is_empty() {
            summary.name = facts.destination;
        }
        summary.connected_with_proxy = true;
        summary.transparent_proxy =
            facts.transparent && (summary.transparent_proxy || !summary.transparent_proxy_seen);
        summary.transparent_proxy_seen = true;
        summary.add_checks(&row.node.name, row.checks());
    }
    // A proxy whose destination has no instance of its own still makes a summary, with no
    // instances, as Consul's does.
    let mut summaries: Vec<Summary<'a>> = by_name.into_values().collect();
    summaries.sort_by(|a, b| a.name.cmp(&b.name));
    summaries
}

/// [`summarize`] over every instance of the catalog (`/v1/internal/ui/services`).
pub fn summarize_catalog<'a>(
    tables: &'a Tables,
    filter: Option<&Filter>,
    rows: &RowFilter,
    hidden: &mut bool,
) -> Vec<Summary<'a>> {
    let instances = tables
        .catalog
        .services
        .values()
        .flat_map(read::check_service_nodes_of_group);
    summarize(instances, filter, rows, hidden)
}
