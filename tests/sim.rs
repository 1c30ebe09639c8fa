//! The seeded simulator: many clusters of the production replica (`praetor::replica::Replica`,
//! Raft core and store included) under a virtual clock, a lossy, reordering, partitionable
//! network, a disk that tears writes, fails fsyncs and syncs slowly, a raft thread that can
//! be held up between effects, and crashes, with safety checked after every event. See
//! `sim/mod.rs`.
//!
//! - `cargo test --profile ci --test sim` runs the default seed set (`SIM_SEEDS=N` for more,
//!   `SIM_SEED_BASE=B` to start elsewhere);
//! - `SIM_SEED=1234 cargo test --profile ci --test sim -- replay --nocapture` replays one
//!   seed (add `SIM_TRACE=1` for an event trace; `SIM_DRIVER_ORDER=queue-before-publish`
//!   replays it with the deliberately broken driver `queueing_before_publishing_is_caught`
//!   uses).

#[path = "sim/mod.rs"]
mod simulator;

#[test]
fn seeds() {
    simulator::run_default_seeds();
}

#[test]
fn replay() {
    simulator::run_replay();
}

/// The publish-before-queue rule is checked, not just followed: the same worlds with the
/// raft thread's two steps swapped (queue the batch, then publish its index) must fail, with
/// a read that missed an acknowledged write and the command that replays the seed.
#[test]
fn queueing_before_publishing_is_caught() {
    let (seed, message) = simulator::first_failure_when_queued_before_publish()
        .expect("no seed caught a driver that queues batches before publishing their index");
    println!("sim: the reversed order failed at seed {seed}: {message}");
    assert!(
        message.contains("acknowledged before it started"),
        "seed {seed} failed for another reason: {message}"
    );
    assert!(
        message.contains(&format!(
            "SIM_DRIVER_ORDER=queue-before-publish SIM_SEED={seed} cargo test"
        )),
        "the failure does not name its replay command: {message}"
    );
}
