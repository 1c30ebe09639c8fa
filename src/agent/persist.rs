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
//! to its temporary file and starts its write-back at once (`sync_file_range`), then waits
//! for the files with `fdatasync`s issued together from several threads — one after
//! another, each would cost its own disk cache flush; in flight together, the block layer
//! merges them — renames them into place and syncs each directory it touched once. It never calls `syncfs`, which would flush the
//! whole file system (on one box, the servers' WALs and every build's output too). The agent
//! does not call it on its runtime thread: a [`Persister`] owns two threads, one taking
//! every change queued since its last batch as the next batch and staging it (the records'
//! files synced) while the other commits the batch before (renames, directory syncs), so a
//! burst of registrations shares a journal commit or two instead of three per record
//! (measured: with one sync per file on shard 0, registration churn through the agent fell
//! from ~4,000/s to ~600/s). An API
//! call that changed the local state answers only once its changes are durable
//! ([`Persister::flush_through`]: its own changes, not the ones queued after them), as when
//! each record was written in place; TTL check states queued but not yet on disk are read
//! back from memory.
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
use std::sync::{Arc, Mutex};

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
/// Temporary files a batch keeps open between their write and their `fdatasync`; a larger
/// batch syncs in chunks of this many, so it never holds more descriptors than this.
const PERSIST_OPEN_FILES_MAX: usize = 256;
/// Threads one batch syncs its files from at once (see `sync_written`).
const PERSIST_SYNC_THREADS_MAX: usize = 64;
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

/// Starts writing `file`'s dirty pages back without waiting: a batch starts every file's
/// write-back before it waits for any, so the first `fdatasync` finds the whole batch's
/// blocks allocated and commits them in one journal transaction. Only a hint: the
/// `fdatasync` that follows is what makes the data durable, so a failure here is ignored.
fn start_write_back(file: &std::fs::File) {
    // SAFETY: sync_file_range only reads the descriptor, which `file` keeps open.
    let flags = libc::SYNC_FILE_RANGE_WRITE;
    let _ = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, flags) };
}

/// A temporary file written for a batch, waiting to be synced and renamed over its record.
struct Written {
    kind: Kind,
    id: String,
    temporary: PathBuf,
    path: PathBuf,
}

/// A batch whose new records are durable in their temporary files, ready to be renamed
/// into place; with the removals still to do and what already failed.
struct Staged {
    written: Vec<Written>,
    removals: Vec<(Kind, String)>,
    failures: Vec<Failure>,
}

/// Extensions of the temporary files, by batch parity: the persister stages one batch
/// while it commits the one before, so two batches' files for one record can coexist, and
/// a third batch is staged only once the first is committed. A crash leaves files with
/// these extensions, which readers ignore (they read `*.json`) and later batches overwrite.
const TEMPORARY_EXTENSIONS: [&str; 2] = ["json.tmp", "json.tmp1"];

/// Waits until the data of each open temporary file is durable (`fdatasync`), closing them.
/// A file that cannot be synced is removed and reported; its entry in `written` becomes
/// `None`, so it never replaces its record.
fn sync_written(
    open: &mut Vec<(usize, std::fs::File)>,
    written: &mut [Option<Written>],
    failures: &mut Vec<Failure>,
) {
    // One `fdatasync` after another costs a disk cache flush each (measured here: 3.9 ms
    // per file, 223 ms for 64), while flushes in flight together are merged by the block
    // layer (64 files: 7 ms). So the files are synced from concurrent threads, at most
    // `PERSIST_SYNC_THREADS_MAX` at a time.
    let mut results: Vec<(usize, std::io::Result<()>)> = Vec::with_capacity(open.len());
    let files: Vec<(usize, std::fs::File)> = std::mem::take(open);
    for group in files.chunks(PERSIST_SYNC_THREADS_MAX) {
        if group.len() == 1 {
            results.push((group[0].0, group[0].1.sync_data()));
            continue;
        }
        std::thread::scope(|scope| {
            let syncs: Vec<_> = group
                .iter()
                .map(|(index, file)| {
                    let spawned = std::thread::Builder::new()
                        .name("praetor-persist-sync".into())
                        .spawn_scoped(scope, move || file.sync_data());
                    (*index, file, spawned)
                })
                .collect();
            for (index, file, spawned) in syncs {
                let result = match spawned {
                    Ok(sync) => sync.join().unwrap_or_else(|_| {
                        Err(std::io::Error::other(
                            "the thread syncing the file panicked",
                        ))
                    }),
                    // No thread to be had: sync it here, only slower.
                    Err(_) => file.sync_data(),
                };
                results.push((index, result));
            }
        });
    }
    drop(files);
    for (index, result) in results {
        if let Err(error) = result {
            let entry = written[index].take().expect("an open file was written");
            let _ = std::fs::remove_file(&entry.temporary);
            failures.push(Failure {
                kind: entry.kind,
                id: entry.id,
                error,
            });
        }
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
        self.commit(self.stage(ops, TEMPORARY_EXTENSIONS[0]))
    }

    /// The first half of [`Store::apply`]: writes each new record to a temporary file (with
    /// extension `temporary_extension`) and waits until its data is durable. Nothing a
    /// reader sees has changed yet.
    fn stage(&self, ops: Vec<Op>, temporary_extension: &str) -> Staged {
        let mut last: HashMap<(Kind, &str), usize> = HashMap::with_capacity(ops.len());
        for (position, op) in ops.iter().enumerate() {
            last.insert(op.key(), position);
        }
        let mut failures = Vec::new();
        let mut written: Vec<Option<Written>> = Vec::new();
        // Written but not yet synced, by index into `written`.
        let mut open: Vec<(usize, std::fs::File)> = Vec::new();
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
                    let temporary = path.with_extension(temporary_extension);
                    let file = std::fs::File::create(&temporary).and_then(|mut file| {
                        file.write_all(bytes)?;
                        Ok(file)
                    });
                    match file {
                        Ok(file) => {
                            start_write_back(&file);
                            written.push(Some(Written {
                                kind: *kind,
                                id: id.clone(),
                                temporary,
                                path,
                            }));
                            open.push((written.len() - 1, file));
                            if open.len() == PERSIST_OPEN_FILES_MAX {
                                sync_written(&mut open, &mut written, &mut failures);
                            }
                        }
                        Err(e) => failures.push(fail(e)),
                    }
                }
                Op::Remove { kind, id } => removals.push((*kind, id.clone())),
            }
        }
        // The temporary files' contents must be durable before any of them replaces a
        // record, or a crash could leave a record renamed in but empty.
        sync_written(&mut open, &mut written, &mut failures);
        assert!(
            open.is_empty(),
            "every written file is synced before a rename"
        );
        Staged {
            written: written.into_iter().flatten().collect(),
            removals,
            failures,
        }
    }

    /// The second half of [`Store::apply`]: renames the staged files over their records,
    /// removes the removed ones, and syncs each directory it touched once. Returns every
    /// failure of the batch, the staging's included.
    fn commit(&self, staged: Staged) -> Vec<Failure> {
        let Staged {
            written,
            removals,
            mut failures,
        } = staged;
        let mut touched = BTreeSet::new();
        for entry in written {
            match std::fs::rename(&entry.temporary, &entry.path) {
                Ok(()) => {
                    touched.insert(entry.kind);
                }
                Err(error) => failures.push(Failure {
                    kind: entry.kind,
                    id: entry.id,
                    error,
                }),
            }
        }
        for (kind, id) in removals {
            match remove_file(&self.path(kind, &id)) {
                Ok(()) => {
                    touched.insert(kind);
                }
                Err(error) => failures.push(Failure { kind, id, error }),
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

/// Changes for the persister thread, the last of which has this sequence number.
struct Job(Vec<Op>, u64);

/// Callers waiting for a sequence number to become durable, answered by the persister
/// after each batch (and dropped, which answers them too, when it ends).
type Waiters = Arc<Mutex<WaitList>>;

#[derive(Default)]
struct WaitList {
    waiting: Vec<(u64, flume::Sender<()>)>,
    /// The persister has ended: nothing will be made durable any more.
    closed: bool,
}

/// The agent's side of the persister thread: changes are queued in order and written in
/// batches by [`Store::apply`]; [`Persister::flush_through`] waits until a given change is
/// durable. Used from the agent's thread only.
pub struct Persister {
    store: Arc<Store>,
    jobs: flume::Sender<Job>,
    /// Sequence number of the last queued change.
    queued: Cell<u64>,
    /// Sequence number of the last change the thread made durable (or failed to).
    durable: Arc<AtomicU64>,
    waiters: Waiters,
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
        let waiters: Waiters = Arc::default();
        let thread_store = store.clone();
        let thread_durable = durable.clone();
        let thread_waiters = waiters.clone();
        std::thread::Builder::new()
            .name("agent-persist".into())
            .spawn(move || {
                run_persister(&thread_store, &queue, &thread_durable, &thread_waiters)
            })?;
        Ok(Persister {
            store,
            jobs,
            queued: Cell::new(0),
            durable,
            waiters,
            pending_states: RefCell::new(HashMap::new()),
            prune_above: Cell::new(PENDING_STATES_PRUNE_MIN),
        })
    }

    /// The records on disk, for reading at start.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Sequence number of the last change the thread made durable (or failed to).
    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
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
        if self.jobs.send(Job(ops, sequence)).is_err() {
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
        self.flush_through(self.queued.get())
    }

    /// A receiver answered once the changes up to sequence number `sequence` (a value
    /// [`Persister::queued`] returned) are durable, or `None` when they already are. Changes
    /// queued after it are not waited for: under a stream of registrations, a call waits
    /// for the batch holding its own change, not for the next one.
    pub fn flush_through(&self, sequence: u64) -> Option<flume::Receiver<()>> {
        assert!(
            sequence <= self.queued.get(),
            "only a queued change can be waited for"
        );
        // Checked under the lock the thread answers under: a batch that ends between the
        // check and the push still finds this waiter.
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        if self.durable.load(Ordering::Acquire) >= sequence || waiters.closed {
            return None;
        }
        let (done, wait) = flume::bounded(1);
        waiters.waiting.push((sequence, done));
        Some(wait)
    }
}

/// Drops the waiters when the persister thread ends, however it ends (a panic included):
/// their receivers then return at once instead of waiting for a batch that never comes.
struct ReleaseWaiters<'a>(&'a Waiters);

impl Drop for ReleaseWaiters<'_> {
    fn drop(&mut self) {
        let mut waiters = self.0.lock().unwrap_or_else(|e| e.into_inner());
        waiters.closed = true;
        waiters.waiting.clear();
    }
}

/// The persister thread: takes everything queued since its last batch (up to
/// [`PERSIST_BATCH_JOBS_MAX`] jobs) as one batch and stages it ([`Store::stage`]: its new
/// records written and synced to temporary files), then hands it to a second thread that
/// commits it ([`Store::commit`]: renames, removals, directory syncs) and answers the
/// callers waiting for a change it held. While one batch is committed the next is staged,
/// so the two syncs of consecutive batches overlap (the file system joins concurrent syncs
/// into one journal commit) and a change queued during a batch waits about one batch, not
/// two. The hand-off is a rendezvous: a batch is staged only while at most one other is
/// being committed, which is what lets two temporary-file names per record suffice, and
/// batches are committed in the order they were queued. Ends when the agent drops its
/// [`Persister`].
fn run_persister(
    store: &Arc<Store>,
    queue: &flume::Receiver<Job>,
    durable: &Arc<AtomicU64>,
    waiters: &Waiters,
) {
    let (staged_tx, staged_rx) = flume::bounded::<(Staged, u64)>(0);
    let committer = {
        let store = store.clone();
        let durable = durable.clone();
        let waiters = waiters.clone();
        std::thread::Builder::new()
            .name("agent-persist-commit".into())
            .spawn(move || commit_batches(&store, &staged_rx, &durable, &waiters))
    };
    if let Err(e) = committer {
        log::error!("agent: cannot start the persister's commit thread: {e}");
        return;
    }
    let mut parity = 0;
    while let Ok(Job(mut ops, mut last_sequence)) = queue.recv() {
        for _ in 1..PERSIST_BATCH_JOBS_MAX {
            match queue.try_recv() {
                Ok(Job(changes, sequence)) => {
                    assert!(
                        last_sequence < sequence,
                        "changes are queued in sequence order"
                    );
                    last_sequence = sequence;
                    ops.extend(changes);
                }
                Err(_) => break,
            }
        }
        let staged = store.stage(ops, TEMPORARY_EXTENSIONS[parity]);
        parity = 1 - parity;
        if staged_tx.send((staged, last_sequence)).is_err() {
            log::error!("agent: the persister's commit thread is gone");
            return;
        }
    }
}

/// The persister's second thread: commits staged batches in order, then marks their
/// changes durable and answers the callers waiting for them.
fn commit_batches(
    store: &Store,
    staged: &flume::Receiver<(Staged, u64)>,
    durable: &AtomicU64,
    waiters: &Waiters,
) {
    let _release = ReleaseWaiters(waiters);
    while let Ok((batch, last_sequence)) = staged.recv() {
        for failure in store.commit(batch) {
            log::warn!("agent: cannot persist {failure}");
        }
        let previous = durable.swap(last_sequence, Ordering::AcqRel);
        assert!(
            previous < last_sequence,
            "the durable sequence only moves forward"
        );
        let mut waiters = waiters.lock().unwrap_or_else(|e| e.into_inner());
        waiters.waiting.retain(|(sequence, done)| {
            if *sequence <= last_sequence {
                let _ = done.send(());
                false
            } else {
                true
            }
        });
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
    fn a_batch_larger_than_the_open_files_limit_lands_whole_and_leaves_no_temporary_file() {
        let dir = scratch("chunks");
        let store = Store::new(&dir);
        let count = PERSIST_OPEN_FILES_MAX * 2 + 3;
        let mut ops: Vec<Op> = (0..count)
            .map(|n| {
                Op::service(
                    &ServiceRegistration {
                        id: format!("web-{n}"),
                        name: "web".into(),
                        port: n as i32,
                        ..Default::default()
                    },
                    "",
                )
            })
            .collect();
        // Removals and saves of other kinds in the same batch, as a churn batch holds.
        ops.push(Op::remove_service("web-0"));
        ops.push(Op::check(&ttl_check("ttl", "web-1")));
        assert!(store.apply(ops).is_empty(), "nothing fails");
        let services = store.load_services();
        assert_eq!(services.len(), count - 1, "web-0's removal came last");
        assert!(services.iter().all(|(s, _)| s.id != "web-0"));
        assert_eq!(store.load_checks(), vec![ttl_check("ttl", "web-1")]);
        for kind in [Kind::Service, Kind::Check] {
            let leftovers = std::fs::read_dir(store.dir(kind))
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
                .count();
            assert_eq!(leftovers, 0, "every temporary file was renamed into place");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_flush_through_a_change_waits_for_that_change_only() {
        let dir = scratch("through");
        let persister = Persister::start(&dir).unwrap();
        let service = |n: i32| {
            Op::service(
                &ServiceRegistration {
                    id: format!("api-{n}"),
                    name: "api".into(),
                    port: n,
                    ..Default::default()
                },
                "",
            )
        };
        persister.queue(vec![service(1)]);
        let first = persister.queued();
        if let Some(wait) = persister.flush_through(first) {
            wait.recv().unwrap();
        }
        assert!(persister.durable() >= first);
        assert!(Store::new(&dir).load_services().len() == 1);
        // Later changes in flight do not make a caller of the first one wait again.
        for n in 2..=40 {
            persister.queue(vec![service(n)]);
        }
        assert!(
            persister.flush_through(first).is_none(),
            "a durable change is not waited for"
        );
        let last = persister.queued();
        if let Some(wait) = persister.flush_through(last) {
            wait.recv().unwrap();
        }
        assert_eq!(persister.durable(), last);
        assert_eq!(Store::new(&dir).load_services().len(), 40);
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
