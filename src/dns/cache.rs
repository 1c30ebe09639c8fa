//! The per-shard answer cache: encoded answers keyed by question (lowercased name, type,
//! class), each dropped by exactly the changes to what its resolution read.
//!
//! An entry records the [`ReadSet`] of its resolution (the store's `Dependencies`). The cache
//! files each question under every dependency its resolution read, in the store's
//! `DependencyIndex`, and a change set removes exactly the entries the store's one rule
//! (`store::invalidates`, shared with the watch registry) says it invalidates. So a health
//! flip on one `web` instance drops the cached `web.service.consul` answers (and only answers
//! that read `web`), and the very next query resolves against the new version.
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
use crate::store::{Change, DependencyIndex, Table};
use std::collections::HashMap;
use std::rc::Rc;

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

/// Builds the key for a question into `buffer` and returns it: the wire name lowercased in
/// the buffer (length octets are at most 63, below every ASCII letter, so they stay as they
/// are), then the type and class.
pub fn cache_key<'b>(
    wire_name: &[u8],
    qtype: u16,
    qclass: u16,
    buffer: &'b mut [u8; CACHE_KEY_BYTES_MAX],
) -> &'b [u8] {
    let n = wire_name.len();
    buffer[..n].copy_from_slice(wire_name);
    buffer[..n].make_ascii_lowercase();
    buffer[n..n + 2].copy_from_slice(&qtype.to_be_bytes());
    buffer[n + 2..n + 4].copy_from_slice(&qclass.to_be_bytes());
    &buffer[..n + 4]
}

/// One shard's cache. Not `Send`: it lives in the shard's thread.
#[derive(Default)]
pub struct AnswerCache {
    entries: HashMap<CacheKey, Rc<EncodedAnswer>, ahash::RandomState>,
    /// Every entry's key, filed under each dependency of its resolution.
    index: DependencyIndex<CacheKey>,
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
        let references = reads.len();
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
        for dependency in reads.as_slice() {
            self.index.insert(dependency, key.clone());
        }
        self.index_references += references;
        if let Some(old) = self.entries.insert(key.clone(), answer) {
            self.bytes = self.bytes.saturating_sub(old.footprint_bytes() + key.len());
        }
        self.bytes += size;
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.index.clear();
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
            self.index
                .take_invalidated(change, |question| doomed.push(question));
        }
        self.index_references = self.index_references.saturating_sub(doomed.len());
        for key in doomed {
            self.remove(&key);
        }
    }

    /// Cheap check used by tests and the debug log: does any entry depend on `table`?
    pub fn indexes_table(&self, table: Table) -> bool {
        self.index.indexes_table(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::answer::Answer;
    use crate::dns::view::ReadSet;
    use crate::proto::dns::WireName;
    use crate::shard::watch::{WatchRegistry, WatchSet};
    use crate::store::catalog::{CatalogOp, Registration, ServiceRegistration};
    use crate::store::dependency::agreement_cases;
    use crate::store::{invalidates, Command, Tables};
    use std::task::Waker;

    fn cached_answer() -> Rc<EncodedAnswer> {
        let question = WireName::from_dotted("web.service.consul").unwrap();
        Rc::new(EncodedAnswer::encode(&Answer::empty(0), &question))
    }

    /// Whether `change` wakes a query parked on `reads` and drops an answer cached with it.
    fn wakes_and_drops(reads: &ReadSet, changes: &[Change]) -> (bool, bool) {
        let mut registry = WatchRegistry::new();
        let id = registry.register(reads, Waker::noop().clone(), u64::MAX);
        let woken = registry.notify(changes);
        assert_eq!(woken == 1, registry.is_fired(id));
        let mut cache = AnswerCache::new();
        cache.insert(b"question", cached_answer(), reads);
        cache.invalidate(changes);
        (woken == 1, cache.get(b"question").is_none())
    }

    #[test]
    fn the_watch_registry_and_the_answer_cache_agree_with_the_rule() {
        for (dependency, change, expected) in agreement_cases() {
            let mut reads = ReadSet::new();
            reads.add(dependency.clone());
            assert_eq!(invalidates(&change, &reads.as_slice()[0]), expected);
            assert_eq!(
                wakes_and_drops(&reads, std::slice::from_ref(&change)),
                (expected, expected),
                "{dependency:?} vs {change:?}: (woken, dropped)"
            );
        }
    }

    #[test]
    fn a_catalog_write_reaches_readers_of_its_service_in_any_letter_case_and_no_other() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let register = |service: &str| {
            Command::Catalog(CatalogOp::Register(Box::new(Registration {
                node: "Node-1".into(),
                address: "10.0.0.1".into(),
                service: Some(ServiceRegistration {
                    name: service.into(),
                    port: 80,
                    ..Default::default()
                }),
                ..Default::default()
            })))
        };
        tables.apply(1, &register("Web"), &mut changes);
        // A blocking query and a DNS lookup both name the service as their client wrote it.
        let watchers_of_web = WatchSet::new().key(Table::ServiceIndex, "WEB");
        let mut dns_reads_of_web = ReadSet::new();
        dns_reads_of_web.add_key(Table::ServiceIndex, "wEb");
        let mut dns_reads_of_api = ReadSet::new();
        dns_reads_of_api.add_key(Table::ServiceIndex, "api");
        assert_eq!(wakes_and_drops(&watchers_of_web, &changes), (true, true));
        assert_eq!(wakes_and_drops(&dns_reads_of_web, &changes), (true, true));
        assert_eq!(wakes_and_drops(&dns_reads_of_api, &changes), (false, false));
        changes.clear();
        tables.apply(2, &register("API"), &mut changes);
        assert_eq!(wakes_and_drops(&watchers_of_web, &changes), (false, false));
        assert_eq!(wakes_and_drops(&dns_reads_of_api, &changes), (true, true));
        // A node lookup is woken by its node's row, whatever the case it was asked in.
        let mut node_reads = ReadSet::new();
        node_reads.add_key(Table::Nodes, "NODE-1");
        changes.clear();
        tables.apply(
            3,
            &Command::Catalog(CatalogOp::Register(Box::new(Registration {
                node: "node-1".into(),
                address: "10.0.0.2".into(),
                ..Default::default()
            }))),
            &mut changes,
        );
        assert_eq!(wakes_and_drops(&node_reads, &changes), (true, true));
    }
}
