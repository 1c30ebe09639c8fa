//! Catalog writes: registration and deregistration of nodes, services and checks, applied
//! with Consul's state-store semantics.
//!
//! A write that changes nothing (the same node, service or check registered again, as
//! anti-entropy does constantly) touches no row, moves no index and wakes nobody. Every
//! operation is validated completely before the first row changes, so it applies entirely
//! or not at all; refusals carry Consul's error text.

use super::rows::{
    arc_str, check_type_code, fold, fold_arc, CheckDefinition, CheckExtras, CheckList, HealthCheck,
    InstanceKey, InstanceKeyRef, Node, NodeCoordinate, RowArc, ServiceAddress, ServiceExtras,
    ServiceInstance, Status, StrMap, Tags, Weights, OTHER_CHECK_TYPE,
};
use super::PackedMap;
use super::{CatalogTables, InstanceView, NodeEntry, NodeHead, ServiceGroup, SERF_CHECK_ID};
use crate::store::{CatalogResult, Change, ChangeKey, Table, Tables};
use arcstr::ArcStr;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::Arc;

/// Most operations one `Batch` may carry; anti-entropy splits larger syncs.
pub const BATCH_OPS_MAX: usize = 4096;

/// The text of a catalog write's fields: `String` where the write is built (the HTTP layer,
/// the agent, transactions), or `&str` borrowed from the Raft entry's bytes where every
/// server decodes and applies it ([`super::super::Command::decode_borrowed`]): the apply
/// interns what it keeps as [`ArcStr`]s anyway, so decoding owned strings first only made
/// allocations for it to copy and free. Both forms encode to the same bytes.
pub trait Text: std::ops::Deref<Target = str> + std::fmt::Debug + std::fmt::Display {}

impl<T: std::ops::Deref<Target = str> + std::fmt::Debug + std::fmt::Display> Text for T {}

/// A catalog write, as carried in a Raft entry.
pub type CatalogOp = CatalogOpOf<String>;

/// [`CatalogOp`] over any [`Text`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CatalogOpOf<S> {
    /// `/v1/catalog/register` (and anti-entropy's sync of one service or check).
    Register(Box<RegistrationOf<S>>),
    /// `/v1/catalog/deregister`: the node when both IDs are empty, else the service and/or
    /// the check.
    Deregister { node: S, service_id: S, check_id: S },
    /// Several independent operations in one entry (anti-entropy). Each applies or fails on
    /// its own; the result reports the first failure.
    Batch(Vec<CatalogOpOf<S>>),
    /// `/v1/coordinate/update`: node coordinates. An update for a node the catalog does not
    /// hold is dropped, as Consul's `CoordinateBatchUpdate` drops it (deleting a node is what
    /// deletes its coordinate, so one must not outlive its node).
    Coordinates(Vec<CoordinateUpdate>),
}

/// One node's coordinate, as `/v1/coordinate/update` carries it (validated by the HTTP
/// layer: finite numbers, this agent's dimensionality).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CoordinateUpdate {
    pub node: String,
    pub segment: String,
    pub vec: Vec<f64>,
    pub error: f64,
    pub adjustment: f64,
    pub height: f64,
}

/// Most coordinates one `Coordinates` operation may carry.
pub const COORDINATE_UPDATES_MAX: usize = 1024;

/// Consul's `RegisterRequest`, already defaulted and validated for shape by the HTTP layer.
pub type Registration = RegistrationOf<String>;

/// [`Registration`] over any [`Text`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RegistrationOf<S> {
    pub id: S,
    pub node: S,
    pub address: S,
    pub datacenter: S,
    pub tagged_addresses: Vec<(S, S)>,
    pub node_meta: Vec<(S, S)>,
    pub service: Option<ServiceRegistrationOf<S>>,
    pub checks: Vec<CheckRegistrationOf<S>>,
    pub skip_node_update: bool,
    /// The node's metadata and tagged addresses belong to its own agent (its anti-entropy
    /// writes them): when the node exists as this applies, keep them, and write the row only
    /// if its ID, name, address or datacenter differ. The leader's member reconcile registers
    /// this way, so a registration it computed before the agent's own write landed can never
    /// erase that write. Appended with a default, so entries written before it decode.
    #[serde(default)]
    pub keep_node_meta: bool,
}

/// Consul's `NodeService` as registered.
pub type ServiceRegistration = ServiceRegistrationOf<String>;

/// [`ServiceRegistration`] over any [`Text`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceRegistrationOf<S> {
    pub kind: S,
    pub id: S,
    pub name: S,
    pub tags: Vec<S>,
    pub address: S,
    /// `(tag, address, port)`.
    pub tagged_addresses: Vec<(S, S, i32)>,
    pub meta: Vec<(S, S)>,
    pub port: i32,
    pub weights: Option<Weights>,
    pub enable_tag_override: bool,
    pub socket_path: S,
    pub proxy_json: Option<S>,
    pub connect_native: bool,
}

/// Consul's `HealthCheck` as registered.
pub type CheckRegistration = CheckRegistrationOf<String>;

/// [`CheckRegistration`] over any [`Text`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckRegistrationOf<S> {
    pub node: S,
    pub check_id: S,
    pub name: S,
    /// Empty means critical, as in Consul.
    pub status: S,
    pub notes: S,
    pub output: S,
    pub service_id: S,
    pub kind: S,
    pub interval: S,
    pub timeout: S,
    pub exposed_port: i32,
    pub definition: Option<CheckDefinition>,
}

/// Reuses `existing` when it holds the same text.
fn reuse(existing: Option<&ArcStr>, text: &str) -> ArcStr {
    match existing {
        Some(arc) if **arc == *text => arc.clone(),
        _ => arc_str(text),
    }
}

fn string_pairs<S: Text>(pairs: &[(S, S)]) -> StrMap {
    StrMap::from_pairs(
        pairs
            .iter()
            .map(|(k, v)| (arc_str(k), arc_str(v)))
            .collect(),
    )
}

/// Consul accepts weights only within these bounds and silently uses the default otherwise.
fn valid_weights(weights: Option<Weights>) -> Weights {
    match weights {
        Some(w) if w.passing >= 1 && w.passing <= 65535 && w.warning <= 65535 => w,
        _ => Weights::default(),
    }
}

/// One write transaction over the catalog: collects the changes (deduplicated) and which
/// tables' indexes move.
struct Tx<'a> {
    cat: &'a mut CatalogTables,
    index: u64,
    /// The apply's change list; this write's changes are those from `first_change` on.
    changes: &'a mut Vec<Change>,
    first_change: usize,
    /// Every change of this write so far, once there are more than [`CHANGES_SCANNED_MAX`]
    /// (a batch).
    seen: Option<HashSet<Change, ahash::RandomState>>,
    bumped: [bool; 4],
}

/// Up to this many changes, a new change is deduplicated by scanning the list (a single
/// registration makes four or five); beyond, by a hash set of them all.
const CHANGES_SCANNED_MAX: usize = 16;

const BUMP_NODES: usize = 0;
const BUMP_SERVICES: usize = 1;
const BUMP_CHECKS: usize = 2;
const BUMP_COORDINATES: usize = 3;

impl<'a> Tx<'a> {
    fn touch(&mut self, table: Table, key: &ArcStr) {
        // Change keys are the store-wide `Arc<str>`; a write touches only a handful, often
        // the same key in several tables (a service name in `Services` and `ServiceIndex`,
        // a node in `Checks` and `NodeServices`), which then share one allocation.
        let own = &self.changes[self.first_change..];
        if own.len() <= CHANGES_SCANNED_MAX {
            let mut same_text = None;
            for change in own {
                if let ChangeKey::Key(text) = &change.key {
                    if **text == **key {
                        if change.table == table {
                            return;
                        }
                        same_text = Some(text);
                    }
                }
            }
            let text = same_text.map_or_else(|| Arc::from(&**key), Arc::clone);
            self.changes.push(Change {
                table,
                key: ChangeKey::Key(text),
            });
            return;
        }
        let seen = self
            .seen
            .get_or_insert_with(|| own.iter().cloned().collect());
        let change = Change::key(table, &Arc::from(&**key));
        if seen.insert(change.clone()) {
            self.changes.push(change);
        }
    }

    /// Moves the per-service index of `name` (folded) and wakes its watchers.
    fn bump_service(&mut self, folded_name: &ArcStr) {
        if let Some(group) = self.cat.services.get_mut(&**folded_name) {
            group.index = self.index;
        }
        self.touch(Table::ServiceIndex, folded_name);
    }

    /// Node rows and node-level checks appear in every health answer of every service on
    /// the node, so their changes move all those services' indexes (as Consul's
    /// `updateAllServiceIndexesOfNode`).
    fn bump_services_of_node(&mut self, node_key: &str) {
        let names: Vec<ArcStr> = match self.cat.nodes.get(node_key) {
            Some(entry) => entry.services.values().map(|s| fold_arc(&s.name)).collect(),
            None => return,
        };
        for name in &names {
            self.bump_service(name);
        }
    }

    fn register<S: Text>(&mut self, reg: &RegistrationOf<S>) -> Result<(), String> {
        let plan = self.plan_registration(reg)?;
        let node_key = plan.node_key;
        if let Some(old) = &plan.rename_from {
            self.delete_node(old);
        }
        if plan.write_node {
            self.upsert_node(&node_key, reg);
        }
        let mut checks_written = false;
        if let Some(service) = &reg.service {
            checks_written = self.upsert_service(&node_key, service, &reg.checks);
        }
        if !checks_written {
            for check in &reg.checks {
                self.upsert_check(&node_key, check);
            }
        }
        Ok(())
    }

    /// Validates a registration against the current state without changing anything.
    fn plan_registration<S: Text>(&self, reg: &RegistrationOf<S>) -> Result<Plan, String> {
        if reg.node.is_empty() {
            return Err("Must provide node".to_string());
        }
        if reg.address.is_empty() && !reg.skip_node_update {
            return Err("Must provide address if SkipNodeUpdate is not set".to_string());
        }
        if !reg.id.is_empty() && uuid::Uuid::parse_str(&reg.id).is_err() {
            return Err(format!(
                "Bad node ID: uuid string is wrong length or has invalid format: {:?}",
                reg.id
            ));
        }
        let node_key = fold(&reg.node);
        let (stored_key, existing) = match self.cat.nodes.get_key_value(&*node_key) {
            Some((key, entry)) => (Some(key), Some(entry)),
            None => (None, None),
        };
        let write_node = match existing {
            None => true,
            Some(entry) => !reg.skip_node_update && node_differs(entry.node(), reg),
        };
        let mut rename_from = None;
        if write_node && !reg.id.is_empty() {
            match self.cat.node_ids.get(&*reg.id) {
                Some(owner) if **owner != *node_key => {
                    self.check_name_clash(reg, false).map_err(|e| {
                        format!(
                            "failed inserting node: Error while renaming Node ID: {:?} ({}): {e}",
                            reg.id, reg.address
                        )
                    })?;
                    rename_from = Some(owner.clone());
                }
                Some(_) => {}
                None => {
                    self.check_name_clash(reg, true).map_err(|e| {
                        format!(
                            "failed inserting node: Error while renaming Node ID: {:?}: {e}",
                            reg.id
                        )
                    })?;
                }
            }
        }
        if let Some(service) = &reg.service {
            if service.name.is_empty() {
                return Err(if service.id.is_empty() {
                    "Must provide service name".to_string()
                } else {
                    "Must provide service name with ID".to_string()
                });
            }
        }
        let request_service = reg.service.as_ref().map(|s| {
            let id = if s.id.is_empty() { &s.name } else { &s.id };
            fold(id)
        });
        for check in &reg.checks {
            if check.check_id.is_empty() {
                return Err("Missing check ID".to_string());
            }
            if !check.node.is_empty() && *fold(&check.node) != *node_key {
                return Err(format!(
                    "check node {:?} does not match node {:?}",
                    check.node, reg.node
                ));
            }
            if !check.status.is_empty() && Status::parse(&check.status).is_none() {
                return Err(format!("Invalid check status: {:?}", check.status));
            }
            if !check.service_id.is_empty() {
                let wanted = fold(&check.service_id);
                let in_request = request_service.as_deref() == Some(&wanted);
                let registered = existing.is_some_and(|e| e.services.contains_key(&*wanted));
                if !in_request && !registered {
                    return Err(format!(
                        "failed inserting check on node {:?}: Missing service registration",
                        reg.node
                    ));
                }
            }
        }
        Ok(Plan {
            write_node,
            rename_from,
            node_key: match stored_key {
                Some(key) => key.clone(),
                None => ArcStr::from(&*node_key),
            },
        })
    }

    /// Consul lets a node ID take over a name only from a node that is not healthy (no
    /// passing serf check) or, for unknown IDs, from a node registered without an ID.
    fn check_name_clash<S: Text>(
        &self,
        reg: &RegistrationOf<S>,
        allow_clash_without_id: bool,
    ) -> Result<(), String> {
        let Some(entry) = self.cat.nodes.get(&*fold(&reg.node)) else {
            return Ok(());
        };
        let node = entry.node();
        if *node.id == *reg.id {
            return Ok(());
        }
        let healthy = entry
            .checks
            .get(&*fold(SERF_CHECK_ID))
            .is_some_and(|c| c.service_id.is_empty() && c.status != Status::Critical);
        if !(node.id.is_empty() && allow_clash_without_id) && healthy {
            return Err(format!(
                "Node name {} is reserved by node {} with name {} ({})",
                reg.node, node.id, node.name, node.address
            ));
        }
        Ok(())
    }

    fn upsert_node<S: Text>(&mut self, node_key: &ArcStr, reg: &RegistrationOf<S>) {
        let index = self.index;
        let previous = self.cat.nodes.get(&**node_key).map(|e| e.node().clone());
        let kept = previous.as_ref().filter(|_| reg.keep_node_meta);
        let node = Arc::new(Node {
            id: reuse(previous.as_ref().map(|n| &n.id), &reg.id),
            name: reuse(previous.as_ref().map(|n| &n.name), &reg.node),
            address: reuse(previous.as_ref().map(|n| &n.address), &reg.address),
            datacenter: reuse(previous.as_ref().map(|n| &n.datacenter), &reg.datacenter),
            tagged_addresses: match kept {
                Some(old) => old.tagged_addresses.clone(),
                None => string_pairs(&reg.tagged_addresses),
            },
            meta: match kept {
                Some(old) => old.meta.clone(),
                None => string_pairs(&reg.node_meta),
            },
            create_index: previous.as_ref().map_or(index, |n| n.create_index),
            modify_index: index,
        });
        if let Some(old) = &previous {
            if old.same_as(&node) {
                return;
            }
            if !old.id.is_empty() && old.id != node.id {
                self.cat.node_ids.remove(&*old.id);
            }
        }
        if !node.id.is_empty() {
            self.cat.node_ids.insert(node.id.clone(), node_key.clone());
        }
        let renamed = previous.as_ref().is_some_and(|old| old.name != node.name);
        let mut checks_relabelled = false;
        match self.cat.nodes.get_mut(&**node_key) {
            Some(entry) => {
                // The node-check list is rebuilt by the view refresh below.
                entry.head = Arc::new(NodeHead::new(node.clone(), entry.head.checks.clone()));
                if renamed {
                    // The case of the name changed: rows that carry the name follow, and
                    // every view is rebuilt from them.
                    relabel_node_rows(entry, &node.name);
                    checks_relabelled = !entry.checks.is_empty();
                    let lists: Vec<(ArcStr, CheckList)> = entry
                        .services
                        .keys()
                        .map(|key| {
                            let list = checks_of_service(&entry.checks, key).cloned().collect();
                            (key.clone(), CheckList::new(list))
                        })
                        .collect();
                    self.refresh_views(node_key, None, None);
                    for (key, list) in lists {
                        self.refresh_views(node_key, Some(&key), Some(list));
                    }
                } else {
                    self.refresh_views(node_key, None, None);
                }
            }
            None => {
                self.cat.nodes.insert(
                    node_key.clone(),
                    NodeEntry {
                        head: Arc::new(NodeHead::new(node, CheckList::empty())),
                        services: PackedMap::new(),
                        checks: PackedMap::new(),
                    },
                );
            }
        }
        self.bumped[BUMP_NODES] = true;
        self.touch(Table::Nodes, node_key);
        if checks_relabelled {
            // Check rows carry the node's name.
            self.bumped[BUMP_CHECKS] = true;
            self.touch(Table::Checks, node_key);
        }
        if previous.is_some() {
            self.bump_services_of_node(node_key);
            self.touch(Table::NodeServices, node_key);
        }
    }

    /// The current checks list of one instance's view (empty when it has no view yet).
    fn view_checks(&self, name_key: &str, node_key: &str, service_key: &str) -> CheckList {
        self.cat
            .services
            .get(name_key)
            .and_then(|g| {
                g.instances.get(&InstanceKeyRef {
                    node: node_key,
                    service_id: service_key,
                })
            })
            .map_or_else(CheckList::empty, |v| v.check_list().clone())
    }

    /// Rebuilds the [`InstanceView`]s of a node's instances: all of them when `only` is
    /// `None` (after the node row or its node checks changed; the shared node-check list is
    /// recomputed), else the one instance. `checks` replaces that instance's own list; by
    /// default each view keeps the list it had.
    fn refresh_views(
        &mut self,
        node_key: &ArcStr,
        only: Option<&ArcStr>,
        checks: Option<CheckList>,
    ) {
        let Some(entry) = self.cat.nodes.get_mut(&**node_key) else {
            return;
        };
        if only.is_none() {
            let node_checks: Vec<RowArc<HealthCheck>> = entry
                .checks
                .values()
                .filter(|c| c.service_id.is_empty())
                .cloned()
                .collect();
            entry.head = Arc::new(NodeHead::new(
                entry.head.node.clone(),
                CheckList::new(node_checks),
            ));
        }
        let head = entry.head.clone();
        match only {
            // One instance (a service write): no list of targets to allocate.
            Some(key) => {
                let Some((service_key, service)) = entry
                    .services
                    .get_key_value(&**key)
                    .map(|(k, v)| (k.clone(), v.clone()))
                else {
                    return;
                };
                self.put_view(node_key, &head, service_key, service, checks);
            }
            None => {
                let targets: Vec<(ArcStr, RowArc<ServiceInstance>)> = entry
                    .services
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                for (service_key, service) in targets {
                    self.put_view(node_key, &head, service_key, service, checks.clone());
                }
            }
        }
    }

    /// Stores the view of instance `service` (key `service_key` on node `node_key`) with the
    /// node part `head` and its own checks `checks`, or the checks its view had (`None`).
    fn put_view(
        &mut self,
        node_key: &ArcStr,
        head: &Arc<NodeHead>,
        service_key: ArcStr,
        service: RowArc<ServiceInstance>,
        checks: Option<CheckList>,
    ) {
        let name_key = fold_arc(&service.name);
        let own = match checks {
            Some(list) => list,
            None => self.view_checks(&name_key, node_key, &service_key),
        };
        let view = InstanceView::new(service, head.clone(), own);
        let key = InstanceKey {
            node: node_key.clone(),
            service_id: service_key,
        };
        match self.cat.services.get_mut(&*name_key) {
            Some(group) => {
                group.instances.insert(key, view);
            }
            None => debug_assert!(false, "an instance's group exists before its view"),
        }
    }

    /// Replaces, inserts or (with `None`) removes check `check_key` in one instance's view.
    /// The view is rebuilt in place (a new view: fresh renderings), its instance and node
    /// part as they are — both current, as every write that changes them refreshes its views.
    fn edit_view_checks(
        &mut self,
        node_key: &ArcStr,
        service_key: &ArcStr,
        check_key: &str,
        check: Option<RowArc<HealthCheck>>,
    ) {
        let Some(name_key) = self
            .cat
            .nodes
            .get(&**node_key)
            .and_then(|e| e.services.get(&**service_key))
            .map(|s| fold_arc(&s.name))
        else {
            return;
        };
        let Some(view) = self.cat.services.get_mut(&*name_key).and_then(|g| {
            g.instances.get_mut(&InstanceKeyRef {
                node: node_key,
                service_id: service_key,
            })
        }) else {
            debug_assert!(false, "a registered instance has its view");
            return;
        };
        let mut list: Vec<RowArc<HealthCheck>> = Vec::with_capacity(view.checks.len() + 1);
        list.extend(
            view.checks
                .iter()
                .filter(|c| *fold(&c.check_id) != *check_key)
                .cloned(),
        );
        if let Some(check) = check {
            let at = list.partition_point(|c| *fold(&c.check_id) < *check_key);
            list.insert(at, check);
        }
        *view = InstanceView::new(
            view.service.clone(),
            view.head.clone(),
            CheckList::new(list),
        );
    }

    /// Writes a registration's service. When the instance changes and every one of the
    /// registration's `checks` belongs to it and is not held by another owner (the usual
    /// registration: a service with its own checks), the checks are written here too, so
    /// the instance's view is built once with them rather than once for the service and
    /// again for each check; the rows, indexes and changes are those the separate writes
    /// make. Returns whether the checks were written.
    fn upsert_service<S: Text>(
        &mut self,
        node_key: &ArcStr,
        service: &ServiceRegistrationOf<S>,
        checks: &[CheckRegistrationOf<S>],
    ) -> bool {
        let index = self.index;
        let id_text = if service.id.is_empty() {
            &service.name
        } else {
            &service.id
        };
        let Some(entry) = self.cat.nodes.get(&**node_key) else {
            debug_assert!(false, "the node is written before its services");
            return false;
        };
        let node_name = entry.node().name.clone();
        let folded_id = fold(id_text);
        let (found_key, existing) = match entry.services.get_key_value(&*folded_id) {
            Some((key, row)) => (Some(key.clone()), Some(row.clone())),
            None => (None, None),
        };
        let checks_here = !checks.is_empty()
            && checks.iter().all(|check| {
                !check.service_id.is_empty()
                    && *fold(&check.service_id) == *folded_id
                    && entry
                        .checks
                        .get(&*fold(&check.check_id))
                        .is_none_or(|old| *fold(&old.service_id) == *folded_id)
            });
        // Another instance of the service, and its checks, to share text with.
        let (name_key, group_sample): (ArcStr, _) =
            match self.cat.services.get_key_value(&*fold(&service.name)) {
                Some((key, group)) => (
                    key.clone(),
                    group
                        .instances
                        .first_value()
                        .map(|v| (v.service.clone(), v.check_list().clone())),
                ),
                None => (ArcStr::from(&*fold(&service.name)), None),
            };
        let instance = RowArc::new(instance_row(
            service,
            node_name.clone(),
            existing.as_deref(),
            group_sample.as_ref().map(|(sample, _)| &**sample),
            index,
        ));
        // A new key shares the row's ID text when it is already lowercase.
        let service_key = found_key.unwrap_or_else(|| fold_arc(&instance.id));
        // The instance's checks, from the view it had (possibly under its old name); they
        // carry a copy of their service's name and tags.
        let previous_checks = match &existing {
            Some(old) => {
                if old.same_as(&instance) {
                    return false;
                }
                let old_name_key = fold_arc(&old.name);
                let checks = self.view_checks(&old_name_key, node_key, &service_key);
                if old_name_key != name_key {
                    self.remove_from_group(&old_name_key, node_key, &service_key);
                    self.touch(Table::Services, &old_name_key);
                }
                checks
            }
            None => CheckList::empty(),
        };
        let entry = self
            .cat
            .nodes
            .get_mut(&**node_key)
            .expect("node checked above");
        entry.services.insert(service_key.clone(), instance.clone());
        let (mut own, checks_rewritten) =
            carry_service_text(entry, &previous_checks, &instance, checks.len());
        let checks_written = checks_here
            && write_instance_checks(
                entry,
                &mut own,
                checks,
                &instance,
                &node_name,
                group_sample
                    .as_ref()
                    .map(|(_, sample_checks)| sample_checks),
                index,
            );
        let view = InstanceView::new(instance, entry.head.clone(), CheckList::new(own));
        let key = InstanceKey {
            node: node_key.clone(),
            service_id: service_key,
        };
        self.insert_into_group(&name_key, key, view);
        self.announce_service_write(node_key, &name_key, checks_rewritten, checks_written);
        checks_here
    }

    /// Puts an instance's view into its service's group, creating the group for the first
    /// instance of a name.
    fn insert_into_group(&mut self, name_key: &ArcStr, key: InstanceKey, view: InstanceView) {
        let index = self.index;
        match self.cat.services.get_mut(&**name_key) {
            Some(group) => {
                group.index = index;
                group.instances.insert(key, view);
            }
            None => {
                let mut instances = PackedMap::new();
                instances.insert(key, view);
                self.cat
                    .services
                    .insert(name_key.clone(), ServiceGroup { index, instances });
            }
        }
    }

    /// Records what a service write changed: the service's tables always, the node's checks
    /// when their copy of the service's name and tags was rewritten, and what `upsert_check`
    /// announces when the registration's checks were written with the service.
    fn announce_service_write(
        &mut self,
        node_key: &ArcStr,
        name_key: &ArcStr,
        checks_rewritten: bool,
        checks_written: bool,
    ) {
        if checks_rewritten {
            // The check rows carry their service's name and tags: node check queries
            // (`/v1/health/node/<node>`) answer differently now.
            self.bumped[BUMP_CHECKS] = true;
            self.touch(Table::Checks, node_key);
        }
        self.bumped[BUMP_SERVICES] = true;
        self.touch(Table::Services, name_key);
        self.touch(Table::ServiceIndex, name_key);
        self.touch(Table::NodeServices, node_key);
        if checks_written {
            // The service's index moved above; the checks' tables move too.
            self.bumped[BUMP_CHECKS] = true;
            self.touch(Table::Checks, node_key);
            self.touch(Table::ServiceIndex, name_key);
        }
    }

    /// Removes one instance from its group; an emptied group is dropped and recorded as an
    /// extinction.
    fn remove_from_group(&mut self, name_key: &ArcStr, node_key: &ArcStr, service_key: &ArcStr) {
        let Some(group) = self.cat.services.get_mut(&**name_key) else {
            return;
        };
        group.instances.remove(&InstanceKeyRef {
            node: node_key,
            service_id: service_key,
        });
        if group.instances.is_empty() {
            self.cat.services.remove(&**name_key);
            self.cat.service_extinction_index = self.index;
        } else {
            group.index = self.index;
        }
        self.touch(Table::ServiceIndex, name_key);
    }

    fn upsert_check<S: Text>(&mut self, node_key: &ArcStr, reg: &CheckRegistrationOf<S>) {
        let index = self.index;
        let Some(entry) = self.cat.nodes.get(&**node_key) else {
            debug_assert!(false, "the node is written before its checks");
            return;
        };
        let check_id = fold(&reg.check_id);
        let service_key: ArcStr = if reg.service_id.is_empty() {
            ArcStr::new()
        } else {
            match entry.services.get_key_value(&*fold(&reg.service_id)) {
                Some((key, _)) => key.clone(),
                None => {
                    debug_assert!(false, "validated: the check's service exists");
                    return;
                }
            }
        };
        let service = entry.services.get(&*service_key).cloned();
        let (found_key, existing) = match entry.checks.get_key_value(&*check_id) {
            Some((key, check)) => (Some(key.clone()), Some(check.clone())),
            None => (None, None),
        };
        // The folded service ID that owned the check before (empty: a node check).
        let old_owner: Option<ArcStr> = existing.as_ref().map(|old| {
            if old.service_id.is_empty() {
                ArcStr::new()
            } else {
                entry
                    .services
                    .get_key_value(&*fold(&old.service_id))
                    .map_or_else(|| fold_arc(&old.service_id), |(k, _)| k.clone())
            }
        });
        // Instances of a service usually carry identically named checks: a new check shares
        // the text of another instance's.
        let shared_name = match (&existing, &service) {
            (None, Some(service)) => {
                sample_check_name(&self.cat.services, &fold(&service.name), &reg.name)
            }
            _ => None,
        };
        let row = check_row_sharing(
            reg,
            entry.node().name.clone(),
            service.as_deref(),
            existing.as_deref(),
            shared_name.as_ref(),
            index,
        );
        if let Some(old) = &existing {
            if old.same_as(&row) {
                return;
            }
        }
        let check = RowArc::new(row);
        let check_key = found_key.unwrap_or_else(|| fold_arc(&check.check_id));
        let moved_from = old_owner.filter(|owner| **owner != *service_key);
        let previous_service = moved_from
            .as_ref()
            .and_then(|owner| entry.services.get(&**owner).map(|s| fold_arc(&s.name)));
        let entry = self
            .cat
            .nodes
            .get_mut(&**node_key)
            .expect("node checked above");
        entry.checks.insert(check_key.clone(), check.clone());
        // Views: the old owner loses the check, the new one gains it; node checks are in
        // every view of the node.
        if let Some(owner) = &moved_from {
            if !owner.is_empty() {
                self.edit_view_checks(node_key, owner, &check_key, None);
            }
        }
        let node_checks_changed =
            service_key.is_empty() || moved_from.as_ref().is_some_and(|o| o.is_empty());
        if node_checks_changed {
            self.refresh_views(node_key, None, None);
        }
        if !service_key.is_empty() {
            self.edit_view_checks(node_key, &service_key, &check_key, Some(check));
        }
        self.bumped[BUMP_CHECKS] = true;
        self.touch(Table::Checks, node_key);
        self.bump_owner(node_key, service.map(|s| fold_arc(&s.name)));
        if let Some(owner) = &moved_from {
            // The previous owner's answers change too when a check moves between services.
            self.bump_owner(
                node_key,
                if owner.is_empty() {
                    None
                } else {
                    previous_service
                },
            );
        }
    }

    /// Moves the index of the service a check belongs to (folded name), or of every service
    /// on the node for a node check (`None`).
    fn bump_owner(&mut self, node_key: &ArcStr, folded_name: Option<ArcStr>) {
        match folded_name {
            Some(name) => self.bump_service(&name),
            None => self.bump_services_of_node(node_key),
        }
    }

    fn deregister(&mut self, node: &str, service_id: &str, check_id: &str) -> Result<(), String> {
        if node.is_empty() {
            return Err("Must provide node".to_string());
        }
        let Some((node_key, _)) = self.cat.nodes.get_key_value(&*fold(node)) else {
            return Ok(());
        };
        let node_key = node_key.clone();
        if service_id.is_empty() && check_id.is_empty() {
            self.delete_node(&node_key);
            return Ok(());
        }
        if !service_id.is_empty() {
            self.delete_service(&node_key, &fold(service_id));
        }
        if !check_id.is_empty() {
            self.delete_check(&node_key, &fold(check_id));
        }
        Ok(())
    }

    fn delete_service(&mut self, node_key: &ArcStr, service_id: &str) {
        let Some(entry) = self.cat.nodes.get(&**node_key) else {
            return;
        };
        let Some((service_key, instance)) = entry
            .services
            .get_key_value(service_id)
            .map(|(k, v)| (k.clone(), v.clone()))
        else {
            return;
        };
        let name_key = fold_arc(&instance.name);
        // The view lists exactly the service's checks.
        let doomed = self.view_checks(&name_key, node_key, &service_key);
        let entry = self
            .cat
            .nodes
            .get_mut(&**node_key)
            .expect("node checked above");
        entry.services.remove(&*service_key);
        for check in doomed.iter() {
            entry.checks.remove(&*fold(&check.check_id));
        }
        self.remove_from_group(&name_key, node_key, &service_key);
        self.bumped[BUMP_SERVICES] = true;
        self.touch(Table::Services, &name_key);
        self.touch(Table::NodeServices, node_key);
        if !doomed.is_empty() {
            self.bumped[BUMP_CHECKS] = true;
            self.touch(Table::Checks, node_key);
        }
    }

    fn delete_check(&mut self, node_key: &ArcStr, check_id: &str) {
        let Some(entry) = self.cat.nodes.get_mut(&**node_key) else {
            return;
        };
        let Some((check_key, check)) = entry.checks.remove_with_key(check_id) else {
            return;
        };
        if check.service_id.is_empty() {
            self.refresh_views(node_key, None, None);
            self.bump_services_of_node(node_key);
        } else {
            let owner = entry
                .services
                .get_key_value(&*fold(&check.service_id))
                .map(|(k, s)| (k.clone(), fold_arc(&s.name)));
            if let Some((owner, name)) = owner {
                self.edit_view_checks(node_key, &owner, &check_key, None);
                self.bump_service(&name);
            }
        }
        self.bumped[BUMP_CHECKS] = true;
        self.touch(Table::Checks, node_key);
    }

    fn delete_node(&mut self, node_key: &ArcStr) {
        let service_ids: Vec<ArcStr> = match self.cat.nodes.get(&**node_key) {
            Some(entry) => entry.services.keys().cloned().collect(),
            None => return,
        };
        for id in &service_ids {
            self.delete_service(node_key, id);
        }
        let Some(entry) = self.cat.nodes.remove(&**node_key) else {
            return;
        };
        if !entry.node().id.is_empty() {
            self.cat.node_ids.remove(&*entry.node().id);
        }
        if !entry.checks.is_empty() {
            self.bumped[BUMP_CHECKS] = true;
            self.touch(Table::Checks, node_key);
        }
        if self.cat.coordinates.remove(&**node_key).is_some() {
            self.bumped[BUMP_COORDINATES] = true;
            self.touch(Table::Coordinates, node_key);
        }
        self.bumped[BUMP_NODES] = true;
        self.touch(Table::Nodes, node_key);
        self.touch(Table::NodeServices, node_key);
    }

    /// Stores the coordinates of nodes the catalog holds; the others are dropped.
    fn update_coordinates(&mut self, updates: &[CoordinateUpdate]) -> Result<(), String> {
        if updates.len() > COORDINATE_UPDATES_MAX {
            return Err(format!(
                "{} coordinate updates exceed {COORDINATE_UPDATES_MAX}",
                updates.len()
            ));
        }
        for update in updates {
            let Some((node_key, entry)) = self.cat.nodes.get_key_value(&*fold(&update.node)) else {
                continue;
            };
            let node_key = node_key.clone();
            let row = NodeCoordinate {
                node: entry.node().name.clone(),
                segment: arc_str(&update.segment),
                vec: update.vec.clone(),
                error: update.error,
                adjustment: update.adjustment,
                height: update.height,
                modify_index: self.index,
            };
            let unchanged = self.cat.coordinates.get(&*node_key).is_some_and(|old| {
                NodeCoordinate {
                    modify_index: self.index,
                    ..(**old).clone()
                } == row
            });
            if unchanged {
                continue;
            }
            self.cat.coordinates.insert(node_key.clone(), Arc::new(row));
            self.bumped[BUMP_COORDINATES] = true;
            self.touch(Table::Coordinates, &node_key);
        }
        Ok(())
    }

    fn apply_op<S: Text>(&mut self, op: &CatalogOpOf<S>) -> Result<(), String> {
        match op {
            CatalogOpOf::Register(reg) => self.register(reg),
            CatalogOpOf::Deregister {
                node,
                service_id,
                check_id,
            } => self.deregister(node, service_id, check_id),
            CatalogOpOf::Coordinates(updates) => self.update_coordinates(updates),
            CatalogOpOf::Batch(ops) => {
                if ops.len() > BATCH_OPS_MAX {
                    return Err(format!(
                        "batch of {} operations exceeds {BATCH_OPS_MAX}",
                        ops.len()
                    ));
                }
                let mut first_error = None;
                let mut failures = 0usize;
                for op in ops {
                    if matches!(op, CatalogOpOf::Batch(_)) {
                        return Err("nested batches are not allowed".to_string());
                    }
                    if let Err(e) = self.apply_op(op) {
                        failures += 1;
                        first_error.get_or_insert(e);
                    }
                }
                match first_error {
                    None => Ok(()),
                    Some(e) if failures == 1 => Err(e),
                    Some(e) => Err(format!("{e} (and {} more failures)", failures - 1)),
                }
            }
        }
    }
}

/// The instance row a registration produces on node `node_name`, sharing strings with
/// `existing` (the row it replaces) and `sample` (another instance of the service) where equal.
pub fn instance_row<S: Text>(
    service: &ServiceRegistrationOf<S>,
    node_name: ArcStr,
    existing: Option<&ServiceInstance>,
    sample: Option<&ServiceInstance>,
    index: u64,
) -> ServiceInstance {
    let id_text = if service.id.is_empty() {
        &service.name
    } else {
        &service.id
    };
    let mut tagged_addresses: Vec<(ArcStr, ServiceAddress)> = service
        .tagged_addresses
        .iter()
        .map(|(tag, address, port)| {
            (
                arc_str(tag),
                ServiceAddress {
                    address: arc_str(address),
                    port: *port,
                },
            )
        })
        .collect();
    tagged_addresses.sort_by(|a, b| a.0.cmp(&b.0));
    tagged_addresses.dedup_by(|later, earlier| later.0 == earlier.0);
    let extras = if service.kind.is_empty()
        && tagged_addresses.is_empty()
        && service.socket_path.is_empty()
        && service.proxy_json.is_none()
        && !service.connect_native
    {
        None
    } else {
        let old = existing.and_then(|e| e.extras.as_deref());
        Some(Box::new(ServiceExtras {
            kind: reuse(old.map(|e| &e.kind), &service.kind),
            tagged_addresses: tagged_addresses.into_boxed_slice(),
            socket_path: reuse(old.map(|e| &e.socket_path), &service.socket_path),
            proxy_json: service.proxy_json.as_deref().map(ArcStr::from),
            connect_native: service.connect_native,
        }))
    };
    let name = match sample {
        Some(sample) if *sample.name == *service.name => sample.name.clone(),
        _ => reuse(existing.map(|e| &e.name), &service.name),
    };
    ServiceInstance {
        node: node_name,
        id: reuse(existing.map(|e| &e.id), id_text),
        name,
        tags: shared_tags(&service.tags, existing, sample),
        address: reuse(existing.map(|e| &e.address), &service.address),
        meta: string_pairs(&service.meta),
        port: service.port,
        weights: valid_weights(service.weights),
        enable_tag_override: service.enable_tag_override,
        extras,
        create_index: existing.map_or(index, |e| e.create_index),
        modify_index: index,
    }
}

/// The check row a registration produces, attached to `service` (when it is a service
/// check) and sharing strings with `existing`.
pub fn check_row<S: Text>(
    reg: &CheckRegistrationOf<S>,
    node_name: ArcStr,
    service: Option<&ServiceInstance>,
    existing: Option<&HealthCheck>,
    index: u64,
) -> HealthCheck {
    check_row_sharing(reg, node_name, service, existing, None, index)
}

/// The checks an instance had, each carrying its service's current name and tags: a row
/// whose copy is stale is rewritten in the node's check table too. Returns the list (with
/// room for `more` checks) and whether any row was rewritten.
fn carry_service_text(
    entry: &mut NodeEntry,
    previous_checks: &CheckList,
    instance: &RowArc<ServiceInstance>,
    more: usize,
) -> (Vec<RowArc<HealthCheck>>, bool) {
    let mut own = Vec::with_capacity(previous_checks.len() + more);
    let mut rewritten = false;
    for check in previous_checks.iter() {
        if check.service_name != instance.name || check.service_tags != instance.tags {
            rewritten = true;
            let mut updated = (**check).clone();
            updated.service_name = instance.name.clone();
            updated.service_tags = instance.tags.clone();
            let updated = RowArc::new(updated);
            if let Some(slot) = entry.checks.get_mut(&*fold(&check.check_id)) {
                *slot = updated.clone();
            }
            own.push(updated);
        } else {
            own.push(check.clone());
        }
    }
    (own, rewritten)
}

/// Writes a registration's checks with their service, one after another as `upsert_check`
/// writes them, into the node's check table and the instance's check list `own` (kept in
/// check-ID order, one entry per check). Returns whether any check changed.
fn write_instance_checks<S: Text>(
    entry: &mut NodeEntry,
    own: &mut Vec<RowArc<HealthCheck>>,
    checks: &[CheckRegistrationOf<S>],
    instance: &RowArc<ServiceInstance>,
    node_name: &ArcStr,
    sample_checks: Option<&CheckList>,
    index: u64,
) -> bool {
    let mut written = false;
    for reg in checks {
        let (found_key, existing) = match entry.checks.get_key_value(&*fold(&reg.check_id)) {
            Some((key, check)) => (Some(key.clone()), Some(check.clone())),
            None => (None, None),
        };
        // Instances of a service usually carry identically named checks: a new check
        // shares the text of another instance's.
        let shared_name = match (&existing, sample_checks) {
            (None, Some(sample_checks)) => shared_check_name(sample_checks, &reg.name),
            _ => None,
        };
        let row = check_row_sharing(
            reg,
            node_name.clone(),
            Some(instance),
            existing.as_deref(),
            shared_name.as_ref(),
            index,
        );
        if existing.is_some_and(|old| old.same_as(&row)) {
            continue;
        }
        let check = RowArc::new(row);
        let check_key = found_key.unwrap_or_else(|| fold_arc(&check.check_id));
        entry.checks.insert(check_key.clone(), check.clone());
        let at = own.partition_point(|c| *fold(&c.check_id) < *check_key);
        match own.get(at) {
            Some(same) if *fold(&same.check_id) == *check_key => own[at] = check,
            _ => own.insert(at, check),
        }
        written = true;
    }
    written
}

/// [`check_row`], whose name shares `shared_name` when it holds the same text (another
/// instance's check of the same name) and `existing`'s otherwise.
fn check_row_sharing<S: Text>(
    reg: &CheckRegistrationOf<S>,
    node_name: ArcStr,
    service: Option<&ServiceInstance>,
    existing: Option<&HealthCheck>,
    shared_name: Option<&ArcStr>,
    index: u64,
) -> HealthCheck {
    let status = Status::parse(&reg.status).unwrap_or(Status::Critical);
    let old_extras = existing.and_then(|e| e.extras.as_deref());
    // An empty definition is stored as none: the same row, and nothing to copy.
    let definition = reg.definition.as_ref().filter(|d| !d.is_empty());
    let kind_code = check_type_code(&reg.kind);
    let extras = if kind_code != OTHER_CHECK_TYPE
        && reg.notes.is_empty()
        && reg.interval.is_empty()
        && reg.timeout.is_empty()
        && reg.exposed_port == 0
        && definition.is_none()
    {
        None
    } else {
        Some(Box::new(CheckExtras {
            notes: reuse(old_extras.map(|e| &e.notes), &reg.notes),
            interval: reuse(old_extras.map(|e| &e.interval), &reg.interval),
            timeout: reuse(old_extras.map(|e| &e.timeout), &reg.timeout),
            exposed_port: reg.exposed_port,
            definition: definition.cloned().unwrap_or_default(),
            other_kind: (kind_code == OTHER_CHECK_TYPE).then(|| arc_str(&reg.kind)),
        }))
    };
    let name = match shared_name {
        Some(shared) if **shared == *reg.name => shared.clone(),
        _ => reuse(existing.map(|e| &e.name), &reg.name),
    };
    HealthCheck {
        node: node_name,
        check_id: reuse(existing.map(|e| &e.check_id), &reg.check_id),
        name,
        status,
        output: reuse(existing.map(|e| &e.output), &reg.output),
        service_id: match service {
            Some(s) => s.id.clone(),
            None => ArcStr::new(),
        },
        service_name: match service {
            Some(s) => s.name.clone(),
            None => ArcStr::new(),
        },
        service_tags: match service {
            Some(s) => s.tags.clone(),
            None => Tags::empty(),
        },
        kind_code,
        extras,
        create_index: existing.map_or(index, |e| e.create_index),
        modify_index: index,
    }
}

/// The name of a check called `name` on an instance of the service `folded_name`, to share.
fn sample_check_name(
    services: &imbl::OrdMap<ArcStr, ServiceGroup>,
    folded_name: &str,
    name: &str,
) -> Option<ArcStr> {
    let view = services.get(folded_name)?.instances.first_value()?;
    shared_check_name(view.checks(), name)
}

/// The text of the check called `name` among `checks` (another instance's), to share.
fn shared_check_name(checks: &[RowArc<HealthCheck>], name: &str) -> Option<ArcStr> {
    checks
        .iter()
        .find(|c| *c.name == *name)
        .map(|c| c.name.clone())
}

/// What validation decided for a registration.
struct Plan {
    write_node: bool,
    /// Another node that held this node's ID, removed first (a node rename).
    rename_from: Option<ArcStr>,
    /// The node's folded name: the stored key when the node exists.
    node_key: ArcStr,
}

fn node_differs<S: Text>(node: &Node, reg: &RegistrationOf<S>) -> bool {
    *node.id != *reg.id
        || *node.name != *reg.node
        || *node.address != *reg.address
        || *node.datacenter != *reg.datacenter
        || (!reg.keep_node_meta
            && (node.tagged_addresses != string_pairs(&reg.tagged_addresses)
                || node.meta != string_pairs(&reg.node_meta)))
}

/// Rewrites the node name carried by every row of a node after its case changed.
fn relabel_node_rows(entry: &mut NodeEntry, name: &ArcStr) {
    let services: Vec<(ArcStr, RowArc<ServiceInstance>)> = entry
        .services
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (key, instance) in services {
        let mut updated = (*instance).clone();
        updated.node = name.clone();
        entry.services.insert(key, RowArc::new(updated));
    }
    let keys: Vec<ArcStr> = entry.checks.keys().cloned().collect();
    for key in keys {
        if let Some(check) = entry.checks.get_mut(&*key) {
            let mut updated = (**check).clone();
            updated.node = name.clone();
            *check = RowArc::new(updated);
        }
    }
}

/// The checks of one service on a node (empty service key: the node's own checks), in
/// check-ID order. A scan of the node's checks; writes keep each view's list instead.
pub fn checks_of_service<'m>(
    checks: &'m PackedMap<ArcStr, RowArc<HealthCheck>>,
    service_key: &'m str,
) -> impl Iterator<Item = &'m RowArc<HealthCheck>> + 'm {
    checks
        .values()
        .filter(move |c| *fold(&c.service_id) == *service_key)
}

/// A tag list sharing an existing allocation when an equal list exists.
fn shared_tags<S: Text>(
    tags: &[S],
    existing: Option<&ServiceInstance>,
    sample: Option<&ServiceInstance>,
) -> Tags {
    if tags.is_empty() {
        return Tags::empty();
    }
    for candidate in [existing, sample].into_iter().flatten() {
        if candidate.tags.len() == tags.len()
            && candidate.tags.iter().zip(tags).all(|(a, b)| **a == **b)
        {
            return candidate.tags.clone();
        }
    }
    tags.iter().map(|t| arc_str(t)).collect()
}

/// Applies one catalog command at `index` to the catalog's tables only; the sessions it
/// affects are ended by the caller (`Tables::write_catalog`).
pub(in crate::store) fn apply<S: Text>(
    tables: &mut Tables,
    index: u64,
    op: &CatalogOpOf<S>,
    changes: &mut Vec<Change>,
) -> CatalogResult {
    let (result, bumped) = {
        let first_change = changes.len();
        let mut tx = Tx {
            cat: &mut tables.catalog,
            index,
            changes,
            first_change,
            seen: None,
            bumped: [false; 4],
        };
        let result = tx.apply_op(op);
        (result, tx.bumped)
    };
    for (slot, table) in [
        (BUMP_NODES, Table::Nodes),
        (BUMP_SERVICES, Table::Services),
        (BUMP_CHECKS, Table::Checks),
        (BUMP_COORDINATES, Table::Coordinates),
    ] {
        if bumped[slot] {
            tables.bump_table(table, index);
        }
    }
    #[cfg(debug_assertions)]
    if tables.catalog.nodes.len() <= 64 {
        tables.catalog.check_invariants();
    }
    match result {
        Ok(()) => CatalogResult::Written,
        Err(reason) => CatalogResult::Refused(reason),
    }
}
