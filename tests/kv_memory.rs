//! Memory per stored KV entry, the figure issue #19 watches (1,000,000 keys of ~18-byte names
//! and 100-byte values loaded 64 per `/v1/txn` into a `-dev` agent: RSS ≤ 2.0× the raw bytes;
//! 4 KiB values: ≤ 1.3×).
//!
//! The test applies the same transactions through the store's real write path (each command
//! encoded as a Raft entry carries it, decoded, applied, dropped) and counts the heap bytes
//! the KV table keeps per entry, twice: as requested, and rounded up to the size classes of
//! the agent's allocator (mimalloc), which is what the process's RSS pays. So it guards the
//! row layout and the tree's leaves and branches against growing back; the agent's RSS adds
//! its fixed baseline on top (the in-memory Raft log keeps nothing a `-dev` agent has
//! applied; `docs/memory.md`).

use bytes::Bytes;
use praetor::store::txn::{KvVerb, TxnOp};
use praetor::store::{Command, CommandResult, Tables, TxnAnswer};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Mutex;

/// Counts live heap bytes, as requested and as mimalloc would round them, and allocations.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static LIVE_CLASS_BYTES: AtomicIsize = AtomicIsize::new(0);
static LIVE_ALLOCATIONS: AtomicIsize = AtomicIsize::new(0);
/// The most `LIVE_BYTES` reached since it was last reset to the live count.
static PEAK_BYTES: AtomicIsize = AtomicIsize::new(0);

/// The block size mimalloc (v3, as the agent links it) serves a request of `size` bytes
/// from: exact words up to 64 bytes, then four size classes per power of two (at most 12.5%
/// rounding) up to its largest small object; beyond that whole pages.
fn mimalloc_block_bytes(size: usize) -> usize {
    const WORD_BYTES: usize = 8;
    const LARGE_OBJECT_BYTES_MAX: usize = 512 * 1024;
    const PAGE_BYTES: usize = 4096;
    let words = size.div_ceil(WORD_BYTES).max(1);
    if words <= 8 {
        return words * WORD_BYTES;
    }
    if size > LARGE_OBJECT_BYTES_MAX {
        return size.div_ceil(PAGE_BYTES) * PAGE_BYTES;
    }
    let w = words - 1;
    let top_bit = usize::BITS as usize - 1 - w.leading_zeros() as usize;
    let step = 1usize << (top_bit - 2);
    // The class holds the largest word count with the same top three bits.
    ((w >> (top_bit - 2)) + 1) * step * WORD_BYTES
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        PEAK_BYTES.fetch_max(live + layout.size() as isize, Ordering::Relaxed);
        LIVE_CLASS_BYTES.fetch_add(
            mimalloc_block_bytes(layout.size()) as isize,
            Ordering::Relaxed,
        );
        LIVE_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        LIVE_CLASS_BYTES.fetch_sub(
            mimalloc_block_bytes(layout.size()) as isize,
            Ordering::Relaxed,
        );
        LIVE_ALLOCATIONS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The counters are process-wide, so the tests that read them run one at a time.
static MEASURING: Mutex<()> = Mutex::new(());

/// KV sets per transaction, as the benchmark loads them.
const OPS_PER_TXN: usize = 64;

/// What one load left behind, per stored entry.
#[derive(Debug)]
struct PerEntry {
    raw_bytes: f64,
    heap_bytes: f64,
    class_bytes: f64,
    allocations: f64,
    /// Bytes of the Raft entries that carried the load, per key (what an unbounded in-memory
    /// log would keep on top).
    log_bytes: f64,
}

fn live() -> (isize, isize, isize) {
    (
        LIVE_BYTES.load(Ordering::Relaxed),
        LIVE_CLASS_BYTES.load(Ordering::Relaxed),
        LIVE_ALLOCATIONS.load(Ordering::Relaxed),
    )
}

/// Loads `keys` keys named like the benchmark's (`load/000000001234`, 17 bytes) with values
/// of `value_bytes`, through encoded commands as the raft thread applies them.
fn load(keys: usize, value_bytes: usize) -> (Tables, PerEntry) {
    assert_eq!(keys % OPS_PER_TXN, 0);
    let value = Bytes::from(vec![b'v'; value_bytes]);
    let mut tables = Tables::default();
    let mut changes = Vec::new();
    let mut log_bytes = 0usize;
    let (bytes_before, class_before, allocations_before) = live();
    for (txn, index) in (0..keys / OPS_PER_TXN).zip(1u64..) {
        let ops = (0..OPS_PER_TXN)
            .map(|i| TxnOp::Kv {
                verb: KvVerb::Set,
                key: format!("load/{:012}", txn * OPS_PER_TXN + i),
                value: value.clone(),
                flags: 0,
                index: 0,
                session: String::new(),
            })
            .collect();
        let entry = Command::Txn(ops).encode();
        log_bytes += entry.len();
        let command = Command::decode(&entry).expect("decodes");
        drop(entry);
        changes.clear();
        match tables.apply(index, &command, &mut changes) {
            CommandResult::Txn(TxnAnswer::Ran(outcome)) => {
                assert!(outcome.errors.is_empty(), "{outcome:?}")
            }
            other => panic!("transaction failed: {other:?}"),
        }
    }
    drop(changes);
    let (bytes, class, allocations) = live();
    let per = |total: isize| total as f64 / keys as f64;
    let raw = tables
        .kv
        .entries
        .iter()
        .map(|entry| entry.key().len() + entry.value().len())
        .sum::<usize>();
    assert_eq!(tables.kv.entries.len(), keys);
    let per_entry = PerEntry {
        raw_bytes: raw as f64 / keys as f64,
        heap_bytes: per(bytes - bytes_before),
        class_bytes: per(class - class_before),
        allocations: per(allocations - allocations_before),
        log_bytes: log_bytes as f64 / keys as f64,
    };
    eprintln!("{keys} keys, {value_bytes} B values: {per_entry:.1?}");
    (tables, per_entry)
}

#[test]
fn allocator_size_classes_match_mimalloc() {
    let cases = [
        (1, 8),
        (24, 24),
        (64, 64),
        (65, 80),
        (100, 112),
        (129, 160),
        (160, 160),
        (161, 192),
        (4096, 4096),
        (4097, 5120),
        (4146, 5120),
    ];
    for (size, block) in cases {
        assert_eq!(mimalloc_block_bytes(size), block, "{size} B");
    }
}

/// Heap the KV table may keep per 117-byte entry (a 17-byte key and a 100-byte value),
/// counted in the allocator's size classes: 1.25× the raw bytes, which leaves the agent's
/// fixed baseline room under issue #19's 2.0× RSS target. Was ~350 B as a struct behind an
/// `Arc` plus three buffers, 185 B as one packed allocation per row in a persistent set;
/// rows packed back to back in the leaves of the table's own tree cost ~135 B.
const SMALL_ENTRY_CLASS_BYTES_MAX: f64 = 1.25 * 117.0;
/// Heap allocations per small entry: a share of a leaf's (about 30 rows a leaf) and of the
/// branches'. One allocation per row (0.9 more) is what this guards against.
const SMALL_ENTRY_ALLOCATIONS_MAX: f64 = 0.2;
/// Heap per 4,113-byte entry (4 KiB values): the value in a block of exactly its size, the
/// row and the tree nodes around it, ≤ 1.05× raw (issue #19's RSS target is 1.3×).
const LARGE_ENTRY_CLASS_RATIO_MAX: f64 = 1.05;

#[test]
fn small_values_cost_little_more_than_their_bytes() {
    let _alone = MEASURING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let (tables, per) = load(64 * 400, 100);
    assert!(per.raw_bytes > 116.0 && per.raw_bytes < 118.0, "{per:?}");
    // The counts must see the table at all: a row cannot cost less than its own bytes.
    assert!(per.heap_bytes >= per.raw_bytes, "{per:?}");
    assert!(per.class_bytes >= per.heap_bytes, "{per:?}");
    assert!(per.class_bytes <= SMALL_ENTRY_CLASS_BYTES_MAX, "{per:?}");
    assert!(per.allocations > 0.0, "{per:?}");
    assert!(per.allocations <= SMALL_ENTRY_ALLOCATIONS_MAX, "{per:?}");
    // The table's overhead is well below the log that carried the load: a Raft log kept
    // whole in memory would have cost more than the rows' own overhead (docs/memory.md).
    assert!(
        per.log_bytes > 4.0 * (per.class_bytes - per.raw_bytes),
        "{per:?}"
    );
    // Dropping the table gives every byte back (nothing leaks into shared caches).
    let (bytes_before, _, _) = live();
    drop(tables);
    let freed = bytes_before - live().0;
    assert!(
        freed as f64 >= per.heap_bytes * 64.0 * 400.0 * 0.99,
        "{freed}"
    );
}

#[test]
fn large_values_are_stored_at_their_own_size() {
    let _alone = MEASURING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let (_tables, per) = load(64 * 40, 4096);
    assert!(per.raw_bytes > 4112.0 && per.raw_bytes < 4114.0, "{per:?}");
    assert!(per.class_bytes >= per.raw_bytes, "{per:?}");
    assert!(
        per.class_bytes <= per.raw_bytes * LARGE_ENTRY_CLASS_RATIO_MAX,
        "{per:?}"
    );
}

/// Heap a snapshot of a loaded table may take while it is written, beyond what is live
/// before: the serializer's buffers, never a copy of the table (an encoder that cannot
/// tell a map's length up front buffers the whole map to count it).
const SNAPSHOT_WRITE_HEAP_BYTES_MAX: isize = 64 * 1024;

#[test]
fn writing_a_snapshot_holds_no_copy_of_the_table() {
    let _alone = MEASURING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let (tables, per) = load(64 * 400, 100);
    let table_bytes = (per.heap_bytes * 64.0 * 400.0) as isize;
    assert!(table_bytes > 16 * SNAPSHOT_WRITE_HEAP_BYTES_MAX, "{per:?}");
    let before = live().0;
    PEAK_BYTES.store(before, Ordering::Relaxed);
    let mut written = CountingSink(0);
    tables.write_snapshot(&mut written).expect("writes");
    let grew = PEAK_BYTES.load(Ordering::Relaxed) - before;
    assert!(written.0 > 64 * 400 * 117, "{}", written.0);
    assert!(
        grew <= SNAPSHOT_WRITE_HEAP_BYTES_MAX,
        "writing the snapshot took {grew} B of heap (the table holds {table_bytes} B)"
    );
    // And it reads back as it was.
    let mut bytes = Vec::new();
    tables.write_snapshot(&mut bytes).expect("writes");
    let back = Tables::read_snapshot(&mut &bytes[..]).expect("reads back");
    assert!(back.kv.entries.iter().eq(tables.kv.entries.iter()));
}

/// Counts what is written and keeps nothing.
struct CountingSink(usize);

impl std::io::Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
