//! What the leader does for the mesh, each time it runs its reconcile round: writes the
//! `config_entries.bootstrap` entries that do not exist yet (once per leadership, as
//! Consul's leader does when it establishes leadership); with Connect enabled, in the
//! primary datacenter makes the built-in CA's first root (EC P-256 by default, trust domain
//! `<cluster-id>.consul`) if the store has none, and in a secondary one starts the task that
//! replicates the primary's roots and keeps this datacenter's intermediate (`secondary`);
//! everywhere it drops rotated-out roots once their certificates expired.
//!
//! Every write here is idempotent against a racing or earlier leader: bootstrap writes only
//! missing entries in one command, the CA's initialization is refused by the store once a
//! configuration exists, and a replication is refused when the active root moved under it.

use super::secondary;
use crate::agent::Agent;
use crate::api::connect::is_secondary;
use crate::store::mesh::ca::{CaConfig, CaOp, PROVIDER_CONSUL};
use crate::store::mesh::config_entry::{self, ConfigEntryOp};
use crate::store::{Command, CommandResult};
use crate::tls::connect_ca;
use arcstr::ArcStr;
use std::cell::Cell;
use std::rc::Rc;

/// What the leader has done in its current leadership.
#[derive(Default)]
pub struct LeaderDuties {
    bootstrapped: Cell<bool>,
    /// Counts leaderships: a secondary's replication task runs while it equals the value
    /// the task started with.
    generation: Rc<Cell<u64>>,
    /// Whether this leadership started the replication task.
    replicating: Cell<bool>,
    /// The federation states' anti-entropy and replication (`agent::federation`), which
    /// run whether or not Connect is enabled, as Consul's do.
    federation: crate::agent::federation::FederationDuties,
}

impl LeaderDuties {
    /// Forgets what was done when leadership is lost, so a later leadership redoes it, and
    /// stops this leadership's tasks.
    pub fn lost_leadership(&self) {
        self.bootstrapped.set(false);
        self.federation.lost_leadership();
        if self.replicating.replace(false) {
            self.generation.set(self.generation.get() + 1);
        }
    }

    /// One round on a server that does not lead: what every server keeps running (the
    /// gateway locator) is started once.
    pub fn follow(&self, agent: &Rc<Agent>) {
        self.federation.follow(agent);
    }

    /// One round, on the leader.
    pub async fn run(&self, agent: &Rc<Agent>) {
        if !self.bootstrapped.get() {
            self.bootstrapped.set(bootstrap_entries(agent).await);
        }
        self.federation.run(agent);
        let config = agent.config.borrow().clone();
        if !config.connect.enabled {
            return;
        }
        if is_secondary(&config) {
            if !self.replicating.replace(true) {
                monoio::spawn(secondary::replicate(
                    agent.clone(),
                    self.generation.clone(),
                    self.generation.get(),
                ));
            }
        } else {
            initialize_ca(agent).await;
        }
        prune_roots(agent).await;
    }
}

fn unix_now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

async fn propose_logged(agent: &Agent, command: Command, what: &str) {
    match agent
        .shard
        .propose(command.encode())
        .await
        .into_command_result()
    {
        CommandResult::Error(reason) => log::warn!("connect: {what} failed: {reason}"),
        CommandResult::Bool(true) => log::info!("connect: {what}"),
        _ => {}
    }
}

/// Makes the first root when the store has no CA yet.
async fn initialize_ca(agent: &Agent) {
    agent.shard.catch_up();
    if agent.shard.current_version().mesh.ca.config.is_some() {
        return;
    }
    let settings = agent.config.borrow().connect.ca.clone();
    let cluster_id = uuid::Uuid::new_v4().to_string();
    let made = match connect_ca::make_root(&connect_ca::RootSpec {
        cluster_id: cluster_id.clone(),
        key_bits: settings.private_key_bits,
        ttl: settings.root_cert_ttl,
        now_unix_s: unix_now_s(),
    }) {
        Ok(made) => made,
        Err(e) => {
            log::error!("connect: cannot make the CA root: {e}");
            return;
        }
    };
    let config = CaConfig {
        cluster_id: ArcStr::from(cluster_id.as_str()),
        provider: ArcStr::from(PROVIDER_CONSUL),
        config_json: ArcStr::from(crate::api::connect::initial_ca_config(
            agent
                .config
                .borrow()
                .raw
                .get("connect")
                .and_then(|c| c.get("ca_config"))
                .and_then(|c| c.as_object()),
        )),
        force_without_cross_signing: false,
        create_index: 0,
        modify_index: 0,
    };
    let root = crate::api::connect::ca_root(made, &config.trust_domain());
    let command = Command::Ca(CaOp::Initialize {
        config: Box::new(config),
        root: Box::new(root),
    });
    propose_logged(agent, command, "initialized the built-in CA").await;
}

/// Drops rotated-out roots whose certificates have expired.
async fn prune_roots(agent: &Agent) {
    let now = unix_now_s();
    let version = agent.shard.current_version();
    let expired = version
        .mesh
        .ca
        .roots
        .iter()
        .any(|r| !r.active && r.not_after_unix_s <= now);
    if expired {
        propose_logged(
            agent,
            Command::Ca(CaOp::PruneRoots { now_unix_s: now }),
            "pruned expired CA roots",
        )
        .await;
    }
}

/// Writes the missing bootstrap entries; `true` when nothing is left to do.
async fn bootstrap_entries(agent: &Agent) -> bool {
    let config = agent.config.borrow().clone();
    let wanted = &config.connect.bootstrap_entries;
    if wanted.is_empty() {
        return true;
    }
    agent.shard.catch_up();
    let version = agent.shard.current_version();
    let missing: Vec<_> = wanted
        .iter()
        .filter(|e| config_entry::get(&version, e.kind, &e.name).is_none())
        .cloned()
        .collect();
    if missing.is_empty() {
        return true;
    }
    let command = Command::ConfigEntry(ConfigEntryOp::Bootstrap { entries: missing });
    match agent
        .shard
        .propose(command.encode())
        .await
        .into_command_result()
    {
        CommandResult::Error(reason) => {
            log::warn!("connect: writing bootstrap config entries failed: {reason}");
            false
        }
        _ => {
            log::info!("connect: bootstrap config entries written");
            true
        }
    }
}
