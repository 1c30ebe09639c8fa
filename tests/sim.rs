//! The seeded simulator: many clusters of the production replica (`praetor::replica::Replica`,
//! Raft core and store included) under a virtual clock, a lossy, reordering, partitionable
//! network, a disk that tears writes, fails fsyncs and syncs slowly, a raft thread that can
//! be held up between effects, and crashes, with safety checked after every event. See
//! `sim/mod.rs`.
//!
//! - `cargo test --profile ci --test sim` runs the default seed set (`SIM_SEEDS=N` for more,
//!   `SIM_SEED_BASE=B` to start elsewhere);
//! - `SIM_SEED=1234 cargo test --profile ci --test sim -- replay --nocapture` replays one
//!   seed (add `SIM_TRACE=1` for an event trace).

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
