//! Persistence of the agent's local state, so that an agent restarted on the same data
//! directory serves what its API registered before, as Consul's agent does.
//!
//! Like Consul, the agent keeps three kinds of record, each in its own file and each written
//! and removed on its own:
//!
//! - a *service* (`<data_dir>/agent/local/services/`): the registration alone, without its
//!   checks, so re-registering a service without `Check` leaves its checks' files alone;
//! - a *check* (`.../local/checks/`): how the check runs, or, for the maintenance checks
//!   `_service_maintenance:<id>` and `_node_maintenance`, just its name, service and reason;
//! - a TTL check's *state* (`.../local/check-state/`): the status and output its last update
//!   set and the wall-clock time that update expires, so a restart inside the TTL keeps it.
//!
//! A file is named by the SHA-256 of its record's ID and holds that ID, so any ID is a safe
//! file name and a file that does not hold the ID its name says is ignored. Writes go to a
//! temporary file that is synced, renamed over the record and followed by a sync of the
//! directory: a crash leaves the old record or the new one, never a mix or nothing.
//!
//! Every write goes through [`Store::apply`], which takes a batch: it writes each new record
//! to its temporary file, makes them all durable with one `syncfs`, renames them into place
//! and syncs each directory it touched once. The agent does not call it on its runtime
//! thread: a [`Persister`] owns a thread that takes every change queued since its last batch
//! as the next batch, so a burst of registrations costs a few syncs instead of three per
//! record (measured: with one sync per file on shard 0, registration churn through the agent
//! fell from ~4,000/s to ~600/s). An API call that changed the local state answers only
//! once its changes are durable ([`Persister::flush`]), as when each record was written in
//! place; TTL check states queued but not yet on disk are read back from memory.
//!
//! Config-file services and checks are never persisted (the files are read again at start).
//! Records of the first format (one file per registration *body*, under `agent/services/`
//! and `agent/checks/`) are read once by [`Store::read_legacy`] and then deleted.

use crate::consul::definition::CheckSpec;
use crate::store::catalog::{ServiceRegistration, Status};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Largest record read back (a registration body is limited far below this).
const RECORD_BYTES_MAX: u64 = 16 << 20;
/// Most records of one kind read at start: far above any real agent (Consul's agents carry
/// tens to hundreds), low enough that a directory filled by mistake cannot exhaust memory.
const RECORDS_MAX: usize = 100_000;
/// Changes queued for the persister thread. A full queue blocks the agent's thread until the
/// persister catches up: back-pressure, never a dropped or reordered change.
const PERSIST_QUEUE_JOBS_MAX: usize = 16_384;
/// Most queued jobs one batch takes, so one batch's syncs never wait behind an unbounded one.
const PERSIST_BATCH_JOBS_MAX: usize = 4_096;
/// TTL check states kept in memory until durable; pruning starts above this many.
const PENDING_STATES_PRUNE_MIN: usize = 1_024;

/// A persisted check: its identity, and how it runs (`None` for a maintenance check, which
/// has no runner and is critical while it exists).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckRecord {
    pub id: String,
    pub name: String,
    pub notes: String,
    pub service_id: String,
    pub spec: Option<CheckSpec>,
    /// The ACL token it was registered with (empty: none), kept with the record.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
}

/// The state a TTL update left a check in, valid until `expires_unix_ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckState {
    pub check_id: String,
    pub status: Status,
    pub output: String,
    /// Milliseconds since the Unix epoch (a wall-clock time: it must outlive the process).
    pub expires_unix_ms: u64,
}

/// A service record: the registration as the agent holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct ServiceRecord {
    id: String,
    service: ServiceRegistration,
    /// The ACL token it was registered with (empty: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    token: String,
}

/// One record of the first format: a registration body as received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LegacyEntry {
    pub id: String,
    pub body: String,
    #[serde(default)]
    pub replace_existing_checks: bool,
}

/// What the first format held: service bodies (with inline checks) and check bodies.
#[derive(Debug, Default)]
pub struct Legacy {
    pub services: Vec<LegacyEntry>,
    pub checks: Vec<LegacyEntry>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Service,
    Check,
    CheckState,
}

impl Kind {
    fn dir(self) -> &'static str {
        match self {
            Kind::Service => "services",
            Kind::Check => "checks",
            Kind::CheckState => "check-state",
        }
    }
}

/// The agent's records under one data directory.
pub struct Store {
    /// `<data_dir>/agent`.
    root: PathBuf,
}

fn file_name(id: &str) -> String {
    let digest = Sha256::digest(id.as_bytes());
    digest
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        + ".json"
}

/// One change to the records: a record written whole, or removed.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Save {
        kind: Kind,
        id: String,
        bytes: Vec<u8>,
    },
    Remove {
        kind: Kind,
        id: String,
    },
}

impl Op {
    fn save<T: Serialize>(kind: Kind, id: &str, record: &T) -> Op {
        // The records are plain data: serializing them cannot fail.
        let bytes = serde_json::to_vec(record).expect("agent records serialize to JSON");
        Op::Save {
            kind,
            id: id.to_string(),
            bytes,
        }
    }

    /// A service's record with the ACL token it was registered with (empty: none).
    pub fn service(service: &ServiceRegistration, token: &str) -> Op {
        assert!(!service.id.is_empty(), "a service is persisted by its ID");
        let record = ServiceRecord {
            id: service.id.clone(),
            service: service.clone(),
            token: token.to_string(),
        };
        Op::save(Kind::Service, &service.id, &record)
    }

    pub fn remove_service(id: &str) -> Op {
        Op::Remove {
            kind: Kind::Service,
            id: id.to_string(),
        }
    }

    pub fn check(check: &CheckRecord) -> Op {
        assert!(!check.id.is_empty(), "a check is persisted by its ID");
        if let Some(spec) = &check.spec {
            assert_eq!(
                spec.id, check.id,
                "a check record and its spec name one check"
            );
        }
        Op::save(Kind::Check, &check.id, check)
    }

    /// Removes a check's record but not its TTL state.
    pub fn remove_check_record(id: &str) -> Op {
        Op::Remove {
            kind: Kind::Check,
            id: id.to_string(),
        }
    }

    pub fn check_state(state: &CheckState) -> Op {
        Op::save(Kind::CheckState, &state.check_id, state)
    }

    pub fn remove_check_state(id: &str) -> Op {
        Op::Remove {
            kind: Kind::CheckState,
            id: id.to_string(),
        }
    }

    fn key(&self) -> (Kind, &str) {
        match self {
            Op::Save { kind, id, .. } | Op::Remove { kind, id } => (*kind, id),
        }
    }
}

/// A record a batch could not write or remove (the record keeps its previous content).
#[derive(Debug)]
pub struct Failure {
    pub kind: Kind,
    pub id: String,
    pub error: std::io::Error,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?}: {}", self.kind.dir(), self.id, self.error)
    }
}

/// Flushes every dirty page and inode of the file system holding `dir` and waits for it:
/// one journal commit for a whole batch of temporary files, where a sync per file would
/// commit once each.
fn sync_file_system(dir: &Path) -> std::io::Result<()> {
    let handle = std::fs::File::open(dir)?;
    // SAFETY: syncfs only reads the descriptor, which `handle` keeps open for the call.
    if unsafe { libc::syncfs(handle.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn remove_file(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Reads every `*.json` record of a directory; unreadable files are reported and skipped.
fn read_records<T: DeserializeOwned>(dir: &Path, what: &str) -> Vec<(PathBuf, T)> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut records = Vec::new();
    for item in listing.flatten() {
        let path = item.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        if records.len() >= RECORDS_MAX {
            log::warn!(
                "agent: more than {RECORDS_MAX} persisted {what} in {}; the rest are ignored",
                dir.display()
            );
            break;
        }
        let too_big = item
            .metadata()
            .map(|m| m.len() > RECORD_BYTES_MAX)
            .unwrap_or(true);
        let parsed = if too_big {
            Err(format!("larger than {RECORD_BYTES_MAX} bytes"))
        } else {
            std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice::<T>(&bytes).map_err(|e| e.to_string()))
        };
        match parsed {
            Ok(record) => records.push((path, record)),
            Err(e) => log::warn!("agent: ignoring persisted {what} {}: {e}", path.display()),
        }
    }
    records
}

/// Keeps the records whose file is named after the ID they hold.
fn named_by_id<T>(records: Vec<(PathBuf, T)>, id: impl Fn(&T) -> &str, what: &str) -> Vec<T> {
    records
        .into_iter()
        .filter_map(|(path, record)| {
            let expected = file_name(id(&record));
            if path.file_name().and_then(|n| n.to_str()) == Some(expected.as_str()) {
                Some(record)
            } else {
                log::warn!(
                    "agent: ignoring persisted {what} {}: it holds {:?}, whose file is {expected}",
                    path.display(),
                    id(&record)
                );
                None
            }
        })
        .collect()
}

impl Store {
    pub fn new(data_dir: &Path) -> Store {
        Store {
            root: data_dir.join("agent"),
        }
    }

    fn dir(&self, kind: Kind) -> PathBuf {
        self.root.join("local").join(kind.dir())
    }

    fn path(&self, kind: Kind, id: &str) -> PathBuf {
        self.dir(kind).join(file_name(id))
    }

    /// Applies a batch of changes so that a crash leaves each record as it was before the
    /// batch or as the batch left it, never a mix or nothing. When the batch changes one
    /// record more than once, its last change is the one applied. Returns the records that
    /// could not be changed; the others are durable when this returns.
    pub fn apply(&self, ops: Vec<Op>) -> Vec<Failure> {
        let mut last: HashMap<(Kind, &str), usize> = HashMap::with_capacity(ops.len());
        for (position, op) in ops.iter().enumerate() {
            last.insert(op.key(), position);
        }
        let mut failures = Vec::new();
        let mut renames = Vec::new();
        let mut removals = Vec::new();
        let mut created = BTreeSet::new();
        for (position, op) in ops.iter().enumerate() {
            if last[&op.key()] != position {
                continue;
            }
            let fail = |error| Failure {
                kind: op.key().0,
                id: op.key().1.to_string(),
                error,
            };
            match op {
                Op::Save { kind, id, bytes } => {
                    let dir = self.dir(*kind);
                    if created.insert(*kind) {
                        if let Err(e) = std::fs::create_dir_all(&dir) {
                            failures.push(fail(e));
                            continue;
                        }
                    }
                    let path = self.path(*kind, id);
                    let temporary = path.with_extension("json.tmp");
                    let written = std::fs::File::create(&temporary)
                        .and_then(|mut file| file.write_all(bytes));
                    match written {
                        Ok(()) => renames.push((*kind, id.as_str(), temporary, path)),
                        Err(e) => failures.push(fail(e)),
                    }
                }
                Op::Remove { kind, id } => removals.push((*kind, id.as_str())),
            }
        }
        // The temporary files' contents must be durable before any of them replaces a
        // record, or a crash could leave a record renamed in but empty.
        if !renames.is_empty() {
            if let Err(e) = sync_file_system(&self.root) {
                for (kind, id, temporary, _) in renames.drain(..) {
                    let _ = std::fs::remove_file(&temporary);
                    failures.push(Failure {
                        kind,
                        id: id.to_string(),
                        error: std::io::Error::new(e.kind(), e.to_string()),
                    });
                }
            }
        }
        let mut touched = BTreeSet::new();
        for (kind, id, temporary, path) in renames {
            match std::fs::rename(&temporary, &path) {
                Ok(()) => {
                    touched.insert(kind);
                }
                Err(error) => failures.push(Failure {
                    kind,
                    id: id.to_string(),
                    error,
                }),
            }
        }
        for (kind, id) in removals {
            match remove_file(&self.path(kind, id)) {
                Ok(()) => {
                    touched.insert(kind);
                }
                Err(error) => failures.push(Failure {
                    kind,
                    id: id.to_string(),
                    error,
                }),
            }
        }
        // A rename or an unlink is durable only once its directory entry is.
        for kind in touched {
            let synced = std::fs::File::open(self.dir(kind)).and_then(|dir| dir.sync_all());
            if let Err(error) = synced {
                if error.kind() != std::io::ErrorKind::NotFound {
                    failures.push(Failure {
                        kind,
                        id: String::new(),
                        error,
                    });
                }
            }
        }
        failures
    }

    /// Applies one batch and reports its first failure (tests and one-off writes).
    fn apply_all(&self, ops: Vec<Op>) -> std::io::Result<()> {
        match self.apply(ops).into_iter().next() {
            None => Ok(()),
            Some(failure) => Err(std::io::Error::new(
                failure.error.kind(),
                failure.to_string(),
            )),
        }
    }

    pub fn save_service(&self, service: &ServiceRegistration, token: &str) -> std::io::Result<()> {
        self.apply_all(vec![Op::service(service, token)])
    }

    pub fn remove_service(&self, id: &str) -> std::io::Result<()> {
        self.apply_all(vec![Op::remove_service(id)])
    }

    pub fn save_check(&self, check: &CheckRecord) -> std::io::Result<()> {
        self.apply_all(vec![Op::check(check)])
    }

    /// Removes a check and its TTL state.
    pub fn remove_check(&self, id: &str) -> std::io::Result<()> {
        self.apply_all(vec![
            Op::remove_check_record(id),
            Op::remove_check_state(id),
        ])
    }

    pub fn save_check_state(&self, state: &CheckState) -> std::io::Result<()> {
        self.apply_all(vec![Op::check_state(state)])
    }

    /// Every persisted service with the token it was registered with, in ID order.
    pub fn load_services(&self) -> Vec<(ServiceRegistration, String)> {
        let records = read_records::<ServiceRecord>(&self.dir(Kind::Service), "service");
        let mut services: Vec<(ServiceRegistration, String)> =
            named_by_id(records, |r| r.id.as_str(), "service")
                .into_iter()
                .filter(|r| r.id == r.service.id)
                .map(|r| (r.service, r.token))
                .collect();
        services.sort_by(|a, b| a.0.id.cmp(&b.0.id));
        services
    }

    /// Every persisted check, in ID order.
    pub fn load_checks(&self) -> Vec<CheckRecord> {
        let records = read_records::<CheckRecord>(&self.dir(Kind::Check), "check");
        let mut checks = named_by_id(records, |r| r.id.as_str(), "check");
        checks.retain(|c| c.spec.as_ref().is_none_or(|s| s.id == c.id));
        checks.sort_by(|a, b| a.id.cmp(&b.id));
        checks
    }

    /// A check's TTL state, if one is persisted and still valid at `now_unix_ms`; an
    /// expired one is removed, as Consul purges it.
    pub fn load_check_state(&self, id: &str, now_unix_ms: u64) -> Option<CheckState> {
        let path = self.path(Kind::CheckState, id);
        if !path.exists() {
            return None;
        }
        let bytes = std::fs::read(&path).ok()?;
        let state = match serde_json::from_slice::<CheckState>(&bytes) {
            Ok(state) if state.check_id == id => state,
            Ok(_) | Err(_) => {
                log::warn!("agent: ignoring persisted check state {}", path.display());
                return None;
            }
        };
        if state.expires_unix_ms <= now_unix_ms {
            if let Err(e) = remove_file(&path) {
                log::warn!("agent: cannot remove expired check state {id:?}: {e}");
            }
            return None;
        }
        Some(state)
    }

    /// Reads the records of the first format, if any. The caller registers them again,
    /// which persists them in the current format, and then calls [`Store::remove_legacy`].
    pub fn read_legacy(&self) -> Legacy {
        let read = |dir: &str| -> Vec<LegacyEntry> {
            let mut entries: Vec<LegacyEntry> =
                read_records::<LegacyEntry>(&self.root.join(dir), dir)
                    .into_iter()
                    .map(|(_, entry)| entry)
                    .collect();
            entries.sort_by(|a, b| a.id.cmp(&b.id));
            entries
        };
        Legacy {
            services: read("services"),
            checks: read("checks"),
        }
    }

    /// Deletes the records of the first format.
    pub fn remove_legacy(&self) {
        for dir in ["services", "checks"] {
            let path = self.root.join(dir);
            if path.exists() {
                if let Err(e) = std::fs::remove_dir_all(&path) {
                    log::warn!("agent: cannot remove {}: {e}", path.display());
                }
            }
        }
    }
}

/// What the persister thread is asked to do, in queue order.
enum Job {
    /// Changes, the last of which has this sequence number.
    Changes(Vec<Op>, u64),
    /// Answered once everything queued before it is durable.
    Barrier(flume::Sender<()>),
}

/// The agent's side of the persister thread: changes are queued in order and written in
/// batches by [`Store::apply`]; [`Persister::flush`] waits until what was queued is durable.
/// Used from the agent's thread only.
pub struct Persister {
    store: Arc<Store>,
    jobs: flume::Sender<Job>,
    /// Sequence number of the last queued change.
    queued: Cell<u64>,
    /// Sequence number of the last change the thread made durable (or failed to).
    durable: Arc<AtomicU64>,
    /// TTL check states queued and perhaps not yet on disk (`None`: removed), with the
    /// sequence number that wrote them, so a state is read back as it was last set.
    pending_states: RefCell<HashMap<String, (Option<CheckState>, u64)>>,
    prune_above: Cell<usize>,
}

impl Persister {
    /// Starts the persister thread for the records under `data_dir`.
    pub fn start(data_dir: &Path) -> std::io::Result<Persister> {
        let store = Arc::new(Store::new(data_dir));
        let (jobs, queue) = flume::bounded(PERSIST_QUEUE_JOBS_MAX);
        let durable = Arc::new(AtomicU64::new(0));
        let thread_store = store.clone();
        let thread_durable = durable.clone();
        std::thread::Builder::new()
            .name("agent-persist".into())
            .spawn(move || run_persister(&thread_store, &queue, &thread_durable))?;
        Ok(Persister {
            store,
            jobs,
            queued: Cell::new(0),
            durable,
            pending_states: RefCell::new(HashMap::new()),
            prune_above: Cell::new(PENDING_STATES_PRUNE_MIN),
        })
    }

    /// The records on disk, for reading at start.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Sequence number of the last change queued; compare with a later value to know whether
    /// something was queued in between.
    pub fn queued(&self) -> u64 {
        self.queued.get()
    }

    /// Queues changes; they become durable in order, in the thread's next batch.
    pub fn queue(&self, ops: Vec<Op>) {
        if ops.is_empty() {
            return;
        }
        let sequence = self.queued.get() + 1;
        self.queued.set(sequence);
        for op in &ops {
            match op {
                Op::Save {
                    kind: Kind::CheckState,
                    id,
                    bytes,
                } => {
                    let state = serde_json::from_slice(bytes).ok();
                    self.remember_state(id, state, sequence);
                }
                Op::Remove {
                    kind: Kind::CheckState,
                    id,
                } => self.remember_state(id, None, sequence),
                _ => {}
            }
        }
        if self.jobs.send(Job::Changes(ops, sequence)).is_err() {
            log::error!(
                "agent: the persister thread is gone; local state changes are not persisted"
            );
        }
    }

    fn remember_state(&self, id: &str, state: Option<CheckState>, sequence: u64) {
        let mut pending = self.pending_states.borrow_mut();
        pending.insert(id.to_string(), (state, sequence));
        if pending.len() > self.prune_above.get() {
            // Entries already durable are on disk; dropping them keeps this bounded by what
            // is in flight.
            let durable = self.durable.load(Ordering::Acquire);
            pending.retain(|_, (_, written)| *written > durable);
            self.prune_above
                .set((2 * pending.len()).max(PENDING_STATES_PRUNE_MIN));
        }
    }

    /// A TTL check's state as last set, if still valid at `now_unix_ms`.
    pub fn load_check_state(&self, id: &str, now_unix_ms: u64) -> Option<CheckState> {
        let pending = self.pending_states.borrow().get(id).cloned();
        match pending {
            Some((state, _)) => state.filter(|s| s.expires_unix_ms > now_unix_ms),
            None => self.store.load_check_state(id, now_unix_ms),
        }
    }

    /// A receiver answered once every change queued so far is durable, or `None` when
    /// nothing is in flight.
    pub fn flush(&self) -> Option<flume::Receiver<()>> {
        if self.durable.load(Ordering::Acquire) >= self.queued.get() {
            return None;
        }
        let (done, wait) = flume::bounded(1);
        if self.jobs.send(Job::Barrier(done)).is_err() {
            return None;
        }
        Some(wait)
    }
}

/// The persister thread: takes everything queued since its last batch (up to
/// [`PERSIST_BATCH_JOBS_MAX`] jobs) as one batch, applies it, then answers the batch's
/// barriers. Ends when the agent drops its [`Persister`].
fn run_persister(store: &Store, queue: &flume::Receiver<Job>, durable: &AtomicU64) {
    while let Ok(first) = queue.recv() {
        let mut ops = Vec::new();
        let mut barriers = Vec::new();
        let mut last_sequence = None;
        let mut take = |job: Job| match job {
            Job::Changes(changes, sequence) => {
                assert!(
                    last_sequence.is_none_or(|last| last < sequence),
                    "changes are queued in sequence order"
                );
                last_sequence = Some(sequence);
                ops.extend(changes);
            }
            Job::Barrier(done) => barriers.push(done),
        };
        take(first);
        for _ in 1..PERSIST_BATCH_JOBS_MAX {
            match queue.try_recv() {
                Ok(job) => take(job),
                Err(_) => break,
            }
        }
        if !ops.is_empty() {
            for failure in store.apply(ops) {
                log::warn!("agent: cannot persist {failure}");
            }
        }
        if let Some(sequence) = last_sequence {
            let previous = durable.swap(sequence, Ordering::AcqRel);
            assert!(
                previous < sequence,
                "the durable sequence only moves forward"
            );
        }
        for done in barriers {
            let _ = done.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::definition::CheckKind;
    use crate::store::catalog::CheckDefinition;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "praetor-persist-{name}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn ttl_check(id: &str, service_id: &str) -> CheckRecord {
        CheckRecord {
            id: id.into(),
            name: id.into(),
            notes: String::new(),
            service_id: service_id.into(),
            spec: Some(CheckSpec {
                id: id.into(),
                name: id.into(),
                notes: String::new(),
                service_id: service_id.into(),
                initial_status: Status::Critical,
                initial_output: String::new(),
                kind: CheckKind::Ttl,
                definition: CheckDefinition {
                    ttl_ns: 30_000_000_000,
                    ..Default::default()
                },
                success_before_passing: 0,
                failures_before_warning: 0,
                failures_before_critical: 0,
            }),
            token: "check-token".into(),
        }
    }

    #[test]
    fn services_checks_and_states_are_kept_and_removed_separately() {
        let dir = scratch("kinds");
        let store = Store::new(&dir);
        let service = ServiceRegistration {
            id: "web/1".into(),
            name: "web".into(),
            port: 80,
            ..Default::default()
        };
        store.save_service(&service, "service-token").unwrap();
        let check = ttl_check("service:web/1", "web/1");
        store.save_check(&check).unwrap();
        let maintenance = CheckRecord {
            id: "_node_maintenance".into(),
            name: "Node Maintenance Mode".into(),
            notes: "patching".into(),
            service_id: String::new(),
            spec: None,
            token: String::new(),
        };
        store.save_check(&maintenance).unwrap();
        let state = CheckState {
            check_id: check.id.clone(),
            status: Status::Passing,
            output: "fine".into(),
            expires_unix_ms: 2_000,
        };
        store.save_check_state(&state).unwrap();

        // Tokens are kept with their records.
        assert_eq!(
            store.load_services(),
            vec![(service.clone(), "service-token".to_string())]
        );
        assert_eq!(
            store.load_checks(),
            vec![maintenance.clone(), check.clone()]
        );
        assert_eq!(store.load_check_state(&check.id, 1_999), Some(state));
        // Removing the service record leaves the checks: each record stands alone.
        store.remove_service("web/1").unwrap();
        store.remove_service("web/1").unwrap();
        assert!(store.load_services().is_empty());
        assert_eq!(store.load_checks().len(), 2);
        // A check goes with its state.
        store.remove_check(&check.id).unwrap();
        assert_eq!(store.load_checks(), vec![maintenance]);
        assert_eq!(store.load_check_state(&check.id, 0), None);
        // No temporary file is left behind.
        let leftovers = std::fs::read_dir(store.dir(Kind::Check))
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "tmp"))
            .count();
        assert_eq!(leftovers, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_batch_applies_the_last_change_of_each_record() {
        let dir = scratch("batch");
        let store = Store::new(&dir);
        let service = |port| ServiceRegistration {
            id: "web".into(),
            name: "web".into(),
            port,
            ..Default::default()
        };
        let failures = store.apply(vec![
            Op::service(&service(1), ""),
            Op::check(&ttl_check("gone", "")),
            Op::service(&service(2), "t"),
            Op::remove_check_record("gone"),
            Op::check(&ttl_check("kept", "")),
        ]);
        assert!(failures.is_empty(), "{failures:?}");
        assert_eq!(store.load_services(), vec![(service(2), "t".to_string())]);
        assert_eq!(store.load_checks(), vec![ttl_check("kept", "")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_persister_answers_a_flush_once_queued_changes_are_on_disk() {
        let dir = scratch("persister");
        let persister = Persister::start(&dir).unwrap();
        assert!(
            persister.flush().is_none(),
            "nothing queued, nothing to wait for"
        );
        let state = CheckState {
            check_id: "ttl".into(),
            status: Status::Passing,
            output: "ok".into(),
            expires_unix_ms: 10_000,
        };
        for port in 1..=50 {
            persister.queue(vec![Op::service(
                &ServiceRegistration {
                    id: format!("web-{port}"),
                    name: "web".into(),
                    port,
                    ..Default::default()
                },
                "",
            )]);
        }
        persister.queue(vec![Op::check_state(&state)]);
        // Read back as set, whether or not the thread has written it yet.
        assert_eq!(
            persister.load_check_state("ttl", 9_999),
            Some(state.clone())
        );
        assert_eq!(persister.load_check_state("ttl", 10_000), None);
        persister
            .flush()
            .expect("changes in flight")
            .recv()
            .unwrap();
        let on_disk = Store::new(&dir);
        assert_eq!(on_disk.load_services().len(), 50);
        assert_eq!(on_disk.load_check_state("ttl", 9_999), Some(state));
        persister.queue(vec![Op::remove_check_state("ttl")]);
        assert_eq!(persister.load_check_state("ttl", 0), None);
        if let Some(wait) = persister.flush() {
            wait.recv().unwrap();
        }
        assert_eq!(on_disk.load_check_state("ttl", 0), None);
        assert!(persister.flush().is_none(), "everything queued is durable");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn expired_check_state_is_not_restored_and_is_purged() {
        let dir = scratch("expiry");
        let store = Store::new(&dir);
        let state = CheckState {
            check_id: "ttl".into(),
            status: Status::Warning,
            output: "slow".into(),
            expires_unix_ms: 5_000,
        };
        store.save_check_state(&state).unwrap();
        assert_eq!(store.load_check_state("ttl", 4_999), Some(state));
        assert_eq!(store.load_check_state("ttl", 5_000), None);
        assert!(!store.path(Kind::CheckState, "ttl").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_record_under_another_ids_name_is_ignored() {
        let dir = scratch("names");
        let store = Store::new(&dir);
        store.save_check(&ttl_check("a", "")).unwrap();
        std::fs::rename(
            store.path(Kind::Check, "a"),
            store.path(Kind::Check, "other"),
        )
        .unwrap();
        assert!(store.load_checks().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn legacy_records_are_read_once() {
        let dir = scratch("legacy");
        let store = Store::new(&dir);
        let legacy_dir = dir.join("agent").join("services");
        std::fs::create_dir_all(&legacy_dir).unwrap();
        let entry = LegacyEntry {
            id: "web".into(),
            body: r#"{"Name":"web"}"#.into(),
            replace_existing_checks: true,
        };
        std::fs::write(
            legacy_dir.join(file_name("web")),
            serde_json::to_vec(&entry).unwrap(),
        )
        .unwrap();
        let legacy = store.read_legacy();
        assert_eq!(legacy.services, vec![entry]);
        assert!(legacy.checks.is_empty());
        store.remove_legacy();
        assert!(!legacy_dir.exists());
        assert!(store.read_legacy().services.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
