//! Autopilot on the leader, as Consul's (hashicorp/raft-autopilot) runs it: every
//! reconcile, the leader judges each server's health from gossip, its replication progress
//! and the autopilot configuration; a new server joins as a non-voter and is promoted once
//! it has been healthy for `ServerStabilizationTime`; with `CleanupDeadServers`, servers
//! gossip declared failed are removed from the configuration while that leaves a majority
//! of the voters and at least `MinQuorum` of them.
//!
//! A server is healthy when gossip says it is alive, the leader heard from it within
//! `LastContactThreshold`, it holds an entry of the leader's term, and it trails the
//! leader's log by at most `MaxTrailingLogs` entries. Its `StableSince` is when that last
//! changed.
//!
//! Pure like the rest of the replica: the clocks are the step's. The health the leader
//! computes is published with the cluster status (`ClusterStatus::autopilot`); followers
//! publish none, and forget their marks, so a new leader starts judging afresh.

use super::state::Replica;
use super::{AutopilotHealth, ServerHealth};
use crate::raft::{MembershipChange, NodeId, Role};
use crate::store::autopilot::{AutopilotConfig, AutopilotOp};
use crate::store::Command;
use std::collections::BTreeMap;
use std::sync::Arc;

/// When a server's health last changed, on both clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct HealthMark {
    healthy: bool,
    since_ms: u64,
    since_unix_ms: u64,
}

/// What the leader keeps between reconciles.
#[derive(Debug, Default)]
pub(super) struct Autopilot {
    marks: BTreeMap<NodeId, HealthMark>,
    /// The last health computed; `None` when not leading.
    pub(super) health: Option<Arc<AutopilotHealth>>,
}

impl Replica {
    /// The replicated configuration, or the agent's until the first leader wrote it.
    pub(super) fn autopilot_config(&self) -> &AutopilotConfig {
        self.tables
            .autopilot
            .as_ref()
            .unwrap_or(&self.config.autopilot)
    }

    /// On taking office: writes the configured defaults if no configuration exists yet
    /// (Consul's leader does the same). Idempotent: only the first such entry applies.
    pub(super) fn initialize_autopilot(&mut self) {
        if self.tables.autopilot.is_some() {
            return;
        }
        let command = Command::Autopilot(AutopilotOp::Initialize {
            config: self.config.autopilot.clone(),
        });
        if let Err(e) = self.propose_internal(&command) {
            self.log(
                log::Level::Debug,
                format!("autopilot: configuration not initialized: {e}"),
            );
        }
    }

    /// Recomputes every server's health (leader only) and keeps when each last changed.
    pub(super) fn update_autopilot(&mut self) {
        if self.role != Role::Leader {
            self.autopilot.marks.clear();
            self.autopilot.health = None;
            return;
        }
        let now_ms = self.now.monotonic_ms;
        let now_unix_ms = self.now.unix_ms;
        let config = self.autopilot_config().clone();
        let threshold_ms = (config.last_contact_threshold_ns.max(0) / 1_000_000) as u64;
        let stabilization_ms = (config.server_stabilization_time_ns.max(0) / 1_000_000) as u64;
        let status = self.core.status();
        let local_id = self.config.raft.id;
        let leader_last_index = status.last_index;
        let mut servers = Vec::with_capacity(self.membership.members.len());
        for (id, member) in &self.membership.members {
            let leader = *id == local_id;
            let serf_status = match self.servers.get(id) {
                Some(s) if s.alive => "alive",
                Some(s) if s.left => "left",
                Some(_) => "failed",
                None if leader => "alive",
                None => "none",
            };
            let peer = status.peers.iter().find(|p| p.id == *id);
            let (last_contact_ms, last_index) = if leader {
                (Some(0), leader_last_index)
            } else {
                (
                    peer.and_then(|p| p.last_contact)
                        .map(|at| now_ms.saturating_sub(at)),
                    peer.map_or(0, |p| p.match_index),
                )
            };
            let last_term = if leader {
                self.term
            } else {
                self.core.log_term(last_index).unwrap_or(0)
            };
            let healthy = serf_status == "alive"
                && last_contact_ms.is_some_and(|ms| ms <= threshold_ms)
                && last_term == self.term
                && last_index.saturating_add(config.max_trailing_logs) >= leader_last_index;
            let mark = match self.autopilot.marks.get(id) {
                Some(mark) if mark.healthy == healthy => *mark,
                _ => HealthMark {
                    healthy,
                    since_ms: now_ms,
                    since_unix_ms: now_unix_ms,
                },
            };
            self.autopilot.marks.insert(*id, mark);
            servers.push(ServerHealth {
                raft_id: *id,
                node_id: self.node_id_of(*id),
                name: member.name.clone(),
                address: member.address.clone(),
                serf_status,
                leader,
                voter: member.voter,
                last_contact_ms,
                last_term,
                last_index,
                healthy,
                stable_since_unix_ms: mark.since_unix_ms,
                stable: healthy && now_ms.saturating_sub(mark.since_ms) >= stabilization_ms,
            });
        }
        let members = &self.membership.members;
        self.autopilot
            .marks
            .retain(|id, _| members.contains_key(id));
        let voters = servers.iter().filter(|s| s.voter).count();
        let healthy_voters = servers.iter().filter(|s| s.voter && s.healthy).count();
        let quorum = voters / 2 + 1;
        let health = AutopilotHealth {
            healthy: !servers.is_empty() && servers.iter().all(|s| s.healthy),
            failure_tolerance: healthy_voters.saturating_sub(quorum),
            servers,
        };
        debug_assert!(health.failure_tolerance < voters.max(1));
        self.autopilot.health = Some(Arc::new(health));
    }

    /// The non-voter to promote: healthy for at least the stabilization time.
    pub(super) fn promotion_wanted(&self) -> Option<MembershipChange> {
        let health = self.autopilot.health.as_ref()?;
        health
            .servers
            .iter()
            .find(|s| !s.voter && s.stable)
            .map(|s| MembershipChange::Promote { id: s.raft_id })
    }

    /// With `CleanupDeadServers`, a server gossip declared failed to remove: non-voters
    /// first, and a voter only while the removals leave a majority of the potential voters
    /// (every server may vote here) and at least `MinQuorum` of them, as raft-autopilot
    /// adjudicates. One removal per reconcile; the next reconcile judges the next.
    pub(super) fn dead_server_to_remove(&self) -> Option<NodeId> {
        let config = self.autopilot_config();
        if !config.cleanup_dead_servers {
            return None;
        }
        let local_id = self.config.raft.id;
        let failed = |id: &NodeId| {
            *id != local_id && self.servers.get(id).is_some_and(|s| !s.alive && !s.left)
        };
        let potential_voters = self.membership.members.len();
        let removal_allowed = (potential_voters.saturating_sub(1)) / 2;
        if removal_allowed < 1 || potential_voters <= config.min_quorum as usize {
            return None;
        }
        let mut candidates: Vec<(bool, NodeId)> = self
            .membership
            .members
            .iter()
            .filter(|(id, _)| failed(id))
            .map(|(id, member)| (member.voter, *id))
            .collect();
        // Non-voters (`false`) sort first.
        candidates.sort();
        candidates.first().map(|(_, id)| *id)
    }
}
