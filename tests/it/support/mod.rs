//! What the feature modules share: starting and stopping real agents on fresh loopback
//! addresses, HTTP and DNS clients, ACL and agent fixtures, the Envoy harness, and the
//! iptables partitions (`nemesis`, which `tests/linearizability.rs` includes too).

pub mod acl_common;
pub mod agent_support;
pub mod common;
pub mod dns_common;
pub mod envoy;
pub mod nemesis;
pub mod two_dc;
