//! Wire formats only: parsing and writing bytes, with explicit limits. Nothing here knows
//! about the store, the runtime, or time. `hcl` is here too: Consul's config files and ACL
//! rules are both HCL1 text, read by the config loader and by the store's rule parser.

pub mod dns;
pub mod duration;
pub mod gossip;
pub mod hcl;
pub mod http;
pub mod msgpack;
pub mod msgpack_rpc;
pub mod rfc3339;
pub mod rpc;
pub mod rpc_select;
pub mod snapshot_archive;
pub mod spiffe;
pub mod tls_record;
pub mod yamux;
