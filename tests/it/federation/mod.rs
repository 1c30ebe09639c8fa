//! Several datacenters: WAN federation and `?dc=`, and Consul's RPC between agents and
//! servers.

mod acl_dc_calls;
mod catalog_calls;
mod consul_rpc;
mod dc_calls;
mod dcstate_calls;
mod dns_calls;
mod federation_states;
mod keyring_calls;
mod mesh_calls;
mod native_tls;
mod peer_snapshot_calls;
mod query_calls;
mod snapshot_stream;
mod ui_calls;
mod wan;
