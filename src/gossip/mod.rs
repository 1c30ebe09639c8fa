//! The pure gossip core: SWIM failure detection with Lifeguard (memberlist), serf's
//! membership layer (status, Lamport clocks, intents, user events, queries), Vivaldi
//! coordinates and the keyring, wire-compatible with HashiCorp serf through
//! [`crate::proto::gossip`]. No I/O, no clock, no threads: see [`core::Gossip`] for the
//! input/output contract and `crate::cluster::gossip` for the driver.

pub mod config;
pub mod coordinate;
pub mod core;
pub mod queue;
pub mod types;

pub use self::config::GossipConfig;
pub use self::core::{Gossip, GossipStats};
pub use self::types::*;
pub mod sim;
