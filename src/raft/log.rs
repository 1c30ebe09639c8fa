//! The core's in-memory view of the replicated log, and what of it is durable.
//!
//! The log is a snapshot (last index and term) followed by contiguous entries. Entries at or
//! below the snapshot index may be kept ("trailing" entries) so that slightly lagging peers
//! catch up without a snapshot. Besides the entries it tracks four watermarks:
//!
//! - `committed`: known committed (never decreases);
//! - `handed_out`: entries given to the driver to persist (`Ready::entries`);
//! - `persisted`: entries the driver reported durable (`advance`). Only these count towards
//!   the leader's own quorum vote and only these are applied;
//! - `committed_handed_out`: committed entries given to the driver to apply.
//!
//! Invariants: `snapshot.last_index <= committed <= last_index`, `persisted <= handed_out <=
//! last_index`, entries are contiguous with non-decreasing terms.

use std::collections::VecDeque;

use super::types::{Entry, LogIndex, RaftError, SnapshotMeta, Term};

#[derive(Debug)]
pub(crate) struct RaftLog {
    pub snapshot: SnapshotMeta,
    entries: VecDeque<Entry>,
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
            snapshot,
            entries: kept,
            committed: 0,
            persisted: 0,
            handed_out: 0,
            pending_truncate: None,
            applied: 0,
            committed_handed_out: 0,
        };
        let last = log.last_index();
        log.committed = commit.clamp(log.snapshot.last_index, last);
        log.persisted = last;
        log.handed_out = last;
        log.applied = log.snapshot.last_index;
        log.committed_handed_out = log.snapshot.last_index;
        Ok(log)
    }

    /// The first index whose entry is held in memory.
    pub fn first_index(&self) -> LogIndex {
        self.entries
            .front()
            .map_or(self.snapshot.last_index + 1, |e| e.index)
    }

    pub fn last_index(&self) -> LogIndex {
        self.entries.back().map_or(self.snapshot.last_index, |e| {
            e.index.max(self.snapshot.last_index)
        })
    }

    pub fn last_term(&self) -> Term {
        self.term(self.last_index())
            .unwrap_or(self.snapshot.last_term)
    }

    /// The term of the entry at `index`, if known (held, or the snapshot's last).
    pub fn term(&self, index: LogIndex) -> Option<Term> {
        if index == self.snapshot.last_index {
            return Some(self.snapshot.last_term);
        }
        self.entry(index).map(|e| e.term)
    }

    pub fn entry(&self, index: LogIndex) -> Option<&Entry> {
        let first = self.first_index();
        if index < first {
            return None;
        }
        self.entries.get((index - first) as usize)
    }

    /// Entries from `from` on, at most `count_max` of them and (after the first) at most
    /// `bytes_max` of payload. `None` if `from` was compacted away.
    pub fn entries_from(
        &self,
        from: LogIndex,
        count_max: usize,
        bytes_max: u64,
    ) -> Option<Vec<Entry>> {
        if from > self.last_index() {
            return Some(Vec::new());
        }
        let first = self.first_index();
        if from < first {
            return None;
        }
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for entry in self.entries.range((from - first) as usize..) {
            if out.len() >= count_max || (!out.is_empty() && bytes + entry.size_bytes() > bytes_max)
            {
                break;
            }
            bytes += entry.size_bytes();
            out.push(entry.clone());
        }
        Some(out)
    }

    /// Entries in `[from, through]`, all of which must be held.
    pub fn slice(&self, from: LogIndex, through: LogIndex) -> Vec<Entry> {
        if from > through {
            return Vec::new();
        }
        let first = self.first_index();
        debug_assert!(from >= first && through <= self.last_index());
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
            if self.entries.is_empty() {
                debug_assert_eq!(entry.index, self.snapshot.last_index + 1);
            }
            self.entries.push_back(entry);
        }
    }

    /// Drops every entry at `index` and above; they were never committed.
    pub fn truncate_from(&mut self, index: LogIndex) {
        debug_assert!(index > self.committed, "truncating committed entries");
        let first = self.first_index();
        let keep = index.saturating_sub(first) as usize;
        self.entries.truncate(keep);
        if index <= self.handed_out {
            self.pending_truncate = Some(self.pending_truncate.map_or(index, |t| t.min(index)));
            self.handed_out = index - 1;
        }
        self.persisted = self.persisted.min(index - 1);
    }

    /// Whether a candidate's log (its last index and term) is at least as up to date as ours.
    pub fn is_up_to_date(&self, last_index: LogIndex, last_term: Term) -> bool {
        let my_term = self.last_term();
        last_term > my_term || (last_term == my_term && last_index >= self.last_index())
    }

    /// The first index holding `term`, searching only held entries at or below `at`.
    pub fn first_index_of_term(&self, term: Term, at: LogIndex) -> LogIndex {
        let position = self.entries.partition_point(|e| e.term < term);
        match self.entries.get(position) {
            Some(e) if e.term == term && e.index <= at => e.index,
            _ => at,
        }
    }

    /// The last index holding `term`, if any held entry (or the snapshot) has it.
    pub fn last_index_of_term(&self, term: Term) -> Option<LogIndex> {
        let position = self.entries.partition_point(|e| e.term <= term);
        if position > 0 && self.entries[position - 1].term == term {
            return Some(self.entries[position - 1].index);
        }
        if self.snapshot.last_term == term
            && self
                .entries
                .front()
                .is_none_or(|e| e.index > self.snapshot.last_index)
        {
            return Some(self.snapshot.last_index);
        }
        None
    }

    /// Drops held entries at or below `through`.
    pub fn compact(&mut self, through: LogIndex) {
        debug_assert!(through <= self.applied);
        while self.entries.front().is_some_and(|e| e.index <= through) {
            self.entries.pop_front();
        }
    }

    /// Replaces the whole log by a snapshot received from the leader.
    pub fn install_snapshot(&mut self, meta: SnapshotMeta) {
        let index = meta.last_index;
        debug_assert!(index > self.committed);
        self.entries.clear();
        self.snapshot = meta;
        self.committed = index;
        self.handed_out = index;
        self.persisted = index;
        self.pending_truncate = None;
        self.committed_handed_out = index;
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
}
