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
//! refusal, its own retry) was accepted.
//!
//! Up to [`ROUNDS_IN_FLIGHT_MAX`] edge-triggered rounds are sent at once, so a change waits
//! for one Raft commit rather than for the round before it as well. A record has at most one
//! operation in flight: a round leaves out a record another round is sending — covered,
//! when that one sends the same revision; *deferred*, when the record changed since, and
//! then a round follows once the older operation is answered. So the catalog sees each
//! record's operations in the order they were made. A handler waiting for its change (ticket
//! `t`) is released when every round started before some round with ticket ≥ `t` and
//! nothing deferred has been answered. A full sync runs only while no round is in flight.
//! Output-only check changes wait up to `check_update_interval` (Consul's write-load
//! guard); status changes go at once.
//!
//! A round that fails (no server or leader answered, or the store refused something) is
//! retried after an exponential back-off from 1 s to 15 s, during which local changes wait
//! too; the failure is logged once, then at most every 30 s, and the recovery once.

use super::local::LocalState;
use super::{node_in_sync, self_node_registration, Agent};
use crate::cluster::reconcile::CONSUL_SERVICE;
use crate::cluster::servers::{left_out_note, Backoff, LogLimiter};
use crate::consul::metrics::Counter;
use crate::shard::telemetry;
use crate::store::catalog::apply::{check_row, instance_row};
use crate::store::catalog::rows::fold;
use crate::store::catalog::{CatalogOp, Registration, SERF_CHECK_ID};
use crate::store::{Command, CommandResult};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Operations per anti-entropy batch (one Raft entry each).
pub const SYNC_BATCH_OPS: usize = 128;
/// Edge-triggered rounds sent at once (each awaits its Raft commits).
pub const ROUNDS_IN_FLIGHT_MAX: usize = 4;
/// While a due full sync waits for rounds in flight, the loop looks again this often (an
/// answered round also wakes it).
const FULL_SYNC_DRAIN_POLL_INTERVAL: Duration = Duration::from_millis(100);
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

/// A record anti-entropy writes on its own: the node row, a service (with the checks sent
/// alongside it), a check.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Record {
    Node,
    Service(String),
    Check(String),
}

/// The operation a round is sending for a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sending {
    /// A registration of this revision (the node row has none: 0).
    Register(u64),
    Deregister,
}

/// One round started and not yet accounted for.
struct Round {
    serial: u64,
    /// `requested` when the round collected its operations.
    ticket: u64,
    /// It left out a record whose newer change must wait for an older operation.
    deferred: bool,
    /// `None` while sending; a round that had nothing to send, or was not sent (no leader,
    /// backing off), is answered at once with `Some(None)`.
    outcome: Option<Option<Result<(), String>>>,
}

/// Rounds in flight and the records they are sending.
#[derive(Default)]
struct Pipeline {
    sending: HashMap<Record, Sending>,
    /// Oldest first; a round leaves the front only once answered.
    rounds: VecDeque<Round>,
    next_serial: u64,
    /// The ticket the last round started with.
    last_started: u64,
    /// A round deferred a change: once some sending round is answered, another must run.
    deferred_pending: bool,
}

impl Pipeline {
    fn in_flight(&self) -> usize {
        self.rounds.iter().filter(|r| r.outcome.is_none()).count()
    }

    fn push(
        &mut self,
        ticket: u64,
        deferred: bool,
        outcome: Option<Option<Result<(), String>>>,
    ) -> u64 {
        self.next_serial += 1;
        self.rounds.push_back(Round {
            serial: self.next_serial,
            ticket,
            deferred,
            outcome,
        });
        self.last_started = self.last_started.max(ticket);
        self.next_serial
    }

    /// Records a sent round's outcome and frees its records. Returns whether a deferred
    /// change can now go (the caller triggers a round).
    fn answered(&mut self, serial: u64, records: &[Record], outcome: Result<(), String>) -> bool {
        for record in records {
            let freed = self.sending.remove(record);
            assert!(freed.is_some(), "a round frees only records it was sending");
        }
        let round = self
            .rounds
            .iter_mut()
            .find(|r| r.serial == serial)
            .expect("a round stays queued until answered");
        assert!(round.outcome.is_none(), "a round is answered once");
        round.outcome = Some(Some(outcome));
        std::mem::take(&mut self.deferred_pending)
    }

    /// Takes the answered rounds at the front: their outcomes, and the highest ticket a
    /// round without deferrals completed (handlers up to it may go).
    fn take_answered(&mut self) -> (Vec<Result<(), String>>, Option<u64>) {
        let mut outcomes = Vec::new();
        let mut released = None;
        while self.rounds.front().is_some_and(|r| r.outcome.is_some()) {
            let round = self.rounds.pop_front().expect("checked above");
            if let Some(Some(outcome)) = round.outcome {
                outcomes.push(outcome);
            }
            if !round.deferred {
                released = Some(released.unwrap_or(0).max(round.ticket));
            }
        }
        (outcomes, released)
    }
}

pub async fn sync_loop(agent: Rc<Agent>, wake: flume::Receiver<()>) {
    let pipeline = Rc::new(RefCell::new(Pipeline::default()));
    let mut next_full = Instant::now();
    let mut was_writable = false;
    let mut backoff = Backoff::new(RETRY_DELAY_FIRST, RETRY_DELAY_MAX);
    let mut failure_log = LogLimiter::new(FAILURE_LOG_INTERVAL);
    // While failing, local changes wait for the back-off too: each one would otherwise
    // cost a round against servers that are not there.
    let mut retry_at: Option<Instant> = None;
    let mut record_outcome =
        |outcome: Result<(), String>, retry_at: &mut Option<Instant>| match outcome {
            Ok(()) => {
                backoff.succeeded();
                *retry_at = None;
                if failure_log.recovered() {
                    log::info!("agent: anti-entropy synced again");
                }
            }
            Err(reason) => {
                let delay = backoff.failed(rand::random_range(0.0..1.0));
                *retry_at = Some(Instant::now() + delay);
                if let Some(left_out) = failure_log.allow(Instant::now()) {
                    log::warn!(
                        "agent: anti-entropy sync failed: {reason}; retrying in {delay:?}{}",
                        left_out_note(left_out)
                    );
                }
            }
        };
    // Handles the outcomes of the answered rounds at the front and releases their handlers.
    let settle = |record_outcome: &mut dyn FnMut(Result<(), String>)| {
        let (outcomes, released) = pipeline.borrow_mut().take_answered();
        for outcome in outcomes {
            record_outcome(outcome);
        }
        if let Some(ticket) = released {
            release(&agent, ticket);
        }
    };
    loop {
        if agent.shard.shutting_down() {
            return;
        }
        settle(&mut |outcome| record_outcome(outcome, &mut retry_at));
        let round = agent.sync.requested.get();
        let writable = agent.client.can_write();
        if writable && !was_writable {
            // A leader appeared (or this agent started): compare everything.
            next_full = Instant::now();
            retry_at = None;
        }
        was_writable = writable;
        let backing_off = retry_at.is_some_and(|at| Instant::now() < at);
        let full_due = Instant::now() >= next_full;
        if writable && !backing_off {
            if full_due {
                // A full sync rewrites what is marked in sync: it waits until no round is out.
                if pipeline.borrow().rounds.is_empty() {
                    let outcome = full_sync(&agent).await;
                    next_full = Instant::now() + jittered(agent.ae_interval);
                    record_outcome(outcome, &mut retry_at);
                    let mut pipeline = pipeline.borrow_mut();
                    pipeline.last_started = pipeline.last_started.max(round);
                    drop(pipeline);
                    release(&agent, round);
                }
            } else if pipeline.borrow().in_flight() < ROUNDS_IN_FLIGHT_MAX {
                // Also when nothing was requested: a deferred output-only change or a retry
                // after a failure may be due.
                start_round(&agent, &pipeline, round);
            }
        } else if round > pipeline.borrow().last_started {
            // Waiting handlers are released even when nothing could be sent: their change
            // is recorded locally and anti-entropy retries it.
            pipeline.borrow_mut().push(round, false, Some(None));
        }
        settle(&mut |outcome| record_outcome(outcome, &mut retry_at));
        let now = Instant::now();
        let mut wait = next_full.saturating_duration_since(now);
        if let Some(due) = next_deferred_due(&agent.state.borrow(), agent.check_update_interval) {
            wait = wait.min(due.saturating_duration_since(now));
        }
        if !writable {
            wait = wait.min(NOT_WRITABLE_POLL_INTERVAL);
        }
        let in_flight = pipeline.borrow().in_flight();
        if let Some(at) = retry_at {
            wait = at.saturating_duration_since(now);
        } else if full_due && in_flight > 0 {
            // The full sync waits for the rounds out; each one's answer wakes this loop.
            wait = FULL_SYNC_DRAIN_POLL_INTERVAL;
        } else if agent.sync.requested.get() > pipeline.borrow().last_started
            && in_flight < ROUNDS_IN_FLIGHT_MAX
        {
            continue;
        }
        let _ = monoio::time::timeout(wait.max(Duration::from_millis(1)), wake.recv_async()).await;
    }
}

/// Lets handlers waiting for changes up to `ticket` answer.
fn release(agent: &Agent, ticket: u64) {
    if ticket > agent.sync.done.get() {
        agent.sync.done.set(ticket);
        agent.sync.finished.notify_all();
    }
}

/// Collects what is out of sync and not being sent, and sends it in a task of its own.
fn start_round(agent: &Rc<Agent>, pipeline: &Rc<RefCell<Pipeline>>, ticket: u64) {
    let now = Instant::now();
    let (ops, deferred) = collect_changes(agent, now, &pipeline.borrow().sending);
    let mut state = pipeline.borrow_mut();
    if deferred {
        state.deferred_pending = true;
    }
    if ops.is_empty() {
        state.push(ticket, deferred, Some(None));
        return;
    }
    let records: Vec<Record> = ops
        .iter()
        .flat_map(|op| op.records.iter().map(|(r, _)| r.clone()))
        .collect();
    for op in &ops {
        for (record, sending) in &op.records {
            let previous = state.sending.insert(record.clone(), *sending);
            assert!(previous.is_none(), "a record has one operation in flight");
        }
    }
    let serial = state.push(ticket, deferred, None);
    drop(state);
    let agent = agent.clone();
    let pipeline = pipeline.clone();
    monoio::spawn(async move {
        let outcome = send_changes(&agent, ops, now).await;
        let follow_up = pipeline.borrow_mut().answered(serial, &records, outcome);
        if follow_up {
            agent.trigger_sync();
        } else if let Some(wake) = agent.sync.wake.borrow().as_ref() {
            let _ = wake.try_send(());
        }
    });
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
        let node_arc = arcstr::ArcStr::from(node_name.as_str());
        let catalog_services: HashMap<String, _> = current
            .services
            .iter()
            .map(|s| (fold(&s.id).into_owned(), s.clone()))
            .collect();
        let catalog_checks: HashMap<String, _> = current
            .checks
            .iter()
            .map(|c| (fold(&c.check_id).into_owned(), c.clone()))
            .collect();
        // Services: equal rows are in sync, others are sent again.
        let mut local_service_keys = Vec::new();
        for service in state.services.values_mut() {
            let key = fold(&service.registration.id).into_owned();
            let in_catalog = catalog_services.get(&key).is_some_and(|row| {
                row.same_as(&instance_row(
                    &service.registration,
                    node_arc.clone(),
                    Some(row),
                    None,
                    row.modify_index,
                ))
            });
            service.synced_revision = if in_catalog { service.revision } else { 0 };
            local_service_keys.push(key);
        }
        // Catalog services this agent does not have are removed — except the `consul`
        // service, which the leader keeps for servers.
        for (key, row) in &catalog_services {
            let leader_managed = config.server && *row.id == *CONSUL_SERVICE;
            if !local_service_keys.contains(key) && !leader_managed {
                state.deleted_services.insert(row.id.to_string());
            }
        }
        let mut local_check_keys = Vec::new();
        let registrations: Vec<(String, _)> = state
            .checks
            .values()
            .map(|c| (c.id.clone(), state.check_registration(c, &node_name)))
            .collect();
        for (id, registration) in registrations {
            let key = fold(&id).into_owned();
            let service_row = catalog_services.get(&fold(&registration.service_id).into_owned());
            let verdict = catalog_checks.get(&key).map(|row| {
                let built = check_row(
                    &registration,
                    node_arc.clone(),
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
        for (key, row) in &catalog_checks {
            if !local_check_keys.contains(key) && !row.check_id.eq_ignore_ascii_case(SERF_CHECK_ID)
            {
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
    sync_changes(agent).await
}

/// One operation of a round: what it sends, what to mark synced once accepted, the token
/// it goes with (a service's or check's own, a removed one's until its deregistration is
/// accepted, else the agent's: `None`), and the records it writes.
struct Change {
    op: CatalogOp,
    marks: Vec<Mark>,
    token: Option<String>,
    records: Vec<(Record, Sending)>,
}

/// What a record's wanted operation has to do with an operation already in flight.
enum InFlight {
    /// Nothing in flight for these records: send.
    No,
    /// Exactly this is being sent: the round in flight covers it.
    Same,
    /// Something older is being sent: wait for its answer.
    Older,
}

fn in_flight(sending: &HashMap<Record, Sending>, records: &[(Record, Sending)]) -> InFlight {
    let mut any = false;
    let mut all_same = true;
    for (record, wanted) in records {
        match sending.get(record) {
            Some(sent) => {
                any = true;
                all_same &= sent == wanted;
            }
            None => all_same = false,
        }
    }
    match (any, all_same) {
        (false, _) => InFlight::No,
        (true, true) => InFlight::Same,
        (true, false) => InFlight::Older,
    }
}

/// Everything out of sync that no round is sending, and whether something was left out
/// because an older operation on its record is in flight.
fn collect_changes(
    agent: &Agent,
    now: Instant,
    sending: &HashMap<Record, Sending>,
) -> (Vec<Change>, bool) {
    // Only the node's registration is needed: cloning the whole configuration for it cost
    // every round (one per burst of registrations) a deep copy.
    let node = self_node_registration(&agent.config.borrow(), &agent.identity);
    let state = agent.state.borrow();
    let service_token = |id: &str| state.service_tokens.get(id).cloned();
    let check_token = |id: &str, service_id: &str| {
        state
            .check_tokens
            .get(id)
            .cloned()
            .or_else(|| service_token(service_id))
    };
    let mut changes = Vec::new();
    let mut deferred = false;
    let mut add =
        |change: Change, changes: &mut Vec<Change>| match in_flight(sending, &change.records) {
            InFlight::No => {
                changes.push(change);
                true
            }
            InFlight::Same => false,
            InFlight::Older => {
                deferred = true;
                false
            }
        };
    if !state.node_in_sync {
        add(
            Change {
                op: CatalogOp::Register(Box::new(node.clone())),
                marks: vec![Mark::Node],
                token: None,
                records: vec![(Record::Node, Sending::Register(0))],
            },
            &mut changes,
        );
    }
    for id in &state.deleted_checks {
        add(
            Change {
                op: CatalogOp::Deregister {
                    node: node.node.clone(),
                    service_id: String::new(),
                    check_id: id.clone(),
                },
                marks: vec![Mark::DeletedCheck(id.clone())],
                token: check_token(id, ""),
                records: vec![(Record::Check(id.clone()), Sending::Deregister)],
            },
            &mut changes,
        );
    }
    for id in &state.deleted_services {
        add(
            Change {
                op: CatalogOp::Deregister {
                    node: node.node.clone(),
                    service_id: id.clone(),
                    check_id: String::new(),
                },
                marks: vec![Mark::DeletedService(id.clone())],
                token: service_token(id),
                records: vec![(Record::Service(id.clone()), Sending::Deregister)],
            },
            &mut changes,
        );
    }
    let base = |checks| Registration {
        skip_node_update: true,
        checks,
        ..node.clone()
    };
    // Checks that go (or are already going) with their service.
    let mut with_service = Vec::new();
    for service in state.services.values().filter(|s| !s.in_sync()) {
        let id = &service.registration.id;
        let checks: Vec<_> = state.checks_of(id).collect();
        let mut marks = vec![Mark::Service(id.clone(), service.revision)];
        marks.extend(checks.iter().map(|c| Mark::Check(c.id.clone(), c.revision)));
        let mut records = vec![(
            Record::Service(id.clone()),
            Sending::Register(service.revision),
        )];
        records.extend(
            checks
                .iter()
                .map(|c| (Record::Check(c.id.clone()), Sending::Register(c.revision))),
        );
        with_service.extend(checks.iter().map(|c| c.id.clone()));
        let mut registration = base(
            checks
                .iter()
                .map(|c| state.check_registration(c, &node.node))
                .collect(),
        );
        registration.service = Some(service.registration.clone());
        add(
            Change {
                op: CatalogOp::Register(Box::new(registration)),
                marks,
                token: service_token(id),
                records,
            },
            &mut changes,
        );
    }
    for check in state.checks.values() {
        if check.in_sync()
            || with_service.contains(&check.id)
            || LocalState::check_deferred(check, now, agent.check_update_interval)
        {
            continue;
        }
        add(
            Change {
                op: CatalogOp::Register(Box::new(base(vec![
                    state.check_registration(check, &node.node)
                ]))),
                marks: vec![Mark::Check(check.id.clone(), check.revision)],
                token: check_token(&check.id, &check.service_id),
                records: vec![(
                    Record::Check(check.id.clone()),
                    Sending::Register(check.revision),
                )],
            },
            &mut changes,
        );
    }
    (changes, deferred)
}

/// Sends everything out of sync at once (a full sync: no round is in flight). Errs with
/// the first reason some of it could not be sent.
pub async fn sync_changes(agent: &Agent) -> Result<(), String> {
    let now = Instant::now();
    let (changes, deferred) = collect_changes(agent, now, &HashMap::new());
    assert!(!deferred, "nothing is in flight, so nothing waits for it");
    send_changes(agent, changes, now).await
}

/// Sends a round's operations in batches of one token each and marks what was accepted.
/// Errs with the first reason some of it could not be sent.
async fn send_changes(agent: &Agent, changes: Vec<Change>, now: Instant) -> Result<(), String> {
    if changes.is_empty() {
        return Ok(());
    }
    telemetry::incr(Counter::SyncRounds);
    let mut first_failure: Option<String> = None;
    let mut changes = changes.into_iter().peekable();
    while let Some(first) = changes.next() {
        // A batch is sent with one token: consecutive operations with the same one.
        let token = first.token.clone();
        let mut batch = vec![first];
        while batch.len() < SYNC_BATCH_OPS && changes.peek().is_some_and(|next| next.token == token)
        {
            batch.extend(changes.next());
        }
        telemetry::add(Counter::SyncOperations, batch.len() as u64);
        let (batch_ops, batch_marks): (Vec<CatalogOp>, Vec<Vec<Mark>>) = batch
            .into_iter()
            .map(|change| (change.op, change.marks))
            .unzip();
        let token = token.as_deref();
        // Encoded from the batch itself, not a copy: the operations are needed again only
        // when the batch is refused.
        let sent = Command::Catalog(CatalogOp::Batch(batch_ops));
        let answer = agent.client.apply_encoded_as(sent.encode(), token).await;
        let Command::Catalog(CatalogOp::Batch(batch_ops)) = sent else {
            unreachable!("the batch built above")
        };
        match catalog_result(answer) {
            Ok(()) => {
                for mark in batch_marks.into_iter().flatten() {
                    apply_mark(agent, mark, now);
                }
            }
            Err(reason) if batch_ops.len() == 1 => {
                telemetry::incr(Counter::SyncErrors);
                first_failure.get_or_insert(reason);
            }
            Err(_) => {
                // Find the operations that succeed on their own; re-sending the accepted
                // ones is harmless (identical registrations change nothing).
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
            }
        }
    }
    match first_failure {
        None => Ok(()),
        Some(reason) => Err(reason),
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

/// A catalog command's answer as success or the reason it was refused (catalog commands
/// never answer with transaction results; one would be a refusal too).
fn catalog_result(result: CommandResult) -> Result<(), String> {
    match result {
        CommandResult::Bool(_) => Ok(()),
        CommandResult::Error(reason) => Err(reason),
        CommandResult::Txn(_) => Err("a catalog command answered with a transaction result".into()),
    }
}
