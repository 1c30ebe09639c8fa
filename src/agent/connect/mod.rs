//! The agent's part of the service mesh: the leader's mesh duties (bootstrap config
//! entries, the built-in CA's root, and in a secondary datacenter the primary's roots and
//! this datacenter's intermediate), and leaf certificates kept fresh for local services.
//! `primary` is the one place a CA request leaves the datacenter.

pub mod leader;
pub mod leaf;
pub mod primary;
pub mod secondary;
