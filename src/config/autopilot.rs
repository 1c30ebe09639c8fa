//! The `autopilot` block: Consul's defaults, and the replicated form the first leader writes.

use std::time::Duration;

/// Consul's `autopilot` block, with Consul's defaults: what the first leader writes as the
/// replicated autopilot configuration (`store::autopilot`), which autopilot then follows.
#[derive(Clone, Debug, PartialEq)]
pub struct AutopilotConfig {
    pub cleanup_dead_servers: bool,
    pub last_contact_threshold: Duration,
    pub max_trailing_logs: u64,
    pub min_quorum: u32,
    pub server_stabilization_time: Duration,
    pub redundancy_zone_tag: String,
    pub disable_upgrade_migration: bool,
    pub upgrade_version_tag: String,
}

impl Default for AutopilotConfig {
    fn default() -> Self {
        AutopilotConfig {
            cleanup_dead_servers: true,
            last_contact_threshold: Duration::from_millis(200),
            max_trailing_logs: 250,
            min_quorum: 0,
            server_stabilization_time: Duration::from_secs(10),
            redundancy_zone_tag: String::new(),
            disable_upgrade_migration: false,
            upgrade_version_tag: String::new(),
        }
    }
}

impl AutopilotConfig {
    /// The replicated form the first leader writes (durations in nanoseconds, no indexes).
    pub fn to_replicated(&self) -> crate::store::autopilot::AutopilotConfig {
        crate::store::autopilot::AutopilotConfig {
            cleanup_dead_servers: self.cleanup_dead_servers,
            last_contact_threshold_ns: self.last_contact_threshold.as_nanos() as i64,
            max_trailing_logs: self.max_trailing_logs,
            min_quorum: self.min_quorum,
            server_stabilization_time_ns: self.server_stabilization_time.as_nanos() as i64,
            redundancy_zone_tag: self.redundancy_zone_tag.clone(),
            disable_upgrade_migration: self.disable_upgrade_migration,
            upgrade_version_tag: self.upgrade_version_tag.clone(),
            create_index: 0,
            modify_index: 0,
        }
    }
}
