//! praetor's integration tests: one crate, one module per feature, each test against real
//! `praetor` processes on their own loopback addresses (see `support::common`).
//!
//! Find a test by what it is about: `kv`, `catalog`, `health`, `sessions`, `acl`, `agent`,
//! `dns`, `gossip`, `tls`, `connect` (CA, intentions, proxies, Envoy, gateways),
//! `federation` (several datacenters, Consul's RPC), `ops` (clusters, autopilot, restarts,
//! crash recovery, telemetry), `compat` (Consul's CLI, config, HTTP bodies, real Consul
//! clients), `ui`, `docs` (the walkthroughs in docs/ run as written). Run one feature with
//! `cargo test --test it kv::`, one file with `cargo test --test it kv::http_kv::`.
//!
//! The simulator (`tests/sim.rs`), the linearizability checker (`tests/linearizability.rs`)
//! and the layer rules (`tests/layers.rs`) are crates of their own: they are about the
//! whole system's laws rather than one feature. So are the two memory figures
//! (`tests/kv_memory.rs`, `tests/catalog_memory.rs`): each installs a counting global
//! allocator, and other tests' allocations in the same process would count against it.

mod support;

pub(crate) use support::{acl_common, agent_support, common, dns_common, envoy, nemesis, two_dc};

mod acl;
mod agent;
mod catalog;
mod compat;
mod connect;
mod dns;
mod docs;
mod federation;
mod gossip;
mod health;
mod kv;
mod ops;
mod peering;
mod sessions;
mod tls;
mod ui;
