//! What Consul users bring: its CLI and flags, config files and keys, HTTP bodies, real
//! Consul clients.

mod cli_compat;
mod cli_flags;
mod compat_server;
mod config_compat;
mod config_keys;
mod http_bodies;
mod python_clients;
