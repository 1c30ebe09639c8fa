//! The agent's part of the service mesh: the leader's mesh duties (bootstrap config
//! entries, the built-in CA's root), leaf certificates kept fresh for local services, and
//! the built-in proxy.

pub mod leader;
pub mod leaf;
