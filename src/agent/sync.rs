//! Anti-entropy: keeps the catalog's copy of this node equal to the local state.
//!
//! Edge-triggered: every local change (a registration, a check turning critical) triggers
//! a round that sends only what is out of sync. Periodic: every `ae_interval` (and whenever a
//! leader appears) a full sync reads the catalog's view of this node, marks whatever differs
//! out of sync — including entries deleted behind the agent's back — and schedules removal
//! of catalog entries the agent does not have; then it sends the difference.
//!
//! Operations go out in [`CatalogOp::Batch`]es of at most [`SYNC_BATCH_OPS`]; an entry is
//! marked synced only for the revision that was sent, and only when its batch (or, after a
//! refusal, its own retry) was accepted. Output-only check changes wait up to
//! `check_update_interval` (Consul's write-load guard); status changes go at once.
//!
//! A round that fails (no server or leader answered, or the store refused something) is
//! retried after an exponential back-off from 1 s to 15 s, during which local changes wait
//! too; the failure is logged once, then at most every 30 s, and the recovery once.

use super::local::LocalState;
use super::{node_in_sync, self_node_registration, Agent};
use crate::cluster::reconcile::CONSUL_SERVICE;
use crate::cluster::servers::{left_out_note, Backoff, LogLimiter};
use crate::consul::metrics::Counter;
use crate::store::catalog::apply::{check_row, instance_row};
use crate::store::catalog::rows::fold;
use crate::store::catalog::{
    CatalogOp, HealthCheck, Registration, RowArc, ServiceInstance, SERF_CHECK_ID,
};
use crate::store::{CatalogResult, Command};
use crate::telemetry;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Operations per anti-entropy batch (one Raft entry each).
pub const SYNC_BATCH_OPS: usize = 128;
/// How often the loop looks again while no leader (on a client, no server) is known.
const NOT_WRITABLE_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Pause after a first failed round; it doubles with every further failure up to
/// `RETRY_DELAY_MAX` (Consul's `retryFailIntv`), so an outage costs a few attempts a minute.
const RETRY_DELAY_FIRST: Duration = Duration::from_secs(1);
const RETRY_DELAY_MAX: Duration = Duration::from_secs(15);
/// A failing anti-entropy is logged at its first failure, then at most once per this
/// interval (with the number of failures left out), and once when it recovers.
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// What to mark synced once an operation is accepted.
#[derive(Clone, Debug)]
enum Mark {
    Node,
    Service(String, u64),
    Check(String, u64),
    DeletedService(String),
    DeletedCheck(String),
}

/// Random spread of full syncs across agents, as Consul staggers them.
fn jittered(interval: Duration) -> Duration {
    let spread = interval.as_millis() as u64 / 8;
    interval + Duration::from_millis(rand::random_range(0..spread.max(1)))
}

pub async fn sync_loop(agent: Rc<Agent>, wake: flume::Receiver<()>) {
    let mut next_full = Instant::now();
    let mut was_writable = false;
    let mut backoff = Backoff::new(RETRY_DELAY_FIRST, RETRY_DELAY_MAX);
    let mut failure_log = LogLimiter::new(FAILURE_LOG_INTERVAL);
    // While failing, local changes wait for the back-off too: each one would otherwise
    // cost a round against servers that are not there.
    let mut retry_at: Option<Instant> = None;
    loop {
        if agent.shard.shutting_down() {
            return;
        }
        let round = agent.sync.requested.get();
        let writable = agent.client.can_write();
        if writable && !was_writable {
            // A leader appeared (or this agent started): compare everything.
            next_full = Instant::now();
            retry_at = None;
        }
        was_writable = writable;
        let backing_off = retry_at.is_some_and(|at| Instant::now() < at);
        if writable && !backing_off {
            let outcome = if Instant::now() >= next_full {
                let outcome = full_sync(&agent).await;
                next_full = Instant::now() + jittered(agent.ae_interval);
                outcome
            } else {
                sync_changes(&agent).await
            };
            match outcome {
                Ok(()) => {
                    backoff.succeeded();
                    retry_at = None;
                    if failure_log.recovered() {
                        log::info!("agent: anti-entropy synced again");
                    }
                }
                Err(reason) => {
                    let delay = backoff.failed(rand::random_range(0.0..1.0));
                    retry_at = Some(Instant::now() + delay);
                    if let Some(left_out) = failure_log.allow(Instant::now()) {
                        log::warn!(
                            "agent: anti-entropy sync failed: {reason}; retrying in {delay:?}{}",
                            left_out_note(left_out)
                        );
                    }
                }
            }
        }
        // Waiting handlers are released even when nothing could be sent: their change is
        // recorded locally and anti-entropy retries it.
        agent.sync.done.set(round.max(agent.sync.done.get()));
        agent.sync.finished.notify_all();
        let now = Instant::now();
        let mut wait = next_full.saturating_duration_since(now);
        if let Some(due) = next_deferred_due(&agent.state.borrow(), agent.check_update_interval) {
            wait = wait.min(due.saturating_duration_since(now));
        }
        if !writable {
            wait = wait.min(NOT_WRITABLE_POLL_INTERVAL);
        }
        if let Some(at) = retry_at {
            wait = at.saturating_duration_since(now);
        } else if agent.sync.requested.get() > round {
            continue;
        }
        let _ = monoio::time::timeout(wait.max(Duration::from_millis(1)), wake.recv_async()).await;
    }
}

/// When the earliest deferred output-only change becomes due.
fn next_deferred_due(state: &LocalState, defer: Duration) -> Option<Instant> {
    state
        .checks
        .values()
        .filter(|c| !c.in_sync() && c.output_only_change)
        .filter_map(|c| c.last_synced.map(|at| at + defer))
        .min()
}

/// Compares the catalog's view of this node with the local state, marks the differences,
/// and sends them. Errs with the first reason the catalog could not be read or written.
pub async fn full_sync(agent: &Agent) -> Result<(), String> {
    telemetry::incr(Counter::FullSyncs);
    let config = agent.config.borrow().clone();
    let node_name = config.node_name.clone();
    let current = match agent.client.node_state(&node_name).await {
        Ok(current) => current,
        Err(e) => return Err(format!("cannot read the catalog: {e}")),
    };
    let wanted_node = self_node_registration(&config, &agent.identity);
    {
        let mut state = agent.state.borrow_mut();
        state.node_in_sync = node_in_sync(&current, &wanted_node);
        let catalog = CatalogRows {
            node: arcstr::ArcStr::from(node_name.as_str()),
            services: current
                .services
                .iter()
                .map(|s| (fold(&s.id).into_owned(), s.clone()))
                .collect(),
            checks: current
                .checks
                .iter()
                .map(|c| (fold(&c.check_id).into_owned(), c.clone()))
                .collect(),
        };
        mark_services(&mut state, &catalog, config.server);
        mark_checks(&mut state, &catalog, &node_name);
    }
    sync_changes(agent).await
}

/// The catalog's rows of this node, by folded id.
struct CatalogRows {
    node: arcstr::ArcStr,
    services: HashMap<String, RowArc<ServiceInstance>>,
    checks: HashMap<String, RowArc<HealthCheck>>,
}

/// Services: equal rows are in sync, others are sent again; catalog services this agent
/// does not have are removed — except the `consul` service, which the leader keeps for
/// servers.
fn mark_services(state: &mut LocalState, catalog: &CatalogRows, server: bool) {
    let mut local_service_keys = Vec::new();
    for service in state.services.values_mut() {
        let key = fold(&service.registration.id).into_owned();
        let in_catalog = catalog.services.get(&key).is_some_and(|row| {
            row.same_as(&instance_row(
                &service.registration,
                catalog.node.clone(),
                Some(row),
                None,
                row.modify_index,
            ))
        });
        service.synced_revision = if in_catalog { service.revision } else { 0 };
        local_service_keys.push(key);
    }
    for (key, row) in &catalog.services {
        let leader_managed = server && *row.id == *CONSUL_SERVICE;
        if !local_service_keys.contains(key) && !leader_managed {
            state.deleted_services.insert(row.id.to_string());
        }
    }
}

/// Checks: equal rows are in sync, a pending output-only change may keep waiting, others
/// are sent again; catalog checks this agent does not have are removed, unless their
/// service is being removed (they go with it) or they are the serf health check.
fn mark_checks(state: &mut LocalState, catalog: &CatalogRows, node_name: &str) {
    let mut local_check_keys = Vec::new();
    let registrations: Vec<(String, _)> = state
        .checks
        .values()
        .map(|c| (c.id.clone(), state.check_registration(c, node_name)))
        .collect();
    for (id, registration) in registrations {
        let key = fold(&id).into_owned();
        let service_row = catalog
            .services
            .get(&fold(&registration.service_id).into_owned());
        let verdict = catalog.checks.get(&key).map(|row| {
            let built = check_row(
                &registration,
                catalog.node.clone(),
                service_row.map(|s| &**s),
                Some(row),
                row.modify_index,
            );
            let same = row.same_as(&built);
            let only_output_differs = !same && {
                let mut without_output = built.clone();
                without_output.output = row.output.clone();
                row.same_as(&without_output)
            };
            (same, only_output_differs)
        });
        let check = state.checks.get_mut(&id).expect("listed above");
        match verdict {
            Some((true, _)) => {
                check.synced_revision = check.revision;
                check.output_only_change = false;
            }
            // A pending output-only change may keep waiting.
            Some((false, true)) if check.output_only_change => {}
            _ => {
                check.synced_revision = 0;
                check.output_only_change = false;
            }
        }
        local_check_keys.push(key);
    }
    for (key, row) in &catalog.checks {
        if !local_check_keys.contains(key) && !row.check_id.eq_ignore_ascii_case(SERF_CHECK_ID) {
            // A service check goes with its service when that is being removed too.
            let owner_removed = !row.service_id.is_empty()
                && state
                    .deleted_services
                    .iter()
                    .any(|s| s.eq_ignore_ascii_case(&row.service_id));
            if !owner_removed {
                state.deleted_checks.insert(row.check_id.to_string());
            }
        }
    }
}

/// One catalog operation of a sync round, the marks it clears once accepted, and the
/// token it is sent with (`None`: the agent's).
type SyncOp = (CatalogOp, Vec<Mark>, Option<String>);

/// Sends everything out of sync. Errs with the first reason some of it could not be sent.
pub async fn sync_changes(agent: &Agent) -> Result<(), String> {
    let now = Instant::now();
    // Only the node's registration is needed: cloning the whole configuration for it cost
    // every round (one per burst of registrations) a deep copy.
    let node = self_node_registration(&agent.config.borrow(), &agent.identity);
    let ops = out_of_sync_ops(
        &agent.state.borrow(),
        &node,
        now,
        agent.check_update_interval,
    );
    if ops.is_empty() {
        return Ok(());
    }
    telemetry::incr(Counter::SyncRounds);
    let mut first_failure: Option<String> = None;
    let mut ops = ops.into_iter().peekable();
    while let Some(first) = ops.next() {
        // A batch is sent with one token: consecutive operations with the same one.
        let token = first.2.clone();
        let mut batch = vec![first];
        while batch.len() < SYNC_BATCH_OPS && ops.peek().is_some_and(|next| next.2 == token) {
            batch.extend(ops.next());
        }
        if let Err(reason) = send_batch(agent, batch, token.as_deref(), now).await {
            first_failure.get_or_insert(reason);
        }
    }
    match first_failure {
        None => Ok(()),
        Some(reason) => Err(reason),
    }
}

/// Each operation the local state needs, with the token it is sent with: a service's or
/// check's own token (a removed one's until its deregistration is accepted), else the
/// agent's. A service goes with its checks; a deferred output-only check change waits.
fn out_of_sync_ops(
    state: &LocalState,
    node: &Registration,
    now: Instant,
    check_update_interval: Duration,
) -> Vec<SyncOp> {
    let service_token = |id: &str| state.service_tokens.get(id).cloned();
    let check_token = |id: &str, service_id: &str| {
        state
            .check_tokens
            .get(id)
            .cloned()
            .or_else(|| service_token(service_id))
    };
    let mut ops = Vec::new();
    if !state.node_in_sync {
        ops.push((
            CatalogOp::Register(Box::new(node.clone())),
            vec![Mark::Node],
            None,
        ));
    }
    for id in &state.deleted_checks {
        ops.push((
            CatalogOp::Deregister {
                node: node.node.clone(),
                service_id: String::new(),
                check_id: id.clone(),
            },
            vec![Mark::DeletedCheck(id.clone())],
            check_token(id, ""),
        ));
    }
    for id in &state.deleted_services {
        ops.push((
            CatalogOp::Deregister {
                node: node.node.clone(),
                service_id: id.clone(),
                check_id: String::new(),
            },
            vec![Mark::DeletedService(id.clone())],
            service_token(id),
        ));
    }
    let base = |checks| Registration {
        skip_node_update: true,
        checks,
        ..node.clone()
    };
    let mut sent_with_service = Vec::new();
    for service in state.services.values().filter(|s| !s.in_sync()) {
        let id = &service.registration.id;
        let checks: Vec<_> = state.checks_of(id).collect();
        let mut mark = vec![Mark::Service(id.clone(), service.revision)];
        mark.extend(checks.iter().map(|c| Mark::Check(c.id.clone(), c.revision)));
        sent_with_service.extend(checks.iter().map(|c| c.id.clone()));
        let mut registration = base(
            checks
                .iter()
                .map(|c| state.check_registration(c, &node.node))
                .collect(),
        );
        registration.service = Some(service.registration.clone());
        ops.push((
            CatalogOp::Register(Box::new(registration)),
            mark,
            service_token(id),
        ));
    }
    for check in state.checks.values() {
        if check.in_sync()
            || sent_with_service.contains(&check.id)
            || LocalState::check_deferred(check, now, check_update_interval)
        {
            continue;
        }
        ops.push((
            CatalogOp::Register(Box::new(base(vec![
                state.check_registration(check, &node.node)
            ]))),
            vec![Mark::Check(check.id.clone(), check.revision)],
            check_token(&check.id, &check.service_id),
        ));
    }
    ops
}

/// Sends one batch with its token and clears the marks of what the catalog accepted. A
/// refused batch of several is sent again one operation at a time, to find the ones that
/// succeed on their own; errs with the first reason one was refused.
async fn send_batch(
    agent: &Agent,
    batch: Vec<SyncOp>,
    token: Option<&str>,
    now: Instant,
) -> Result<(), String> {
    debug_assert!(!batch.is_empty() && batch.len() <= SYNC_BATCH_OPS);
    telemetry::add(Counter::SyncOperations, batch.len() as u64);
    let (batch_ops, batch_marks): (Vec<CatalogOp>, Vec<Vec<Mark>>) =
        batch.into_iter().map(|(op, mark, _)| (op, mark)).unzip();
    // Encoded from the batch itself, not a copy: the operations are needed again only
    // when the batch is refused.
    let sent = Command::Catalog(CatalogOp::Batch(batch_ops));
    let answer = agent.client.apply_command_as(&sent, token).await;
    let Command::Catalog(CatalogOp::Batch(batch_ops)) = sent else {
        unreachable!("the batch built above")
    };
    match catalog_result(answer) {
        Ok(()) => {
            for mark in batch_marks.into_iter().flatten() {
                apply_mark(agent, mark, now);
            }
            Ok(())
        }
        Err(reason) if batch_ops.len() == 1 => {
            telemetry::incr(Counter::SyncErrors);
            Err(reason)
        }
        Err(_) => {
            // Re-sending the accepted ones is harmless (identical registrations change
            // nothing).
            let mut first_failure = None;
            for (op, mark) in batch_ops.into_iter().zip(batch_marks) {
                match catalog_result(agent.client.apply_as(op, token).await) {
                    Ok(()) => {
                        for m in mark {
                            apply_mark(agent, m, now);
                        }
                    }
                    Err(reason) => {
                        telemetry::incr(Counter::SyncErrors);
                        first_failure.get_or_insert(reason);
                    }
                }
            }
            first_failure.map_or(Ok(()), Err)
        }
    }
}

fn apply_mark(agent: &Agent, mark: Mark, now: Instant) {
    let mut state = agent.state.borrow_mut();
    match mark {
        Mark::Node => state.node_in_sync = true,
        Mark::Service(id, revision) => {
            if let Some(service) = state.services.get_mut(&id) {
                if service.revision == revision {
                    service.synced_revision = revision;
                }
            }
        }
        Mark::Check(id, revision) => {
            if let Some(check) = state.checks.get_mut(&id) {
                if check.revision == revision {
                    check.synced_revision = revision;
                    check.output_only_change = false;
                    check.last_synced = Some(now);
                }
            }
        }
        Mark::DeletedService(id) => {
            state.deleted_services.remove(&id);
            // Its token was kept for the deregistration (unless it is registered again).
            if !state.services.contains_key(&id) {
                state.service_tokens.remove(&id);
            }
        }
        Mark::DeletedCheck(id) => {
            state.deleted_checks.remove(&id);
            if !state.checks.contains_key(&id) {
                state.check_tokens.remove(&id);
            }
        }
    }
}

/// A catalog command's answer as success or the reason it was refused.
fn catalog_result(result: CatalogResult) -> Result<(), String> {
    result.into_refusal()
}
