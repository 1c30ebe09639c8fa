//! The mesh: the CA and intentions, config entries (a client agent's as typed calls), the
//! built-in proxy, Envoy over xDS, gateways (the built-in mesh gateway across two
//! datacenters), the CA across datacenters.

mod config_calls;
mod connect_api;
mod connect_config;
mod connect_federation;
mod connect_proxy;
mod envoy_bootstrap;
mod envoy_client_agent;
mod envoy_escape;
mod envoy_expose;
mod envoy_mesh;
mod gateways;
mod gateways_envoy;
mod grpc_proxyless;
mod intention_calls;
mod mesh_gateways_builtin;
mod mesh_gateways_envoy;
mod xds_conformance;
