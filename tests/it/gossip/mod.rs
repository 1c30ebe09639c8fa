//! Gossip: serf-compatible membership, the wire format, encryption, views, the simulator,
//! real serf.

mod gossip_agent;
mod gossip_catalog;
mod gossip_encryption;
mod gossip_serf;
mod gossip_sim;
mod gossip_views;
mod gossip_wire;
