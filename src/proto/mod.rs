//! Wire formats only: parsing and writing bytes, with explicit limits. Nothing here knows
//! about the store, the runtime, or time.

pub mod dns;
pub mod duration;
pub mod gossip;
pub mod http;
pub mod rpc;
pub mod snapshot_archive;
