//! What every datacenter's leader does for the federation states (Consul's
//! `leader_federation_state_ae.go` and `federation_state_replication.go`).
//!
//! Two tasks per leadership:
//! - **anti-entropy**, in every datacenter: this datacenter's row — every `mesh-gateway`
//!   instance of the local catalog with its node and checks — is kept current in the
//!   primary. The primary's leader writes it through its own Raft log; a secondary's sends
//!   it to the primary ([`primary::apply_federation_state`]) and compares against the copy
//!   replication brought back. It writes only when the row would say something new
//!   (`FederationState::is_same`), at most once per [`SYNC_INTERVAL_MIN`] (Consul's 5 s),
//!   and looks again only when the catalog or the federation table moved.
//! - **replication**, in a secondary: a blocking list of the primary's rows
//!   ([`primary::federation_states`]); each answer is applied as its differences — an upsert
//!   for every row whose primary `ModifyIndex` this datacenter has not seen, a delete for
//!   every local row the primary no longer has.
//!
//! A third task keeps the gateway locator (`federation_locator`) current: it reads the
//! federation states every [`LOOK_INTERVAL`], takes each replication round's outcome, and
//! resolves `primary_gateways` every `primary_gateways_interval` while the locator needs
//! the fallback (unless `disable_primary_gateway_fallback`). It logs what the locator
//! would dial; dialing through gateways is part 2 of issue 40.
//!
//! A datacenter that has never had a mesh gateway writes no row (an empty row would tell the
//! other datacenters nothing; Consul writes one anyway — `docs/decisions.md`).
//!
//! Invariants: only the leader writes; a row written by anti-entropy names this datacenter
//! only; a task of a past leadership stops at its next step (its generation moved on).

use super::connect::primary;
use super::federation_locator::{GatewayLocator, PRIMARY_GATEWAYS_INTERVAL_DEFAULT};
use super::Agent;
use crate::api::connect::is_secondary;
use crate::consul::federation_state;
use crate::store::federation::{self, FederationState, FederationStateOp};
use crate::store::{Command, CommandResult, Table};
use arcstr::ArcStr;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Least time between two anti-entropy writes (Consul's default
/// `FederationStateAntiEntropySyncInterval`).
pub const SYNC_INTERVAL_MIN: Duration = Duration::from_secs(5);
/// How often anti-entropy looks whether the catalog or the federation table moved: a
/// comparison of three indexes, the catalog scanned only when one moved.
pub const LOOK_INTERVAL: Duration = Duration::from_secs(1);
/// A failed round is retried after this, doubling up to [`RETRY_MAX`].
pub const RETRY_MIN: Duration = Duration::from_secs(1);
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// What the leader has started in its current leadership, and the gateway locator every
/// server keeps.
#[derive(Default)]
pub struct FederationDuties {
    /// Counts leaderships: a task runs while it equals the value the task started with.
    generation: Rc<Cell<u64>>,
    started: Cell<bool>,
    /// The gateway locator, once started: it runs on every server for as long as the
    /// agent does (a follower's trusts its local gateways; the leader's also hears how
    /// replication from the primary goes).
    locator: RefCell<Option<Rc<RefCell<GatewayLocator>>>>,
}

impl FederationDuties {
    /// Stops this leadership's tasks (at their next step); the locator stays, without the
    /// replication signal only a leader has.
    pub fn lost_leadership(&self) {
        if self.started.replace(false) {
            self.generation.set(self.generation.get() + 1);
            if let Some(locator) = self.locator.borrow().as_ref() {
                locator.borrow_mut().forget_replication();
            }
        }
    }

    /// Starts the gateway locator once (on every server, leader or not).
    pub fn follow(&self, agent: &Rc<Agent>) -> Rc<RefCell<GatewayLocator>> {
        if let Some(locator) = self.locator.borrow().as_ref() {
            return locator.clone();
        }
        let locator = Rc::new(RefCell::new(new_locator(&agent.config.borrow())));
        *self.locator.borrow_mut() = Some(locator.clone());
        monoio::spawn(locate(agent.clone(), locator.clone()));
        locator
    }

    /// One round of the leader: starts the tasks once per leadership.
    pub fn run(&self, agent: &Rc<Agent>) {
        if self.started.replace(true) {
            return;
        }
        let mine = self.generation.get();
        let locator = self.follow(agent);
        let task = Task {
            agent: agent.clone(),
            generation: self.generation.clone(),
            mine,
            locator,
        };
        if is_secondary(&agent.config.borrow()) {
            monoio::spawn(replicate(task.clone()));
        }
        monoio::spawn(anti_entropy(task));
    }

    /// The gateway locator, once started.
    pub fn locator(&self) -> Option<Rc<RefCell<GatewayLocator>>> {
        self.locator.borrow().clone()
    }
}

/// `primary_gateways` as configured.
fn primary_gateways(config: &crate::config::AgentConfig) -> Vec<String> {
    match config.raw.get("primary_gateways") {
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect(),
        Some(serde_json::Value::String(one)) if !one.is_empty() => vec![one.clone()],
        _ => Vec::new(),
    }
}

fn new_locator(config: &crate::config::AgentConfig) -> GatewayLocator {
    let interval = config
        .raw_str("primary_gateways_interval")
        .and_then(|t| crate::proto::duration::parse_go_duration(t).ok())
        .unwrap_or(PRIMARY_GATEWAYS_INTERVAL_DEFAULT);
    let disabled = config
        .raw
        .get("disable_primary_gateway_fallback")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    GatewayLocator::new(
        &config.datacenter,
        &config.pending.primary_datacenter,
        disabled,
        interval,
    )
}

/// One leadership's view: whether it still holds.
#[derive(Clone)]
struct Task {
    agent: Rc<Agent>,
    generation: Rc<Cell<u64>>,
    mine: u64,
    locator: Rc<RefCell<GatewayLocator>>,
}

impl Task {
    fn current(&self) -> bool {
        !self.agent.shard.shutting_down()
            && self.generation.get() == self.mine
            && self.agent.shard.is_leader()
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Keeps the locator current for as long as the agent runs, and with
/// `connect.enable_mesh_gateway_wan_federation` hands its choice to the router after
/// every look.
async fn locate(agent: Rc<Agent>, locator: Rc<RefCell<GatewayLocator>>) {
    let configured = primary_gateways(&agent.config.borrow());
    let mut read_at = None;
    while !agent.shard.shutting_down() {
        let version = agent.shard.current_version();
        let index = federation::index(&version);
        if read_at != Some(index) {
            read_at = Some(index);
            let states = federation::list(&version).map(|s| &**s);
            if locator.borrow_mut().update_from_states(states) {
                log_choice(
                    &locator.borrow(),
                    &agent.config.borrow().pending.primary_datacenter,
                );
            }
        }
        let due = locator
            .borrow()
            .fallback_refresh_due(!configured.is_empty(), now_ms());
        if due {
            let resolved = resolve(configured.clone()).await;
            if locator
                .borrow_mut()
                .refresh_fallback(resolved.clone(), now_ms())
            {
                log::info!(
                    "federation: updated fallback list of primary mesh gateways: {resolved:?}"
                );
            }
        }
        if agent.pools.router.dials_through_gateways() {
            let primary = agent.config.borrow().pending.primary_datacenter.clone();
            agent.pools.router.set_gateways(choices(
                &locator.borrow(),
                &agent.pools.router,
                &primary,
            ));
        }
        monoio::time::sleep(LOOK_INTERVAL).await;
    }
}

/// The gateways the locator offers toward every datacenter the router knows, the primary
/// (which a secondary may reach before the WAN pool shows it), and every datacenter the
/// federation states name (which a restarted server rejoins through them before its WAN
/// pool shows them). Addresses that do not parse as `ip:port` are left out.
fn choices(
    locator: &GatewayLocator,
    router: &crate::cluster::router::Router,
    primary: &str,
) -> std::collections::BTreeMap<String, Vec<std::net::SocketAddr>> {
    let mut datacenters = router.other_datacenters_by_distance();
    if !primary.is_empty() && primary != router.local_datacenter() {
        datacenters.push(primary.to_string());
    }
    datacenters.extend(locator.federated_datacenters().iter().cloned());
    datacenters.sort();
    datacenters.dedup();
    datacenters
        .into_iter()
        .map(|datacenter| {
            let gateways = locator
                .gateways_for(&datacenter)
                .iter()
                .filter_map(|address| address.parse().ok())
                .collect();
            (datacenter, gateways)
        })
        .collect()
}

fn log_choice(locator: &GatewayLocator, primary: &str) {
    log::info!(
        "federation: mesh gateways toward the primary {primary:?}: {:?}",
        locator.gateways_for(primary)
    );
}

/// Most addresses one `primary_gateways` entry may resolve to.
const ADDRESSES_PER_ENTRY_MAX: usize = 64;

/// Resolves `host:port` entries on a thread of their own (name lookups block); an entry
/// that does not resolve is logged and left out.
async fn resolve(entries: Vec<String>) -> Vec<String> {
    let (sender, receiver) = flume::bounded(1);
    let spawned = std::thread::Builder::new()
        .name("primary-gateways".into())
        .spawn(move || {
            use std::net::ToSocketAddrs;
            let mut out = Vec::new();
            for entry in &entries {
                match entry.to_socket_addrs() {
                    Ok(found) => out.extend(
                        found
                            .take(ADDRESSES_PER_ENTRY_MAX)
                            .map(|address| address.to_string()),
                    ),
                    Err(e) => {
                        log::warn!("federation: cannot resolve primary gateway {entry:?}: {e}")
                    }
                }
            }
            let _ = sender.send(out);
        });
    if let Err(e) = spawned {
        log::warn!("federation: cannot start resolving primary_gateways: {e}");
        return Vec::new();
    }
    receiver.recv_async().await.unwrap_or_default()
}

fn now_rfc3339() -> String {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    crate::proto::rfc3339::format_ns(ns)
}

/// What anti-entropy has to do, given the stored row and the catalog's: the row to write,
/// or nothing. Pure.
pub fn needed_write(
    stored: Option<&FederationState>,
    current: FederationState,
) -> Option<FederationState> {
    match stored {
        None if current.mesh_gateways.is_empty() => None,
        Some(stored) if stored.is_same(&current) => None,
        _ => Some(current),
    }
}

async fn anti_entropy(task: Task) {
    let agent = &task.agent;
    let (datacenter, primary) = {
        let config = agent.config.borrow();
        (
            config.datacenter.clone(),
            config.pending.primary_datacenter.clone(),
        )
    };
    let mut looked_at = None;
    let mut last_write: Option<Instant> = None;
    let mut retry = RETRY_MIN;
    while task.current() {
        let version = agent.shard.current_version();
        let moved = (
            version.max_table_index(&[Table::Nodes, Table::Services, Table::Checks]),
            federation::index(&version),
        );
        if looked_at == Some(moved) {
            monoio::time::sleep(LOOK_INTERVAL).await;
            continue;
        }
        let current = federation_state::from_catalog(&version, &datacenter, "");
        let Some(mut row) = needed_write(
            federation::get(&version, &datacenter).map(|s| &**s),
            current,
        ) else {
            looked_at = Some(moved);
            continue;
        };
        if let Some(wait) = last_write.and_then(|at| SYNC_INTERVAL_MIN.checked_sub(at.elapsed())) {
            monoio::time::sleep(wait).await;
            // Look again: the catalog may have moved while this waited.
            continue;
        }
        debug_assert_eq!(*row.datacenter, *datacenter, "only this datacenter's row");
        row.updated_at = ArcStr::from(now_rfc3339());
        last_write = Some(Instant::now());
        let written = if datacenter == primary {
            propose(agent, FederationStateOp::Upsert(Box::new(row))).await
        } else {
            primary::apply_federation_state(agent, &primary, &row).await
        };
        match written {
            Ok(()) => {
                log::info!(
                    "federation: state of {datacenter} synced ({} mesh gateways)",
                    row_len(agent, &datacenter)
                );
                looked_at = Some(moved);
                retry = RETRY_MIN;
            }
            Err(e) => {
                log::warn!(
                    "federation: error performing anti-entropy sync of federation state: {e}"
                );
                monoio::time::sleep(retry).await;
                retry = (retry * 2).min(RETRY_MAX);
            }
        }
    }
}

fn row_len(agent: &Agent, datacenter: &str) -> usize {
    federation::get(&agent.shard.current_version(), datacenter).map_or(0, |s| s.mesh_gateways.len())
}

async fn propose(agent: &Agent, op: FederationStateOp) -> Result<(), String> {
    match agent
        .shard
        .propose(Command::FederationState(op).encode())
        .await
        .into_command_result()
    {
        CommandResult::Error(reason) => Err(reason),
        _ => Ok(()),
    }
}

/// The writes that make this datacenter's rows the primary's `remote` rows: an upsert for
/// each row whose primary `ModifyIndex` differs from what this datacenter has (carrying
/// it as `PrimaryModifyIndex`), a delete for each row the primary no longer has. Pure.
pub fn differences(
    local: &[&FederationState],
    remote: Vec<FederationState>,
) -> Vec<FederationStateOp> {
    let mut ops = Vec::new();
    for local_row in local {
        if !remote.iter().any(|r| r.datacenter == local_row.datacenter) {
            ops.push(FederationStateOp::Delete {
                datacenter: local_row.datacenter.clone(),
            });
        }
    }
    for remote_row in remote {
        let seen = local
            .iter()
            .find(|l| l.datacenter == remote_row.datacenter)
            .map(|l| l.primary_modify_index);
        if seen == Some(remote_row.modify_index) {
            continue;
        }
        ops.push(FederationStateOp::Upsert(Box::new(FederationState {
            primary_modify_index: remote_row.modify_index,
            create_index: 0,
            modify_index: 0,
            ..remote_row
        })));
    }
    ops
}

async fn replicate(task: Task) {
    let agent = &task.agent;
    let primary = agent.config.borrow().pending.primary_datacenter.clone();
    log::info!("federation: replicating federation states from the primary datacenter {primary:?}");
    let mut index = 0;
    let mut retry = RETRY_MIN;
    while task.current() {
        let round = match primary::federation_states(agent, &primary, index).await {
            Ok((next, remote)) => apply_differences(&task, remote).await.map(|()| next),
            Err(e) => Err(e),
        };
        let before = task.locator.borrow().dial_primary_through_local_gateway();
        task.locator
            .borrow_mut()
            .replication_result(round.is_ok(), now_ms());
        if task.locator.borrow().dial_primary_through_local_gateway() != before {
            log_choice(&task.locator.borrow(), &primary);
        }
        match round {
            Ok(next) => {
                retry = RETRY_MIN;
                // An index that went backwards (the primary restored a snapshot) starts
                // the blocking reads over.
                index = if next < index { 0 } else { next };
            }
            Err(e) => {
                log::warn!("federation: error replicating federation states: {e}");
                monoio::time::sleep(retry).await;
                retry = (retry * 2).min(RETRY_MAX);
            }
        }
    }
}

async fn apply_differences(task: &Task, remote: Vec<FederationState>) -> Result<(), String> {
    let agent = &task.agent;
    agent.shard.catch_up();
    let version = agent.shard.current_version();
    let local: Vec<&FederationState> = federation::list(&version).map(|s| &**s).collect();
    let ops = differences(&local, remote);
    if !ops.is_empty() {
        log::debug!(
            "federation: applying {} replicated federation state changes",
            ops.len()
        );
    }
    for op in ops {
        if !task.current() {
            return Ok(());
        }
        propose(agent, op).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::federation::MeshGateway;

    fn row(
        dc: &str,
        gateways: usize,
        modify_index: u64,
        primary_modify_index: u64,
    ) -> FederationState {
        let gateway = MeshGateway {
            json: ArcStr::from(r#"{"Node":{}}"#),
            node: ArcStr::from("n"),
            service_id: ArcStr::from("gw"),
            wan_address: ArcStr::from("1.2.3.4:443"),
            lan_address: ArcStr::from("10.0.0.1:443"),
            wan_federation: true,
            healthy: true,
        };
        FederationState {
            datacenter: ArcStr::from(dc),
            mesh_gateways: vec![gateway; gateways],
            updated_at: ArcStr::from(""),
            primary_modify_index,
            create_index: 1,
            modify_index,
        }
    }

    #[test]
    fn anti_entropy_writes_only_what_changed() {
        // Nothing stored and no gateway: nothing to say.
        assert!(needed_write(None, row("dc2", 0, 0, 0)).is_none());
        assert!(needed_write(None, row("dc2", 1, 0, 0)).is_some());
        let stored = row("dc2", 1, 7, 7);
        assert!(needed_write(Some(&stored), row("dc2", 1, 0, 0)).is_none());
        // The last gateway gone: the row is written empty, not left stale.
        let write = needed_write(Some(&stored), row("dc2", 0, 0, 0)).unwrap();
        assert!(write.mesh_gateways.is_empty());
    }

    #[test]
    fn replication_applies_the_differences_only() {
        let dc1 = row("dc1", 1, 10, 10);
        let dc2 = row("dc2", 1, 12, 12);
        let stale = row("dc9", 1, 3, 3);
        let local = vec![&dc1, &dc2, &stale];
        // The primary: dc1 unchanged, dc2 moved to 15, dc3 new, dc9 gone.
        let remote = vec![
            row("dc1", 1, 10, 10),
            row("dc2", 2, 15, 15),
            row("dc3", 1, 14, 14),
        ];
        let ops = differences(&local, remote);
        assert_eq!(ops.len(), 3, "{ops:?}");
        assert!(matches!(&ops[0], FederationStateOp::Delete { datacenter } if datacenter == "dc9"));
        let upserted: Vec<_> = ops[1..]
            .iter()
            .map(|op| match op {
                FederationStateOp::Upsert(s) => {
                    assert_eq!((s.create_index, s.modify_index), (0, 0));
                    (s.datacenter.to_string(), s.primary_modify_index)
                }
                other => panic!("an upsert, not {other:?}"),
            })
            .collect();
        assert_eq!(upserted, [("dc2".to_string(), 15), ("dc3".to_string(), 14)]);
        // Nothing moved: nothing to do.
        assert!(differences(&[&dc1], vec![row("dc1", 1, 10, 10)]).is_empty());
    }
}
