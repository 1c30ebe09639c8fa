//! The KV store over HTTP and the CLI: reads, writes, CAS, blocking reads, transactions,
//! parked requests.

mod cli_kv;
mod http_kv;
mod http_parked;
mod txn_api;
