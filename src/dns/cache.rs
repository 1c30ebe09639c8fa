//! The per-shard answer cache: encoded answers keyed by question (lowercased name, type,
//! class), each dropped by exactly the changes to what its resolution read.
//!
//! An entry records the [`ReadSet`] of its resolution. The cache keeps an index from each
//! `(table, key)` and each whole table read to the questions that read it; a change set
//! removes the entries its `(table, key)` changes name, plus every entry that read the whole
//! table; a prefix or whole-table change removes every entry that read anything of that table.
//! So a health flip on one `web` instance drops the cached `web.service.consul` answers (and
//! only answers that read `web`), and the very next query resolves against the new version.
//!
//! Correctness rests on one ordering: the shard installs a version and invalidates the cache
//! in the same synchronous step (`Shard::handle_message`), and resolution reads the shard's
//! current version synchronously, so an answer computed from version N can only be cached
//! while N is current, and any change after N evicts it before another query runs.
//!
//! Bounded: at most [`CACHE_ENTRIES_MAX`] entries and [`CACHE_BYTES_MAX`] encoded bytes; on
//! overflow the whole cache is cleared (cheap, rare, and never wrong).

use super::answer::EncodedAnswer;
use super::view::ReadSet;
use crate::store::{Change, ChangeKey, Table, TABLE_COUNT};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// Most cached questions per shard.
pub const CACHE_ENTRIES_MAX: usize = 16_384;
/// Most encoded answer bytes cached per shard.
pub const CACHE_BYTES_MAX: usize = 64 << 20;
/// Most index references (entry keys listed under the reads that can invalidate them). An
/// invalidated entry leaves references under its other reads until those change; re-cached
/// answers add more, so the count is bounded and the cache cleared past it.
pub const CACHE_INDEX_REFERENCES_MAX: usize = 8 * CACHE_ENTRIES_MAX;
/// Longest cache key: a 255-byte name plus type and class.
pub const CACHE_KEY_BYTES_MAX: usize = crate::proto::dns::NAME_BYTES_MAX + 4;

/// A cache key: the lowercased wire name followed by the type and class.
pub type CacheKey = Box<[u8]>;

/// Builds the key for a question into `buffer` and returns it.
pub fn cache_key<'b>(
    lower_name: &[u8],
    qtype: u16,
    qclass: u16,
    buffer: &'b mut [u8; CACHE_KEY_BYTES_MAX],
) -> &'b [u8] {
    let n = lower_name.len();
    buffer[..n].copy_from_slice(lower_name);
    buffer[n..n + 2].copy_from_slice(&qtype.to_be_bytes());
    buffer[n + 2..n + 4].copy_from_slice(&qclass.to_be_bytes());
    &buffer[..n + 4]
}

#[derive(Default)]
struct TableIndex {
    by_key: HashMap<Arc<str>, Vec<CacheKey>, ahash::RandomState>,
    /// Entries that read the whole table.
    whole: Vec<CacheKey>,
}

/// One shard's cache. Not `Send`: it lives in the shard's thread.
#[derive(Default)]
pub struct AnswerCache {
    entries: HashMap<CacheKey, Rc<EncodedAnswer>, ahash::RandomState>,
    tables: [TableIndex; TABLE_COUNT],
    bytes: usize,
    index_references: usize,
    hits: u64,
    misses: u64,
}

impl AnswerCache {
    pub fn new() -> AnswerCache {
        AnswerCache::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// (hits, misses) since start.
    pub fn stats(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }

    pub fn get(&mut self, key: &[u8]) -> Option<Rc<EncodedAnswer>> {
        match self.entries.get(key) {
            Some(answer) => {
                self.hits += 1;
                Some(answer.clone())
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Caches `answer` for `key`, indexed by what its resolution read. An answer that read
    /// nothing (e.g. `<hex>.addr`) never goes stale.
    pub fn insert(&mut self, key: &[u8], answer: Rc<EncodedAnswer>, reads: &ReadSet) {
        let size = answer.footprint_bytes() + key.len();
        let references = reads.keys.len() + reads.tables.len();
        if self.entries.len() >= CACHE_ENTRIES_MAX
            || self.bytes + size > CACHE_BYTES_MAX
            || self.index_references + references > CACHE_INDEX_REFERENCES_MAX
        {
            self.clear();
        }
        if size > CACHE_BYTES_MAX {
            return;
        }
        let key: CacheKey = key.into();
        for (table, read_key) in &reads.keys {
            self.tables[*table as usize]
                .by_key
                .entry(read_key.clone())
                .or_default()
                .push(key.clone());
        }
        for table in &reads.tables {
            self.tables[*table as usize].whole.push(key.clone());
        }
        self.index_references += references;
        if let Some(old) = self.entries.insert(key.clone(), answer) {
            self.bytes = self.bytes.saturating_sub(old.footprint_bytes() + key.len());
        }
        self.bytes += size;
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        for index in &mut self.tables {
            index.by_key.clear();
            index.whole.clear();
        }
        self.bytes = 0;
        self.index_references = 0;
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(old) = self.entries.remove(key) {
            self.bytes = self.bytes.saturating_sub(old.footprint_bytes() + key.len());
        }
    }

    /// Drops every entry whose reads a change in `changes` touches.
    pub fn invalidate(&mut self, changes: &[Change]) {
        if self.entries.is_empty() {
            return;
        }
        let mut doomed: Vec<CacheKey> = Vec::new();
        for change in changes {
            let index = &mut self.tables[change.table as usize];
            doomed.append(&mut index.whole);
            match &change.key {
                ChangeKey::Key(key) => {
                    let lowered;
                    let key: &str = if key.bytes().any(|b| b.is_ascii_uppercase()) {
                        lowered = key.to_ascii_lowercase();
                        &lowered
                    } else {
                        key
                    };
                    if let Some(mut keys) = index.by_key.remove(key) {
                        doomed.append(&mut keys);
                    }
                }
                ChangeKey::Prefix(_) | ChangeKey::All => {
                    for (_, mut keys) in index.by_key.drain() {
                        doomed.append(&mut keys);
                    }
                }
            }
        }
        self.index_references = self.index_references.saturating_sub(doomed.len());
        for key in doomed {
            self.remove(&key);
        }
    }

    /// Cheap check used by tests and the debug log: does any entry depend on `table`?
    pub fn indexes_table(&self, table: Table) -> bool {
        let index = &self.tables[table as usize];
        !index.by_key.is_empty() || !index.whole.is_empty()
    }
}
