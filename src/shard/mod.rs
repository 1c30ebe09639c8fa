//! shard (filled in by the issue that needs it).
pub mod gossip;
