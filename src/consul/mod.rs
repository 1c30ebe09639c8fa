//! Consul's shapes: how Consul's data looks on the wire of its HTTP API and in its config
//! files, independent of how praetor serves it.
//!
//! Go-shaped JSON output ([`json`]), catalog rows rendered as Consul's JSON ([`render`]),
//! lenient and case-insensitive request-body decoding ([`body`]) after the strict check of
//! each body against its Consul struct ([`bodies`]), `?filter=` expressions
//! ([`filter`]), catalog registration bodies ([`registration`]), service and check
//! definitions with Consul's defaults and validation ([`definition`]), the agent's metrics
//! counters ([`metrics`]), the user-event envelope with its filters ([`user_event`]), and
//! one node's catalog rows as the agent compares and a server sends them ([`node_state`]).
//! Both the HTTP API and the agent build on these.
//!
//! Architecture invariant: this layer is pure. It does no I/O, reads no clock and starts no
//! thread; a time it needs arrives as an argument. It knows nothing of shards, sockets,
//! routing or Raft: it turns bytes into Consul's values and values into Consul's bytes.

pub mod bodies;
pub mod body;
pub mod config_entry;
pub mod definition;
pub mod discovery_chain;
pub mod federation_state;
pub mod filter;
pub mod json;
pub mod metrics;
pub mod node_state;
pub mod peering;
pub mod query;
pub mod registration;
pub mod render;
pub mod rpc;
pub mod user_event;
