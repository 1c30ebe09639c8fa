//! The agent side: services and checks registered on this agent, the check runners, and
//! anti-entropy into the catalog; plus this node's own registration and, on the leader,
//! the reconciliation of gossip members into the catalog.
//!
//! Threading. The agent runs as monoio tasks on shard 0, next to that shard's connections:
//! [`Agent`] lives in an `Rc` there and its state in `RefCell`s, so nothing here takes a
//! lock. Agent endpoints on any shard send an [`AgentCall`](crate::api::agent_channel::AgentCall)
//! over the bounded agent channel and await the reply; check runners, the sync loop and the reaper are
//! tasks on the same thread. Everything the agent writes or reads in the catalog goes
//! through [`catalog_client::CatalogClient`] — the seam a client agent redirects to a server.
//!
//! Invariants: a runner only reports for the check generation it was started with, so a
//! replaced or removed check never receives a stale result; every local change bumps a
//! revision that anti-entropy must see accepted before the entry counts as synced.

pub mod api;
pub mod auto_encrypt;
pub mod catalog_client;
pub mod checks;
pub mod child;
pub mod connect;
pub mod datacenter_read;
pub mod federation;
pub mod federation_locator;
pub mod local;
pub mod persist;
pub mod reload;
pub mod signal;
pub mod sync;
pub mod telemetry;

use crate::api::agent_channel::AgentCall;
use crate::cluster::reconcile;
use crate::cluster::Pools;
use crate::config::AgentConfig;
use crate::consul::body::Obj;
use crate::consul::definition::{self, CheckKind, CheckSpec, ServiceDefinition};
use crate::consul::metrics::Counter;
use crate::consul::node_state::NodeState;
use crate::shard::runtime::Identity;
use crate::shard::Shard;
use crate::store::catalog::{CatalogOp, Registration, Status};
use crate::store::CatalogResult;
use crate::telemetry::incr as telemetry_counter;
use catalog_client::CatalogClient;
use local::{LocalState, Source};
use signal::Signal;
use std::cell::{Cell, RefCell};
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the agent checks its node registration and, on the leader, reconciles members.
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(1);
/// How often a non-leader looks for leadership to start reconciling.
pub const LEADERSHIP_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How often TTL deadlines are checked.
pub const REAP_INTERVAL: Duration = Duration::from_secs(1);
/// Consul's `check_reap_interval`: how often services critical for longer than their
/// `deregister_critical_service_after` are deregistered.
pub const CHECK_REAP_INTERVAL_DEFAULT: Duration = Duration::from_secs(30);
/// Consul's `check_deregister_interval_min`: a shorter `deregister_critical_service_after`
/// is raised to it (with a warning), so a service is never reaped on a brief failure.
pub const CHECK_DEREGISTER_INTERVAL_MIN_DEFAULT: Duration = Duration::from_secs(60);
/// Consul's default anti-entropy full-sync interval (`ae_interval`).
pub const AE_INTERVAL_DEFAULT: Duration = Duration::from_secs(60);
/// Consul's default `check_update_interval`: output-only check changes wait this long.
pub const CHECK_UPDATE_INTERVAL_DEFAULT: Duration = Duration::from_secs(300);
/// Script checks run at most this long when no timeout is given (Consul's default).
pub const SCRIPT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// How often alias checks re-evaluate what they alias.
pub const ALIAS_INTERVAL: Duration = Duration::from_secs(1);

/// The node metadata every agent publishes (Consul's `consul-network-segment` and
/// `consul-version`), plus `node_meta` from the config.
pub fn node_meta(config: &AgentConfig) -> Vec<(String, String)> {
    let mut meta = vec![
        ("consul-network-segment".to_string(), String::new()),
        (
            "consul-version".to_string(),
            crate::CONSUL_API_VERSION.to_string(),
        ),
    ];
    if let Some(serde_json::Value::Object(extra)) = config.raw.get("node_meta") {
        for (k, v) in extra {
            if let Some(v) = v.as_str() {
                meta.retain(|(existing, _)| existing != k);
                meta.push((k.clone(), v.to_string()));
            }
        }
    }
    meta
}

/// Consul's default tagged addresses for an agent's node: `lan` its advertised address,
/// `wan` the one other datacenters reach it at (`advertise_addr_wan`), each also under its
/// family's name.
pub fn node_tagged_addresses(lan: IpAddr, wan: IpAddr) -> Vec<(String, String)> {
    let family = |address: IpAddr| if address.is_ipv4() { "ipv4" } else { "ipv6" };
    vec![
        ("lan".to_string(), lan.to_string()),
        (format!("lan_{}", family(lan)), lan.to_string()),
        ("wan".to_string(), wan.to_string()),
        (format!("wan_{}", family(wan)), wan.to_string()),
    ]
}

/// This agent's node registration (no services or checks), as anti-entropy syncs it.
pub fn self_node_registration(config: &AgentConfig, identity: &Identity) -> Registration {
    let address = config.advertise();
    Registration {
        id: identity.node_id.clone(),
        node: config.node_name.clone(),
        address: address.to_string(),
        datacenter: config.datacenter.clone(),
        tagged_addresses: node_tagged_addresses(address, config.advertise_wan()),
        node_meta: node_meta(config),
        ..Default::default()
    }
}

/// Whether the catalog's node row already matches `wanted` (node fields only).
pub fn node_in_sync(current: &NodeState, wanted: &Registration) -> bool {
    let Some(node) = &current.node else {
        return false;
    };
    let pairs = |list: &[(String, String)]| {
        let mut v: Vec<(String, String)> = list.to_vec();
        v.sort();
        v.dedup_by(|a, b| a.0 == b.0);
        v
    };
    let have_tagged: Vec<(String, String)> = node
        .tagged_addresses
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let have_meta: Vec<(String, String)> = node
        .meta
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    *node.id == *wanted.id
        && *node.name == *wanted.node
        && *node.address == *wanted.address
        && *node.datacenter == *wanted.datacenter
        && have_tagged == pairs(&wanted.tagged_addresses)
        && have_meta == pairs(&wanted.node_meta)
}

fn duration_setting(config: &AgentConfig, key: &str, default: Duration) -> Duration {
    config
        .raw_str(key)
        .and_then(|t| crate::proto::duration::parse_go_duration(t).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(default)
}

/// Whether this agent runs script checks from a source (Consul's two switches).
pub fn scripts_allowed(config: &AgentConfig, source: Source) -> Result<(), String> {
    let flag = |key: &str| {
        config
            .raw
            .get(key)
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    };
    let remote = flag("enable_script_checks");
    let local = remote || flag("enable_local_script_checks");
    match source {
        Source::Api if !remote => Err("Scripts are disabled on this agent from remote calls; to enable, configure 'enable_script_checks' to true".to_string()),
        Source::Config if !local => Err("Scripts are disabled on this agent from local sources; to enable, configure 'enable_script_checks' or 'enable_local_script_checks' to true".to_string()),
        _ => Ok(()),
    }
}

/// Services and standalone checks from the config's `services` and `checks` lists.
pub fn config_definitions(
    config: &AgentConfig,
) -> Result<(Vec<ServiceDefinition>, Vec<CheckSpec>), String> {
    let mut services = Vec::new();
    if let Some(list) = config.raw.get("services") {
        let items = list.as_array().ok_or("services: expected a list")?;
        for (i, item) in items.iter().enumerate() {
            let obj = Obj::new(item).map_err(|e| format!("services[{i}]: {e}"))?;
            let def = definition::parse_service_definition(&obj)
                .map_err(|e| format!("services[{i}]: {}", e.message))?;
            for check in &def.checks {
                if check.kind == CheckKind::Script {
                    scripts_allowed(config, Source::Config)
                        .map_err(|e| format!("services[{i}]: {e}"))?;
                }
            }
            services.push(def);
        }
    }
    // Sidecars of config-file services take ports in order from the sidecar range.
    let mut used: Vec<u16> = services.iter().map(|d| d.service.port as u16).collect();
    let mut sidecars = Vec::new();
    for def in &services {
        let Some(raw) = &def.sidecar else { continue };
        let port = sidecar_port(config, &used, None)
            .map_err(|e| format!("service {:?}: {e}", def.service.id))?;
        let sidecar = definition::expand_sidecar(&def.service, raw, port)
            .map_err(|e| format!("service {:?}: {}", def.service.id, e.message))?;
        used.push(sidecar.service.port as u16);
        sidecars.push(sidecar);
    }
    services.extend(sidecars);
    let mut checks = Vec::new();
    if let Some(list) = config.raw.get("checks") {
        let items = list.as_array().ok_or("checks: expected a list")?;
        for (i, item) in items.iter().enumerate() {
            let obj = Obj::new(item).map_err(|e| format!("checks[{i}]: {e}"))?;
            let check = definition::parse_check_registration(&obj)
                .map_err(|e| format!("checks[{i}]: {}", e.message))?;
            if check.kind == CheckKind::Script {
                scripts_allowed(config, Source::Config).map_err(|e| format!("checks[{i}]: {e}"))?;
            }
            checks.push(check);
        }
    }
    Ok((services, checks))
}

/// The port a sidecar gets when its definition names none: the one it already has, else the
/// lowest of `ports.sidecar_min_port..=sidecar_max_port` no other sidecar uses (Consul's
/// rule and messages).
pub fn sidecar_port(
    config: &AgentConfig,
    used: &[u16],
    existing: Option<u16>,
) -> Result<u16, String> {
    if let Some(port) = existing.filter(|p| *p > 0) {
        return Ok(port);
    }
    let (min, max) = (
        config.connect.sidecar_min_port,
        config.connect.sidecar_max_port,
    );
    if min == 0 {
        return Err("no port provided for sidecar_service and sidecar_min_port is 0".to_string());
    }
    (min..=max).find(|p| !used.contains(p)).ok_or_else(|| {
        "no port provided for sidecar_service and none left in the configured range".to_string()
    })
}

/// Rounds of anti-entropy requested and completed, so handlers can wait for theirs.
#[derive(Default)]
pub struct SyncControl {
    pub requested: Cell<u64>,
    pub done: Cell<u64>,
    pub finished: Signal,
    wake: RefCell<Option<flume::Sender<()>>>,
}

/// Milliseconds since the Unix epoch: persisted TTL states must outlive the process, so
/// their expiry is a wall-clock time.
fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// The persisted record of a check registered through the API.
/// Keeps `token` for `id`, or forgets the entry's token when it is empty.
fn set_token(tokens: &mut std::collections::BTreeMap<String, String>, id: &str, token: &str) {
    if token.is_empty() {
        tokens.remove(id);
    } else {
        tokens.insert(id.to_string(), token.to_string());
    }
}

fn check_record(spec: &CheckSpec, token: &str) -> persist::CheckRecord {
    persist::CheckRecord {
        id: spec.id.clone(),
        name: spec.name.clone(),
        notes: spec.notes.clone(),
        service_id: spec.service_id.clone(),
        spec: Some(spec.clone()),
        token: token.to_string(),
    }
}

/// The agent, on shard 0.
pub struct Agent {
    pub shard: Rc<Shard>,
    /// The gossip pools: the leader reconciles the LAN pool's members into the catalog.
    pub pools: Arc<Pools>,
    pub client: CatalogClient,
    pub config: RefCell<Arc<AgentConfig>>,
    pub identity: Identity,
    pub state: RefCell<LocalState>,
    pub sync: SyncControl,
    /// Notified on every change visible through the agent API.
    pub changed: Signal,
    pub ae_interval: Duration,
    /// Output-only check changes wait this long before they sync; zero syncs them at once.
    pub check_update_interval: Duration,
    /// The floor of `deregister_critical_service_after` (Consul's non-user setting, which
    /// praetor reads from the config so tests need not wait a minute).
    pub check_deregister_interval_min: Duration,
    /// How often critical services are reaped (Consul's non-user setting, likewise).
    pub check_reap_interval: Duration,
    /// When services were last reaped.
    pub last_service_reap: std::cell::Cell<Instant>,
    /// Where API registrations are kept across restarts (agents with a data directory).
    pub persist: Option<persist::Persister>,
    /// The metrics windows, sinks and stream subscribers.
    pub telemetry: telemetry::Telemetry,
    /// Leaf certificates of this agent's services, kept fresh.
    pub leaves: connect::leaf::LeafCerts,
}

impl Agent {
    /// Queues changes to the persisted records when the agent has a data directory. They
    /// are durable once [`Agent::persisted`] returns; a failure is logged, and the change
    /// stays in effect in this run but will not survive a restart.
    fn persist(&self, ops: Vec<persist::Op>) {
        if let Some(persister) = &self.persist {
            persister.queue(ops);
        }
    }

    /// Sequence number of the last persisted change queued (0 without a data directory).
    pub fn persist_queued(&self) -> u64 {
        self.persist.as_ref().map_or(0, |p| p.queued())
    }

    /// Waits until every change queued so far is durable: an API call that changed the
    /// local state answers only then, as Consul's agent answers after writing its files.
    pub async fn persisted(&self) {
        if let Some(persister) = &self.persist {
            persister.wait_durable().await;
        }
    }

    /// Persists a check registered through the API (or a maintenance check) on its own.
    fn persist_check(&self, check: &persist::CheckRecord) {
        self.persist(vec![persist::Op::check(check)]);
    }

    /// Forgets a removed check: its record and its TTL state.
    fn purge_check(&self, id: &str) {
        self.persist(vec![
            persist::Op::remove_check_record(id),
            persist::Op::remove_check_state(id),
        ]);
    }

    /// Drops the persisted record of a check a config file now defines, keeping its TTL
    /// state (config-file TTL checks keep theirs across restarts too, as in Consul).
    fn drop_check_record(&self, id: &str) {
        self.persist(vec![persist::Op::remove_check_record(id)]);
    }

    /// Records the state a TTL update left a check in, valid for one TTL from now, so a
    /// restart within it keeps the status (Consul's `persistCheckState`).
    pub fn persist_check_state(&self, id: &str) {
        let state = {
            let state = self.state.borrow();
            let Some(check) = state.checks.get(id) else {
                return;
            };
            let Some(spec) = check.spec.as_ref().filter(|s| s.kind == CheckKind::Ttl) else {
                return;
            };
            persist::CheckState {
                check_id: id.to_string(),
                status: check.status,
                output: check.output.clone(),
                expires_unix_ms: unix_now_ms().saturating_add(spec.ttl().as_millis() as u64),
            }
        };
        self.persist(vec![persist::Op::check_state(&state)]);
    }

    /// Gives a TTL check the state its last update persisted, if that has not expired.
    fn restore_check_state(&self, spec: &CheckSpec) {
        if spec.kind != CheckKind::Ttl {
            return;
        }
        let Some(persister) = &self.persist else {
            return;
        };
        let Some(saved) = persister.load_check_state(&spec.id, unix_now_ms()) else {
            return;
        };
        let update = self.state.borrow_mut().set_check(
            &spec.id,
            saved.status,
            &saved.output,
            Instant::now(),
        );
        assert!(
            update != local::CheckUpdate::Ignored,
            "a check's state is restored only after the check"
        );
    }

    /// Registers what earlier runs persisted: services, then their checks (maintenance
    /// included), each from its own record. A record whose ID the config files define
    /// is dropped, as Consul prefers the config; a check whose service is gone too.
    fn restore_persisted(self: &Rc<Self>) {
        let Some(persister) = &self.persist else {
            return;
        };
        let store = persister.store();
        let config = self.config.borrow().clone();
        for (service, token) in store.load_services() {
            let id = service.id.clone();
            if self.state.borrow().services.contains_key(&id) {
                log::info!(
                    "agent: service {id:?} is defined in the config; dropping its persisted copy"
                );
                self.persist(vec![persist::Op::remove_service(&id)]);
                continue;
            }
            let mut state = self.state.borrow_mut();
            state.add_service(service, Source::Api);
            if !token.is_empty() {
                state.service_tokens.insert(id, token);
            }
        }
        for record in store.load_checks() {
            let id = record.id.clone();
            let owner_missing = !record.service_id.is_empty()
                && !self
                    .state
                    .borrow()
                    .services
                    .contains_key(&record.service_id);
            let reason = if self.state.borrow().checks.contains_key(&id) {
                Some("it is defined in the config")
            } else if owner_missing {
                Some("its service is gone")
            } else if record.spec.as_ref().is_some_and(|s| {
                s.kind == CheckKind::Script && scripts_allowed(&config, Source::Api).is_err()
            }) {
                Some("script checks are disabled")
            } else {
                None
            };
            if let Some(reason) = reason {
                log::warn!("agent: not restoring check {id:?}: {reason}");
                self.purge_check(&id);
                continue;
            }
            self.set_check_token(&id, &record.token);
            match record.spec {
                Some(mut spec) => {
                    // Consul starts a restored check critical, so an instance that may be
                    // unhealthy does not serve traffic before its check has run; a TTL
                    // check then takes the state its last update persisted.
                    spec.initial_status = Status::Critical;
                    spec.initial_output = String::new();
                    let generation = self.state.borrow_mut().add_check(
                        spec.clone(),
                        Source::Api,
                        Instant::now(),
                    );
                    self.restore_check_state(&spec);
                    self.start_runner(spec, generation);
                }
                None => self.state.borrow_mut().add_maintenance_check(
                    &id,
                    &record.name,
                    &record.service_id,
                    &record.notes,
                ),
            }
        }
        self.refresh_exposed_checks();
        self.notify_changed();
    }

    pub fn node_name(&self) -> String {
        self.config.borrow().node_name.clone()
    }

    /// Asks the sync loop for a round of anti-entropy.
    pub fn trigger_sync(&self) -> u64 {
        let ticket = self.sync.requested.get() + 1;
        self.sync.requested.set(ticket);
        if let Some(wake) = self.sync.wake.borrow().as_ref() {
            let _ = wake.try_send(());
        }
        ticket
    }

    /// Triggers a sync round and waits (bounded) until it ran, as Consul's agent endpoints
    /// do before answering; a failed or slow sync is retried by anti-entropy later.
    pub async fn sync_now(&self) {
        const SYNC_WAIT_MAX: Duration = Duration::from_secs(5);
        let ticket = self.trigger_sync();
        let deadline = Instant::now() + SYNC_WAIT_MAX;
        while self.sync.done.get() < ticket {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return;
            }
            let _ = monoio::time::timeout(remaining, self.sync.finished.wait()).await;
        }
    }

    fn notify_changed(&self) {
        self.changed.notify_all();
    }

    /// Re-derives which checks a local sidecar exposes once registrations changed
    /// ([`LocalState::refresh_exposed_checks`]); a check left without a port is logged in
    /// Consul's words and keeps probing its own target.
    fn refresh_exposed_checks(&self) {
        let ports = {
            let config = self.config.borrow();
            config.connect.expose_min_port..=config.connect.expose_max_port
        };
        let unplaced = self.state.borrow_mut().refresh_exposed_checks(ports);
        for check in unplaced {
            log::error!(
                "agent: error exposing check {check:?}: no ports available to expose '{check}'"
            );
        }
    }

    /// Adds a service and its checks, replacing an existing one with the same ID. Without
    /// `replace_existing_checks` the service keeps checks the new definition does not
    /// name (Consul's rule); with it, they go. An API registration is persisted as one
    /// service record plus one record per check; a config-file one is not, and replaces
    /// a persisted copy of the same ID.
    pub fn add_service(
        self: &Rc<Self>,
        def: ServiceDefinition,
        source: Source,
        replace_existing_checks: bool,
    ) {
        let now = Instant::now();
        let id = def.service.id.clone();
        let mut started = Vec::new();
        let mut dropped = Vec::new();
        {
            let mut state = self.state.borrow_mut();
            state.add_service(def.service.clone(), source);
            if replace_existing_checks {
                let keep: Vec<&str> = def.checks.iter().map(|c| c.id.as_str()).collect();
                dropped = state
                    .checks_of(&id)
                    .filter(|c| !c.is_maintenance() && !keep.contains(&c.id.as_str()))
                    .map(|c| c.id.clone())
                    .collect();
                for check in &dropped {
                    state.remove_check(check);
                }
            }
            for check in &def.checks {
                self.warn_below_deregister_floor(check);
                let generation = state.add_check(check.clone(), source, now);
                started.push((check.clone(), generation));
            }
        }
        match source {
            Source::Api => {
                let token = self.service_token(&id);
                let mut ops = vec![persist::Op::service(&def.service, &token)];
                ops.extend(
                    def.checks
                        .iter()
                        .map(|c| persist::Op::check(&check_record(c, &token))),
                );
                self.persist(ops);
            }
            Source::Config => {
                let mut ops = vec![persist::Op::remove_service(&id)];
                ops.extend(
                    def.checks
                        .iter()
                        .map(|c| persist::Op::remove_check_record(&c.id)),
                );
                self.persist(ops);
            }
        }
        for check in dropped {
            self.purge_check(&check);
        }
        for (check, generation) in started {
            self.restore_check_state(&check);
            self.start_runner(check, generation);
        }
        self.refresh_exposed_checks();
        self.notify_changed();
    }

    /// Adds or replaces a check; persisted when it came through the API.
    pub fn add_check(self: &Rc<Self>, check: CheckSpec, source: Source) {
        self.warn_below_deregister_floor(&check);
        let generation = self
            .state
            .borrow_mut()
            .add_check(check.clone(), source, Instant::now());
        match source {
            Source::Api => {
                let token = self.check_token(&check.id);
                self.persist_check(&check_record(&check, &token));
            }
            Source::Config => self.drop_check_record(&check.id),
        }
        self.restore_check_state(&check);
        self.start_runner(check, generation);
        self.refresh_exposed_checks();
        self.notify_changed();
    }

    /// Consul's warning for a `deregister_critical_service_after` below the floor it is
    /// raised to (`LocalState::services_to_reap` applies the floor).
    fn warn_below_deregister_floor(&self, check: &CheckSpec) {
        if let Some(after) = check.deregister_critical_after() {
            if after < self.check_deregister_interval_min {
                log::warn!(
                    "agent: check {:?} has deregister interval below minimum: minimum_interval={:?}",
                    check.id,
                    self.check_deregister_interval_min
                );
            }
        }
    }

    /// Puts a service (`service_id` non-empty) or the node into maintenance: a critical
    /// check with the reason as its notes, persisted like any API check.
    pub fn add_maintenance(&self, id: &str, name: &str, service_id: &str, reason: &str) {
        self.state
            .borrow_mut()
            .add_maintenance_check(id, name, service_id, reason);
        self.persist_check(&persist::CheckRecord {
            id: id.to_string(),
            name: name.to_string(),
            notes: reason.to_string(),
            service_id: service_id.to_string(),
            spec: None,
            token: String::new(),
        });
        self.notify_changed();
    }

    /// The ACL token a service was registered with through the API (empty: none).
    pub fn service_token(&self, id: &str) -> String {
        let state = self.state.borrow();
        state.service_tokens.get(id).cloned().unwrap_or_default()
    }

    /// A check's token: its own, else its service's (a check registered with its service
    /// carries the service's token, as in Consul).
    pub fn check_token(&self, id: &str) -> String {
        let state = self.state.borrow();
        let own = state.check_tokens.get(id);
        let service = || {
            let owner = &state.checks.get(id)?.service_id;
            state.service_tokens.get(owner)
        };
        own.or_else(service).cloned().unwrap_or_default()
    }

    /// Records the token an API registration of a service came with, before it is added
    /// (empty: none, which forgets an earlier registration's token).
    pub fn set_service_token(&self, id: &str, token: &str) {
        set_token(&mut self.state.borrow_mut().service_tokens, id, token);
    }

    /// Records the token an API registration of a check came with, before it is added.
    pub fn set_check_token(&self, id: &str, token: &str) {
        set_token(&mut self.state.borrow_mut().check_tokens, id, token);
    }

    /// `def` and, when it asks for one, its expanded sidecar (port allocated among this
    /// agent's proxies, kept across re-registrations).
    pub fn with_sidecar(
        &self,
        def: ServiceDefinition,
    ) -> Result<Vec<ServiceDefinition>, definition::DefinitionError> {
        let Some(raw) = def.sidecar.clone() else {
            return Ok(vec![def]);
        };
        let sidecar_id = definition::sidecar_id(&def.service.id);
        let (used, existing) = {
            let state = self.state.borrow();
            let used: Vec<u16> = state
                .services
                .values()
                .filter(|s| {
                    s.registration.kind == "connect-proxy" && s.registration.id != sidecar_id
                })
                .map(|s| s.registration.port as u16)
                .collect();
            let existing = state
                .services
                .get(&sidecar_id)
                .map(|s| s.registration.port as u16);
            (used, existing)
        };
        let config = self.config.borrow().clone();
        let port = sidecar_port(&config, &used, existing).map_err(|message| {
            definition::DefinitionError {
                status: 400,
                message,
            }
        })?;
        let sidecar = definition::expand_sidecar(&def.service, &raw, port)?;
        Ok(vec![def, sidecar])
    }

    pub fn remove_service(&self, id: &str) -> bool {
        // A sidecar registered with its service goes with it, as in Consul.
        let sidecar = definition::sidecar_id(id);
        let has_sidecar = self
            .state
            .borrow()
            .services
            .get(&sidecar)
            .is_some_and(|s| s.registration.kind == "connect-proxy");
        if has_sidecar && sidecar != id {
            self.remove_service(&sidecar);
        }
        let checks: Vec<String> = self
            .state
            .borrow()
            .checks_of(id)
            .map(|c| c.id.clone())
            .collect();
        let removed = self.state.borrow_mut().remove_service(id);
        if removed {
            self.persist(vec![persist::Op::remove_service(id)]);
            for check in checks {
                self.purge_check(&check);
            }
            self.refresh_exposed_checks();
            self.notify_changed();
        }
        removed
    }

    pub fn remove_check(&self, id: &str) -> bool {
        let removed = self.state.borrow_mut().remove_check(id);
        if removed {
            self.purge_check(id);
            self.refresh_exposed_checks();
            self.notify_changed();
        }
        removed
    }

    /// Applies a status/output update to a check (TTL updates, runner results after
    /// thresholds) and schedules the sync it needs.
    pub fn apply_update(&self, update: local::CheckUpdate) {
        match update {
            local::CheckUpdate::StatusChanged => {
                telemetry_counter(Counter::CheckStatusChanges);
                self.notify_changed();
                self.trigger_sync();
            }
            local::CheckUpdate::OutputChanged => {
                self.notify_changed();
                self.trigger_sync();
            }
            local::CheckUpdate::Unchanged | local::CheckUpdate::Ignored => {}
        }
    }

    /// Whether the runner of `id` at `generation` should keep going.
    fn runner_current(&self, id: &str, generation: u64) -> bool {
        !self.shard.shutting_down()
            && self
                .state
                .borrow()
                .checks
                .get(id)
                .is_some_and(|c| c.generation == generation)
    }

    /// Starts the task that runs a check (for a TTL check, its timer).
    pub fn start_runner(self: &Rc<Self>, spec: CheckSpec, generation: u64) {
        if spec.kind == CheckKind::Ttl {
            monoio::spawn(self.clone().ttl_timer(spec, generation));
            return;
        }
        let agent = self.clone();
        monoio::spawn(async move {
            let interval = match spec.kind {
                CheckKind::Alias => ALIAS_INTERVAL,
                _ => spec.interval(),
            };
            // Consul staggers the first run over the interval so checks do not run in step.
            let stagger =
                Duration::from_millis(rand::random_range(0..interval.as_millis().max(1) as u64));
            monoio::time::sleep(stagger).await;
            while agent.runner_current(&spec.id, generation) {
                let (status, output) = agent.probe(&spec).await;
                telemetry_counter(Counter::CheckRuns);
                if !agent.runner_current(&spec.id, generation) {
                    return;
                }
                let update = agent.state.borrow_mut().record_result(
                    &spec.id,
                    generation,
                    status,
                    &output,
                    Instant::now(),
                );
                agent.apply_update(update);
                monoio::time::sleep(interval).await;
            }
        });
    }

    async fn probe(&self, spec: &CheckSpec) -> checks::ProbeResult {
        let def = &spec.definition;
        // A check a sidecar exposes is probed through the sidecar's listener for it, as
        // Consul's agent probes its `ProxyHTTP`/`ProxyGRPC` target.
        let exposed = self.state.borrow().exposed_checks.get(&spec.id).cloned();
        match spec.kind {
            CheckKind::Http => {
                let timeout = spec.timeout();
                let max = spec.output_max_bytes();
                match exposed {
                    Some(exposed) => {
                        let mut def = def.clone();
                        def.http =
                            checks::via_listener(&def.http, &exposed.proxy_address, exposed.port);
                        checks::http::probe(&def, timeout, max).await
                    }
                    None => checks::http::probe(def, timeout, max).await,
                }
            }
            CheckKind::Tcp => checks::tcp(&def.tcp, spec.timeout()).await,
            CheckKind::Udp => checks::udp(&def.udp, spec.timeout()).await,
            CheckKind::Grpc => {
                let target = match exposed {
                    Some(exposed) => {
                        checks::via_listener(&def.grpc, &exposed.proxy_address, exposed.port)
                    }
                    None => def.grpc.clone(),
                };
                checks::grpc::probe(&target, spec.timeout()).await
            }
            CheckKind::H2ping => checks::h2ping::probe(def, spec.timeout()).await,
            CheckKind::Script => {
                let timeout = if def.timeout_ns > 0 {
                    spec.timeout()
                } else {
                    SCRIPT_TIMEOUT_DEFAULT
                };
                checks::script::probe(&def.script_args, timeout, spec.output_max_bytes()).await
            }
            CheckKind::Alias => self.alias_status(spec).await,
            CheckKind::Ttl => (Status::Critical, "TTL expired".to_string()),
        }
    }

    /// Consul's alias check: the worst status among the aliased service's checks and the
    /// node checks of its node (local state for this node, the catalog for others — read
    /// from a server on a client agent).
    async fn alias_status(&self, spec: &CheckSpec) -> checks::ProbeResult {
        let def = &spec.definition;
        let node = if def.alias_node.is_empty() {
            self.node_name()
        } else {
            def.alias_node.clone()
        };
        let local =
            def.alias_node.is_empty() || def.alias_node.eq_ignore_ascii_case(&self.node_name());
        let target = if local {
            self.local_alias_target(spec)
        } else {
            match self.client.node_state(&node).await {
                Ok(state) => AliasTarget::from_node_state(&state, &def.alias_service),
                Err(e) => {
                    return (
                        Status::Critical,
                        format!("Failed to query alias target: {e}"),
                    )
                }
            }
        };
        let (status, message, service_found) = target.worst_status(&def.alias_service);
        if !def.alias_service.is_empty() && !service_found && !target.service_exists {
            return (
                Status::Critical,
                format!(
                    "Service {} could not be found on node {node}",
                    def.alias_service
                ),
            );
        }
        (status, message)
    }

    /// The alias target on this node, from the local state (the alias check itself left out).
    fn local_alias_target(&self, spec: &CheckSpec) -> AliasTarget {
        let state = self.state.borrow();
        AliasTarget {
            service_exists: state
                .services
                .keys()
                .any(|id| id.eq_ignore_ascii_case(&spec.definition.alias_service)),
            checks: state
                .checks
                .values()
                .filter(|c| c.id != spec.id)
                .map(|c| AliasedCheck {
                    service_id: c.service_id.clone(),
                    name: c.name.clone(),
                    status: c.status,
                    output: c.output.clone(),
                })
                .collect(),
        }
    }

    /// A TTL check's timer: turns the check critical when its deadline passes without an
    /// update, at the deadline, as Consul's `CheckTTL` timer does; the reaper's sweep every
    /// [`REAP_INTERVAL`] is only a backstop. One task per check generation. It sleeps until
    /// the deadline it reads, and re-reads it on waking, since updates move it later; once
    /// the check has expired it looks again every TTL (at most every [`REAP_INTERVAL`]), which
    /// is before any later deadline, since an update sets one a whole TTL ahead.
    async fn ttl_timer(self: Rc<Self>, spec: CheckSpec, generation: u64) {
        debug_assert_eq!(spec.kind, CheckKind::Ttl);
        let idle = spec.ttl().min(REAP_INTERVAL).max(Duration::from_millis(1));
        while self.runner_current(&spec.id, generation) {
            let now = Instant::now();
            let deadline = self
                .state
                .borrow()
                .checks
                .get(&spec.id)
                .and_then(|c| c.ttl_deadline);
            let wait = match deadline {
                Some(deadline) if deadline > now => deadline - now,
                Some(_) => {
                    self.expire_ttl(&spec.id, now);
                    idle
                }
                None => idle,
            };
            monoio::time::sleep(wait).await;
        }
    }

    /// Turns a TTL check whose deadline passed critical, once.
    fn expire_ttl(&self, id: &str, now: Instant) {
        let due = self.state.borrow().checks.get(id).is_some_and(|c| {
            c.ttl_deadline.is_some_and(|d| now >= d) && c.status != Status::Critical
        });
        if due {
            let update =
                self.state
                    .borrow_mut()
                    .set_check(id, Status::Critical, "TTL expired", now);
            self.apply_update(update);
        }
    }

    /// Expires TTL checks and deregisters services critical for longer than their
    /// `deregister_critical_service_after`.
    fn reap(&self) {
        let now = Instant::now();
        let reap_services =
            now.saturating_duration_since(self.last_service_reap.get()) >= self.check_reap_interval;
        if reap_services {
            self.last_service_reap.set(now);
        }
        let (expired, doomed) = {
            let state = self.state.borrow();
            let doomed = if reap_services {
                state.services_to_reap(now, self.check_deregister_interval_min)
            } else {
                Vec::new()
            };
            (state.expired_ttls(now), doomed)
        };
        for id in expired {
            self.expire_ttl(&id, now);
        }
        for id in doomed {
            log::info!("agent: deregistering service {id:?}: critical for longer than deregister_critical_service_after");
            if self.remove_service(&id) {
                self.trigger_sync();
            }
        }
    }

    /// Loads `services` and `checks` from the config, replacing earlier config entries.
    pub fn load_config_definitions(self: &Rc<Self>, config: &AgentConfig) -> Result<(), String> {
        let (services, checks) = config_definitions(config)?;
        let service_ids: Vec<String> = services.iter().map(|s| s.service.id.clone()).collect();
        let check_ids: Vec<String> = checks.iter().map(|c| c.id.clone()).collect();
        let (stale_services, stale_checks) = {
            let state = self.state.borrow();
            (
                state
                    .services
                    .values()
                    .filter(|s| {
                        s.source == Source::Config && !service_ids.contains(&s.registration.id)
                    })
                    .map(|s| s.registration.id.clone())
                    .collect::<Vec<_>>(),
                state
                    .checks
                    .values()
                    .filter(|c| {
                        c.source == Source::Config
                            && c.service_id.is_empty()
                            && !check_ids.contains(&c.id)
                    })
                    .map(|c| c.id.clone())
                    .collect::<Vec<_>>(),
            )
        };
        for id in stale_services {
            self.remove_service(&id);
        }
        for id in stale_checks {
            self.remove_check(&id);
        }
        for service in services {
            // An unchanged definition keeps its checks' state and runners.
            let unchanged = {
                let state = self.state.borrow();
                state
                    .services
                    .get(&service.service.id)
                    .is_some_and(|s| s.registration == service.service)
                    && service.checks.iter().all(|c| {
                        state
                            .checks
                            .get(&c.id)
                            .is_some_and(|have| have.spec.as_ref() == Some(c))
                    })
            };
            if !unchanged {
                self.add_service(service, Source::Config, true);
            }
        }
        for check in checks {
            let unchanged = self
                .state
                .borrow()
                .checks
                .get(&check.id)
                .is_some_and(|have| have.spec.as_ref() == Some(&check));
            if !unchanged {
                self.add_check(check, Source::Config);
            }
        }
        Ok(())
    }
}

/// Starts the agent's tasks on shard 0; `calls` are the agent endpoints' requests from
/// every shard.
pub async fn run(shard: Rc<Shard>, pools: Arc<Pools>, calls: flume::Receiver<AgentCall>) {
    let config = shard.shared().config.clone();
    let identity = shard.identity().clone();
    let client = CatalogClient::new(shard.clone(), pools.servers.clone());
    let agent = Rc::new(Agent {
        ae_interval: duration_setting(&config, "ae_interval", AE_INTERVAL_DEFAULT),
        check_update_interval: config
            .raw_str("check_update_interval")
            .and_then(|t| crate::proto::duration::parse_go_duration(t).ok())
            .unwrap_or(CHECK_UPDATE_INTERVAL_DEFAULT),
        check_deregister_interval_min: config
            .raw_str("check_deregister_interval_min")
            .and_then(|t| crate::proto::duration::parse_go_duration(t).ok())
            .unwrap_or(CHECK_DEREGISTER_INTERVAL_MIN_DEFAULT),
        check_reap_interval: duration_setting(
            &config,
            "check_reap_interval",
            CHECK_REAP_INTERVAL_DEFAULT,
        ),
        last_service_reap: std::cell::Cell::new(Instant::now()),
        shard: shard.clone(),
        pools,
        client,
        config: RefCell::new(config.clone()),
        identity,
        state: RefCell::new(LocalState::default()),
        sync: SyncControl::default(),
        changed: Signal::default(),
        persist: config.data_dir.as_deref().and_then(|dir| {
            persist::Persister::start(dir)
                .map_err(|e| log::error!("agent: cannot start the persister thread: {e}"))
                .ok()
        }),
        telemetry: telemetry::Telemetry::new(&config),
        leaves: Default::default(),
    });
    // Config first: a persisted record with an ID the config defines is dropped.
    if let Err(e) = agent.load_config_definitions(&config) {
        log::error!("agent: config services and checks not loaded: {e}");
    }
    agent.restore_persisted();
    let (wake_tx, wake_rx) = flume::bounded(1);
    *agent.sync.wake.borrow_mut() = Some(wake_tx);
    monoio::spawn(sync::sync_loop(agent.clone(), wake_rx));
    monoio::spawn(api::serve_calls(agent.clone(), calls));
    monoio::spawn(telemetry::run(agent.clone()));
    monoio::spawn(reconcile_loop(agent.clone()));
    loop {
        if shard.shutting_down() {
            return;
        }
        agent.reap();
        monoio::time::sleep(REAP_INTERVAL).await;
    }
}

async fn apply_logged(client: &CatalogClient, op: CatalogOp, what: &str) {
    match client.apply(op).await {
        CatalogResult::Written => log::debug!("agent: {what}"),
        CatalogResult::Refused(reason) => log::warn!("agent: {what} failed: {reason}"),
    }
}

/// On the leader: every gossip member (or, without gossip, this server alone) is a node
/// with a `serfHealth` check and, for servers, the `consul` service.
async fn reconcile_loop(agent: Rc<Agent>) {
    let mesh = connect::leader::LeaderDuties::default();
    loop {
        if agent.shard.shutting_down() {
            return;
        }
        // Until this server leads, look often, so a new leader reconciles promptly.
        if agent.shard.is_leader() {
            let started = std::time::Instant::now();
            reconcile_members(&agent).await;
            crate::telemetry::observe_since(
                crate::consul::metrics::Sample::LeaderReconcile,
                started,
            );
            mesh.run(&agent).await;
            monoio::time::sleep(RECONCILE_INTERVAL).await;
        } else {
            mesh.lost_leadership();
            mesh.follow(&agent);
            monoio::time::sleep(LEADERSHIP_POLL_INTERVAL).await;
        }
    }
}

async fn reconcile_members(agent: &Agent) {
    let config = agent.config.borrow().clone();
    let gossip_enabled = agent.pools.lan.is_some();
    let mut members = vec![reconcile::Member {
        name: config.node_name.clone(),
        id: agent.identity.node_id.clone(),
        address: config.advertise().to_string(),
        datacenter: config.datacenter.clone(),
        server_port: Some(config.ports.server.max(0) as u16),
        alive: true,
    }];
    if let Some(gossip) = &agent.pools.lan {
        for member in gossip.members().iter() {
            if member.name == config.node_name {
                continue;
            }
            if let Some(m) = reconcile::member_from_gossip(member, &config.datacenter) {
                members.push(m);
            }
        }
    }
    let Some(version) = agent.client.version() else {
        return;
    };
    for op in reconcile::member_ops(&version, &members) {
        apply_logged(&agent.client, op, "member reconciled into the catalog").await;
    }
    // Nodes that carry a serf check but are no longer members were reaped from the pool:
    // they leave the catalog, as Consul's leader removes them.
    if gossip_enabled {
        for op in reconcile::reaped_ops(&version, &members) {
            apply_logged(&agent.client, op, "reaped member removed from the catalog").await;
        }
    }
}

/// What an alias check reads of its target node: whether the aliased service exists there
/// (a service without checks of its own is found, and passing, as in Consul) and the
/// node's checks.
struct AliasTarget {
    service_exists: bool,
    checks: Vec<AliasedCheck>,
}

/// One check of the alias target's node.
struct AliasedCheck {
    service_id: String,
    name: String,
    status: Status,
    output: String,
}

impl AliasTarget {
    fn from_node_state(state: &NodeState, alias_service: &str) -> AliasTarget {
        AliasTarget {
            service_exists: state
                .services
                .iter()
                .any(|s| s.id.eq_ignore_ascii_case(alias_service)),
            checks: state
                .checks
                .iter()
                .map(|c| AliasedCheck {
                    service_id: c.service_id.to_string(),
                    name: c.name.to_string(),
                    status: c.status,
                    output: c.output.to_string(),
                })
                .collect(),
        }
    }

    /// The worst status among the node checks and the aliased service's checks (the first
    /// critical one decides), its message, and whether any check names the service.
    fn worst_status(&self, alias_service: &str) -> (Status, String, bool) {
        let mut status = Status::Passing;
        let mut message = "No checks found.".to_string();
        let mut service_found = false;
        for check in &self.checks {
            let matches_service =
                !alias_service.is_empty() && check.service_id.eq_ignore_ascii_case(alias_service);
            if !check.service_id.is_empty() && !matches_service {
                continue;
            }
            service_found |= matches_service;
            match check.status {
                Status::Critical | Status::Warning | Status::Maintenance => {
                    status = if check.status == Status::Warning {
                        Status::Warning
                    } else {
                        Status::Critical
                    };
                    message = format!("Aliased check {:?} failing: {}", check.name, check.output);
                    if status == Status::Critical {
                        break;
                    }
                }
                Status::Passing => {
                    if status == Status::Passing {
                        message = "All checks passing.".to_string();
                    }
                }
            }
        }
        (status, message, service_found)
    }
}
