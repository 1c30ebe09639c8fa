//! TLS: the CLI's certificates, HTTPS, the RPC port's switches, clients that must be
//! refused.

mod tls_cli;
mod tls_cli_clients;
mod tls_https;
mod tls_rpc;
