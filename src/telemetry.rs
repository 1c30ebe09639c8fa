//! The process-wide half of telemetry: the per-thread recorders a hot path writes into,
//! the registry that hands them out, the filter flags and the `api.http` series table set
//! once at start, and the merge of every recorder a scrape reads. What it records is named
//! by Consul's catalogue and printed by its renderings (`consul::metrics`, pure); this
//! module is the state they leave out, so it sits at the runtime's level, below `shard`.
//!
//! Recording: each thread that records owns one [`Recorder`] from the process-wide
//! [`Registry`], claimed the first time it records and given back when the thread ends
//! (its counts stay for the next thread to continue). A recorder has a single writer, so a
//! counter bump or a histogram observation is a relaxed load and store of that thread's own
//! cache lines: no lock, no read-modify-write, no allocation (a labelled series' histogram
//! is allocated once, the first time that thread records it). A scrape merges every
//! recorder into a [`Snapshot`]; counts are cumulative, so a window or an interval is the
//! difference of two snapshots. When every slot is taken, the overflow recorder is shared
//! and written with atomic adds instead.
//!
//! Durations are measured by the callers with the monotonic clock; `timing` tells whether a
//! timer is recorded at all, so a path can skip reading the clock when it is filtered out.
//!
//! Invariants: recorders and published histograms are never freed, so a reference to one
//! stays valid for the process and a snapshot's counts never decrease.

use crate::consul::metrics::{
    bucket_of, merge_into, Enabled, Gauge, HistSnapshot, Naming, Snapshot, BUCKETS,
};
// Re-exported for the layers that record but may not name `consul` (DNS, the runtime).
pub use crate::consul::metrics::{Counter, Sample};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Most `api.http` series: route × method slots the HTTP layer may register.
pub const HTTP_SLOTS_MAX: usize = 1024;
/// Most recorders that each have one writer; threads beyond share the overflow recorder.
pub const RECORDERS_MAX: usize = 256;

// ---------------------------------------------------------------------------------------
// Histograms and recorders.

struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    /// Sum of the stored values.
    sum: AtomicU64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            buckets: [const { AtomicU64::new(0) }; BUCKETS],
            sum: AtomicU64::new(0),
        }
    }

    fn read(&self) -> Option<HistSnapshot> {
        let mut buckets = Vec::new();
        let mut count = 0;
        for (index, bucket) in self.buckets.iter().enumerate() {
            let n = bucket.load(Ordering::Relaxed);
            if n > 0 {
                buckets.push((index as u16, n));
                count += n;
            }
        }
        (count > 0).then(|| HistSnapshot {
            count,
            sum: self.sum.load(Ordering::Relaxed),
            buckets,
        })
    }
}

struct CounterCell {
    /// Times the counter was bumped.
    count: AtomicU64,
    /// Total it was bumped by.
    sum: AtomicU64,
}

/// One thread's metrics. Written by its owner only while `exclusive`; merged by scrapes.
pub struct Recorder {
    slot: usize,
    exclusive: bool,
    counters: Box<[CounterCell]>,
    samples: Box<[Histogram]>,
    /// `api.http` histograms by slot, allocated on first use and never freed.
    http: Box<[AtomicPtr<Histogram>]>,
}

impl Recorder {
    fn new(slot: usize, exclusive: bool) -> Recorder {
        Recorder {
            slot,
            exclusive,
            counters: (0..Counter::COUNT)
                .map(|_| CounterCell {
                    count: AtomicU64::new(0),
                    sum: AtomicU64::new(0),
                })
                .collect(),
            samples: (0..Sample::COUNT).map(|_| Histogram::new()).collect(),
            http: (0..HTTP_SLOTS_MAX)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
        }
    }

    /// Adds `by` to a cell. The owner is the only writer of an exclusive recorder, so a
    /// plain load and store cannot lose an update and costs no locked instruction.
    #[inline]
    fn bump(&self, cell: &AtomicU64, by: u64) {
        if self.exclusive {
            cell.store(
                cell.load(Ordering::Relaxed).wrapping_add(by),
                Ordering::Relaxed,
            );
        } else {
            cell.fetch_add(by, Ordering::Relaxed);
        }
    }

    #[inline]
    fn observe_into(&self, histogram: &Histogram, value: u64) {
        self.bump(&histogram.buckets[bucket_of(value)], 1);
        self.bump(&histogram.sum, value);
    }

    /// Adds `by` to a counter (one increment of size `by`, as go-metrics' `IncrCounter`).
    #[inline]
    pub fn add(&self, counter: Counter, by: u64) {
        if !FILTER.counters[counter as usize].load(Ordering::Relaxed) {
            return;
        }
        let cell = &self.counters[counter as usize];
        self.bump(&cell.count, 1);
        self.bump(&cell.sum, by);
    }

    /// Records a duration in microseconds (displayed in milliseconds).
    #[inline]
    pub fn observe_micros(&self, sample: Sample, micros: u64) {
        if !FILTER.samples[sample as usize].load(Ordering::Relaxed) {
            return;
        }
        self.observe_into(&self.samples[sample as usize], micros);
    }

    /// Records a plain value (a count), kept in thousandths like every sample.
    #[inline]
    pub fn observe_value(&self, sample: Sample, value: u64) {
        if !FILTER.samples[sample as usize].load(Ordering::Relaxed) {
            return;
        }
        self.observe_into(&self.samples[sample as usize], value.saturating_mul(1000));
    }

    /// Records one `api.http` request of `micros` in the series `slot` (see
    /// [`set_http_series`]).
    #[inline]
    pub fn observe_http(&self, slot: usize, micros: u64) {
        if slot >= HTTP_SLOTS_MAX || !FILTER.api_http.load(Ordering::Relaxed) {
            return;
        }
        let cell = &self.http[slot];
        let mut histogram = cell.load(Ordering::Acquire);
        if histogram.is_null() {
            // Once per thread and series: the histogram is published for scrapes and
            // lives as long as the process (recorders are never freed).
            let fresh = Box::into_raw(Box::new(Histogram::new()));
            match cell.compare_exchange(
                std::ptr::null_mut(),
                fresh,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => histogram = fresh,
                Err(existing) => {
                    // SAFETY: `fresh` was never shared; only the overflow recorder can
                    // race here.
                    drop(unsafe { Box::from_raw(fresh) });
                    histogram = existing;
                }
            }
        }
        // SAFETY: a published histogram is never freed.
        self.observe_into(unsafe { &*histogram }, micros);
    }
}

struct Slot {
    claimed: AtomicBool,
    recorder: OnceLock<Box<Recorder>>,
}

/// Every recorder of the process. Slots are claimed by threads and released when they
/// end; a released recorder keeps its counts for the next thread to continue.
pub struct Registry {
    slots: [Slot; RECORDERS_MAX],
    overflow: OnceLock<Box<Recorder>>,
}

static REGISTRY: Registry = Registry {
    slots: [const {
        Slot {
            claimed: AtomicBool::new(false),
            recorder: OnceLock::new(),
        }
    }; RECORDERS_MAX],
    overflow: OnceLock::new(),
};

/// A recorder for the calling thread: a free slot's (exclusive to the caller until
/// [`release`]) or, when every slot is taken, the shared overflow recorder.
pub fn claim() -> &'static Recorder {
    for (index, slot) in REGISTRY.slots.iter().enumerate() {
        if slot
            .claimed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            let recorder = slot
                .recorder
                .get_or_init(|| Box::new(Recorder::new(index, true)));
            debug_assert_eq!(recorder.slot, index);
            return recorder;
        }
    }
    REGISTRY
        .overflow
        .get_or_init(|| Box::new(Recorder::new(RECORDERS_MAX, false)))
}

/// Gives a claimed recorder back (its thread is ending); its counts stay.
pub fn release(recorder: &'static Recorder) {
    if recorder.slot < RECORDERS_MAX {
        let was = REGISTRY.slots[recorder.slot]
            .claimed
            .swap(false, Ordering::AcqRel);
        debug_assert!(was, "a recorder released twice");
    }
}

fn recorders() -> impl Iterator<Item = &'static Recorder> {
    REGISTRY
        .slots
        .iter()
        .filter_map(|slot| slot.recorder.get().map(|r| &**r))
        .chain(REGISTRY.overflow.get().map(|r| &**r))
}

// ---------------------------------------------------------------------------------------
// api.http series and the prefix filter: configured once at start.

/// The `api.http` label pair of each slot: (method, path label).
static HTTP_SERIES: OnceLock<Vec<(&'static str, String)>> = OnceLock::new();

/// Names each `api.http` slot: `series[slot] = (method, path)`, where the path label is
/// Consul's (the route's pattern without its leading `/`, `/` as `_`). Called once by the
/// HTTP layer before requests are served; later calls keep the first table.
pub fn set_http_series(series: Vec<(&'static str, String)>) {
    assert!(
        series.len() <= HTTP_SLOTS_MAX,
        "{} api.http series, more than HTTP_SLOTS_MAX {HTTP_SLOTS_MAX}",
        series.len()
    );
    let _ = HTTP_SERIES.set(series);
}

fn http_series() -> &'static [(&'static str, String)] {
    HTTP_SERIES.get().map(Vec::as_slice).unwrap_or(&[])
}

/// Which metrics are recorded, from `telemetry.prefix_filter` and `filter_default`.
struct Filter {
    counters: [AtomicBool; Counter::COUNT],
    samples: [AtomicBool; Sample::COUNT],
    gauges: [AtomicBool; Gauge::COUNT],
    api_http: AtomicBool,
}

static FILTER: Filter = Filter {
    counters: [const { AtomicBool::new(true) }; Counter::COUNT],
    samples: [const { AtomicBool::new(true) }; Sample::COUNT],
    gauges: [const { AtomicBool::new(true) }; Gauge::COUNT],
    api_http: AtomicBool::new(true),
};

/// Applies the filter to what the recorders record (counters and samples are checked on
/// the hot path by one relaxed load; gauges at scrape).
pub fn configure_filter(naming: &Naming) {
    let enabled = Enabled::from_naming(naming);
    for (flag, on) in FILTER.counters.iter().zip(enabled.counters) {
        flag.store(on, Ordering::Relaxed);
    }
    for (flag, on) in FILTER.samples.iter().zip(enabled.samples) {
        flag.store(on, Ordering::Relaxed);
    }
    for (flag, on) in FILTER.gauges.iter().zip(enabled.gauges) {
        flag.store(on, Ordering::Relaxed);
    }
    FILTER.api_http.store(enabled.api_http, Ordering::Relaxed);
}

/// What the filter lets through now.
fn enabled() -> Enabled {
    let load = |flag: &AtomicBool| flag.load(Ordering::Relaxed);
    Enabled {
        counters: FILTER.counters.each_ref().map(load),
        samples: FILTER.samples.each_ref().map(load),
        gauges: FILTER.gauges.each_ref().map(load),
        api_http: load(&FILTER.api_http),
    }
}

/// Whether a timer or sample is recorded (the prefix filter allows it).
#[inline]
pub fn sample_enabled(sample: Sample) -> bool {
    FILTER.samples[sample as usize].load(Ordering::Relaxed)
}

/// Whether `api.http` is recorded.
#[inline]
pub fn http_enabled() -> bool {
    FILTER.api_http.load(Ordering::Relaxed)
}

/// Merges every recorder of the process, with the `api.http` series names and what the
/// filter lets through, into what the renderings print.
pub fn snapshot() -> Snapshot {
    let series = http_series().len();
    let mut snapshot = Snapshot {
        http_series: http_series(),
        enabled: enabled(),
        counters: vec![(0, 0); Counter::COUNT],
        samples: vec![None; Sample::COUNT],
        http: vec![None; series],
    };
    for recorder in recorders() {
        for (total, cell) in snapshot.counters.iter_mut().zip(recorder.counters.iter()) {
            total.0 += cell.count.load(Ordering::Relaxed);
            total.1 = total.1.wrapping_add(cell.sum.load(Ordering::Relaxed));
        }
        for (total, histogram) in snapshot.samples.iter_mut().zip(recorder.samples.iter()) {
            merge_into(total, histogram.read());
        }
        for (slot, total) in snapshot.http.iter_mut().enumerate() {
            let histogram = recorder.http[slot].load(Ordering::Acquire);
            if !histogram.is_null() {
                // SAFETY: a published histogram is never freed.
                merge_into(total, unsafe { &*histogram }.read());
            }
        }
    }
    snapshot
}

// ---------------------------------------------------------------------------------------
// This thread's recorder.

/// This thread's recorder, released when the thread ends.
struct Local(&'static Recorder);

impl Drop for Local {
    fn drop(&mut self) {
        release(self.0);
    }
}

thread_local! {
    static LOCAL: Local = Local(claim());
}

/// Runs `record` with this thread's recorder. A thread that is being torn down records
/// nothing.
#[inline]
fn with(record: impl FnOnce(&Recorder)) {
    let _ = LOCAL.try_with(|local| record(local.0));
}

/// Bumps a counter by one.
#[inline]
pub fn incr(counter: Counter) {
    with(|r| r.add(counter, 1));
}

/// Adds `by` to a counter (bytes sent, operations in a batch).
#[inline]
pub fn add(counter: Counter, by: u64) {
    with(|r| r.add(counter, by));
}

/// Records a duration for a timer.
#[inline]
pub fn observe(sample: Sample, elapsed: Duration) {
    with(|r| r.observe_micros(sample, elapsed.as_micros() as u64));
}

/// Records the time since `started` for a timer.
#[inline]
pub fn observe_since(sample: Sample, started: Instant) {
    observe(sample, started.elapsed());
}

/// Records a plain value (a count) for a sample.
#[inline]
pub fn observe_value(sample: Sample, value: u64) {
    with(|r| r.observe_value(sample, value));
}

/// Records one HTTP request in the `api.http` series `slot`.
#[inline]
pub fn observe_http(slot: usize, elapsed: Duration) {
    with(|r| r.observe_http(slot, elapsed.as_micros() as u64));
}

/// Whether a timer is recorded: callers skip reading the clock for a filtered one.
#[inline]
pub fn timing(sample: Sample) -> bool {
    sample_enabled(sample)
}

/// Whether `api.http` is recorded.
#[inline]
pub fn http_timing() -> bool {
    http_enabled()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_recorder_counts_and_is_merged_by_a_snapshot() {
        let recorder = claim();
        let before = snapshot();
        recorder.add(Counter::SerfQueries, 3);
        recorder.observe_micros(Sample::LeaderReconcile, 1500);
        recorder.observe_value(Sample::RaftLeaderDispatchNumLogs, 4);
        let after = snapshot();
        let diff = after.since(&before);
        assert_eq!(diff.counter(Counter::SerfQueries), (1, 3));
        let reconcile = diff.sample(Sample::LeaderReconcile).unwrap();
        assert_eq!((reconcile.count, reconcile.sum), (1, 1500));
        assert_eq!(
            diff.sample(Sample::RaftLeaderDispatchNumLogs).unwrap().sum,
            4000
        );
        release(recorder);
        // A released recorder keeps its counts.
        assert_eq!(
            snapshot().since(&after).counter(Counter::SerfQueries),
            (0, 0)
        );
    }
}
