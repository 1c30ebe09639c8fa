//! The seeded Raft simulator: many clusters of `RaftCore`s under a virtual clock, a lossy,
//! reordering, partitionable network, slow disks and crashes, with Raft's safety properties
//! checked after every event. See `sim/mod.rs`.
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
