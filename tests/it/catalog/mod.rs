//! The catalog: registration and reads over HTTP and the CLI, across a cluster, and the
//! store modules' separation.

mod catalog_api;
mod catalog_cli;
mod catalog_cluster;
mod store_modules;
