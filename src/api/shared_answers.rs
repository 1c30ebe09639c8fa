//! Answers shared between identical blocking queries that one change woke.
//!
//! When a write wakes thousands of parked queries, most of them are the very same request:
//! a fleet of watchers polling one key or one service from the same index. Rendering each
//! answer on its own costs CPU and, worse, a fresh output buffer per connection whose first
//! touch page-faults; on a 2-core machine that was a third of the shard's work in a
//! 15,000-watcher fan-out. So a shard keeps, for the store version it last answered woken
//! queries from, each rendered answer under the exact request head that asked for it. A
//! later woken query with a byte-identical head, the same query metadata and the same reply
//! shape sends those bytes as they are; the socket write borrows them (`Rc`), nothing is
//! copied.
//!
//! Invariants:
//! - An entry is served only for the version (the same `Arc`) it was rendered from; looking
//!   up with another version empties the cache first, and so does the shard taking in a
//!   new version (an old version is never kept alive here).
//! - The request head carries every input an answer can depend on (method, path, query
//!   string, headers), so heads must match byte for byte; metadata (index, leader, last
//!   contact, consistency) and shape (keep-alive, pretty) must match too.
//! - Bounded: at most [`SHARED_ANSWERS_MAX`] entries and [`SHARED_ANSWERS_BYTES_MAX`] bytes
//!   of answers and heads; answers over [`SHARED_ANSWER_BYTES_MAX`] are never kept. A full
//!   cache still answers, it only stops remembering.

use crate::api::QueryMeta;
use crate::store::StoreVersion;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// Most answers kept for one version.
pub const SHARED_ANSWERS_MAX: usize = 256;
/// Most bytes (answers plus their heads) kept for one version.
pub const SHARED_ANSWERS_BYTES_MAX: usize = 8 << 20;
/// Larger answers are sent from the connection's own buffer and not kept.
pub const SHARED_ANSWER_BYTES_MAX: usize = 256 * 1024;

/// A complete rendered response (status line, headers, body), shared read-only.
pub type SharedAnswer = Rc<Vec<u8>>;

/// Everything besides the head and the version that the rendered bytes depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnswerShape {
    pub meta: QueryMeta,
    pub keep_alive: bool,
    pub pretty: bool,
}

#[derive(Default)]
pub struct SharedAnswers {
    version: Option<StoreVersion>,
    /// Request head → answers rendered for it (usually one shape per head).
    entries: HashMap<Box<[u8]>, Vec<(AnswerShape, SharedAnswer)>, ahash::RandomState>,
    entry_count: usize,
    bytes: usize,
}

impl SharedAnswers {
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets every answer and the version they came from. The shard calls this when it
    /// takes in a new version, so the cache never keeps an old version's memory alive.
    pub fn forget(&mut self) {
        if self.version.is_some() {
            self.entries.clear();
            self.entry_count = 0;
            self.bytes = 0;
            self.version = None;
        }
    }

    /// Forgets everything unless it was rendered from `version`.
    fn settle_on(&mut self, version: &StoreVersion) {
        let same = self
            .version
            .as_ref()
            .is_some_and(|kept| Arc::ptr_eq(kept, version));
        if !same {
            self.forget();
            self.version = Some(version.clone());
        }
    }

    /// The answer rendered from `version` for this exact head and shape, if there is one.
    pub fn get(
        &mut self,
        version: &StoreVersion,
        head: &[u8],
        shape: &AnswerShape,
    ) -> Option<SharedAnswer> {
        self.settle_on(version);
        self.entries
            .get(head)?
            .iter()
            .find(|(kept, _)| kept == shape)
            .map(|(_, answer)| answer.clone())
    }

    /// Keeps `answer`, rendered from `version` for `head` and `shape`, if the bounds allow,
    /// and returns it shared either way.
    pub fn insert(
        &mut self,
        version: &StoreVersion,
        head: &[u8],
        shape: AnswerShape,
        answer: Vec<u8>,
    ) -> SharedAnswer {
        self.settle_on(version);
        let answer = Rc::new(answer);
        let cost = answer.len() + head.len();
        let fits = answer.len() <= SHARED_ANSWER_BYTES_MAX
            && self.entry_count < SHARED_ANSWERS_MAX
            && self.bytes + cost <= SHARED_ANSWERS_BYTES_MAX;
        if fits {
            let list = self.entries.entry(head.into()).or_default();
            debug_assert!(
                list.iter().all(|(kept, _)| *kept != shape),
                "an answer is rendered once per head and shape"
            );
            list.push((shape, answer.clone()));
            self.entry_count += 1;
            self.bytes += cost;
        }
        debug_assert!(self.entry_count <= SHARED_ANSWERS_MAX);
        debug_assert!(self.bytes <= SHARED_ANSWERS_BYTES_MAX);
        answer
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entry_count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::runtime::Consistency;
    use crate::store::Tables;

    fn shape(index: u64) -> AnswerShape {
        AnswerShape {
            meta: QueryMeta {
                index,
                known_leader: true,
                last_contact_ms: 0,
                consistency: Consistency::Leader,
                cache: None,
            },
            keep_alive: true,
            pretty: false,
        }
    }

    fn version(index: u64) -> StoreVersion {
        Arc::new(Tables {
            index,
            ..Tables::default()
        })
    }

    #[test]
    fn identical_head_shape_and_version_share_one_answer() {
        let mut answers = SharedAnswers::new();
        let v = version(7);
        let head = b"GET /v1/kv/a?index=6 HTTP/1.1\r\n\r\n";
        assert!(answers.get(&v, head, &shape(7)).is_none());
        let first = answers.insert(&v, head, shape(7), b"answer".to_vec());
        let again = answers.get(&v, head, &shape(7)).expect("kept");
        assert!(
            Rc::ptr_eq(&first, &again),
            "the bytes are shared, not copied"
        );
    }

    #[test]
    fn any_difference_misses() {
        let mut answers = SharedAnswers::new();
        let v = version(7);
        let head = b"GET /v1/kv/a?index=6 HTTP/1.1\r\n\r\n";
        answers.insert(&v, head, shape(7), b"answer".to_vec());
        assert!(answers
            .get(&v, b"GET /v1/kv/a?index=5 HTTP/1.1\r\n\r\n", &shape(7))
            .is_none());
        assert!(answers
            .get(
                &v,
                b"GET /v1/kv/a?index=6 HTTP/1.1\r\nX-Consul-Token: t\r\n\r\n",
                &shape(7)
            )
            .is_none());
        assert!(answers.get(&v, head, &shape(8)).is_none());
        let mut closing = shape(7);
        closing.keep_alive = false;
        assert!(answers.get(&v, head, &closing).is_none());
        // A different version with the same index is still another version.
        let other = version(7);
        assert!(answers.get(&other, head, &shape(7)).is_none());
        assert_eq!(
            answers.len(),
            0,
            "moving to another version forgot the old answers"
        );
        answers.insert(&other, head, shape(7), b"answer".to_vec());
        answers.forget();
        assert!(answers.version.is_none(), "no version is kept alive");
        assert!(answers.get(&other, head, &shape(7)).is_none());
    }

    #[test]
    fn bounds_hold_and_a_full_cache_still_answers() {
        let mut answers = SharedAnswers::new();
        let v = version(1);
        for i in 0..(SHARED_ANSWERS_MAX + 10) {
            let head = format!("GET /v1/kv/k{i} HTTP/1.1\r\n\r\n");
            let answer = answers.insert(&v, head.as_bytes(), shape(1), vec![b'x'; 10]);
            assert_eq!(answer.len(), 10);
        }
        assert_eq!(answers.len(), SHARED_ANSWERS_MAX);
        let big = answers.insert(
            &version(2),
            b"GET /big HTTP/1.1\r\n\r\n",
            shape(2),
            vec![0; SHARED_ANSWER_BYTES_MAX + 1],
        );
        assert_eq!(big.len(), SHARED_ANSWER_BYTES_MAX + 1);
        assert_eq!(answers.len(), 0, "an oversized answer is sent but not kept");
        let v3 = version(3);
        for i in 0..64 {
            let head = format!("GET /v1/kv/m{i} HTTP/1.1\r\n\r\n");
            answers.insert(&v3, head.as_bytes(), shape(3), vec![0; 200 * 1024]);
        }
        assert!(answers.bytes <= SHARED_ANSWERS_BYTES_MAX);
        assert!(answers.len() < 64, "the byte bound stopped keeping answers");
        assert!(answers.len() >= SHARED_ANSWERS_BYTES_MAX / (201 * 1024));
    }
}
