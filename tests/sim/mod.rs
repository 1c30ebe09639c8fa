//! Seeded, replayable simulation of clusters of the production replica
//! (`praetor::replica::Replica`, the raft thread's decisions over the Raft core and the store).
//!
//! One seed fixes everything: cluster size (3 or 5), how many start as voters, network loss,
//! duplication and delay, disk latency, torn writes, failed fsyncs, a raft thread held up
//! between effects, and the schedule of crashes, partitions (symmetric and one-way), servers
//! joining, leaving and failing in gossip, leadership transfers, client writes and reads on
//! every shard. A run has a chaos phase, then every fault heals and the cluster must elect a
//! leader and commit a new write within a bounded virtual time.
//!
//! Invariants are checked after every event (see `world.rs`); a violation panics with the
//! seed and the command that replays it.

mod disk;
mod kv;
mod rng;
mod world;

use std::time::Instant;

pub use world::{run_seed, RunStats};

/// Seeds the default `cargo test --test sim` run covers.
const DEFAULT_SEEDS: u64 = 1000;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|value| {
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be an unsigned integer, got {value:?}"))
    })
}

pub fn run_default_seeds() {
    let count = env_u64("SIM_SEEDS").unwrap_or(DEFAULT_SEEDS);
    let base = env_u64("SIM_SEED_BASE").unwrap_or(0);
    let started = Instant::now();
    let mut total = RunStats::default();
    for seed in base..base + count {
        let stats = run_seed(seed, false);
        total.add(&stats);
    }
    println!(
        "sim: {count} seeds in {:.1}s wall: {}",
        started.elapsed().as_secs_f64(),
        total
    );
    // The mix must really exercise the mechanisms, or the checks prove little.
    assert!(
        total.acked_writes > count * 20,
        "too few acknowledged writes: {total}"
    );
    assert!(
        total.reads_checked > count * 5,
        "too few reads checked: {total}"
    );
    assert!(
        total.stale_reads > count * 5,
        "too few stale reads checked: {total}"
    );
    if count >= 100 {
        assert!(
            total.crashes > 0 && total.partitions > 0,
            "no faults injected: {total}"
        );
        assert!(
            total.snapshots_installed > 0,
            "no snapshot was ever installed: {total}"
        );
        assert!(
            total.membership_changes > 0,
            "no membership change committed: {total}"
        );
        assert!(
            total.transfers > 0,
            "no leadership transfer happened: {total}"
        );
        assert!(total.lease_reads > 0, "no lease read was served: {total}");
        assert!(
            total.fsync_failures > 0 && total.torn_records > 0,
            "no disk fault injected: {total}"
        );
        assert!(
            total.preemptions > 0 && total.reads_waited_for_batch > 0,
            "no read ever found its batch still on the way: {total}"
        );
        assert!(total.snapshots_taken > 0, "no snapshot was taken: {total}");
    }
}

pub fn run_replay() {
    let seed = env_u64("SIM_SEED").unwrap_or(0);
    let trace = std::env::var("SIM_TRACE").is_ok_and(|v| v != "0");
    let stats = run_seed(seed, trace);
    println!("sim: seed {seed}: {stats}");
}
