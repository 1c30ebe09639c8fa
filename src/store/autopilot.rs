//! The autopilot configuration: one row, replicated through Raft and kept in snapshots, as
//! Consul keeps its `autopilot-config` table. The leader writes the agent's configured
//! defaults when it takes office and none exists; operators change it with
//! `PUT /v1/operator/autopilot/configuration` (optionally check-and-set on `ModifyIndex`).
//! The replica's autopilot reads it on every reconcile.

use super::{AutopilotResult, Tables};
use serde::{Deserialize, Serialize};

/// Consul's autopilot settings with their indexes. Durations in nanoseconds, as Go keeps a
/// `time.Duration`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutopilotConfig {
    /// Remove failed servers from the Raft configuration while quorum allows.
    pub cleanup_dead_servers: bool,
    /// A server silent for longer is unhealthy.
    pub last_contact_threshold_ns: i64,
    /// A server further behind the leader's log is unhealthy.
    pub max_trailing_logs: u64,
    /// Dead servers are not removed below this many voters.
    pub min_quorum: u32,
    /// How long a new server must be healthy before it becomes a voter.
    pub server_stabilization_time_ns: i64,
    /// Enterprise settings, kept and shown but not acted on.
    pub redundancy_zone_tag: String,
    pub disable_upgrade_migration: bool,
    pub upgrade_version_tag: String,
    pub create_index: u64,
    pub modify_index: u64,
}

impl Default for AutopilotConfig {
    /// Consul's defaults.
    fn default() -> Self {
        AutopilotConfig {
            cleanup_dead_servers: true,
            last_contact_threshold_ns: 200_000_000,
            max_trailing_logs: 250,
            min_quorum: 0,
            server_stabilization_time_ns: 10_000_000_000,
            redundancy_zone_tag: String::new(),
            disable_upgrade_migration: false,
            upgrade_version_tag: String::new(),
            create_index: 0,
            modify_index: 0,
        }
    }
}

/// Writes to the autopilot configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AutopilotOp {
    /// Replace the configuration; with `cas`, only if its `ModifyIndex` is that (and it
    /// exists, as Consul's check-and-set requires).
    Set {
        config: AutopilotConfig,
        cas: Option<u64>,
    },
    /// The leader's initial write: the configured defaults, unless a configuration exists.
    /// Every new leader may propose it; only the first applies.
    Initialize { config: AutopilotConfig },
}

/// Applies an autopilot write at `index`. Touches no table a query watches.
pub fn apply(tables: &mut Tables, index: u64, op: &AutopilotOp) -> AutopilotResult {
    let (config, cas) = match op {
        AutopilotOp::Set { config, cas } => (config, *cas),
        AutopilotOp::Initialize { config } => {
            if tables.autopilot.is_some() {
                return AutopilotResult::AlreadyInitialized;
            }
            (config, None)
        }
    };
    let existing = tables.autopilot.as_ref();
    if let Some(expected) = cas {
        if existing.map(|c| c.modify_index) != Some(expected) {
            return AutopilotResult::CheckAndSetFailed;
        }
    }
    let create_index = existing.map_or(index, |c| c.create_index);
    tables.autopilot = Some(AutopilotConfig {
        create_index,
        modify_index: index,
        ..config.clone()
    });
    debug_assert!(create_index <= index);
    AutopilotResult::Written
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Command, CommandResult};

    #[test]
    fn set_check_and_set_and_initialize_as_consul() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let defaults = AutopilotConfig::default();
        let mut apply = |tables: &mut Tables, index, op: AutopilotOp| {
            tables.apply(index, &Command::Autopilot(op), &mut changes)
        };
        // A check-and-set needs an existing configuration.
        let cas = AutopilotOp::Set {
            config: defaults.clone(),
            cas: Some(0),
        };
        assert_eq!(
            apply(&mut tables, 1, cas),
            CommandResult::Autopilot(AutopilotResult::CheckAndSetFailed)
        );
        let init = AutopilotOp::Initialize {
            config: defaults.clone(),
        };
        assert_eq!(
            apply(&mut tables, 2, init.clone()),
            CommandResult::Autopilot(AutopilotResult::Written)
        );
        assert_eq!(
            apply(&mut tables, 3, init),
            CommandResult::Autopilot(AutopilotResult::AlreadyInitialized)
        );
        let stored = tables.autopilot.clone().unwrap();
        assert_eq!((stored.create_index, stored.modify_index), (2, 2));
        let changed = AutopilotConfig {
            min_quorum: 3,
            ..defaults.clone()
        };
        let stale = AutopilotOp::Set {
            config: changed.clone(),
            cas: Some(1),
        };
        assert_eq!(
            apply(&mut tables, 4, stale),
            CommandResult::Autopilot(AutopilotResult::CheckAndSetFailed)
        );
        let fresh = AutopilotOp::Set {
            config: changed,
            cas: Some(2),
        };
        assert_eq!(
            apply(&mut tables, 5, fresh),
            CommandResult::Autopilot(AutopilotResult::Written)
        );
        let stored = tables.autopilot.clone().unwrap();
        assert_eq!(
            (stored.min_quorum, stored.create_index, stored.modify_index),
            (3, 2, 5)
        );
        // It travels in snapshots.
        let restored = Tables::from_snapshot_bytes(&tables.to_snapshot_bytes()).unwrap();
        assert_eq!(restored.autopilot, tables.autopilot);
        assert!(
            changes.is_empty(),
            "no query watches the autopilot configuration"
        );
    }
}
