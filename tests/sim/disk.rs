//! A simulated disk with the durability semantics of praetor's log (`shard/wal.rs`): records
//! (truncation, hard state, entry) are buffered, then written, then made durable by a sync;
//! snapshots are files replaced atomically. A crash keeps what was durable plus a prefix of
//! what was written but not yet synced (a torn tail: the log's checksums discard the first
//! incomplete record and everything after it). Recovery replays the durable records through
//! the log's own replay (`shard::wal::LogReplay`), refusals of a log with gaps included.

use bytes::Bytes;
use praetor::raft::{Entry, HardState, LogIndex, LogRead, SnapshotMeta};
use praetor::replica::Recovered;
use praetor::shard::wal::{LogReplay, WalEntry, WalHardState};
use std::collections::BTreeMap;

/// One log record, in the order the log writes them.
#[derive(Clone, Debug)]
pub enum Record {
    Truncate(LogIndex),
    HardState(HardState),
    Entry(Entry),
}

#[derive(Default)]
pub struct Disk {
    pub snapshot: Option<(SnapshotMeta, Bytes)>,
    /// Durable records, oldest first.
    records: Vec<Record>,
    /// The newest durable hard state (what recovery will find).
    pub hard_state: HardState,
    /// Handed to the file but not yet synced, each with the sync sequence that covers it
    /// (0 for a write covered only by a sync on the thread), oldest first.
    pub written: Vec<(u64, Record)>,
    /// Appended but not yet handed to the file.
    pub buffered: Vec<Record>,
}

impl Disk {
    /// Buffers one log write in the log's record order.
    pub fn append(
        &mut self,
        hard_state: Option<HardState>,
        truncate_from: Option<LogIndex>,
        entries: &[Entry],
    ) {
        if let Some(from) = truncate_from {
            self.buffered.push(Record::Truncate(from));
        }
        if let Some(hard_state) = hard_state {
            self.buffered.push(Record::HardState(hard_state));
        }
        self.buffered
            .extend(entries.iter().cloned().map(Record::Entry));
    }

    /// Hands everything buffered to the file, covered by sync `sequence`.
    pub fn write(&mut self, sequence: u64) {
        self.written
            .extend(self.buffered.drain(..).map(|record| (sequence, record)));
    }

    /// A sync on the thread: everything buffered or written becomes durable.
    pub fn sync_all(&mut self) {
        self.write(0);
        let written = std::mem::take(&mut self.written);
        self.make_durable(written.into_iter().map(|(_, record)| record));
    }

    /// A background sync `sequence` completed: the writes it covers are durable.
    pub fn sync_through(&mut self, sequence: u64) {
        let covered = self
            .written
            .iter()
            .take_while(|(covered_by, _)| *covered_by != 0 && *covered_by <= sequence)
            .count();
        let durable: Vec<(u64, Record)> = self.written.drain(..covered).collect();
        self.make_durable(durable.into_iter().map(|(_, record)| record));
    }

    fn make_durable(&mut self, records: impl Iterator<Item = Record>) {
        for record in records {
            if let Record::HardState(hs) = &record {
                self.hard_state = *hs;
            }
            self.records.push(record);
        }
    }

    /// Records written but not durable: what a crash may keep a prefix of.
    pub fn unsynced(&self) -> usize {
        self.written.len()
    }

    /// The machine stopped: `survivors` of the unsynced written records reached the platter.
    pub fn crash(&mut self, survivors: usize) {
        let survivors = survivors.min(self.written.len());
        let kept: Vec<Record> = self
            .written
            .drain(..)
            .take(survivors)
            .map(|(_, record)| record)
            .collect();
        self.make_durable(kept.into_iter());
        self.buffered.clear();
    }

    /// A snapshot file renamed into place; the newest by index is the one recovery loads.
    pub fn store_snapshot(&mut self, meta: SnapshotMeta, data: Bytes) {
        if self
            .snapshot
            .as_ref()
            .is_none_or(|(current, _)| current.last_index <= meta.last_index)
        {
            self.snapshot = Some((meta, data));
        }
    }

    /// Deletes a prefix of the log holding only entries at or below `through`, as deleting
    /// whole old segments does; `cut` chooses where the segment boundary falls (0 to the
    /// longest such prefix). A rolled segment starts with the hard state, so the newest
    /// hard state of the deleted part survives.
    pub fn compact(&mut self, through: LogIndex, cut: u64) {
        let removable = self
            .records
            .iter()
            .take_while(|record| match record {
                Record::Entry(entry) => entry.index <= through,
                Record::Truncate(_) | Record::HardState(_) => true,
            })
            .count();
        let removed = (cut % (removable as u64 + 1)) as usize;
        let last_hard_state =
            self.records[..removed]
                .iter()
                .rev()
                .find_map(|record| match record {
                    Record::HardState(hs) => Some(*hs),
                    _ => None,
                });
        self.records.drain(..removed);
        if let Some(hs) = last_hard_state {
            self.records.insert(0, Record::HardState(hs));
        }
    }

    /// What reading the log file back finds for `read` (`Wal::read_entries`): the records
    /// written to the file so far (durable or not: a read sees what was written), replayed so
    /// that a truncation or a rewritten entry supersedes what came before it.
    pub fn read(&self, read: LogRead) -> Result<Vec<Entry>, String> {
        let mut file: BTreeMap<LogIndex, &Entry> = BTreeMap::new();
        let written = self.written.iter().map(|(_, record)| record);
        for record in self.records.iter().chain(written) {
            match record {
                Record::Truncate(from) => drop(file.split_off(from)),
                Record::HardState(_) => {}
                Record::Entry(entry) => {
                    file.split_off(&entry.index);
                    file.insert(entry.index, entry);
                }
            }
        }
        if !file.contains_key(&read.from) {
            return Err(format!("entry {} is not in the log file", read.from));
        }
        let mut out: Vec<Entry> = Vec::new();
        let mut bytes = 0;
        for (&index, entry) in file.range(read.from..=read.through) {
            if out.last().is_some_and(|last| last.index + 1 != index) {
                break;
            }
            if !out.is_empty() && bytes + entry.size_bytes() > read.bytes_max {
                break;
            }
            bytes += entry.size_bytes();
            out.push((*entry).clone());
        }
        Ok(out)
    }

    /// What `Wal::open` recovers from the durable records and the newest snapshot: the
    /// records go through the log's own replay.
    pub fn recover(&self) -> Result<Recovered, String> {
        let snapshot_index = self
            .snapshot
            .as_ref()
            .map_or(0, |(meta, _)| meta.last_index);
        let mut replay = LogReplay::new(snapshot_index);
        for record in &self.records {
            match record {
                Record::Entry(entry) => replay.entry(WalEntry::from_entry(entry))?,
                Record::HardState(hs) => replay.hard_state(WalHardState::from(*hs)),
                Record::Truncate(from) => replay.truncate(*from),
            }
        }
        let entries = replay
            .entries
            .into_iter()
            .map(WalEntry::into_entry)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Recovered {
            hard_state: HardState::from(replay.hard_state),
            entries,
            snapshot: self.snapshot.clone(),
        })
    }
}
