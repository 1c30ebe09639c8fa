//! The agent's local state: the services and checks registered on this agent (through the
//! agent API or config files), their current check results, and what still has to reach the
//! catalog.
//!
//! Every service and check carries a `revision` that moves on each local change and a
//! `synced_revision` recording what the catalog last accepted; an entry is in sync when the
//! two match. Anti-entropy reads the out-of-sync entries, sends them, and marks exactly the
//! revisions it sent, so a change made while a sync is in flight is never lost. Removed
//! entries wait in `deleted_*` until their deregistration is accepted.
//!
//! This module holds data and transitions only; it does no I/O and reads no clock (instants
//! are passed in).

use crate::consul::definition::{CheckKind, CheckSpec};
use crate::store::catalog::{CheckRegistration, ServiceRegistration, Status};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

/// Where a service or check came from; `reload` replaces only config-file entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Config,
    Api,
}

/// The ID prefix of service maintenance checks and the node maintenance check ID.
pub const SERVICE_MAINTENANCE_PREFIX: &str = "_service_maintenance:";
pub const NODE_MAINTENANCE_ID: &str = "_node_maintenance";
pub const DEFAULT_SERVICE_MAINTENANCE_REASON: &str =
    "Maintenance mode is enabled for this service, but no reason was provided. This is a default message.";
pub const DEFAULT_NODE_MAINTENANCE_REASON: &str =
    "Maintenance mode is enabled for this node, but no reason was provided. This is a default message.";

#[derive(Clone, Debug)]
pub struct LocalService {
    pub registration: ServiceRegistration,
    pub source: Source,
    pub revision: u64,
    pub synced_revision: u64,
}

impl LocalService {
    pub fn in_sync(&self) -> bool {
        self.revision == self.synced_revision
    }
}

#[derive(Clone, Debug)]
pub struct LocalCheck {
    pub id: String,
    pub name: String,
    pub notes: String,
    pub service_id: String,
    /// How the check runs; `None` for maintenance checks, which the agent sets itself.
    pub spec: Option<CheckSpec>,
    pub source: Source,
    pub status: Status,
    pub output: String,
    pub revision: u64,
    pub synced_revision: u64,
    /// The last local change only touched the output: its sync may be deferred.
    pub output_only_change: bool,
    /// When the catalog last accepted this check (for `check_update_interval`).
    pub last_synced: Option<Instant>,
    /// Since when the check has been critical, for `deregister_critical_service_after`.
    pub critical_since: Option<Instant>,
    /// Consecutive results seen by the status thresholds.
    pub successes: u32,
    pub failures: u32,
    /// Identifies the runner allowed to report results; bumped when the check is replaced.
    pub generation: u64,
    /// TTL checks: when the check turns critical without an update.
    pub ttl_deadline: Option<Instant>,
}

impl LocalCheck {
    pub fn in_sync(&self) -> bool {
        self.revision == self.synced_revision
    }
    /// Consul's check `Type`.
    pub fn kind(&self) -> &'static str {
        match &self.spec {
            Some(spec) => spec.kind.as_str(),
            None => "maintenance",
        }
    }
    pub fn is_maintenance(&self) -> bool {
        self.spec.is_none()
    }
}

/// Everything registered on this agent.
#[derive(Debug, Default)]
pub struct LocalState {
    pub services: BTreeMap<String, LocalService>,
    pub checks: BTreeMap<String, LocalCheck>,
    /// Removed locally; the catalog still has to forget them.
    pub deleted_services: BTreeSet<String>,
    pub deleted_checks: BTreeSet<String>,
    /// Whether the node row itself is known to match the catalog.
    pub node_in_sync: bool,
    /// The ACL tokens API registrations came with, by service and check ID: anti-entropy
    /// sends each entry with its own token, as Consul's agent does. A removed entry keeps
    /// its token until its deregistration is accepted.
    pub service_tokens: BTreeMap<String, String>,
    pub check_tokens: BTreeMap<String, String>,
    /// The HTTP and gRPC checks a local sidecar exposes (`Proxy.Expose.Checks`), by check
    /// ID: each is probed through the sidecar's listener on its own port, and the catalog
    /// learns that port as the check's `ExposedPort`. Kept by
    /// [`LocalState::refresh_exposed_checks`]; no two entries share a port.
    pub exposed_checks: BTreeMap<String, ExposedCheck>,
    next_revision: u64,
    next_generation: u64,
    /// Bumped on every change visible through the agent API (for hash-blocking reads).
    pub change_count: u64,
}

/// Where a check a sidecar exposes is probed: the sidecar's plain-text listener for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExposedCheck {
    /// The sidecar's registered address (empty: the agent's own host).
    pub proxy_address: String,
    /// The listener's port, from `ports.expose_min_port ..= expose_max_port`.
    pub port: u16,
}

/// What a check result did to the local state.
#[derive(Debug, PartialEq, Eq)]
pub enum CheckUpdate {
    /// The check is unknown or the result came from a replaced runner.
    Ignored,
    /// Nothing visible changed.
    Unchanged,
    /// The status changed: sync now.
    StatusChanged,
    /// Only the output changed: sync may wait for `check_update_interval`.
    OutputChanged,
}

impl LocalState {
    fn bump(&mut self) -> u64 {
        self.next_revision += 1;
        self.change_count += 1;
        self.next_revision
    }

    /// Adds or replaces a service. Its checks are added with [`LocalState::add_check`].
    pub fn add_service(&mut self, registration: ServiceRegistration, source: Source) {
        let revision = self.bump();
        let id = registration.id.clone();
        self.deleted_services.remove(&id);
        let synced_revision = match self.services.get(&id) {
            // An identical registration changes nothing for the catalog.
            Some(old) if old.registration == registration && old.in_sync() => revision,
            _ => 0,
        };
        self.services.insert(
            id,
            LocalService {
                registration,
                source,
                revision,
                synced_revision,
            },
        );
    }

    /// Removes a service and its checks. Returns whether it existed.
    pub fn remove_service(&mut self, id: &str) -> bool {
        if self.services.remove(id).is_none() {
            return false;
        }
        self.bump();
        self.deleted_services.insert(id.to_string());
        let owned: Vec<String> = self
            .checks
            .values()
            .filter(|c| c.service_id == id)
            .map(|c| c.id.clone())
            .collect();
        for check in owned {
            // The catalog drops a service's checks with it.
            self.checks.remove(&check);
        }
        true
    }

    /// Adds or replaces a check, keeping the current status and output of a check that is
    /// replaced by an equal definition. Returns the generation its runner must report with.
    pub fn add_check(&mut self, spec: CheckSpec, source: Source, now: Instant) -> u64 {
        let revision = self.bump();
        self.next_generation += 1;
        let generation = self.next_generation;
        let id = spec.id.clone();
        self.deleted_checks.remove(&id);
        let (status, output, synced, last_synced) = match self.checks.get(&id) {
            Some(old) if old.spec.as_ref() == Some(&spec) => (
                old.status,
                old.output.clone(),
                old.in_sync(),
                old.last_synced,
            ),
            _ => (
                spec.initial_status,
                spec.initial_output.clone(),
                false,
                None,
            ),
        };
        let ttl_deadline = (spec.kind == CheckKind::Ttl).then(|| now + spec.ttl());
        let check = LocalCheck {
            id: id.clone(),
            name: spec.name.clone(),
            notes: spec.notes.clone(),
            service_id: spec.service_id.clone(),
            source,
            status,
            output,
            revision,
            synced_revision: if synced { revision } else { 0 },
            output_only_change: false,
            last_synced,
            critical_since: (status == Status::Critical).then_some(now),
            successes: 0,
            failures: 0,
            generation,
            ttl_deadline,
            spec: Some(spec),
        };
        self.checks.insert(id, check);
        generation
    }

    /// Adds a maintenance check (critical, no runner).
    pub fn add_maintenance_check(&mut self, id: &str, name: &str, service_id: &str, reason: &str) {
        let revision = self.bump();
        self.deleted_checks.remove(id);
        self.checks.insert(
            id.to_string(),
            LocalCheck {
                id: id.to_string(),
                name: name.to_string(),
                notes: reason.to_string(),
                service_id: service_id.to_string(),
                spec: None,
                source: Source::Api,
                status: Status::Critical,
                output: String::new(),
                revision,
                synced_revision: 0,
                output_only_change: false,
                last_synced: None,
                critical_since: None,
                successes: 0,
                failures: 0,
                generation: 0,
                ttl_deadline: None,
            },
        );
    }

    /// Removes a check. Returns whether it existed.
    pub fn remove_check(&mut self, id: &str) -> bool {
        if self.checks.remove(id).is_none() {
            return false;
        }
        self.bump();
        self.deleted_checks.insert(id.to_string());
        true
    }

    /// Sets a check's status and output directly (TTL updates, alias results).
    pub fn set_check(
        &mut self,
        id: &str,
        status: Status,
        output: &str,
        now: Instant,
    ) -> CheckUpdate {
        let Some(check) = self.checks.get_mut(id) else {
            return CheckUpdate::Ignored;
        };
        let status_changed = check.status != status;
        let output_changed = check.output != output;
        if !status_changed && !output_changed {
            return CheckUpdate::Unchanged;
        }
        // Only a check whose catalog copy was current (or only stale in its output) may
        // defer an output-only change.
        let deferrable = check.in_sync() || check.output_only_change;
        if status_changed {
            check.critical_since = (status == Status::Critical).then_some(now);
        }
        check.status = status;
        check.output = output.to_string();
        self.next_revision += 1;
        self.change_count += 1;
        let check = self.checks.get_mut(id).expect("present above");
        check.revision = self.next_revision;
        if status_changed {
            check.output_only_change = false;
            CheckUpdate::StatusChanged
        } else {
            check.output_only_change = deferrable;
            CheckUpdate::OutputChanged
        }
    }

    /// Feeds a runner's result through Consul's thresholds (`success_before_passing`,
    /// `failures_before_warning`, `failures_before_critical`).
    pub fn record_result(
        &mut self,
        id: &str,
        generation: u64,
        status: Status,
        output: &str,
        now: Instant,
    ) -> CheckUpdate {
        let Some(check) = self.checks.get_mut(id) else {
            return CheckUpdate::Ignored;
        };
        if check.generation != generation {
            return CheckUpdate::Ignored;
        }
        let Some(spec) = &check.spec else {
            return CheckUpdate::Ignored;
        };
        let effective = if matches!(status, Status::Passing | Status::Warning) {
            check.successes = check.successes.saturating_add(1);
            check.failures = 0;
            if check.successes >= spec.success_before_passing {
                Some(status)
            } else {
                None
            }
        } else {
            check.failures = check.failures.saturating_add(1);
            check.successes = 0;
            if check.failures >= spec.failures_before_critical {
                Some(status)
            } else if check.failures >= spec.failures_before_warning {
                Some(Status::Warning)
            } else {
                None
            }
        };
        match effective {
            Some(status) => self.set_check(id, status, output, now),
            None => CheckUpdate::Unchanged,
        }
    }

    /// The checks of one service (or the node's own checks for an empty ID).
    pub fn checks_of<'a>(
        &'a self,
        service_id: &'a str,
    ) -> impl Iterator<Item = &'a LocalCheck> + 'a {
        self.checks
            .values()
            .filter(move |c| c.service_id == service_id)
    }

    /// Services whose critical checks ask for deregistration and have been critical long
    /// enough (`deregister_critical_service_after`, raised to `floor`).
    pub fn services_to_reap(&self, now: Instant, floor: Duration) -> Vec<String> {
        let mut out = BTreeSet::new();
        for check in self.checks.values() {
            let (Some(spec), Some(since)) = (&check.spec, check.critical_since) else {
                continue;
            };
            if check.status != Status::Critical || check.service_id.is_empty() {
                continue;
            }
            if let Some(after) = spec.deregister_critical_after() {
                if now.saturating_duration_since(since) >= after.max(floor) {
                    out.insert(check.service_id.clone());
                }
            }
        }
        out.into_iter().collect()
    }

    /// TTL checks whose deadline passed without an update.
    pub fn expired_ttls(&self, now: Instant) -> Vec<String> {
        self.checks
            .values()
            .filter(|c| c.ttl_deadline.is_some_and(|d| now >= d) && c.status != Status::Critical)
            .map(|c| c.id.clone())
            .collect()
    }

    /// Pushes a TTL check's deadline out after an update.
    pub fn renew_ttl(&mut self, id: &str, now: Instant) {
        if let Some(check) = self.checks.get_mut(id) {
            if let Some(spec) = &check.spec {
                if spec.kind == CheckKind::Ttl {
                    check.ttl_deadline = Some(now + spec.ttl());
                }
            }
        }
    }

    /// Marks everything out of sync (after a full comparison found drift, or on demand).
    pub fn mark_all_dirty(&mut self) {
        self.node_in_sync = false;
        for service in self.services.values_mut() {
            service.synced_revision = 0;
        }
        for check in self.checks.values_mut() {
            check.synced_revision = 0;
            check.output_only_change = false;
        }
    }

    /// Whether an out-of-sync check may wait: only its output changed and it was synced
    /// less than `defer` ago.
    pub fn check_deferred(check: &LocalCheck, now: Instant, defer: Duration) -> bool {
        check.output_only_change
            && check
                .last_synced
                .is_some_and(|at| now.saturating_duration_since(at) < defer)
    }

    /// The local services whose sidecar exposes their checks, by service ID, with that
    /// sidecar's address: a `connect-proxy` with `Proxy.Expose.Checks` names them as its
    /// `DestinationServiceID` (the first such proxy by ID wins, as a map lookup would).
    fn services_exposing_checks(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for service in self.services.values() {
            let registration = &service.registration;
            if registration.kind != "connect-proxy" {
                continue;
            }
            let Some(proxy) = registration.proxy_json.as_deref() else {
                continue;
            };
            let Ok(proxy) = serde_json::from_str::<serde_json::Value>(proxy) else {
                continue;
            };
            let exposes = proxy
                .pointer("/Expose/Checks")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false);
            let destination = proxy
                .get("DestinationServiceID")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default();
            if exposes && !destination.is_empty() {
                out.entry(destination.to_string())
                    .or_insert_with(|| registration.address.clone());
            }
        }
        out
    }

    /// Brings [`LocalState::exposed_checks`] in line with the registrations, after any of
    /// them changed: every HTTP and gRPC check of a service whose sidecar exposes checks
    /// keeps its port or gets the lowest free one of `ports`; a check no longer exposed
    /// gives its port back. A check whose port changed is marked for the catalog. Returns
    /// the checks left without a port because `ports` is used up (Consul's agent refuses
    /// them with `no ports available to expose '<check>'`; these keep their own target).
    pub fn refresh_exposed_checks(&mut self, ports: RangeInclusive<u16>) -> Vec<String> {
        let exposing = self.services_exposing_checks();
        let wanted: BTreeMap<String, String> = self
            .checks
            .values()
            .filter(|check| {
                check
                    .spec
                    .as_ref()
                    .is_some_and(|spec| matches!(spec.kind, CheckKind::Http | CheckKind::Grpc))
            })
            .filter_map(|check| {
                let address = exposing.get(&check.service_id)?;
                Some((check.id.clone(), address.clone()))
            })
            .collect();
        let mut moved: Vec<String> = Vec::new();
        self.exposed_checks.retain(|id, _| {
            let keep = wanted.contains_key(id);
            if !keep {
                moved.push(id.clone());
            }
            keep
        });
        let mut unplaced = Vec::new();
        for (id, proxy_address) in wanted {
            if let Some(exposed) = self.exposed_checks.get_mut(&id) {
                exposed.proxy_address = proxy_address;
                continue;
            }
            let used: BTreeSet<u16> = self.exposed_checks.values().map(|e| e.port).collect();
            match ports.clone().find(|port| *port > 0 && !used.contains(port)) {
                Some(port) => {
                    self.exposed_checks.insert(
                        id.clone(),
                        ExposedCheck {
                            proxy_address,
                            port,
                        },
                    );
                    moved.push(id);
                }
                None => unplaced.push(id),
            }
        }
        for id in moved {
            let revision = self.bump();
            if let Some(check) = self.checks.get_mut(&id) {
                check.revision = revision;
            }
        }
        debug_assert_eq!(
            self.exposed_checks
                .values()
                .map(|e| e.port)
                .collect::<BTreeSet<_>>()
                .len(),
            self.exposed_checks.len(),
            "no two exposed checks share a listener port"
        );
        unplaced
    }

    /// The catalog registration of a local check.
    pub fn check_registration(&self, check: &LocalCheck, node: &str) -> CheckRegistration {
        let (definition, interval, timeout) = match &check.spec {
            Some(spec) => {
                let mut def = spec.definition.clone();
                if matches!(
                    spec.kind,
                    CheckKind::Http
                        | CheckKind::Tcp
                        | CheckKind::Udp
                        | CheckKind::Grpc
                        | CheckKind::Script
                        | CheckKind::H2ping
                ) {
                    def.interval_ns = spec.interval().as_nanos() as i64;
                }
                let interval = if def.interval_ns > 0 {
                    crate::proto::duration::format_go_duration(def.interval_ns)
                } else {
                    String::new()
                };
                let timeout = if def.timeout_ns > 0 {
                    crate::proto::duration::format_go_duration(def.timeout_ns)
                } else {
                    String::new()
                };
                (Some(def), interval, timeout)
            }
            None => (None, String::new(), String::new()),
        };
        CheckRegistration {
            node: node.to_string(),
            check_id: check.id.clone(),
            name: check.name.clone(),
            status: check.status.as_str().to_string(),
            notes: check.notes.clone(),
            output: check.output.clone(),
            service_id: check.service_id.clone(),
            kind: check.kind().to_string(),
            interval,
            timeout,
            exposed_port: self
                .exposed_checks
                .get(&check.id)
                .map_or(0, |exposed| i32::from(exposed.port)),
            definition,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::catalog::CheckDefinition;

    fn spec(id: &str, kind: CheckKind) -> CheckSpec {
        CheckSpec {
            id: id.into(),
            name: id.into(),
            notes: String::new(),
            service_id: "web".into(),
            initial_status: Status::Critical,
            initial_output: String::new(),
            kind,
            definition: CheckDefinition {
                ttl_ns: 1_000_000_000,
                ..Default::default()
            },
            success_before_passing: 2,
            failures_before_warning: 1,
            failures_before_critical: 3,
        }
    }

    #[test]
    fn thresholds_follow_consul() {
        let mut state = LocalState::default();
        let now = Instant::now();
        let generation = state.add_check(spec("c", CheckKind::Tcp), Source::Api, now);
        // One success is not enough to pass.
        assert_eq!(
            state.record_result("c", generation, Status::Passing, "ok", now),
            CheckUpdate::Unchanged
        );
        assert_eq!(
            state.record_result("c", generation, Status::Passing, "ok", now),
            CheckUpdate::StatusChanged
        );
        assert_eq!(state.checks["c"].status, Status::Passing);
        // The first failure warns, the third is critical.
        state.record_result("c", generation, Status::Critical, "down", now);
        assert_eq!(state.checks["c"].status, Status::Warning);
        state.record_result("c", generation, Status::Critical, "down", now);
        assert_eq!(state.checks["c"].status, Status::Warning);
        state.record_result("c", generation, Status::Critical, "down", now);
        assert_eq!(state.checks["c"].status, Status::Critical);
        // A result from a replaced runner is ignored.
        assert_eq!(
            state.record_result("c", generation + 100, Status::Passing, "", now),
            CheckUpdate::Ignored
        );
    }

    #[test]
    fn sync_marks_and_output_deferral() {
        let mut state = LocalState::default();
        let now = Instant::now();
        state.add_check(spec("c", CheckKind::Ttl), Source::Api, now);
        let check = state.checks.get_mut("c").unwrap();
        assert!(!check.in_sync());
        check.synced_revision = check.revision;
        check.last_synced = Some(now);
        assert_eq!(
            state.set_check("c", Status::Critical, "new output", now),
            CheckUpdate::OutputChanged
        );
        let check = &state.checks["c"];
        assert!(!check.in_sync());
        assert!(LocalState::check_deferred(
            check,
            now,
            Duration::from_secs(300)
        ));
        assert_eq!(
            state.set_check("c", Status::Passing, "x", now),
            CheckUpdate::StatusChanged
        );
        assert!(!LocalState::check_deferred(
            &state.checks["c"],
            now,
            Duration::from_secs(300)
        ));
    }

    #[test]
    fn removing_a_service_removes_its_checks_and_ttls_expire() {
        let mut state = LocalState::default();
        let now = Instant::now();
        state.add_service(
            ServiceRegistration {
                id: "web".into(),
                name: "web".into(),
                ..Default::default()
            },
            Source::Api,
        );
        state.add_check(spec("c", CheckKind::Ttl), Source::Api, now);
        state.set_check("c", Status::Passing, "", now);
        assert!(state.expired_ttls(now).is_empty());
        assert_eq!(
            state.expired_ttls(now + Duration::from_secs(2)),
            vec!["c".to_string()]
        );
        state.renew_ttl("c", now + Duration::from_secs(2));
        assert!(state.expired_ttls(now + Duration::from_secs(2)).is_empty());
        assert!(state.remove_service("web"));
        assert!(state.checks.is_empty());
        assert!(state.deleted_services.contains("web"));
        assert!(!state.remove_service("web"));
    }

    #[test]
    fn a_sidecar_exposing_checks_gives_each_http_and_grpc_check_a_port() {
        let mut state = LocalState::default();
        let now = Instant::now();
        let ports = 21500..=21501;
        let web = ServiceRegistration {
            id: "web".into(),
            name: "web".into(),
            ..Default::default()
        };
        state.add_service(web, Source::Api);
        for (id, kind) in [
            ("http", CheckKind::Http),
            ("grpc", CheckKind::Grpc),
            ("ttl", CheckKind::Ttl),
        ] {
            state.add_check(spec(id, kind), Source::Api, now);
        }
        // No sidecar yet: nothing is exposed.
        assert!(state.refresh_exposed_checks(ports.clone()).is_empty());
        assert!(state.exposed_checks.is_empty());
        let sidecar = |checks: bool| ServiceRegistration {
            kind: "connect-proxy".into(),
            id: "web-sidecar-proxy".into(),
            name: "web-sidecar-proxy".into(),
            address: "127.0.0.9".into(),
            proxy_json: Some(format!(
                r#"{{"DestinationServiceName":"web","DestinationServiceID":"web","Expose":{{"Checks":{checks}}}}}"#
            )),
            ..Default::default()
        };
        state.add_service(sidecar(true), Source::Api);
        for check in state.checks.values_mut() {
            check.synced_revision = check.revision;
        }
        assert!(state.refresh_exposed_checks(ports.clone()).is_empty());
        let port_of = |state: &LocalState, id: &str| state.exposed_checks.get(id).map(|e| e.port);
        assert_eq!(port_of(&state, "grpc"), Some(21500));
        assert_eq!(port_of(&state, "http"), Some(21501));
        assert_eq!(port_of(&state, "ttl"), None);
        assert_eq!(state.exposed_checks["http"].proxy_address, "127.0.0.9");
        // The catalog must learn the ports: both checks are out of sync, the TTL one not.
        assert!(!state.checks["http"].in_sync() && !state.checks["grpc"].in_sync());
        assert!(state.checks["ttl"].in_sync());
        let http = state.checks["http"].clone();
        assert_eq!(state.check_registration(&http, "n1").exposed_port, 21501);
        // A third exposed check finds the range used up.
        state.add_check(
            CheckSpec {
                id: "http2".into(),
                ..spec("http2", CheckKind::Http)
            },
            Source::Api,
            now,
        );
        assert_eq!(state.refresh_exposed_checks(ports.clone()), vec!["http2"]);
        // Ports stay put across refreshes, and go back when the sidecar stops exposing.
        state.remove_check("grpc");
        assert!(state.refresh_exposed_checks(ports.clone()).is_empty());
        assert_eq!(port_of(&state, "http"), Some(21501));
        assert_eq!(port_of(&state, "http2"), Some(21500));
        state.add_service(sidecar(false), Source::Api);
        assert!(state.refresh_exposed_checks(ports).is_empty());
        assert!(state.exposed_checks.is_empty());
        let http = state.checks["http"].clone();
        assert_eq!(state.check_registration(&http, "n1").exposed_port, 0);
    }
}
