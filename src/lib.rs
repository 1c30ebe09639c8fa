//! praetor: a Consul-compatible control plane written as a thread-per-core server.
//!
//! The crate is layered; a module may only depend on modules above it in this list:
//!
//! 1. [`proto`]: wire formats only (HTTP/1.1, DNS, msgpack frames, gossip packets).
//! 2. [`store`]: versioned, persistent tables and the FSM apply function. Pure.
//! 3. [`raft`] and [`gossip`]: pure protocol cores. Time and bytes come in as arguments,
//!    effects go out as values. No I/O, no clock, no threads.
//! 4. [`shard`], [`api`], [`dns`], [`agent`]: the runtime and everything that does I/O.
//! 5. [`config`] and [`cli`]: flags, config files and operator commands.
//!
//! See ARCHITECTURE.md at the repository root for the bird's-eye view.

pub mod agent;
pub mod api;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod consul;
pub mod dns;
pub mod gossip;
pub mod node;
pub mod proto;
pub mod raft;
pub mod shard;
pub mod store;

/// The Consul HTTP API version praetor implements; reported by `praetor version` and
/// `/v1/agent/self` as `Config.Version` so that clients that gate features on it behave.
pub const CONSUL_API_VERSION: &str = "1.22.0";

/// praetor's own version.
pub const PRAETOR_VERSION: &str = env!("CARGO_PKG_VERSION");
