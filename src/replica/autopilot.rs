//! Autopilot on the leader, as Consul's (hashicorp/raft-autopilot) runs it: every
//! reconcile, the leader judges each server's health from gossip, its replication progress
//! and the autopilot configuration; a new server joins as a non-voter and is promoted once
//! it has been healthy for `ServerStabilizationTime`; with `CleanupDeadServers`, dead
//! servers are removed from the configuration.
//!
//! A server is healthy when gossip says it is alive, the leader heard from it within
//! `LastContactThreshold`, it holds an entry of the leader's term, and it trails the
//! leader's log by at most `MaxTrailingLogs` entries. Its `StableSince` is when that last
//! changed.
//!
//! A server is dead when gossip says it failed (or left) *and* the leader has not heard from
//! it within `LastContactThreshold` — gossip's verdict lags behind a healed partition or a
//! restart, Raft's contact does not — and it has been so without a break for
//! [`DEAD_SERVER_GRACE_MS`], unless another server waits to join or to vote (then at once,
//! as Consul prunes when a server joins). Dead servers go in passes, as raft-autopilot's
//! `pruneDeadServers` adjudicates them: a pass is planned from the configuration when it
//! begins — non-voters first, then at most (voters − 1) / 2 voters, and never so many that
//! fewer than `MinQuorum` voters remain — and carried out one change at a time, each removal
//! judged again before it is proposed; the next pass is planned only when this one is done.
//!
//! Why the grace: removing a dead voter never makes the cluster more available — a quorum
//! of the remaining voters is needed either way — while a removed server that comes back
//! votes again only after the stabilization time. A server killed, paused or partitioned
//! for seconds therefore keeps its vote, and a follower's fault never leaves the cluster
//! one fault away from stopping for longer than the fault itself.
//!
//! Pure like the rest of the replica: the clocks are the step's. The health the leader
//! computes is published with the cluster status (`ClusterStatus::autopilot`); followers
//! publish none, and forget their marks and their pass, so a new leader starts judging
//! afresh.

use super::state::Replica;
use super::{AutopilotHealth, ServerHealth};
use crate::raft::{MembershipChange, NodeId, Role};
use crate::store::autopilot::{AutopilotConfig, AutopilotOp};
use crate::store::Command;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// How long a server must have been dead — failed in gossip and out of the leader's reach,
/// without a break — before autopilot's cleanup removes it, when no new server waits to
/// join. Longer than a restart, a pause or a partition an operator would not call a lost
/// server; a new leader starts the count afresh.
pub const DEAD_SERVER_GRACE_MS: u64 = 30_000;

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
    /// Since when (monotonic milliseconds) each dead server has been dead, as this leader
    /// saw it: failed or left in gossip and not heard from within `LastContactThreshold`.
    dead_since: BTreeMap<NodeId, u64>,
    /// The removals of the cleanup pass under way, in the order they are made.
    pass: VecDeque<NodeId>,
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
            self.autopilot.dead_since.clear();
            self.autopilot.pass.clear();
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
            let reachable = last_contact_ms.is_some_and(|ms| ms <= threshold_ms);
            let dead = !leader && matches!(serf_status, "failed" | "left") && !reachable;
            if dead {
                self.autopilot.dead_since.entry(*id).or_insert(now_ms);
            } else {
                self.autopilot.dead_since.remove(id);
            }
            let healthy = serf_status == "alive"
                && reachable
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
                name: self.server_name(*id, &member.name),
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
        self.autopilot
            .dead_since
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

    /// The servers dead long enough to remove now: past the grace, or at once when another
    /// server that gossip says is alive waits to join or to vote, as Consul prunes when a
    /// server joins.
    fn removable_dead_servers(&self) -> Vec<NodeId> {
        let now_ms = self.now.monotonic_ms;
        let replacement_waits = self.servers.values().any(|s| {
            s.alive
                && self
                    .membership
                    .members
                    .get(&s.raft_id)
                    .is_none_or(|m| !m.voter)
        });
        self.autopilot
            .dead_since
            .iter()
            .filter(|(id, since_ms)| {
                self.membership.contains(**id)
                    && (replacement_waits
                        || now_ms.saturating_sub(**since_ms) >= DEAD_SERVER_GRACE_MS)
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// Plans a cleanup pass over `removable` as raft-autopilot adjudicates one: non-voters
    /// first, then voters while fewer than (voters − 1) / 2 of them were taken and at least
    /// `MinQuorum` voters stay.
    pub(super) fn plan_pass(&self, removable: &[NodeId]) -> VecDeque<NodeId> {
        let min_quorum = self.autopilot_config().min_quorum as usize;
        let voters = self.membership.voters().count();
        let mut removals_allowed = voters.saturating_sub(1) / 2;
        let mut voters_left = voters;
        let mut pass = VecDeque::new();
        let is_voter = |id: &NodeId| self.membership.members.get(id).is_some_and(|m| m.voter);
        pass.extend(removable.iter().filter(|id| !is_voter(id)));
        for id in removable.iter().filter(|id| is_voter(id)) {
            if removals_allowed == 0 || voters_left <= min_quorum {
                break;
            }
            removals_allowed -= 1;
            voters_left -= 1;
            pass.push_back(*id);
        }
        debug_assert!(voters_left >= voters - voters.saturating_sub(1) / 2);
        debug_assert!(voters_left >= min_quorum.min(voters));
        pass
    }

    /// With `CleanupDeadServers`, the dead server to remove next, if any: the next of the
    /// pass under way, judged again now; when the pass is done, the first of a new one.
    pub(super) fn dead_server_to_remove(&mut self) -> Option<NodeId> {
        if !self.autopilot_config().cleanup_dead_servers || self.role != Role::Leader {
            self.autopilot.pass.clear();
            return None;
        }
        let removable = self.removable_dead_servers();
        // Removed already, or alive again: no longer part of the pass.
        self.autopilot.pass.retain(|id| removable.contains(id));
        if self.autopilot.pass.is_empty() {
            self.autopilot.pass = self.plan_pass(&removable);
        }
        let next = self.autopilot.pass.front().copied();
        debug_assert!(next.is_none_or(|id| id != self.config.raft.id));
        next
    }
}
