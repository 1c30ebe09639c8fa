//! praetor: a Consul-compatible control plane written as a thread-per-core server.
//!
//! The crate is layered, bottom first; a module uses only modules below it, and only those
//! the table in `tests/layers.rs` allows (that test enforces this list):
//!
//! 1. [`proto`]: wire formats only (HTTP/1.1, DNS, msgpack frames, gossip packets). Pure.
//! 2. [`store`]: versioned, persistent tables and the FSM apply function. Pure.
//! 3. [`raft`] and [`gossip`]: consensus and membership cores. Pure: time and bytes come in
//!    as arguments, effects go out as values. [`replica`] sits beside them: the raft
//!    thread's decisions over the consensus core and the store, pure as well.
//! 4. [`consul`]: Consul's shapes: JSON, lenient bodies, `?filter`, definitions, metrics,
//!    the user-event envelope. Pure.
//! 5. [`config`]: flags and config files merged into the agent's configuration.
//! 6. [`tls`]: certificate files, rustls configurations per protocol swapped whole on reload,
//!    the server-role check, the TLS stream over monoio, certificate generation.
//! 7. [`telemetry`]: the process-wide metric recorders, one per recording thread, the
//!    registry that hands them out and the merge a scrape reads; named by [`consul`]'s metric
//!    catalogue. The runtime ([`shard`]) records through it and does not use [`consul`].
//!    [`logging`] sits beside it: the agent's `log` backend in Consul's hclog format, the
//!    log file with Consul's rotation, and `monitor`'s subscribers.
//! 8. [`shard`]: the runtime: shard threads, channels, store versions, the watch registry,
//!    propose/read plumbing, the raft thread and its durable log, and the raft thread's
//!    timings (recorded through [`telemetry`]).
//! 9. [`cluster`]: the gossip driver and pools, server discovery, a client's server manager,
//!    member reconcile, user events.
//! 10. [`dns`] and [`api`]: DNS (resolution, socket loops, a client agent's protocol with its
//!     servers) and the HTTP API (routing table, handlers, server loop), which uses `dns`
//!     only to serve that protocol on the servers.
//! 11. [`agent`]: local services and checks, runners, anti-entropy.
//! 12. [`xds`]: the gRPC server on its own tokio thread: Envoy's ADS for this agent's
//!     proxies, from the store versions a shard publishes and the agent's answers.
//! 12. [`proxy`]: the built-in mTLS proxy (`praetor connect proxy`), a data plane fed by
//!     its agent over HTTP; it needs only `proto` and `tls`.
//! 13. [`node`]: start-up wiring, the only module that uses every layer.
//! 14. [`cli`]: operator commands.
//!
//! Pure modules do no I/O, read no clock, draw no entropy and start no thread.
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
pub mod logging;
pub mod node;
pub mod proto;
pub mod proxy;
pub mod raft;
pub mod replica;
pub mod shard;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod xds;

/// The Consul HTTP API version praetor implements; reported by `praetor version` and
/// `/v1/agent/self` as `Config.Version` so that clients that gate features on it behave.
pub const CONSUL_API_VERSION: &str = "1.22.0";

/// praetor's own version.
pub const PRAETOR_VERSION: &str = env!("CARGO_PKG_VERSION");
