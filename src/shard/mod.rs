//! The runtime: shard threads, listeners, the raft core thread and its durable log. This is
//! the only layer that performs I/O or reads the clock.

pub mod wal;
