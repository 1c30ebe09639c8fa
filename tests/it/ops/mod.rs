//! Operating a cluster: autopilot, restarts, crash recovery, telemetry, portability, the
//! agent as a service.

mod autopilot;
mod cluster;
mod crash_recovery;
mod follower_calls;
mod operator_calls;
mod portability;
mod restarts;
mod service_operation;
mod telemetry;
