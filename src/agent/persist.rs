//! Persistence of the agent's local state, so that an agent restarted on the same data
//! directory serves what its API registered before, as Consul's agent does.
//!
//! Like Consul, the agent keeps three kinds of record, each written and removed on its own:
//!
//! - a *service*: the registration alone, without its checks, so re-registering a service
//!   without `Check` leaves its checks' records alone;
//! - a *check*: how the check runs, or, for the maintenance checks
//!   `_service_maintenance:<id>` and `_node_maintenance`, just its name, service and reason;
//! - a TTL check's *state*: the status and output its last update set and the wall-clock
//!   time that update expires, so a restart inside the TTL keeps it.
//!
//! Unlike Consul, which writes a file per record, the records live in one append-only log,
//! `<data_dir>/agent/local/records.log`: each change is a frame (length, CRC-32C, then the
//! change: save or remove, the kind, the ID and the record's JSON), and a batch of changes
//! is one write and one `fdatasync`. Measured before the change: with a file per record
//! (temporary file, `syncfs`, rename, directory sync), registration churn through the agent
//! kept the persister thread busy in ext4's inode allocator (`recently_deleted` and
//! `find_inode_bit`, ~60% of a core) at ~1,600 registrations/s. Replay at the first use
//! rebuilds an index from (kind, ID) to the record's place; a tail that is not a whole,
//! intact frame — a write cut short by a crash — is cut off, so a crash leaves the log
//! before a batch or after it, never a mix. Once the log is over 1 MiB and more than four
//! times the size of its live records, it is rewritten with only those (temporary file,
//! sync, rename, directory sync).
//!
//! Every write goes through [`Store::apply`]. The agent does not call it on its runtime
//! thread: a [`Persister`] owns a thread that takes every change queued since its last batch
//! as the next batch. An API call that changed the local state answers only once its
//! changes are durable ([`Persister::wait_durable`]); TTL check states queued but not yet on
//! disk are read back from memory. The thread wakes the agent's runtime once per batch, not
//! once per waiting call: under churn a batch answers tens of calls, and a wake-up each (an
//! `eventfd` write from the thread) was most of the agent's write system calls.
//!
//! Config-file services and checks are never persisted (the files are read again at start).
//! Only this log format is read: praetor's earlier layouts (a file per record, and before
//! that a file per registration body) were converted by the releases that replaced them,
//! and no deployment holds them any more.

use super::signal::Signal;
use crate::consul::definition::CheckSpec;
use crate::store::catalog::{ServiceRegistration, Status};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Largest record written or read back (a registration body is limited far below this).
const RECORD_BYTES_MAX: u64 = 16 << 20;
/// Most records of one kind read at start: far above any real agent (Consul's agents carry
/// tens to hundreds), low enough that a log filled by mistake cannot exhaust memory.
const RECORDS_MAX: usize = 100_000;
/// Changes queued for the persister thread. A full queue blocks the agent's thread until the
/// persister catches up: back-pressure, never a dropped or reordered change.
const PERSIST_QUEUE_JOBS_MAX: usize = 16_384;
/// Most queued jobs one batch takes, so one batch's syncs never wait behind an unbounded one.
const PERSIST_BATCH_JOBS_MAX: usize = 4_096;
/// TTL check states kept in memory until durable; pruning starts above this many.
const PENDING_STATES_PRUNE_MIN: usize = 1_024;
/// The record log's name under `<data_dir>/agent/local/`, and the name a new or compacted
/// log is written under before it is renamed into place.
const LOG_FILE: &str = "records.log";
const LOG_TEMPORARY_FILE: &str = "records.log.tmp";
/// The first bytes of a record log (the format's version is its last byte).
const LOG_MAGIC: &[u8; 8] = b"PRAGLOG1";
/// A frame: payload length (u32, little-endian), CRC-32C of the payload (u32), payload.
const FRAME_HEADER_BYTES: usize = 8;
/// A payload: tag (save or remove), kind, ID length (u32), ID, then a saved record's bytes.
const FRAME_PAYLOAD_HEAD_BYTES: usize = 6;
const FRAME_SAVE: u8 = 1;
const FRAME_REMOVE: u8 = 2;
/// Largest frame payload: a record and its ID. Replay treats a larger claimed length as the
/// torn end of the log, so a damaged length cannot make it allocate more than this.
const FRAME_PAYLOAD_BYTES_MAX: usize = RECORD_BYTES_MAX as usize;
/// The log is compacted once it is larger than this and larger than
/// `COMPACT_GARBAGE_RATIO` times its live records.
const COMPACT_LOG_BYTES_MIN: u64 = 1 << 20;
const COMPACT_GARBAGE_RATIO: u64 = 4;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Service,
    Check,
    CheckState,
}

impl Kind {
    /// The kind's byte in a log frame.
    fn code(self) -> u8 {
        match self {
            Kind::Service => 0,
            Kind::Check => 1,
            Kind::CheckState => 2,
        }
    }

    fn from_code(code: u8) -> Option<Kind> {
        match code {
            0 => Some(Kind::Service),
            1 => Some(Kind::Check),
            2 => Some(Kind::CheckState),
            _ => None,
        }
    }
}

/// The agent's records under one data directory: an append-only log of changes,
/// `<data_dir>/agent/local/records.log`, opened (and replayed) at the first use.
pub struct Store {
    /// `<data_dir>/agent/local`, the log's directory.
    local: PathBuf,
    /// `None` until the first use opens the log, and again after opening it failed (the
    /// next use retries). Taken by the persister thread for a batch, and by the agent's
    /// thread to read records at start or when a TTL check's state is restored.
    log: Mutex<Option<Log>>,
}

/// Where a live record sits in the log.
#[derive(Clone, Copy, Debug)]
struct Located {
    frame_offset: u64,
    frame_bytes: u32,
}

/// Offset of a saved record's bytes from its frame's start: they follow the ID.
fn record_start(id: &str) -> usize {
    FRAME_HEADER_BYTES + FRAME_PAYLOAD_HEAD_BYTES + id.len()
}

/// The open log and the position of each live record in it.
struct Log {
    path: PathBuf,
    file: std::fs::File,
    /// Length of the valid log: the next frame is written here.
    end_bytes: u64,
    /// Bytes of the frames of live records (the rest of the log is history).
    live_bytes: u64,
    index: HashMap<(Kind, String), Located>,
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
        let what = match self.kind {
            Kind::Service => "service",
            Kind::Check => "check",
            Kind::CheckState => "check state",
        };
        write!(f, "{what} {:?}: {}", self.id, self.error)
    }
}

fn copy_error(error: &std::io::Error) -> std::io::Error {
    std::io::Error::new(error.kind(), error.to_string())
}

fn corrupt(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

/// Syncs a directory, so that a file created, renamed or removed in it stays so.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Appends one frame for `op` to `buffer`.
fn encode_frame(buffer: &mut Vec<u8>, op: &Op) {
    let (tag, kind, id, record): (u8, Kind, &str, &[u8]) = match op {
        Op::Save { kind, id, bytes } => (FRAME_SAVE, *kind, id, bytes),
        Op::Remove { kind, id } => (FRAME_REMOVE, *kind, id, &[]),
    };
    let payload_bytes = FRAME_PAYLOAD_HEAD_BYTES + id.len() + record.len();
    assert!(
        payload_bytes <= FRAME_PAYLOAD_BYTES_MAX,
        "checked by the caller"
    );
    let start = buffer.len();
    buffer.extend_from_slice(&(payload_bytes as u32).to_le_bytes());
    buffer.extend_from_slice(&[0; 4]);
    let payload_start = buffer.len();
    buffer.push(tag);
    buffer.push(kind.code());
    buffer.extend_from_slice(&(id.len() as u32).to_le_bytes());
    buffer.extend_from_slice(id.as_bytes());
    assert_eq!(buffer.len() - start, record_start(id));
    buffer.extend_from_slice(record);
    let crc = crc32c::crc32c(&buffer[payload_start..]);
    buffer[payload_start - 4..payload_start].copy_from_slice(&crc.to_le_bytes());
}

/// One frame read back: what it does, to which record.
struct Decoded {
    save: bool,
    kind: Kind,
    id: String,
}

/// Decodes a frame's payload whose CRC matched.
fn decode_payload(payload: &[u8]) -> Option<Decoded> {
    if payload.len() < FRAME_PAYLOAD_HEAD_BYTES {
        return None;
    }
    let save = match payload[0] {
        FRAME_SAVE => true,
        FRAME_REMOVE => false,
        _ => return None,
    };
    let kind = Kind::from_code(payload[1])?;
    let id_bytes = u32::from_le_bytes(payload[2..6].try_into().expect("four bytes")) as usize;
    let id_end = FRAME_PAYLOAD_HEAD_BYTES.checked_add(id_bytes)?;
    let id = std::str::from_utf8(payload.get(FRAME_PAYLOAD_HEAD_BYTES..id_end)?).ok()?;
    if !save && id_end != payload.len() {
        return None;
    }
    Some(Decoded {
        save,
        kind,
        id: id.to_string(),
    })
}

impl Log {
    /// Opens the log under `local`, creating it if absent, and replays it. A tail that is
    /// not a whole, intact frame (a write cut short by a crash) is cut off.
    fn open(local: &Path) -> std::io::Result<Log> {
        std::fs::create_dir_all(local)?;
        let path = local.join(LOG_FILE);
        if !path.exists() {
            // Created whole under a temporary name, so the log either exists with its
            // header or not at all.
            let temporary = local.join(LOG_TEMPORARY_FILE);
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(LOG_MAGIC)?;
            file.sync_all()?;
            std::fs::rename(&temporary, &path)?;
            sync_dir(local)?;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)?;
        let mut log = Log {
            path,
            file,
            end_bytes: LOG_MAGIC.len() as u64,
            live_bytes: 0,
            index: HashMap::new(),
        };
        log.replay()?;
        Ok(log)
    }

    fn replay(&mut self) -> std::io::Result<()> {
        use std::io::Read;
        let file_bytes = self.file.metadata()?.len();
        // A second handle to the same open file reads it from the start (nothing has moved
        // its offset) while `self` records what it finds.
        let mut reader = std::io::BufReader::with_capacity(1 << 16, self.file.try_clone()?);
        let mut magic = [0u8; LOG_MAGIC.len()];
        reader.read_exact(&mut magic)?;
        if &magic != LOG_MAGIC {
            return Err(corrupt(format!(
                "{} is not a praetor agent record log",
                self.path.display()
            )));
        }
        let mut offset = LOG_MAGIC.len() as u64;
        let mut payload = Vec::new();
        let torn = loop {
            let mut header = [0u8; FRAME_HEADER_BYTES];
            match reader.read_exact(&mut header) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    break offset < file_bytes;
                }
                Err(e) => return Err(e),
            }
            let payload_bytes = u32::from_le_bytes(header[..4].try_into().expect("4")) as usize;
            let crc = u32::from_le_bytes(header[4..].try_into().expect("4"));
            if payload_bytes > FRAME_PAYLOAD_BYTES_MAX {
                break true;
            }
            payload.resize(payload_bytes, 0);
            match reader.read_exact(&mut payload) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break true,
                Err(e) => return Err(e),
            }
            if crc32c::crc32c(&payload) != crc {
                break true;
            }
            let Some(frame) = decode_payload(&payload) else {
                break true;
            };
            let frame_bytes = (FRAME_HEADER_BYTES + payload_bytes) as u32;
            let located = Located {
                frame_offset: offset,
                frame_bytes,
            };
            self.record(frame.kind, frame.id, frame.save.then_some(located));
            offset += u64::from(frame_bytes);
        };
        if torn {
            log::warn!(
                "agent: {} ends in {} bytes that are not a whole record (a write cut short); \
                 dropping them",
                self.path.display(),
                file_bytes - offset
            );
            self.file.set_len(offset)?;
            self.file.sync_all()?;
        }
        self.end_bytes = offset;
        Ok(())
    }

    /// Notes a record's new place (`None`: removed) and keeps the live byte count.
    fn record(&mut self, kind: Kind, id: String, located: Option<Located>) {
        let previous = match located {
            Some(located) => {
                self.live_bytes += u64::from(located.frame_bytes);
                self.index.insert((kind, id), located)
            }
            None => self.index.remove(&(kind, id)),
        };
        if let Some(previous) = previous {
            self.live_bytes -= u64::from(previous.frame_bytes);
        }
    }

    /// Appends the changes and makes them durable with one `fdatasync`. A change that
    /// cannot be framed fails alone; a write or sync that fails fails the whole batch and
    /// leaves the log as it was.
    fn append(&mut self, ops: &[Op]) -> Vec<Failure> {
        let mut failures = Vec::new();
        let mut buffer = Vec::new();
        let mut placed = Vec::with_capacity(ops.len());
        // Removing what is not there writes nothing; what this batch saved is there.
        let mut saved_here = std::collections::HashSet::new();
        for op in ops {
            let (kind, id) = op.key();
            let record_bytes = match op {
                Op::Save { bytes, .. } => bytes.len(),
                Op::Remove { .. } => 0,
            };
            if FRAME_PAYLOAD_HEAD_BYTES + id.len() + record_bytes > FRAME_PAYLOAD_BYTES_MAX {
                failures.push(Failure {
                    kind,
                    id: id.to_string(),
                    error: std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("larger than {FRAME_PAYLOAD_BYTES_MAX} bytes"),
                    ),
                });
                continue;
            }
            let save = matches!(op, Op::Save { .. });
            if !save
                && !saved_here.remove(&(kind, id))
                && !self.index.contains_key(&(kind, id.to_string()))
            {
                continue;
            }
            if save {
                saved_here.insert((kind, id));
            }
            let frame_start = buffer.len();
            encode_frame(&mut buffer, op);
            let located = Located {
                frame_offset: self.end_bytes + frame_start as u64,
                frame_bytes: (buffer.len() - frame_start) as u32,
            };
            placed.push((kind, id, save.then_some(located)));
        }
        if buffer.is_empty() {
            return failures;
        }
        let written = self
            .file
            .write_all_at(&buffer, self.end_bytes)
            .and_then(|()| self.file.sync_data());
        if let Err(error) = written {
            // Cut back what may have reached the file, so a restart does not replay it.
            let _ = self.file.set_len(self.end_bytes);
            failures.extend(placed.into_iter().map(|(kind, id, _)| Failure {
                kind,
                id: id.to_string(),
                error: copy_error(&error),
            }));
            return failures;
        }
        self.end_bytes += buffer.len() as u64;
        for (kind, id, located) in placed {
            self.record(kind, id.to_string(), located);
        }
        if self.end_bytes > COMPACT_LOG_BYTES_MIN
            && self.end_bytes > COMPACT_GARBAGE_RATIO * self.live_bytes
        {
            if let Err(e) = self.compact() {
                log::warn!("agent: cannot compact {}: {e}", self.path.display());
            }
        }
        failures
    }

    /// Rewrites the log with only its live records: written under a temporary name,
    /// synced, renamed over the log and the directory synced, so a crash leaves the old
    /// log or the new one.
    fn compact(&mut self) -> std::io::Result<()> {
        let local = self.path.parent().expect("the log is in a directory");
        let temporary = local.join(LOG_TEMPORARY_FILE);
        let mut entries: Vec<(&(Kind, String), &Located)> = self.index.iter().collect();
        entries.sort_by_key(|(_, located)| located.frame_offset);
        let mut buffer = Vec::with_capacity(LOG_MAGIC.len() + self.live_bytes as usize);
        buffer.extend_from_slice(LOG_MAGIC);
        let mut moved = Vec::with_capacity(entries.len());
        for (key, located) in entries {
            let start = buffer.len();
            buffer.resize(start + located.frame_bytes as usize, 0);
            self.file
                .read_exact_at(&mut buffer[start..], located.frame_offset)?;
            moved.push((key.clone(), start as u64));
        }
        let written = std::fs::File::create(&temporary).and_then(|mut file| {
            file.write_all(&buffer)?;
            file.sync_all()
        });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(e);
        }
        std::fs::rename(&temporary, &self.path)?;
        // From here the new log is the log, whatever the directory sync says.
        self.file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)?;
        for (key, offset) in moved {
            self.index
                .get_mut(&key)
                .expect("moved records are live")
                .frame_offset = offset;
        }
        self.end_bytes = buffer.len() as u64;
        assert_eq!(
            self.end_bytes,
            LOG_MAGIC.len() as u64 + self.live_bytes,
            "a compacted log holds exactly its live records"
        );
        sync_dir(local)
    }

    /// The bytes of a live record.
    fn read(&self, kind: Kind, id: &str) -> Option<std::io::Result<Vec<u8>>> {
        let located = self.index.get(&(kind, id.to_string()))?;
        let start = record_start(id);
        let mut bytes = vec![0u8; located.frame_bytes as usize - start];
        Some(
            self.file
                .read_exact_at(&mut bytes, located.frame_offset + start as u64)
                .map(|()| bytes),
        )
    }

    /// Every live record of a kind, parsed; one that does not parse is reported and skipped.
    fn read_all<T: DeserializeOwned>(&self, kind: Kind, what: &str) -> Vec<(String, T)> {
        let mut records = Vec::new();
        for (record_kind, id) in self.index.keys() {
            if *record_kind != kind {
                continue;
            }
            if records.len() >= RECORDS_MAX {
                log::warn!("agent: more than {RECORDS_MAX} persisted {what}; the rest are ignored");
                break;
            }
            let parsed = self
                .read(kind, id)
                .expect("listed in the index")
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice::<T>(&bytes).map_err(|e| e.to_string()));
            match parsed {
                Ok(record) => records.push((id.clone(), record)),
                Err(e) => log::warn!("agent: ignoring persisted {what} {id:?}: {e}"),
            }
        }
        records
    }
}

impl Store {
    pub fn new(data_dir: &Path) -> Store {
        Store {
            local: data_dir.join("agent").join("local"),
            log: Mutex::new(None),
        }
    }

    /// Runs `f` on the log, opening it at the first use.
    fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> std::io::Result<R> {
        // A panic while holding the lock leaves the log as its last complete step left it.
        let mut slot = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(Log::open(&self.local)?);
        }
        Ok(f(slot.as_mut().expect("opened above")))
    }

    /// Applies a batch of changes in order (so the last change of a record wins) and makes
    /// them durable together: a crash leaves the log before the batch or after it. Returns
    /// the records that could not be changed; the others are durable when this returns.
    pub fn apply(&self, ops: Vec<Op>) -> Vec<Failure> {
        match self.with_log(|log| log.append(&ops)) {
            Ok(failures) => failures,
            Err(error) => ops
                .iter()
                .map(|op| Failure {
                    kind: op.key().0,
                    id: op.key().1.to_string(),
                    error: copy_error(&error),
                })
                .collect(),
        }
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

    /// Every record of a kind, or none (with a warning) when the log cannot be opened.
    fn load<T: DeserializeOwned>(&self, kind: Kind, what: &str) -> Vec<(String, T)> {
        self.with_log(|log| log.read_all::<T>(kind, what))
            .unwrap_or_else(|e| {
                log::warn!("agent: cannot read persisted {what}: {e}");
                Vec::new()
            })
    }

    /// Every persisted service with the token it was registered with, in ID order.
    pub fn load_services(&self) -> Vec<(ServiceRegistration, String)> {
        let mut services: Vec<(ServiceRegistration, String)> = self
            .load::<ServiceRecord>(Kind::Service, "service")
            .into_iter()
            .filter(|(id, r)| *id == r.id && r.id == r.service.id)
            .map(|(_, r)| (r.service, r.token))
            .collect();
        services.sort_by(|a, b| a.0.id.cmp(&b.0.id));
        services
    }

    /// Every persisted check, in ID order.
    pub fn load_checks(&self) -> Vec<CheckRecord> {
        let mut checks: Vec<CheckRecord> = self
            .load::<CheckRecord>(Kind::Check, "check")
            .into_iter()
            .filter(|(id, c)| *id == c.id && c.spec.as_ref().is_none_or(|s| s.id == c.id))
            .map(|(_, c)| c)
            .collect();
        checks.sort_by(|a, b| a.id.cmp(&b.id));
        checks
    }

    /// A check's TTL state, if one is persisted and still valid at `now_unix_ms`; an
    /// expired one is removed, as Consul purges it.
    pub fn load_check_state(&self, id: &str, now_unix_ms: u64) -> Option<CheckState> {
        let bytes = match self.with_log(|log| log.read(Kind::CheckState, id)) {
            Ok(None) => return None,
            Ok(Some(Ok(bytes))) => bytes,
            Ok(Some(Err(e))) | Err(e) => {
                log::warn!("agent: cannot read the persisted state of check {id:?}: {e}");
                return None;
            }
        };
        let state = match serde_json::from_slice::<CheckState>(&bytes) {
            Ok(state) if state.check_id == id => state,
            Ok(_) | Err(_) => {
                log::warn!("agent: ignoring the persisted state of check {id:?}");
                return None;
            }
        };
        if state.expires_unix_ms <= now_unix_ms {
            if let Err(e) = self.apply_all(vec![Op::remove_check_state(id)]) {
                log::warn!("agent: cannot remove expired check state {id:?}: {e}");
            }
            return None;
        }
        Some(state)
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
    /// A message after each batch the thread made durable; at most one waits unread.
    batches: flume::Receiver<()>,
    /// What the handlers in [`Persister::wait_durable`] wait on: notified by one listener
    /// task per received batch message.
    batch_signal: Rc<Signal>,
    /// Whether the listener task runs (started by the first wait, on the agent's runtime).
    listening: Cell<bool>,
    /// Set by the listener when the thread is gone: nothing will become durable any more.
    thread_gone: Rc<Cell<bool>>,
}

impl Persister {
    /// Starts the persister thread for the records under `data_dir`.
    pub fn start(data_dir: &Path) -> std::io::Result<Persister> {
        let store = Arc::new(Store::new(data_dir));
        let (jobs, queue) = flume::bounded(PERSIST_QUEUE_JOBS_MAX);
        // One slot: a batch finished while the previous message is still unread needs no
        // message of its own, since the reader looks at `durable` itself.
        let (batch_done, batches) = flume::bounded(1);
        let durable = Arc::new(AtomicU64::new(0));
        let thread_store = store.clone();
        let thread_durable = durable.clone();
        std::thread::Builder::new()
            .name("agent-persist".into())
            .spawn(move || run_persister(&thread_store, &queue, &thread_durable, &batch_done))?;
        Ok(Persister {
            store,
            jobs,
            queued: Cell::new(0),
            durable,
            pending_states: RefCell::new(HashMap::new()),
            prune_above: Cell::new(PENDING_STATES_PRUNE_MIN),
            batches,
            batch_signal: Rc::new(Signal::default()),
            listening: Cell::new(false),
            thread_gone: Rc::new(Cell::new(false)),
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

    /// Waits, on the agent's runtime, until every change queued so far is durable (or the
    /// thread is gone). Waiters share one wake-up per batch: a listener task, started by
    /// the first wait, turns each batch message into a [`Signal`] notification.
    pub async fn wait_durable(&self) {
        let target = self.queued.get();
        if self.durable.load(Ordering::Acquire) >= target {
            return;
        }
        if !self.listening.replace(true) {
            let (batches, signal, gone) = (
                self.batches.clone(),
                self.batch_signal.clone(),
                self.thread_gone.clone(),
            );
            monoio::spawn(async move {
                while batches.recv_async().await.is_ok() {
                    signal.notify_all();
                }
                gone.set(true);
                signal.notify_all();
            });
        }
        // No wake-up is lost: `durable` is read and the wait registered without yielding,
        // and the listener runs on this thread, so a batch finished after the read is
        // announced after the registration.
        while self.durable.load(Ordering::Acquire) < target && !self.thread_gone.get() {
            self.batch_signal.wait().await;
        }
    }

    /// A receiver answered once every change queued so far is durable, or `None` when
    /// nothing is in flight. For callers outside the agent's runtime (start-up, tests).
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
/// [`PERSIST_BATCH_JOBS_MAX`] jobs) as one batch, applies it, then announces it (one
/// message, for [`Persister::wait_durable`]) and answers the batch's barriers. Ends when the
/// agent drops its [`Persister`].
fn run_persister(
    store: &Store,
    queue: &flume::Receiver<Job>,
    durable: &AtomicU64,
    batch_done: &flume::Sender<()>,
) {
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
            // Full means a message is unread: its reader will see this batch too.
            let _ = batch_done.try_send(());
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

    /// Saving instance `<name>-<port>` of service `name`, without a token.
    fn instance_of(name: &str, port: i32) -> Op {
        Op::service(
            &ServiceRegistration {
                id: format!("{name}-{port}"),
                name: name.into(),
                port,
                ..Default::default()
            },
            "",
        )
    }

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
        // What a fresh open of the same directory reads is what was left.
        let reopened = Store::new(&dir);
        assert!(reopened.load_services().is_empty());
        assert_eq!(reopened.load_checks(), store.load_checks());
        assert_eq!(reopened.load_check_state(&check.id, 0), None);
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
            persister.queue(vec![instance_of("web", port)]);
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
        drop(on_disk);
        persister.queue(vec![Op::remove_check_state("ttl")]);
        assert_eq!(persister.load_check_state("ttl", 0), None);
        if let Some(wait) = persister.flush() {
            wait.recv().unwrap();
        }
        assert_eq!(Store::new(&dir).load_check_state("ttl", 0), None);
        assert!(persister.flush().is_none(), "everything queued is durable");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn many_waiters_are_released_together_once_their_batch_is_durable() {
        let dir = scratch("waiters");
        let persister = Rc::new(Persister::start(&dir).unwrap());
        let mut runtime = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .unwrap();
        runtime.block_on(async {
            // Nothing queued: nothing to wait for, and no listener is started.
            persister.wait_durable().await;
            assert!(!persister.listening.get());
            let mut waiters = Vec::new();
            for port in 1..=40 {
                persister.queue(vec![instance_of("api", port)]);
                let persister = persister.clone();
                let target = persister.queued();
                waiters.push(monoio::spawn(async move {
                    persister.wait_durable().await;
                    // Released only once its own change (and every earlier one) is durable.
                    assert!(persister.durable.load(Ordering::Acquire) >= target);
                    target
                }));
            }
            let mut released = Vec::new();
            for waiter in waiters {
                released.push(waiter.await);
            }
            assert_eq!(released, (1..=40).collect::<Vec<u64>>());
        });
        assert!(persister.listening.get());
        assert!(persister.flush().is_none(), "everything queued is durable");
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
        // Purged, not just hidden: a fresh open finds nothing even at an earlier time.
        assert_eq!(Store::new(&dir).load_check_state("ttl", 0), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn log_path(dir: &Path) -> PathBuf {
        dir.join("agent").join("local").join(LOG_FILE)
    }

    fn web(port: i32) -> ServiceRegistration {
        ServiceRegistration {
            id: format!("web-{port}"),
            name: "web".into(),
            port,
            ..Default::default()
        }
    }

    #[test]
    fn a_write_cut_short_is_dropped_and_the_batches_before_it_kept() {
        let dir = scratch("torn");
        let store = Store::new(&dir);
        store.save_service(&web(1), "").unwrap();
        store.save_service(&web(2), "").unwrap();
        drop(store);
        let path = log_path(&dir);
        let whole = std::fs::metadata(&path).unwrap().len();
        // The last frame loses its last byte, as if the machine stopped mid-write.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(whole - 1)
            .unwrap();
        let store = Store::new(&dir);
        assert_eq!(store.load_services(), vec![(web(1), String::new())]);
        // The torn tail was cut off: the next batch follows the last whole frame.
        store.save_service(&web(3), "").unwrap();
        drop(store);
        let ids: Vec<String> = Store::new(&dir)
            .load_services()
            .into_iter()
            .map(|(s, _)| s.id)
            .collect();
        assert_eq!(ids, ["web-1", "web-3"]);

        // A damaged byte inside a frame ends the log there too: its CRC no longer matches.
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let ids: Vec<String> = Store::new(&dir)
            .load_services()
            .into_iter()
            .map(|(s, _)| s.id)
            .collect();
        assert_eq!(ids, ["web-1"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_that_is_not_a_record_log_is_refused_not_overwritten() {
        let dir = scratch("magic");
        let path = log_path(&dir);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"something else entirely").unwrap();
        let store = Store::new(&dir);
        assert!(store.load_services().is_empty());
        let error = store.save_service(&web(1), "").unwrap_err();
        assert!(
            error.to_string().contains("not a praetor agent record log"),
            "{error}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"something else entirely");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn churn_compacts_the_log_to_its_live_records() {
        let dir = scratch("compact");
        let store = Store::new(&dir);
        store.save_service(&web(1), "kept").unwrap();
        // Register and deregister until the log has been compacted several times; 16
        // cycles per batch, as the persister takes whatever was queued.
        for batch in 0..250u32 {
            let mut ops = Vec::new();
            for cycle in 0..16 {
                let service = web(2 + ((batch * 16 + cycle) % 64) as i32);
                ops.push(Op::service(&service, ""));
                ops.push(Op::check(&ttl_check("c", "")));
                ops.push(Op::remove_service(&service.id));
            }
            store.apply_all(ops).unwrap();
        }
        let log_bytes = std::fs::metadata(log_path(&dir)).unwrap().len();
        assert!(
            log_bytes <= COMPACT_LOG_BYTES_MIN + 64 * 1024,
            "the log stays bounded: {log_bytes} bytes"
        );
        assert!(!log_path(&dir).with_file_name(LOG_TEMPORARY_FILE).exists());
        assert_eq!(store.load_services(), vec![(web(1), "kept".to_string())]);
        drop(store);
        let reopened = Store::new(&dir);
        assert_eq!(reopened.load_services(), vec![(web(1), "kept".to_string())]);
        assert_eq!(reopened.load_checks(), vec![ttl_check("c", "")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
