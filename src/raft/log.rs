//! The core's view of the replicated log, and what of it is durable and what is in memory.
//!
//! The log is a snapshot (last index and term) followed by contiguous entries. Entries at or
//! below the snapshot index may be kept ("trailing" entries) so that slightly lagging peers
//! catch up without a snapshot. Every stored entry is in the driver's durable log; only a
//! suffix of them is also held in memory (the cache). Entries leave the cache once they are
//! durable and handed out to be applied, and either no peer still needs them or the cache
//! holds more than its byte bound (`RaftConfig::log_cache_bytes`); the leader reads older
//! ones back from the durable log through the driver ([`super::LogRead`]). The term of every
//! stored entry stays known (as runs of equal terms, a few words per term), so the
//! consistency checks, elections and conflict hints never need the entries themselves.
//!
//! Besides the entries it tracks four watermarks:
//!
//! - `committed`: known committed (never decreases);
//! - `handed_out`: entries given to the driver to persist (`Ready::entries`);
//! - `persisted`: entries the driver reported durable (`advance`). Only these count towards
//!   the leader's own quorum vote and only these are applied;
//! - `committed_handed_out`: committed entries given to the driver to apply.
//!
//! Invariants: `snapshot.last_index <= committed <= last_index`, `persisted <= handed_out <=
//! last_index`, `first_index <= snapshot.last_index + 1`, stored entries are contiguous with
//! non-decreasing terms, and the cache holds exactly the stored entries from
//! `cache_first_index` to `last_index`, every entry below it being committed, durable and
//! handed out (so nothing the core must still persist, apply or truncate ever leaves it).

use std::collections::VecDeque;

use super::types::{Entry, LogIndex, RaftError, SnapshotMeta, Term};

/// Where [`RaftLog::entries_from`] found the entries asked for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fetched {
    /// Held in memory (empty when `from` is past the last entry).
    Held(Vec<Entry>),
    /// Stored but only in the durable log: entries `from..=through` can be read back.
    OnDisk { through: LogIndex },
    /// Compacted away: only a snapshot can bring a peer past it.
    Compacted,
}

#[derive(Debug)]
pub(crate) struct RaftLog {
    pub snapshot: SnapshotMeta,
    /// The first stored index (`last_index + 1` when nothing is stored).
    first: LogIndex,
    last: LogIndex,
    /// The terms of the stored entries: `(first index, term)` of each run of equal terms,
    /// in index order with increasing terms; empty when nothing is stored.
    terms: VecDeque<(LogIndex, Term)>,
    /// The cached suffix of the stored entries.
    entries: VecDeque<Entry>,
    /// [`Entry::size_bytes`] summed over `entries`.
    cached_bytes: u64,
    pub committed: LogIndex,
    pub persisted: LogIndex,
    pub handed_out: LogIndex,
    /// The durable log must drop entries from here before appending the next ready's entries.
    pub pending_truncate: Option<LogIndex>,
    pub applied: LogIndex,
    pub committed_handed_out: LogIndex,
}

impl RaftLog {
    /// Rebuilds the log from durable state; `commit` is clamped to what the log can prove.
    /// Every restored entry starts in the cache: none of them is applied yet.
    pub fn restore(
        snapshot: Option<SnapshotMeta>,
        entries: Vec<Entry>,
        commit: LogIndex,
    ) -> Result<Self, RaftError> {
        let snapshot = snapshot.unwrap_or_default();
        let invalid = |why: String| Err(RaftError::InvalidRestoredState(why));
        for pair in entries.windows(2) {
            if pair[1].index != pair[0].index + 1 {
                return invalid(format!(
                    "entries not contiguous: {} then {}",
                    pair[0].index, pair[1].index
                ));
            }
            if pair[1].term < pair[0].term {
                return invalid(format!("term decreases at index {}", pair[1].index));
            }
        }
        let mut kept: VecDeque<Entry> = entries.into();
        if let (Some(first), Some(last)) = (kept.front(), kept.back()) {
            if first.index == 0 {
                return invalid("an entry has index 0".to_string());
            }
            if first.index > snapshot.last_index + 1 {
                return invalid(format!(
                    "gap between snapshot {} and first entry {}",
                    snapshot.last_index, first.index
                ));
            }
            if last.index < snapshot.last_index {
                // All covered by the snapshot and not connected to it: useless.
                kept.clear();
            } else if first.index <= snapshot.last_index {
                let at_snapshot = &kept[(snapshot.last_index - first.index) as usize];
                if at_snapshot.term != snapshot.last_term {
                    return invalid(format!(
                        "entry {} has term {} but the snapshot says {}",
                        snapshot.last_index, at_snapshot.term, snapshot.last_term
                    ));
                }
            }
        }
        if let Some(first) = kept.front() {
            if first.index == snapshot.last_index + 1 && first.term < snapshot.last_term {
                return invalid("first entry's term is below the snapshot's".to_string());
            }
        }
        let mut log = RaftLog {
            first: snapshot.last_index + 1,
            last: snapshot.last_index,
            snapshot,
            terms: VecDeque::new(),
            entries: VecDeque::new(),
            cached_bytes: 0,
            committed: 0,
            persisted: 0,
            handed_out: 0,
            pending_truncate: None,
            applied: 0,
            committed_handed_out: 0,
        };
        if let Some(first) = kept.front() {
            log.first = first.index;
            log.last = first.index - 1;
        }
        for entry in kept {
            log.push(entry);
        }
        let last = log.last_index();
        log.committed = commit.clamp(log.snapshot.last_index, last);
        log.persisted = last;
        log.handed_out = last;
        log.applied = log.snapshot.last_index;
        log.committed_handed_out = log.snapshot.last_index;
        log.check();
        Ok(log)
    }

    /// The first stored index (held in memory or only durable).
    pub fn first_index(&self) -> LogIndex {
        self.first
    }

    /// The first index whose entry is held in memory (`last_index + 1` when none is).
    pub fn cache_first_index(&self) -> LogIndex {
        self.last + 1 - self.entries.len() as u64
    }

    pub fn last_index(&self) -> LogIndex {
        self.last
    }

    pub fn last_term(&self) -> Term {
        self.term(self.last_index())
            .unwrap_or(self.snapshot.last_term)
    }

    /// Bytes ([`Entry::size_bytes`]) of the entries held in memory.
    pub fn cached_bytes(&self) -> u64 {
        self.cached_bytes
    }

    /// The term of the entry at `index`, if known (stored, or the snapshot's last).
    pub fn term(&self, index: LogIndex) -> Option<Term> {
        if index == self.snapshot.last_index {
            return Some(self.snapshot.last_term);
        }
        if index < self.first || index > self.last {
            return None;
        }
        let run = self.terms.partition_point(|&(start, _)| start <= index);
        debug_assert!(run > 0, "the first run starts at the first stored index");
        Some(self.terms[run - 1].1)
    }

    /// The entry at `index`, if it is held in memory.
    pub fn entry(&self, index: LogIndex) -> Option<&Entry> {
        let first = self.cache_first_index();
        if index < first {
            return None;
        }
        self.entries.get((index - first) as usize)
    }

    /// Entries from `from` on, at most `count_max` of them and (after the first) at most
    /// `bytes_max` of payload, or where to find them when they are not held.
    pub fn entries_from(&self, from: LogIndex, count_max: usize, bytes_max: u64) -> Fetched {
        if from > self.last_index() {
            return Fetched::Held(Vec::new());
        }
        if from < self.first {
            return Fetched::Compacted;
        }
        let cache_first = self.cache_first_index();
        if from < cache_first {
            let through = (cache_first - 1).min(from + count_max.max(1) as u64 - 1);
            return Fetched::OnDisk { through };
        }
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for entry in self.entries.range((from - cache_first) as usize..) {
            if out.len() >= count_max || (!out.is_empty() && bytes + entry.size_bytes() > bytes_max)
            {
                break;
            }
            bytes += entry.size_bytes();
            out.push(entry.clone());
        }
        Fetched::Held(out)
    }

    /// Entries in `[from, through]`, all of which must be held.
    pub fn slice(&self, from: LogIndex, through: LogIndex) -> Vec<Entry> {
        if from > through {
            return Vec::new();
        }
        let first = self.cache_first_index();
        assert!(
            from >= first && through <= self.last,
            "entries {from}..={through} are not all held (held: {first}..={})",
            self.last
        );
        self.entries
            .range((from - first) as usize..=(through - first) as usize)
            .cloned()
            .collect()
    }

    /// Appends entries that directly follow the last one.
    pub fn append(&mut self, entries: impl IntoIterator<Item = Entry>) {
        for entry in entries {
            debug_assert_eq!(entry.index, self.last_index() + 1);
            debug_assert!(entry.term >= self.last_term());
            self.push(entry);
        }
    }

    fn push(&mut self, entry: Entry) {
        debug_assert_eq!(entry.index, self.last + 1);
        if self
            .terms
            .back()
            .is_none_or(|&(_, term)| term != entry.term)
        {
            debug_assert!(self.terms.back().is_none_or(|&(_, term)| term < entry.term));
            self.terms.push_back((entry.index, entry.term));
        }
        self.last = entry.index;
        self.cached_bytes += entry.size_bytes();
        self.entries.push_back(entry);
    }

    /// Drops every entry at `index` and above; they were never committed.
    pub fn truncate_from(&mut self, index: LogIndex) {
        debug_assert!(index > self.committed, "truncating committed entries");
        assert!(
            index >= self.cache_first_index(),
            "truncating at {index}, below the cache (entries that left it are committed)"
        );
        while self.entries.back().is_some_and(|e| e.index >= index) {
            let entry = self.entries.pop_back().expect("checked");
            self.cached_bytes -= entry.size_bytes();
        }
        if index <= self.last {
            self.last = index - 1;
            while self.terms.back().is_some_and(|&(start, _)| start >= index) {
                self.terms.pop_back();
            }
        }
        if index <= self.handed_out {
            self.pending_truncate = Some(self.pending_truncate.map_or(index, |t| t.min(index)));
            self.handed_out = index - 1;
        }
        self.persisted = self.persisted.min(index - 1);
        self.check();
    }

    /// Whether a candidate's log (its last index and term) is at least as up to date as ours.
    pub fn is_up_to_date(&self, last_index: LogIndex, last_term: Term) -> bool {
        let my_term = self.last_term();
        last_term > my_term || (last_term == my_term && last_index >= self.last_index())
    }

    /// The first index holding `term`, searching only stored entries at or below `at`.
    pub fn first_index_of_term(&self, term: Term, at: LogIndex) -> LogIndex {
        let run = self.terms.partition_point(|&(_, t)| t < term);
        match self.terms.get(run) {
            Some(&(start, t)) if t == term && start <= at => start,
            _ => at,
        }
    }

    /// The last index holding `term`, if any stored entry (or the snapshot) has it.
    pub fn last_index_of_term(&self, term: Term) -> Option<LogIndex> {
        let run = self.terms.partition_point(|&(_, t)| t <= term);
        if run > 0 && self.terms[run - 1].1 == term {
            return Some(self.terms.get(run).map_or(self.last, |&(next, _)| next - 1));
        }
        if self.snapshot.last_term == term && self.first > self.snapshot.last_index {
            return Some(self.snapshot.last_index);
        }
        None
    }

    /// Drops stored entries at or below `through`.
    pub fn compact(&mut self, through: LogIndex) {
        debug_assert!(through <= self.applied);
        if through < self.first {
            return;
        }
        while self.entries.front().is_some_and(|e| e.index <= through) {
            let entry = self.entries.pop_front().expect("checked");
            self.cached_bytes -= entry.size_bytes();
        }
        self.first = through + 1;
        if self.first > self.last {
            self.terms.clear();
            self.first = self.last + 1;
        } else {
            while self.terms.len() > 1 && self.terms[1].0 <= self.first {
                self.terms.pop_front();
            }
            if let Some(run) = self.terms.front_mut() {
                run.0 = run.0.max(self.first);
            }
        }
        self.check();
    }

    /// Lets go of held entries that are durable and handed out to be applied: those below
    /// `keep_from` (no peer needs them), then the oldest others while the cache holds more
    /// than `bytes_max`. They stay stored; the leader reads them back if a peer needs them.
    pub fn evict(&mut self, keep_from: LogIndex, bytes_max: u64) {
        let evictable_through = self.persisted.min(self.committed_handed_out);
        while let Some(front) = self.entries.front() {
            let wanted = front.index >= keep_from && self.cached_bytes <= bytes_max;
            if wanted || front.index > evictable_through {
                break;
            }
            let entry = self.entries.pop_front().expect("checked");
            self.cached_bytes -= entry.size_bytes();
        }
        if self.entries.is_empty() {
            // Keep the allocation from growing back for nothing, but do not hold a large one.
            self.entries.shrink_to(64);
        }
        self.check();
    }

    /// Replaces the whole log by a snapshot received from the leader.
    pub fn install_snapshot(&mut self, meta: SnapshotMeta) {
        let index = meta.last_index;
        debug_assert!(index > self.committed);
        self.entries.clear();
        self.terms.clear();
        self.cached_bytes = 0;
        self.first = index + 1;
        self.last = index;
        self.snapshot = meta;
        self.committed = index;
        self.handed_out = index;
        self.persisted = index;
        self.pending_truncate = None;
        self.committed_handed_out = index;
        self.check();
    }

    /// Entries not yet handed to the driver.
    pub fn take_unstable(&mut self) -> Vec<Entry> {
        let last = self.last_index();
        if last <= self.handed_out {
            return Vec::new();
        }
        let out = self.slice(self.handed_out + 1, last);
        self.handed_out = last;
        out
    }

    pub fn has_unstable(&self) -> bool {
        self.last_index() > self.handed_out || self.pending_truncate.is_some()
    }

    /// The highest index that may be applied: committed and locally durable.
    pub fn applicable(&self) -> LogIndex {
        self.committed.min(self.persisted)
    }

    /// The structural invariants, checked after every change in debug builds.
    fn check(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        debug_assert!(self.first <= self.last + 1);
        debug_assert!(self.last >= self.snapshot.last_index);
        debug_assert!(self.first <= self.snapshot.last_index + 1);
        debug_assert_eq!(self.terms.is_empty(), self.first > self.last);
        debug_assert!(self
            .terms
            .front()
            .is_none_or(|&(start, _)| start == self.first));
        debug_assert!(self
            .terms
            .back()
            .is_none_or(|&(start, _)| start <= self.last));
        debug_assert!(self.entries.len() as u64 <= self.last + 1 - self.first);
        debug_assert!(self.entries.back().is_none_or(|e| e.index == self.last));
    }
}
