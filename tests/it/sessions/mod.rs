//! Sessions, locks and semaphores: the HTTP API, a cluster, py-consul, `praetor lock`.

mod lock_cli;
mod session_api;
mod session_cluster;
mod session_python;
