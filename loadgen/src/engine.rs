//! Thread-per-core execution: one monoio runtime per worker thread, a start gate, the
//! measurement window, per-thread statistics, and the once-a-second progress line.
//!
//! Each worker owns its connections, its histogram and its counters; nothing on the request
//! path is shared except one relaxed store per request into the worker's own cache line of
//! [`Progress`], which the main thread reads once a second. Workers set up their connections,
//! then meet at the [`StartGate`]; the last to arrive fixes the common start instant, so every
//! worker measures the same window. Workers never block on each other after the gate.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::config::{IoDriver, RunConfig};
use crate::hist::LatencyHistogram;

/// io_uring submission-queue entries per runtime.
const URING_ENTRIES: u32 = 4096;

/// Transport and protocol failures, counted by kind. None of them stops a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorCounts {
    pub connect: u64,
    /// Reset, broken pipe, unexpected EOF.
    pub io: u64,
    /// No complete answer within `--timeout`.
    pub timeout: u64,
    /// A status code the scenario does not expect (non-2xx unless stated otherwise).
    pub status: u64,
    /// A response that could not be parsed.
    pub parse: u64,
    /// A well-formed answer that says the operation failed (lock not acquired, DNS RCODE,
    /// empty DNS answer, …).
    pub protocol: u64,
}

impl ErrorCounts {
    pub fn total(&self) -> u64 {
        self.connect + self.io + self.timeout + self.status + self.parse + self.protocol
    }

    pub fn merge(&mut self, other: &ErrorCounts) {
        self.connect += other.connect;
        self.io += other.io;
        self.timeout += other.timeout;
        self.status += other.status;
        self.parse += other.parse;
        self.protocol += other.protocol;
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "connect": self.connect, "io": self.io, "timeout": self.timeout,
            "status": self.status, "parse": self.parse, "protocol": self.protocol,
        })
    }
}

/// What one worker measured.
#[derive(Clone, Default)]
pub struct ThreadStats {
    /// Per request (or DNS query), successful ones only.
    pub latency: LatencyHistogram,
    /// Per operation, for scenarios whose operation spans several requests.
    pub op_latency: LatencyHistogram,
    pub requests_ok: u64,
    pub ops: u64,
    /// Requests sent (open-loop offered load actually put on the wire).
    pub sent: u64,
    /// DNS answers with the TC bit.
    pub truncated: u64,
    pub errors: ErrorCounts,
    /// Unexpected HTTP statuses by code.
    pub statuses: BTreeMap<u16, u64>,
    /// Failing DNS RCODEs by code.
    pub rcodes: BTreeMap<u8, u64>,
    /// The first error's description, for diagnosis.
    pub first_error: Option<String>,
}

impl ThreadStats {
    pub fn merge(&mut self, other: &ThreadStats) {
        self.latency.merge(&other.latency);
        self.op_latency.merge(&other.op_latency);
        self.requests_ok += other.requests_ok;
        self.ops += other.ops;
        self.sent += other.sent;
        self.truncated += other.truncated;
        self.errors.merge(&other.errors);
        for (code, n) in &other.statuses {
            *self.statuses.entry(*code).or_default() += n;
        }
        for (code, n) in &other.rcodes {
            *self.rcodes.entry(*code).or_default() += n;
        }
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
    }

    pub fn note_error(&mut self, what: impl FnOnce() -> String) {
        if self.first_error.is_none() {
            self.first_error = Some(what());
        }
    }
}

/// One worker's progress counters, alone on a cache line.
#[repr(align(64))]
#[derive(Default)]
struct ProgressSlot {
    ok: AtomicU64,
    errors: AtomicU64,
}

/// Counters the main thread samples once a second.
pub struct Progress {
    slots: Box<[ProgressSlot]>,
}

impl Progress {
    pub fn new(threads: usize) -> Self {
        Progress {
            slots: (0..threads).map(|_| ProgressSlot::default()).collect(),
        }
    }

    /// Publishes a worker's running totals (a plain store: only that worker writes its slot).
    #[inline]
    pub fn publish(&self, thread: usize, ok: u64, errors: u64) {
        let slot = &self.slots[thread];
        slot.ok.store(ok, Ordering::Relaxed);
        slot.errors.store(errors, Ordering::Relaxed);
    }

    pub fn totals(&self) -> (u64, u64) {
        self.slots.iter().fold((0, 0), |(ok, err), s| {
            (
                ok + s.ok.load(Ordering::Relaxed),
                err + s.errors.load(Ordering::Relaxed),
            )
        })
    }
}

/// Where all workers meet after setup. The last arrival fixes the shared start instant. A
/// worker that fails or panics before arriving still releases the others (its ticket arrives
/// on drop), so a broken worker can never hang the run.
pub struct StartGate {
    state: Mutex<GateState>,
    all_arrived: Condvar,
}

struct GateState {
    waiting_for: usize,
    start: Option<Instant>,
}

impl StartGate {
    pub fn new(workers: usize) -> Self {
        StartGate {
            state: Mutex::new(GateState {
                waiting_for: workers,
                start: None,
            }),
            all_arrived: Condvar::new(),
        }
    }

    fn arrive(&self) -> Instant {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.waiting_for = state.waiting_for.saturating_sub(1);
        if state.waiting_for == 0 {
            state.start.get_or_insert_with(Instant::now);
            self.all_arrived.notify_all();
        }
        while state.start.is_none() {
            state = self
                .all_arrived
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        state.start.expect("set before the wait ends")
    }

    /// Blocks the caller (the main thread) until every worker has arrived.
    pub fn wait_started(&self) -> Instant {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while state.start.is_none() {
            state = self
                .all_arrived
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        state.start.expect("set before the wait ends")
    }
}

/// A worker's right to arrive at the gate once.
pub struct GateTicket {
    gate: Arc<StartGate>,
    arrived: bool,
}

impl GateTicket {
    /// Arrives and waits for the others; returns the common start instant.
    pub fn arrive(mut self) -> Instant {
        self.arrived = true;
        self.gate.arrive()
    }
}

impl Drop for GateTicket {
    fn drop(&mut self) {
        if !self.arrived {
            self.gate.arrive();
        }
    }
}

/// The measured window of a run.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub start: Instant,
    /// Results before this instant (warm-up) are not recorded.
    pub measure_start: Instant,
    pub end: Instant,
}

impl Window {
    pub fn new(start: Instant, warmup: Duration, duration: Duration) -> Self {
        let measure_start = start + warmup;
        Window {
            start,
            measure_start,
            end: measure_start + duration,
        }
    }

    /// A request sent at `sent` and finished at `done` counts when it lies inside the window.
    #[inline]
    pub fn counts(&self, sent: Instant, done: Instant) -> bool {
        sent >= self.measure_start && done <= self.end
    }
}

/// What a worker is handed.
pub struct WorkerEnv {
    pub index: usize,
    pub threads: usize,
    pub progress: Arc<Progress>,
    pub ticket: GateTicket,
}

impl WorkerEnv {
    /// Indices `0..total` this worker owns (round-robin).
    pub fn my_indices(&self, total: usize) -> impl Iterator<Item = usize> {
        (self.index..total).step_by(self.threads)
    }
}

/// Runs `future` on a fresh monoio runtime of the chosen driver, with timers enabled.
pub fn block_on<F: Future>(driver: IoDriver, future: F) -> std::io::Result<F::Output> {
    use monoio::RuntimeBuilder;
    Ok(match driver {
        IoDriver::Auto => RuntimeBuilder::<monoio::FusionDriver>::new()
            .with_entries(URING_ENTRIES)
            .enable_timer()
            .build()?
            .block_on(future),
        IoDriver::Uring => RuntimeBuilder::<monoio::IoUringDriver>::new()
            .with_entries(URING_ENTRIES)
            .enable_timer()
            .build()?
            .block_on(future),
        IoDriver::Epoll => RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()?
            .block_on(future),
    })
}

/// Starts `config.threads` workers, each running `worker` on its own runtime, prints the
/// progress line while they run, and returns their statistics in thread order. `on_tick`
/// formats the progress line (seconds since start, ok/s in the last second, totals).
pub fn run_workers<W, Fut>(
    config: &RunConfig,
    label: &str,
    worker: W,
) -> Result<Vec<ThreadStats>, String>
where
    W: Fn(WorkerEnv) -> Fut + Sync,
    Fut: Future<Output = ThreadStats>,
{
    let threads = config.effective_threads();
    let progress = Arc::new(Progress::new(threads));
    let gate = Arc::new(StartGate::new(threads));
    let cores = if config.pin_threads {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let total_time = config.warmup + config.duration;

    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|index| {
                let worker = &worker;
                let progress = progress.clone();
                let ticket = GateTicket {
                    gate: gate.clone(),
                    arrived: false,
                };
                let core = (!cores.is_empty()).then(|| cores[index % cores.len()]);
                let driver = config.io_driver;
                std::thread::Builder::new()
                    .name(format!("loadgen-{index}"))
                    .spawn_scoped(scope, move || {
                        if let Some(core) = core {
                            core_affinity::set_for_current(core);
                        }
                        let env = WorkerEnv {
                            index,
                            threads,
                            progress,
                            ticket,
                        };
                        block_on(driver, worker(env)).map_err(|e| format!("runtime: {e}"))
                    })
                    .map_err(|e| format!("cannot start worker thread: {e}"))
            })
            .collect::<Result<_, _>>()?;

        let started = gate.wait_started();
        if config.progress {
            print_progress(label, &progress, started, total_time, config.warmup, || {
                handles
                    .iter()
                    .all(|h: &std::thread::ScopedJoinHandle<'_, _>| h.is_finished())
            });
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| "a worker thread panicked".to_string())?
            })
            .collect()
    })
}

/// Prints one line per second to stderr until `finished()` or the run time is over.
fn print_progress(
    label: &str,
    progress: &Progress,
    started: Instant,
    total_time: Duration,
    warmup: Duration,
    finished: impl Fn() -> bool,
) {
    let mut last = (0u64, 0u64);
    let mut second = 1u64;
    loop {
        let tick = started + Duration::from_secs(second);
        while Instant::now() < tick {
            if finished() {
                return;
            }
            std::thread::sleep(
                Duration::from_millis(20).min(tick.saturating_duration_since(Instant::now())),
            );
        }
        let (ok, errors) = progress.totals();
        let phase = if Duration::from_secs(second) <= warmup {
            " (warm-up)"
        } else {
            ""
        };
        eprintln!(
            "[{label} {second:>3}s] {:>10} ok/s  {:>8} err/s  total ok {}  errors {}{phase}",
            group_digits(ok.saturating_sub(last.0)),
            group_digits(errors.saturating_sub(last.1)),
            group_digits(ok),
            group_digits(errors),
        );
        last = (ok, errors);
        if Duration::from_secs(second) >= total_time {
            return;
        }
        second += 1;
    }
}

/// `1234567` → `1,234,567`.
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digit_grouping() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1,000");
        assert_eq!(group_digits(1234567), "1,234,567");
    }

    #[test]
    fn window_bounds() {
        let start = Instant::now();
        let w = Window::new(start, Duration::from_secs(1), Duration::from_secs(2));
        assert!(!w.counts(start, start + Duration::from_millis(1500)));
        assert!(w.counts(
            start + Duration::from_secs(1),
            start + Duration::from_secs(2)
        ));
        assert!(!w.counts(
            start + Duration::from_secs(2),
            start + Duration::from_millis(3001)
        ));
    }

    #[test]
    fn the_gate_opens_when_a_ticket_is_dropped_unused() {
        let gate = Arc::new(StartGate::new(2));
        std::thread::scope(|s| {
            let dropped = GateTicket {
                gate: gate.clone(),
                arrived: false,
            };
            s.spawn(move || drop(dropped));
            let t = GateTicket {
                gate: gate.clone(),
                arrived: false,
            }
            .arrive();
            assert_eq!(gate.wait_started(), t);
        });
    }

    #[test]
    fn stats_merge() {
        let mut a = ThreadStats::default();
        let mut b = ThreadStats::default();
        a.requests_ok = 2;
        a.statuses.insert(500, 1);
        b.requests_ok = 3;
        b.statuses.insert(500, 2);
        b.errors.timeout = 4;
        b.first_error = Some("x".into());
        a.merge(&b);
        assert_eq!(a.requests_ok, 5);
        assert_eq!(a.statuses[&500], 3);
        assert_eq!(a.errors.total(), 4);
        assert_eq!(a.first_error.as_deref(), Some("x"));
    }
}
