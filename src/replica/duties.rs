//! What the replica does beyond carrying Readys: membership (bootstrap-expect, the leader's
//! reconciliation with gossip, operator requests), the published cluster status, snapshots
//! of the store, and the leader's timers (session TTLs, tombstone reaping).
//!
//! Invariants: only the leader proposes on its own (membership changes, session destroys,
//! tombstone reaps) and a proposal it loses to a leadership change is harmless — the next
//! leader starts fresh timers and reconciles again; at most one snapshot is being written;
//! the status is published only when something in it changed.

use super::state::{refusal, Replica};
use super::{
    ClusterStatus, Effect, OperatorOp, PeerHealth, ProposalResult, RaftServer, ServerInfo,
    TOMBSTONE_GRANULARITY_MS, TOMBSTONE_TTL_MS,
};
use crate::raft::{Member, Membership, MembershipChange, NodeId, RaftError, Role, SnapshotMeta};
use crate::store::acl::AclOp;
use crate::store::command::stamp_entry;
use crate::store::kv::KvOp;
use crate::store::session::{self, SessionOp};
use crate::store::{Command, CommandResult};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Arc;

impl Replica {
    pub(super) fn servers_changed(&mut self, servers: Vec<ServerInfo>) {
        let datacenter = &self.config.datacenter;
        let mut by_id: BTreeMap<NodeId, ServerInfo> = BTreeMap::new();
        for server in servers.into_iter().filter(|s| &s.datacenter == datacenter) {
            // A server restarted under a new name keeps its node ID, and gossip shows the
            // old name failed beside the new one alive until it is reaped: the live one is
            // the server.
            match by_id.get(&server.raft_id) {
                Some(known) if known.alive && !server.alive => {}
                _ => {
                    by_id.insert(server.raft_id, server);
                }
            }
        }
        self.servers = by_id;
        self.update_transport();
        self.maybe_bootstrap_expect();
        self.reconcile_membership();
    }

    pub(super) fn operator(&mut self, request_id: u64, op: OperatorOp) {
        let now = self.now.monotonic_ms;
        let result = match op {
            OperatorOp::RemovePeer { id, address } => {
                match self.find_member(id.as_deref(), address.as_deref()) {
                    Some(target) => self
                        .core
                        .propose_membership_change(now, MembershipChange::Remove { id: target })
                        .map(|_| ())
                        .map_err(|e| refusal(&e)),
                    None => Err(ProposalResult::Applied(CommandResult::Error(format!(
                        "address \"{}\" was not found in the Raft configuration",
                        address.or(id).unwrap_or_default()
                    )))),
                }
            }
            OperatorOp::RenewSession { id } => {
                if self.role != Role::Leader {
                    Err(ProposalResult::NotLeader)
                } else if let Some(session) = session::get(&self.tables, &id) {
                    self.session_timers.reset(session, now);
                    Ok(())
                } else {
                    Err(ProposalResult::Applied(CommandResult::Bool(false)))
                }
            }
            OperatorOp::TransferLeader { id } => {
                let target = match id.as_deref() {
                    Some(id) => match self.find_member(Some(id), None) {
                        Some(target) => Ok(Some(target)),
                        None => Err(ProposalResult::Applied(CommandResult::Error(format!(
                            "cannot find peer {id}"
                        )))),
                    },
                    None => Ok(None),
                };
                target.and_then(|t| {
                    self.core
                        .transfer_leadership(now, t)
                        .map_err(|e| refusal(&e))
                })
            }
        };
        let result = match result {
            Ok(()) => ProposalResult::Applied(CommandResult::Bool(true)),
            Err(result) => result,
        };
        self.answer_now(request_id, result);
    }

    /// The configuration member an operator named by node ID, raft ID (hex), name or
    /// address.
    fn find_member(&self, id: Option<&str>, address: Option<&str>) -> Option<NodeId> {
        self.membership
            .members
            .iter()
            .find_map(|(raft_id, member)| {
                let node_id = self
                    .servers
                    .get(raft_id)
                    .map(|s| s.node_id.as_str())
                    .unwrap_or("");
                let id_matches = id.is_some_and(|id| {
                    id == node_id
                        || id == format!("{raft_id:016x}")
                        || id == member.name
                        || id == self.server_name(*raft_id, &member.name)
                });
                let address_matches = address.is_some_and(|a| a == member.address);
                (id_matches || address_matches).then_some(*raft_id)
            })
    }

    /// Bootstraps a pristine server once `bootstrap_expect` servers expecting the same number
    /// are known, with all of them as voters (Consul's `maybeBootstrap`).
    fn maybe_bootstrap_expect(&mut self) {
        let expect = self.config.bootstrap_expect;
        if expect < 2 || self.core.last_index() > 0 || self.core.term() > 0 {
            return;
        }
        let candidates: Vec<&ServerInfo> = self
            .servers
            .values()
            .filter(|s| s.alive && s.expect == expect)
            .collect();
        if candidates.len() < expect as usize {
            return;
        }
        let mut membership = Membership::default();
        for server in candidates {
            membership.members.insert(
                server.raft_id,
                Member {
                    voter: true,
                    name: server.name.clone(),
                    address: server.rpc_address.clone(),
                },
            );
        }
        match self.core.bootstrap(membership.clone()) {
            Ok(()) => {
                let names: Vec<&str> = membership
                    .members
                    .values()
                    .map(|m| m.name.as_str())
                    .collect();
                let text = format!(
                    "raft: bootstrapped a cluster of {} servers: {}",
                    names.len(),
                    names.join(", ")
                );
                self.log(log::Level::Info, text);
                self.membership = membership;
                self.update_transport();
            }
            Err(e) => self.log(log::Level::Warn, format!("raft: bootstrap skipped: {e}")),
        }
    }

    /// On the leader: bring the Raft configuration in line with the servers gossip knows —
    /// add servers that joined, remove servers that left, and remove dead servers as
    /// autopilot's cleanup allows. One change at a time.
    pub(super) fn reconcile_membership(&mut self) {
        if self.role != Role::Leader
            || self.servers.len() <= 1 && self.membership.members.len() <= 1
        {
            return;
        }
        let Some(change) = self.membership_change_wanted() else {
            return;
        };
        let description = format!("{change:?}");
        match self
            .core
            .propose_membership_change(self.now.monotonic_ms, change)
        {
            Ok(index) => self.log(
                log::Level::Info,
                format!("raft: membership change at index {index}: {description}"),
            ),
            Err(RaftError::MembershipChangePending { .. } | RaftError::LeaderNotReady) => {}
            Err(e) => self.log(
                log::Level::Debug,
                format!("raft: membership change {description} not proposed: {e}"),
            ),
        }
    }

    /// The one change this reconcile makes, most urgent first: a server that left goes; a
    /// dead server goes when autopilot's cleanup allows it; a server gossip found joins as
    /// a non-voter; a non-voter stable for the stabilization time becomes a voter.
    fn membership_change_wanted(&mut self) -> Option<MembershipChange> {
        let local_id = self.config.raft.id;
        let left = self
            .membership
            .members
            .keys()
            .find(|id| **id != local_id && self.servers.get(id).is_some_and(|s| s.left));
        if let Some(id) = left {
            return Some(MembershipChange::Remove { id: *id });
        }
        if let Some(id) = self.dead_server_to_remove() {
            return Some(MembershipChange::Remove { id });
        }
        let joined = self
            .servers
            .values()
            .find(|s| s.alive && !self.membership.contains(s.raft_id));
        if let Some(s) = joined {
            return Some(MembershipChange::AddNonvoter {
                id: s.raft_id,
                name: s.name.clone(),
                address: s.rpc_address.clone(),
            });
        }
        self.promotion_wanted()
    }

    /// Points the transport at every configuration member and every server gossip knows.
    pub(super) fn update_transport(&mut self) {
        let mut peers: BTreeMap<NodeId, String> = self
            .servers
            .values()
            .map(|s| (s.raft_id, s.rpc_address.clone()))
            .collect();
        for (id, member) in &self.membership.members {
            peers.insert(*id, member.address.clone());
        }
        self.effects.push(Effect::Peers(peers));
    }

    /// A server's node name as it is now: this server's from its configuration, another's
    /// as gossip shows it, or the name it joined the Raft configuration with. A server may
    /// restart under a new name with its node ID, as Consul allows, and the configuration
    /// keeps the name it was added with.
    pub(super) fn server_name(&self, raft_id: NodeId, joined_as: &str) -> String {
        if raft_id == self.config.raft.id {
            return self.config.node_name.clone();
        }
        match self.servers.get(&raft_id) {
            Some(server) => server.name.clone(),
            None => joined_as.to_string(),
        }
    }

    pub(super) fn node_id_of(&self, raft_id: NodeId) -> String {
        match self.servers.get(&raft_id) {
            Some(server) => server.node_id.clone(),
            None if raft_id == self.config.raft.id => self.config.node_id.clone(),
            None => format!("{raft_id:016x}"),
        }
    }

    /// Publishes leadership, membership and (with `with_health`) peer health to the shards
    /// when any of it changed.
    pub(super) fn publish_status(&mut self, with_health: bool) {
        let core_status = self.core.status();
        // A new leader serves only once its term's first entry is applied, so that it has
        // seen everything earlier terms committed.
        let serving = self.role == Role::Leader
            && self
                .leader_term_start
                .is_some_and(|start| self.tables.index >= start);
        let leader_member = self.leader.and_then(|id| self.membership.members.get(&id));
        let servers: Vec<RaftServer> = self
            .membership
            .members
            .iter()
            .map(|(id, m)| RaftServer {
                raft_id: *id,
                node_id: self.node_id_of(*id),
                name: self.server_name(*id, &m.name),
                address: m.address.clone(),
                voter: m.voter,
            })
            .collect();
        let now = self.now.monotonic_ms;
        let peer_health = if with_health || self.published_status.peer_health.is_empty() {
            core_status
                .peers
                .iter()
                .map(|p| PeerHealth {
                    raft_id: p.id,
                    match_index: p.match_index,
                    last_contact_ms: p.last_contact.map(|t| now.saturating_sub(t)),
                })
                .collect()
        } else {
            self.published_status.peer_health.clone()
        };
        let status = ClusterStatus {
            is_leader: serving,
            leader_rpc_address: leader_member.map(|m| m.address.clone()).unwrap_or_default(),
            leader_name: self
                .leader
                .zip(leader_member)
                .map(|(id, m)| self.server_name(id, &m.name))
                .unwrap_or_default(),
            leader_raft_id: self.leader,
            term: self.term,
            commit_index: core_status.commit,
            last_index: core_status.last_index,
            membership_index: core_status.membership_index,
            voter_rpc_addresses: self
                .membership
                .members
                .values()
                .filter(|m| m.voter)
                .map(|m| m.address.clone())
                .collect(),
            servers,
            peer_health,
            autopilot: self.autopilot.health.clone(),
        };
        let previous = &self.published_status;
        let changed = status.is_leader != previous.is_leader
            || status.leader_rpc_address != previous.leader_rpc_address
            || status.term != previous.term
            || status.servers != previous.servers
            || (with_health
                && (status.peer_health != previous.peer_health
                    || status.commit_index != previous.commit_index
                    || status.autopilot != previous.autopilot));
        if !changed {
            return;
        }
        let status = Arc::new(status);
        self.published_status = status.clone();
        self.effects.push(Effect::Status(status));
    }

    /// The status last published to the shards.
    pub fn status(&self) -> &Arc<ClusterStatus> {
        &self.published_status
    }

    pub(super) fn maybe_snapshot(&mut self) {
        if self.tables.index >= self.last_snapshot_index + self.config.snapshot_threshold_entries {
            self.start_snapshot();
        }
    }

    /// Asks for the current version to be written as a snapshot; applies continue meanwhile
    /// because the version is immutable.
    pub(super) fn start_snapshot(&mut self) {
        if self.snapshot_in_progress || self.tables.index == 0 {
            return;
        }
        let version = self.tables.clone();
        let Some(meta) = self.core.snapshot_meta(version.index) else {
            return;
        };
        debug_assert_eq!(meta.last_index, version.index);
        self.snapshot_in_progress = true;
        self.effects.push(Effect::WriteSnapshot { meta, version });
    }

    pub(super) fn finish_snapshot(&mut self, meta: SnapshotMeta, data: Bytes) {
        debug_assert!(
            self.snapshot_in_progress,
            "a snapshot finished that was not started"
        );
        self.snapshot_in_progress = false;
        let last_index = meta.last_index;
        // An installed snapshot from the leader may have overtaken this one.
        self.last_snapshot_index = self.last_snapshot_index.max(last_index);
        let through = last_index.saturating_sub(self.config.raft.trailing_entries);
        self.core.snapshot_taken(meta, data);
        self.effects.push(Effect::CompactLog { through });
        self.log(
            log::Level::Debug,
            format!("raft: snapshot at index {last_index} saved"),
        );
    }

    /// The leader reaps KV tombstones older than the TTL, as Consul's tombstone GC does.
    pub(super) fn maybe_reap_tombstones(&mut self) {
        let now = self.now.monotonic_ms;
        if self.role != Role::Leader
            || now.saturating_sub(self.last_tombstone_sample_ms) < TOMBSTONE_GRANULARITY_MS
        {
            return;
        }
        self.last_tombstone_sample_ms = now;
        self.tombstone_samples.push_back((now, self.tables.index));
        let mut reap_up_to = None;
        while let Some(&(at, index)) = self.tombstone_samples.front() {
            if now.saturating_sub(at) < TOMBSTONE_TTL_MS {
                break;
            }
            reap_up_to = Some(index);
            self.tombstone_samples.pop_front();
        }
        let Some(up_to_index) = reap_up_to else {
            return;
        };
        if self
            .tables
            .kv
            .tombstones
            .values()
            .all(|deleted_at| *deleted_at > up_to_index)
        {
            return;
        }
        if let Err(e) = self.propose_internal(&Command::Kv(KvOp::ReapTombstones { up_to_index })) {
            self.log(
                log::Level::Debug,
                format!("raft: tombstone reap not proposed: {e}"),
            );
        }
    }

    /// On taking office with ACLs on, as Consul's leader does: create or upgrade the builtin
    /// policies and the anonymous token, and the `initial_management` token if configured.
    /// Both commands are idempotent, so every new leader proposes them.
    pub(super) fn initialize_acls(&mut self) {
        if !self.config.acl_enabled {
            return;
        }
        let now_unix_ns = self.now.unix_ms as i64 * 1_000_000;
        let initialize = Command::Acl(AclOp::Initialize { now_unix_ns });
        if let Err(e) = self.propose_internal(&initialize) {
            self.log(
                log::Level::Warn,
                format!("acl: initialization not proposed: {e}"),
            );
        }
        if let Some((accessor_id, secret_id)) = self.config.acl_initial_management.clone() {
            let command = Command::Acl(AclOp::InitialManagement {
                accessor_id,
                secret_id,
                now_unix_ns,
            });
            if let Err(e) = self.propose_internal(&command) {
                self.log(
                    log::Level::Warn,
                    format!("acl: initial management token not proposed: {e}"),
                );
            }
        }
    }

    /// On the leader: deletes tokens whose expiration time has passed, in bounded batches.
    pub(super) fn maybe_reap_tokens(&mut self) {
        if self.role != Role::Leader || !self.config.acl_enabled {
            return;
        }
        let now_unix_ns = self.now.unix_ms as i64 * 1_000_000;
        if crate::store::acl::expired_tokens(&self.tables, now_unix_ns, 1).is_empty() {
            return;
        }
        let reap = Command::Acl(AclOp::ReapExpiredTokens {
            now_unix_ns,
            tokens_max: crate::store::acl::apply::REAP_TOKENS_MAX,
        });
        if let Err(e) = self.propose_internal(&reap) {
            self.log(
                log::Level::Debug,
                format!("acl: expired token reap not proposed: {e}"),
            );
        }
    }

    /// Proposes a command the leader itself originates (no client waits for it).
    pub(super) fn propose_internal(&mut self, command: &Command) -> Result<(), RaftError> {
        let payload = Bytes::from(stamp_entry(self.now.unix_ms, &command.encode()));
        self.core
            .propose(self.now.monotonic_ms, payload)
            .map(|_| ())
    }

    /// On the leader: destroys every session whose TTL timer ran out, as Consul's
    /// `invalidateSession` does. A proposal lost to a leadership change is harmless: the
    /// next leader starts fresh timers.
    pub(super) fn expire_sessions(&mut self) {
        if self.role != Role::Leader || self.session_timers.is_empty() {
            return;
        }
        for id in self.session_timers.take_expired(self.now.monotonic_ms) {
            self.log(log::Level::Debug, format!("raft: session {id} TTL expired"));
            let destroy = Command::Session(SessionOp::Destroy { id: id.to_string() });
            if let Err(e) = self.propose_internal(&destroy) {
                self.log(
                    log::Level::Debug,
                    format!("raft: session {id} invalidation not proposed: {e}"),
                );
            }
        }
    }
}
