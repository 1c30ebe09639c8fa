//! The gateway-services table (Consul's `gateway-services`): which services each ingress
//! and terminating gateway links, derived from the `ingress-gateway` and
//! `terminating-gateway` config entries and the catalog, kept in step by the apply
//! sequence on every entry or service change.
//!
//! One row per (gateway, service, listener port), Consul's `GatewayService`: for ingress
//! gateways the listener's port and protocol and the service's `Hosts`; for terminating
//! gateways the TLS files and SNI of the linked service and its `ServiceKind` (`service`
//! once it has instances, `destination` when only a `service-defaults` `Destination`
//! names it). A service named `*` in an entry links every eligible service (rows with
//! `FromWildcard`), as Consul does: for an ingress gateway the typical services with a
//! Connect instance (a sidecar proxy or a native instance) whose protocol is the
//! listener's, for a terminating gateway the typical services with a non-native instance
//! and the `Destination` services; `consul` never; a service listed by name at the same
//! port wins over the wildcard. The wildcard's own row is kept (it carries the settings new
//! services inherit) and never shown.
//!
//! Derivation is a pure function of a store version: [`refresh_gateway`] recomputes one
//! gateway's rows (its entry changed), [`refresh_service`] one service's rows in every
//! gateway that lists it or has a wildcard (its instances, its `service-defaults`, or a
//! proxy fronting it changed). Unchanged rows keep their indexes; a changed row gets the
//! entry's index, a new one its creation index too.
//!
//! Watch keys ([`Table::GatewayServices`], folded): [`gateway_key`] for a gateway's rows
//! and [`service_key`] for the rows linking a service. Invariants: every row is indexed in
//! `by_service` under its service, and `by_service` names no gateway without a row for that
//! service; a gateway's and a service's last-change index is present exactly while it has
//! rows; every write announces both keys of every row it touched.

use super::catalog::read::proxy_destination;
use super::catalog::rows::fold;
use super::mesh::config_entry::{self, ConfigKind};
use super::{Change, ChangeKey, Table, Tables};
use arcstr::ArcStr;
use imbl::{OrdMap, OrdSet};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

/// The name that links every eligible service (Consul's `WildcardSpecifier`).
pub const WILDCARD: &str = "*";
/// The service a gateway never links: the servers' own.
const CONSUL_SERVICE: &str = "consul";

/// The two gateway kinds with linked services.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum GatewayKind {
    Ingress,
    Terminating,
}

impl GatewayKind {
    /// The service kind of the gateway's instances, Consul's `GatewayKind` text.
    pub fn as_str(self) -> &'static str {
        match self {
            GatewayKind::Ingress => "ingress-gateway",
            GatewayKind::Terminating => "terminating-gateway",
        }
    }

    fn config_kind(self) -> ConfigKind {
        match self {
            GatewayKind::Ingress => ConfigKind::IngressGateway,
            GatewayKind::Terminating => ConfigKind::TerminatingGateway,
        }
    }
}

/// One linked service of a gateway (Consul's `GatewayService`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayService {
    /// The gateway's name as its entry spells it.
    pub gateway: ArcStr,
    /// The service's name as the entry, or for a wildcard row the catalog, spells it.
    pub service: ArcStr,
    pub gateway_kind: GatewayKind,
    /// The ingress listener's port; 0 for terminating gateways.
    pub port: u16,
    pub protocol: ArcStr,
    pub hosts: Vec<ArcStr>,
    pub ca_file: ArcStr,
    pub cert_file: ArcStr,
    pub key_file: ArcStr,
    pub sni: ArcStr,
    pub from_wildcard: bool,
    /// `service`, `destination`, or empty (unknown yet); terminating gateways only.
    pub service_kind: ArcStr,
    pub create_index: u64,
    pub modify_index: u64,
}

impl GatewayService {
    /// Whether two rows say the same, their indexes aside.
    fn same_as(&self, other: &GatewayService) -> bool {
        GatewayService {
            create_index: other.create_index,
            modify_index: other.modify_index,
            ..self.clone()
        } == *other
    }
}

/// A row's key: folded gateway, folded service (`*` for the wildcard), port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RowKey {
    pub gateway: ArcStr,
    pub service: ArcStr,
    pub port: u16,
}

/// The gateway-services table of one store version.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GatewayTables {
    pub rows: OrdMap<RowKey, Arc<GatewayService>>,
    /// Folded service → the folded gateways with a row for it.
    pub by_service: OrdMap<ArcStr, OrdSet<ArcStr>>,
    /// Folded gateway → the last index any of its rows changed (while it has rows).
    pub gateway_index: OrdMap<ArcStr, u64>,
    /// Folded service → the last index a row linking it changed (while it has rows).
    pub service_index: OrdMap<ArcStr, u64>,
}

/// The watch key of one gateway's rows.
pub fn gateway_key(gateway: &str) -> Arc<str> {
    Arc::from(format!("gateway/{}", fold(gateway)))
}

/// The watch key of the rows linking one service.
pub fn service_key(service: &str) -> Arc<str> {
    Arc::from(format!("service/{}", fold(service)))
}

fn range_start(gateway: &str, service: &str) -> RowKey {
    RowKey {
        gateway: ArcStr::from(gateway),
        service: ArcStr::from(service),
        port: 0,
    }
}

/// Every row of `gateway` (folded) in service then port order, the wildcard's included.
fn rows_of<'t>(
    table: &'t GatewayTables,
    gateway: &str,
) -> impl Iterator<Item = (&'t RowKey, &'t Arc<GatewayService>)> + use<'t> {
    let gateway = ArcStr::from(gateway);
    table
        .rows
        .range(range_start(&gateway, "")..)
        .take_while(move |(key, _)| key.gateway == gateway)
}

/// The rows of `gateway` a reader sees (not the wildcard's own), service then port order.
pub fn gateway_rows<'t>(tables: &'t Tables, gateway: &str) -> Vec<&'t Arc<GatewayService>> {
    let folded = fold(gateway);
    rows_of(&tables.gateways, &folded)
        .filter(|(key, _)| *key.service != *WILDCARD)
        .map(|(_, row)| row)
        .collect()
}

/// The rows linking `service` to gateways of `kind`, gateway then port order.
pub fn linked_rows<'t>(
    tables: &'t Tables,
    service: &str,
    kind: GatewayKind,
) -> Vec<&'t Arc<GatewayService>> {
    let folded = fold(service);
    let table = &tables.gateways;
    let Some(gateways) = table.by_service.get(&*folded) else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    for gateway in gateways {
        rows.extend(
            table
                .rows
                .range(range_start(gateway, &folded)..)
                .take_while(|(key, _)| key.gateway == *gateway && *key.service == *folded)
                .map(|(_, row)| row)
                .filter(|row| row.gateway_kind == kind),
        );
    }
    rows
}

/// The folded names of the gateways of `kind` linking `service`, each once, in name order.
pub fn linked_gateway_names(tables: &Tables, service: &str, kind: GatewayKind) -> Vec<String> {
    let mut names: Vec<String> = linked_rows(tables, service, kind)
        .into_iter()
        .map(|row| fold(&row.gateway).into_owned())
        .collect();
    names.dedup();
    names
}

/// The index a read of one gateway's rows reports: the last change to them, or the
/// table's when it has none (never lower than an index it reported before).
pub fn gateway_index(tables: &Tables, gateway: &str) -> u64 {
    tables
        .gateways
        .gateway_index
        .get(&*fold(gateway))
        .copied()
        .unwrap_or_else(|| tables.table_index(Table::GatewayServices))
}

/// The index a read of the rows linking `service` reports, as [`gateway_index`].
pub fn service_index(tables: &Tables, service: &str) -> u64 {
    tables
        .gateways
        .service_index
        .get(&*fold(service))
        .copied()
        .unwrap_or_else(|| tables.table_index(Table::GatewayServices))
}

/// One service an entry lists, with what its rows carry.
#[derive(Clone, Debug)]
struct Listing {
    kind: GatewayKind,
    service: ArcStr,
    port: u16,
    protocol: ArcStr,
    hosts: Vec<ArcStr>,
    ca_file: ArcStr,
    cert_file: ArcStr,
    key_file: ArcStr,
    sni: ArcStr,
}

fn text(value: &serde_json::Value, key: &str) -> ArcStr {
    ArcStr::from(value[key].as_str().unwrap_or_default())
}

/// The gateway's name as written and its listings, from its entries of both kinds
/// (normally one exists).
fn listings(tables: &Tables, gateway: &str) -> (Option<ArcStr>, Vec<Listing>) {
    let mut name = None;
    let mut out = Vec::new();
    for kind in [GatewayKind::Ingress, GatewayKind::Terminating] {
        let Some(entry) = config_entry::get(tables, kind.config_kind(), gateway) else {
            continue;
        };
        name.get_or_insert_with(|| entry.name.clone());
        // Entries were validated when written; a body that no longer parses lists nothing.
        let Ok(body) = serde_json::from_str::<serde_json::Value>(entry.json().unwrap_or("{}"))
        else {
            continue;
        };
        let empty = Vec::new();
        match kind {
            GatewayKind::Ingress => {
                for listener in body["Listeners"].as_array().unwrap_or(&empty) {
                    let port = listener["Port"].as_u64().unwrap_or(0).min(u16::MAX as u64) as u16;
                    for service in listener["Services"].as_array().unwrap_or(&empty) {
                        out.push(Listing {
                            kind,
                            service: text(service, "Name"),
                            port,
                            protocol: text(listener, "Protocol"),
                            hosts: service["Hosts"]
                                .as_array()
                                .unwrap_or(&empty)
                                .iter()
                                .filter_map(|h| h.as_str())
                                .map(ArcStr::from)
                                .collect(),
                            ca_file: ArcStr::new(),
                            cert_file: ArcStr::new(),
                            key_file: ArcStr::new(),
                            sni: ArcStr::new(),
                        });
                    }
                }
            }
            GatewayKind::Terminating => {
                for service in body["Services"].as_array().unwrap_or(&empty) {
                    out.push(Listing {
                        kind,
                        service: text(service, "Name"),
                        port: 0,
                        protocol: ArcStr::new(),
                        hosts: Vec::new(),
                        ca_file: text(service, "CAFile"),
                        cert_file: text(service, "CertFile"),
                        key_file: text(service, "KeyFile"),
                        sni: text(service, "SNI"),
                    });
                }
            }
        }
    }
    out.retain(|l| !l.service.is_empty());
    (name, out)
}

/// What the catalog says of one service name, for the wildcard's rules.
#[derive(Default)]
struct Presence {
    /// The name as registered (the first instance's spelling).
    name: Option<ArcStr>,
    any: bool,
    typical: bool,
    non_native: bool,
    native: bool,
}

fn presence(tables: &Tables, service: &str) -> Presence {
    let mut found = Presence::default();
    let Some(group) = tables.catalog.group(service) else {
        return found;
    };
    for view in group.instances.values() {
        let instance = &view.service;
        found.name.get_or_insert_with(|| instance.name.clone());
        found.any = true;
        found.typical |= instance.kind().is_empty();
        let native = instance.extras.as_ref().is_some_and(|e| e.connect_native);
        found.native |= native;
        found.non_native |= !native;
    }
    found
}

/// Whether a `service-defaults` entry gives `service` a `Destination` (a service outside
/// the catalog that terminating gateways reach).
fn has_destination(tables: &Tables, service: &str) -> bool {
    config_entry::get(tables, ConfigKind::ServiceDefaults, service)
        .and_then(|entry| entry.json())
        .and_then(|json| serde_json::from_str::<serde_json::Value>(json).ok())
        .is_some_and(|body| body.get("Destination").is_some_and(|d| !d.is_null()))
}

/// The folded names some connect-proxy fronts: one scan of the catalog (proxies are few
/// next to plain services; only gateways with an ingress wildcard need it).
fn proxied_services(tables: &Tables) -> HashSet<String> {
    let mut out = HashSet::new();
    for group in tables.catalog.services.values() {
        for view in group.instances.values() {
            if let Some(destination) = proxy_destination(&view.service) {
                out.insert(fold(&destination).into_owned());
            }
        }
    }
    out
}

/// The `ServiceKind` of a terminating gateway's row for `service`.
fn terminating_service_kind(tables: &Tables, service: &str, present: &Presence) -> &'static str {
    if present.any {
        "service"
    } else if has_destination(tables, service) {
        "destination"
    } else {
        ""
    }
}

fn row_of(listing: &Listing, gateway: &ArcStr, service: ArcStr) -> GatewayService {
    GatewayService {
        gateway: gateway.clone(),
        service,
        gateway_kind: listing.kind,
        port: listing.port,
        protocol: listing.protocol.clone(),
        hosts: listing.hosts.clone(),
        ca_file: listing.ca_file.clone(),
        cert_file: listing.cert_file.clone(),
        key_file: listing.key_file.clone(),
        sni: listing.sni.clone(),
        from_wildcard: false,
        service_kind: ArcStr::new(),
        create_index: 0,
        modify_index: 0,
    }
}

/// The rows `gateway` (folded) should have, all of them or only those of `only` (a folded
/// service name).
fn desired_rows(tables: &Tables, gateway: &str, only: Option<&str>) -> Vec<GatewayService> {
    let (Some(name), listed) = listings(tables, gateway) else {
        return Vec::new();
    };
    let mut out: Vec<GatewayService> = Vec::new();
    let mut explicit: HashSet<(String, u16)> = HashSet::new();
    for listing in listed.iter().filter(|l| *l.service != *WILDCARD) {
        let folded = fold(&listing.service).into_owned();
        if only.is_some_and(|s| s != folded) || !explicit.insert((folded.clone(), listing.port)) {
            continue;
        }
        let mut row = row_of(listing, &name, listing.service.clone());
        if listing.kind == GatewayKind::Terminating {
            let present = presence(tables, &folded);
            row.service_kind = ArcStr::from(terminating_service_kind(tables, &folded, &present));
        }
        out.push(row);
    }
    let wildcards: Vec<&Listing> = listed.iter().filter(|l| *l.service == *WILDCARD).collect();
    if wildcards.is_empty() {
        return out;
    }
    let candidates: BTreeSet<String> = match only {
        Some(service) => std::iter::once(service.to_string()).collect(),
        None => {
            let mut all: BTreeSet<String> = tables
                .catalog
                .services
                .keys()
                .map(|k| k.to_string())
                .collect();
            if wildcards.iter().any(|l| l.kind == GatewayKind::Terminating) {
                all.extend(
                    config_entry::list(tables, ConfigKind::ServiceDefaults)
                        .filter(|e| has_destination(tables, &e.name))
                        .map(|e| fold(&e.name).into_owned()),
                );
            }
            all
        }
    };
    let proxied = wildcards
        .iter()
        .any(|l| l.kind == GatewayKind::Ingress)
        .then(|| proxied_services(tables));
    for listing in &wildcards {
        if only.is_none() {
            out.push(row_of(listing, &name, ArcStr::from(WILDCARD)));
        }
        for service in &candidates {
            if service == CONSUL_SERVICE || explicit.contains(&(service.clone(), listing.port)) {
                continue;
            }
            let present = presence(tables, service);
            let kind = match listing.kind {
                GatewayKind::Ingress => {
                    let connect = present.native
                        || proxied
                            .as_ref()
                            .is_some_and(|p| p.contains(service.as_str()));
                    let protocol = config_entry::service_protocol(tables, service);
                    if !(present.typical && connect && protocol == &*listing.protocol) {
                        continue;
                    }
                    ""
                }
                GatewayKind::Terminating => {
                    if present.typical && present.non_native {
                        "service"
                    } else if !present.any && has_destination(tables, service) {
                        "destination"
                    } else {
                        continue;
                    }
                }
            };
            let display = present.name.clone().unwrap_or_else(|| {
                config_entry::get(tables, ConfigKind::ServiceDefaults, service)
                    .map(|e| e.name.clone())
                    .unwrap_or_else(|| ArcStr::from(service.as_str()))
            });
            let mut row = row_of(listing, &name, display);
            row.from_wildcard = true;
            row.service_kind = ArcStr::from(kind);
            out.push(row);
        }
    }
    out
}

/// Replaces the rows of `gateway` (folded) in scope — all of them, or those of one folded
/// service — with `desired`, announcing what changed.
fn replace(
    tables: &mut Tables,
    index: u64,
    gateway: &str,
    only: Option<&str>,
    desired: Vec<GatewayService>,
    changes: &mut Vec<Change>,
) {
    let table = &tables.gateways;
    let current: Vec<(RowKey, Arc<GatewayService>)> = rows_of(table, gateway)
        .filter(|(key, _)| only.is_none_or(|s| *key.service == *s))
        .map(|(key, row)| (key.clone(), row.clone()))
        .collect();
    let mut next = table.clone();
    let mut touched: BTreeSet<ArcStr> = BTreeSet::new();
    let mut wanted: HashSet<RowKey> = HashSet::new();
    for row in desired {
        let key = RowKey {
            gateway: ArcStr::from(gateway),
            service: ArcStr::from(&*fold(&row.service)),
            port: row.port,
        };
        debug_assert!(only.is_none_or(|s| *key.service == *s), "a row in scope");
        let previous = current.iter().find(|(k, _)| *k == key).map(|(_, r)| r);
        wanted.insert(key.clone());
        if previous.is_some_and(|p| p.same_as(&row)) {
            continue;
        }
        let stored = GatewayService {
            create_index: previous.map_or(index, |p| p.create_index),
            modify_index: index,
            ..row
        };
        next.rows.insert(key.clone(), Arc::new(stored));
        next.by_service
            .entry(key.service.clone())
            .or_default()
            .insert(key.gateway.clone());
        touched.insert(key.service.clone());
    }
    for (key, _) in &current {
        if wanted.contains(key) {
            continue;
        }
        next.rows.remove(key);
        let still_linked = next
            .rows
            .range(range_start(&key.gateway, &key.service)..)
            .next()
            .is_some_and(|(k, _)| k.gateway == key.gateway && k.service == key.service);
        if !still_linked {
            if let Some(gateways) = next.by_service.get_mut(&key.service) {
                gateways.remove(&key.gateway);
                if gateways.is_empty() {
                    next.by_service.remove(&key.service);
                }
            }
        }
        touched.insert(key.service.clone());
    }
    if touched.is_empty() {
        return;
    }
    let gateway_arc = ArcStr::from(gateway);
    if rows_of(&next, gateway).next().is_some() {
        next.gateway_index.insert(gateway_arc, index);
    } else {
        next.gateway_index.remove(&gateway_arc);
    }
    changes.push(Change::key(Table::GatewayServices, &gateway_key(gateway)));
    for service in &touched {
        if next.by_service.contains_key(service) {
            next.service_index.insert(service.clone(), index);
        } else {
            next.service_index.remove(service);
        }
        changes.push(Change::key(Table::GatewayServices, &service_key(service)));
    }
    tables.gateways = next;
    tables.bump_table(Table::GatewayServices, index);
}

/// Recomputes every row of `gateway` (its entry was written or deleted).
pub(crate) fn refresh_gateway(
    tables: &mut Tables,
    index: u64,
    gateway: &str,
    changes: &mut Vec<Change>,
) {
    let folded = fold(gateway).into_owned();
    let desired = desired_rows(tables, &folded, None);
    replace(tables, index, &folded, None, desired, changes);
}

/// Recomputes the rows of `service` in every gateway that lists it or has a wildcard.
pub(crate) fn refresh_service(
    tables: &mut Tables,
    index: u64,
    service: &str,
    changes: &mut Vec<Change>,
) {
    let folded = fold(service).into_owned();
    if folded == WILDCARD {
        return;
    }
    // A gateway that lists the service by name has a row for it whatever the catalog
    // holds, and one with a wildcard keeps the wildcard's own row: between them, these
    // are every gateway whose rows for the service may change.
    let table = &tables.gateways;
    let mut gateways: BTreeSet<ArcStr> = BTreeSet::new();
    for key in [folded.as_str(), WILDCARD] {
        if let Some(set) = table.by_service.get(key) {
            gateways.extend(set.iter().cloned());
        }
    }
    for gateway in gateways {
        let desired = desired_rows(tables, &gateway, Some(&folded));
        replace(tables, index, &gateway, Some(&folded), desired, changes);
    }
}

/// Whether some gateway links services by wildcard: only then do catalog writes that add
/// or remove a proxy need to look at the services the proxies front.
pub fn has_wildcard(tables: &Tables) -> bool {
    tables.gateways.by_service.contains_key(WILDCARD)
}

/// The step after a config entry write: gateways whose entry changed are recomputed, and
/// the services whose `service-defaults` changed (protocol, destination); a change to
/// `proxy-defaults` (the default protocol) recomputes every gateway with a wildcard.
pub(crate) fn after_config_entries(tables: &mut Tables, index: u64, changes: &mut Vec<Change>) {
    let mut gateways: BTreeSet<String> = BTreeSet::new();
    let mut services: BTreeSet<String> = BTreeSet::new();
    for change in changes.iter().filter(|c| c.table == Table::ConfigEntries) {
        let ChangeKey::Key(key) = &change.key else {
            continue;
        };
        let Some((kind, name)) = key.split_once('/') else {
            continue;
        };
        match ConfigKind::parse(kind) {
            Some(ConfigKind::IngressGateway | ConfigKind::TerminatingGateway) => {
                gateways.insert(name.to_string());
            }
            Some(ConfigKind::ServiceDefaults) => {
                services.insert(name.to_string());
            }
            Some(ConfigKind::ProxyDefaults) => {
                if let Some(wildcard) = tables.gateways.by_service.get(WILDCARD) {
                    gateways.extend(wildcard.iter().map(|g| g.to_string()));
                }
            }
            _ => {}
        }
    }
    for gateway in &gateways {
        refresh_gateway(tables, index, gateway, changes);
    }
    for service in &services {
        refresh_service(tables, index, service, changes);
    }
}

/// The step after a catalog write: the services whose instances changed (their
/// per-service index moved) are recomputed, and — when some gateway has a wildcard — the
/// services fronted by proxies that were added or removed, found in the groups before
/// (`services_before`) and after the write.
pub(crate) fn after_catalog(
    tables: &mut Tables,
    index: u64,
    services_before: Option<&OrdMap<ArcStr, super::catalog::ServiceGroup>>,
    first_change: usize,
    changes: &mut Vec<Change>,
) {
    // Every gateway that links anything has a row (a listed service's, or its wildcard's):
    // without rows no catalog write changes the table, and the write path pays nothing.
    if tables.gateways.rows.is_empty() {
        return;
    }
    let mut names: BTreeSet<String> = BTreeSet::new();
    for change in &changes[first_change..] {
        if change.table != Table::ServiceIndex {
            continue;
        }
        if let ChangeKey::Key(name) = &change.key {
            names.insert(name.to_string());
        }
    }
    if names.is_empty() {
        return;
    }
    if let Some(before) = services_before {
        let mut fronted = BTreeSet::new();
        for name in &names {
            let groups = [
                before.get(name.as_str()),
                tables.catalog.services.get(name.as_str()),
            ];
            for group in groups.into_iter().flatten() {
                for view in group.instances.values() {
                    if let Some(destination) = proxy_destination(&view.service) {
                        fronted.insert(fold(&destination).into_owned());
                    }
                }
            }
        }
        names.extend(fronted);
    }
    for name in &names {
        refresh_service(tables, index, name, changes);
    }
}

#[cfg(test)]
mod tests;
