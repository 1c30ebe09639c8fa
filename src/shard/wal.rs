//! The durable Raft log: preallocated segment files of checksummed records, plus snapshot
//! files. Used only by the raft core thread.
//!
//! Record layout (little endian):
//! `body_len u32 | crc32c(body) u32 | body`, where body is `kind u8 | fields…`:
//! - entry: `index u64 | term u64 | entry_kind u8 | payload`
//! - hard state: `term u64 | vote u64 (0 = none) | commit u64`
//! - truncate: `from_index u64` (entries at and above it are discarded)
//!
//! Group commit: [`Wal::append`] only encodes into a buffer; [`Wal::write`] issues one
//! `pwrite` for everything appended since, and hands back the segment file so that the
//! `fdatasync` can run on another thread while later batches are written ([`Wal::sync`] does
//! both inline). Segments are preallocated, so a sync rarely has file-size metadata to flush.
//! Rolling to a new segment syncs the old one first, so syncing the file a write returned
//! makes that write and every earlier one durable.
//!
//! Recovery reads segments in order and stops at the first record whose length is zero or
//! whose checksum does not match: that is the torn tail of a batch whose sync never returned,
//! so nothing in it was acknowledged. The tail is zeroed before new records are written, so a
//! stale record can never be read back after a later crash.
//!
//! Reading back: the raft core holds only a bounded suffix of the log in memory, so the log
//! remembers where the latest record of every entry above the last compaction sits (16 bytes
//! an entry, replayed like the records: a truncation or a rewritten entry replaces what was
//! above it) and [`Wal::read_entries`] reads a range back with one `pread` for the header
//! and one for the body of each record, checking each checksum again.
//!
//! Invariants: a record's checksum is computed before it is written and verified after it is
//! read; entries handed out by recovery are contiguous and start right after the snapshot;
//! a position is recorded only once its record is written to the file.

use crate::raft::{Entry, EntryKind, HardState};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Size each segment is preallocated to; a segment is closed once a batch would overflow it.
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;
/// Largest record body; a bigger length field is corruption, not a record.
pub const RECORD_BODY_BYTES_MAX: usize = 64 << 20;
/// Snapshot files kept on disk (the newest is used; the older one is a fallback).
const SNAPSHOTS_KEPT: usize = 2;

const RECORD_HEADER_BYTES: usize = 8;
const KIND_ENTRY: u8 = 1;
const KIND_HARD_STATE: u8 = 2;
const KIND_TRUNCATE: u8 = 3;
const SNAPSHOT_MAGIC: &[u8; 8] = b"PRSNAP01";

/// Term, vote and commit index, persisted before votes are answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalHardState {
    pub term: u64,
    pub vote: u64,
    pub commit: u64,
}

/// A log entry as the WAL stores it; `kind` is the Raft entry kind, opaque here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalEntry {
    pub index: u64,
    pub term: u64,
    pub kind: u8,
    pub payload: bytes::Bytes,
}

impl WalEntry {
    pub fn from_entry(entry: &Entry) -> WalEntry {
        let kind = match entry.kind {
            EntryKind::Normal => 0,
            EntryKind::Noop => 1,
            EntryKind::Membership => 2,
        };
        WalEntry {
            index: entry.index,
            term: entry.term,
            kind,
            payload: entry.data.clone(),
        }
    }

    pub fn into_entry(self) -> Result<Entry, String> {
        let kind = match self.kind {
            0 => EntryKind::Normal,
            1 => EntryKind::Noop,
            2 => EntryKind::Membership,
            other => {
                return Err(format!(
                    "unknown entry kind {other} at index {}",
                    self.index
                ))
            }
        };
        Ok(Entry {
            index: self.index,
            term: self.term,
            kind,
            data: self.payload,
        })
    }
}

impl From<HardState> for WalHardState {
    fn from(hard_state: HardState) -> WalHardState {
        WalHardState {
            term: hard_state.term,
            vote: hard_state.vote.unwrap_or(0),
            commit: hard_state.commit,
        }
    }
}

impl From<WalHardState> for HardState {
    fn from(hard_state: WalHardState) -> HardState {
        HardState {
            term: hard_state.term,
            vote: (hard_state.vote != 0).then_some(hard_state.vote),
            commit: hard_state.commit,
        }
    }
}

/// What recovery keeps of the log: its records replayed in write order against the index
/// of the newest snapshot. [`Wal::open`] replays the records it reads; the simulator's disk
/// (`tests/sim`) replays its own through the same code.
///
/// A truncation drops every entry at or above its index, above the snapshot too when it
/// falls at or below it: the log was rewritten from there (a leader overwrote a divergent
/// tail, then a snapshot covered the rewrite), and entries written before the truncation
/// belong to the old history. An entry at or below the snapshot index likewise ends every
/// entry kept before it. What remains is contiguous and starts right after the snapshot.
#[derive(Debug)]
pub struct LogReplay {
    snapshot_index: u64,
    pub hard_state: WalHardState,
    pub entries: Vec<WalEntry>,
}

impl LogReplay {
    pub fn new(snapshot_index: u64) -> LogReplay {
        LogReplay {
            snapshot_index,
            hard_state: WalHardState::default(),
            entries: Vec::new(),
        }
    }

    pub fn hard_state(&mut self, hard_state: WalHardState) {
        self.hard_state = hard_state;
    }

    /// Drops every entry at and above `from`.
    pub fn truncate(&mut self, from: u64) {
        let keep = from.saturating_sub(self.snapshot_index + 1);
        self.entries.truncate(keep as usize);
    }

    /// Appends an entry; one at or below the tail replaces the old suffix (the truncate
    /// record normally precedes it: this is belt and braces). A gap is corruption.
    pub fn entry(&mut self, entry: WalEntry) -> Result<(), String> {
        self.truncate(entry.index);
        if entry.index <= self.snapshot_index {
            return Ok(());
        }
        let expected = self.snapshot_index + 1 + self.entries.len() as u64;
        if entry.index != expected {
            return Err(match self.entries.last() {
                Some(last) => format!("gap in log: entry {} after {}", entry.index, last.index),
                None => format!(
                    "log starts at {} but snapshot ends at {}",
                    entry.index, self.snapshot_index
                ),
            });
        }
        debug_assert!(self
            .entries
            .last()
            .is_none_or(|last| last.index + 1 == entry.index));
        self.entries.push(entry);
        Ok(())
    }
}

/// A snapshot as stored: Raft metadata bytes (opaque here) and the state bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalSnapshot {
    pub last_index: u64,
    pub last_term: u64,
    pub meta: Vec<u8>,
    pub data: bytes::Bytes,
}

/// What [`Wal::open`] recovered.
#[derive(Debug, Default)]
pub struct Recovered {
    pub hard_state: WalHardState,
    pub snapshot: Option<WalSnapshot>,
    /// Entries after the snapshot, contiguous, in index order.
    pub entries: Vec<WalEntry>,
    /// Bytes of torn tail discarded during recovery (0 after a clean shutdown).
    pub torn_tail_bytes: u64,
}

/// Where one entry's record sits: its segment and the record's offset in that file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RecordAt {
    sequence: u64,
    offset: u64,
}

/// The position of the latest record of every entry from `first` on, replayed the way
/// [`LogReplay`] replays the records, so that a read finds what recovery would.
#[derive(Debug, Default)]
struct EntryPositions {
    first: u64,
    positions: std::collections::VecDeque<RecordAt>,
}

impl EntryPositions {
    /// Forgets the entries at and above `from`.
    fn truncate(&mut self, from: u64) {
        let keep = from.saturating_sub(self.first) as usize;
        self.positions.truncate(keep);
    }

    /// Records where entry `index` was written; it replaces every entry at and above it.
    fn record(&mut self, index: u64, at: RecordAt) {
        self.truncate(index);
        if self.positions.is_empty() || index != self.first + self.positions.len() as u64 {
            // The first entry, or one after a gap: the log restarted above a snapshot.
            self.positions.clear();
            self.first = index;
        }
        self.positions.push_back(at);
    }

    /// Forgets the entries at or below `through` (compacted: nobody reads them again).
    fn forget_through(&mut self, through: u64) {
        while self.first <= through && self.positions.pop_front().is_some() {
            self.first += 1;
        }
    }

    fn get(&self, index: u64) -> Option<RecordAt> {
        let offset = index.checked_sub(self.first)?;
        self.positions.get(usize::try_from(offset).ok()?).copied()
    }
}

/// What a buffered write does to the positions once it reaches the file.
#[derive(Clone, Copy, Debug)]
enum PendingPosition {
    Truncate(u64),
    /// Entry `index`, whose record starts `offset` bytes into the pending buffer.
    Entry {
        index: u64,
        offset: usize,
    },
}

struct Segment {
    sequence: u64,
    path: PathBuf,
    /// Highest entry index recorded in this segment (0 if none).
    max_entry_index: u64,
}

pub struct Wal {
    dir: PathBuf,
    segment_bytes: u64,
    segments: Vec<Segment>,
    /// Shared with the sync thread, which may still be syncing it after a roll.
    active: Arc<File>,
    active_write_offset: u64,
    pending: Vec<u8>,
    pending_max_entry_index: u64,
    /// What the pending buffer does to `positions`, in order.
    pending_positions: Vec<PendingPosition>,
    positions: EntryPositions,
    last_hard_state: WalHardState,
}

fn segment_path(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(format!("{sequence:020}.wal"))
}

fn corrupt(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

fn preallocate(file: &File, bytes: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: plain syscall on a valid descriptor; fallocate does not touch our memory.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, bytes as libc::off_t) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    // Filesystems without fallocate still work; they just pay for size updates on sync.
    if err.raw_os_error() == Some(libc::EOPNOTSUPP) {
        return Ok(());
    }
    Err(err)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Whether `bytes` are all zero, compared a block at a time against zeros (a `memcmp` each):
/// the unwritten rest of a preallocated segment is checked at every start, and a restart
/// should not wait on a byte-by-byte loop over tens of megabytes.
fn all_zero(bytes: &[u8]) -> bool {
    const BLOCK_BYTES: usize = 64 * 1024;
    static ZEROS: [u8; BLOCK_BYTES] = [0; BLOCK_BYTES];
    bytes
        .chunks(BLOCK_BYTES)
        .all(|block| block == &ZEROS[..block.len()])
}

/// The sequence numbers of the segments (`<sequence>.wal`) in `dir`, in order.
fn segment_sequences(dir: &Path) -> io::Result<Vec<u64>> {
    let mut sequences: Vec<u64> = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if let Some(stem) = name.strip_suffix(".wal") {
            if let Ok(seq) = stem.parse::<u64>() {
                sequences.push(seq);
            }
        }
    }
    sequences.sort_unstable();
    Ok(sequences)
}

/// Replays the whole records of one segment's bytes into `replay` and `positions`. Returns
/// where the whole records end and the highest entry index among them.
fn replay_segment(
    bytes: &[u8],
    sequence: u64,
    replay: &mut LogReplay,
    positions: &mut EntryPositions,
) -> io::Result<(usize, u64)> {
    let mut offset = 0usize;
    let mut max_entry_index = 0;
    while let Some((record, next)) = read_record(bytes, offset) {
        match record {
            Record::Entry(entry) => {
                max_entry_index = max_entry_index.max(entry.index);
                let at = RecordAt {
                    sequence,
                    offset: offset as u64,
                };
                positions.record(entry.index, at);
                replay.entry(entry).map_err(corrupt)?;
            }
            Record::HardState(hs) => replay.hard_state(hs),
            Record::Truncate(from) => {
                positions.truncate(from);
                replay.truncate(from);
            }
        }
        offset = next;
    }
    Ok((offset, max_entry_index))
}

/// Zeroes the torn tail of the last segment (from `offset`, where the whole records end) so
/// no stale record can ever be read after it. Returns how many of its bytes were written.
fn cut_torn_tail(path: &Path, bytes: &[u8], offset: usize) -> io::Result<u64> {
    let torn_bytes = bytes[offset..]
        .iter()
        .rposition(|b| *b != 0)
        .map(|p| p as u64 + 1)
        .unwrap_or(0);
    let file = OpenOptions::new().write(true).open(path)?;
    file.set_len(offset as u64)?;
    file.sync_all()?;
    Ok(torn_bytes)
}

/// Opens the last segment for appending at `write_offset`, or creates the first one (durably,
/// with its directory entry), preallocated to `segment_bytes`.
fn open_active_segment(
    dir: &Path,
    segments: &mut Vec<Segment>,
    segment_bytes: u64,
    write_offset: u64,
) -> io::Result<(File, u64)> {
    if let Some(last) = segments.last() {
        let file = OpenOptions::new().read(true).write(true).open(&last.path)?;
        preallocate(&file, segment_bytes.max(write_offset))?;
        return Ok((file, write_offset));
    }
    let path = segment_path(dir, 1);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    preallocate(&file, segment_bytes)?;
    file.sync_all()?;
    sync_dir(dir)?;
    segments.push(Segment {
        sequence: 1,
        path,
        max_entry_index: 0,
    });
    Ok((file, 0))
}

impl Wal {
    /// Opens (or creates) the log in `dir`, recovering everything durable.
    pub fn open(dir: &Path, segment_bytes: u64) -> io::Result<(Wal, Recovered)> {
        fs::create_dir_all(dir)?;
        let snapshot = load_newest_snapshot(dir)?;
        let snapshot_index = snapshot.as_ref().map(|s| s.last_index).unwrap_or(0);

        let sequences = segment_sequences(dir)?;
        let mut recovered = Recovered {
            snapshot,
            ..Recovered::default()
        };
        let mut replay = LogReplay::new(snapshot_index);
        let mut positions = EntryPositions::default();
        let mut segments = Vec::new();
        let mut active_write_offset = 0;
        for (position, &sequence) in sequences.iter().enumerate() {
            let path = segment_path(dir, sequence);
            let mut file = File::open(&path)?;
            let mut bytes = Vec::with_capacity(file.metadata()?.len() as usize);
            file.read_to_end(&mut bytes)?;
            let (offset, max_entry_index) =
                replay_segment(&bytes, sequence, &mut replay, &mut positions)?;
            let is_last = position + 1 == sequences.len();
            let tail_nonzero = !all_zero(&bytes[offset..]);
            if !is_last && tail_nonzero {
                return Err(corrupt(format!(
                    "segment {} is corrupt at byte {offset} but is not the last",
                    path.display()
                )));
            }
            if is_last {
                if tail_nonzero {
                    recovered.torn_tail_bytes = cut_torn_tail(&path, &bytes, offset)?;
                }
                active_write_offset = offset as u64;
            }
            segments.push(Segment {
                sequence,
                path,
                max_entry_index,
            });
        }

        recovered.hard_state = replay.hard_state;
        let hard_state = recovered.hard_state;
        let (active, active_write_offset) =
            open_active_segment(dir, &mut segments, segment_bytes, active_write_offset)?;
        recovered.entries = replay.entries;
        positions.forget_through(snapshot_index);
        let wal = Wal {
            dir: dir.to_path_buf(),
            segment_bytes,
            segments,
            active: Arc::new(active),
            active_write_offset,
            pending: Vec::with_capacity(64 * 1024),
            pending_max_entry_index: 0,
            pending_positions: Vec::new(),
            positions,
            last_hard_state: hard_state,
        };
        Ok((wal, recovered))
    }

    /// Buffers a batch: an optional truncation, an optional new hard state, new entries.
    /// Nothing is durable until [`Wal::sync`] returns.
    pub fn append(
        &mut self,
        hard_state: Option<WalHardState>,
        truncate_from: Option<u64>,
        entries: &[WalEntry],
    ) {
        if let Some(from) = truncate_from {
            let mut body = [0u8; 9];
            body[0] = KIND_TRUNCATE;
            body[1..9].copy_from_slice(&from.to_le_bytes());
            push_record(&mut self.pending, &body);
            self.pending_positions.push(PendingPosition::Truncate(from));
        }
        // The hard state goes before the entries: a torn write may then keep a newer term
        // without its entries (harmless) but never entries without the term they carry.
        if let Some(hs) = hard_state {
            push_record(&mut self.pending, &hard_state_body(hs));
            self.last_hard_state = hs;
        }
        for entry in entries {
            debug_assert!(entry.payload.len() + 18 <= RECORD_BODY_BYTES_MAX);
            let start = self.pending.len();
            self.pending_positions.push(PendingPosition::Entry {
                index: entry.index,
                offset: start,
            });
            self.pending.extend_from_slice(&[0u8; RECORD_HEADER_BYTES]);
            self.pending.push(KIND_ENTRY);
            self.pending.extend_from_slice(&entry.index.to_le_bytes());
            self.pending.extend_from_slice(&entry.term.to_le_bytes());
            self.pending.push(entry.kind);
            self.pending.extend_from_slice(&entry.payload);
            seal_record(&mut self.pending, start);
            self.pending_max_entry_index = self.pending_max_entry_index.max(entry.index);
        }
    }

    /// Whether anything was appended since the last sync.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Writes every buffered record with one `pwrite` and makes it durable with one
    /// `fdatasync`.
    pub fn sync(&mut self) -> io::Result<()> {
        self.write()?;
        self.active.sync_data()
    }

    /// Writes every buffered record with one `pwrite`, without waiting for the disk. Returns
    /// the file whose `fdatasync` makes this write, and every earlier one, durable (earlier
    /// segments were synced when they were rolled over).
    pub fn write(&mut self) -> io::Result<Arc<File>> {
        if self.pending.is_empty() {
            return Ok(self.active.clone());
        }
        if self.active_write_offset > 0
            && self.active_write_offset + self.pending.len() as u64 > self.segment_bytes
        {
            self.roll_segment()?;
        }
        self.active
            .write_all_at(&self.pending, self.active_write_offset)?;
        let base = self.active_write_offset;
        self.active_write_offset += self.pending.len() as u64;
        let segment = self
            .segments
            .last_mut()
            .expect("there is always an active segment");
        segment.max_entry_index = segment.max_entry_index.max(self.pending_max_entry_index);
        let sequence = segment.sequence;
        for position in self.pending_positions.drain(..) {
            match position {
                PendingPosition::Truncate(from) => self.positions.truncate(from),
                PendingPosition::Entry { index, offset } => {
                    let offset = base + offset as u64;
                    self.positions.record(index, RecordAt { sequence, offset });
                }
            }
        }
        self.pending.clear();
        self.pending_max_entry_index = 0;
        // Keep the buffer from pinning a huge allocation after a burst.
        if self.pending.capacity() > 8 << 20 {
            self.pending.shrink_to(64 * 1024);
        }
        Ok(self.active.clone())
    }

    /// Closes the active segment and starts a new one whose first record is the current
    /// hard state, so that deleting older segments never loses term or vote.
    fn roll_segment(&mut self) -> io::Result<()> {
        self.active.sync_data()?;
        let sequence = self.segments.last().map(|s| s.sequence + 1).unwrap_or(1);
        let path = segment_path(&self.dir, sequence);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        preallocate(&file, self.segment_bytes)?;
        let mut head = Vec::with_capacity(64);
        push_record(&mut head, &hard_state_body(self.last_hard_state));
        file.write_all_at(&head, 0)?;
        file.sync_all()?;
        sync_dir(&self.dir)?;
        self.segments.push(Segment {
            sequence,
            path,
            max_entry_index: 0,
        });
        self.active = Arc::new(file);
        self.active_write_offset = head.len() as u64;
        Ok(())
    }

    /// Durably stores a snapshot, then deletes segments holding only entries at or below
    /// `compact_up_to` (which the caller keeps ≤ the snapshot index).
    pub fn save_snapshot(&mut self, snapshot: &WalSnapshot, compact_up_to: u64) -> io::Result<()> {
        assert!(
            compact_up_to <= snapshot.last_index,
            "compacting past the snapshot would lose entries"
        );
        write_snapshot_file(&self.dir, snapshot)?;
        self.compact(compact_up_to)
    }

    /// Deletes closed segments whose entries are all at or below `up_to`.
    pub fn compact(&mut self, up_to: u64) -> io::Result<()> {
        self.positions.forget_through(up_to);
        let closed = self.segments.len().saturating_sub(1);
        let mut removable = 0;
        for segment in &self.segments[..closed] {
            if segment.max_entry_index > up_to {
                break;
            }
            removable += 1;
        }
        for segment in self.segments.drain(..removable) {
            fs::remove_file(&segment.path)?;
        }
        if removable > 0 {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Number of segment files, for tests and metrics.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Reads entries `from..=through` back from the files: after the first, it stops before
    /// their sizes (payload + 24, as `Entry::size_bytes` counts) would pass `bytes_max`, and
    /// at the first entry it has no record of. Only written entries are found (never what
    /// is still buffered); an entry it has no record of at `from` is `NotFound`.
    pub fn read_entries(
        &self,
        from: u64,
        through: u64,
        bytes_max: u64,
    ) -> io::Result<Vec<WalEntry>> {
        let mut out: Vec<WalEntry> = Vec::new();
        let mut bytes = 0u64;
        let active_sequence = self.segments.last().map(|s| s.sequence);
        let mut closed: Option<(u64, File)> = None;
        for index in from..=through {
            let Some(at) = self.positions.get(index) else {
                if out.is_empty() {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("entry {index} is not in the log"),
                    ));
                }
                break;
            };
            let file: &File = if Some(at.sequence) == active_sequence {
                &self.active
            } else {
                if closed
                    .as_ref()
                    .is_none_or(|(sequence, _)| *sequence != at.sequence)
                {
                    closed = Some((
                        at.sequence,
                        File::open(segment_path(&self.dir, at.sequence))?,
                    ));
                }
                &closed.as_ref().expect("opened above").1
            };
            let mut header = [0u8; RECORD_HEADER_BYTES];
            file.read_exact_at(&mut header, at.offset)?;
            let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
            let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
            if !(18..=RECORD_BODY_BYTES_MAX).contains(&len) {
                return Err(corrupt(format!(
                    "entry {index}: record of {len} bytes at {}:{}",
                    at.sequence, at.offset
                )));
            }
            let size = (len - 18) as u64 + 24;
            if !out.is_empty() && bytes + size > bytes_max {
                break;
            }
            let mut body = vec![0u8; len];
            file.read_exact_at(&mut body, at.offset + RECORD_HEADER_BYTES as u64)?;
            if crc32c::crc32c(&body) != crc || body[0] != KIND_ENTRY || le_u64(&body[1..]) != index
            {
                return Err(corrupt(format!(
                    "entry {index}: the record at {}:{} does not verify",
                    at.sequence, at.offset
                )));
            }
            let term = le_u64(&body[9..]);
            let kind = body[17];
            out.push(WalEntry {
                index,
                term,
                kind,
                payload: bytes::Bytes::from(body).slice(18..),
            });
            bytes += size;
        }
        Ok(out)
    }
}

/// Writes a snapshot file atomically (temporary file, fsync, rename, directory fsync) and
/// keeps only the newest few. Safe to call from a thread other than the log's owner: it
/// touches only snapshot files.
pub fn write_snapshot_file(dir: &Path, snapshot: &WalSnapshot) -> io::Result<()> {
    write_snapshot_streaming(
        dir,
        snapshot.last_index,
        snapshot.last_term,
        &snapshot.meta,
        |out| out.write_all(&snapshot.data),
    )
    .map(drop)
}

/// Buffer between a streamed snapshot and its file.
const SNAPSHOT_WRITE_BUFFER_BYTES: usize = 256 << 10;

/// Passes writes through while checksumming and counting them.
struct ChecksummedWriter<W> {
    inner: W,
    crc: u32,
    len: u64,
}

impl<W: Write> Write for ChecksummedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..written]);
        self.len += written as u64;
        Ok(written)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Like [`write_snapshot_file`], with the state bytes produced by `write_state` straight into
/// the file, so a large state is never held in memory whole (a growing buffer of it would
/// also leave freed pages the allocator returns to the system only later). Returns the state
/// bytes mapped read-only from the written file: they cost no memory until read.
pub fn write_snapshot_streaming(
    dir: &Path,
    last_index: u64,
    last_term: u64,
    meta: &[u8],
    write_state: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<bytes::Bytes> {
    let name = snapshot_name(last_index, last_term);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    let (head, length_at) = snapshot_head(last_index, last_term, meta);
    let (state_len, state_crc) = {
        let mut writer = ChecksummedWriter {
            inner: io::BufWriter::with_capacity(SNAPSHOT_WRITE_BUFFER_BYTES, &mut file),
            crc: 0,
            len: 0,
        };
        writer.inner.write_all(&head)?;
        write_state(&mut writer)?;
        writer.flush()?;
        (writer.len, writer.crc)
    };
    let sealed = Sealing {
        dir,
        name: &name,
        tmp: &tmp,
        file,
        head,
        length_at,
    };
    Ok(sealed.seal(state_len, state_crc)?.1)
}

fn snapshot_name(last_index: u64, last_term: u64) -> String {
    format!("snapshot-{last_index:020}-{last_term:020}.snap")
}

/// A snapshot file's head: magic, index, term, the metadata's length and bytes, and room for
/// the state's length (filled in when sealed, at the returned offset).
fn snapshot_head(last_index: u64, last_term: u64, meta: &[u8]) -> (Vec<u8>, usize) {
    let mut head = Vec::with_capacity(48 + meta.len());
    head.extend_from_slice(SNAPSHOT_MAGIC);
    head.extend_from_slice(&last_index.to_le_bytes());
    head.extend_from_slice(&last_term.to_le_bytes());
    head.extend_from_slice(&(meta.len() as u64).to_le_bytes());
    head.extend_from_slice(meta);
    let length_at = head.len();
    head.extend_from_slice(&0u64.to_le_bytes());
    (head, length_at)
}

/// A snapshot file whose head and state are written, to be sealed and put in place.
struct Sealing<'a> {
    dir: &'a Path,
    name: &'a str,
    tmp: &'a Path,
    file: File,
    head: Vec<u8>,
    length_at: usize,
}

impl Sealing<'_> {
    /// Fills in the state's length, appends the checksum, makes the file durable under its
    /// final name and drops snapshots older than the kept ones. Returns the file's path and
    /// its state bytes mapped read-only (they cost no memory until read).
    fn seal(mut self, state_len: u64, state_crc: u32) -> io::Result<(PathBuf, bytes::Bytes)> {
        self.head[self.length_at..].copy_from_slice(&state_len.to_le_bytes());
        let crc = crc32c::crc32c_combine(crc32c::crc32c(&self.head), state_crc, state_len as usize);
        self.file
            .write_all_at(&state_len.to_le_bytes(), self.length_at as u64)?;
        self.file
            .write_all_at(&crc.to_le_bytes(), self.head.len() as u64 + state_len)?;
        self.file.sync_all()?;
        let path = self.dir.join(self.name);
        fs::rename(self.tmp, &path)?;
        sync_dir(self.dir)?;
        let mut names = snapshot_names(self.dir)?;
        names.sort();
        while names.len() > SNAPSHOTS_KEPT {
            fs::remove_file(self.dir.join(names.remove(0)))?;
        }
        let total = self.head.len() as u64 + state_len + 4;
        let mapped = map_file(&self.file, total)?;
        let state = mapped.slice(self.head.len()..self.head.len() + state_len as usize);
        Ok((path, state))
    }
}

/// Where a snapshot received from the leader is assembled while its pieces arrive; one at a
/// time, under a fixed name, so an interrupted transfer leaves at most one partial file.
const INCOMING_SNAPSHOT_NAME: &str = "incoming-snapshot.tmp";

/// A snapshot received from the leader, written to its file piece by piece as the pieces
/// arrive (in order), in the format [`write_snapshot_streaming`] writes. Its state is never
/// held in memory: [`SnapshotAssembly::finish`] seals the file and [`read_snapshot_state`]
/// reads it back through a small buffer.
pub struct SnapshotAssembly {
    dir: PathBuf,
    last_index: u64,
    last_term: u64,
    file: File,
    head: Vec<u8>,
    length_at: usize,
    state_len: u64,
    state_crc: u32,
}

impl SnapshotAssembly {
    /// Starts the file of the snapshot at `last_index`, replacing any partial one.
    pub fn create(
        dir: &Path,
        last_index: u64,
        last_term: u64,
        meta: &[u8],
    ) -> io::Result<SnapshotAssembly> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join(INCOMING_SNAPSHOT_NAME))?;
        let (head, length_at) = snapshot_head(last_index, last_term, meta);
        file.write_all_at(&head, 0)?;
        Ok(SnapshotAssembly {
            dir: dir.to_path_buf(),
            last_index,
            last_term,
            file,
            head,
            length_at,
            state_len: 0,
            state_crc: 0,
        })
    }

    pub fn last_index(&self) -> u64 {
        self.last_index
    }

    /// State bytes written so far.
    pub fn state_len(&self) -> u64 {
        self.state_len
    }

    /// Writes the piece that starts at `offset` of the state, which must follow the last.
    pub fn append(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        if offset != self.state_len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "snapshot piece at {offset} where {} bytes are written",
                    self.state_len
                ),
            ));
        }
        self.file
            .write_all_at(bytes, self.head.len() as u64 + self.state_len)?;
        self.state_crc = crc32c::crc32c_append(self.state_crc, bytes);
        self.state_len += bytes.len() as u64;
        Ok(())
    }

    /// Seals the file and puts it in place as the newest snapshot. Returns its path and its
    /// state bytes mapped read-only.
    pub fn finish(self) -> io::Result<(PathBuf, bytes::Bytes)> {
        let name = snapshot_name(self.last_index, self.last_term);
        let tmp = self.dir.join(INCOMING_SNAPSHOT_NAME);
        let sealing = Sealing {
            dir: &self.dir,
            name: &name,
            tmp: &tmp,
            file: self.file,
            head: self.head,
            length_at: self.length_at,
        };
        sealing.seal(self.state_len, self.state_crc)
    }
}

/// Opens the state bytes of the snapshot file at `path` for reading through a buffer (not
/// mapped: a mapped file's pages count in the process's resident memory once read). The
/// checksum is not verified here: the file was just sealed by this process.
pub fn read_snapshot_state(path: &Path) -> io::Result<impl Read> {
    let mut file = io::BufReader::with_capacity(SNAPSHOT_WRITE_BUFFER_BYTES, File::open(path)?);
    let mut fixed = [0u8; 32];
    file.read_exact(&mut fixed)?;
    if &fixed[..8] != SNAPSHOT_MAGIC {
        return Err(corrupt(format!("{} is not a snapshot", path.display())));
    }
    let meta_len = le_u64(&fixed[24..]);
    io::copy(&mut (&mut file).take(meta_len), &mut io::sink())?;
    let mut length = [0u8; 8];
    file.read_exact(&mut length)?;
    Ok(file.take(u64::from_le_bytes(length)))
}

struct FileMapping {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value alone; reading it from any thread
// is as safe as reading an immutable slice.
unsafe impl Send for FileMapping {}
// SAFETY: as above.
unsafe impl Sync for FileMapping {}

impl AsRef<[u8]> for FileMapping {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for FileMapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range `map_file` mapped; no slice of it outlives `self`.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// The first `len` bytes of `file`, mapped read-only. Snapshot files are never modified once
/// renamed into place (a newer snapshot is a new file), so the mapping stays valid; a file
/// deleted while mapped lives on until it is unmapped.
fn map_file(file: &File, len: u64) -> io::Result<bytes::Bytes> {
    use std::os::fd::AsRawFd;
    if len == 0 {
        return Ok(bytes::Bytes::new());
    }
    let len = usize::try_from(len).map_err(|_| corrupt("file too large to map".into()))?;
    // SAFETY: maps a valid descriptor read-only; the kernel picks the address.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(bytes::Bytes::from_owner(FileMapping { ptr, len }))
}

fn hard_state_body(hs: WalHardState) -> [u8; 25] {
    let mut body = [0u8; 25];
    body[0] = KIND_HARD_STATE;
    body[1..9].copy_from_slice(&hs.term.to_le_bytes());
    body[9..17].copy_from_slice(&hs.vote.to_le_bytes());
    body[17..25].copy_from_slice(&hs.commit.to_le_bytes());
    body
}

fn push_record(out: &mut Vec<u8>, body: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&[0u8; RECORD_HEADER_BYTES]);
    out.extend_from_slice(body);
    seal_record(out, start);
}

/// Fills in the length and checksum of the record starting at `start`, whose body is the
/// rest of `out`.
fn seal_record(out: &mut [u8], start: usize) {
    let body = &out[start + RECORD_HEADER_BYTES..];
    let len = body.len() as u32;
    let crc = crc32c::crc32c(body);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

enum Record {
    Entry(WalEntry),
    HardState(WalHardState),
    Truncate(u64),
}

fn le_u64(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().expect("caller checked length"))
}

/// Reads the record at `offset`, or `None` at the end of valid data.
fn read_record(bytes: &[u8], offset: usize) -> Option<(Record, usize)> {
    let header = bytes.get(offset..offset + RECORD_HEADER_BYTES)?;
    let len = u32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    if len == 0 || len > RECORD_BODY_BYTES_MAX {
        return None;
    }
    let body = bytes.get(offset + RECORD_HEADER_BYTES..offset + RECORD_HEADER_BYTES + len)?;
    if crc32c::crc32c(body) != crc {
        return None;
    }
    let next = offset + RECORD_HEADER_BYTES + len;
    let record = match body[0] {
        KIND_ENTRY if body.len() >= 18 => Record::Entry(WalEntry {
            index: le_u64(&body[1..]),
            term: le_u64(&body[9..]),
            kind: body[17],
            payload: bytes::Bytes::copy_from_slice(&body[18..]),
        }),
        KIND_HARD_STATE if body.len() == 25 => Record::HardState(WalHardState {
            term: le_u64(&body[1..]),
            vote: le_u64(&body[9..]),
            commit: le_u64(&body[17..]),
        }),
        KIND_TRUNCATE if body.len() == 9 => Record::Truncate(le_u64(&body[1..])),
        _ => return None,
    };
    Some((record, next))
}

fn snapshot_names(dir: &Path) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with("snapshot-") && name.ends_with(".snap") {
            names.push(name);
        }
    }
    Ok(names)
}

/// Loads the newest snapshot whose checksum verifies; a damaged newest one falls back to the
/// previous one.
fn load_newest_snapshot(dir: &Path) -> io::Result<Option<WalSnapshot>> {
    let mut names = snapshot_names(dir)?;
    names.sort();
    while let Some(name) = names.pop() {
        let file = File::open(dir.join(&name))?;
        let bytes = map_file(&file, file.metadata()?.len())?;
        match parse_snapshot(&bytes) {
            Some(snapshot) => return Ok(Some(snapshot)),
            None => eprintln!("praetor: ignoring damaged snapshot {name}"),
        }
    }
    Ok(None)
}

/// Splits a snapshot file; the state bytes share `bytes`' buffer.
fn parse_snapshot(bytes: &bytes::Bytes) -> Option<WalSnapshot> {
    if bytes.len() < 8 + 8 + 8 + 8 + 8 + 4 || &bytes[..8] != SNAPSHOT_MAGIC {
        return None;
    }
    let (content, crc_bytes) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(content) != u32::from_le_bytes(crc_bytes.try_into().ok()?) {
        return None;
    }
    let last_index = le_u64(&content[8..]);
    let last_term = le_u64(&content[16..]);
    let meta_len = le_u64(&content[24..]) as usize;
    let meta_end = 32usize.checked_add(meta_len)?;
    let meta = content.get(32..meta_end)?.to_vec();
    let data_len = le_u64(content.get(meta_end..meta_end + 8)?) as usize;
    let data_start = meta_end.checked_add(8)?;
    if data_start.checked_add(data_len)? != content.len() {
        return None;
    }
    Some(WalSnapshot {
        last_index,
        last_term,
        meta,
        data: bytes.slice(data_start..data_start + data_len),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64, payload: &str) -> WalEntry {
        WalEntry {
            index,
            term,
            kind: 0,
            payload: bytes::Bytes::copy_from_slice(payload.as_bytes()),
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("praetor-wal-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn append_sync_recover() {
        let dir = temp_dir("basic");
        {
            let (mut wal, recovered) = Wal::open(&dir, 1 << 20).unwrap();
            assert!(recovered.entries.is_empty());
            wal.append(
                Some(WalHardState {
                    term: 1,
                    vote: 1,
                    commit: 0,
                }),
                None,
                &[entry(1, 1, "a"), entry(2, 1, "b")],
            );
            wal.sync().unwrap();
            wal.append(
                Some(WalHardState {
                    term: 1,
                    vote: 1,
                    commit: 2,
                }),
                None,
                &[entry(3, 1, "c")],
            );
            // Not synced: must not be recovered.
        }
        let (_, recovered) = Wal::open(&dir, 1 << 20).unwrap();
        assert_eq!(recovered.entries, vec![entry(1, 1, "a"), entry(2, 1, "b")]);
        assert_eq!(
            recovered.hard_state,
            WalHardState {
                term: 1,
                vote: 1,
                commit: 0
            }
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn truncation_replaces_suffix() {
        let dir = temp_dir("truncate");
        {
            let (mut wal, _) = Wal::open(&dir, 1 << 20).unwrap();
            wal.append(
                None,
                None,
                &[entry(1, 1, "a"), entry(2, 1, "b"), entry(3, 1, "c")],
            );
            wal.sync().unwrap();
            wal.append(
                Some(WalHardState {
                    term: 2,
                    vote: 2,
                    commit: 1,
                }),
                Some(2),
                &[entry(2, 2, "B")],
            );
            wal.sync().unwrap();
        }
        let (_, recovered) = Wal::open(&dir, 1 << 20).unwrap();
        assert_eq!(recovered.entries, vec![entry(1, 1, "a"), entry(2, 2, "B")]);
        assert_eq!(recovered.hard_state.term, 2);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn torn_tail_is_discarded_and_zeroed() {
        let dir = temp_dir("torn");
        {
            let (mut wal, _) = Wal::open(&dir, 1 << 20).unwrap();
            wal.append(None, None, &[entry(1, 1, "first")]);
            wal.sync().unwrap();
            wal.append(None, None, &[entry(2, 1, "second")]);
            wal.sync().unwrap();
        }
        // Damage the last record's payload as a crash mid-write would.
        let path = segment_path(&dir, 1);
        let mut bytes = fs::read(&path).unwrap();
        let second_payload = bytes.windows(6).position(|w| w == b"second").unwrap();
        bytes[second_payload] ^= 0xff;
        fs::write(&path, &bytes).unwrap();
        {
            let (mut wal, recovered) = Wal::open(&dir, 1 << 20).unwrap();
            assert_eq!(recovered.entries, vec![entry(1, 1, "first")]);
            assert!(recovered.torn_tail_bytes > 0);
            wal.append(None, None, &[entry(2, 1, "x")]);
            wal.sync().unwrap();
        }
        let (_, recovered) = Wal::open(&dir, 1 << 20).unwrap();
        assert_eq!(
            recovered.entries,
            vec![entry(1, 1, "first"), entry(2, 1, "x")]
        );
        assert_eq!(recovered.torn_tail_bytes, 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn entries_are_read_back_as_recovery_would_find_them() {
        let dir = temp_dir("read");
        let payload = "p".repeat(600);
        let big = |i: u64, term: u64| entry(i, term, &format!("{payload}{i}"));
        {
            let (mut wal, _) = Wal::open(&dir, 4096).unwrap();
            for i in 1..=20 {
                wal.append(None, None, &[big(i, 1)]);
                wal.sync().unwrap();
            }
            assert!(wal.segment_count() > 2, "the reads cross segments");
            // Buffered but not written: not readable yet.
            wal.append(None, None, &[big(21, 1)]);
            assert_eq!(
                wal.read_entries(21, 21, u64::MAX).unwrap_err().kind(),
                io::ErrorKind::NotFound
            );
            wal.write().unwrap();
            let all = wal.read_entries(1, 21, u64::MAX).unwrap();
            assert_eq!(all, (1..=21).map(|i| big(i, 1)).collect::<Vec<_>>());
            // A rewritten tail replaces what was there.
            wal.append(None, Some(19), &[entry(19, 2, "x"), entry(20, 2, "y")]);
            wal.sync().unwrap();
            let tail = wal.read_entries(17, 25, u64::MAX).unwrap();
            assert_eq!(
                tail,
                vec![big(17, 1), big(18, 1), entry(19, 2, "x"), entry(20, 2, "y")]
            );
            // The byte budget counts payload + 24 and always lets the first entry through.
            let budget = 2 * (payload.len() as u64 + 2 + 24);
            assert_eq!(wal.read_entries(3, 10, budget).unwrap().len(), 2);
            assert_eq!(wal.read_entries(3, 10, 1).unwrap().len(), 1);
            // Compacted entries are gone for reads even while their segment remains.
            wal.compact(5).unwrap();
            assert_eq!(
                wal.read_entries(5, 6, u64::MAX).unwrap_err().kind(),
                io::ErrorKind::NotFound
            );
            assert_eq!(wal.read_entries(6, 6, u64::MAX).unwrap(), vec![big(6, 1)]);
        }
        // After a restart the positions are rebuilt from the files.
        let snapshot = snapshot_at(8, 1);
        write_snapshot_file(&dir, &snapshot).unwrap();
        let (wal, recovered) = Wal::open(&dir, 4096).unwrap();
        assert_eq!(recovered.entries.first().unwrap().index, 9);
        assert_eq!(
            wal.read_entries(8, 8, u64::MAX).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        let read = wal.read_entries(9, 30, u64::MAX).unwrap();
        assert_eq!(read, recovered.entries);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn segments_roll_snapshot_and_compact() {
        let dir = temp_dir("roll");
        let payload = "p".repeat(300);
        {
            let (mut wal, _) = Wal::open(&dir, 4096).unwrap();
            wal.append(
                Some(WalHardState {
                    term: 3,
                    vote: 7,
                    commit: 0,
                }),
                None,
                &[],
            );
            wal.sync().unwrap();
            for i in 1..=40 {
                wal.append(None, None, &[entry(i, 3, &payload)]);
                wal.sync().unwrap();
            }
            assert!(wal.segment_count() > 3);
            let snapshot = WalSnapshot {
                last_index: 30,
                last_term: 3,
                meta: b"meta".to_vec(),
                data: bytes::Bytes::from_static(b"state"),
            };
            wal.save_snapshot(&snapshot, 30).unwrap();
        }
        let (wal, recovered) = Wal::open(&dir, 4096).unwrap();
        let snapshot = recovered.snapshot.unwrap();
        assert_eq!(
            (snapshot.last_index, &snapshot.meta[..], &snapshot.data[..]),
            (30, &b"meta"[..], &b"state"[..])
        );
        assert_eq!(recovered.entries.first().unwrap().index, 31);
        assert_eq!(recovered.entries.last().unwrap().index, 40);
        assert_eq!(
            recovered.hard_state,
            WalHardState {
                term: 3,
                vote: 7,
                commit: 0
            },
            "hard state survives compaction"
        );
        assert!(wal.segment_count() < 10);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn streamed_snapshot_is_mapped_and_recovered() {
        let dir = temp_dir("stream");
        let _ = Wal::open(&dir, 1 << 20).unwrap();
        let state: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mapped = write_snapshot_streaming(&dir, 9, 2, b"meta", |out| {
            // In pieces, as a serializer writes.
            for piece in state.chunks(7001) {
                out.write_all(piece)?;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(&mapped[..], &state[..]);
        let (_, recovered) = Wal::open(&dir, 1 << 20).unwrap();
        let snapshot = recovered.snapshot.unwrap();
        assert_eq!((snapshot.last_index, &snapshot.meta[..]), (9, &b"meta"[..]));
        assert_eq!(&snapshot.data[..], &state[..]);
        // An empty state is a valid snapshot too.
        let empty = write_snapshot_streaming(&dir, 10, 2, b"", |_| Ok(())).unwrap();
        assert!(empty.is_empty());
        let (_, recovered) = Wal::open(&dir, 1 << 20).unwrap();
        let snapshot = recovered.snapshot.unwrap();
        assert_eq!((snapshot.last_index, snapshot.data.len()), (10, 0));
        // The older snapshot stays readable through its mapping after newer ones replace it.
        for index in 11..14 {
            write_snapshot_streaming(&dir, index, 2, b"", |out| out.write_all(b"x")).unwrap();
        }
        assert!(!dir
            .join(format!("snapshot-{:020}-{:020}.snap", 9, 2))
            .exists());
        assert_eq!(&mapped[..], &state[..]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn damaged_snapshot_falls_back() {
        let dir = temp_dir("snapfall");
        {
            let (mut wal, _) = Wal::open(&dir, 1 << 20).unwrap();
            for i in 1..=3 {
                wal.append(None, None, &[entry(i, 1, "v")]);
            }
            wal.sync().unwrap();
            let first = WalSnapshot {
                last_index: 1,
                last_term: 1,
                meta: vec![],
                data: bytes::Bytes::from_static(b"one"),
            };
            wal.save_snapshot(&first, 0).unwrap();
            let second = WalSnapshot {
                last_index: 2,
                last_term: 1,
                meta: vec![],
                data: bytes::Bytes::from_static(b"two"),
            };
            wal.save_snapshot(&second, 0).unwrap();
        }
        let newest = dir.join(format!("snapshot-{:020}-{:020}.snap", 2, 1));
        let mut bytes = fs::read(&newest).unwrap();
        let last = bytes.len() - 6;
        bytes[last] ^= 1;
        fs::write(&newest, bytes).unwrap();
        let (_, recovered) = Wal::open(&dir, 1 << 20).unwrap();
        assert_eq!(&recovered.snapshot.unwrap().data[..], b"one");
        assert_eq!(
            recovered
                .entries
                .iter()
                .map(|e| e.index)
                .collect::<Vec<_>>(),
            vec![2, 3]
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    fn snapshot_at(last_index: u64, last_term: u64) -> WalSnapshot {
        WalSnapshot {
            last_index,
            last_term,
            meta: vec![],
            data: bytes::Bytes::from_static(b"state"),
        }
    }

    fn indexes_and_terms(recovered: &Recovered) -> Vec<(u64, u64)> {
        recovered
            .entries
            .iter()
            .map(|e| (e.index, e.term))
            .collect()
    }

    #[test]
    fn a_rewrite_covered_by_a_snapshot_drops_the_old_tail_above_it() {
        // A follower holds a divergent tail 4..=6 of term 1; a leader of term 2 overwrites
        // from 3, the follower applies through 5 and snapshots there. The old 6 must not come
        // back after the snapshot: it would follow a term-2 snapshot with a term-1 entry.
        let dir = temp_dir("rewrite-under-snapshot");
        {
            let (mut wal, _) = Wal::open(&dir, 1 << 20).unwrap();
            let old: Vec<WalEntry> = (1..=6).map(|i| entry(i, 1, "old")).collect();
            wal.append(None, None, &old);
            let new: Vec<WalEntry> = (3..=5).map(|i| entry(i, 2, "new")).collect();
            wal.append(None, Some(3), &new);
            wal.sync().unwrap();
            wal.save_snapshot(&snapshot_at(5, 2), 0).unwrap();
        }
        let (_, recovered) = Wal::open(&dir, 1 << 20).unwrap();
        assert_eq!(indexes_and_terms(&recovered), Vec::<(u64, u64)>::new());
        // The same holds without the truncate record: an entry at or below the snapshot ends
        // what came before it.
        let mut replay = LogReplay::new(5);
        for index in 1..=6 {
            replay.entry(entry(index, 1, "old")).unwrap();
        }
        replay.entry(entry(3, 2, "new")).unwrap();
        assert!(replay.entries.is_empty(), "{:?}", replay.entries);
        replay.entry(entry(6, 2, "next")).unwrap();
        assert_eq!(replay.entries.len(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn replay_refuses_gaps_and_truncates_exactly_above_the_snapshot() {
        let mut replay = LogReplay::new(10);
        assert!(
            replay.entry(entry(12, 1, "gap")).is_err(),
            "log must start at 11"
        );
        for index in 11..=15 {
            replay.entry(entry(index, 1, "v")).unwrap();
        }
        replay.truncate(14);
        assert_eq!(replay.entries.last().map(|e| e.index), Some(13));
        assert!(replay.entry(entry(15, 1, "gap")).is_err(), "14 is missing");
        replay.truncate(11);
        assert!(replay.entries.is_empty());
    }

    #[test]
    fn a_zero_tail_is_told_from_one_with_a_byte_left() {
        let mut tail = vec![0u8; 200_000];
        assert!(all_zero(&tail));
        assert!(all_zero(&tail[..0]));
        tail[131_073] = 1;
        assert!(!all_zero(&tail));
        assert!(all_zero(&tail[..131_073]));
        assert!(!all_zero(&tail[131_073..131_074]));
    }
}
